/*
 * Internal: every atomic, fence and futex of the library goes through here,
 * so each ordering point is easy to find. Built on the compiler's __atomic
 * builtins (gcc, clang), which ThreadSanitizer instruments and models, and
 * on the Linux futex syscall. Portable to every 64-bit Linux target of gcc
 * and clang (x86-64, aarch64: `aarch64-linux-gnu-gcc -std=c11` builds it).
 * Needs _GNU_SOURCE (syscall, clock_gettime), which the build defines.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Every function orders exactly what its name says, in the C11 memory
 * model, and nothing more:
 *
 *   relaxed   atomic (never torn, never a data race), no ordering at all.
 *   acquire   a load: no later load or store of this thread moves before
 *             it. If it reads a value written by a release operation (or
 *             by any RMW in that operation's release sequence), everything
 *             the writer did before that release is visible after it.
 *   release   a store/RMW: no earlier load or store of this thread moves
 *             after it. The writing half of the pair above.
 *   acq_rel   an RMW that is both: earlier accesses stay before it, later
 *             ones after it; it synchronises with the releases it reads
 *             and with the acquires that read it.
 *   seq_cst   acq_rel, plus one total order over all seq_cst operations.
 *             That is what a store->load ("Dekker", lost wake-up) protocol
 *             needs: "I announce (RMW), then look (load)" against "it
 *             publishes (RMW), then looks (load)". Both RMWs AND both loads
 *             must be seq_cst (rsp__load_seq_cst_*); a seq_cst RMW does NOT
 *             order a later relaxed or acquire load on a weakly ordered CPU
 *             (aarch64: a plain LDR may be satisfied before the RMW's
 *             store is visible to other CPUs). Where the accesses on one
 *             side are not ours (a liburcu queue check, a ck_ring index),
 *             use rsp__fence_full instead.
 *
 * Why this file changed (docs/ordering.md, "What changed"): it was built on
 * Concurrency Kit's ck_pr, and its "full" RMWs were ck_pr_fence_atomic +
 * RMW + ck_pr_fence_atomic_load. ck_pr_fence_atomic orders atomic
 * operations only (aarch64: DMB ISHST, a store barrier), so a plain load
 * before a reference-count decrement was not ordered before it: a reader's
 * last read of a ticket reply, a plan or a host fence could be satisfied
 * after another thread had seen the count reach zero and freed the object.
 *
 * Convention at each use site: name the pair (T3, X1, ...) and its partner
 * ("T3: pairs with ..."), and say why a relaxed access is enough.
 */
#ifndef RSP_UTIL_SYNC_H
#define RSP_UTIL_SYNC_H

#include <limits.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Loads and stores                                                          */
/* ------------------------------------------------------------------------ */

/* Relaxed loads/stores: atomic, no ordering. Gauges, counters with a single
 * writer, hints that a later ordered access re-checks. */
static inline uint32_t rsp__load_relaxed_u32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline uint64_t rsp__load_relaxed_u64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline void *rsp__load_relaxed_ptr(void *const *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}
static inline void rsp__store_relaxed_u32(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline void rsp__store_relaxed_u64(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
static inline void rsp__store_relaxed_ptr(void **p, void *v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/* Acquire load: later loads and stores are not reordered before it; pairs
 * with a release store or release/acq_rel/seq_cst RMW of the same word. */
static inline uint32_t rsp__load_acquire_u32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline uint64_t rsp__load_acquire_u64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void *rsp__load_acquire_ptr(void *const *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

/* Release store: earlier loads and stores are not reordered after it;
 * pairs with an acquire load of the same word. */
static inline void rsp__store_release_u32(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline void rsp__store_release_u64(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline void rsp__store_release_ptr(void **p, void *v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Seq_cst load: an acquire load that also takes part in the single total
 * order of seq_cst operations. The "look" half of a store->load protocol
 * whose "announce" half is a seq_cst RMW (see the top of this file). Costs
 * a plain load on x86-64, LDAR on aarch64. */
static inline uint32_t rsp__load_seq_cst_u32(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
static inline uint64_t rsp__load_seq_cst_u64(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

/* ------------------------------------------------------------------------ */
/* Read-modify-write                                                         */
/* ------------------------------------------------------------------------ */

/*
 * Each RMW is atomic whatever its order (no increment is ever lost); the
 * suffix says what it orders around it:
 *   _relaxed  nothing: counts nobody derives a hand-over from (a reference
 *             taken while holding one, a gauge).
 *   _release  earlier accesses before it: publishing by an RMW (a reply
 *             by a state swap, an epoch bump), or giving something up (the
 *             last access to an object before the count another thread
 *             waits on before freeing it).
 *   _acq_rel  both ways: a reference-count decrement that may free (this
 *             side's accesses happen before whoever frees; the freer's
 *             free happens after every other side's accesses).
 *   _seq_cst  acq_rel plus the total order: the "announce" of a
 *             store->load protocol (pair it with rsp__load_seq_cst_*).
 * Fetch-add and swap return the old value; CAS returns whether it stored.
 * A failed CAS writes nothing: it is a load, acquire for _acq_rel, relaxed
 * for _release, of the suffix's order otherwise.
 */
#define RSP__RMW_FAMILY(sfx, order)                                                                \
    static inline uint32_t rsp__fetch_add_##sfx##_u32(uint32_t *p, uint32_t d)                     \
    {                                                                                              \
        return __atomic_fetch_add(p, d, order);                                                    \
    }                                                                                              \
    static inline uint64_t rsp__fetch_add_##sfx##_u64(uint64_t *p, uint64_t d)                     \
    {                                                                                              \
        return __atomic_fetch_add(p, d, order);                                                    \
    }                                                                                              \
    static inline uint32_t rsp__swap_##sfx##_u32(uint32_t *p, uint32_t v)                          \
    {                                                                                              \
        return __atomic_exchange_n(p, v, order);                                                   \
    }                                                                                              \
    static inline _Bool rsp__cas_##sfx##_u32(uint32_t *p, uint32_t expect, uint32_t desired)       \
    {                                                                                              \
        return __atomic_compare_exchange_n(p, &expect, desired, 0, order,                          \
                                           order == __ATOMIC_ACQ_REL   ? __ATOMIC_ACQUIRE          \
                                           : order == __ATOMIC_RELEASE ? __ATOMIC_RELAXED          \
                                                                       : order);                   \
    }

RSP__RMW_FAMILY(relaxed, __ATOMIC_RELAXED)
RSP__RMW_FAMILY(release, __ATOMIC_RELEASE)
RSP__RMW_FAMILY(acq_rel, __ATOMIC_ACQ_REL)
RSP__RMW_FAMILY(seq_cst, __ATOMIC_SEQ_CST)
#undef RSP__RMW_FAMILY

/* The unsuffixed names are the seq_cst ones (the strongest RMW order):
 * kept so code written before the orders were made explicit still gets at
 * least acquire-release. New code names its order. Note what seq_cst does
 * not give: a later relaxed/acquire load may still pass it (see the top). */
#define rsp__fetch_add_u32 rsp__fetch_add_seq_cst_u32
#define rsp__fetch_add_u64 rsp__fetch_add_seq_cst_u64
#define rsp__swap_u32 rsp__swap_seq_cst_u32
#define rsp__cas_u32 rsp__cas_seq_cst_u32

/* Relaxed counters (statistics with several writers): atomic, unordered on
 * purpose. */
static inline void rsp__count_add_u64(uint64_t *p, uint64_t d)
{
    (void)__atomic_fetch_add(p, d, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------ */
/* Fences                                                                    */
/* ------------------------------------------------------------------------ */

/* Full fence (seq_cst): orders every earlier load and store of this thread
 * before every later one, store->load included, whatever the accesses are
 * (ours, liburcu's, Concurrency Kit's inline assembly). The futex sleep
 * protocols (F1/F2, HS1/HS2) need exactly this: MFENCE on x86-64, DMB ISH
 * on aarch64. ThreadSanitizer does not derive happens-before from fences;
 * none of our data hand-overs relies on one. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
/* gcc >= 12 warns (-Wtsan) that TSan does not model fences. We know: no
 * data hand-over here relies on a fence, and the fence stays a real one
 * under TSan (its runtime runs a full barrier). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
static inline void rsp__fence_full(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic pop
#endif

/* Spin-wait hint: PAUSE on x86, YIELD on aarch64, a compiler barrier
 * elsewhere. Orders nothing. */
static inline void rsp__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* ------------------------------------------------------------------------ */
/* Futex and clock                                                           */
/* ------------------------------------------------------------------------ */

/* Futex on a 32-bit word (process-private). The kernel compares *word with
 * expect under its own lock: a wake between our last check and the sleep
 * makes the wait return at once (the futex protocols rely on that, not on
 * any ordering of these calls). */
static inline long rsp__futex_wait(uint32_t *word, uint32_t expect, const struct timespec *rel)
{
    return syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expect, rel, NULL, 0);
}
static inline long rsp__futex_wake(uint32_t *word, int n)
{
    return syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}
#define rsp__futex_wake_all(word) rsp__futex_wake((word), INT_MAX)

#endif
