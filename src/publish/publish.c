/*
 * The publisher: create (its reclaimer thread) and destroy.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "publish_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/error.h"
#include "util/time.h"

rsp_status rsp__publisher_create(uint32_t retired_cap, rsp__publisher **out, rsp_error *err)
{
    /* Aligned for user_refs' cache lines; sizeof is a multiple of 64. */
    rsp__publisher *p = aligned_alloc(alignof(rsp__publisher), sizeof *p);
    if (p)
        memset(p, 0, sizeof *p);
    if (!p)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the plan publisher");
    p->retired_cap = retired_cap ? retired_cap : RSP__RETIRED_CAP_DEFAULT;
    p->batch_cap = p->retired_cap / 4 ? p->retired_cap / 4 : 1;
    p->labels_known = RSP_MAX_LABELS;
    int rc = pthread_mutex_init(&p->lock, NULL);
    if (rc != 0)
        goto fail_lock;
    rc = pthread_cond_init(&p->work, NULL);
    if (rc != 0)
        goto fail_work;
    rc = pthread_cond_init(&p->left, NULL);
    if (rc != 0)
        goto fail_left;
    /* Everything above is handed to the reclaimer through pthread_create. */
    rc = pthread_create(&p->reclaimer, NULL, rsp__reclaimer_main, p);
    if (rc != 0)
        goto fail_thread;
    *out = p;
    return RSP_OK;

fail_thread:
    pthread_cond_destroy(&p->left);
fail_left:
    pthread_cond_destroy(&p->work);
fail_work:
    pthread_mutex_destroy(&p->lock);
fail_lock:
    free(p);
    return rsp__fail(err, rc == EAGAIN || rc == ENOMEM ? RSP_ENOMEM : RSP_EINVAL,
                     "cannot start the plan reclaimer (%s)", strerror(rc));
}

void rsp__publisher_destroy(rsp__publisher *p)
{
    if (!p)
        return;
    rsp__publisher_close(p);
    /* W3: waiters were woken with RSP_ESHUTDOWN; wait until they have left
     * (each decrements under the lock, the last one broadcasts). */
    pthread_mutex_lock(&p->lock);
    while (rsp__load_relaxed_u32(&p->waiters) != 0)
        pthread_cond_wait(&p->left, &p->lock);
    pthread_mutex_unlock(&p->lock);

    rsp_plan *live = p->live, *staged = p->staged;
    rsp_plan *steps[RSP__STEP_TABLE];
    for (uint32_t i = 0; i < RSP__STEP_TABLE; i++) {
        steps[i] = p->step_plan[i];
        rcu_assign_pointer(p->step_plan[i], NULL);
    }
    rcu_assign_pointer(p->live, NULL);
    rcu_assign_pointer(p->staged, NULL);
    grace_period(); /* G2: no section still sees either plan */
    /* The owner has stopped: its unflushed batch is ours now, and the grace
     * period above covers it. */
    uint32_t n = rsp__drop_batch(p->batch);
    RSP__ASSERT(n == p->batch_len);
    p->batch = NULL;
    p->batch_tail = NULL;
    p->batch_len = 0;
    RSP__MUST(rsp__fetch_add_relaxed_u32(&p->retired, (uint32_t)-n) >= n); /* a gauge */
    rsp__deferred *dlist = p->dbatch; /* covered by the same grace period */
    p->dbatch = NULL;
    p->dbatch_len = 0;
    rsp__run_deferred(p, dlist);
    if (live)
        plan_drop(live);
    if (staged)
        plan_drop(staged);
    for (uint32_t i = 0; i < RSP__STEP_TABLE; i++)
        if (steps[i] && steps[i] != live) /* one reference covers both */
            plan_drop(steps[i]);
    /* The reclaimer frees what it was handed, then exits: joined here. */
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->reclaimer, NULL);
    /* Referenced plans wait for their readers' unref (polled every 1 ms). */
    while (rsp__load_acquire_u32(&p->objects) != 0) {
        struct timespec ms = rsp__timespec_of(1000000);
        nanosleep(&ms, NULL);
    }
    pthread_cond_destroy(&p->left);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p->spare);
    /* objects is zero: every plan's memory is on these lists (M1 came
     * before each release decrement that destroy's acquire load saw). */
    rsp__plan_recycled_free(p->reuse);
    rsp__plan_recycled_free(__atomic_exchange_n(&p->recycled, NULL, __ATOMIC_ACQUIRE));
    free(p);
}
