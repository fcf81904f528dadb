/*
 * rsp_host_fence: the host device's event, a monotonic 64-bit timeline with
 * futex wake-up, reference counted. Any thread. Pairs HV1 (signal), HW1/HW2
 * and RC1/RC2 have both ends here; HV2 also in rsp__fence_reached
 * (host_impl.h). SPDX-License-Identifier: Apache-2.0
 */
#include "host_impl.h"

#include "util/error.h"
#include "util/sync.h"
#include "util/time.h"

#include <pthread.h>
#include <stdlib.h>

rsp_status rsp__fence_init(struct rsp_host_fence *f)
{
    f->magic = FENCE_MAGIC;
    f->value = 0;
    f->seq = 0;
    f->waiters = 0;
    f->refs = 1;
    return pthread_mutex_init(&f->lock, NULL) == 0 ? RSP_OK : RSP_ENOMEM;
}

static void fence_signal(struct rsp_host_fence *f, uint64_t value)
{
    bool raised = false;
    pthread_mutex_lock(&f->lock);
    /* Relaxed: `value` only changes under this lock. */
    if (value > rsp__load_relaxed_u64(&f->value)) {
        /* HV1: publishes everything written before this signal; pairs with HV2. */
        rsp__store_release_u64(&f->value, value);
        /* HW2: pairs with HW1 in fence_wait. Seq_cst RMW (a release too: a
         * waiter whose snapshot of `seq` reads it sees `value`), then the
         * seq_cst load of `waiters` below (store->load). */
        rsp__fetch_add_seq_cst_u32(&f->seq, 1);
        raised = true;
    }
    pthread_mutex_unlock(&f->lock);
    /* HW2: seq_cst, after the seq_cst bump: a waiter counted after this load
     * snapshots `seq` after the bump (the seq_cst order) and sees the raise. */
    if (raised && rsp__load_seq_cst_u32(&f->waiters) != 0)
        rsp__futex_wake_all(&f->seq);
}

static rsp_status fence_wait(struct rsp_host_fence *f, uint64_t value, uint64_t timeout_ns)
{
    if (rsp__fence_reached(f, value))
        return RSP_OK;
    if (timeout_ns == 0)
        return RSP_ETIMEDOUT;
    for (int i = 0; i < HOST_SPIN; i++) {
        rsp__cpu_relax();
        if (rsp__fence_reached(f, value))
            return RSP_OK;
    }
    uint64_t deadline = rsp__deadline(timeout_ns);
    rsp_status st = RSP_OK;
    /* HW1: pairs with HW2 in fence_signal: seq_cst RMW, then the seq_cst
     * load of `seq` below (store->load). */
    rsp__fetch_add_seq_cst_u32(&f->waiters, 1);
    for (;;) {
        /* HW1: seq_cst (so also acquire): the snapshot is taken before
         * `value` is re-read, so a raise after the re-read changes `seq` and
         * the futex refuses to sleep on the stale snapshot; and a snapshot
         * that reads a bump sees that raise's value. */
        uint32_t seq = rsp__load_seq_cst_u32(&f->seq);
        if (rsp__fence_reached(f, value))
            break;
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel)) {
            st = RSP_ETIMEDOUT;
            break;
        }
        rsp__futex_wait(&f->seq, seq, rel);
    }
    /* Relaxed: a stale count only costs a signaller a spare wake. */
    rsp__fetch_add_relaxed_u32(&f->waiters, (uint32_t)-1);
    return st;
}

rsp_status rsp__fence_create(rsp_host_fence **out, rsp_error *err)
{
    struct rsp_host_fence *f = malloc(sizeof *f);
    if (!f)
        return rsp__fail(err, RSP_ENOMEM, "rsp_host_fence_create: out of memory");
    if (rsp__fence_init(f) != RSP_OK) {
        free(f);
        return rsp__fail(err, RSP_ENOMEM, "rsp_host_fence_create: cannot initialise its lock");
    }
    *out = f;
    return RSP_OK;
}

bool rsp__fence_valid(const rsp_host_fence *f)
{
    return f && f->magic == FENCE_MAGIC;
}

void rsp__fence_ref(rsp_host_fence *f)
{
    /* Relaxed: the caller already holds a reference (every drop is acq_rel,
     * RC1/RC2). */
    rsp__fetch_add_relaxed_u32(&f->refs, 1);
}

void rsp__fence_unref(rsp_host_fence *f)
{
    /* RC1: acq_rel RMW; its release half orders every use of f by this
     * thread before the decrement. Pairs with RC2 in whichever thread drops
     * the last one. */
    if (rsp__fetch_add_acq_rel_u32(&f->refs, UINT32_MAX) != 1)
        return;
    /* RC2: the RMW saw the last reference; its acquire half orders the free
     * after RC1 of every other holder, so nobody touches f any more. */
    f->magic = FENCE_DEAD; /* a later use of the freed handle may still see it */
    pthread_mutex_destroy(&f->lock);
    free(f);
}

uint32_t rsp__fence_refs(const rsp_host_fence *f)
{
    return rsp__load_relaxed_u32((uint32_t *)&f->refs);
}

void rsp__fence_signal(rsp_host_fence *f, uint64_t value)
{
    fence_signal(f, value);
}

uint64_t rsp__fence_value(const rsp_host_fence *f)
{
    return rsp__load_acquire_u64(&f->value); /* HV2 */
}

rsp_status rsp__fence_wait(const rsp_host_fence *f, uint64_t value, uint64_t timeout_ns)
{
    /* The futex and the waiter count need a writable word; the timeline
     * itself is only read. */
    return fence_wait((struct rsp_host_fence *)f, value, timeout_ns);
}
