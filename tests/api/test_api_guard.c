/*
 * Guard mode (rsp_pool_config.guard, docs/semantics.md 9.6): a forward
 * that writes a slot it did not address is reported at its commit with
 * the slot, its holder or "free", the step, the block and the layer; a
 * correct forward and writes into the sink are not; guard off checks
 * nothing. The "kernels" are the test's own writes into the host
 * device's storage through rsp_pool_block.
 * on_error runs on the owner (or in its role on the caller's thread):
 * it records, the main thread asserts after the answer.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#define NLAYERS 2u
#define NSLOTS 8u
#define MAXREP 16

typedef struct found {
    rsp_status status;
    rsp_msg_kind kind;
    uint64_t step_id;
    bool has_guard;
    rsp_guard_violation v;
    char message[RSP_ERROR_MAX * 2];
} found;

static found reps[MAXREP];
static int num_reps;

static void on_error(void *ctx, const rsp_failure *f)
{
    (void)ctx;
    if (num_reps >= MAXREP)
        return;
    found *r = &reps[num_reps++];
    r->status = f->status;
    r->kind = f->kind;
    r->step_id = f->step_id;
    r->has_guard = f->guard != NULL;
    if (f->guard)
        r->v = *f->guard;
    snprintf(r->message, sizeof r->message, "%s", f->message);
}

/* Two blocks ("conv": 3 floats, "ssm": 2x2 floats), two layers, a sink. */
static rsp_pool *make_pool(bool guard)
{
    static const rsp_block_config blocks[2] = {
        {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {3}},
        {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 2, .shape = {2, 2}},
    };
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = NLAYERS;
    cfg.blocks = blocks;
    cfg.num_blocks = 2;
    cfg.max_slots = NSLOTS;
    cfg.on_error = on_error;
    cfg.guard = guard;
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_create: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    num_reps = 0;
    return pool;
}

/* The "kernel": write v over (block, layer) of slot. */
static void write_slot(rsp_pool *pool, const char *block, uint32_t layer, int32_t slot, float v)
{
    rsp_block_view bv;
    assert_int_equal(rsp_pool_block(pool, block, layer, &bv, NULL), RSP_OK);
    float *p = (float *)bv.data + (int64_t)slot * bv.strides[0];
    for (int64_t i = 0; i < bv.strides[0]; i++)
        p[i] = v;
}

/* A correct forward: every block and layer of the slot. */
static void write_all(rsp_pool *pool, int32_t slot, float v)
{
    for (uint32_t l = 0; l < NLAYERS; l++) {
        write_slot(pool, "conv", l, slot, v);
        write_slot(pool, "ssm", l, slot, v);
    }
}

static int32_t slot_of(rsp_pool *pool, rsp_rid rid)
{
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, rid, RSP_LABEL_MAIN, &h, NULL), RSP_OK);
    return h.index;
}

/* Admit and plan step id over rids[0 .. n). */
static void plan(rsp_pool *pool, uint64_t id, const rsp_rid *rids, uint32_t n, rsp_step *s,
                 rsp_row *rows)
{
    for (uint32_t i = 0; i < n; i++)
        rows[i] = (rsp_row){.rid = rids[i], .label = RSP_LABEL_MAIN, .span = 1};
    *s = (rsp_step){.step_id = id, .rows = rows, .num_rows = n};
    rsp_admit_outcome o;
    rsp_error err;
    assert_int_equal(rsp_step_admit(pool, s, &o, &err), RSP_OK);
    assert_true(o.ok);
    assert_int_equal(rsp_step_plan(pool, s, &err), RSP_OK);
}

static void commit(rsp_pool *pool, const rsp_step *s)
{
    rsp_event done = rsp_event_complete();
    rsp_error err;
    rsp_status st = rsp_step_commit(pool, s, &done, &err);
    if (st != RSP_OK)
        print_error("commit: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
}

static rsp_stats stats(rsp_pool *pool)
{
    rsp_stats s;
    assert_int_equal(rsp_stats_snapshot(pool, &s, NULL), RSP_OK);
    return s;
}

/* Guard mode's counts, as the state dump carries them ("guard" of its
 * "pool" part); a pool without guard mode says null. */
typedef struct guard_counts {
    bool on;
    unsigned long long checks, violations;
} guard_counts;

static guard_counts counts(rsp_pool *pool)
{
    char buf[8192];
    size_t needed = 0;
    assert_int_equal(rsp_pool_dump(pool, buf, sizeof buf, &needed, NULL), RSP_OK);
    guard_counts c = {0};
    const char *g = strstr(buf, "\"guard\":");
    assert_non_null(g);
    c.on =
        sscanf(g, "\"guard\":{\"checks\":%llu,\"violations\":%llu}", &c.checks, &c.violations) == 2;
    if (!c.on)
        assert_memory_equal(g, "\"guard\":null", 12);
    return c;
}

/* Step 1 gives rids 1, 2, 3 their slots and writes them (a correct
 * forward); the sink is written too (padding rows write there). */
static void first_step(rsp_pool *pool)
{
    rsp_rid rids[3] = {1, 2, 3};
    rsp_row rows[3];
    rsp_step s;
    plan(pool, 1, rids, 3, &s, rows);
    for (int i = 0; i < 3; i++)
        write_all(pool, slot_of(pool, rids[i]), (float)(10 + i));
    write_all(pool, 0, 99.0f); /* the sink */
    commit(pool, &s);
}

static void correct_forward_and_sink_writes_are_not_reported(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true);
    first_step(pool);
    rsp_rid rids[2] = {1, 2};
    rsp_row rows[2];
    rsp_step s;
    plan(pool, 2, rids, 2, &s, rows); /* rid 3's slot: held, addressed by no step */
    write_all(pool, slot_of(pool, 1), 5.0f);
    write_all(pool, slot_of(pool, 2), 6.0f);
    write_all(pool, 0, -1.0f);
    commit(pool, &s);
    guard_counts c = counts(pool);
    assert_int_equal(num_reps, 0);
    assert_true(c.on);
    assert_int_equal(c.checks, 2);
    assert_int_equal(c.violations, 0);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void neighbour_write_is_reported_with_its_holder(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true);
    first_step(pool);
    rsp_rid rids[2] = {1, 2};
    rsp_row rows[2];
    rsp_step s;
    plan(pool, 2, rids, 2, &s, rows);
    const int32_t victim = slot_of(pool, 3);
    write_all(pool, slot_of(pool, 1), 5.0f);
    write_all(pool, slot_of(pool, 2), 6.0f);
    write_slot(pool, "ssm", 1, victim, 7.0f); /* the neighbour's slot: block 1, layer 1 */
    commit(pool, &s);
    assert_int_equal(num_reps, 1);
    const found *r = &reps[0];
    assert_true(r->has_guard);
    assert_int_equal(r->status, RSP_EDEVICE);
    assert_int_equal(r->kind, RSP_MSG_COMMIT);
    assert_int_equal(r->step_id, 2);
    assert_int_equal(r->v.slot, victim);
    assert_true(r->v.held);
    assert_int_equal(r->v.rid, 3);
    assert_int_equal(r->v.label, RSP_LABEL_MAIN);
    assert_int_equal(r->v.step_id, 2);
    assert_int_equal(r->v.block, 1);
    assert_int_equal(r->v.layer, 1);
    assert_int_equal(r->v.regions, 1);
    assert_non_null(strstr(r->message, "rid 3"));
    assert_int_equal(counts(pool).violations, 1);

    /* Reported once: the next plan's snapshot takes the slot as it is. */
    plan(pool, 3, rids, 2, &s, rows);
    commit(pool, &s);
    assert_int_equal(num_reps, 1);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void write_past_the_batch_into_a_free_slot_is_reported(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true);
    first_step(pool);
    rsp_rid rids[2] = {1, 2};
    rsp_row rows[2];
    rsp_step s;
    plan(pool, 2, rids, 2, &s, rows);
    write_all(pool, slot_of(pool, 1), 5.0f);
    write_all(pool, slot_of(pool, 2), 6.0f);
    write_slot(pool, "conv", 0, NSLOTS - 1, 1.0f); /* never handed out */
    write_slot(pool, "conv", 1, NSLOTS - 1, 1.0f);
    commit(pool, &s);
    assert_int_equal(num_reps, 1);
    assert_true(reps[0].has_guard);
    assert_int_equal(reps[0].v.slot, NSLOTS - 1);
    assert_false(reps[0].v.held);
    assert_int_equal(reps[0].v.step_id, 2);
    assert_int_equal(reps[0].v.block, 0);
    assert_int_equal(reps[0].v.layer, 0);
    assert_int_equal(reps[0].v.regions, 2);
    assert_non_null(strstr(reps[0].message, "free"));

    /* Still not zero at the next commit: reported again, each time. */
    plan(pool, 3, rids, 2, &s, rows);
    commit(pool, &s);
    assert_int_equal(num_reps, 2);
    assert_int_equal(reps[1].v.slot, NSLOTS - 1);
    assert_int_equal(reps[1].v.step_id, 3);
    write_slot(pool, "conv", 0, NSLOTS - 1, 0.0f);
    write_slot(pool, "conv", 1, NSLOTS - 1, 0.0f);
    plan(pool, 4, rids, 2, &s, rows);
    commit(pool, &s);
    assert_int_equal(num_reps, 2);
    guard_counts c = counts(pool);
    assert_int_equal(c.violations, 2);
    assert_int_equal(c.checks, 4);
    /* The same counts are rsp_stats fields (and so metrics). */
    rsp_stats st = stats(pool);
    assert_int_equal(st.guard_violations, 2);
    assert_int_equal(st.guard_checks, 4);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

/* Both kinds in one forward, and the state the pool keeps is untouched:
 * the commit stands, has_state and the free count are as without guard. */
static void each_slot_is_one_report_and_nothing_else_changes(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true);
    first_step(pool);
    rsp_rid rids[2] = {1, 2};
    rsp_row rows[2];
    rsp_step s;
    plan(pool, 2, rids, 2, &s, rows);
    write_all(pool, slot_of(pool, 3), 8.0f); /* every region of the neighbour */
    write_slot(pool, "ssm", 0, 5, 2.0f);     /* a free slot past the batch */
    uint32_t free_before = stats(pool).free_slots;
    commit(pool, &s);
    assert_int_equal(num_reps, 2);
    assert_int_equal(reps[0].v.slot, slot_of(pool, 3)); /* slot order */
    assert_int_equal(reps[0].v.regions, 2 * NLAYERS);
    assert_int_equal(reps[1].v.slot, 5);
    assert_int_equal(reps[1].v.block, 1);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &h, NULL), RSP_OK);
    assert_true(h.has_state);
    assert_int_equal(stats(pool).free_slots, free_before);
    write_slot(pool, "ssm", 0, 5, 0.0f);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

/* The check runs once forward_done fired: a write made after the commit
 * was posted, before the fence is signalled, is seen. */
static void the_check_waits_for_forward_done(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true);
    first_step(pool);
    rsp_rid rids[1] = {1};
    rsp_row rows[1];
    rsp_step s;
    plan(pool, 2, rids, 1, &s, rows);
    const int32_t other = slot_of(pool, 2); /* before the post: the owner waits for the fence */
    rsp_host_fence *fence;
    assert_int_equal(rsp_host_fence_create(&fence, NULL), RSP_OK);
    rsp_msg m = {.kind = RSP_MSG_COMMIT, .step = s, .event = rsp_event_host(fence, 1)};
    rsp_ticket *t;
    assert_int_equal(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    write_slot(pool, "conv", 1, other, 4.0f); /* the late, wrong write */
    rsp_host_fence_signal(fence, 1);
    rsp_reply r;
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, &r), RSP_OK);
    rsp_host_fence_destroy(fence);
    assert_int_equal(num_reps, 1);
    assert_int_equal(reps[0].v.rid, 2);
    assert_int_equal(reps[0].v.block, 0);
    assert_int_equal(reps[0].v.layer, 1);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void guard_off_checks_nothing(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(false);
    first_step(pool);
    rsp_rid rids[2] = {1, 2};
    rsp_row rows[2];
    rsp_step s;
    plan(pool, 2, rids, 2, &s, rows);
    write_all(pool, slot_of(pool, 3), 8.0f);
    write_slot(pool, "ssm", 0, 5, 2.0f);
    commit(pool, &s);
    assert_int_equal(num_reps, 0);
    assert_false(counts(pool).on);
    write_slot(pool, "ssm", 0, 5, 0.0f);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

/* A rolled-back step's snapshot is dropped; the next step checks again. */
static void rollback_then_steps_check_as_before(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true);
    first_step(pool);
    rsp_rid rids[2] = {1, 2};
    rsp_row rows[2];
    rsp_step s;
    plan(pool, 2, rids, 2, &s, rows);
    rsp_event done = rsp_event_complete();
    assert_int_equal(rsp_step_rollback(pool, 2, &done, NULL), RSP_OK);
    plan(pool, 3, rids, 2, &s, rows);
    write_slot(pool, "conv", 0, slot_of(pool, 3), 3.0f);
    commit(pool, &s);
    assert_int_equal(num_reps, 1);
    assert_int_equal(reps[0].v.step_id, 3);
    assert_int_equal(reps[0].v.rid, 3);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

/* A holding changed by the pool between checks (reset: a zero queued and a
 * new generation; remove: freed and zeroed) is not reported. */
static void holdings_the_pool_changed_are_not_reported(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true);
    first_step(pool); /* rids 1, 2, 3 written and baselined */
    assert_int_equal(rsp_reset(pool, 3, false, NULL), RSP_OK);
    assert_int_equal(rsp_remove(pool, 2, NULL), RSP_OK);
    rsp_rid rids[1] = {1};
    rsp_row rows[1];
    rsp_step s;
    plan(pool, 2, rids, 1, &s, rows);
    write_all(pool, slot_of(pool, 1), 5.0f);
    commit(pool, &s);
    plan(pool, 3, rids, 1, &s, rows);
    commit(pool, &s);
    assert_int_equal(num_reps, 0);
    assert_int_equal(counts(pool).checks, 3);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

/* Two steps in flight: the later one's forward writes its own slot before
 * the earlier commit's check (not reported: another step in flight
 * addresses it); a wrong write after both is. */
static void pipelined_steps_report_only_unaddressed_writes(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(true);
    first_step(pool);
    rsp_rid a[1] = {1}, b[1] = {2};
    rsp_row ra[1], rb[1];
    rsp_step s2, s3;
    plan(pool, 2, a, 1, &s2, ra);
    plan(pool, 3, b, 1, &s3, rb);
    write_all(pool, slot_of(pool, 1), 5.0f); /* step 2's forward */
    write_all(pool, slot_of(pool, 2), 6.0f); /* step 3's, done early */
    commit(pool, &s2);
    write_all(pool, slot_of(pool, 2), 7.0f); /* step 3's, again */
    commit(pool, &s3);
    assert_int_equal(num_reps, 0);
    plan(pool, 4, a, 1, &s2, ra);
    write_slot(pool, "conv", 1, slot_of(pool, 2), 1.0f); /* step 4 writes rid 2's slot */
    commit(pool, &s2);
    assert_int_equal(num_reps, 1);
    assert_int_equal(reps[0].v.rid, 2);
    assert_int_equal(reps[0].v.step_id, 4);
    assert_int_equal(reps[0].v.layer, 1);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(correct_forward_and_sink_writes_are_not_reported),
        cmocka_unit_test(neighbour_write_is_reported_with_its_holder),
        cmocka_unit_test(write_past_the_batch_into_a_free_slot_is_reported),
        cmocka_unit_test(each_slot_is_one_report_and_nothing_else_changes),
        cmocka_unit_test(the_check_waits_for_forward_done),
        cmocka_unit_test(guard_off_checks_nothing),
        cmocka_unit_test(rollback_then_steps_check_as_before),
        cmocka_unit_test(holdings_the_pool_changed_are_not_reported),
        cmocka_unit_test(pipelined_steps_report_only_unaddressed_writes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
