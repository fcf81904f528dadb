/*
 * The interposed allocator of the fault-injection test (see inject.h).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Why an interposer and not a hook in the library: it also fails liburcu's
 * and libc's allocations (and thread creation), on every thread, which is
 * what running out of memory does; src/ needs no test-only code.
 *
 * How the forwarding finds the real allocator: the executable's definitions
 * come first in the global lookup scope, so they win over libc's and over
 * libasan's interceptors for every caller, shared libraries included.
 * dlsym(RTLD_NEXT) from here returns the next definition in that order:
 * libasan's (libtsan's) interceptor in a sanitizer build (so the sanitizer
 * still sees and checks every block, and LeakSanitizer finds leaks),
 * glibc's otherwise. dlsym may itself allocate
 * (its error state) before the real functions are known: those requests are
 * served from a static arena, which free() and realloc() recognise.
 *
 * This file is compiled with -fno-builtin, so that the compiler cannot turn
 * the forwarding bodies back into calls to the functions they define, and
 * without sanitizer instrumentation: ASan's own start-up allocates through
 * it before ASan's shadow memory exists.
 *
 * Threads a sanitizer is still setting up (before they run their start
 * routine) are not counted: see user_code.
 */
#include "inject.h"

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

typedef void *(*malloc_fn)(size_t);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void (*free_fn)(void *);
typedef void *(*aligned_alloc_fn)(size_t, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*memalign_fn)(size_t, size_t);
typedef void *(*valloc_fn)(size_t);
typedef void *(*reallocarray_fn)(void *, size_t, size_t);
typedef int (*pthread_create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*munmap_fn)(void *, size_t);

static struct {
    malloc_fn malloc;
    calloc_fn calloc;
    realloc_fn realloc;
    free_fn free;
    aligned_alloc_fn aligned_alloc;
    posix_memalign_fn posix_memalign;
    memalign_fn memalign;
    valloc_fn valloc;
    valloc_fn pvalloc;
    reallocarray_fn reallocarray;
    pthread_create_fn pthread_create;
    mmap_fn mmap;
    munmap_fn munmap;
} real;

/* Resolved once, before main (the constructor below, or the first
 * allocation, which comes earlier): the process has one thread then. */
static int resolved;
static __thread int resolving;
/* Set once a thread runs its own code: the main thread from the
 * constructor, every other one from the trampoline of pthread_create.
 * Allocations before that are the runtime's, on a thread being born
 * (ASan's thread start calls pthread_getattr_np, which callocs, and dies
 * if that fails): they are not fault points. */
static __thread int user_code;

/* dlsym's own allocations while resolving: a bump arena, never freed. Each
 * block has a 16-byte header holding its size (for realloc). */
static _Alignas(64) unsigned char boot_arena[64 * 1024];
static size_t boot_used;

static bool is_boot(const void *p)
{
    return (const unsigned char *)p >= boot_arena &&
           (const unsigned char *)p < boot_arena + sizeof boot_arena;
}

static void *boot_alloc(size_t n)
{
    size_t need = (n + 16 + 63) & ~(size_t)63;
    size_t at = __atomic_fetch_add(&boot_used, need, __ATOMIC_RELAXED);
    if (at + need > sizeof boot_arena) {
        static const char msg[] = "inject.c: bootstrap arena exhausted\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        abort();
    }
    unsigned char *p = boot_arena + at;
    memcpy(p, &n, sizeof n);
    return p + 16; /* zeroed: the arena is static and never reused */
}

static void resolve(void)
{
    if (__atomic_load_n(&resolved, __ATOMIC_ACQUIRE))
        return;
    resolving = 1;
    real.malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
    real.calloc = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
    real.realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
    real.free = (free_fn)dlsym(RTLD_NEXT, "free");
    real.aligned_alloc = (aligned_alloc_fn)dlsym(RTLD_NEXT, "aligned_alloc");
    real.posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
    real.memalign = (memalign_fn)dlsym(RTLD_NEXT, "memalign");
    real.valloc = (valloc_fn)dlsym(RTLD_NEXT, "valloc");
    real.pvalloc = (valloc_fn)dlsym(RTLD_NEXT, "pvalloc");
    real.reallocarray = (reallocarray_fn)dlsym(RTLD_NEXT, "reallocarray");
    real.pthread_create = (pthread_create_fn)dlsym(RTLD_NEXT, "pthread_create");
    real.mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
    real.munmap = (munmap_fn)dlsym(RTLD_NEXT, "munmap");
    resolving = 0;
    if (!real.malloc || !real.calloc || !real.realloc || !real.free || !real.pthread_create ||
        !real.mmap || !real.munmap) {
        static const char msg[] = "inject.c: dlsym(RTLD_NEXT) found no allocator\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        abort();
    }
    __atomic_store_n(&resolved, 1, __ATOMIC_RELEASE);
}

__attribute__((constructor(101))) static void inject_init(void)
{
    resolve();
    user_code = 1;
    /* backtrace() loads libgcc's unwinder on first use (dlopen, malloc):
     * do it now, so that recording a fault point allocates nothing. */
    void *frames[4];
    (void)backtrace(frames, 4);
}

/* --- counting ------------------------------------------------------------ */

static int armed;        /* seq_cst: see fault_disarm */
static int hooks_active; /* threads between their armed check and their count */
static uint64_t target;  /* the fault point to fail, 1-based; 0: none */
static uint64_t counted;
static pthread_t arming_thread;
static fault_hit hit;
static __thread int in_hook;

/* Say on stderr which fault point fails, with its raw stack, at once: if
 * the process dies of it (an abort, a crash), this is all that is left.
 * write() and backtrace_symbols_fd() allocate nothing. */
static bool announcing;

void fault_announce(bool on)
{
    announcing = on;
}

static void announce(uint64_t k)
{
    if (!announcing)
        return;
    char line[160];
    int len =
        snprintf(line, sizeof line, "inject: fault point #%llu fails: %s(%llu) on %s thread\n",
                 (unsigned long long)k, hit.what, (unsigned long long)hit.size,
                 hit.on_arming_thread ? "the calling" : "another");
    if (len > 0) {
        ssize_t w = write(2, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
        (void)w;
    }
    backtrace_symbols_fd(hit.stack, hit.frames, 2);
}

/* True: fail this call. Every allocation and thread creation of the
 * process passes here. */
static bool fault_point(const char *what, uint64_t size)
{
    if (in_hook || !user_code)
        return false;
    /* Dekker with fault_disarm: increment, then look at `armed`. */
    __atomic_add_fetch(&hooks_active, 1, __ATOMIC_SEQ_CST);
    bool fail = false;
    if (__atomic_load_n(&armed, __ATOMIC_SEQ_CST)) {
        uint64_t k = __atomic_add_fetch(&counted, 1, __ATOMIC_SEQ_CST);
        if (k == __atomic_load_n(&target, __ATOMIC_RELAXED)) {
            /* Only one call can draw k == target: hit is ours alone. */
            in_hook = 1;
            hit.what = what;
            hit.size = size;
            hit.on_arming_thread = pthread_equal(pthread_self(), arming_thread);
            hit.frames = backtrace(hit.stack, FAULT_MAX_FRAMES);
            hit.fired = true;
            announce(k);
            in_hook = 0;
            fail = true;
        }
    }
    __atomic_sub_fetch(&hooks_active, 1, __ATOMIC_SEQ_CST);
    return fail;
}

void fault_arm(uint64_t n)
{
    resolve();
    memset(&hit, 0, sizeof hit);
    arming_thread = pthread_self();
    __atomic_store_n(&counted, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&target, n, __ATOMIC_SEQ_CST);
    __atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST);
}

uint64_t fault_disarm(void)
{
    __atomic_store_n(&armed, 0, __ATOMIC_SEQ_CST);
    /* A thread that saw armed == 1 may still be counting (or recording a
     * hit): wait for it. One that increments hooks_active after this loop
     * saw 0 also sees armed == 0 (both sides are seq_cst). */
    while (__atomic_load_n(&hooks_active, __ATOMIC_SEQ_CST) != 0)
        sched_yield();
    return __atomic_load_n(&counted, __ATOMIC_SEQ_CST);
}

const fault_hit *fault_last_hit(void)
{
    return &hit;
}

/* ASan's symbolizer (file:line), when the sanitizer runtime is linked. */
extern void __sanitizer_symbolize_pc(void *pc, const char *fmt, char *out_buf, size_t out_buf_size)
    __attribute__((weak));

void fault_print_hit(int fd)
{
    if (!hit.fired)
        return;
    static const char head[] = "inject: the failed fault point, symbolized:\n";
    ssize_t w = write(fd, head, sizeof head - 1);
    if (__sanitizer_symbolize_pc) {
        for (int i = 0; i < hit.frames; i++) {
            char line[512], num[16];
            /* A return address points after the call: step back into it. */
            __sanitizer_symbolize_pc((char *)hit.stack[i] - 1, "%p %F %L", line, sizeof line);
            int n = snprintf(num, sizeof num, "    #%d ", i);
            w = write(fd, num, n > 0 ? (size_t)n : 0);
            w = write(fd, line, strnlen(line, sizeof line));
            w = write(fd, "\n", 1);
        }
        (void)w;
        return;
    }
    /* No sanitizer runtime: addr2line on this executable's frames (static
     * functions have no dynamic symbol for backtrace_symbols to name). */
    Dl_info self;
    if (!dladdr((void *)fault_print_hit, &self) || !self.dli_fbase)
        return;
    char cmd[2048];
    int len = snprintf(cmd, sizeof cmd, "addr2line -f -i -p -C -e /proc/%d/exe", (int)getpid());
    int frames = 0;
    for (int i = 0; i < hit.frames && len > 0 && (size_t)len < sizeof cmd - 24; i++) {
        Dl_info info;
        if (!dladdr(hit.stack[i], &info) || info.dli_fbase != self.dli_fbase)
            continue;
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %#lx",
                        (unsigned long)((char *)hit.stack[i] - (char *)self.dli_fbase - 1));
        frames++;
    }
    if (frames == 0 || len <= 0 || (size_t)len >= sizeof cmd - 16)
        return;
    snprintf(cmd + len, sizeof cmd - (size_t)len, " 1>&%d 2>&%d", fd, fd);
    fflush(NULL);
    (void)!system(cmd);
    (void)w;
}

/* fault_mmap: whether mmap is a fault point, and the bytes mapped and not
 * unmapped since it was turned on. */
static int mmap_points;
static int64_t mapped_bytes;

void fault_mmap(bool on)
{
    __atomic_store_n(&mmap_points, on ? 1 : 0, __ATOMIC_SEQ_CST);
}

int64_t fault_mapped_bytes(void)
{
    return __atomic_load_n(&mapped_bytes, __ATOMIC_SEQ_CST);
}

bool fault_interposer_active(void)
{
    void *(*volatile m)(size_t) = malloc;
    fault_arm(1);
    void *p = m(24);
    fault_disarm();
    bool active = p == NULL && hit.fired;
    free(p);
    return active;
}

/* --- the interposed functions ----------------------------------------------- */

void *malloc(size_t n)
{
    if (!resolved) {
        if (resolving)
            return boot_alloc(n);
        resolve();
    }
    if (fault_point("malloc", n)) {
        errno = ENOMEM;
        return NULL;
    }
    return real.malloc(n);
}

void *calloc(size_t n, size_t size)
{
    if (!resolved) {
        if (resolving)
            return size && n > SIZE_MAX / size ? NULL : boot_alloc(n * size);
        resolve();
    }
    if (fault_point("calloc", (uint64_t)n * size)) {
        errno = ENOMEM;
        return NULL;
    }
    return real.calloc(n, size);
}

void free(void *p)
{
    if (!p || is_boot(p))
        return;
    if (!resolved)
        resolve();
    real.free(p);
}

void *realloc(void *p, size_t n)
{
    if (!resolved) {
        if (resolving)
            return boot_alloc(n); /* dlsym never reallocs; be safe anyway */
        resolve();
    }
    if (p && is_boot(p)) {
        size_t old;
        memcpy(&old, (unsigned char *)p - 16, sizeof old);
        void *q = malloc(n);
        if (q)
            memcpy(q, p, old < n ? old : n);
        return q;
    }
    /* realloc(p, 0) frees: not an allocation that can fail. */
    if (!(p && n == 0) && fault_point("realloc", n)) {
        errno = ENOMEM;
        return NULL;
    }
    return real.realloc(p, n);
}

void *reallocarray(void *p, size_t n, size_t size)
{
    if (!resolved)
        resolve();
    if (!(p && (n == 0 || size == 0)) && fault_point("reallocarray", (uint64_t)n * size)) {
        errno = ENOMEM;
        return NULL;
    }
    return real.reallocarray(p, n, size);
}

void *aligned_alloc(size_t align, size_t n)
{
    if (!resolved)
        resolve();
    if (fault_point("aligned_alloc", n)) {
        errno = ENOMEM;
        return NULL;
    }
    return real.aligned_alloc(align, n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (!resolved)
        resolve();
    if (fault_point("posix_memalign", n))
        return ENOMEM;
    return real.posix_memalign(out, align, n);
}

void *memalign(size_t align, size_t n)
{
    if (!resolved)
        resolve();
    if (fault_point("memalign", n)) {
        errno = ENOMEM;
        return NULL;
    }
    return real.memalign(align, n);
}

void *valloc(size_t n)
{
    if (!resolved)
        resolve();
    if (fault_point("valloc", n)) {
        errno = ENOMEM;
        return NULL;
    }
    return real.valloc(n);
}

void *pvalloc(size_t n)
{
    if (!resolved)
        resolve();
    if (fault_point("pvalloc", n)) {
        errno = ENOMEM;
        return NULL;
    }
    return real.pvalloc(n);
}

typedef struct trampoline {
    void *(*start)(void *);
    void *arg;
} trampoline;

static void *trampoline_main(void *p)
{
    trampoline t = *(trampoline *)p;
    real.free(p);
    user_code = 1;
    return t.start(t.arg);
}

/* pthread_create fails as it does when the process is out of memory or
 * threads: EAGAIN, nothing started. The thread starts in a trampoline
 * that marks it as running its own code (user_code). */
int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    if (!resolved)
        resolve();
    if (fault_point("pthread_create", 0))
        return EAGAIN;
    trampoline *t = real.malloc(sizeof *t); /* the test's, not a fault point */
    if (!t)
        return EAGAIN;
    t->start = start;
    t->arg = arg;
    int rc = real.pthread_create(thread, attr, trampoline_main, t);
    if (rc != 0)
        real.free(t);
    return rc;
}

/* mmap is a fault point only while fault_mmap is on (see inject.h). Calls
 * made while the real functions are being resolved go to the system call
 * directly. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (!resolved) {
        if (resolving)
            return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
        resolve();
    }
    const bool counted = __atomic_load_n(&mmap_points, __ATOMIC_SEQ_CST) != 0;
    if (counted && fault_point("mmap", len)) {
        errno = ENOMEM;
        return MAP_FAILED;
    }
    void *p = real.mmap(addr, len, prot, flags, fd, off);
    if (counted && p != MAP_FAILED)
        __atomic_add_fetch(&mapped_bytes, (int64_t)len, __ATOMIC_SEQ_CST);
    return p;
}

int munmap(void *addr, size_t len)
{
    if (!resolved) {
        if (resolving)
            return (int)syscall(SYS_munmap, addr, len);
        resolve();
    }
    int rc = real.munmap(addr, len);
    if (rc == 0 && __atomic_load_n(&mmap_points, __ATOMIC_SEQ_CST))
        __atomic_sub_fetch(&mapped_bytes, (int64_t)len, __ATOMIC_SEQ_CST);
    return rc;
}
