/*
 * The reclaimer: grace periods (G2), retired-plan batches (R1/R2),
 * deferred frees (D1/D2), bounded grace periods (G3).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "publish_impl.h"

#include <stdlib.h>

#include "util/time.h"

/* TSan stand-in for the grace period (G1/G2): every read section releases
 * it at its end, every reclamation acquires it before freeing. */
char rsp__grace_token;

/* Drop the publisher's reference to every plan of a retired list, after a
 * grace period (G2). Returns how many. */
uint32_t rsp__drop_batch(rsp_plan *plan)
{
    uint32_t n = 0;
    while (plan) {
        rsp_plan *next = plan->next_retired;
        rsp__hb_acquire(plan); /* the owner's writes (TSan mirror of P1) */
        plan_drop(plan);
        plan = next;
        n++;
    }
    return n;
}

/* Run every deferred free of a list, after a grace period (G2, D2). */
void rsp__run_deferred(rsp__publisher *p, rsp__deferred *d)
{
    uint32_t n = 0;
    while (d) {
        rsp__deferred *next = d->next;
        rsp__hb_acquire(d); /* D1 (TSan mirror of the owner's writes) */
        d->fn(d);
        d = next;
        n++;
    }
    RSP__MUST(rsp__fetch_add_relaxed_u32(&p->deferred, (uint32_t)-n) >= n); /* a gauge */
}

/* The reclaimer thread: takes every batch handed over so far (R2, D2),
 * waits one grace period for all of them (G2), frees them; sleeps when
 * there is nothing to do. Exits once destroy asked and nothing is pending. */
void *rsp__reclaimer_main(void *arg)
{
    rsp__publisher *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->pending && !p->dpending && p->grace_want == p->grace_seen && !p->stop)
            pthread_cond_wait(&p->work, &p->lock);
        rsp_plan *list = p->pending;        /* R2 */
        rsp__deferred *dlist = p->dpending; /* D2 */
        const bool asked = p->grace_want != p->grace_seen;
        const uint32_t want = p->grace_want; /* G3: taken after the ask */
        p->pending = NULL;
        p->dpending = NULL;
        p->grace_seen = want;
        if (!list && !dlist && !asked)
            break; /* stop, and nothing left */
        pthread_mutex_unlock(&p->lock);
        grace_period(); /* G2: one grace period for every batch taken */
        uint32_t n = rsp__drop_batch(list);
        /* A gauge (the owner reads it for the cap): relaxed. */
        RSP__MUST(rsp__fetch_add_relaxed_u32(&p->retired, (uint32_t)-n) >= n);
        rsp__run_deferred(p, dlist);
        if (asked) { /* G3 */
            rsp__store_release_u32(&p->grace_done, want);
            rsp__futex_wake_all(&p->grace_done);
        }
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Owner: whether the batch may go to the reclaimer: the reclaimer's share
 * (plans retired minus the batch) plus the batch must leave room for one
 * more batch under the cap, so that while the reclaimer lags (a long read
 * section) the owner still gathers a whole batch per grace period it waits
 * for (instead of one per plan). */
static bool batch_fits_reclaimer(const rsp__publisher *p)
{
    uint32_t in_flight = rsp__load_relaxed_u32(&p->retired) - p->batch_len;
    return in_flight + p->batch_len <= p->retired_cap - p->batch_cap;
}

/* Owner: hand the retired batch to the reclaimer (R1). A short critical
 * section (two pointer stores) and a futex wake if the reclaimer sleeps. */
static void batch_to_reclaimer(rsp__publisher *p)
{
    rsp_plan *head = p->batch, *tail = p->batch_tail;
    p->batch = NULL;
    p->batch_tail = NULL;
    p->batch_len = 0;
    pthread_mutex_lock(&p->lock);
    tail->next_retired = p->pending; /* R1 */
    p->pending = head;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
}

/* Owner: hand the deferred batch to the reclaimer (D1). */
static void dbatch_to_reclaimer(rsp__publisher *p)
{
    rsp__deferred *head = p->dbatch, *tail = head;
    while (tail->next)
        tail = tail->next;
    p->dbatch = NULL;
    p->dbatch_len = 0;
    pthread_mutex_lock(&p->lock);
    tail->next = p->dpending; /* D1 */
    p->dpending = head;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
}

void rsp__publisher_defer(rsp__publisher *p, rsp__deferred *d)
{
    rsp__hb_release(d); /* D1 (TSan mirror: the hand-off crosses liburcu) */
    d->next = p->dbatch;
    p->dbatch = d;
    p->dbatch_len++;
    uint32_t n = rsp__fetch_add_relaxed_u32(&p->deferred, 1) + 1; /* a gauge */
    if (p->dbatch_len < RSP__DEFER_BATCH)
        return;
    if (n <= RSP__DEFER_CAP) {
        dbatch_to_reclaimer(p);
        return;
    }
    /* The reclaimer lags (a long read section): bound what waits. */
    grace_period(); /* G2 */
    rsp__deferred *list = p->dbatch;
    p->dbatch = NULL;
    p->dbatch_len = 0;
    rsp__run_deferred(p, list);
}

uint32_t rsp__publisher_deferred(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32(&p->deferred);
}

void rsp__publisher_flush(rsp__publisher *p)
{
    if (p->dbatch)
        dbatch_to_reclaimer(p); /* small objects: no cap to keep room for */
    /* Past the room for the reclaimer the batch waits for the next retire
     * (which waits for a grace period): an idle owner must not block on a
     * reader's long read section. */
    if (p->batch && batch_fits_reclaimer(p))
        batch_to_reclaimer(p);
}

/*
 * Owner: drop the publisher's reference to a plan readers may still see.
 * Retired plans gather in a batch of batch_cap, handed to the reclaimer
 * whole while its share leaves room for a batch under the cap. Past that,
 * a full batch waits for one grace period here (synchronize_rcu) and is
 * freed at once: one grace period per batch_cap plans however far the
 * reclaimer lags, and `retired` (every plan not yet reclaimed, batch
 * included) never exceeds the cap.
 */
void rsp__publisher_retire(rsp__publisher *p, rsp_plan *plan)
{
    if (!plan)
        return;
    /* Published nowhere now, the publisher's reference still held. */
    RSP__ASSERT(plan->published == 0 && rsp__load_relaxed_u32(&plan->refs) != 0);
    rsp__hb_release(plan);
    plan->next_retired = p->batch;
    if (!p->batch)
        p->batch_tail = plan;
    p->batch = plan;
    p->batch_len++;
    uint32_t r = rsp__fetch_add_relaxed_u32(&p->retired, 1) + 1; /* a gauge */
    if (r > p->retired_max)
        rsp__store_relaxed_u32(&p->retired_max, r);
    if (p->batch_len < p->batch_cap)
        return;
    if (batch_fits_reclaimer(p)) {
        batch_to_reclaimer(p);
        return;
    }
    grace_period(); /* G2 */
    uint32_t n = rsp__drop_batch(p->batch);
    RSP__ASSERT(n == p->batch_len);
    p->batch = NULL;
    p->batch_tail = NULL;
    p->batch_len = 0;
    RSP__MUST(rsp__fetch_add_relaxed_u32(&p->retired, (uint32_t)-n) >= n); /* a gauge */
}

uint32_t rsp__publisher_retired(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32((uint32_t *)&p->retired);
}

uint32_t rsp__publisher_retired_max(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32((uint32_t *)&p->retired_max);
}

rsp_status rsp__publisher_grace_timed(rsp__publisher *p, uint64_t deadline)
{
    pthread_mutex_lock(&p->lock); /* G3 */
    const uint32_t want = ++p->grace_want;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (;;) {
        uint32_t done = rsp__load_acquire_u32(&p->grace_done); /* G3 */
        if ((int32_t)(done - want) >= 0)
            return RSP_OK;
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel))
            return RSP_ETIMEDOUT;
        rsp__futex_wait(&p->grace_done, done, rel);
    }
}
