/*
 * Internal: every atomic, fence and futex of the library goes through here,
 * so each ordering point is easy to find. Built on Concurrency Kit's ck_pr
 * (fences named by intent) and the Linux futex syscall.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Convention at each use site: name the partner of every acquire/release
 * ("R1: pairs with A1 in ..."), and say why a relaxed access is enough.
 */
#ifndef RSP_UTIL_SYNC_H
#define RSP_UTIL_SYNC_H

#include <ck_pr.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Relaxed loads/stores: atomic, no ordering. */
#define rsp__load_relaxed_u32(p) ck_pr_load_32(p)
#define rsp__load_relaxed_u64(p) ck_pr_load_64(p)
#define rsp__store_relaxed_u32(p, v) ck_pr_store_32((p), (v))
#define rsp__store_relaxed_u64(p, v) ck_pr_store_64((p), (v))
#define rsp__load_relaxed_ptr(p) ck_pr_load_ptr(p)
#define rsp__store_relaxed_ptr(p, v) ck_pr_store_ptr((p), (v))

/* Acquire load: later accesses are not reordered before it. */
static inline uint32_t rsp__load_acquire_u32(const uint32_t *p)
{
    uint32_t v = ck_pr_load_32(p);
    ck_pr_fence_acquire();
    return v;
}
static inline uint64_t rsp__load_acquire_u64(const uint64_t *p)
{
    uint64_t v = ck_pr_load_64(p);
    ck_pr_fence_acquire();
    return v;
}
static inline void *rsp__load_acquire_ptr(void *const *p)
{
    void *v = ck_pr_load_ptr((void **)p);
    ck_pr_fence_acquire();
    return v;
}

/* Release store: earlier accesses are not reordered after it. */
static inline void rsp__store_release_u32(uint32_t *p, uint32_t v)
{
    ck_pr_fence_release();
    ck_pr_store_32(p, v);
}
static inline void rsp__store_release_u64(uint64_t *p, uint64_t v)
{
    ck_pr_fence_release();
    ck_pr_store_64(p, v);
}
static inline void rsp__store_release_ptr(void **p, void *v)
{
    ck_pr_fence_release();
    ck_pr_store_ptr(p, v);
}

/* Read-modify-write with full ordering (ck_pr RMWs are full barriers on x86
 * and fenced elsewhere by these wrappers). Return the old value. */
static inline uint32_t rsp__fetch_add_u32(uint32_t *p, uint32_t d)
{
    ck_pr_fence_atomic();
    uint32_t v = ck_pr_faa_32(p, d);
    ck_pr_fence_atomic_load();
    return v;
}
static inline uint64_t rsp__fetch_add_u64(uint64_t *p, uint64_t d)
{
    ck_pr_fence_atomic();
    uint64_t v = ck_pr_faa_64(p, d);
    ck_pr_fence_atomic_load();
    return v;
}
static inline uint32_t rsp__swap_u32(uint32_t *p, uint32_t v)
{
    ck_pr_fence_atomic();
    uint32_t old = ck_pr_fas_32(p, v);
    ck_pr_fence_atomic_load();
    return old;
}
static inline _Bool rsp__cas_u32(uint32_t *p, uint32_t expect, uint32_t desired)
{
    ck_pr_fence_atomic();
    _Bool ok = ck_pr_cas_32(p, expect, desired);
    ck_pr_fence_atomic_load();
    return ok;
}

/* Relaxed counters (statistics): atomic, unordered on purpose. */
#define rsp__count_add_u64(p, d) ck_pr_add_64((p), (d))

/* Full fence: orders every earlier load/store before every later one
 * (the store-load order the futex sleep protocol needs). */
#define rsp__fence_full() ck_pr_fence_memory()
#define rsp__cpu_relax() ck_pr_stall()

/* Futex on a 32-bit word (process-private). */
static inline long rsp__futex_wait(uint32_t *word, uint32_t expect, const struct timespec *rel)
{
    return syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expect, rel, NULL, 0);
}
static inline long rsp__futex_wake(uint32_t *word, int n)
{
    return syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
#define rsp__futex_wake_all(word) rsp__futex_wake((word), INT_MAX)

/* Monotonic clock in ns. */
static inline uint64_t rsp__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
