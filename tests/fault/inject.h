/*
 * Allocation-failure injection for the whole test process (inject.c).
 * SPDX-License-Identifier: Apache-2.0
 *
 * The test executable defines malloc, calloc, realloc, free, aligned_alloc,
 * posix_memalign, memalign, valloc, pvalloc, reallocarray and pthread_create.
 * Each forwards to the next definition (dlsym(RTLD_NEXT): glibc's, or the
 * sanitizer's interceptor), so every allocation of the process goes
 * through here: rsp's (linked statically into the test), liburcu's, libc's
 * own. Each call is a "fault point". While armed, every fault point of every
 * thread is counted, and the n-th one fails (NULL with errno ENOMEM; EAGAIN
 * for pthread_create), once; the others succeed.
 *
 * mmap (and munmap, for the count of bytes still mapped) is interposed too,
 * but is a fault point only after fault_mmap(true): the device's create
 * sweep and test_fault_alloc's create_ckpt turn it on, so failing storage
 * and index mappings are covered; the other sweeps leave it off.
 */
#ifndef RSP_TESTS_FAULT_INJECT_H
#define RSP_TESTS_FAULT_INJECT_H

#include <stdbool.h>
#include <stdint.h>

#define FAULT_MAX_FRAMES 24

/* The fault point that failed. */
typedef struct fault_hit {
    bool fired;
    bool on_arming_thread; /* the thread that called fault_arm */
    const char *what;      /* "malloc", "calloc", ..., "pthread_create" */
    uint64_t size;         /* bytes asked for (0 for pthread_create) */
    int frames;
    void *stack[FAULT_MAX_FRAMES];
} fault_hit;

/* Start counting fault points of every thread; fail the n-th (1-based).
 * n == 0 counts without failing. Not nestable. */
void fault_arm(uint64_t n);
/* Stop counting; returns how many fault points were counted. */
uint64_t fault_disarm(void);
/* What failed during the last armed window (fired false: nothing). */
const fault_hit *fault_last_hit(void);
/* Write the failed fault point's stack to fd, symbolized: ASan's
 * symbolizer in a sanitizer build, addr2line on the executable's frames
 * otherwise. Not while armed (it allocates, and runs addr2line). */
void fault_print_hit(int fd);
/* When a fault point fails, write at once to stderr which one (and its raw
 * stack): if the process then dies, that is the only trace. Off by default;
 * alloc-free. */
void fault_announce(bool on);
/* Sanity checks of the interposer itself: whether it is in the allocation
 * path at all (a malloc while armed with n = 1 fails). */
bool fault_interposer_active(void);
/* Make mmap a fault point (on) or not (off, the default); while on, count
 * the bytes mapped and unmapped through mmap/munmap. */
void fault_mmap(bool on);
/* Bytes mapped (mmap) less bytes unmapped (munmap) while fault_mmap was on:
 * equal before and after a call that leaves no mapping behind. */
int64_t fault_mapped_bytes(void);

#endif
