/*
 * Ordered posting and plan digests (rsp.h, "Ordered posting" at rsp_post;
 * rsp_plan_digest): two pools fed the same messages from several threads
 * agree step by step in ordered mode; the same messages in different orders
 * diverge in unordered mode; gaps, duplicates, exempt kinds, the credit
 * pass of the awaited number.
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
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>
#include "../util/small_pool.h"

static rsp_pool *make_pool(bool ordered, uint32_t inbox_capacity, uint64_t reorder_timeout_ns)
{
    rsp_pool_config cfg;
    small_pool_config(&cfg, 64);
    cfg.inbox_capacity = inbox_capacity;
    cfg.max_inflight_steps = 8;
    cfg.ordered = ordered;
    cfg.reorder_timeout_ns = reorder_timeout_ns;
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_create: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    return pool;
}

/* Post m numbered seq and keep the ticket (NULL on a refused post). */
static rsp_ticket *post(rsp_pool *pool, rsp_msg m, uint64_t seq, rsp_status *st, rsp_error *err)
{
    rsp_ticket *t = NULL;
    m.seq = seq;
    *st = rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, err);
    return t;
}

static rsp_status wait_reply(rsp_ticket *t, rsp_reply *r)
{
    return rsp_wait(t, RSP_WAIT_FOREVER, r);
}

/* ------------------------------------------------------------------------ */
/* Several threads, two ordered pools                                        */
/* ------------------------------------------------------------------------ */

#define RANK_THREADS 3
#define RANK_ITERS 300

typedef struct rank_shared {
    rsp_pool *pool[2];
    uint64_t seq; /* the shared counter (atomic) */
} rank_shared;

typedef struct rank_worker {
    rank_shared *sh;
    unsigned id;
    uint64_t rng;
    /* Recorded for the main thread. */
    uint32_t steps_compared;
    uint32_t digest_mismatches;
    uint32_t admit_mismatches;
    uint32_t failures;
    rsp_status first_failure;
    char first_message[RSP_ERROR_MAX];
} rank_worker;

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fail_once(rank_worker *w, rsp_status st, const char *msg)
{
    if (w->failures++ == 0) {
        w->first_failure = st;
        /* %.*s: at most the buffer (gcc -O3 cannot see messages are shorter) */
        snprintf(w->first_message, sizeof w->first_message, "%.*s",
                 (int)sizeof w->first_message - 1, msg);
    }
}

/* Post m with the next number to both pools, in a random order with a
 * random delay between, then wait for both answers. id_is_seq: the
 * message's step id is its number (so steps are admitted in increasing id
 * order on both pools, whatever thread posted them); *step_id gets it. */
static bool both(rank_worker *w, rsp_msg m, rsp_reply r[2], uint64_t *step_id)
{
    uint64_t seq = __atomic_add_fetch(&w->sh->seq, 1, __ATOMIC_RELAXED);
    if (step_id) {
        m.step.step_id = seq;
        *step_id = seq;
    }
    const unsigned first = (unsigned)(next_rand(&w->rng) & 1u);
    rsp_ticket *t[2] = {NULL, NULL};
    rsp_status st[2];
    rsp_error err[2];
    for (unsigned k = 0; k < 2; k++) {
        unsigned p = k ^ first;
        t[p] = post(w->sh->pool[p], m, seq, &st[p], &err[p]);
        for (uint64_t spin = next_rand(&w->rng) % 64; spin-- > 0;)
            sched_yield();
    }
    bool ok = true;
    for (unsigned p = 0; p < 2; p++) {
        if (st[p] != RSP_OK) {
            fail_once(w, st[p], err[p].message);
            ok = false;
            continue;
        }
        st[p] = wait_reply(t[p], &r[p]);
        if (st[p] != RSP_OK) {
            fail_once(w, st[p], r[p].error.message);
            ok = false;
        }
    }
    return ok;
}

/* Each thread: its own rids, one step at a time (admit, plan, commit),
 * removing a random one of its rids now and then. */
static void *rank_main(void *arg)
{
    rank_worker *w = arg;
    rsp_rid base = (rsp_rid)(w->id + 1) * 1000000u;
    rsp_rid live[3] = {base, base + 1, base + 2};
    rsp_rid fresh = base + 3;
    rsp_reply r[2];
    for (unsigned i = 0; i < RANK_ITERS; i++) {
        if (next_rand(&w->rng) % 3 == 0) {
            unsigned k = (unsigned)(next_rand(&w->rng) % 3);
            if (!both(w, (rsp_msg){.kind = RSP_MSG_REMOVE, .rid = live[k]}, r, NULL))
                break;
            live[k] = fresh++;
        }
        rsp_row rows[3];
        for (unsigned k = 0; k < 3; k++)
            rows[k] = (rsp_row){.rid = live[k], .label = RSP_LABEL_MAIN, .span = 1};
        rsp_step step = {.rows = rows, .num_rows = 3};
        if (!both(w, (rsp_msg){.kind = RSP_MSG_ADMIT, .step = step}, r, &step.step_id))
            break;
        if (r[0].admit.ok != r[1].admit.ok)
            w->admit_mismatches++;
        if (!r[0].admit.ok || !r[1].admit.ok)
            continue;
        if (!both(w, (rsp_msg){.kind = RSP_MSG_PLAN, .step = step}, r, NULL))
            break;
        w->steps_compared++;
        if (r[0].plan_digest != r[1].plan_digest)
            w->digest_mismatches++;
        if (!both(w, (rsp_msg){.kind = RSP_MSG_COMMIT, .step = step, .event = rsp_event_complete()},
                  r, NULL))
            break;
    }
    return NULL;
}

static void run_ranks(bool *all_agree, uint32_t *compared)
{
    rank_shared sh = {.pool = {make_pool(true, 0, 0), make_pool(true, 0, 0)}, .seq = 0};
    rank_worker w[RANK_THREADS];
    pthread_t th[RANK_THREADS];
    for (unsigned i = 0; i < RANK_THREADS; i++) {
        w[i] = (rank_worker){.sh = &sh, .id = i, .rng = 0x9e3779b97f4a7c15ull * (i + 1)};
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &w[i]), 0);
    }
    for (unsigned i = 0; i < RANK_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    *all_agree = true;
    *compared = 0;
    for (unsigned i = 0; i < RANK_THREADS; i++) {
        if (w[i].failures)
            print_error("thread %u: %u failures, first %s: %s\n", i, w[i].failures,
                        rsp_strerror(w[i].first_failure), w[i].first_message);
        assert_int_equal(w[i].failures, 0);
        assert_int_equal(w[i].admit_mismatches, 0);
        if (w[i].digest_mismatches)
            *all_agree = false;
        *compared += w[i].steps_compared;
    }
    rsp_pool_destroy(sh.pool[0]);
    rsp_pool_destroy(sh.pool[1]);
}

static void ordered_pools_fed_by_several_threads_agree_every_step(void **state)
{
    (void)state;
    bool agree;
    uint32_t compared;
    run_ranks(&agree, &compared);
    assert_true(compared > RANK_THREADS * RANK_ITERS / 2);
    assert_true(agree);
}

/* ------------------------------------------------------------------------ */
/* The same messages in two orders                                           */
/* ------------------------------------------------------------------------ */

static rsp_status sync_post(rsp_pool *pool, rsp_msg m, uint64_t seq, rsp_reply *r)
{
    rsp_status st;
    rsp_error err;
    rsp_ticket *t = post(pool, m, seq, &st, &err);
    if (st != RSP_OK) {
        r->error = err;
        return st;
    }
    return wait_reply(t, r);
}

/* Three rids take a slot each (step 1), then two of them are removed, the
 * order of the removes swapped on pool B: the free stack's order differs,
 * so the next step's rid gets a different slot (and the digest differs)
 * unless the pool orders the removes by number. Returns the two digests of
 * step 2. */
static void swapped_removes(bool ordered, uint64_t digest[2], int32_t slot[2])
{
    for (unsigned p = 0; p < 2; p++) {
        rsp_pool *pool = make_pool(ordered, 0, 0);
        rsp_row rows[3] = {{.rid = 1, .span = 1}, {.rid = 2, .span = 1}, {.rid = 3, .span = 1}};
        rsp_step s1 = {.step_id = 1, .rows = rows, .num_rows = 3};
        rsp_reply r;
        uint64_t seq = 0;
        assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_ADMIT, .step = s1}, ++seq, &r),
                         RSP_OK);
        assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_PLAN, .step = s1}, ++seq, &r),
                         RSP_OK);
        assert_int_equal(
            sync_post(pool,
                      (rsp_msg){.kind = RSP_MSG_COMMIT, .step = s1, .event = rsp_event_complete()},
                      ++seq, &r),
            RSP_OK);
        /* remove(1) is number 4, remove(2) number 5; pool B gets 5 first. */
        rsp_msg rm[2] = {{.kind = RSP_MSG_REMOVE, .rid = 1}, {.kind = RSP_MSG_REMOVE, .rid = 2}};
        rsp_ticket *t[2];
        rsp_status st;
        for (unsigned k = 0; k < 2; k++) {
            unsigned i = p == 0 ? k : 1 - k;
            t[i] = post(pool, rm[i], 4 + i, &st, NULL);
            assert_int_equal(st, RSP_OK);
        }
        for (unsigned i = 0; i < 2; i++)
            assert_int_equal(wait_reply(t[i], &r), RSP_OK);
        seq = 5;
        rsp_row row = {.rid = 9, .span = 1};
        rsp_step s2 = {.step_id = 2, .rows = &row, .num_rows = 1};
        assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_ADMIT, .step = s2}, ++seq, &r),
                         RSP_OK);
        assert_true(r.admit.ok);
        assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_PLAN, .step = s2}, ++seq, &r),
                         RSP_OK);
        digest[p] = r.plan_digest;
        assert_int_equal(
            sync_post(pool, (rsp_msg){.kind = RSP_MSG_HOLDING, .rid = 9, .label = 0}, 0, &r),
            RSP_OK);
        slot[p] = r.holding.index;
        /* The live plan carries the reply's digest. */
        assert_int_equal(rsp_reader_register(NULL), RSP_OK);
        assert_int_equal(rsp_read_begin(), RSP_OK);
        const rsp_plan *plan = rsp_plan_live(pool);
        assert_non_null(plan);
        assert_int_equal(rsp_plan_step_id(plan), 2);
        assert_true(rsp_plan_digest(plan) == digest[p]);
        assert_int_equal(rsp_read_end(), RSP_OK);
        rsp_reader_unregister();
        rsp_pool_destroy(pool);
    }
}

static void unordered_pools_diverge_when_messages_arrive_in_another_order(void **state)
{
    (void)state;
    uint64_t d[2];
    int32_t slot[2];
    swapped_removes(false, d, slot);
    assert_int_not_equal(slot[0], slot[1]);
    assert_true(d[0] != d[1]);
}

static void ordered_pools_agree_when_messages_arrive_in_another_order(void **state)
{
    (void)state;
    uint64_t d[2];
    int32_t slot[2];
    swapped_removes(true, d, slot);
    assert_int_equal(slot[0], slot[1]);
    assert_true(d[0] == d[1]);
    assert_true(d[0] != 0);
}

/* ------------------------------------------------------------------------ */
/* Rules                                                                     */
/* ------------------------------------------------------------------------ */

static void ordered_pool_requires_seq_except_exempt_kinds(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true, 0, 0);
    rsp_error err;
    rsp_reply r;
    /* Slot- or label-changing kinds without a number: refused, nothing queued. */
    const rsp_msg_kind need[] = {RSP_MSG_INGEST,   RSP_MSG_REMOVE,        RSP_MSG_RESET,
                                 RSP_MSG_ADMIT,    RSP_MSG_PLAN,          RSP_MSG_COMMIT,
                                 RSP_MSG_ROLLBACK, RSP_MSG_CLEAR_PREPLAN, RSP_MSG_LABEL};
    for (unsigned i = 0; i < sizeof need / sizeof need[0]; i++) {
        rsp_msg m = {.kind = need[i], .rid = 1, .label_name = "x"};
        rsp_ticket *t = NULL;
        memset(&err, 0, sizeof err);
        assert_int_equal(rsp_post(pool, &m, &t, 0, &err), RSP_EINVAL);
        assert_null(t);
        assert_non_null(strstr(err.message, "msg->seq is 0"));
    }
    rsp_msg bgb = {.kind = RSP_MSG_BUILD_GRAPH_BUFFERS, .max_bs = 4};
    assert_int_equal(rsp_post(pool, &bgb, NULL, 0, &err), RSP_EINVAL);
    /* The synchronous wrappers carry no number. */
    assert_int_equal(rsp_ingest(pool, 1, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "ordered"));
    rsp_label_id lab;
    assert_int_equal(rsp_label(pool, "draft", &lab, &err), RSP_EINVAL);
    /* The exempt kinds work without one, and nothing was handled above. */
    rsp_stats s;
    assert_int_equal(rsp_stats_snapshot(pool, &s, &err), RSP_OK);
    assert_int_equal(s.num_requests, 0);
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 1, 0, &h, &err), RSP_ENOREQ);
    /* Numbered: handled; a numbered exempt kind takes its turn. */
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 1}, 1, &r), RSP_OK);
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_BARRIER}, 2, &r), RSP_OK);
    assert_int_equal(
        sync_post(pool, (rsp_msg){.kind = RSP_MSG_LABEL, .label_name = "draft"}, 3, &r), RSP_OK);
    assert_int_equal(r.label, 1);
    assert_int_equal(rsp_stats_snapshot(pool, &s, &err), RSP_OK);
    assert_int_equal(s.num_requests, 1);
    rsp_pool_destroy(pool);

    /* An unordered pool ignores seq (any value, or none). */
    pool = make_pool(false, 0, 0);
    assert_int_equal(rsp_ingest(pool, 1, &err), RSP_OK);
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 2}, 77, &r), RSP_OK);
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 3}, 77, &r), RSP_OK);
    assert_int_equal(rsp_stats_snapshot(pool, &s, &err), RSP_OK);
    assert_int_equal(s.num_requests, 3);
    rsp_pool_destroy(pool);
}

static void duplicate_and_old_numbers_are_refused(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true, 0, 0);
    rsp_reply r;
    rsp_status st;
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 1}, 1, &r), RSP_OK);
    /* Already handled: refused at once, nothing changed. */
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 5}, 1, &r),
                     RSP_EORDER);
    assert_non_null(strstr(r.error.message, "msg->seq 1 was already handled"));
    assert_non_null(strstr(r.error.message, "waits for message 2"));
    /* Two messages numbered 3 wait for 2; when 2 comes, the first 3 is
     * handled and the second refused as a duplicate. */
    rsp_ticket *a = post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 3}, 3, &st, NULL);
    assert_int_equal(st, RSP_OK);
    rsp_ticket *b = post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 33}, 3, &st, NULL);
    assert_int_equal(st, RSP_OK);
    assert_int_equal(rsp_wait(a, RSP_WAIT_POLL, NULL), RSP_EAGAIN); /* held: not answered */
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 2}, 2, &r), RSP_OK);
    rsp_reply ra, rb;
    assert_int_equal(wait_reply(a, &ra), RSP_OK);
    assert_int_equal(wait_reply(b, &rb), RSP_EORDER);
    assert_non_null(strstr(rb.error.message, "msg->seq 3 is a duplicate"));
    rsp_stats s;
    assert_int_equal(rsp_stats_snapshot(pool, &s, NULL), RSP_OK);
    assert_int_equal(s.num_requests, 3); /* rids 1, 2, 3; not 5, not 33 */
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 4}, 4, &r), RSP_OK);
    rsp_pool_destroy(pool);
}

static void a_gap_past_the_timeout_breaks_the_pool_naming_the_number(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true, 0, 20 * 1000000ull); /* 20 ms */
    rsp_reply r;
    rsp_status st;
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 1}, 1, &r), RSP_OK);
    /* 2 never comes: 3 and 4 wait, then are answered with the timeout. */
    rsp_ticket *t3 = post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 3}, 3, &st, NULL);
    assert_int_equal(st, RSP_OK);
    rsp_ticket *t4 = post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 4}, 4, &st, NULL);
    assert_int_equal(st, RSP_OK);
    assert_int_equal(wait_reply(t3, &r), RSP_ETIMEDOUT);
    assert_non_null(strstr(r.error.message, "waiting for message 2"));
    assert_int_equal(wait_reply(t4, &r), RSP_ETIMEDOUT);
    assert_non_null(strstr(r.error.message, "waiting for message 2"));
    /* Broken: the late 2, and every later message, exempt ones included. */
    assert_int_equal(sync_post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 2}, 2, &r),
                     RSP_EDEVICE);
    assert_non_null(strstr(r.error.message, "message 2 (msg->seq) did not arrive"));
    rsp_stats s;
    rsp_error err;
    assert_int_equal(rsp_stats_snapshot(pool, &s, &err), RSP_EDEVICE);
    assert_non_null(strstr(err.message, "message 2"));
    assert_int_equal(rsp_plan_wait(pool, 1, RSP_WAIT_FOREVER, NULL), RSP_ESHUTDOWN);
    rsp_pool_destroy(pool);
}

/* Waiting messages keep their credits, so the inbox capacity bounds them;
 * the awaited number gets in without a credit. */
static void the_awaited_number_gets_in_when_waiting_ones_hold_every_credit(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true, 4, 0);
    rsp_status st;
    rsp_error err;
    rsp_ticket *t[5];
    for (uint64_t seq = 2; seq <= 5; seq++) {
        t[seq - 1] = post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = seq}, seq, &st, NULL);
        assert_int_equal(st, RSP_OK);
    }
    /* Every credit is taken (queued or waiting): 6 is refused... */
    rsp_msg m6 = {.kind = RSP_MSG_INGEST, .rid = 6, .seq = 6};
    assert_int_equal(rsp_post(pool, &m6, NULL, 0, &err), RSP_EFULL);
    /* ... while 1, the number the owner waits for, gets in. */
    rsp_msg m1 = {.kind = RSP_MSG_INGEST, .rid = 1, .seq = 1};
    assert_int_equal(rsp_post(pool, &m1, &t[0], 0, &err), RSP_OK);
    for (unsigned i = 0; i < 5; i++)
        assert_int_equal(rsp_wait(t[i], RSP_WAIT_FOREVER, NULL), RSP_OK);
    assert_int_equal(rsp_post(pool, &m6, &t[0], RSP_WAIT_FOREVER, &err), RSP_OK);
    assert_int_equal(rsp_wait(t[0], RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp_stats s;
    assert_int_equal(rsp_stats_snapshot(pool, &s, NULL), RSP_OK);
    assert_int_equal(s.num_requests, 6);
    assert_int_equal(s.inbox_depth, 0);
    rsp_pool_destroy(pool);
}

/* Messages still waiting for a number when the pool shuts down are
 * answered RSP_ESHUTDOWN, naming it. */
static void waiting_messages_are_answered_at_shutdown(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true, 0, 0);
    rsp_status st;
    rsp_ticket *t = post(pool, (rsp_msg){.kind = RSP_MSG_INGEST, .rid = 2}, 2, &st, NULL);
    assert_int_equal(st, RSP_OK);
    rsp_msg down = {.kind = RSP_MSG_SHUTDOWN};
    rsp_ticket *d = NULL;
    assert_int_equal(rsp_post(pool, &down, &d, RSP_WAIT_FOREVER, NULL), RSP_OK);
    assert_int_equal(rsp_wait(d, RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp_reply r;
    assert_int_equal(wait_reply(t, &r), RSP_ESHUTDOWN);
    assert_non_null(strstr(r.error.message, "waited for message 1"));
    rsp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ordered_pools_fed_by_several_threads_agree_every_step),
        cmocka_unit_test(unordered_pools_diverge_when_messages_arrive_in_another_order),
        cmocka_unit_test(ordered_pools_agree_when_messages_arrive_in_another_order),
        cmocka_unit_test(ordered_pool_requires_seq_except_exempt_kinds),
        cmocka_unit_test(duplicate_and_old_numbers_are_refused),
        cmocka_unit_test(a_gap_past_the_timeout_breaks_the_pool_naming_the_number),
        cmocka_unit_test(the_awaited_number_gets_in_when_waiting_ones_hold_every_credit),
        cmocka_unit_test(waiting_messages_are_answered_at_shutdown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
