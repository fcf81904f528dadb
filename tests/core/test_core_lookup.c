/* Plan and commit reuse where admit found each row's holding, and skip the
 * duplicate-row check for the rows admit validated: pinned here against
 * removals, record reuse, holding reorders and changed declarations in between
 * (docs/semantics.md 3, 4.1, 4.3, 4.5). SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "helpers.h"

static int32_t pad(fx *f)
{
    return (int32_t)rsp__core_layout(f->core)->pad_index;
}

static void plan_after_removal_and_record_reuse_addresses_current_holdings(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&f, &b.s);
    /* rid 1's record is freed and taken by rid 3, which holds a slot. */
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    assert_int_equal(fx_ingest(&f, 3), RSP_OK);
    stepb c;
    sb_init(&c, 2);
    sb_row(&c, 3, 0, 1);
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    const rsp__label_plan *lp = fx_plan_label(&f, 0);
    assert_int_equal(lp->slot_indices[0], pad(&f));
    assert_int_equal(lp->slot_indices[1], fx_slot(&f, 2, 0));
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    assert_false(rsp__core_has_request(f.core, 1));
    assert_true(fx_has_state(&f, 2, 0));
    assert_false(fx_has_state(&f, 3, 0));
    assert_int_equal(fx_plan(&f, &c.s), RSP_OK);
    assert_int_equal(fx_plan_label(&f, 0)->slot_indices[0], fx_slot(&f, 3, 0));
    assert_int_equal(fx_commit(&f, &c.s, NULL), RSP_OK);
    assert_true(fx_has_state(&f, 3, 0));
    /* The same rows again: rid 1 comes back (implicit ingest), rid 3's
     * record is not rid 1's. */
    sb_init(&b, 3);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    fx_run_step(&f, &b.s);
    assert_true(fx_has_state(&f, 1, 0));
    assert_true(fx_has_state(&f, 3, 0));
    assert_int_not_equal(fx_slot(&f, 1, 0), fx_slot(&f, 3, 0));
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void holdings_reordered_between_steps_are_addressed_by_label(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 5, 0, 1);
    sb_row(&b, 5, d, 1);
    fx_run_step(&f, &b.s);
    /* Free both holdings, then take them back in the other order. */
    assert_int_equal(fx_reset(&f, 5, true), RSP_OK);
    sb_init(&b, 2);
    sb_row(&b, 5, d, 1);
    sb_row(&b, 5, 0, 1);
    fx_run_step(&f, &b.s);
    sb_init(&b, 3);
    sb_row(&b, 5, 0, 1);
    sb_row(&b, 5, d, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_plan_label(&f, 0)->slot_indices[0], fx_slot(&f, 5, 0));
    assert_int_equal(fx_plan_label(&f, d)->slot_indices[0], fx_slot(&f, 5, d));
    assert_int_equal(fx_plan_label(&f, 0)->generations[0], fx_gen(&f, 5, 0));
    assert_int_equal(fx_plan_label(&f, d)->generations[0], fx_gen(&f, 5, d));
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    assert_true(fx_has_state(&f, 5, 0));
    assert_true(fx_has_state(&f, 5, d));
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* rows: n distinct rows, then (when dup) a repeat of row 0. */
static void build_rows(stepb *b, uint64_t id, uint32_t n, bool dup)
{
    sb_init(b, id);
    for (uint32_t i = 0; i < n; i++)
        sb_row(b, 100 + i, 0, 1);
    if (dup)
        sb_row(b, 100, 0, 1);
}

static void changed_rows_at_plan_or_commit_are_validated_again(void **state)
{
    (void)state;
    /* Both sizes: few rows are checked pairwise, many with the hash set. */
    const uint32_t sizes[] = {3, 20};
    for (int k = 0; k < 2; k++) {
        fx f;
        fx_init(&f, 64, true);
        stepb ok, bad;
        build_rows(&ok, 1, sizes[k], false);
        build_rows(&bad, 1, sizes[k], true);
        fx_admit_ok(&f, &ok.s);
        snap before, after;
        snap_take(&f, &before);
        assert_int_equal(fx_plan(&f, &bad.s), RSP_EDUPROW);
        assert_non_null(strstr(f.err.message, "repeats"));
        snap_take(&f, &after);
        snap_assert_equal(&before, &after);
        /* An unknown label in otherwise admitted rows. */
        ok.rows[1].label = 7;
        assert_int_equal(fx_plan(&f, &ok.s), RSP_ENOLABEL);
        ok.rows[1].label = 0;
        assert_int_equal(fx_plan(&f, &ok.s), RSP_OK);
        assert_int_equal(fx_commit(&f, &bad.s, NULL), RSP_EDUPROW);
        assert_int_equal(fx_commit(&f, &ok.s, NULL), RSP_OK);
        for (uint32_t i = 0; i < sizes[k]; i++)
            assert_true(fx_has_state(&f, 100 + i, 0));
        fx_check_invariants(&f);
        fx_fini(&f);
    }
}

static void admitted_rows_with_a_bad_fork_label_are_refused_at_plan(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    sb_pre(&b, 0, 9);
    assert_int_equal(fx_plan(&f, &b.s), RSP_ENOLABEL);
    b.s.num_pre_forks = 0;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    sb_post(&b, 9, 0);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_ENOLABEL);
    b.s.num_post_forks = 0;
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    fx_fini(&f);
}

static void admit_of_rows_validated_before_still_checks_forks_order_and_changes(void **state)
{
    (void)state;
    const uint32_t sizes[] = {3, 20};
    for (int k = 0; k < 2; k++) {
        fx f;
        fx_init(&f, 64, true);
        stepb ok, bad;
        build_rows(&ok, 1, sizes[k], false);
        fx_run_step(&f, &ok.s); /* the record now holds these rows, validated */
        /* The same rows with a repeat, or an unknown label, for the next id. */
        build_rows(&bad, 2, sizes[k], true);
        snap before, after;
        snap_take(&f, &before);
        rsp_admit_outcome out;
        assert_int_equal(fx_admit(&f, &bad.s, &out), RSP_EDUPROW);
        build_rows(&bad, 2, sizes[k], false);
        bad.rows[sizes[k] - 1].label = 5;
        assert_int_equal(fx_admit(&f, &bad.s, &out), RSP_ENOLABEL);
        /* The very rows of step 1 under a bad fork label, then a used id. */
        build_rows(&bad, 2, sizes[k], false);
        sb_post(&bad, 0, 6);
        assert_int_equal(fx_admit(&f, &bad.s, &out), RSP_ENOLABEL);
        build_rows(&bad, 1, sizes[k], false);
        assert_int_equal(fx_admit(&f, &bad.s, &out), RSP_EORDER);
        snap_take(&f, &after);
        snap_assert_equal(&before, &after);
        build_rows(&ok, 2, sizes[k], false);
        fx_run_step(&f, &ok.s);
        for (uint32_t i = 0; i < sizes[k]; i++)
            assert_true(fx_has_state(&f, 100 + i, 0));
        fx_check_invariants(&f);
        fx_fini(&f);
    }
}

static void forking_rids_kept_from_admit_follow_removals_and_changed_rows(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 32, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    sb_post(&b, 0, d);
    fx_run_step(&f, &b.s);
    assert_true(fx_has_state(&f, 1, d));
    assert_true(fx_has_state(&f, 2, d));
    /* Same rows (the record's kept rids), rid 2 removed between admit and
     * plan: its fork does nothing, rid 1's still runs. */
    b.s.step_id = 2;
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_remove(&f, 2), RSP_OK);
    uint64_t g1 = fx_gen(&f, 1, d);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    assert_false(rsp__core_has_request(f.core, 2));
    assert_true(fx_gen(&f, 1, d) > g1);
    /* Other rows for the same record: rid 3 forks, rid 1 does not. */
    sb_init(&b, 3);
    sb_row(&b, 3, 0, 1);
    sb_post(&b, 0, d);
    g1 = fx_gen(&f, 1, d);
    fx_run_step(&f, &b.s);
    assert_true(fx_has_state(&f, 3, d));
    assert_int_equal(fx_gen(&f, 1, d), g1);
    fx_check_invariants(&f);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plan_after_removal_and_record_reuse_addresses_current_holdings),
        cmocka_unit_test(holdings_reordered_between_steps_are_addressed_by_label),
        cmocka_unit_test(changed_rows_at_plan_or_commit_are_validated_again),
        cmocka_unit_test(admitted_rows_with_a_bad_fork_label_are_refused_at_plan),
        cmocka_unit_test(admit_of_rows_validated_before_still_checks_forks_order_and_changes),
        cmocka_unit_test(forking_rids_kept_from_admit_follow_removals_and_changed_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
