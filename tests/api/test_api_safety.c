/*
 * The public API's safety rules on the host device: a bad forward_done is
 * refused before anything changes; device work that fails after the state
 * changed breaks the pool for good (RSP_EDEVICE); nothing waits for the
 * owner from inside a read section; a live plan that takes a stage's leased
 * buffer unpublishes that stage.
 * Worker threads record; the main thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "pool.h" /* rsp__pool_inject_submit_failures */

/* forward_done of a commit whose forward (none runs here) is already done:
 * rsp_event_complete(). */
static const rsp_event forward_complete = {.kind = RSP_EVENT_COMPLETE};

/* One 16-byte block, one layer: slot s is floats [4 s, 4 s + 4). */
static rsp_pool *make_pool(uint32_t max_slots, uint32_t inbox_capacity)
{
    static const rsp_block_config block = {
        .name = "s", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 1;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
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

static float *slot_row(rsp_pool *pool, int32_t slot)
{
    rsp_block_view v;
    assert_int_equal(rsp_pool_block(pool, "s", 0, &v, NULL), RSP_OK);
    return (float *)v.data + 4 * slot;
}

/* The ready event of the live plan's main label (a read section of its own). */
static rsp_event live_ready(rsp_pool *pool)
{
    assert_int_equal(rsp_read_begin(), RSP_OK);
    const rsp_plan *plan = rsp_plan_live(pool);
    assert_non_null(plan);
    rsp_addressing a;
    assert_int_equal(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, NULL), RSP_OK);
    rsp_read_end();
    return a.ready;
}

static rsp_stats stats(rsp_pool *pool)
{
    rsp_stats s;
    rsp_error err;
    rsp_status st = rsp_stats_snapshot(pool, &s, &err);
    if (st != RSP_OK)
        print_error("rsp_stats_snapshot: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    return s;
}

/* ------------------------------------------------------------------------ */

static void bad_forward_done_is_refused_with_the_pool_unchanged(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4, 0);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, &s, &o, NULL), RSP_OK);
    assert_true(o.ok);
    assert_int_equal(rsp_step_plan(pool, &s, NULL), RSP_OK);
    rsp_event ready = live_ready(pool);
    assert_int_equal(rsp_event_wait(pool, &ready, RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &h, NULL), RSP_OK);
    float *data = slot_row(pool, h.index);
    for (int i = 0; i < 4; i++)
        data[i] = 42.0f;                                 /* the forward wrote the slot */
    assert_int_equal(rsp_remove(pool, 1, NULL), RSP_OK); /* pinned by step 1: pending */
    rsp_stats before = stats(pool);
    assert_int_equal(before.pending_release, 1);

    /* The pool's own timeline at a value no submitted work reaches. */
    rsp_event bogus = rsp_event_host(ready.handle, ready.value + 1000);
    rsp_error err;
    assert_int_equal(rsp_step_commit(pool, &s, &bogus, &err), RSP_EINVAL);
    assert_int_equal(err.status, RSP_EINVAL);
    assert_non_null(strstr(err.message, "forward_done"));
    assert_int_equal(rsp_step_rollback(pool, 1, &bogus, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "forward_done"));

    rsp_stats after = stats(pool);
    assert_int_equal(after.pending_release, before.pending_release);
    assert_int_equal(after.free_slots, before.free_slots);
    assert_int_equal(after.commits, before.commits);
    assert_int_equal(after.rollbacks, before.rollbacks);
    assert_true(data[0] == 42.0f); /* not zeroed: still the step's */

    /* The step is still in flight: a good commit finishes it and zeroes. */
    assert_int_equal(rsp_step_commit(pool, &s, &forward_complete, NULL), RSP_OK);
    assert_int_equal(rsp_barrier(pool, NULL), RSP_OK);
    after = stats(pool);
    assert_int_equal(after.pending_release, 0);
    assert_int_equal(after.commits, 1);
    /* The zeroing was submitted, maybe not run yet: the next plan's ready
     * event comes after it on the device (FIFO). */
    rsp_row r2 = {.rid = 2, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s2 = {.step_id = 2, .rows = &r2, .num_rows = 1};
    assert_int_equal(rsp_step_admit(pool, &s2, &o, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s2, NULL), RSP_OK);
    ready = live_ready(pool);
    assert_int_equal(rsp_event_wait(pool, &ready, RSP_WAIT_FOREVER, NULL), RSP_OK);
    for (int i = 0; i < 4; i++)
        assert_true(data[i] == 0.0f);

    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

static void device_failure_after_the_core_changed_breaks_the_pool(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4, 0);
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, &s, &o, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s, NULL), RSP_OK);
    assert_int_equal(rsp_remove(pool, 1, NULL), RSP_OK); /* commit will zero its slot */

    rsp__pool_inject_submit_failures(pool, 1);
    rsp_error err;
    assert_int_equal(rsp_step_commit(pool, &s, &forward_complete, &err), RSP_EDEVICE);
    assert_non_null(strstr(err.message, "commit of step 1"));
    assert_non_null(strstr(err.message, "broken"));

    /* Every later message, whatever it is, names the failure. */
    assert_int_equal(rsp_barrier(pool, &err), RSP_EDEVICE);
    assert_non_null(strstr(err.message, "commit of step 1"));
    rsp_stats st;
    assert_int_equal(rsp_stats_snapshot(pool, &st, &err), RSP_EDEVICE);
    assert_int_equal(rsp_ingest(pool, 7, &err), RSP_EDEVICE);
    rsp_ticket *t = NULL;
    rsp_msg m = {.kind = RSP_MSG_INGEST, .rid = 8};
    assert_int_equal(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp_reply r;
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, &r), RSP_EDEVICE);
    assert_non_null(strstr(r.error.message, "commit of step 1"));
    /* A plan waiter is released: the step it waits for will never come. */
    assert_int_equal(rsp_plan_wait(pool, 2, RSP_WAIT_FOREVER, &err), RSP_ESHUTDOWN);
    /* The counters stay readable without a message. */
    assert_int_equal(rsp_stats_peek(pool, &st, NULL), RSP_OK);
    assert_int_equal(st.commits, 0);
    rsp_pool_destroy(pool);
}

static void plan_device_failure_breaks_the_pool_and_publishes_nothing(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4, 0);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, &s, &o, NULL), RSP_OK);
    rsp__pool_inject_submit_failures(pool, 1);
    rsp_error err;
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_EDEVICE);
    assert_non_null(strstr(err.message, "plan of step 1"));
    assert_int_equal(rsp_read_begin(), RSP_OK);
    assert_null(rsp_plan_live(pool));
    rsp_read_end();
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_EDEVICE);
    assert_non_null(strstr(err.message, "plan of step 1"));
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

static void waits_on_the_owner_inside_a_read_section_are_refused(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    rsp_stats c0;
    assert_int_equal(rsp_stats_peek(pool, &c0, NULL), RSP_OK);

    assert_int_equal(rsp_read_begin(), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK); /* nested */
    rsp_read_end();                             /* still inside the outer one */
    rsp_error err;
    assert_int_equal(rsp_barrier(pool, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "read section"));
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, &s, &o, &err), RSP_EINVAL);
    assert_int_equal(rsp_ingest(pool, 5, &err), RSP_EINVAL);
    rsp_stats st;
    assert_int_equal(rsp_stats_snapshot(pool, &st, &err), RSP_EINVAL);
    assert_int_equal(rsp_plan_wait(pool, 1, 1000000000u, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "read section"));
    assert_int_equal(rsp_plan_wait(pool, 1, 0, &err), RSP_ETIMEDOUT); /* a poll is fine */
    /* Destroy would wait for this section: it does nothing instead. */
    rsp_pool_destroy(pool);

    /* A posted ticket may be polled, not waited for. */
    rsp_msg m = {.kind = RSP_MSG_BARRIER};
    rsp_ticket *t = NULL;
    assert_int_equal(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp_reply r;
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, &r), RSP_EINVAL);
    assert_non_null(strstr(r.error.message, "read section"));
    assert_int_equal(rsp_wait(t, 1000000u, &r), RSP_EINVAL);
    rsp_status ws;
    while ((ws = rsp_wait(t, RSP_WAIT_POLL, &r)) == RSP_EAGAIN)
        sched_yield();
    assert_int_equal(ws, RSP_OK);
    rsp_read_end();

    /* Nothing was posted but the one barrier; the pool still works. */
    rsp_stats c1;
    assert_int_equal(rsp_stats_peek(pool, &c1, NULL), RSP_OK);
    assert_int_equal(c1.messages_handled, c0.messages_handled + 1);
    assert_int_equal(rsp_barrier(pool, NULL), RSP_OK);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

/* A thread inside a read section stalls the owner once the retired-plan cap
 * forces a grace period; a post that finds the inbox full then refuses
 * (RSP_EFULL) instead of waiting for credit that would never come. */
static void post_inside_a_read_section_does_not_wait_for_credit(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 16);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_error err;
    rsp_status st = RSP_OK;
    uint64_t id;
    /* The inbox holds 16; the owner stops after about 64 retired plans, so
     * the inbox fills for good (before the rule, the post hung there). */
    for (id = 1; id < 100000 && st == RSP_OK; id++) {
        rsp_msg m = {.kind = RSP_MSG_ADMIT, .step = {.step_id = id, .rows = &row, .num_rows = 1}};
        st = rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err);
        m.kind = RSP_MSG_PLAN;
        if (st == RSP_OK)
            st = rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err);
        m.kind = RSP_MSG_COMMIT;
        m.event = forward_complete;
        if (st == RSP_OK)
            st = rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err);
    }
    assert_int_equal(st, RSP_EFULL);
    assert_non_null(strstr(err.message, "read section"));
    rsp_read_end(); /* the owner moves again */
    assert_int_equal(rsp_barrier(pool, NULL), RSP_OK);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

static void live_plan_that_takes_a_stage_lease_unpublishes_the_stage(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 0);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    rsp_row r1 = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_row r2 = {.rid = 2, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_row r3 = {.rid = 3, .label = RSP_LABEL_MAIN, .span = 1};
    const rsp_lease lease = {.bucket_bs = 4, .bucket_id = 0, .lease_slot = 0};
    const rsp_lease other = {.bucket_bs = 4, .bucket_id = 0, .lease_slot = 1};
    rsp_step s1 = {.step_id = 1, .rows = &r1, .num_rows = 1, .has_lease = true, .lease = lease};
    rsp_step s2 = {.step_id = 2,
                   .rows = &r2,
                   .num_rows = 1,
                   .has_lease = true,
                   .lease = lease,
                   .preplan = true};
    rsp_step s3 = {.step_id = 3,
                   .rows = &r3,
                   .num_rows = 1,
                   .has_lease = true,
                   .lease = other,
                   .preplan = true};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, &s1, &o, NULL), RSP_OK);
    assert_int_equal(rsp_step_admit(pool, &s2, &o, NULL), RSP_OK);
    assert_int_equal(rsp_step_admit(pool, &s3, &o, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s2, NULL), RSP_OK); /* stage 2 on the lease */
    assert_int_equal(rsp_step_plan(pool, &s1, NULL), RSP_OK); /* live 1 takes it */

    assert_int_equal(rsp_read_begin(), RSP_OK);
    assert_null(rsp_plan_staged(pool));
    assert_non_null(rsp_plan_live(pool));
    assert_int_equal(rsp_plan_step_id(rsp_plan_live(pool)), 1);
    rsp_read_end();

    /* The buffer serves live step 1 now: a stage of step 2 there is refused. */
    rsp_error err;
    assert_int_equal(rsp_step_plan(pool, &s2, &err), RSP_ECAPACITY);

    /* Control: a stage on another lease slot survives a live plan. */
    assert_int_equal(rsp_step_commit(pool, &s1, &forward_complete, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s3, NULL), RSP_OK);
    s2.preplan = false;
    assert_int_equal(rsp_step_plan(pool, &s2, NULL), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    const rsp_plan *staged = rsp_plan_staged(pool);
    assert_non_null(staged);
    assert_int_equal(rsp_plan_step_id(staged), 3);
    assert_int_equal(rsp_plan_step_id(rsp_plan_live(pool)), 2);
    rsp_read_end();
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

/* rsp.h: the host copies of an addressing live as long as the plan; the
 * device vectors only while the step is in flight (a later, larger step
 * grows the eager buffer and the host device frees the old arrays). Under
 * ASan a read of the host copies after that growth is checked too. */
static void referenced_plan_keeps_its_host_copies_after_its_buffer_grows(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(300, 0);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    rsp_row r1 = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    static rsp_row rows[200];
    for (int i = 0; i < 200; i++)
        rows[i] = (rsp_row){.rid = 100 + (rsp_rid)i, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s1 = {.step_id = 1, .rows = &r1, .num_rows = 1};
    rsp_step s2 = {.step_id = 2, .rows = rows, .num_rows = 200};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, &s1, &o, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s1, NULL), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    const rsp_plan *plan = rsp_plan_ref(rsp_plan_live(pool));
    rsp_read_end();
    rsp_addressing a;
    assert_int_equal(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, NULL), RSP_OK);
    const int32_t slot = a.slot_indices[0];
    const uint64_t gen = a.generations[0];

    assert_int_equal(rsp_step_commit(pool, &s1, &forward_complete, NULL), RSP_OK);
    assert_int_equal(rsp_step_admit(pool, &s2, &o, NULL), RSP_OK);
    assert_true(o.ok);
    assert_int_equal(rsp_step_plan(pool, &s2, NULL), RSP_OK);
    rsp_event ready = live_ready(pool);
    assert_int_equal(rsp_event_wait(pool, &ready, RSP_WAIT_FOREVER, NULL), RSP_OK);

    rsp_addressing again;
    assert_int_equal(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &again, NULL), RSP_OK);
    assert_int_equal(again.num_rows, 1);
    assert_int_equal(again.slot_indices[0], slot);
    assert_true(again.has_state[0] == a.has_state[0]);
    assert_int_equal(again.generations[0], gen);
    rsp_plan_unref(plan);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_forward_done_is_refused_with_the_pool_unchanged),
        cmocka_unit_test(device_failure_after_the_core_changed_breaks_the_pool),
        cmocka_unit_test(plan_device_failure_breaks_the_pool_and_publishes_nothing),
        cmocka_unit_test(waits_on_the_owner_inside_a_read_section_are_refused),
        cmocka_unit_test(post_inside_a_read_section_does_not_wait_for_credit),
        cmocka_unit_test(live_plan_that_takes_a_stage_lease_unpublishes_the_stage),
        cmocka_unit_test(referenced_plan_keeps_its_host_copies_after_its_buffer_grows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
