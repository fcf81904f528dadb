/*
 * Per-step plans (rsp_plan_of_step, rsp_plan_wait_step) and failures that do
 * not vanish (posts_failed, on_error, forward_waits, rsp_pool_close_timed,
 * the commit's forward_done rule, rsp_ticket_forget, rsp_read_explain,
 * messages naming the caller's argument).
 * Worker threads record; the main thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "pool.h" /* pool->pub: rsp__publisher_waiters */

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

static rsp_pool *make_pool(uint32_t max_slots, uint32_t inflight)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.max_slots = max_slots;
    cfg.max_inflight_steps = inflight;
    return make_pool_cfg(&cfg);
}

/* Step k of the pipelined test: k + 1 rows, rids 100 k .. 100 k + k. */
#define STEPS 4
static rsp_row step_rows[STEPS + 1][STEPS + 1];

static rsp_step make_step(uint64_t id)
{
    for (uint32_t i = 0; i <= id; i++)
        step_rows[id][i] = (rsp_row){.rid = 100 * id + i, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = id, .rows = step_rows[id], .num_rows = (uint32_t)id + 1};
    return s;
}

static void admit_and_plan(rsp_pool *pool, const rsp_step *s)
{
    rsp_error err;
    rsp_admit_outcome out;
    assert_int_equal(rsp_step_admit(pool, s, &out, &err), RSP_OK);
    assert_true(out.ok);
    assert_int_equal(rsp_step_plan(pool, s, &err), RSP_OK);
}

static void commit_done(rsp_pool *pool, const rsp_step *s)
{
    rsp_event done = rsp_event_complete();
    rsp_error err;
    rsp_status st = rsp_step_commit(pool, s, &done, &err);
    if (st != RSP_OK)
        print_error("commit: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
}

/* ------------------------------------------------------------------------ */
/* Per-step plans                                                            */
/* ------------------------------------------------------------------------ */

typedef struct step_reader {
    rsp_pool *pool;
    uint64_t step;
    /* Recorded by the thread, asserted by main. */
    rsp_status wait_own, wait_last;
    uint64_t got_first, got_later, live_later;
    uint32_t rows_first, rows_later;
    int32_t slots_first[STEPS + 1], slots_later[STEPS + 1];
    bool in_section_null; /* rsp_plan_of_step outside a section is NULL */
} step_reader;

/* Read this thread's step's plan; record its step id and slots. */
static void read_own(step_reader *r, uint64_t *got, uint32_t *rows, int32_t *slots, uint64_t *live)
{
    rsp_read_begin();
    const rsp_plan *plan = rsp_plan_of_step(r->pool, r->step);
    if (plan) {
        *got = rsp_plan_step_id(plan);
        rsp_addressing a;
        if (rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, NULL) == RSP_OK) {
            *rows = a.num_rows;
            for (uint32_t i = 0; i < a.num_rows && i <= STEPS; i++)
                slots[i] = a.slot_indices[i];
        }
    }
    if (live) {
        const rsp_plan *l = rsp_plan_live(r->pool);
        *live = l ? rsp_plan_step_id(l) : 0;
    }
    rsp_read_end();
}

static void *step_reader_main(void *arg)
{
    step_reader *r = arg;
    rsp_reader_register(NULL);
    r->in_section_null = rsp_plan_of_step(r->pool, r->step) == NULL;
    r->wait_own = rsp_plan_wait_step(r->pool, r->step, RSP_WAIT_FOREVER, NULL);
    read_own(r, &r->got_first, &r->rows_first, r->slots_first, NULL);
    /* Once every later step is planned, this step's plan is still its own. */
    r->wait_last = rsp_plan_wait_step(r->pool, STEPS, RSP_WAIT_FOREVER, NULL);
    read_own(r, &r->got_later, &r->rows_later, r->slots_later, &r->live_later);
    rsp_reader_unregister();
    return NULL;
}

static void four_pipelined_steps_each_reader_reads_its_own(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(32, STEPS);
    step_reader readers[STEPS + 1];
    pthread_t th[STEPS + 1];
    /* Readers start first and wait (in any order) for their own step. */
    for (uint64_t k = 1; k <= STEPS; k++) {
        memset(&readers[k], 0, sizeof readers[k]);
        readers[k].pool = pool;
        readers[k].step = k;
        assert_int_equal(pthread_create(&th[k], NULL, step_reader_main, &readers[k]), 0);
    }
    rsp_step steps[STEPS + 1];
    for (uint64_t k = 1; k <= STEPS; k++) {
        steps[k] = make_step(k);
        admit_and_plan(pool, &steps[k]);
    }
    for (uint64_t k = 1; k <= STEPS; k++)
        assert_int_equal(pthread_join(th[k], NULL), 0);
    rsp_error err;
    for (uint64_t k = 1; k <= STEPS; k++) {
        step_reader *r = &readers[k];
        assert_true(r->in_section_null);
        assert_int_equal(r->wait_own, RSP_OK);
        assert_int_equal(r->wait_last, RSP_OK);
        assert_int_equal(r->got_first, k);
        assert_int_equal(r->got_later, k);
        assert_int_equal(r->live_later, STEPS); /* rsp_plan_live: the newest */
        assert_int_equal(r->rows_first, k + 1);
        assert_int_equal(r->rows_later, k + 1);
        for (uint32_t i = 0; i <= k; i++) {
            rsp_holding h;
            assert_int_equal(rsp_holding_get(pool, 100 * k + i, RSP_LABEL_MAIN, &h, &err), RSP_OK);
            assert_int_equal(r->slots_first[i], h.index);
            assert_int_equal(r->slots_later[i], h.index);
        }
    }
    /* Commit in order: each step's plan goes with its commit, the others stay. */
    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    for (uint64_t k = 1; k <= STEPS; k++) {
        commit_done(pool, &steps[k]);
        rsp_read_begin();
        assert_null(rsp_plan_of_step(pool, k));
        for (uint64_t j = k + 1; j <= STEPS; j++) {
            const rsp_plan *p = rsp_plan_of_step(pool, j);
            assert_non_null(p);
            assert_int_equal(rsp_plan_step_id(p), j);
        }
        rsp_read_end();
        assert_int_equal(rsp_plan_wait_step(pool, k, 0, &err), RSP_ENOPLAN);
        assert_non_null(strstr(err.message, "committed"));
        assert_non_null(strstr(err.message, "plan is gone"));
    }
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

static void wait_step_names_rollback_refusal_and_capture(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4, 4); /* 3 usable slots */
    rsp_error err;
    rsp_admit_outcome out;
    rsp_row one[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s = {.step_id = 1, .rows = one, .num_rows = 1};

    /* Not admitted yet: poll times out, nothing is known. */
    assert_int_equal(rsp_plan_wait_step(pool, 1, 0, &err), RSP_ETIMEDOUT);
    /* Admitted, not planned: still waiting. */
    assert_int_equal(rsp_step_admit(pool, &s, &out, &err), RSP_OK);
    assert_int_equal(rsp_plan_wait_step(pool, 1, 0, &err), RSP_ETIMEDOUT);
    /* Rolled back before its plan. */
    assert_int_equal(rsp_step_rollback(pool, 1, NULL, &err), RSP_OK);
    assert_int_equal(rsp_plan_wait_step(pool, 1, 0, &err), RSP_ENOPLAN);
    assert_non_null(strstr(err.message, "step 1 was rolled back before it was planned"));
    /* A rolled-back id may be admitted again: it is in flight once more. */
    admit_and_plan(pool, &s);
    assert_int_equal(rsp_plan_wait_step(pool, 1, 0, &err), RSP_OK);
    /* Rolled back after its plan: withdrawn, and rsp_plan_of_step finds nothing. */
    assert_int_equal(rsp_step_rollback(pool, 1, NULL, &err), RSP_OK);
    assert_int_equal(rsp_plan_wait_step(pool, 1, RSP_WAIT_FOREVER, &err), RSP_ENOPLAN);
    assert_non_null(strstr(err.message, "withdrawn"));
    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    rsp_read_begin();
    assert_null(rsp_plan_of_step(pool, 1));
    rsp_read_end();
    /* A rollback of a step not in flight changes no answer. */
    assert_int_equal(rsp_step_rollback(pool, 77, NULL, &err), RSP_OK);
    assert_int_equal(rsp_plan_wait_step(pool, 77, 0, &err), RSP_ETIMEDOUT);

    /* Refused for want of room (ok false). */
    rsp_row four[4];
    for (uint32_t i = 0; i < 4; i++)
        four[i] = (rsp_row){.rid = 10 + i, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step big = {.step_id = 2, .rows = four, .num_rows = 4};
    assert_int_equal(rsp_step_admit(pool, &big, &out, &err), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(rsp_plan_wait_step(pool, 2, RSP_WAIT_FOREVER, &err), RSP_ENOPLAN);
    assert_non_null(strstr(err.message, "step 2 was refused at admit"));
    /* Refused by the owner with an error (the id went back below 3). */
    rsp_step s3 = {.step_id = 3, .rows = one, .num_rows = 1};
    admit_and_plan(pool, &s3);
    rsp_step back = {.step_id = 2, .rows = one, .num_rows = 1};
    back.rows = &(rsp_row){.rid = 5, .label = RSP_LABEL_MAIN, .span = 1};
    assert_int_equal(rsp_step_admit(pool, &back, &out, &err), RSP_EORDER);
    assert_int_equal(rsp_plan_wait_step(pool, 2, 0, &err), RSP_ENOPLAN);
    assert_non_null(strstr(err.message, "refused"));
    /* A refused re-admit of a step in flight leaves it in flight. */
    rsp_step dup = {.step_id = 3, .rows = four, .num_rows = 4};
    out.ok = true;
    rsp_status st = rsp_step_admit(pool, &dup, &out, &err);
    assert_true(st != RSP_OK || !out.ok);
    assert_int_equal(rsp_plan_wait_step(pool, 3, 0, &err), RSP_OK);
    commit_done(pool, &s3);

    /* A capture committed without a live plan. */
    rsp_step cap = {.step_id = 4, .rows = one, .num_rows = 1, .capture = true};
    assert_int_equal(rsp_step_admit(pool, &cap, &out, &err), RSP_OK);
    assert_int_equal(rsp_step_commit(pool, &cap, NULL, &err), RSP_OK);
    assert_int_equal(rsp_plan_wait_step(pool, 4, 0, &err), RSP_ENOPLAN);
    assert_non_null(strstr(err.message, "without a live plan"));

    /* The read-section rule, as rsp_plan_wait. */
    rsp_read_begin();
    assert_int_equal(rsp_plan_wait_step(pool, 5, 1000, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "read section"));
    assert_int_equal(rsp_plan_wait_step(pool, 5, 0, &err), RSP_ETIMEDOUT);
    rsp_read_end();
    assert_int_equal(rsp_plan_wait_step(NULL, 5, 0, &err), RSP_EINVAL);
    assert_null(rsp_plan_of_step(NULL, 5));
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

typedef struct blocked_waiter {
    rsp_pool *pool;
    uint64_t step;
    rsp_status st;
    rsp_error err;
} blocked_waiter;

static void *blocked_waiter_main(void *arg)
{
    blocked_waiter *w = arg;
    w->st = rsp_plan_wait_step(w->pool, w->step, RSP_WAIT_FOREVER, &w->err);
    return NULL;
}

static void wait_until_blocked(rsp_pool *pool, uint32_t n)
{
    while (rsp__publisher_waiters(pool->pub) < n)
        sched_yield();
}

static void waiter_blocked_before_the_rollback_gets_the_answer(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 4);
    rsp_error err;
    rsp_admit_outcome out;
    rsp_row one[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s = {.step_id = 7, .rows = one, .num_rows = 1};
    assert_int_equal(rsp_step_admit(pool, &s, &out, &err), RSP_OK);
    blocked_waiter w = {.pool = pool, .step = 7};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, blocked_waiter_main, &w), 0);
    wait_until_blocked(pool, 1);
    assert_int_equal(rsp_step_rollback(pool, 7, NULL, &err), RSP_OK);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.st, RSP_ENOPLAN);
    assert_non_null(strstr(w.err.message, "rolled back"));

    /* And one blocked before the plan gets RSP_OK; one blocked when the
     * pool closes gets RSP_ESHUTDOWN. */
    s.step_id = 8;
    assert_int_equal(rsp_step_admit(pool, &s, &out, &err), RSP_OK);
    w.step = 8;
    assert_int_equal(pthread_create(&th, NULL, blocked_waiter_main, &w), 0);
    wait_until_blocked(pool, 1);
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_OK);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.st, RSP_OK);

    w.step = 9;
    assert_int_equal(pthread_create(&th, NULL, blocked_waiter_main, &w), 0);
    wait_until_blocked(pool, 1);
    rsp_msg down = {.kind = RSP_MSG_SHUTDOWN};
    assert_int_equal(rsp_post(pool, &down, NULL, RSP_WAIT_FOREVER, &err), RSP_OK);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(w.st, RSP_ESHUTDOWN);
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* Failures that do not vanish                                               */
/* ------------------------------------------------------------------------ */

#define MAX_SEEN 8
typedef struct seen_failures {
    uint32_t n;    /* owner writes; main reads after a barrier */
    uint32_t gate; /* main opens it (atomic): the first call waits for it */
    rsp_status status[MAX_SEEN];
    rsp_msg_kind kind[MAX_SEEN];
    uint64_t step_id[MAX_SEEN];
    bool has_step[MAX_SEEN];
    char message[MAX_SEEN][RSP_ERROR_MAX];
} seen_failures;

static void record_failure(void *ctx, const rsp_failure *f)
{
    seen_failures *s = ctx;
    /* Test only: hold the owner at the first failure until main forgot a
     * ticket, so the order is fixed without timing. */
    if (s->n == 0)
        while (!__atomic_load_n(&s->gate, __ATOMIC_ACQUIRE))
            sched_yield();
    if (s->n < MAX_SEEN) {
        s->status[s->n] = f->status;
        s->kind[s->n] = f->kind;
        s->step_id[s->n] = f->step_id;
        s->has_step[s->n] = f->has_step;
        snprintf(s->message[s->n], RSP_ERROR_MAX, "%s", f->message);
    }
    s->n++;
}

static void unread_failures_are_counted_and_reported(void **state)
{
    (void)state;
    seen_failures seen;
    memset(&seen, 0, sizeof seen);
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.on_error = record_failure;
    cfg.on_error_ctx = &seen;
    rsp_pool *pool = make_pool_cfg(&cfg);
    rsp_error err;
    /* A fire-and-forget commit of a step never admitted: RSP_EORDER. */
    rsp_row one[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_msg commit = {.kind = RSP_MSG_COMMIT,
                      .step = {.step_id = 5, .rows = one, .num_rows = 1},
                      .event = rsp_event_complete()};
    assert_int_equal(rsp_post(pool, &commit, NULL, RSP_WAIT_FOREVER, &err), RSP_OK);
    /* A kept ticket forgotten before its answer (the owner waits in the
     * callback above until the gate opens): counted and reported too. */
    rsp_msg holding = {.kind = RSP_MSG_HOLDING, .rid = 999, .label = RSP_LABEL_MAIN};
    rsp_ticket *t = NULL;
    assert_int_equal(rsp_post(pool, &holding, &t, RSP_WAIT_FOREVER, &err), RSP_OK);
    rsp_ticket_forget(t);
    __atomic_store_n(&seen.gate, 1, __ATOMIC_RELEASE);
    /* A failure its waiter reads is not counted; a ticket forgotten after
     * its answer is freed at once (ASan: no leak) and not counted. */
    assert_int_equal(rsp_post(pool, &holding, &t, RSP_WAIT_FOREVER, &err), RSP_OK);
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, NULL), RSP_ENOREQ);
    assert_int_equal(rsp_post(pool, &holding, &t, RSP_WAIT_FOREVER, &err), RSP_OK);
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK);
    rsp_ticket_forget(t); /* answered: the last reference, freed here */
    rsp_ticket_forget(NULL);
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK);

    rsp_stats st;
    assert_int_equal(rsp_stats_snapshot(pool, &st, &err), RSP_OK);
    assert_int_equal(st.posts_failed, 2);
    assert_int_equal(rsp_stats_peek(pool, &st, &err), RSP_OK);
    assert_int_equal(st.posts_failed, 2);
    assert_int_equal(seen.n, 2);
    assert_int_equal(seen.status[0], RSP_EORDER);
    assert_int_equal(seen.kind[0], RSP_MSG_COMMIT);
    assert_true(seen.has_step[0]);
    assert_int_equal(seen.step_id[0], 5);
    assert_non_null(strstr(seen.message[0], "5"));
    assert_int_equal(seen.status[1], RSP_ENOREQ);
    assert_int_equal(seen.kind[1], RSP_MSG_HOLDING);
    assert_false(seen.has_step[1]);
    assert_int_equal(seen.step_id[1], 0);
    assert_true(seen.message[1][0] != '\0');
    rsp_pool_destroy(pool);
}

static void close_timed_names_the_steps_it_still_waits_for(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 4);
    rsp_error err;
    rsp_host_fence *fence = NULL;
    assert_int_equal(rsp_host_fence_create(&fence, &err), RSP_OK);
    rsp_row one[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_row two[1] = {{.rid = 2, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s1 = {.step_id = 1, .rows = one, .num_rows = 1};
    rsp_step s2 = {.step_id = 2, .rows = two, .num_rows = 1};
    admit_and_plan(pool, &s1);
    admit_and_plan(pool, &s2);
    rsp_event f1 = rsp_event_host(fence, 1), f2 = rsp_event_host(fence, 2);
    assert_int_equal(rsp_step_commit(pool, &s1, &f1, &err), RSP_OK);
    assert_int_equal(rsp_step_rollback(pool, 2, &f2, &err), RSP_OK);
    rsp_stats st;
    assert_int_equal(rsp_stats_snapshot(pool, &st, &err), RSP_OK);
    assert_int_equal(st.forward_waits, 2);
    assert_int_equal(rsp_stats_peek(pool, &st, &err), RSP_OK);
    assert_int_equal(st.forward_waits, 2);

    /* Neither event is signalled: the bounded close names both steps and
     * destroys nothing. */
    rsp_close_report rep;
    assert_int_equal(rsp_pool_close_timed(pool, 1000000, &rep, &err), RSP_ETIMEDOUT);
    assert_false(rep.closed);
    assert_int_equal(rep.forward_waits, 2);
    assert_int_equal(rep.num_steps, 2);
    assert_int_equal(rep.step_ids[0], 1);
    assert_int_equal(rep.step_ids[1], 2);
    assert_non_null(strstr(err.message, "step 1"));
    /* Still usable. */
    assert_int_equal(rsp_ingest(pool, 42, &err), RSP_OK);
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK);

    /* One signalled: only step 2 is left. */
    rsp_host_fence_signal(fence, 1);
    do {
        assert_int_equal(rsp_stats_snapshot(pool, &st, &err), RSP_OK);
    } while (st.forward_waits != 1);
    assert_int_equal(rsp_pool_close_timed(pool, 0, &rep, &err), RSP_ETIMEDOUT);
    assert_int_equal(rep.forward_waits, 1);
    assert_int_equal(rep.num_steps, 1);
    assert_int_equal(rep.step_ids[0], 2);

    /* Both: the close goes through. */
    rsp_host_fence_signal(fence, 2);
    assert_int_equal(rsp_pool_close_timed(pool, RSP_WAIT_FOREVER, &rep, &err), RSP_OK);
    assert_true(rep.closed);
    assert_int_equal(rep.forward_waits, 0);
    rsp_host_fence_destroy(fence);
    assert_int_equal(rsp_pool_close_timed(NULL, 0, &rep, &err), RSP_OK);
    assert_false(rep.closed);
}

/* A thread that takes plan references, then closes the pool with a
 * timeout: the close must come back by itself. Recorded for main. */
typedef struct closer {
    rsp_pool *pool;
    uint64_t timeout_ns;
    uint32_t refs; /* references taken before the close, <= 2 */
    rsp_status st;
    rsp_close_report rep;
    char msg[RSP_ERROR_MAX];
    uint32_t done; /* atomic: 1 once the close returned */
} closer;

static void *close_holding_refs(void *arg)
{
    closer *c = arg;
    const rsp_plan *held[2] = {NULL, NULL};
    if (rsp_reader_register(NULL) == RSP_OK) {
        rsp_read_begin();
        for (uint32_t i = 0; i < c->refs && i < 2; i++)
            held[i] = rsp_plan_ref(rsp_plan_live(c->pool));
        rsp_read_end();
    }
    rsp_error err;
    memset(&err, 0, sizeof err);
    c->st = rsp_pool_close_timed(c->pool, c->timeout_ns, &c->rep, &err);
    snprintf(c->msg, sizeof c->msg, "%s", err.message);
    for (uint32_t i = 0; i < 2; i++)
        if (held[i])
            rsp_plan_unref(held[i]);
    rsp_reader_unregister();
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Whether *flag became 1 within `seconds` (polled every millisecond). */
static bool became_set(const uint32_t *flag, uint32_t seconds)
{
    for (uint32_t ms = 0; ms < seconds * 1000u; ms++) {
        if (__atomic_load_n(flag, __ATOMIC_ACQUIRE))
            return true;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

/* The close runs on its own thread; main gives it a generous 30 s (the
 * closes here wait 500 ms at most before they give up) and fails instead
 * of hanging with it. */
static closer run_closer(rsp_pool *pool, uint64_t timeout_ns, uint32_t refs)
{
    closer c = {.pool = pool, .timeout_ns = timeout_ns, .refs = refs};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, close_holding_refs, &c), 0);
    if (!became_set(&c.done, 30))
        fail_msg("rsp_pool_close_timed did not return within 30 s (%u plan reference(s) held "
                 "by its own thread)",
                 refs);
    assert_int_equal(pthread_join(th, NULL), 0);
    return c;
}

/* The calling thread's own plan references bound the close like the
 * device's waits: the timeout expires, the refusal names them, nothing is
 * destroyed; dropped, the close goes through. */
static void close_timed_is_bounded_by_plan_references(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 4);
    rsp_error err;
    rsp_row one[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s1 = {.step_id = 1, .rows = one, .num_rows = 1};
    admit_and_plan(pool, &s1);
    commit_done(pool, &s1);

    closer c = run_closer(pool, 500000000u, 1);
    assert_int_equal(c.st, RSP_ETIMEDOUT);
    assert_false(c.rep.closed);
    assert_int_equal(c.rep.forward_waits, 0);
    assert_non_null(strstr(c.msg, "1 plan reference held"));
    assert_non_null(strstr(c.msg, "nothing destroyed"));
    assert_null(strstr(c.msg, "forward_done"));
    /* Still usable. */
    assert_int_equal(rsp_ingest(pool, 42, &err), RSP_OK);
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK);

    /* Two, and a timeout of 0: counted, not waited for. */
    c = run_closer(pool, 0, 2);
    assert_int_equal(c.st, RSP_ETIMEDOUT);
    assert_non_null(strstr(c.msg, "2 plan references held"));

    /* None held: the same close goes through. */
    c = run_closer(pool, 30000000000u, 0);
    assert_int_equal(c.st, RSP_OK);
    assert_true(c.rep.closed);
}

/* A thread that stays in a read section until main lets it go. */
typedef struct sitter {
    uint32_t inside, leave; /* atomic */
    rsp_status st;
} sitter;

static void *sit_in_section(void *arg)
{
    sitter *s = arg;
    s->st = rsp_reader_register(NULL);
    if (s->st == RSP_OK)
        s->st = rsp_read_begin();
    __atomic_store_n(&s->inside, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&s->leave, __ATOMIC_ACQUIRE)) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    if (s->st == RSP_OK)
        rsp_read_end();
    rsp_reader_unregister();
    return NULL;
}

/* Destroy waits for a grace period: another thread's open section bounds
 * the close too, named, with nothing destroyed. */
static void close_timed_is_bounded_by_another_threads_section(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 4);
    sitter s = {0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, sit_in_section, &s), 0);
    assert_true(became_set(&s.inside, 30));
    assert_int_equal(s.st, RSP_OK);
    closer c = run_closer(pool, 50000000u, 0);
    assert_int_equal(c.st, RSP_ETIMEDOUT);
    assert_false(c.rep.closed);
    assert_non_null(strstr(c.msg, "no grace period (a read section open on another thread?)"));
    assert_null(strstr(c.msg, "plan reference"));
    rsp_error err;
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK); /* still usable */
    __atomic_store_n(&s.leave, 1, __ATOMIC_RELEASE);
    assert_int_equal(pthread_join(th, NULL), 0);
    c = run_closer(pool, 30000000000u, 0);
    assert_int_equal(c.st, RSP_OK);
    assert_true(c.rep.closed);
}

static void commit_that_wrote_needs_a_forward_done(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 4);
    rsp_error err;
    rsp_row one[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s = {.step_id = 1, .rows = one, .num_rows = 1};
    admit_and_plan(pool, &s);
    assert_int_equal(rsp_step_commit(pool, &s, NULL, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "forward_done is empty"));
    assert_non_null(strstr(err.message, "rsp_event_complete"));
    assert_null(strstr(err.message, "msg->"));
    rsp_event none = {0};
    assert_int_equal(rsp_step_commit(pool, &s, &none, &err), RSP_EINVAL);
    /* Nothing changed: the step is still in flight, with its plan. */
    assert_int_equal(rsp_plan_wait_step(pool, 1, 0, &err), RSP_OK);
    rsp_stats st;
    assert_int_equal(rsp_stats_snapshot(pool, &st, &err), RSP_OK);
    assert_int_equal(st.commits, 0);
    commit_done(pool, &s);
    /* Rows that wrote nothing (span 0, padding) need no event. */
    rsp_row idle[2] = {{.rid = 2, .label = RSP_LABEL_MAIN, .span = 0},
                       {.rid = 3, .label = RSP_LABEL_MAIN, .span = 1, .padding = true}};
    rsp_step quiet = {.step_id = 2, .rows = idle, .num_rows = 2};
    admit_and_plan(pool, &quiet);
    assert_int_equal(rsp_step_commit(pool, &quiet, NULL, &err), RSP_OK);
    /* A host fence is accepted too; RSP_EVENT_COMPLETE with a handle is not. */
    rsp_event odd = {.kind = RSP_EVENT_COMPLETE, .handle = &err};
    rsp_step s3 = {.step_id = 3, .rows = one, .num_rows = 1};
    admit_and_plan(pool, &s3);
    assert_int_equal(rsp_step_commit(pool, &s3, &odd, &err), RSP_EINVAL);
    rsp_event done = rsp_event_complete();
    assert_int_equal(done.kind, RSP_EVENT_COMPLETE);
    assert_null(done.handle);
    assert_int_equal(rsp_event_wait(pool, &done, 0, &err), RSP_OK);
    assert_int_equal(rsp_step_commit(pool, &s3, &done, &err), RSP_OK);
    rsp_pool_destroy(pool);
}

static void addressing_of_an_uninterned_label_is_enolabel(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 4);
    rsp_error err;
    rsp_label_id draft;
    assert_int_equal(rsp_label(pool, "draft", &draft, &err), RSP_OK);
    rsp_row one[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s = {.step_id = 1, .rows = one, .num_rows = 1};
    admit_and_plan(pool, &s);
    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    assert_int_equal(rsp_read_explain(rsp_read_begin(), &err), RSP_OK);
    const rsp_plan *plan = rsp_plan_of_step(pool, 1);
    assert_non_null(plan);
    rsp_addressing a;
    assert_int_equal(rsp_plan_addressing(plan, 7, &a, &err), RSP_ENOLABEL);
    assert_non_null(strstr(err.message, "label 7 is not interned"));
    assert_int_equal(rsp_plan_addressing(plan, draft, &a, &err), RSP_ENOPLAN);
    assert_non_null(strstr(err.message, "not planned"));
    assert_int_equal(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, &err), RSP_OK);
    rsp_read_end();
    rsp_reader_unregister();
    commit_done(pool, &s);
    rsp_pool_destroy(pool);
}

static void *unregistered_begin(void *arg)
{
    rsp_error *err = arg;
    err->status = rsp_read_explain(rsp_read_begin(), err);
    return NULL;
}

static void messages_name_the_callers_argument(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 4);
    rsp_error err;
    assert_int_equal(rsp_label(pool, "", NULL, &err), RSP_EINVAL);
    assert_string_equal(err.message, "name is empty");
    assert_int_equal(rsp_label(pool, NULL, NULL, &err), RSP_EINVAL);
    assert_string_equal(err.message, "name is NULL");
    assert_int_equal(rsp_build_graph_buffers(pool, 0, 16, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "max_bs is 0"));
    assert_null(strstr(err.message, "msg->"));
    rsp_event bad = {.kind = RSP_EVENT_CUDA, .handle = &err};
    assert_int_equal(rsp_step_rollback(pool, 1, &bad, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "forward_done"));
    assert_null(strstr(err.message, "msg->"));
    /* rsp_post's caller passed msg: there the field is the argument. */
    rsp_msg m = {.kind = RSP_MSG_LABEL, .label_name = ""};
    assert_int_equal(rsp_post(pool, &m, NULL, 0, &err), RSP_EINVAL);
    assert_string_equal(err.message, "msg->label_name is empty");

    /* rsp_read_explain says why. */
    rsp_error e2;
    memset(&e2, 0, sizeof e2);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, unregistered_begin, &e2), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(e2.status, RSP_ENOTREG);
    assert_non_null(strstr(e2.message, "rsp_reader_register"));
    rsp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(four_pipelined_steps_each_reader_reads_its_own),
        cmocka_unit_test(wait_step_names_rollback_refusal_and_capture),
        cmocka_unit_test(waiter_blocked_before_the_rollback_gets_the_answer),
        cmocka_unit_test(unread_failures_are_counted_and_reported),
        cmocka_unit_test(close_timed_names_the_steps_it_still_waits_for),
        cmocka_unit_test(close_timed_is_bounded_by_plan_references),
        cmocka_unit_test(close_timed_is_bounded_by_another_threads_section),
        cmocka_unit_test(commit_that_wrote_needs_a_forward_done),
        cmocka_unit_test(addressing_of_an_uninterned_label_is_enolabel),
        cmocka_unit_test(messages_name_the_callers_argument),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
