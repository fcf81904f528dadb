/*
 * One trip a step (RSP_MSG_STEP, rsp_step_next) and vector messages
 * (INGEST / REMOVE / RESET with a list: rsp_ingest_many, ...):
 * docs/semantics.md 4.7 and 3.1. Every rule, failure paths included (a
 * clear status and message, nothing changed). Single-threaded test code;
 * on_error runs on the owner and is read by main after a barrier.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "core/core.h" /* the vector forms' all-or-nothing reserve, on the core alone */
#include "pool.h"      /* rsp__pool_inject_submit_failures */
#include "util/error.h"
#include "../util/small_pool.h"

static rsp_pool *make_pool_cfg(rsp_pool_config *cfg)
{
    static const rsp_block_config blocks[1] = {
        {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}},
    };
    cfg->num_layers = 1;
    cfg->blocks = blocks;
    cfg->num_blocks = 1;
    if (!cfg->max_slots)
        cfg->max_slots = 32;
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(cfg, &pool, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_create: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    return pool;
}

static rsp_pool *make_pool(uint32_t max_slots)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.max_slots = max_slots;
    return make_pool_cfg(&cfg);
}

/* Steps of n rows, rids base .. base + n - 1, span 1 (they write). */
#define MAX_ROWS 16
typedef struct decl {
    rsp_row rows[MAX_ROWS];
    rsp_step step;
} decl;

static void make_decl(decl *d, uint64_t id, rsp_rid base, uint32_t n)
{
    assert_true(n <= MAX_ROWS);
    for (uint32_t i = 0; i < n; i++)
        d->rows[i] = (rsp_row){.rid = base + i, .label = RSP_LABEL_MAIN, .span = 1};
    d->step = (rsp_step){.step_id = id, .rows = d->rows, .num_rows = n};
}

static rsp_stats stats(rsp_pool *pool)
{
    rsp_stats s;
    rsp_error err;
    assert_int_equal(rsp_stats_snapshot(pool, &s, &err), RSP_OK);
    return s;
}

static bool contains(const char *s, const char *part)
{
    if (!strstr(s, part)) {
        print_error("\"%s\" does not contain \"%s\"\n", s, part);
        return false;
    }
    return true;
}

static rsp_status next(rsp_pool *pool, const decl *d, const decl *prev, rsp_step_outcome *out,
                       rsp_error *err)
{
    rsp_event done = rsp_event_complete();
    return rsp_step_next(pool, &d->step, prev ? &prev->step : NULL, prev ? &done : NULL, out, err);
}

/* The live plan of step id, read in a section: its digest (0: none). */
static uint64_t plan_digest_of(rsp_pool *pool, uint64_t id, int32_t *slot0, bool *has0)
{
    rsp_read_begin();
    const rsp_plan *plan = rsp_plan_of_step(pool, id);
    uint64_t d = plan ? rsp_plan_digest(plan) : 0;
    if (plan && slot0) {
        rsp_addressing a;
        assert_int_equal(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, NULL), RSP_OK);
        *slot0 = a.slot_indices[0];
        *has0 = a.has_state[0];
    }
    rsp_read_end();
    return d;
}

/* ------------------------------------------------------------------------ */
/* RSP_MSG_STEP                                                              */
/* ------------------------------------------------------------------------ */

/* A chain of steps through rsp_step_next gives, step by step, the plans
 * (digests, slots, has_state) that admit + plan + commit give on a second
 * pool, and each plan is readable per step while in flight. */
static void step_next_equals_three_round_trips(void **state)
{
    (void)state;
    rsp_pool *one = make_pool(32), *three = make_pool(32);
    rsp_error err;
    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    decl d[6];
    for (uint64_t k = 1; k <= 5; k++)
        make_decl(&d[k], k, 10 + (k % 2), 3); /* alternating rows: holdings stay */
    rsp_event done = rsp_event_complete();
    for (uint64_t k = 1; k <= 5; k++) {
        rsp_step_outcome out;
        rsp_status st = next(one, &d[k], k > 1 ? &d[k - 1] : NULL, &out, &err);
        if (st != RSP_OK)
            print_error("step_next: %s\n", err.message);
        assert_int_equal(st, RSP_OK);
        assert_int_equal(out.committed, k > 1);
        assert_true(out.admit.ok && out.planned && !out.plan_staged);
        assert_int_equal(out.plan_step_id, k);

        if (k > 1)
            assert_int_equal(rsp_step_commit(three, &d[k - 1].step, &done, &err), RSP_OK);
        rsp_admit_outcome ad;
        assert_int_equal(rsp_step_admit(three, &d[k].step, &ad, &err), RSP_OK);
        assert_true(ad.ok);
        assert_int_equal(rsp_step_plan(three, &d[k].step, &err), RSP_OK);

        int32_t s1 = -1, s3 = -2;
        bool h1 = false, h3 = true;
        uint64_t g1 = plan_digest_of(one, k, &s1, &h1), g3 = plan_digest_of(three, k, &s3, &h3);
        assert_int_not_equal(g1, 0);
        assert_int_equal(g1, out.plan_digest);
        assert_int_equal(g1, g3);
        assert_int_equal(s1, s3);
        assert_int_equal(h1, h3);
        assert_int_equal(h1, k > 2); /* the rids of step k - 2 wrote */
        /* The previous step was committed by this message: its plan left. */
        if (k > 1)
            assert_int_equal(plan_digest_of(one, k - 1, NULL, NULL), 0);
        assert_int_equal(rsp_plan_wait_step(one, k, 0, &err), RSP_OK);
    }
    rsp_stats a = stats(one), b = stats(three);
    assert_int_equal(a.commits, 4);
    assert_int_equal(a.commits, b.commits);
    assert_int_equal(a.plans, b.plans);
    assert_int_equal(a.admits_ok, b.admits_ok);
    assert_int_equal(a.free_slots, b.free_slots);
    assert_int_equal(a.generation, b.generation);
    /* The last one is committed as usual. */
    assert_int_equal(rsp_step_commit(one, &d[5].step, &done, &err), RSP_OK);
    rsp_reader_unregister();
    rsp_pool_destroy(one);
    rsp_pool_destroy(three);
}

/* A failed commit stops the message: nothing else is done, the error names
 * the commit's step. */
static void a_failed_commit_stops_the_message(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32);
    rsp_error err;
    decl d1, d7, d8;
    make_decl(&d1, 1, 10, 2);
    make_decl(&d7, 7, 20, 2);
    make_decl(&d8, 8, 30, 2);
    rsp_step_outcome out;
    assert_int_equal(next(pool, &d1, NULL, &out, &err), RSP_OK);
    rsp_stats before = stats(pool);
    /* Step 7 was never admitted: its commit is RSP_EORDER. */
    out.committed = out.planned = true;
    assert_int_equal(next(pool, &d8, &d7, &out, &err), RSP_EORDER);
    assert_true(contains(err.message, "the commit of step 7"));
    assert_true(contains(err.message, "nothing else was done"));
    assert_false(out.committed);
    assert_false(out.planned);
    rsp_stats after = stats(pool);
    assert_int_equal(after.admits_ok, before.admits_ok);
    assert_int_equal(after.admits_refused, before.admits_refused);
    assert_int_equal(after.commits, before.commits);
    assert_int_equal(after.plans, before.plans);
    assert_int_equal(after.free_slots, before.free_slots);
    assert_int_equal(after.num_requests, before.num_requests);
    assert_int_equal(after.generation, before.generation);
    /* Step 8 was not admitted: step 1 is still the one in flight. */
    assert_int_equal(rsp_plan_wait_step(pool, 8, 0, &err), RSP_ETIMEDOUT);
    assert_int_equal(rsp_plan_wait_step(pool, 1, 0, &err), RSP_OK);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 30, RSP_LABEL_MAIN, &h, &err), RSP_ENOREQ);
    rsp_pool_destroy(pool);
}

/* The commit rule applies to the message's commit (rows wrote, no
 * forward_done: RSP_EINVAL, nothing posted); and the new step must come
 * after the committed one. */
static void the_commit_rule_and_the_order_are_checked_before_posting(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32);
    rsp_error err;
    decl d1, d2;
    make_decl(&d1, 1, 10, 2);
    make_decl(&d2, 2, 10, 2);
    rsp_step_outcome out;
    assert_int_equal(next(pool, &d1, NULL, &out, &err), RSP_OK);
    rsp_stats before = stats(pool);
    /* prev_done NULL, and an empty event, while step 1's rows wrote. */
    assert_int_equal(rsp_step_next(pool, &d2.step, &d1.step, NULL, &out, &err), RSP_EINVAL);
    assert_true(contains(err.message, "prev (step 1)"));
    assert_true(contains(err.message, "wrote"));
    rsp_event none = {0};
    assert_int_equal(rsp_step_next(pool, &d2.step, &d1.step, &none, &out, &err), RSP_EINVAL);
    assert_false(out.committed || out.planned);
    /* An event the host device cannot wait on. */
    int not_a_fence;
    rsp_event cuda = rsp_event_cuda(&not_a_fence);
    assert_int_equal(rsp_step_next(pool, &d2.step, &d1.step, &cuda, &out, &err), RSP_EINVAL);
    /* The new step's id is not above the committed one's. */
    rsp_event done = rsp_event_complete();
    assert_int_equal(rsp_step_next(pool, &d1.step, &d1.step, &done, &out, &err), RSP_EINVAL);
    assert_true(contains(err.message, "is not above prev.step_id"));
    /* An invalid new step (a row's label not interned). */
    decl bad;
    make_decl(&bad, 2, 10, 1);
    bad.rows[0].label = 9;
    assert_int_equal(rsp_step_next(pool, &bad.step, &d1.step, &done, &out, &err), RSP_ENOLABEL);
    assert_int_equal(rsp_step_next(pool, NULL, &d1.step, &done, &out, &err), RSP_EINVAL);
    /* Nothing was posted. */
    rsp_stats after = stats(pool);
    assert_int_equal(after.messages_handled, before.messages_handled + 1); /* the stats */
    assert_int_equal(after.commits, 0);
    /* A capture's commit, or rows that did not write, need no event. */
    decl pad2;
    make_decl(&pad2, 2, 10, 2);
    pad2.rows[0].span = 0;
    pad2.rows[1].padding = true;
    assert_int_equal(rsp_step_next(pool, &pad2.step, &d1.step, &done, &out, &err), RSP_OK);
    decl d3;
    make_decl(&d3, 3, 10, 2);
    assert_int_equal(rsp_step_next(pool, &d3.step, &pad2.step, NULL, &out, &err), RSP_OK);
    assert_true(out.committed && out.planned);
    rsp_pool_destroy(pool);
}

/* A full pool after a successful commit: the commit stands, nothing is
 * planned, RSP_OK with admit.ok false. */
static void a_full_pool_keeps_the_commit(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(5); /* 4 usable slots */
    rsp_error err;
    decl d1, d2;
    make_decl(&d1, 1, 10, 3);
    make_decl(&d2, 2, 20, 3); /* 3 more rids: only 1 slot free */
    rsp_step_outcome out;
    assert_int_equal(next(pool, &d1, NULL, &out, &err), RSP_OK);
    assert_int_equal(next(pool, &d2, &d1, &out, &err), RSP_OK);
    assert_true(out.committed);
    assert_false(out.admit.ok);
    assert_false(out.planned);
    assert_int_equal(out.admit.slots_short, 2);
    rsp_stats s = stats(pool);
    assert_int_equal(s.commits, 1);
    assert_int_equal(s.plans, 1);
    assert_int_equal(s.admits_refused, 1);
    assert_int_equal(rsp_plan_wait_step(pool, 2, 0, &err), RSP_ENOPLAN);
    assert_int_equal(rsp_plan_wait_step(pool, 1, 0, &err), RSP_ENOPLAN); /* committed */
    /* Free the rids of step 1: step 2 fits when retried, with no commit. */
    rsp_rid old[3] = {10, 11, 12};
    assert_int_equal(rsp_remove_many(pool, old, 3, &err), RSP_OK);
    assert_int_equal(next(pool, &d2, NULL, &out, &err), RSP_OK);
    assert_true(out.planned && !out.committed);
    rsp_pool_destroy(pool);
}

/* A plan refusal rolls the admit back (the new step is as before the
 * message), the error names the plan, and the commit stands. */
static void a_plan_refusal_rolls_the_admit_back(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32);
    rsp_error err;
    decl d1, d2, d3;
    make_decl(&d1, 1, 10, 2);
    make_decl(&d2, 2, 20, 2);
    make_decl(&d3, 3, 30, 3);
    rsp_step_outcome out;
    /* Step 1 staged (preplan): a second stage is RSP_ESTAGED at plan. */
    d1.step.preplan = true;
    assert_int_equal(next(pool, &d1, NULL, &out, &err), RSP_OK);
    assert_true(out.planned && out.plan_staged);
    d2.step.preplan = true;
    rsp_stats before = stats(pool);
    rsp_status st2 = next(pool, &d2, NULL, &out, &err);
    assert_int_equal(st2, RSP_ESTAGED);
    assert_true(contains(err.message, "the plan of step 2 was refused"));
    assert_true(contains(err.message, "rolled back"));
    assert_true(out.admit.ok);
    assert_false(out.planned || out.committed);
    rsp_stats after = stats(pool);
    assert_int_equal(after.free_slots, before.free_slots);
    assert_int_equal(after.held_slots, before.held_slots);
    assert_int_equal(after.stages, before.stages);
    assert_int_equal(after.rollbacks, before.rollbacks + 1);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 20, RSP_LABEL_MAIN, &h, &err), RSP_ENOREQ);
    assert_int_equal(rsp_plan_wait_step(pool, 2, 0, &err), RSP_ENOPLAN);
    /* Step 1's stage is untouched; promote it, then commit it in a STEP
     * whose new step is refused at plan the same way: the commit stands. */
    d1.step.preplan = false;
    assert_int_equal(rsp_step_plan(pool, &d1.step, &err), RSP_OK);
    rsp_admit_outcome ad;
    decl s5;
    make_decl(&s5, 2, 50, 1); /* the rolled-back id, retried */
    s5.step.preplan = true;
    assert_int_equal(rsp_step_admit(pool, &s5.step, &ad, &err), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s5.step, &err), RSP_OK); /* a stage again */
    d3.step.preplan = true;
    assert_int_equal(next(pool, &d3, &d1, &out, &err), RSP_ESTAGED);
    assert_true(out.committed);
    assert_true(contains(err.message, "the commit of step 1 stands"));
    assert_int_equal(rsp_plan_wait_step(pool, 3, 0, &err), RSP_ENOPLAN);
    assert_int_equal(rsp_holding_get(pool, 30, RSP_LABEL_MAIN, &h, &err), RSP_ENOREQ);
    assert_int_equal(stats(pool).commits, 1);
    /* A rolled-back id may be retried once the stage is gone. */
    assert_int_equal(rsp_step_unstage(pool, &err), RSP_OK);
    assert_int_equal(next(pool, &d3, NULL, &out, &err), RSP_OK);
    assert_true(out.planned && out.plan_staged);
    rsp_pool_destroy(pool);
}

/* The step a STEP admits must be new; an admit error after the commit
 * leaves the commit standing. */
static void an_admit_error_keeps_the_commit(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32);
    rsp_error err;
    decl d1, d2, dup;
    make_decl(&d1, 1, 10, 2);
    make_decl(&d2, 2, 20, 2);
    rsp_step_outcome out;
    assert_int_equal(next(pool, &d1, NULL, &out, &err), RSP_OK);
    rsp_admit_outcome ad;
    assert_int_equal(rsp_step_admit(pool, &d2.step, &ad, &err), RSP_OK);
    /* Step 2 is in flight already. */
    assert_int_equal(next(pool, &d2, &d1, &out, &err), RSP_EORDER);
    assert_true(contains(err.message, "already in flight"));
    assert_true(contains(err.message, "the commit of step 1 stands"));
    assert_true(out.committed);
    assert_false(out.planned);
    assert_int_equal(stats(pool).commits, 1);
    /* Step 2 is still admitted, not planned: plan it the usual way. */
    assert_int_equal(rsp_step_plan(pool, &d2.step, &err), RSP_OK);
    /* A duplicate row (owner-side check) after a good commit. */
    make_decl(&dup, 3, 30, 2);
    dup.rows[1].rid = 30;
    assert_int_equal(next(pool, &dup, &d2, &out, &err), RSP_EDUPROW);
    assert_true(contains(err.message, "the admit of step 3"));
    assert_true(out.committed);
    assert_int_equal(stats(pool).commits, 2);
    assert_int_equal(stats(pool).admits_refused, 0);
    rsp_pool_destroy(pool);
}

#define MAX_SEEN 8
typedef struct seen_failures {
    uint32_t n; /* owner writes; main reads after a barrier */
    rsp_status status[MAX_SEEN];
    rsp_msg_kind kind[MAX_SEEN];
    uint64_t step_id[MAX_SEEN];
    bool has_step[MAX_SEEN];
} seen_failures;

static void record_failure(void *ctx, const rsp_failure *f)
{
    seen_failures *s = ctx;
    if (s->n < MAX_SEEN) {
        s->status[s->n] = f->status;
        s->kind[s->n] = f->kind;
        s->step_id[s->n] = f->step_id;
        s->has_step[s->n] = f->has_step;
    }
    s->n++;
}

/* Pipelined: STEP posted fire-and-forget, each plan read per step with
 * rsp_plan_wait_step; failures nobody reads go to on_error naming the step
 * they are about (the commit's, or the new step's). One seq a message. */
static void pipelined_steps_and_their_failures(void **state)
{
    (void)state;
    seen_failures seen;
    memset(&seen, 0, sizeof seen);
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.on_error = record_failure;
    cfg.on_error_ctx = &seen;
    cfg.ordered = true;
    rsp_pool *pool = make_pool_cfg(&cfg);
    rsp_error err;
    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    decl d[5];
    uint64_t seq = 0;
    for (uint64_t k = 1; k <= 4; k++) {
        make_decl(&d[k], k, 10, 2);
        rsp_msg m = {.kind = RSP_MSG_STEP, .step = d[k].step, .seq = ++seq};
        if (k > 1) {
            m.commit = &d[k - 1].step;
            m.event = rsp_event_complete();
        }
        assert_int_equal(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), RSP_OK);
        assert_int_equal(rsp_plan_wait_step(pool, k, RSP_WAIT_FOREVER, &err), RSP_OK);
        int32_t slot = -1;
        bool has = false;
        assert_int_not_equal(plan_digest_of(pool, k, &slot, &has), 0);
        assert_int_equal(has, k > 1);
    }
    /* The sync wrapper carries no seq: refused in an ordered pool. */
    rsp_step_outcome out;
    assert_int_equal(next(pool, &d[4], NULL, &out, &err), RSP_EINVAL);
    /* Fire-and-forget failures: a commit of a step not in flight (9), and a
     * new step refused at plan (a second stage). */
    decl d9, d10, d11, d12;
    make_decl(&d9, 9, 90, 1);
    make_decl(&d10, 10, 100, 1);
    rsp_msg bad_commit = {.kind = RSP_MSG_STEP,
                          .step = d10.step,
                          .commit = &d9.step,
                          .event = rsp_event_complete(),
                          .seq = ++seq};
    assert_int_equal(rsp_post(pool, &bad_commit, NULL, RSP_WAIT_FOREVER, &err), RSP_OK);
    make_decl(&d11, 11, 110, 1);
    d11.step.preplan = true;
    rsp_msg stage = {.kind = RSP_MSG_STEP,
                     .step = d11.step,
                     .commit = &d[4].step,
                     .event = rsp_event_complete(),
                     .seq = ++seq};
    assert_int_equal(rsp_post(pool, &stage, NULL, RSP_WAIT_FOREVER, &err), RSP_OK);
    make_decl(&d12, 12, 120, 1);
    d12.step.preplan = true;
    rsp_msg refused = {.kind = RSP_MSG_STEP, .step = d12.step, .seq = ++seq};
    assert_int_equal(rsp_post(pool, &refused, NULL, RSP_WAIT_FOREVER, &err), RSP_OK);
    rsp_msg barrier = {.kind = RSP_MSG_BARRIER, .seq = ++seq};
    rsp_ticket *t = NULL;
    assert_int_equal(rsp_post(pool, &barrier, &t, RSP_WAIT_FOREVER, &err), RSP_OK);
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.kind[0], RSP_MSG_STEP);
    assert_int_equal(seen.status[0], RSP_EORDER);
    assert_true(seen.has_step[0]);
    assert_int_equal(seen.step_id[0], 9);
    assert_int_equal(seen.status[1], RSP_ESTAGED);
    assert_int_equal(seen.step_id[1], 12);
    assert_int_equal(rsp_stats_peek(pool, &(rsp_stats){0}, &err), RSP_OK);
    rsp_stats s;
    assert_int_equal(rsp_stats_peek(pool, &s, &err), RSP_OK);
    assert_int_equal(s.posts_failed, 2);
    assert_int_equal(s.commits, 4);
    assert_int_equal(rsp_plan_wait_step(pool, 12, 0, &err), RSP_ENOPLAN);
    /* Step 11 is in flight with a staged plan only: waited for. */
    assert_int_equal(rsp_plan_wait_step(pool, 11, 0, &err), RSP_ETIMEDOUT);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

/* A STEP's host fence is held from the post (the caller may destroy its
 * handle at once), and the commit's zeroing waits for it. */
static void the_commits_host_fence_is_referenced(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32);
    rsp_error err;
    rsp_host_fence *fence;
    assert_int_equal(rsp_host_fence_create(&fence, &err), RSP_OK);
    decl d1, d2;
    make_decl(&d1, 1, 10, 2);
    make_decl(&d2, 2, 20, 2);
    rsp_step_outcome out;
    assert_int_equal(next(pool, &d1, NULL, &out, &err), RSP_OK);
    rsp_event ev = rsp_event_host(fence, 1);
    rsp_msg m = {.kind = RSP_MSG_STEP, .step = d2.step, .commit = &d1.step, .event = ev};
    rsp_ticket *t = NULL;
    assert_int_equal(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, &err), RSP_OK);
    rsp_host_fence_signal(fence, 1);
    rsp_host_fence_destroy(fence); /* the post holds its own reference */
    rsp_reply r;
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, &r), RSP_OK);
    assert_true(r.committed && r.planned && r.admit.ok);
    assert_int_equal(r.plan_step_id, 2);
    rsp_close_report rep;
    assert_int_equal(rsp_pool_close_timed(pool, RSP_WAIT_FOREVER, &rep, &err), RSP_OK);
    assert_true(rep.closed);
}

/* ------------------------------------------------------------------------ */
/* Vector messages                                                           */
/* ------------------------------------------------------------------------ */

static void ingest_many_is_one_message_all_or_nothing(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32);
    rsp_error err;
    rsp_rid rids[64];
    for (uint32_t i = 0; i < 64; i++)
        rids[i] = 1000 + 7 * i;
    rsp_stats before = stats(pool);
    assert_int_equal(rsp_ingest_many(pool, rids, 64, &err), RSP_OK);
    rsp_stats after = stats(pool);
    assert_int_equal(after.num_requests, 64);
    assert_int_equal(after.messages_handled, before.messages_handled + 2); /* +stats */
    /* Idempotent per rid: an existing rid is left as it is. */
    assert_int_equal(rsp_ingest_many(pool, rids, 10, &err), RSP_OK);
    assert_int_equal(stats(pool).num_requests, 64);
    /* A rid listed twice: refused as a whole, naming the rid and both
     * indices; the new rids before it were not ingested. */
    rsp_rid dup[4] = {5, 6, 7, 6};
    assert_int_equal(rsp_ingest_many(pool, dup, 4, &err), RSP_EINVAL);
    assert_true(contains(err.message, "rids[3] (rid 6) repeats rids[1]"));
    assert_true(contains(err.message, "nothing changed"));
    assert_int_equal(stats(pool).num_requests, 64);
    /* n == 0: nothing posted; NULL rids; past the bound. */
    uint64_t handled = stats(pool).messages_handled;
    assert_int_equal(rsp_ingest_many(pool, NULL, 0, &err), RSP_OK);
    assert_int_equal(rsp_ingest_many(pool, NULL, 3, &err), RSP_EINVAL);
    assert_true(contains(err.message, "rids is NULL"));
    assert_int_equal(rsp_ingest_many(pool, rids, RSP_MAX_MSG_RIDS + 1, &err), RSP_EINVAL);
    assert_true(contains(err.message, "RSP_MAX_MSG_RIDS"));
    assert_int_equal(stats(pool).messages_handled, handled + 1);
    /* Posted: rid is ignored when the list is there. */
    rsp_rid two[2] = {1, 2};
    rsp_msg m = {.kind = RSP_MSG_INGEST, .rid = 3, .rids = two, .num_rids = 2};
    assert_int_equal(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), RSP_OK);
    two[0] = 99; /* copied by the post */
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK);
    assert_int_equal(stats(pool).num_requests, 66);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &h, &err), RSP_ENOREQ);
    assert_true(contains(err.message, "holds no slot")); /* rid 1 exists */
    assert_int_equal(rsp_holding_get(pool, 3, RSP_LABEL_MAIN, &h, &err), RSP_ENOREQ);
    assert_true(contains(err.message, "does not exist"));
    rsp_pool_destroy(pool);
}

/* Admit rids [base, base + n) with a one-step round and commit it. */
static void hold(rsp_pool *pool, uint64_t id, rsp_rid base, uint32_t n)
{
    decl d;
    make_decl(&d, id, base, n);
    rsp_step_outcome out;
    rsp_error err;
    assert_int_equal(next(pool, &d, NULL, &out, &err), RSP_OK);
    rsp_event done = rsp_event_complete();
    assert_int_equal(rsp_step_commit(pool, &d.step, &done, &err), RSP_OK);
}

static void remove_and_reset_many(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32);
    rsp_error err;
    hold(pool, 1, 10, 6); /* rids 10..15 hold a slot each, has_state true */
    rsp_stats s = stats(pool);
    assert_int_equal(s.held_slots, 6);
    /* A repeat refuses the whole list: nothing removed. */
    rsp_rid dup[3] = {10, 11, 10};
    assert_int_equal(rsp_remove_many(pool, dup, 3, &err), RSP_EINVAL);
    assert_true(contains(err.message, "rids[2] (rid 10) repeats rids[0]"));
    assert_int_equal(rsp_reset_many(pool, dup, 3, true, &err), RSP_EINVAL);
    assert_int_equal(stats(pool).held_slots, 6);
    assert_int_equal(stats(pool).num_requests, 6);
    /* Reset, keeping the slots: has_state false, same slots. */
    rsp_holding before, after;
    assert_int_equal(rsp_holding_get(pool, 12, RSP_LABEL_MAIN, &before, &err), RSP_OK);
    assert_true(before.has_state);
    rsp_rid keep[2] = {12, 13};
    assert_int_equal(rsp_reset_many(pool, keep, 2, false, &err), RSP_OK);
    assert_int_equal(rsp_holding_get(pool, 12, RSP_LABEL_MAIN, &after, &err), RSP_OK);
    assert_false(after.has_state);
    assert_int_equal(after.index, before.index);
    assert_int_equal(stats(pool).held_slots, 6);
    /* Reset freeing them: the requests stay, the slots go. */
    assert_int_equal(rsp_reset_many(pool, keep, 2, true, &err), RSP_OK);
    s = stats(pool);
    assert_int_equal(s.held_slots, 4);
    assert_int_equal(s.num_requests, 6);
    /* Remove, unknown rids included (no-ops). */
    rsp_rid gone[4] = {10, 11, 777, 12};
    assert_int_equal(rsp_remove_many(pool, gone, 4, &err), RSP_OK);
    s = stats(pool);
    assert_int_equal(s.held_slots, 2);
    assert_int_equal(s.num_requests, 3);
    assert_int_equal(s.free_slots, 29);
    rsp_pool_destroy(pool);
}

/* A rid an in-flight step names: as the single form, its slot is zeroed
 * and freed when the step ends. Same state as the single forms give. */
static void many_defers_like_the_single_forms(void **state)
{
    (void)state;
    rsp_pool *a = make_pool(32), *b = make_pool(32);
    rsp_error err;
    rsp_pool *pools[2] = {a, b};
    decl d;
    make_decl(&d, 1, 10, 4);
    for (int i = 0; i < 2; i++) {
        rsp_step_outcome out;
        assert_int_equal(next(pools[i], &d, NULL, &out, &err), RSP_OK);
    }
    rsp_rid rids[3] = {11, 13, 50};
    assert_int_equal(rsp_remove_many(a, rids, 3, &err), RSP_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rsp_remove(b, rids[i], &err), RSP_OK);
    rsp_stats sa = stats(a), sb = stats(b);
    assert_int_equal(sa.pending_release, 2);
    assert_int_equal(sa.pending_release, sb.pending_release);
    assert_int_equal(sa.free_slots, sb.free_slots);
    rsp_event done = rsp_event_complete();
    for (int i = 0; i < 2; i++)
        assert_int_equal(rsp_step_commit(pools[i], &d.step, &done, &err), RSP_OK);
    sa = stats(a);
    sb = stats(b);
    assert_int_equal(sa.pending_release, 0);
    assert_int_equal(sa.free_slots, sb.free_slots);
    assert_int_equal(sa.generation, sb.generation);
    /* The next plans agree (free stack order included). */
    decl d2;
    make_decl(&d2, 2, 60, 3);
    uint64_t dig[2];
    for (int i = 0; i < 2; i++) {
        rsp_step_outcome out;
        assert_int_equal(next(pools[i], &d2, NULL, &out, &err), RSP_OK);
        dig[i] = out.plan_digest;
    }
    assert_int_equal(dig[0], dig[1]);
    /* Reset (keep) of a rid a planned step addresses, vector and single. */
    rsp_rid r60[2] = {60, 61};
    assert_int_equal(rsp_reset_many(a, r60, 2, false, &err), RSP_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rsp_reset(b, r60[i], false, &err), RSP_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(rsp_step_commit(pools[i], &d2.step, &done, &err), RSP_OK);
    rsp_holding ha, hb;
    assert_int_equal(rsp_holding_get(a, 60, RSP_LABEL_MAIN, &ha, &err), RSP_OK);
    assert_int_equal(rsp_holding_get(b, 60, RSP_LABEL_MAIN, &hb, &err), RSP_OK);
    assert_int_equal(ha.has_state, hb.has_state);
    assert_int_equal(ha.generation, hb.generation);
    assert_int_equal(stats(a).bytes_zeroed, stats(b).bytes_zeroed);
    rsp_pool_destroy(a);
    rsp_pool_destroy(b);
}

/* Memory for one rid's slot, not for more: a list applied rid by rid
 * would get through (and be half done if a later rid failed). */
static rsp_status refuse_reserve(void *ctx, const rsp__ext_need *need, rsp_error *err)
{
    uint32_t *asked = ctx;
    (*asked)++;
    if (need->slots <= 1)
        return RSP_OK;
    return rsp__fail(err, RSP_ENOMEM, "reserve refused (test)");
}

/* The core's vector entry point: too little memory for the whole list (the
 * reserve hook, asked once for the list, refuses) changes nothing, not
 * even the rids before the one that would not fit. */
static void lifecycle_many_reserves_for_the_whole_list_first(void **state)
{
    (void)state;
    rsp_pool_config cfg;
    small_pool_config(&cfg, 16);
    rsp__core *core;
    rsp_error err;
    assert_int_equal(rsp__core_create(&cfg, &core, &err), RSP_OK);
    rsp__work w;
    rsp__work_init(&w);
    rsp_row rows[3] = {{.rid = 1, .span = 1}, {.rid = 2, .span = 1}, {.rid = 3, .span = 1}};
    rsp_step step = {.step_id = 1, .rows = rows, .num_rows = 3};
    rsp_admit_outcome out;
    assert_int_equal(rsp__core_admit(core, &step, &out, &w, &err), RSP_OK);
    assert_true(out.ok);
    rsp__plan_out po;
    assert_int_equal(rsp__core_plan(core, &step, &po, &w, &err), RSP_OK);
    assert_int_equal(rsp__core_commit(core, &step, NULL, &w, NULL, &err), RSP_OK);
    rsp__work_clear(&w);
    rsp_stats before = {0}, after = {0};
    rsp__core_stats(core, &before);
    uint32_t asked = 0;
    rsp__core_set_reserve_hook(core, refuse_reserve, &asked);
    const rsp_rid rids[4] = {1, 2, 9, 3};
    for (rsp__lifecycle_op op = RSP__LC_RESET; op <= RSP__LC_REMOVE; op++) {
        assert_int_equal(rsp__core_lifecycle_many(core, op, rids, 4, true, &w, &err), RSP_ENOMEM);
        rsp__core_stats(core, &after);
        assert_int_equal(after.held_slots, before.held_slots);
        assert_int_equal(after.free_slots, before.free_slots);
        assert_int_equal(after.num_requests, before.num_requests);
        assert_int_equal(after.generation, before.generation);
        assert_true(rsp__work_empty(&w));
    }
    assert_int_equal(asked, 2); /* once a list, not once a rid */
    /* A repeat is refused before the hook is asked. */
    const rsp_rid dup[3] = {1, 2, 1};
    assert_int_equal(rsp__core_lifecycle_many(core, RSP__LC_REMOVE, dup, 3, false, &w, &err),
                     RSP_EINVAL);
    assert_int_equal(asked, 2);
    rsp__core_set_reserve_hook(core, NULL, NULL);
    assert_int_equal(rsp__core_lifecycle_many(core, RSP__LC_REMOVE, rids, 4, false, &w, &err),
                     RSP_OK);
    rsp__core_stats(core, &after);
    assert_int_equal(after.held_slots, 0);
    assert_int_equal(after.num_requests, 0);
    rsp__work_fini(&w);
    rsp__core_destroy(core);
}

/* Device work that fails after the plan changed the core breaks the pool
 * (as for RSP_MSG_PLAN): the answer names the message and its new step, no
 * rollback is tried, and later messages get RSP_EDEVICE. */
static void a_failure_after_the_change_breaks_the_pool(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32);
    rsp_error err;
    decl d1, d2;
    make_decl(&d1, 1, 10, 2);
    make_decl(&d2, 2, 10, 2);
    rsp_step_outcome out;
    assert_int_equal(next(pool, &d1, NULL, &out, &err), RSP_OK);
    /* Steady rows: the commit and the admit submit nothing; the plan's
     * submit (its ready event) is the first, and it fails. */
    rsp__pool_inject_submit_failures(pool, 1);
    assert_int_equal(next(pool, &d2, &d1, &out, &err), RSP_EDEVICE);
    assert_true(contains(err.message, "message step of step 2"));
    assert_true(out.committed);
    assert_false(out.planned);
    decl d3;
    make_decl(&d3, 3, 10, 2);
    assert_int_equal(next(pool, &d3, NULL, &out, &err), RSP_EDEVICE);
    assert_true(contains(err.message, "the pool is broken"));
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* Random sequences: one trip against three                                 */
/* ------------------------------------------------------------------------ */

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

#define RND_RIDS 10
#define RND_MAX_IN_FLIGHT 4 /* the pools' max_inflight_steps (the default) */

/* A random declaration: rows of main and draft, now and then a repeated
 * pair (RSP_EDUPROW), forks main -> draft before and draft -> main after,
 * a staged plan. */
static void random_decl(decl *d, uint64_t id, uint64_t *x, rsp_label_id draft, rsp_fork *pre,
                        rsp_fork *post)
{
    uint32_t n = 1 + (uint32_t)(lcg(x) % 6);
    for (uint32_t i = 0; i < n; i++)
        d->rows[i] = (rsp_row){.rid = 1 + lcg(x) % RND_RIDS,
                               .label = lcg(x) % 3 == 0 ? draft : RSP_LABEL_MAIN,
                               .span = lcg(x) % 5 == 0 ? 0 : 1};
    d->step = (rsp_step){.step_id = id, .rows = d->rows, .num_rows = n};
    d->step.preplan = lcg(x) % 6 == 0;
    *pre = (rsp_fork){.from = RSP_LABEL_MAIN, .to = draft};
    *post = (rsp_fork){.from = draft, .to = RSP_LABEL_MAIN};
    if (lcg(x) % 4 == 0) {
        d->step.pre_forks = pre;
        d->step.num_pre_forks = 1;
    }
    if (lcg(x) % 4 == 0) {
        d->step.post_forks = post;
        d->step.num_post_forks = 1;
    }
}

/* What the three wrappers answer for the same message: the first failing
 * status, and what was done. */
static rsp_status three_trips(rsp_pool *pool, const rsp_step *step, const rsp_step *prev,
                              rsp_step_outcome *out)
{
    rsp_error err;
    rsp_event done = rsp_event_complete();
    memset(out, 0, sizeof *out);
    if (prev) {
        rsp_status st = rsp_step_commit(pool, prev, &done, &err);
        if (st != RSP_OK)
            return st;
        out->committed = true;
    }
    rsp_read_begin();
    const bool in_flight = rsp_plan_of_step(pool, step->step_id) != NULL;
    rsp_read_end();
    if (in_flight)
        return RSP_EORDER;
    rsp_status st = rsp_step_admit(pool, step, &out->admit, &err);
    if (st != RSP_OK || !out->admit.ok)
        return st;
    st = rsp_step_plan(pool, step, &err);
    if (st != RSP_OK) {
        assert_int_equal(rsp_step_rollback(pool, step->step_id, NULL, &err), RSP_OK);
        return st;
    }
    out->planned = true;
    return RSP_OK;
}

static void same_state(rsp_pool *a, rsp_pool *b, uint64_t k)
{
    rsp_stats sa = stats(a), sb = stats(b);
    if (sa.free_slots != sb.free_slots || sa.held_slots != sb.held_slots ||
        sa.pending_release != sb.pending_release || sa.num_requests != sb.num_requests ||
        sa.generation != sb.generation || sa.commits != sb.commits)
        fail_msg("step %llu: the pools differ (free %u/%u held %u/%u pending %u/%u requests "
                 "%u/%u generation %llu/%llu commits %llu/%llu)",
                 (unsigned long long)k, sa.free_slots, sb.free_slots, sa.held_slots, sb.held_slots,
                 sa.pending_release, sb.pending_release, sa.num_requests, sb.num_requests,
                 (unsigned long long)sa.generation, (unsigned long long)sb.generation,
                 (unsigned long long)sa.commits, (unsigned long long)sb.commits);
}

/* Random steps, rsp_step_next on one pool and commit + admit + plan (and
 * the rollback of a refused plan) on the other: the same statuses, the same
 * outcomes, the same plans (digests) and the same pool after every step;
 * now and then a step is left in flight without its commit (so admits run
 * into max_inflight_steps and stages into each other) or the rids go in a
 * vector remove. */
static void random_steps_one_trip_equals_three(void **state)
{
    (void)state;
    rsp_pool *a = make_pool(12), *b = make_pool(12);
    rsp_error err;
    rsp_label_id draft;
    assert_int_equal(rsp_label(a, "draft", &draft, &err), RSP_OK);
    assert_int_equal(rsp_label(b, "draft", &draft, &err), RSP_OK);
    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    uint64_t x = 12345, flight[RND_MAX_IN_FLIGHT + 8];
    uint32_t nflight = 0, counts[6] = {0};
    decl cur, kept; /* this step's declaration; the one in flight to commit */
    rsp_fork forks[2], kept_forks[2];
    const decl *prev = NULL;
    uint32_t shared = 0;
    for (uint64_t k = 1; k <= 400; k++) {
        decl *d = &cur;
        random_decl(d, k, &x, draft, &forks[0], &forks[1]);
        const bool commit = prev && lcg(&x) % 5 != 0;
        if (commit && lcg(&x) % 3 == 0) {
            /* A steady step: the rows of the step it commits, the very
             * array (the message carries them once; the owner compares
             * them once), or a prefix of it (carried twice). */
            memcpy(cur.rows, prev->rows, sizeof cur.rows);
            d->step.rows = prev->rows;
            d->step.num_rows = prev->step.num_rows;
            if (lcg(&x) % 4 == 0 && d->step.num_rows > 1)
                d->step.num_rows--;
            else
                shared++;
        }
        rsp_step_outcome oa, ob;
        rsp_event done = rsp_event_complete();
        rsp_status sa = rsp_step_next(a, &d->step, commit ? &prev->step : NULL, &done, &oa, &err);
        rsp_status sb = three_trips(b, &d->step, commit ? &prev->step : NULL, &ob);
        if (sa != sb)
            fail_msg("step %llu: one trip %s (%s), three trips %s", (unsigned long long)k,
                     rsp_strerror(sa), err.message, rsp_strerror(sb));
        assert_int_equal(oa.committed, ob.committed);
        assert_int_equal(oa.planned, ob.planned);
        assert_int_equal(oa.admit.ok, ob.admit.ok);
        counts[sa == RSP_OK          ? (oa.planned ? 0 : 1)
               : sa == RSP_ECAPACITY ? 2
               : sa == RSP_ESTAGED   ? 3
               : sa == RSP_EDUPROW   ? 4
                                     : 5]++;
        if (sa != RSP_OK && sa != RSP_ECAPACITY && sa != RSP_ESTAGED && sa != RSP_EDUPROW &&
            counts[5] <= 3)
            print_message("step %llu: %s\n", (unsigned long long)k, err.message);
        if (oa.planned && !oa.plan_staged) {
            uint64_t gb = plan_digest_of(b, k, NULL, NULL);
            assert_int_equal(oa.plan_digest, gb);
            assert_int_equal(plan_digest_of(a, k, NULL, NULL), gb);
        }
        if (oa.committed) {
            for (uint32_t i = 0; i < nflight; i++)
                if (flight[i] == prev->step.step_id)
                    flight[i] = flight[--nflight];
        }
        same_state(a, b, k);
        if (oa.planned) {
            flight[nflight++] = k;
            kept = cur; /* the step keeps pointing at kept's own arrays */
            kept_forks[0] = forks[0];
            kept_forks[1] = forks[1];
            kept.step.rows = kept.rows;
            kept.step.pre_forks = cur.step.num_pre_forks ? &kept_forks[0] : NULL;
            kept.step.post_forks = cur.step.num_post_forks ? &kept_forks[1] : NULL;
            prev = &kept;
        } else if (oa.committed) {
            prev = NULL;
        }
        /* Now and then: roll everything in flight back, or remove rids. */
        if ((nflight >= RND_MAX_IN_FLIGHT && lcg(&x) % 4 == 0) || lcg(&x) % 25 == 0) {
            for (uint32_t i = 0; i < nflight; i++) {
                assert_int_equal(rsp_step_rollback(a, flight[i], &done, &err), RSP_OK);
                assert_int_equal(rsp_step_rollback(b, flight[i], &done, &err), RSP_OK);
            }
            nflight = 0;
            prev = NULL;
        }
        if (lcg(&x) % 10 == 0) {
            rsp_rid gone[2] = {1 + lcg(&x) % RND_RIDS, 0};
            gone[1] = gone[0] % RND_RIDS + 1;
            assert_int_equal(rsp_remove_many(a, gone, 2, &err), RSP_OK);
            assert_int_equal(rsp_remove(b, gone[0], &err), RSP_OK);
            assert_int_equal(rsp_remove(b, gone[1], &err), RSP_OK);
        }
        same_state(a, b, k);
    }
    /* Every outcome was met: planned, refused by a full pool, too many in
     * flight, a second stage, a duplicate row, and some other error. */
    print_message("planned %u, full %u, ecapacity %u, estaged %u, eduprow %u, other %u; %u "
                  "messages shared their rows\n",
                  counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], shared);
    assert_true(shared > 20);
    for (int i = 0; i < 5; i++)
        assert_true(counts[i] > 0);
    rsp_reader_unregister();
    rsp_pool_destroy(a);
    rsp_pool_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(step_next_equals_three_round_trips),
        cmocka_unit_test(a_failed_commit_stops_the_message),
        cmocka_unit_test(the_commit_rule_and_the_order_are_checked_before_posting),
        cmocka_unit_test(a_full_pool_keeps_the_commit),
        cmocka_unit_test(a_plan_refusal_rolls_the_admit_back),
        cmocka_unit_test(an_admit_error_keeps_the_commit),
        cmocka_unit_test(pipelined_steps_and_their_failures),
        cmocka_unit_test(the_commits_host_fence_is_referenced),
        cmocka_unit_test(ingest_many_is_one_message_all_or_nothing),
        cmocka_unit_test(remove_and_reset_many),
        cmocka_unit_test(many_defers_like_the_single_forms),
        cmocka_unit_test(lifecycle_many_reserves_for_the_whole_list_first),
        cmocka_unit_test(a_failure_after_the_change_breaks_the_pool),
        cmocka_unit_test(random_steps_one_trip_equals_three),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
