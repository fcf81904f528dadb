/*
 * The step table (per-step plans, Q1/Q2) and the plan waits (W1/W2, W3).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "publish_impl.h"

#include <stdio.h>
#include <time.h>

#include "util/error.h"
#include "util/time.h"

/* Ring records beyond rsp__step_end: which answer a waiter gets. */
enum { END_COMMITTED_NO_PLAN = 100, END_ROLLED_BACK_PLANNED };

/* Under lock: the table entry of step_id, or RSP__STEP_TABLE. */
static uint32_t step_entry(const rsp__publisher *p, uint64_t step_id)
{
    for (uint32_t i = 0; i < p->step_hw; i++)
        if (p->steps[i].used && p->steps[i].step_id == step_id)
            return i;
    return RSP__STEP_TABLE;
}

bool rsp__publisher_step_admitted(rsp__publisher *p, uint64_t step_id)
{
    bool ok = true;
    pthread_mutex_lock(&p->lock);
    if (step_entry(p, step_id) == RSP__STEP_TABLE) {
        uint32_t i = 0;
        while (i < RSP__STEP_TABLE && p->steps[i].used)
            i++;
        if (i == RSP__STEP_TABLE) {
            ok = false;
        } else {
            p->steps[i].step_id = step_id;
            p->steps[i].used = true;
            if (i >= p->step_hw) /* Q1: readers scan step_hw entries */
                rsp__store_release_u32(&p->step_hw, i + 1);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return ok;
}

/* Owner, from rsp__publish_live: the live plan also goes into its step's
 * entry, with a reference of its own (retired when the step ends). A plan
 * of a step the table does not hold (tests that drive the publisher alone)
 * is only the live plan. */
void rsp__step_publish(rsp__publisher *p, rsp_plan *plan)
{
    pthread_mutex_lock(&p->lock);
    uint32_t i = step_entry(p, plan->step_id);
    rsp_plan *old = NULL;
    if (i != RSP__STEP_TABLE) {
        old = p->step_plan[i]; /* a step is planned once; kept for safety */
        plan->published |= PUB_STEP;
        rcu_assign_pointer(p->step_plan[i], plan); /* P1 (hb: rsp__publish_live) */
    }
    pthread_mutex_unlock(&p->lock);
    rsp__unpublish(p, old, PUB_STEP);
}

/* Wake the waiters of rsp__publisher_wait / _wait_step (W1). */
static void wake_waiters(rsp__publisher *p)
{
    rsp__fetch_add_seq_cst_u32(&p->wait_seq, 1);
    if (rsp__load_seq_cst_u32(&p->waiters) != 0)
        rsp__futex_wake_all(&p->wait_seq);
}

void rsp__publisher_step_finished(rsp__publisher *p, uint64_t step_id, rsp__step_end end)
{
    rsp_plan *old = NULL;
    pthread_mutex_lock(&p->lock);
    uint32_t i = step_entry(p, step_id);
    const bool in_flight = i != RSP__STEP_TABLE;
    /* A refused re-admit leaves its step in flight; a rollback of a step
     * not in flight does nothing (rsp_step_rollback). */
    const bool record = end == RSP__STEP_REFUSED ? !in_flight : in_flight;
    if (record) {
        uint32_t what = end;
        if (in_flight) {
            old = p->step_plan[i];
            rcu_assign_pointer(p->step_plan[i], NULL);
            p->steps[i].used = false;
            if (end == RSP__STEP_COMMITTED && !old)
                what = END_COMMITTED_NO_PLAN;
            else if (end == RSP__STEP_ROLLED_BACK && old)
                what = END_ROLLED_BACK_PLANNED;
        }
        p->ring[p->ring_next].step_id = step_id;
        p->ring[p->ring_next].end = what;
        p->ring_next = (p->ring_next + 1) % RSP__STEP_RING;
        if (p->ring_len < RSP__STEP_RING)
            p->ring_len++;
    }
    pthread_mutex_unlock(&p->lock);
    if (record)
        wake_waiters(p); /* W1: after the change, made under lock (Q1) */
    rsp__unpublish(p, old, PUB_STEP);
}

const rsp_plan *rsp__publisher_step_plan(const rsp__publisher *p, uint64_t step_id)
{
    if (tls_depth() == 0)
        return NULL;
    /* Q2: acquire, pairs with the release of step_hw in step_admitted; an
     * entry past it is NULL. Then P2 per entry. */
    uint32_t n = rsp__load_acquire_u32((uint32_t *)&p->step_hw);
    for (uint32_t i = 0; i < n; i++) {
        const rsp_plan *plan = read_pointer(&p->step_plan[i]);
        if (plan && plan->step_id == step_id)
            return plan;
    }
    return NULL;
}

/* Under lock: whether step_id is decided: RSP_OK (its plan is published),
 * RSP_ENOPLAN (it ended without one readable), or RSP_EAGAIN (wait). */
static rsp_status step_answer(const rsp__publisher *p, uint64_t step_id, rsp_error *err)
{
    uint32_t i = step_entry(p, step_id);
    if (i != RSP__STEP_TABLE)
        return p->step_plan[i] ? RSP_OK : RSP_EAGAIN;
    const unsigned long long id = (unsigned long long)step_id;
    for (uint32_t k = 1; k <= p->ring_len; k++) { /* newest first */
        uint32_t r = (p->ring_next + RSP__STEP_RING - k) % RSP__STEP_RING;
        if (p->ring[r].step_id != step_id)
            continue;
        switch (p->ring[r].end) {
        case RSP__STEP_COMMITTED:
            return rsp__fail(err, RSP_ENOPLAN,
                             "step %llu was committed: its plan is gone (a step's plan is "
                             "readable only while the step is in flight)",
                             id);
        case END_COMMITTED_NO_PLAN:
            return rsp__fail(err, RSP_ENOPLAN,
                             "step %llu was committed without a live plan (a capture)", id);
        case RSP__STEP_ROLLED_BACK:
            return rsp__fail(err, RSP_ENOPLAN, "step %llu was rolled back before it was planned",
                             id);
        case END_ROLLED_BACK_PLANNED:
            return rsp__fail(err, RSP_ENOPLAN, "step %llu was rolled back: its plan is withdrawn",
                             id);
        default:
            return rsp__fail(err, RSP_ENOPLAN,
                             "step %llu was refused at admit (an error, or no room: ok false)", id);
        }
    }
    return RSP_EAGAIN;
}

static rsp_status step_check(rsp__publisher *p, uint64_t step_id, rsp_error *err)
{
    pthread_mutex_lock(&p->lock); /* Q2: pairs with the owner's unlock (Q1) */
    rsp_status st = step_answer(p, step_id, err);
    pthread_mutex_unlock(&p->lock);
    return st;
}

void rsp__publisher_close(rsp__publisher *p)
{
    /* Relaxed: the release bump of wait_seq below publishes it to a waiter
     * whose (seq_cst, so acquire) snapshot reads the bump; a waiter with an
     * older snapshot is woken, or its futex compare fails. */
    rsp__store_relaxed_u32(&p->closed, 1);
    rsp__fetch_add_release_u32(&p->wait_seq, 1);
    rsp__futex_wake_all(&p->wait_seq);
}

static bool step_reached(rsp__publisher *p, uint64_t step_id)
{
    /* W2: acquire; pairs with the release stores of W1. */
    return rsp__load_acquire_u32(&p->has_live) && rsp__load_acquire_u64(&p->live_step) >= step_id;
}

/* What a plan waiter waits for: RSP_EAGAIN while it should go on waiting,
 * else its answer. */
typedef rsp_status (*wait_check)(rsp__publisher *p, uint64_t step_id, rsp_error *err);

static rsp_status reached_check(rsp__publisher *p, uint64_t step_id, rsp_error *err)
{
    (void)err;
    return step_reached(p, step_id) ? RSP_OK : RSP_EAGAIN;
}

/* The one plan wait, for rsp__publisher_wait (a step >= step_id) and
 * rsp__publisher_wait_step (exactly step_id): announce the waiter (W2, under
 * `lock` for W3's sake: destroy reads the count under it), then sleep on
 * wait_seq until `check` answers, the pool closes or the deadline passes,
 * and leave (W3). */
static rsp_status wait_for(rsp__publisher *p, wait_check check, uint64_t step_id, bool exact,
                           uint64_t timeout_ns, rsp_error *err)
{
    rsp_status st = check(p, step_id, err);
    if (st != RSP_EAGAIN)
        return st;
    char which[48];
    snprintf(which, sizeof which, exact ? "step %llu" : "a step >= %llu",
             (unsigned long long)step_id);
    if (timeout_ns == 0)
        return rsp__fail(err, RSP_ETIMEDOUT, "%s has no live plan yet", which);
    const uint64_t deadline = rsp__deadline(timeout_ns);
    /* W2: pairs with W1 (seq_cst RMW here, seq_cst load of wait_seq below). */
    pthread_mutex_lock(&p->lock);
    rsp__fetch_add_seq_cst_u32(&p->waiters, 1);
    pthread_mutex_unlock(&p->lock);
    for (;;) {
        /* W2: seq_cst load after the seq_cst announce (store->load). */
        uint32_t seq = rsp__load_seq_cst_u32(&p->wait_seq);
        st = check(p, step_id, err);
        if (st != RSP_EAGAIN)
            break;
        if (rsp__load_relaxed_u32(&p->closed)) {
            st = rsp__fail(err, RSP_ESHUTDOWN, "the pool shut down before %s was planned", which);
            break;
        }
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel)) {
            st = rsp__fail(err, RSP_ETIMEDOUT, "%s had no live plan before the timeout", which);
            break;
        }
        rsp__futex_wait(&p->wait_seq, seq, rel);
    }
    /* W3: the last accesses to p. Destroy waits under `lock` for zero, so
     * it frees p only after this unlock. */
    pthread_mutex_lock(&p->lock);
    const uint32_t waiters = rsp__fetch_add_release_u32(&p->waiters, UINT32_MAX);
    RSP__ASSERT(waiters != 0); /* this one counted itself (W2) */
    if (waiters == 1)
        pthread_cond_broadcast(&p->left);
    pthread_mutex_unlock(&p->lock);
    return st;
}

rsp_status rsp__publisher_wait(rsp__publisher *p, uint64_t step_id, uint64_t timeout_ns,
                               rsp_error *err)
{
    return wait_for(p, reached_check, step_id, false, timeout_ns, err);
}

rsp_status rsp__publisher_wait_step(rsp__publisher *p, uint64_t step_id, uint64_t timeout_ns,
                                    rsp_error *err)
{
    return wait_for(p, step_check, step_id, true, timeout_ns, err);
}

uint32_t rsp__publisher_waiters(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32((uint32_t *)&p->waiters);
}
