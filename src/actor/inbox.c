/*
 * The actor's inbox: credits (C1, O2), posting (I1, F2, S1), close (S2),
 * the gauges.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "actor_impl.h"

#include <stdlib.h>

#include "util/error.h"
#include "util/hb.h"

/* O2: an ordered post whose number is the one the owner waits for may go
 * without a credit (the credits may all be held by tickets waiting for
 * it). Seq_cst load, after the announce (C1) on the waiting path: pairs
 * with O1 in release_held (seq_cst RMW of next_seq, then seq_cst load of
 * credit_waiters): either we see the new number or the owner sees us
 * waiting and moves the epoch. */
static bool owner_waits_for(rsp__actor *a, uint64_t seq)
{
    return seq != 0 && a->held && seq == rsp__load_seq_cst_u64(&a->next_seq);
}

/* Take one credit, waiting up to timeout_ns; *credited says whether one
 * was taken (false: O2's pass, or a failure). */
__attribute__((noinline)) static rsp_status
take_credit_slow(rsp__actor *a, uint64_t seq, uint64_t timeout_ns, bool *credited, rsp_error *err)
{
    *credited = false;
    bool waiting = false;
    uint64_t deadline = 0;
    rsp_status st = RSP_OK;
    for (;;) {
        /* Snapshot the epoch before looking at credits: a give-back after
         * this load changes the epoch, so the futex wait below returns. */
        uint32_t epoch = rsp__load_acquire_u32(&a->credit_epoch); /* C2 */
        /* C1: the re-check after the announce below; seq_cst, pairs with
         * C2's seq_cst increment (store->load on both sides). */
        uint32_t c = rsp__load_seq_cst_u32(&a->credits);
        while (c > 0) {
            /* Relaxed: a credit carries no data (the message goes through
             * I1), only a count. */
            if (rsp__cas_relaxed_u32(&a->credits, c, c - 1)) {
                *credited = true;
                goto out;
            }
            c = rsp__load_relaxed_u32(&a->credits);
        }
        if (owner_waits_for(a, seq))
            goto out; /* O2 */
        if (rsp__load_relaxed_u32(&a->closed)) {
            st = rsp__fail(err, RSP_ESHUTDOWN, "the pool is shutting down: post refused");
            goto out;
        }
        if (timeout_ns == 0) {
            st = rsp__fail(err, RSP_EFULL, "inbox full (%u messages queued)", a->capacity);
            goto out;
        }
        if (!waiting) {
            /* C1: pairs with C2. Announce (seq_cst), then re-check credits
             * above (seq_cst load). */
            rsp__fetch_add_seq_cst_u32(&a->credit_waiters, 1);
            waiting = true;
            deadline = rsp__deadline(timeout_ns);
            continue;
        }
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel)) {
            st = rsp__fail(err, RSP_ETIMEDOUT, "inbox full (%u messages queued) until the timeout",
                           a->capacity);
            goto out;
        }
        rsp__futex_wait(&a->credit_epoch, epoch, rel);
    }
out:
    if (waiting) /* relaxed: a stale count only costs the owner a spare wake */
        RSP__MUST(rsp__fetch_add_relaxed_u32(&a->credit_waiters, UINT32_MAX) != 0);
    return st;
}

/* Take one credit (above), its usual case inline: a credit is free now.
 * The same C1 loads as the slow path's first round; the slow path starts
 * over (its epoch snapshot first) when none is. */
static inline rsp_status take_credit(rsp__actor *a, uint64_t seq, uint64_t timeout_ns,
                                     bool *credited, rsp_error *err)
{
    uint32_t c = rsp__load_seq_cst_u32(&a->credits); /* C1 (see take_credit_slow) */
    if (c > 0 && rsp__cas_relaxed_u32(&a->credits, c, c - 1)) {
        *credited = true;
        return RSP_OK;
    }
    return take_credit_slow(a, seq, timeout_ns, credited, err);
}

/* Returns whether the owner had announced sleep (woken now, or by the
 * caller that holds its role: rsp__actor_run_lent). */
RSP__HOT bool enqueue_and_wake(rsp__actor *a, rsp_ticket *t)
{
    rsp__hb_release(t); /* I1 (TSan mirror: liburcu is not instrumented) */
    /* I1: cds_wfcq_enqueue issues a full barrier before linking the node,
     * so the ticket's contents are visible to the owner that dequeues it. */
    cds_wfcq_enqueue(&a->head, &a->tail, &t->node);
    /* F2: pairs with F1 in owner_idle. Orders the enqueue's stores (tail,
     * link) before the load of `sleeping`: either the owner's re-check
     * sees our node, or we see its announcement and wake it. */
    rsp__fence_full();
    const uint32_t s = rsp__load_relaxed_u32(&a->sleeping);
    if (s == RSP__OWNER_PARKED) {
        /* K3's middle: acq_rel, passing the last holder's K2 on to the
         * owner's acquire load (a CAS that fails carries nothing: a caller
         * took the role, and its own re-check sees our node). */
        if (rsp__cas_acq_rel_u32(&a->sleeping, RSP__OWNER_PARKED, RSP__OWNER_AWAKE))
            rsp__futex_wake(&a->sleeping, 1);
        return true;
    }
    /* LENT: the caller holding the role re-checks the inbox after giving
     * it back (rsp__actor_run_lent), and wakes the owner for us. */
    return s == RSP__OWNER_LENT;
}

static void leave_posting(rsp__actor *a)
{
    /* S1 end: the closer waits for this count to reach zero. Seq_cst RMW
     * (also a release: our enqueue happens before the closer's) then a
     * seq_cst load of `closed`: store->load against S2's CAS then load of
     * `posting`, so either we see closed and wake it, or it sees zero. */
    const uint32_t posting = rsp__fetch_add_seq_cst_u32(&a->posting, UINT32_MAX);
    RSP__ASSERT(posting != 0);
    if (posting == 1 && rsp__load_seq_cst_u32(&a->closed))
        rsp__futex_wake_all(&a->posting);
}

rsp_status rsp__actor_post(rsp__actor *a, rsp_ticket *t, bool keep, uint64_t timeout_ns,
                           rsp_error *err)
{
    /* S1: pairs with S2 in rsp__actor_close: seq_cst RMW, seq_cst load
     * (store->load on both sides). */
    rsp__fetch_add_seq_cst_u32(&a->posting, 1);
    rsp_status st;
    if (rsp__load_seq_cst_u32(&a->closed)) {
        st = rsp__fail(err, RSP_ESHUTDOWN, "the pool is shutting down: post refused");
    } else {
        st = take_credit(a, t->seq, timeout_ns, &t->credited, err);
        if (st == RSP_OK) {
            /* Posted once: as rsp__actor_ticket_new made it. */
            RSP__ASSERT(t->refs == 0 && t->state == RSP__TICKET_PENDING && !t->last);
            t->kept = keep;
            t->refs = keep ? 2u : 1u;
            t->state = RSP__TICKET_PENDING;
            t->spin = false;
            if (keep) {
                /* For the owner's spin after answering (partner_cpu) and
                 * ours while waiting (shared_cpu). */
                t->cpu = this_cpu();
                t->shared_cpu = t->cpu >= 0 && t->cpu == (int32_t)rsp__load_relaxed_u32(
                                                             (const uint32_t *)&a->owner_cpu_now);
            }
            /* From here the owner may answer, and (not kept) free t. */
            const bool woke = enqueue_and_wake(a, t);
            if (keep)
                t->spin = !woke; /* read by our own rsp__ticket_wait only */
        }
    }
    leave_posting(a);
    if (st != RSP_OK) {
        ticket_drop_hold(t); /* refused: the owner will never see it */
        rsp__ticket_release(t);
    }
    return st;
}

/* K1: take the owner's role for one call if it sleeps. The call stays
 * inside S1 until it gives the role back, so a close waits for it and the
 * last message is never queued while a caller holds the role. */
static bool lend(rsp__actor *a)
{
    if (rsp__load_relaxed_u32(&a->sleeping) != RSP__OWNER_PARKED)
        return false;                           /* the usual case when busy: one load */
    rsp__fetch_add_seq_cst_u32(&a->posting, 1); /* S1, as rsp__actor_post */
    if (rsp__load_seq_cst_u32(&a->closed)) {
        leave_posting(a);
        return false; /* rsp__actor_post refuses it */
    }
    /* K1: acquire, pairs with K2 (the owner's or the previous caller's
     * release store of PARKED): the role's state as its last holder left it. */
    if (!rsp__cas_acq_rel_u32(&a->sleeping, RSP__OWNER_PARKED, RSP__OWNER_LENT)) {
        leave_posting(a);
        return false;
    }
    return true;
}

rsp_status rsp__actor_post_call(rsp__actor *a, rsp_ticket *t, uint64_t timeout_ns, rsp_error *err)
{
    if (a->lend && t->seq == 0 && lend(a)) {
        rsp__actor_run_lent(a, t);
        leave_posting(a);
        return RSP_OK;
    }
    t->call = true; /* the owner parks at once after answering it (owner_idle) */
    return rsp__actor_post(a, t, true, timeout_ns, err);
}

rsp_status rsp__actor_close(rsp__actor *a, rsp_ticket *t, bool keep, rsp_error *err)
{
    /* S2: pairs with S1 (seq_cst CAS, then seq_cst loads of `posting`
     * below). Only the first closer gets past this. */
    if (!rsp__cas_seq_cst_u32(&a->closed, 0, 1)) {
        if (t) {
            ticket_drop_hold(t);
            rsp__ticket_release(t);
        }
        return rsp__fail(err, RSP_ESHUTDOWN, "the pool is already shutting down");
    }
    /* Producers waiting for credit re-check `closed` when the epoch moves.
     * Release: a waiter whose acquire snapshot sees this epoch sees closed. */
    rsp__fetch_add_release_u32(&a->credit_epoch, 1);
    rsp__futex_wake_all(&a->credit_epoch);

    /* Wait until every post that passed S1 has enqueued (or given up). */
    uint32_t n;
    while ((n = rsp__load_seq_cst_u32(&a->posting)) != 0) /* S2 */
        rsp__futex_wait(&a->posting, n, NULL);

    if (!t) {
        t = a->stop_ticket;
        keep = false;
    } else {
        free(a->stop_ticket);
    }
    a->stop_ticket = NULL;
    RSP__ASSERT(t->refs == 0 && t->state == RSP__TICKET_PENDING && !t->last);
    t->kept = keep;
    t->last = true;
    t->credited = false;
    t->seq = 0; /* the last message is never held */
    t->refs = keep ? 2u : 1u;
    t->state = RSP__TICKET_PENDING;
    t->spin = false; /* the owner stops after this: nothing worth spinning for */
    /* The last message takes no credit: it must get in even when full. */
    enqueue_and_wake(a, t);
    return RSP_OK;
}

bool rsp__actor_closed(const rsp__actor *a)
{
    return rsp__load_relaxed_u32((uint32_t *)&a->closed) != 0;
}

uint32_t rsp__actor_depth(const rsp__actor *a)
{
    /* Relaxed: a gauge, stale by nature. */
    uint32_t c = rsp__load_relaxed_u32((uint32_t *)&a->credits);
    return c > a->capacity ? 0 : a->capacity - c;
}

uint64_t rsp__actor_handled(const rsp__actor *a)
{
    return rsp__load_relaxed_u64((uint64_t *)&a->handled);
}

uint64_t rsp__actor_unwaited_failures(const rsp__actor *a)
{
    return rsp__load_relaxed_u64((uint64_t *)&a->unwaited_failures);
}

uint64_t rsp__actor_sleeps(const rsp__actor *a)
{
    return rsp__load_relaxed_u64((uint64_t *)&a->sleeps);
}

bool rsp__actor_asleep(const rsp__actor *a)
{
    return rsp__load_relaxed_u32((uint32_t *)&a->sleeping) != RSP__OWNER_AWAKE;
}

uint64_t rsp__actor_lent_calls(const rsp__actor *a)
{
    return rsp__load_relaxed_u64((uint64_t *)&a->lent_calls);
}
