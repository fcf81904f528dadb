/*
 * The public API end to end on the host device: pool lifecycle, the
 * synchronous wrappers, validation before the owner, counters, plan
 * publication through the pool, shutdown, fork.
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
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <rsp/rsp.h>

/* forward_done of a commit whose forward (none runs here) is already done:
 * rsp_event_complete(). */
static const rsp_event forward_complete = {.kind = RSP_EVENT_COMPLETE};

static rsp_pool *make_pool(uint32_t max_slots, uint32_t inbox_capacity)
{
    static const rsp_block_config blocks[2] = {
        {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 2, .shape = {2, 8}},
        {.name = "ssm", .dtype = RSP_DTYPE_F16, .ndim = 1, .shape = {16}},
    };
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 3;
    cfg.blocks = blocks;
    cfg.num_blocks = 2;
    cfg.max_slots = max_slots;
    cfg.inbox_capacity = inbox_capacity;
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_create: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    return pool;
}

static uint64_t slot_bytes(rsp_pool *pool)
{
    rsp_pool_info info;
    assert_int_equal(rsp_pool_info_get(pool, &info, NULL), RSP_OK);
    return info.slot_bytes;
}

static rsp_stats counters(rsp_pool *pool)
{
    rsp_stats s;
    assert_int_equal(rsp_stats_peek(pool, &s, NULL), RSP_OK);
    return s;
}

/* ------------------------------------------------------------------------ */

static void pool_info_and_block_views_describe_the_storage(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    rsp_pool_info info;
    assert_int_equal(rsp_pool_info_get(pool, &info, NULL), RSP_OK);
    assert_int_equal(info.num_layers, 3);
    assert_int_equal(info.max_slots, 8);
    assert_int_equal(info.usable_slots, 7);
    assert_int_equal(info.pad_index, RSP_SINK_SLOT);
    assert_int_equal(info.slot_bytes, 3 * (2 * 8 * 4 + 16 * 2));
    assert_int_equal(info.total_bytes, info.slot_bytes * 8);

    rsp_block_view v0, v1;
    assert_int_equal(rsp_pool_block(pool, "conv", 0, &v0, NULL), RSP_OK);
    assert_int_equal(rsp_pool_block(pool, "conv", 1, &v1, NULL), RSP_OK);
    assert_int_equal(v0.ndim, 3);
    assert_int_equal(v0.shape[0], 8);
    assert_int_equal(v0.shape[1], 2);
    assert_int_equal(v0.shape[2], 8);
    assert_int_equal(v0.strides[0], 16);
    assert_int_equal(v0.strides[2], 1);
    assert_int_equal((char *)v1.data - (char *)v0.data, 8 * 16 * 4);
    rsp_error err;
    rsp_block_view untouched;
    memset(&untouched, 0x11, sizeof untouched);
    rsp_block_view copy = untouched;
    assert_int_equal(rsp_pool_block(pool, "nope", 0, &untouched, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "nope"));
    assert_int_equal(rsp_pool_block(pool, "ssm", 3, &untouched, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "layer 3"));
    assert_memory_equal(&untouched, &copy, sizeof copy);
    rsp_pool_destroy(pool);
}

static void sync_wrappers_run_a_step_and_count_it(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    const uint64_t sb = slot_bytes(pool);
    rsp_error err;
    rsp_label_id draft = 99;
    assert_int_equal(rsp_label(pool, "draft", &draft, &err), RSP_OK);
    assert_int_equal(draft, 1);
    assert_int_equal(rsp_ingest(pool, 10, &err), RSP_OK);

    rsp_row rows[2] = {{.rid = 10, .label = RSP_LABEL_MAIN, .span = 4},
                       {.rid = 11, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_fork post[1] = {{RSP_LABEL_MAIN, 1, 0}};
    rsp_step step = {
        .step_id = 1, .rows = rows, .num_rows = 2, .post_forks = post, .num_post_forks = 1};
    rsp_admit_outcome out;
    assert_int_equal(rsp_step_admit(pool, &step, &out, &err), RSP_OK);
    assert_true(out.ok);
    assert_int_equal(rsp_step_plan(pool, &step, &err), RSP_OK);
    assert_int_equal(rsp_plan_wait(pool, 1, RSP_WAIT_FOREVER, &err), RSP_OK);

    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    const rsp_plan *plan = rsp_plan_live(pool);
    assert_non_null(plan);
    assert_int_equal(rsp_plan_step_id(plan), 1);
    assert_false(rsp_plan_is_staged(plan));
    rsp_addressing a;
    assert_int_equal(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, &err), RSP_OK);
    assert_int_equal(a.num_rows, 2);
    assert_true(a.slot_indices[0] > 0 && a.slot_indices[1] > 0);
    assert_true(a.slot_indices[0] != a.slot_indices[1]);
    assert_false(a.has_state[0]);
    assert_non_null(a.device_slot_indices);
    /* The backend waits for the plan's event before reading the vectors. */
    assert_int_equal(rsp_event_wait(pool, &a.ready, RSP_WAIT_FOREVER, &err), RSP_OK);
    assert_memory_equal(a.device_slot_indices, a.slot_indices, 2 * sizeof(int32_t));
    int32_t slot10 = a.slot_indices[0];
    rsp_read_end();

    assert_int_equal(rsp_step_commit(pool, &step, &forward_complete, &err), RSP_OK);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 10, RSP_LABEL_MAIN, &h, &err), RSP_OK);
    assert_int_equal(h.index, slot10);
    assert_true(h.has_state);
    assert_int_equal(rsp_holding_get(pool, 10, draft, &h, &err), RSP_OK);
    assert_true(h.has_state); /* the post-fork copied main onto draft */

    rsp_stats s = counters(pool);
    assert_int_equal(s.admits_ok, 1);
    assert_int_equal(s.plans, 1);
    assert_int_equal(s.commits, 1);
    assert_int_equal(s.forks, 2); /* two forking rids */
    assert_int_equal(s.bytes_copied, 2 * sb);
    assert_int_equal(s.held_slots, 4);
    assert_int_equal(s.free_slots, 3);
    assert_int_equal(s.num_requests, 2);

    assert_int_equal(rsp_remove(pool, 10, &err), RSP_OK);
    assert_int_equal(rsp_reset(pool, 11, false, &err), RSP_OK);
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK);
    s = counters(pool);
    assert_int_equal(s.bytes_zeroed, 4 * sb); /* 2 slots freed, 2 reset */
    assert_int_equal(s.free_slots, 5);
    assert_int_equal(s.num_requests, 1);
    assert_true(s.messages_handled >= 10);

    rsp_stats snap;
    assert_int_equal(rsp_stats_snapshot(pool, &snap, &err), RSP_OK);
    assert_int_equal(snap.free_slots, 5);
    assert_int_equal(snap.held_slots, 2);
    assert_int_equal(snap.max_slots, 8);
    assert_int_equal(snap.commits, 1);
    assert_int_equal(rsp_build_graph_buffers(pool, 8, 128, &err), RSP_OK);
    assert_int_equal(rsp_step_unstage(pool, &err), RSP_OK);
    assert_int_equal(rsp_step_rollback(pool, 1, NULL, &err), RSP_OK); /* finished: no-op */
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */

/* Per-rid forks, skip_post_forks and rsp_release through a pool (the rules:
 * docs/semantics.md 8.2; the core suite tests each sentence). */
static void per_rid_forks_and_release_through_the_pool(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    rsp_error err;
    rsp_label_id draft;
    assert_int_equal(rsp_label(pool, "draft", &draft, &err), RSP_OK);
    /* rid 1 plain, rids 2 and 3 drafting (group 1). */
    rsp_row rows[5] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1},
                       {.rid = 2, .label = RSP_LABEL_MAIN, .span = 1, .fork_group = 1},
                       {.rid = 2, .label = 1, .span = 2, .fork_group = 1},
                       {.rid = 3, .label = RSP_LABEL_MAIN, .span = 1, .fork_group = 1},
                       {.rid = 3, .label = 1, .span = 2, .fork_group = 1}};
    rsp_fork pre[1] = {{.from = RSP_LABEL_MAIN, .to = 1, .group = 1}};
    rsp_fork post[1] = {{.from = 1, .to = RSP_LABEL_MAIN, .group = 1}};
    rsp_step step = {.step_id = 1,
                     .rows = rows,
                     .num_rows = 5,
                     .pre_forks = pre,
                     .num_pre_forks = 1,
                     .post_forks = post,
                     .num_post_forks = 1};
    rsp_admit_outcome out;
    assert_int_equal(rsp_step_admit(pool, &step, &out, &err), RSP_OK);
    assert_true(out.ok);
    assert_int_equal(counters(pool).held_slots, 5); /* 3 mains, 2 drafts */
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 1, draft, &h, &err), RSP_ENOREQ);
    assert_int_equal(rsp_step_plan(pool, &step, &err), RSP_OK);
    rows[4].skip_post_forks = true;              /* rid 3's draft is rejected */
    const rsp_event done = rsp_event_complete(); /* no forward ran here */
    assert_int_equal(rsp_step_commit(pool, &step, &done, &err), RSP_OK);
    rsp_stats s = counters(pool);
    assert_int_equal(s.forks, 3); /* 2 pre-forks, rid 2's post-fork */

    /* Release rid 3's draft: zeroed, freed; the request keeps its main. */
    uint64_t zeroed = s.bytes_zeroed;
    assert_int_equal(rsp_release(pool, 3, draft, &err), RSP_OK);
    assert_int_equal(rsp_holding_get(pool, 3, draft, &h, &err), RSP_ENOREQ);
    assert_int_equal(rsp_holding_get(pool, 3, RSP_LABEL_MAIN, &h, &err), RSP_OK);
    assert_int_equal(rsp_release(pool, 3, draft, &err), RSP_OK);   /* not held: no-op */
    assert_int_equal(rsp_release(pool, 999, draft, &err), RSP_OK); /* unknown rid */
    assert_int_equal(rsp_release(pool, 3, 42, &err), RSP_ENOLABEL);
    assert_non_null(strstr(err.message, "label 42"));
    s = counters(pool);
    assert_int_equal(s.held_slots, 4);
    assert_int_equal(s.free_slots, 3);
    assert_int_equal(s.bytes_zeroed, zeroed + slot_bytes(pool));

    /* Mixed groups on one rid: refused by the owner, naming it. */
    rows[2].fork_group = 2;
    step.step_id = 2;
    assert_int_equal(rsp_step_admit(pool, &step, &out, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "rid 2"));
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */

static void expect_refused(rsp_pool *pool, const rsp_msg *m, rsp_status want, const char *field)
{
    rsp_error err;
    memset(&err, 0, sizeof err);
    rsp_ticket *t = (rsp_ticket *)&err; /* must be cleared on failure */
    rsp_status st = rsp_post(pool, m, &t, 0, &err);
    if (st != want || !strstr(err.message, field))
        print_error("want %s naming \"%s\", got %s: %s\n", rsp_strerror(want), field,
                    rsp_strerror(st), err.message);
    assert_int_equal(st, want);
    assert_int_equal(err.status, want);
    assert_null(t);
    assert_non_null(strstr(err.message, field));
}

static void invalid_messages_are_refused_before_the_owner(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    assert_int_equal(rsp_barrier(pool, NULL), RSP_OK);
    const uint64_t handled = counters(pool).messages_handled;

    rsp_row rows[2] = {{.rid = 1, .label = 0, .span = 1}, {.rid = 2, .label = 5, .span = 1}};
    rsp_fork bad_fork[1] = {{0, 9, 0}};
    rsp_msg m;

    m = (rsp_msg){.kind = RSP_MSG_KIND_COUNT_};
    expect_refused(pool, &m, RSP_EINVAL, "msg->kind");
    m = (rsp_msg){.kind = (rsp_msg_kind)-1};
    expect_refused(pool, &m, RSP_EINVAL, "msg->kind");
    m = (rsp_msg){.kind = RSP_MSG_ADMIT, .step = {.step_id = 1, .num_rows = 2}};
    expect_refused(pool, &m, RSP_EINVAL, "rows is NULL");
    m = (rsp_msg){.kind = RSP_MSG_PLAN, .step = {.step_id = 1, .rows = rows, .num_rows = 2}};
    expect_refused(pool, &m, RSP_ENOLABEL, "rows[1].label = 5");
    /* The row check looks at many rows at once: the first bad row is named
     * wherever it is (in the unrolled part, in the tail, with a worse one
     * after it), and one in a commit's own rows too. */
    rsp_row many[11];
    for (uint32_t i = 0; i < 11; i++)
        many[i] = (rsp_row){.rid = i + 1, .span = 1};
    m = (rsp_msg){.kind = RSP_MSG_ADMIT, .step = {.step_id = 1, .rows = many, .num_rows = 11}};
    many[6].label = 3;
    many[9].label = 40;
    expect_refused(pool, &m, RSP_ENOLABEL, "rows[6].label = 3");
    many[6].label = many[9].label = 0;
    many[10].label = 1;
    expect_refused(pool, &m, RSP_ENOLABEL, "rows[10].label = 1");
    many[10].label = 0;
    rsp_step prev = {.step_id = 1, .rows = many, .num_rows = 11};
    m = (rsp_msg){.kind = RSP_MSG_STEP,
                  .step = {.step_id = 2, .rows = many, .num_rows = 10},
                  .commit = &prev,
                  .event = rsp_event_complete()};
    many[10].label = 2; /* only the commit names it */
    expect_refused(pool, &m, RSP_ENOLABEL, "rows[10].label = 2");
    many[10].label = 0;
    m = (rsp_msg){.kind = RSP_MSG_COMMIT,
                  .step = {.step_id = 1, .rows = rows, .num_rows = 1, .num_pre_forks = 1}};
    expect_refused(pool, &m, RSP_EINVAL, "pre_forks is NULL");
    m = (rsp_msg){.kind = RSP_MSG_ADMIT,
                  .step = {.step_id = 1,
                           .rows = rows,
                           .num_rows = 1,
                           .post_forks = bad_fork,
                           .num_post_forks = 1}};
    expect_refused(pool, &m, RSP_ENOLABEL, "post_forks[0].to = 9");
    m = (rsp_msg){.kind = RSP_MSG_HOLDING, .rid = 1, .label = 7};
    expect_refused(pool, &m, RSP_ENOLABEL, "label 7 is not interned");
    m = (rsp_msg){.kind = RSP_MSG_RELEASE, .rid = 1, .label = 7};
    expect_refused(pool, &m, RSP_ENOLABEL, "label 7 is not interned");
    m = (rsp_msg){.kind = RSP_MSG_LABEL};
    expect_refused(pool, &m, RSP_EINVAL, "msg->label_name");
    m = (rsp_msg){.kind = RSP_MSG_LABEL, .label_name = ""};
    expect_refused(pool, &m, RSP_EINVAL, "msg->label_name");
    m = (rsp_msg){.kind = RSP_MSG_LABEL,
                  .label_name = "a-name-that-is-much-longer-than-thirty-one-characters"};
    expect_refused(pool, &m, RSP_EINVAL, "msg->label_name");
    m = (rsp_msg){.kind = RSP_MSG_BUILD_GRAPH_BUFFERS, .max_bs = 0};
    expect_refused(pool, &m, RSP_EINVAL, "msg->max_bs");

    rsp_error err;
    assert_int_equal(rsp_post(NULL, &m, NULL, 0, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "pool"));
    assert_int_equal(rsp_post(pool, NULL, NULL, 0, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "msg"));
    assert_int_equal(rsp_step_admit(pool, NULL, NULL, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "step"));
    assert_int_equal(rsp_wait(NULL, 0, NULL), RSP_EINVAL);

    /* None of them reached the owner. */
    assert_int_equal(counters(pool).messages_handled, handled);

    /* What only the owner knows comes back through the ticket. */
    rsp_step s = {.step_id = 3, .rows = rows, .num_rows = 1};
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_EORDER);
    assert_int_equal(err.status, RSP_EORDER);
    assert_non_null(strstr(err.message, "3"));
    rsp_row dup[2] = {{.rid = 1, .label = 0, .span = 1}, {.rid = 1, .label = 0, .span = 2}};
    s = (rsp_step){.step_id = 4, .rows = dup, .num_rows = 2};
    assert_int_equal(rsp_step_admit(pool, &s, NULL, &err), RSP_EDUPROW);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 12345, 0, &h, &err), RSP_ENOREQ);
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */

static void *unregistered_main(void *arg)
{
    rsp_status *st = arg;
    st[0] = rsp_read_begin();
    st[1] = rsp_reader_register(NULL);
    st[2] = rsp_read_begin();
    rsp_read_end();
    rsp_reader_unregister();
    st[3] = rsp_read_begin();
    return NULL;
}

static void unregistered_reader_gets_enotreg(void **state)
{
    (void)state;
    rsp_status st[4] = {RSP_OK, RSP_EINVAL, RSP_EINVAL, RSP_OK};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, unregistered_main, st), 0);
    pthread_join(th, NULL);
    assert_int_equal(st[0], RSP_ENOTREG);
    assert_int_equal(st[1], RSP_OK);
    assert_int_equal(st[2], RSP_OK);
    assert_int_equal(st[3], RSP_ENOTREG);
}

static void addressing_of_an_unplanned_label_names_the_planned_ones(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    rsp_label_id beam;
    assert_int_equal(rsp_label(pool, "beam", &beam, NULL), RSP_OK);
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step step = {.step_id = 7, .rows = rows, .num_rows = 1};
    assert_int_equal(rsp_step_admit(pool, &step, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &step, NULL), RSP_OK);
    rsp_reader_register(NULL);
    rsp_read_begin();
    const rsp_plan *plan = rsp_plan_live(pool);
    assert_non_null(plan);
    rsp_error err;
    rsp_addressing a;
    assert_int_equal(rsp_plan_addressing(plan, beam, &a, &err), RSP_ENOPLAN);
    assert_non_null(strstr(err.message, "main (0)"));
    assert_non_null(strstr(err.message, "step 7"));
    rsp_read_end();
    rsp_reader_unregister();
    assert_int_equal(rsp_step_commit(pool, &step, &forward_complete, NULL), RSP_OK);
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */

static void staged_plan_is_separate_until_promoted(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    /* Step 2 addresses another request, so committing step 1 changes
     * nothing the stage read, and the stage is promoted unchanged. */
    rsp_row rows2[1] = {{.rid = 2, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s1 = {.step_id = 1, .rows = rows, .num_rows = 1};
    rsp_step s2 = {.step_id = 2, .rows = rows2, .num_rows = 1, .preplan = true};
    assert_int_equal(rsp_step_admit(pool, &s1, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s1, NULL), RSP_OK);
    assert_int_equal(rsp_step_admit(pool, &s2, NULL, NULL), RSP_OK);
    rsp_msg m = {.kind = RSP_MSG_PLAN, .step = s2};
    rsp_ticket *t;
    rsp_reply r;
    assert_int_equal(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, &r), RSP_OK);
    assert_int_equal(r.plan_step_id, 2);
    assert_true(r.plan_staged);

    rsp_reader_register(NULL);
    rsp_read_begin();
    assert_int_equal(rsp_plan_step_id(rsp_plan_live(pool)), 1);
    const rsp_plan *staged = rsp_plan_staged(pool);
    assert_non_null(staged);
    assert_int_equal(rsp_plan_step_id(staged), 2);
    assert_true(rsp_plan_is_staged(staged));
    rsp_read_end();

    assert_int_equal(rsp_step_commit(pool, &s1, &forward_complete, NULL), RSP_OK);
    s2.preplan = false;
    assert_int_equal(rsp_step_plan(pool, &s2, NULL), RSP_OK);
    rsp_read_begin();
    assert_int_equal(rsp_plan_step_id(rsp_plan_live(pool)), 2);
    assert_false(rsp_plan_is_staged(rsp_plan_live(pool)));
    assert_null(rsp_plan_staged(pool));
    rsp_read_end();
    rsp_reader_unregister();
    assert_int_equal(rsp_step_commit(pool, &s2, &forward_complete, NULL), RSP_OK);
    rsp_stats s = counters(pool);
    assert_int_equal(s.stages, 1);
    assert_int_equal(s.plans, 2);
    assert_int_equal(s.promotions, 1);
    rsp_pool_destroy(pool);
}

static void changed_stage_is_dropped_for_a_live_plan(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    /* The stage of step 2 reads rid 1's has_state: true, as step 1 (in
     * flight) writes the slot (docs/semantics.md 9.1). A reset after step 1's
     * commit makes it false, so the stage is stale when step 2 goes live. */
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s1 = {.step_id = 1, .rows = rows, .num_rows = 1};
    rsp_step s2 = {.step_id = 2, .rows = rows, .num_rows = 1, .preplan = true};
    assert_int_equal(rsp_step_admit(pool, &s1, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s1, NULL), RSP_OK);
    assert_int_equal(rsp_step_admit(pool, &s2, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s2, NULL), RSP_OK);
    assert_int_equal(rsp_step_commit(pool, &s1, &forward_complete, NULL), RSP_OK);
    assert_int_equal(rsp_reset(pool, 1, false, NULL), RSP_OK);
    s2.preplan = false;
    assert_int_equal(rsp_step_plan(pool, &s2, NULL), RSP_OK);
    rsp_reader_register(NULL);
    rsp_read_begin();
    const rsp_plan *live = rsp_plan_live(pool);
    rsp_addressing a;
    assert_int_equal(rsp_plan_addressing(live, RSP_LABEL_MAIN, &a, NULL), RSP_OK);
    assert_int_equal(a.step_id, 2);
    assert_false(a.has_state[0]); /* what a live plan reads now, not the stage */
    assert_null(rsp_plan_staged(pool));
    rsp_read_end();
    rsp_reader_unregister();
    rsp_stats s = counters(pool);
    assert_int_equal(s.stages, 1);
    assert_int_equal(s.plans, 2);
    assert_int_equal(s.promotions, 0);

    /* A stage rolled back or cleared is unpublished too. */
    rsp_step s3 = {.step_id = 3, .rows = rows, .num_rows = 1, .preplan = true};
    assert_int_equal(rsp_step_commit(pool, &s2, &forward_complete, NULL), RSP_OK);
    assert_int_equal(rsp_step_admit(pool, &s3, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s3, NULL), RSP_OK);
    assert_int_equal(rsp_step_rollback(pool, 3, NULL, NULL), RSP_OK);
    rsp_reader_register(NULL);
    rsp_read_begin();
    assert_null(rsp_plan_staged(pool));
    rsp_read_end();
    rsp_step s4 = {.step_id = 4, .rows = rows, .num_rows = 1, .preplan = true};
    assert_int_equal(rsp_step_admit(pool, &s4, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s4, NULL), RSP_OK);
    rsp_read_begin();
    assert_non_null(rsp_plan_staged(pool));
    rsp_read_end();
    assert_int_equal(rsp_step_unstage(pool, NULL), RSP_OK);
    rsp_read_begin();
    assert_null(rsp_plan_staged(pool));
    rsp_read_end();
    rsp_reader_unregister();
    assert_int_equal(rsp_step_rollback(pool, 4, NULL, NULL), RSP_OK);
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */

typedef struct ref_ctx {
    rsp_pool *pool;
    uint32_t go;       /* set by main once step 1 is planned */
    uint32_t done;     /* set by main after 10,000 more steps */
    uint32_t have_ref; /* set by the reader */
    uint64_t step;     /* recorded */
    int32_t slot_before, slot_after;
    uint32_t len_after;
} ref_ctx;

static void wait_flag(uint32_t *f)
{
    while (!__atomic_load_n(f, __ATOMIC_ACQUIRE))
        sched_yield();
}

static void *ref_reader(void *arg)
{
    ref_ctx *c = arg;
    rsp_reader_register(NULL);
    wait_flag(&c->go);
    rsp_read_begin();
    const rsp_plan *plan = rsp_plan_ref(rsp_plan_live(c->pool));
    rsp_read_end();
    rsp_addressing a;
    rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, NULL);
    c->step = rsp_plan_step_id(plan);
    c->slot_before = a.slot_indices[0];
    __atomic_store_n(&c->have_ref, 1, __ATOMIC_RELEASE);
    wait_flag(&c->done);
    rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, NULL);
    c->slot_after = a.slot_indices[0];
    c->len_after = a.length;
    rsp_plan_unref(plan);
    rsp_reader_unregister();
    return NULL;
}

static void reference_keeps_a_plan_through_10000_more_steps(void **state)
{
    (void)state;
    ref_ctx c;
    memset(&c, 0, sizeof c);
    c.pool = make_pool(8, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, ref_reader, &c), 0);
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s = {.step_id = 1, .rows = rows, .num_rows = 1};
    assert_int_equal(rsp_step_admit(c.pool, &s, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(c.pool, &s, NULL), RSP_OK);
    __atomic_store_n(&c.go, 1, __ATOMIC_RELEASE);
    wait_flag(&c.have_ref);
    uint32_t failures = 0;
    for (uint64_t id = 2; id <= 10001; id++) {
        /* A different request every step, so the addressing changes. */
        assert_int_equal(rsp_step_commit(c.pool, &s, &forward_complete, NULL), RSP_OK);
        rows[0].rid = id % 2 ? 1 : 2;
        s.step_id = id;
        rsp_msg m[2] = {{.kind = RSP_MSG_ADMIT, .step = s}, {.kind = RSP_MSG_PLAN, .step = s}};
        rsp_ticket *t;
        failures += rsp_post(c.pool, &m[0], NULL, RSP_WAIT_FOREVER, NULL) != RSP_OK;
        failures += rsp_post(c.pool, &m[1], &t, RSP_WAIT_FOREVER, NULL) != RSP_OK;
        failures += rsp_wait(t, RSP_WAIT_FOREVER, NULL) != RSP_OK;
    }
    assert_int_equal(rsp_plan_wait(c.pool, 10001, RSP_WAIT_FOREVER, NULL), RSP_OK);
    __atomic_store_n(&c.done, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    assert_int_equal(rsp_step_commit(c.pool, &s, &forward_complete, NULL), RSP_OK);
    rsp_stats st = counters(c.pool);
    rsp_pool_destroy(c.pool);
    assert_int_equal(failures, 0);
    assert_int_equal(c.step, 1);
    assert_int_equal(c.slot_after, c.slot_before);
    assert_int_equal(c.len_after, 1);
    assert_int_equal(st.plans, 10001);
    assert_int_equal(st.commits, 10001);
}

/* ------------------------------------------------------------------------ */

typedef struct plan_waiter {
    rsp_pool *pool;
    uint64_t want;
    rsp_status st;
    uint64_t seen;
} plan_waiter;

static void *plan_waiter_main(void *arg)
{
    plan_waiter *w = arg;
    w->st = rsp_plan_wait(w->pool, w->want, RSP_WAIT_FOREVER, NULL);
    rsp_reader_register(NULL);
    rsp_read_begin();
    w->seen = rsp_plan_step_id(rsp_plan_live(w->pool));
    rsp_read_end();
    rsp_reader_unregister();
    return NULL;
}

static void plan_wait_wakes_when_the_step_is_published(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    plan_waiter w = {.pool = pool, .want = 3};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, plan_waiter_main, &w), 0);
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    for (uint64_t id = 1; id <= 4; id++) {
        rsp_step s = {.step_id = id, .rows = rows, .num_rows = 1};
        assert_int_equal(rsp_step_admit(pool, &s, NULL, NULL), RSP_OK);
        assert_int_equal(rsp_step_plan(pool, &s, NULL), RSP_OK);
        assert_int_equal(rsp_step_commit(pool, &s, &forward_complete, NULL), RSP_OK);
    }
    pthread_join(th, NULL);
    rsp_error err;
    assert_int_equal(rsp_plan_wait(pool, 5, 1000 * 1000, &err), RSP_ETIMEDOUT);
    rsp_pool_destroy(pool);
    assert_int_equal(w.st, RSP_OK);
    assert_true(w.seen >= 3);
}

/* ------------------------------------------------------------------------ */

typedef struct client {
    rsp_pool *pool;
    uint32_t id;
    uint32_t posted_ok, refused, other; /* recorded */
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    for (uint32_t i = 0; i < 2000; i++) {
        rsp_msg m = {.kind = RSP_MSG_INGEST, .rid = (uint64_t)c->id << 32 | i};
        rsp_status st = rsp_post(c->pool, &m, NULL, RSP_WAIT_FOREVER, NULL);
        if (st == RSP_OK)
            c->posted_ok++;
        else if (st == RSP_ESHUTDOWN)
            c->refused++;
        else
            c->other++;
    }
    return NULL;
}

static void shutdown_answers_messages_in_flight_and_refuses_later_posts(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 16);
    enum { C = 3, K = 50 };
    client cl[C];
    pthread_t th[C];
    for (uint32_t i = 0; i < C; i++) {
        cl[i] = (client){.pool = pool, .id = i + 1};
        assert_int_equal(pthread_create(&th[i], NULL, client_main, &cl[i]), 0);
    }
    rsp_ticket *kept[K];
    uint32_t posted = 0;
    for (uint32_t i = 0; i < K; i++) {
        rsp_msg m = {.kind = RSP_MSG_BARRIER};
        if (rsp_post(pool, &m, &kept[posted], RSP_WAIT_FOREVER, NULL) == RSP_OK)
            posted++;
    }
    plan_waiter w = {.pool = pool, .want = 1000};
    pthread_t wt;
    assert_int_equal(pthread_create(&wt, NULL, plan_waiter_main, &w), 0);

    rsp_msg sd = {.kind = RSP_MSG_SHUTDOWN};
    rsp_ticket *st_ticket;
    assert_int_equal(rsp_post(pool, &sd, &st_ticket, 0, NULL), RSP_OK);
    rsp_error err;
    rsp_msg m = {.kind = RSP_MSG_INGEST, .rid = 5};
    assert_int_equal(rsp_post(pool, &m, NULL, 0, &err), RSP_ESHUTDOWN);
    assert_int_equal(rsp_ingest(pool, 5, &err), RSP_ESHUTDOWN);
    assert_int_equal(rsp_post(pool, &sd, NULL, 0, &err), RSP_ESHUTDOWN);

    uint32_t answered = 0;
    for (uint32_t i = 0; i < posted; i++)
        answered += rsp_wait(kept[i], RSP_WAIT_FOREVER, NULL) == RSP_OK;
    assert_int_equal(rsp_wait(st_ticket, RSP_WAIT_FOREVER, NULL), RSP_OK);
    for (uint32_t i = 0; i < C; i++)
        pthread_join(th[i], NULL);
    pthread_join(wt, NULL);

    rsp_stats s = counters(pool);
    uint64_t ok_posts = posted + 1; /* + the shutdown message */
    for (uint32_t i = 0; i < C; i++)
        ok_posts += cl[i].posted_ok;
    rsp_pool_destroy(pool);

    assert_int_equal(answered, posted);
    assert_int_equal(posted, K);
    for (uint32_t i = 0; i < C; i++) {
        assert_int_equal(cl[i].other, 0);
        assert_int_equal(cl[i].posted_ok + cl[i].refused, 2000);
    }
    /* Every accepted post was handled, none after the shutdown. */
    assert_int_equal(s.messages_handled, ok_posts);
    assert_int_equal(w.st, RSP_ESHUTDOWN);
}

static void destroy_handles_queued_fire_and_forget_messages(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    for (uint64_t id = 1; id <= 200; id++) {
        rsp_step s = {.step_id = id, .rows = rows, .num_rows = 1};
        rsp_msg m[3] = {{.kind = RSP_MSG_ADMIT, .step = s},
                        {.kind = RSP_MSG_PLAN, .step = s},
                        {.kind = RSP_MSG_COMMIT, .step = s, .event = forward_complete}};
        for (int k = 0; k < 3; k++)
            assert_int_equal(rsp_post(pool, &m[k], NULL, RSP_WAIT_FOREVER, NULL), RSP_OK);
    }
    /* Destroy right away: the queue is handled, plans reclaimed, nothing
     * leaks (the ASan build checks). */
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */

static void *counter_reader(void *arg)
{
    rsp_pool *pool = arg;
    uint64_t last = 0, backwards = 0;
    for (int i = 0; i < 20000; i++) {
        rsp_stats s;
        rsp_stats_peek(pool, &s, NULL);
        if (s.messages_handled < last)
            backwards++;
        last = s.messages_handled;
    }
    return (void *)(uintptr_t)backwards;
}

static void counters_are_readable_from_any_thread_while_messages_flow(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, counter_reader, pool), 0);
    for (uint64_t i = 0; i < 2000; i++)
        assert_int_equal(rsp_ingest(pool, i, NULL), RSP_OK);
    void *ret;
    pthread_join(th, &ret);
    assert_int_equal((uintptr_t)ret, 0);
    rsp_stats s = counters(pool);
    assert_int_equal(s.num_requests, 2000);
    assert_int_equal(s.messages_handled, 2000);
    assert_int_equal(s.inbox_depth, 0);
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */

static void forked_child_gets_eforked_instead_of_hanging(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    assert_int_equal(rsp_ingest(pool, 1, NULL), RSP_OK);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child: no cmocka here; report through the exit code. */
        int bad = 0;
        rsp_error err;
        bad |= (rsp_ingest(pool, 2, &err) != RSP_EFORKED) << 0;
        bad |= (err.status != RSP_EFORKED) << 1;
        bad |= (rsp_read_begin() != RSP_EFORKED) << 2;
        bad |= (rsp_plan_wait(pool, 1, RSP_WAIT_FOREVER, NULL) != RSP_EFORKED) << 3;
        rsp_stats s;
        bad |= (rsp_stats_peek(pool, &s, NULL) != RSP_EFORKED) << 4;
        rsp_pool *other = NULL;
        rsp_pool_config cfg;
        rsp_pool_config_init(&cfg);
        bad |= (rsp_pool_create(&cfg, &other, NULL) != RSP_EFORKED) << 5;
        rsp_pool_destroy(pool); /* must return, not hang */
        _exit(bad);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent is unaffected. */
    assert_int_equal(rsp_ingest(pool, 3, NULL), RSP_OK);
    rsp_pool_destroy(pool);
}

/* The read side's fast paths check no fork flag: a child forked inside a
 * default reader's read section, with a live plan, must still get
 * RSP_EFORKED (or nothing) from every read call, not the plan. */
static void forked_child_inside_a_read_section_gets_eforked(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step step = {.step_id = 1, .rows = rows, .num_rows = 1};
    assert_int_equal(rsp_step_admit(pool, &step, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &step, NULL), RSP_OK);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    rsp_addressing a;
    assert_int_equal(rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, NULL), RSP_OK);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        rsp_error err;
        bad |= (rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, &err) != RSP_EFORKED) << 0;
        bad |= (err.status != RSP_EFORKED) << 1;
        bad |= (rsp_plan_live(pool) != NULL) << 2;
        bad |= (rsp_read_end() != RSP_EFORKED) << 3;
        bad |= (rsp_read_begin() != RSP_EFORKED) << 4;
        bad |= (rsp_read_explain(rsp_read_begin(), &err) != RSP_EFORKED) << 5;
        bad |= (rsp_plan_live_addressing(NULL, RSP_LABEL_MAIN, &a, &err) != RSP_EINVAL) << 6;
        _exit(bad);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent's section is untouched. */
    assert_int_equal(rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, NULL), RSP_OK);
    assert_int_equal(rsp_read_end(), RSP_OK);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

typedef struct holder {
    rsp_pool *pool;
    uint32_t have_ref, release; /* flags between the threads */
    uint32_t mismatches;        /* recorded */
} holder;

static void *holder_main(void *arg)
{
    holder *h = arg;
    rsp_reader_register(NULL);
    rsp_read_begin();
    const rsp_plan *plan = rsp_plan_ref(rsp_plan_live(h->pool));
    rsp_read_end();
    rsp_reader_unregister();
    __atomic_store_n(&h->have_ref, 1, __ATOMIC_RELEASE);
    wait_flag(&h->release);
    /* The pool is being destroyed; the plan must still be whole (ASan
     * would report a use after free). */
    rsp_addressing a;
    if (rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, NULL) != RSP_OK || a.num_rows != 1 ||
        a.slot_indices[0] <= 0 || rsp_plan_step_id(plan) != 1)
        h->mismatches++;
    rsp_plan_unref(plan);
    return NULL;
}

static void *destroy_main(void *arg)
{
    rsp_pool_destroy(arg);
    return NULL;
}

static void destroy_waits_for_readers_references(void **state)
{
    (void)state;
    holder h = {.pool = make_pool(8, 0)};
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s = {.step_id = 1, .rows = rows, .num_rows = 1};
    assert_int_equal(rsp_step_admit(h.pool, &s, NULL, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(h.pool, &s, NULL), RSP_OK);
    pthread_t rt, dt;
    assert_int_equal(pthread_create(&rt, NULL, holder_main, &h), 0);
    wait_flag(&h.have_ref);
    assert_int_equal(pthread_create(&dt, NULL, destroy_main, h.pool), 0);
    /* Give destroy time to get as far as it can (ordering bias only: the
     * test passes either way when the code is right). */
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    __atomic_store_n(&h.release, 1, __ATOMIC_RELEASE);
    pthread_join(rt, NULL);
    pthread_join(dt, NULL);
    assert_int_equal(h.mismatches, 0);
}

static void wait_poll_then_answer(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    rsp_msg m = {.kind = RSP_MSG_HOLDING, .rid = 77, .label = RSP_LABEL_MAIN};
    rsp_ticket *t;
    assert_int_equal(rsp_post(pool, &m, &t, 0, NULL), RSP_OK);
    rsp_reply r;
    rsp_status st;
    uint64_t polls = 0;
    while ((st = rsp_wait(t, RSP_WAIT_POLL, &r)) == RSP_EAGAIN)
        polls++;
    (void)polls;
    /* The owner's status comes back through wait and the reply. */
    assert_int_equal(st, RSP_ENOREQ);
    assert_int_equal(r.error.status, RSP_ENOREQ);
    assert_non_null(strstr(r.error.message, "77"));
    assert_int_equal(rsp_post(pool, &m, &t, 0, NULL), RSP_OK);
    while ((st = rsp_wait(t, 1000, &r)) == RSP_ETIMEDOUT)
        ;
    assert_int_equal(st, RSP_ENOREQ);
    rsp_pool_destroy(pool);
}

/* the published staged plan follows the core's stage reports: a
 * commit (a preplanned capture step's), a rollback and clear_preplan each
 * end the stage, and the pool unpublishes it. */
static bool staged_published(rsp_pool *pool)
{
    rsp_read_begin();
    bool has = rsp_plan_staged(pool) != NULL;
    rsp_read_end();
    return has;
}

static void staged_plan_goes_when_the_core_ends_the_stage(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    rsp_reader_register(NULL);
    rsp_row rows[1] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s = {.step_id = 1, .rows = rows, .num_rows = 1, .capture = true, .preplan = true};
    for (int end = 0; end < 3; end++) {
        s.step_id = 1 + (uint64_t)end;
        assert_int_equal(rsp_step_admit(pool, &s, NULL, NULL), RSP_OK);
        assert_int_equal(rsp_step_plan(pool, &s, NULL), RSP_OK);
        assert_true(staged_published(pool));
        if (end == 0)
            assert_int_equal(rsp_step_commit(pool, &s, &forward_complete, NULL), RSP_OK);
        else if (end == 1)
            assert_int_equal(rsp_step_rollback(pool, s.step_id, NULL, NULL), RSP_OK);
        else
            assert_int_equal(rsp_step_unstage(pool, NULL), RSP_OK);
        assert_false(staged_published(pool));
    }
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pool_info_and_block_views_describe_the_storage),
        cmocka_unit_test(sync_wrappers_run_a_step_and_count_it),
        cmocka_unit_test(invalid_messages_are_refused_before_the_owner),
        cmocka_unit_test(per_rid_forks_and_release_through_the_pool),
        cmocka_unit_test(unregistered_reader_gets_enotreg),
        cmocka_unit_test(addressing_of_an_unplanned_label_names_the_planned_ones),
        cmocka_unit_test(staged_plan_is_separate_until_promoted),
        cmocka_unit_test(changed_stage_is_dropped_for_a_live_plan),
        cmocka_unit_test(staged_plan_goes_when_the_core_ends_the_stage),
        cmocka_unit_test(reference_keeps_a_plan_through_10000_more_steps),
        cmocka_unit_test(plan_wait_wakes_when_the_step_is_published),
        cmocka_unit_test(shutdown_answers_messages_in_flight_and_refuses_later_posts),
        cmocka_unit_test(destroy_handles_queued_fire_and_forget_messages),
        cmocka_unit_test(counters_are_readable_from_any_thread_while_messages_flow),
        cmocka_unit_test(forked_child_gets_eforked_instead_of_hanging),
        cmocka_unit_test(forked_child_inside_a_read_section_gets_eforked),
        cmocka_unit_test(destroy_waits_for_readers_references),
        cmocka_unit_test(wait_poll_then_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
