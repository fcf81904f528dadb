/* Bad input (docs/semantics.md 4 "invalid", 6): each gets its own status and a
 * message naming what was wrong, and leaves the pool and the work list as
 * they were. SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

typedef struct world {
    fx f;
    rsp_label_id draft;
    snap before;
    uint32_t ops_before, slots_before, last_count_before;
} world;

/* A pool with history: rid 1 main+draft written, rid 2 main, step 5
 * admitted and planned (in flight), a work list holding a ZERO op that the
 * failing call must neither drop nor merge into. */
static int setup(void **state)
{
    world *w = calloc(1, sizeof *w);
    fx_init(&w->f, 10, true);
    w->draft = fx_label(&w->f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    sb_pre(&b, 0, w->draft);
    fx_run_step(&w->f, &b.s);
    rsp_test_store_fill_pattern(w->f.store, 1, 1);
    sb_init(&b, 5);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&w->f, &b.s);
    assert_int_equal(fx_plan(&w->f, &b.s), RSP_OK);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;
    fx_fini(&w->f);
    free(w);
    return 0;
}

/* Put a pending ZERO in the work list and snapshot everything. */
static void arm(world *w)
{
    rsp__work_clear(&w->f.work);
    assert_int_equal(rsp__work_zero(&w->f.work, 9), RSP_OK);
    w->ops_before = w->f.work.num_ops;
    w->slots_before = w->f.work.num_slots;
    w->last_count_before = w->f.work.ops[0].count;
    snap_take(&w->f, &w->before);
    memset(&w->f.err, 0, sizeof w->f.err);
}

static void check(world *w, rsp_status got, rsp_status want, const char *needle)
{
    assert_int_equal(got, want);
    assert_int_equal(w->f.err.status, want);
    if (needle && !strstr(w->f.err.message, needle))
        fail_msg("message \"%s\" does not name \"%s\"", w->f.err.message, needle);
    assert_int_equal(w->f.work.num_ops, w->ops_before);
    assert_int_equal(w->f.work.num_slots, w->slots_before);
    assert_int_equal(w->f.work.ops[0].count, w->last_count_before);
    snap after;
    snap_take(&w->f, &after);
    snap_assert_equal(&w->before, &after);
}

static rsp_status admit(world *w, const rsp_step *s)
{
    rsp_admit_outcome out;
    return rsp__core_admit(w->f.core, s, &out, &w->f.work, &w->f.err);
}

static rsp_status plan(world *w, const rsp_step *s)
{
    return rsp__core_plan(w->f.core, s, &w->f.plan, &w->f.work, &w->f.err);
}

static rsp_status commit(world *w, const rsp_step *s)
{
    return rsp__core_commit(w->f.core, s, NULL, &w->f.work, NULL, &w->f.err);
}

/* The same bad step through admit, plan and commit (step id 5 is in flight). */
static void all_three(world *w, stepb *b, rsp_status want, const char *needle)
{
    b->s.step_id = 6;
    arm(w);
    check(w, admit(w, &b->s), want, needle);
    b->s.step_id = 5;
    arm(w);
    check(w, plan(w, &b->s), want, needle);
    arm(w);
    check(w, commit(w, &b->s), want, needle);
}

static void unknown_row_label_is_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 6);
    sb_row(&b, 3, 0, 1);
    sb_row(&b, 4, 17, 1);
    all_three(w, &b, RSP_ENOLABEL, "rows[1].label = 17");
}

static void unknown_fork_label_is_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 6);
    sb_row(&b, 3, 0, 1);
    sb_pre(&b, 0, w->draft);
    sb_pre(&b, 0, 40);
    all_three(w, &b, RSP_ENOLABEL, "pre_forks[1].to = 40");
    sb_init(&b, 6);
    sb_row(&b, 3, 0, 1);
    sb_post(&b, 33, 0);
    all_three(w, &b, RSP_ENOLABEL, "post_forks[0].from = 33");
}

static void duplicate_rows_are_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 6);
    sb_row(&b, 3, 0, 1);
    sb_row(&b, 4, 0, 2);
    sb_row(&b, 3, w->draft, 1);
    sb_row(&b, 4, 0, 1);
    all_three(w, &b, RSP_EDUPROW, "rows[3] repeats (rid 4, label \"main\") of rows[1]");
}

static void repeats_with_zero_span_or_padding_are_allowed(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 6);
    sb_row(&b, 3, 0, 1);
    sb_row(&b, 3, 0, 0);
    sb_pad(&b, 3, 0);
    sb_pad(&b, 3, 0);
    sb_row(&b, 3, 0, -1);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&w->f, &b.s, &out), RSP_OK);
    assert_true(out.ok);
    assert_int_equal(fx_plan(&w->f, &b.s), RSP_OK);
    const rsp__label_plan *lp = fx_plan_label(&w->f, 0);
    /* Only the pad may repeat within one vector. */
    assert_int_equal(lp->slot_indices[0], fx_slot(&w->f, 3, 0));
    for (int i = 1; i < 5; i++)
        assert_int_equal(lp->slot_indices[i], 0);
}

static void null_arrays_are_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 6);
    sb_row(&b, 3, 0, 1);
    b.s.rows = NULL;
    all_three(w, &b, RSP_EINVAL, "rows is NULL with num_rows = 1");
    sb_init(&b, 6);
    b.s.num_pre_forks = 2;
    b.s.pre_forks = NULL;
    all_three(w, &b, RSP_EINVAL, "pre_forks is NULL");
    sb_init(&b, 6);
    b.s.num_post_forks = 1;
    b.s.post_forks = NULL;
    all_three(w, &b, RSP_EINVAL, "post_forks is NULL");
    arm(w);
    check(w, admit(w, NULL), RSP_EINVAL, "step is NULL");
    arm(w);
    check(w, rsp__core_admit(w->f.core, &b.s, NULL, &w->f.work, &w->f.err), RSP_EINVAL, "NULL");
}

static void zero_bucket_lease_is_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 6);
    sb_row(&b, 3, 0, 1);
    sb_lease(&b, 0, 1, 1);
    all_three(w, &b, RSP_EINVAL, "lease.bucket_bs = 0");
}

static void out_of_order_steps_are_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 7);
    sb_row(&b, 2, 0, 1);
    arm(w);
    check(w, plan(w, &b.s), RSP_EORDER, "step 7");
    arm(w);
    check(w, commit(w, &b.s), RSP_EORDER, "step 7");
    b.s.step_id = 4; /* behind the last admitted (5) */
    arm(w);
    check(w, admit(w, &b.s), RSP_EORDER, "goes backwards");
    b.s.step_id = 5; /* planned already */
    arm(w);
    check(w, plan(w, &b.s), RSP_EORDER, "already planned");
    /* admitted, not planned */
    sb_init(&b, 8);
    sb_row(&b, 3, 0, 1);
    assert_int_equal(fx_admit(&w->f, &b.s, &(rsp_admit_outcome){0}), RSP_OK);
    arm(w);
    check(w, commit(w, &b.s), RSP_EORDER, "not planned");
}

static void second_stage_is_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 8);
    sb_row(&b, 3, 0, 1);
    b.s.preplan = true;
    assert_int_equal(fx_admit(&w->f, &b.s, &(rsp_admit_outcome){0}), RSP_OK);
    assert_int_equal(fx_plan(&w->f, &b.s), RSP_OK);
    arm(w);
    check(w, plan(w, &b.s), RSP_ESTAGED, "step 8");
    stepb c;
    sb_init(&c, 9);
    sb_row(&c, 4, 0, 1);
    c.s.preplan = true;
    assert_int_equal(fx_admit(&w->f, &c.s, &(rsp_admit_outcome){0}), RSP_OK);
    arm(w);
    check(w, plan(w, &c.s), RSP_ESTAGED, "already exists");
}

static void leased_overflow_is_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 6);
    sb_row(&b, 3, 0, 1);
    sb_lease(&b, 1, 2, 0);
    fx_run_step(&w->f, &b.s);
    sb_init(&b, 7);
    sb_row(&b, 3, 0, 1);
    sb_row(&b, 1, 0, 1);
    sb_pre(&b, 0, w->draft);
    sb_lease(&b, 1, 2, 0);
    assert_int_equal(fx_admit(&w->f, &b.s, &(rsp_admit_outcome){0}), RSP_OK);
    arm(w);
    check(w, plan(w, &b.s), RSP_ECAPACITY, "leased buffer");
}

static void too_many_steps_is_rejected(void **state)
{
    world *w = *state;
    stepb b;
    for (uint64_t s = 6; s <= 8; s++) {
        sb_init(&b, s);
        assert_int_equal(fx_admit(&w->f, &b.s, &(rsp_admit_outcome){0}), RSP_OK);
    }
    sb_init(&b, 9);
    sb_row(&b, 3, 0, 1);
    arm(w);
    check(w, admit(w, &b.s), RSP_ECAPACITY, "in flight");
}

static void queries_about_missing_things_fail(void **state)
{
    world *w = *state;
    rsp_error err = {0};
    rsp_holding h;
    assert_int_equal(rsp__core_holding(w->f.core, 55, 0, &h, &err), RSP_ENOREQ);
    assert_non_null(strstr(err.message, "rid 55"));
    assert_int_equal(rsp__core_holding(w->f.core, 1, 50, &h, &err), RSP_ENOLABEL);
    assert_non_null(strstr(err.message, "label 50"));
    assert_int_equal(rsp__core_holding(w->f.core, 2, w->draft, &h, &err), RSP_OK);
    rsp_label_id extra = fx_label(&w->f, "extra");
    assert_int_equal(rsp__core_holding(w->f.core, 2, extra, &h, &err), RSP_ENOREQ);
    assert_non_null(strstr(err.message, "extra"));
}

static void null_work_is_rejected(void **state)
{
    world *w = *state;
    stepb b;
    sb_init(&b, 6);
    arm(w);
    rsp_error *e = &w->f.err;
    assert_int_equal(rsp__core_reset(w->f.core, 1, false, NULL, e), RSP_EINVAL);
    assert_int_equal(rsp__core_remove(w->f.core, 1, NULL, e), RSP_EINVAL);
    assert_int_equal(rsp__core_rollback(w->f.core, 5, NULL, NULL, NULL, e), RSP_EINVAL);
    assert_int_equal(rsp__core_plan(w->f.core, &b.s, &w->f.plan, NULL, e), RSP_EINVAL);
    assert_int_equal(rsp__core_commit(w->f.core, &b.s, NULL, NULL, NULL, e), RSP_EINVAL);
    check(w, RSP_EINVAL, RSP_EINVAL, "work is NULL");
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
int main(void)
{
    const struct CMUnitTest tests[] = {
        T(unknown_row_label_is_rejected),     T(unknown_fork_label_is_rejected),
        T(duplicate_rows_are_rejected),       T(repeats_with_zero_span_or_padding_are_allowed),
        T(null_arrays_are_rejected),          T(zero_bucket_lease_is_rejected),
        T(out_of_order_steps_are_rejected),   T(second_stage_is_rejected),
        T(leased_overflow_is_rejected),       T(too_many_steps_is_rejected),
        T(queries_about_missing_things_fail), T(null_work_is_rejected),
    };
    return cmocka_run_group_tests_name("core_errors", tests, NULL, NULL);
}
