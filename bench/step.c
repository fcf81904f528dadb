/*
 * step: admit + plan + commit of one batched step, per-step time.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Steady decode: N requests, one row each (span 1), the same rows every
 * step, so after the first step admit allocates nothing and the measured
 * cost is the bookkeeping of a step (and the copies, for the fork variant).
 *
 * Variants:
 *   one_label  rows on "main"; tiny slots (64 B).
 *   fork       rows on "draft", pre-fork main->draft (the draft starts as a
 *              copy of main), post-fork draft->main (accepted back): two
 *              labels, 2N slot copies a step; 1 KiB slots.
 *   preplan    rows on "main"; admit, stage (preplan), promote (plan again
 *              with preplan off), commit; tiny slots.
 *
 rsp side, two ways of driving the same messages:
 *   sync       the synchronous wrappers: admit, plan (and promote), commit,
 *              each a post + wait (three or four round trips a step).
 *   pipelined  what the message API allows an engine to do: post admit and
 *              plan (and the promotion) back to back, then wait for their
 *              answers (an admit refusal makes the plan fail, and the engine
 *              rolls back, so nothing is lost by not waiting in between);
 *              commit is posted fire-and-forget (the next step's messages
 *              from this thread are handled after it, so its cost lands in
 *              the next sample: the steady state is what is measured).
 *   onetrip    the one-round-trip synchronous wrapper (rsp_step_next, issue
 *              11): each step's call commits the previous step (its
 *              forward_done is the fence signalled at the end of that step)
 *              and admits and plans this one, in one message; one_label and
 *              fork only (a promotion is a second plan). The last step's
 *              commit is posted after the measured steps.
 *   All three then fetch the live addressing as a reader and wait for its `ready`
 *   event (a backend must, before its forward) and signal a host fence as
 *   forward-done before commit. One sample = one step.
 * Baseline: the same calls on the mutex design (bl_*), including the
 * addressing fetch under its read lock; its device work runs inline.
 */
#include <stdio.h>
#include <stdlib.h>

#include "baseline.h"
#include "bench.h"
#include "actor/actor.h" /* rsp__actor_sleeps: how often the owner slept (as bench/rtt.c) */
#include "pool.h"

typedef enum step_variant { V_ONE_LABEL = 0, V_FORK, V_PREPLAN } step_variant;
typedef enum step_api { API_PIPELINED = 0, API_SYNC, API_ONETRIP } step_api;

static const char *api_name(step_api a)
{
    return a == API_PIPELINED ? "pipelined" : a == API_SYNC ? "sync" : "onetrip";
}

static const char *variant_name(step_variant v)
{
    return v == V_ONE_LABEL ? "one_label" : v == V_FORK ? "fork" : "preplan";
}

/* The declaration shared by both sides (label ids agree: both cores intern
 * "main" = 0 then "draft" = 1 in the same order). */
typedef struct step_decl {
    rsp_row *rows;
    rsp_fork pre, post;
    rsp_step step;
    rsp_label_id row_label;
    /* onetrip: the step planned last and not yet committed (its id; 0:
     * none) and its forward_done. */
    uint64_t pending;
    rsp_event pending_done;
} step_decl;

static void decl_init(step_decl *d, step_variant v, uint32_t n, rsp_label_id draft)
{
    d->rows = calloc(n, sizeof *d->rows);
    if (!d->rows)
        bench_die("calloc rows", RSP_ENOMEM, "");
    d->row_label = v == V_FORK ? draft : RSP_LABEL_MAIN;
    for (uint32_t i = 0; i < n; i++)
        d->rows[i] = (rsp_row){.rid = i + 1, .label = d->row_label, .span = 1, .padding = false};
    d->pre = (rsp_fork){.from = RSP_LABEL_MAIN, .to = draft};
    d->post = (rsp_fork){.from = draft, .to = RSP_LABEL_MAIN};
    d->step = (rsp_step){.step_id = 0, .rows = d->rows, .num_rows = n};
    d->pending = 0;
    if (v == V_FORK) {
        d->step.pre_forks = &d->pre;
        d->step.num_pre_forks = 1;
        d->step.post_forks = &d->post;
        d->step.num_post_forks = 1;
    }
}

/* Post one message of the step's declaration; ticket NULL = fire-and-forget. */
static void post_step(rsp_pool *pool, rsp_msg_kind kind, const rsp_step *step,
                      const rsp_event *done, rsp_ticket **ticket)
{
    rsp_error err = {0};
    rsp_msg m = {.kind = kind, .step = *step};
    if (done)
        m.event = *done;
    BENCH_CHECK(rsp_post(pool, &m, ticket, RSP_WAIT_FOREVER, &err), &err);
}

static void wait_step(rsp_ticket *t, rsp_reply *reply)
{
    rsp_status st = rsp_wait(t, RSP_WAIT_FOREVER, reply);
    BENCH_CHECK(st, &reply->error);
}

/* One rsp step; returns the addressing's row count (checked by the caller). */
static uint32_t rsp_one_step(rsp_pool *pool, step_decl *d, step_variant v, step_api api,
                             uint64_t sid, rsp_host_fence *fence)
{
    rsp_error err = {0};
    rsp_admit_outcome out;
    d->step.step_id = sid;
    d->step.preplan = (v == V_PREPLAN);
    if (api == API_ONETRIP) {
        rsp_step prev = d->step; /* the same rows: a steady decode */
        prev.step_id = d->pending;
        rsp_step_outcome o;
        BENCH_CHECK(
            rsp_step_next(pool, &d->step, d->pending ? &prev : NULL, &d->pending_done, &o, &err),
            &err);
        if (!o.planned)
            bench_die("rsp step_next (pool full)", RSP_ECAPACITY, "");
    } else if (api == API_SYNC) {
        BENCH_CHECK(rsp_step_admit(pool, &d->step, &out, &err), &err);
        if (!out.ok)
            bench_die("rsp admit (pool full)", RSP_ECAPACITY, "");
        BENCH_CHECK(rsp_step_plan(pool, &d->step, &err), &err); /* live, or the stage */
        if (v == V_PREPLAN) {
            d->step.preplan = false;
            BENCH_CHECK(rsp_step_plan(pool, &d->step, &err), &err); /* promotion */
        }
    } else {
        rsp_ticket *ta, *tp, *tq = NULL;
        rsp_reply *reply = malloc(sizeof *reply); /* large: keep it off the stack */
        if (!reply)
            bench_die("malloc reply", RSP_ENOMEM, "");
        post_step(pool, RSP_MSG_ADMIT, &d->step, NULL, &ta);
        post_step(pool, RSP_MSG_PLAN, &d->step, NULL, &tp);
        if (v == V_PREPLAN) {
            d->step.preplan = false;
            post_step(pool, RSP_MSG_PLAN, &d->step, NULL, &tq);
        }
        wait_step(ta, reply);
        if (!reply->admit.ok)
            bench_die("rsp admit (pool full)", RSP_ECAPACITY, "");
        wait_step(tp, reply);
        if (tq)
            wait_step(tq, reply);
        free(reply);
    }
    rsp_addressing a;
    BENCH_CHECK(rsp_read_begin(), &err);
    const rsp_plan *plan = rsp_plan_live(pool);
    if (!plan)
        bench_die("rsp_plan_live", RSP_ENOPLAN, "no live plan after plan");
    rsp_status st = rsp_plan_addressing(plan, d->row_label, &a, &err);
    rsp_read_end();
    BENCH_CHECK(st, &err);
    if (a.step_id != sid)
        bench_die("rsp live plan", RSP_EORDER, "live plan is not the step just planned");
    BENCH_CHECK(rsp_event_wait(pool, &a.ready, RSP_WAIT_FOREVER, &err), &err);
    rsp_host_fence_signal(fence, sid); /* the (empty) forward is done */
    rsp_event done = rsp_event_host(fence, sid);
    d->step.preplan = false;
    if (api == API_ONETRIP) {
        d->pending = sid; /* committed by the next step's message */
        d->pending_done = done;
    } else if (api == API_SYNC) {
        BENCH_CHECK(rsp_step_commit(pool, &d->step, &done, &err), &err);
    } else {
        post_step(pool, RSP_MSG_COMMIT, &d->step, &done, NULL);
    }
    return a.num_rows;
}

/* onetrip: commit the step left in flight by the last measured one. */
static void rsp_flush(rsp_pool *pool, step_decl *d)
{
    if (!d->pending)
        return;
    rsp_error err = {0};
    rsp_step prev = d->step;
    prev.step_id = d->pending;
    BENCH_CHECK(rsp_step_commit(pool, &prev, &d->pending_done, &err), &err);
    d->pending = 0;
}

static uint32_t bl_one_step(bl_pool *pool, step_decl *d, step_variant v, uint64_t sid,
                            rsp_host_fence *fence)
{
    rsp_error err = {0};
    rsp_admit_outcome out;
    d->step.step_id = sid;
    d->step.preplan = (v == V_PREPLAN);
    BENCH_CHECK(bl_admit(pool, &d->step, &out, &err), &err);
    if (!out.ok)
        bench_die("baseline admit (pool full)", RSP_ECAPACITY, "");
    BENCH_CHECK(bl_plan(pool, &d->step, &err), &err);
    if (v == V_PREPLAN) {
        d->step.preplan = false;
        BENCH_CHECK(bl_plan(pool, &d->step, &err), &err);
    }
    rsp_addressing a;
    bl_read_begin(pool);
    rsp_status st = bl_plan_addressing(pool, d->row_label, &a);
    bl_read_end(pool);
    BENCH_CHECK(st, &err);
    if (a.step_id != sid)
        bench_die("baseline live plan", RSP_EORDER, "live plan is not the step just planned");
    rsp_host_fence_signal(fence, sid);
    rsp_event done = rsp_event_host(fence, sid);
    d->step.preplan = false;
    BENCH_CHECK(bl_commit(pool, &d->step, &done, &err), &err);
    return a.num_rows;
}

static void run_point(const bench_opts *o, step_variant v, step_api api, uint32_t n)
{
    bench_shape shape = v == V_FORK ? BENCH_KIB : BENCH_TINY;
    uint32_t max_slots = 2 * n + 8;
    rsp_pool_config cfg;
    bench_config(&cfg, shape, max_slots);
    rsp_error err = {0};

    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    bl_pool *bl;
    BENCH_CHECK(bl_create(&cfg, &bl, &err), &err);
    rsp_label_id draft, bdraft;
    BENCH_CHECK(rsp_label(pool, "draft", &draft, &err), &err);
    BENCH_CHECK(bl_label(bl, "draft", &bdraft, &err), &err);
    if (draft != bdraft)
        bench_die("label ids", RSP_EINVAL, "rsp and baseline interned \"draft\" differently");
    rsp_host_fence *rfence, *bfence;
    BENCH_CHECK(rsp_host_fence_create(&rfence, &err), &err);
    BENCH_CHECK(rsp_host_fence_create(&bfence, &err), &err);

    step_decl rd, bd;
    decl_init(&rd, v, n, draft);
    decl_init(&bd, v, n, draft);

    /* Enough steps that a 1-row step is sampled a few thousand times and a
     * 256-row fork step still finishes quickly. */
    uint32_t warm = o->quick ? 100 : 500;
    uint32_t iters = o->quick ? 600 : 4000;
    if (n >= 64 && v == V_FORK)
        iters /= 2;
    const uint32_t rounds = 2; /* alternate rsp / baseline blocks: same drift for both */

    bench_samples rs, bs;
    bench_samples_init(&rs, (size_t)iters * rounds);
    bench_samples_init(&bs, (size_t)iters * rounds);
    uint64_t rsid = 0, bsid = 0, rwall = 0, bwall = 0, sleeps = 0;
    for (uint32_t r = 0; r < rounds; r++) {
        for (uint32_t i = 0; i < warm; i++)
            if (rsp_one_step(pool, &rd, v, api, ++rsid, rfence) != n)
                bench_die("rsp plan", RSP_EINVAL, "wrong row count");
        uint64_t w0 = bench_now_ns(), s0 = rsp__actor_sleeps(pool->actor);
        for (uint32_t i = 0; i < iters; i++) {
            uint64_t t0 = bench_now_ns();
            rsp_one_step(pool, &rd, v, api, ++rsid, rfence);
            bench_samples_add(&rs, (double)(bench_now_ns() - t0));
        }
        rwall += bench_now_ns() - w0;
        sleeps += rsp__actor_sleeps(pool->actor) - s0;
        rsp_flush(pool, &rd);

        for (uint32_t i = 0; i < warm; i++)
            if (bl_one_step(bl, &bd, v, ++bsid, bfence) != n)
                bench_die("baseline plan", RSP_EINVAL, "wrong row count");
        w0 = bench_now_ns();
        for (uint32_t i = 0; i < iters; i++) {
            uint64_t t0 = bench_now_ns();
            bl_one_step(bl, &bd, v, ++bsid, bfence);
            bench_samples_add(&bs, (double)(bench_now_ns() - t0));
        }
        bwall += bench_now_ns() - w0;
    }

    bench_result res = {.bench = "step", .baseline = "mutex"};
    snprintf(res.params, sizeof res.params,
             "\"variant\": \"%s\", \"api\": \"%s\", \"rows\": %u, \"labels\": %u, "
             "\"slot_bytes\": %llu",
             variant_name(v), api_name(api), n, v == V_FORK ? 2u : 1u,
             (unsigned long long)(shape == BENCH_KIB ? 1024 : 64));
    bench_result_samples(&res, &rs, &bs);
    res.ops_per_s = 1e9 * (double)rs.n / (double)rwall;
    res.baseline_ops_per_s = 1e9 * (double)bs.n / (double)bwall;
    /* How often the owner went to sleep (each a futex wake for the next
     * post): ~0 when the learned spins bridge the gaps of a step. */
    snprintf(res.extra, sizeof res.extra, "\"owner_sleeps_per_op\": %.3f",
             (double)sleeps / (double)rs.n);
    bench_report(o, &res);

    bench_samples_fini(&rs);
    bench_samples_fini(&bs);
    free(rd.rows);
    free(bd.rows);
    rsp_pool_destroy(pool);
    bl_destroy(bl);
    rsp_host_fence_destroy(rfence);
    rsp_host_fence_destroy(bfence);
}

void bench_step(const bench_opts *o)
{
    rsp_error err = {0};
    /* This thread reads the live plan's addressing after each plan. */
    BENCH_CHECK(rsp_reader_register(&err), &err);
    static const uint32_t rows[] = {1, 8, 64, 256};
    for (step_variant v = V_ONE_LABEL; v <= V_PREPLAN; v++)
        for (step_api api = API_PIPELINED; api <= API_ONETRIP; api++)
            for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
                if (api != API_ONETRIP || v != V_PREPLAN)
                    run_point(o, v, api, rows[i]);
    rsp_reader_unregister();
}
