/* A request in several in-flight steps (docs/semantics.md 9.1: has_state counts
 * the writes of earlier steps in flight, releases wait for the last step,
 * post-fork targets are refused until their commit, rollback is newest first)
 * and a commit that must name what was admitted (9.2).
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "helpers.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {
    .kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = 3};

/* Step id with one row (rid, main, span). */
static void one_row(stepb *b, uint64_t id, rsp_rid rid, int32_t span)
{
    sb_init(b, id);
    sb_row(b, rid, RSP_LABEL_MAIN, span);
}

/* An overlap scheduler's loop: step 2 (a decode) is planned while step 1
 * (the prefill, the request's first write) is in flight. The kernel of
 * step 2 must not start from zeros: has_state is true in its plan, while
 * the holding's own flag becomes true only at step 1's commit. */
static void decode_planned_behind_its_prefill_has_state(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    stepb p, d, e;
    one_row(&p, 1, 7, 16);
    fx_admit_ok(&f, &p.s);
    assert_int_equal(fx_plan(&f, &p.s), RSP_OK);
    assert_false(fx_plan_label(&f, RSP_LABEL_MAIN)->has_state[0]); /* fresh: zeros */
    one_row(&d, 2, 7, 1);
    fx_admit_ok(&f, &d.s);
    assert_int_equal(fx_plan(&f, &d.s), RSP_OK);
    assert_true(fx_plan_label(&f, RSP_LABEL_MAIN)->has_state[0]);
    assert_int_equal(fx_plan_label(&f, RSP_LABEL_MAIN)->slot_indices[0], fx_slot(&f, 7, 0));
    assert_false(fx_has_state(&f, 7, RSP_LABEL_MAIN)); /* nothing committed yet */
    /* Three deep: step 3 is planned behind both. */
    one_row(&e, 3, 7, 1);
    fx_admit_ok(&f, &e.s);
    assert_int_equal(fx_plan(&f, &e.s), RSP_OK);
    assert_true(fx_plan_label(&f, RSP_LABEL_MAIN)->has_state[0]);
    assert_int_equal(fx_commit(&f, &p.s, &done_ev), RSP_OK);
    assert_true(fx_has_state(&f, 7, RSP_LABEL_MAIN));
    assert_int_equal(fx_commit(&f, &d.s, &done_ev), RSP_OK);
    assert_int_equal(fx_commit(&f, &e.s, &done_ev), RSP_OK);
    assert_true(fx_has_state(&f, 7, RSP_LABEL_MAIN));
    /* A later step not behind any write: the committed flag. */
    stepb g;
    one_row(&g, 4, 8, 1);
    fx_admit_ok(&f, &g.s);
    assert_int_equal(fx_plan(&f, &g.s), RSP_OK);
    assert_false(fx_plan_label(&f, RSP_LABEL_MAIN)->has_state[0]);
    assert_int_equal(fx_commit(&f, &g.s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* The same-declaration path of a steady decode loop, two steps deep: every
 * plan after the first has state (the step before it writes the slot),
 * whether its record's plan cache is used or not. */
static void steady_loop_two_deep_has_state(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb b[2];
    for (int k = 0; k < 2; k++) {
        sb_init(&b[k], 1);
        for (rsp_rid r = 1; r <= 4; r++)
            sb_row(&b[k], r, RSP_LABEL_MAIN, 1);
    }
    b[0].s.step_id = 1;
    fx_admit_ok(&f, &b[0].s);
    assert_int_equal(fx_plan(&f, &b[0].s), RSP_OK);
    for (uint64_t id = 2; id <= 12; id++) {
        stepb *cur = &b[id % 2], *prev = &b[(id - 1) % 2];
        cur->s.step_id = id;
        fx_admit_ok(&f, &cur->s);
        assert_int_equal(fx_plan(&f, &cur->s), RSP_OK);
        const rsp__label_plan *lp = fx_plan_label(&f, RSP_LABEL_MAIN);
        for (uint32_t i = 0; i < 4; i++)
            assert_true(lp->has_state[i]);
        assert_int_equal(fx_commit(&f, &prev->s, &done_ev), RSP_OK);
    }
    assert_int_equal(fx_commit(&f, &b[0].s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A reset between the steps discards the earlier step's write (its commit
 * will not count it): the next plan starts from zeros. A step planned
 * after that one reads its write again. */
static void reset_discards_the_earlier_write(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    stepb a, b, c;
    one_row(&a, 1, 3, 4);
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    one_row(&b, 2, 3, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_reset(&f, 3, false), RSP_OK);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_false(fx_plan_label(&f, RSP_LABEL_MAIN)->has_state[0]);
    one_row(&c, 3, 3, 1);
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_plan(&f, &c.s), RSP_OK);
    assert_true(fx_plan_label(&f, RSP_LABEL_MAIN)->has_state[0]); /* step 2 writes it */
    assert_int_equal(fx_commit(&f, &a.s, &done_ev), RSP_OK);
    assert_false(fx_has_state(&f, 3, RSP_LABEL_MAIN)); /* planned before the reset */
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_true(fx_has_state(&f, 3, RSP_LABEL_MAIN));
    assert_int_equal(fx_commit(&f, &c.s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A removal of a request two steps in flight name: the holding goes at
 * once, the slot is freed only after the last of them ends. */
static void removal_waits_for_the_last_step(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    stepb a, b;
    one_row(&a, 1, 5, 2);
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    one_row(&b, 2, 5, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    uint32_t slot = (uint32_t)fx_slot(&f, 5, RSP_LABEL_MAIN);
    assert_int_equal(fx_remove(&f, 5), RSP_OK);
    assert_int_equal(fx_slot(&f, 5, RSP_LABEL_MAIN), -1);
    assert_int_equal(fx_commit(&f, &a.s, &done_ev), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, slot), RSP__SLOT_PENDING);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, slot), RSP__SLOT_FREE);
    assert_int_equal(fx_stats(&f).pending_release, 0);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* Rollback newest first: step 1 allocated and writes the slot step 2
 * reads. Its rollback is refused naming step 2, nothing changed; after
 * step 2's rollback it goes, and the free stack is as before both. A
 * step on other rows rolls back in any order. */
static void rollback_is_newest_first(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    uint32_t before[8], after[8];
    uint32_t n = rsp__core_free_order(f.core, before, 8);
    stepb a, b, o;
    one_row(&a, 1, 4, 8);
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    one_row(&o, 2, 9, 1);
    fx_admit_ok(&f, &o.s);
    one_row(&b, 3, 4, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    snap x, y;
    snap_take(&f, &x);
    assert_int_equal(fx_rollback(&f, 1, &done_ev), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "step 3"));
    assert_non_null(strstr(f.err.message, "newest first"));
    snap_take(&f, &y);
    snap_assert_equal(&x, &y);
    assert_int_equal(fx_rollback(&f, 2, NULL), RSP_OK); /* other rows: any order */
    assert_int_equal(fx_rollback(&f, 3, &done_ev), RSP_OK);
    assert_int_equal(fx_rollback(&f, 1, &done_ev), RSP_OK);
    assert_int_equal(rsp__core_free_order(f.core, after, 8), n);
    assert_memory_equal(before, after, n * sizeof before[0]);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A commit names its admitted declaration (docs/semantics.md 9.2). Another rid,
 * another span, another row count, a post-fork never admitted: RSP_EINVAL
 * naming the first difference, nothing changed, the step still in flight.
 * skip_post_forks is the commit's own choice. */
static void commit_must_match_its_admit(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb a;
    sb_init(&a, 1);
    sb_row(&a, 1, RSP_LABEL_MAIN, 1);
    sb_post(&a, RSP_LABEL_MAIN, d);
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    snap x, y;
    snap_take(&f, &x);
    stepb bad;
    sb_init(&bad, 1);
    sb_row(&bad, 2, RSP_LABEL_MAIN, 1);
    sb_post(&bad, RSP_LABEL_MAIN, d);
    assert_int_equal(fx_commit(&f, &bad.s, &done_ev), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "rows[0].rid differs from its admit"));
    bad.rows[0].rid = 1;
    bad.rows[0].span = 3;
    assert_int_equal(fx_commit(&f, &bad.s, &done_ev), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "rows[0].span"));
    bad.rows[0].span = 1;
    sb_row(&bad, 3, RSP_LABEL_MAIN, 1);
    assert_int_equal(fx_commit(&f, &bad.s, &done_ev), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "2 rows, its admit had 1"));
    bad.s.num_rows = 1;
    bad.post[0].to = RSP_LABEL_MAIN; /* main -> main: valid, not admitted */
    assert_int_equal(fx_commit(&f, &bad.s, &done_ev), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "post_forks[0].to"));
    bad.s.num_post_forks = 0;
    assert_int_equal(fx_commit(&f, &bad.s, &done_ev), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "0 post_forks, its admit had 1"));
    snap_take(&f, &y);
    snap_assert_equal(&x, &y);
    assert_false(fx_has_state(&f, 1, RSP_LABEL_MAIN));
    assert_int_equal(fx_slot(&f, 2, RSP_LABEL_MAIN), -1);
    /* The outcome may differ: this rid skips its post-forks. */
    a.rows[0].skip_post_forks = true;
    assert_int_equal(fx_commit(&f, &a.s, &done_ev), RSP_OK);
    assert_true(fx_has_state(&f, 1, RSP_LABEL_MAIN));
    assert_false(fx_has_state(&f, 1, d)); /* the post-fork was skipped */
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A refused re-admit (pool full) of a step in flight leaves its admitted
 * declaration: the commit of what was admitted still goes through. */
static void refused_readmit_keeps_the_admitted_rows(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true); /* 3 usable */
    stepb a, big;
    one_row(&a, 1, 1, 1);
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    sb_init(&big, 1);
    for (rsp_rid r = 1; r <= 5; r++)
        sb_row(&big, r, RSP_LABEL_MAIN, 1);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &big.s, &out), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(fx_commit(&f, &big.s, &done_ev), RSP_EINVAL);
    assert_int_equal(fx_commit(&f, &a.s, &done_ev), RSP_OK);
    assert_true(fx_has_state(&f, 1, RSP_LABEL_MAIN));
    fx_check_invariants(&f);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decode_planned_behind_its_prefill_has_state),
        cmocka_unit_test(steady_loop_two_deep_has_state),
        cmocka_unit_test(reset_discards_the_earlier_write),
        cmocka_unit_test(removal_waits_for_the_last_step),
        cmocka_unit_test(rollback_is_newest_first),
        cmocka_unit_test(commit_must_match_its_admit),
        cmocka_unit_test(refused_readmit_keeps_the_admitted_rows),
    };
    return cmocka_run_group_tests_name("core_overlap", tests, NULL, NULL);
}
