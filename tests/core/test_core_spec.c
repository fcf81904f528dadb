/* Per-token states for speculative decoding (docs/semantics.md 9.3): the
 * output slots an admit reserves, the index tensor a plan lays out, the
 * accept by relabel at commit, rollback, and the order rule of 9.1.
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "helpers.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {
    .kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = 3};

/* Step id with one per-token row (rid, main, span). */
static void spec_row(stepb *b, uint64_t id, rsp_rid rid, int32_t span)
{
    sb_init(b, id);
    sb_row(b, rid, RSP_LABEL_MAIN, span);
    b->rows[b->s.num_rows - 1].per_token_states = 1;
}

/* Entry e's index tensor row of label main in the last plan. */
static const int32_t *spec_of(fx *f, uint32_t e)
{
    const rsp__label_plan *lp = fx_plan_label(f, RSP_LABEL_MAIN);
    return lp->spec_indices + (size_t)e * lp->spec_width;
}

/* The forward of a verify step: the state after token t goes to the
 * output slot of column t, bytes 0x10 + t. */
static void forward(fx *f, uint32_t e, uint32_t span)
{
    const int32_t *ix = spec_of(f, e);
    for (uint32_t t = 1; t <= span; t++)
        rsp_test_store_fill(f->store, (uint32_t)ix[t], (uint8_t)(0x10 + t));
}

/* The checksum of a slot whose bytes are all b. */
static uint64_t filled_sum(fx *f, uint8_t b)
{
    uint32_t spare = 0;
    const rsp__layout *lay = rsp__core_layout(f->core);
    while (spare < lay->max_slots && rsp__core_slot_state(f->core, spare) != RSP__SLOT_FREE)
        spare++;
    assert_true(spare < lay->max_slots);
    rsp_test_store_fill(f->store, spare, b);
    uint64_t s = rsp_test_store_checksum(f->store, spare);
    rsp_test_store_fill(f->store, spare, 0);
    return s;
}

static void admit_reserves_span_output_slots(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true); /* 7 usable */
    stepb b;
    spec_row(&b, 1, 5, 4);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_stats(&f).held_slots, 5); /* the holding and 4 outputs */
    fx_check_invariants(&f);
    /* Another request needs 1 + 4 more: 2 are free, so 3 short, nothing changed. */
    snap before, after;
    snap_take(&f, &before);
    stepb c;
    spec_row(&c, 2, 6, 4);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &c.s, &out), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(out.slots_short, 3);
    assert_int_equal(out.rid, 6);
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    fx_fini(&f);
}

static void plan_lays_out_initial_then_outputs(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb b;
    spec_row(&b, 1, 5, 3);
    sb_row(&b, 6, RSP_LABEL_MAIN, 1); /* a plain row in the same label */
    sb_lease(&b, 4, 0, 0);            /* two pad entries after the rows */
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    const rsp__label_plan *lp = fx_plan_label(&f, RSP_LABEL_MAIN);
    int32_t pad = rsp__core_layout(f.core)->pad_index;
    assert_int_equal(lp->spec_width, 4);
    assert_int_equal(lp->length, 4);
    const int32_t *r0 = spec_of(&f, 0), *r1 = spec_of(&f, 1);
    assert_int_equal(r0[0], fx_slot(&f, 5, RSP_LABEL_MAIN));
    for (int t = 1; t <= 3; t++) {
        assert_true(r0[t] != pad && r0[t] != r0[0] && r0[t] != fx_slot(&f, 6, RSP_LABEL_MAIN));
        for (int u = 1; u < t; u++)
            assert_true(r0[t] != r0[u]);
        assert_int_equal(rsp__core_slot_state(f.core, (uint32_t)r0[t]), RSP__SLOT_HELD);
    }
    assert_int_equal(r1[0], fx_slot(&f, 6, RSP_LABEL_MAIN));
    for (int t = 1; t < 4; t++)
        assert_int_equal(r1[t], pad);
    for (uint32_t e = 2; e < 4; e++)
        for (int t = 0; t < 4; t++)
            assert_int_equal(spec_of(&f, e)[t], pad);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void accept_relabels_without_copy(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb b;
    spec_row(&b, 1, 5, 4);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    int32_t outs[5];
    memcpy(outs, spec_of(&f, 0), sizeof outs);
    forward(&f, 0, 4);
    uint64_t gen = fx_gen(&f, 5, RSP_LABEL_MAIN);
    uint64_t copied = rsp_test_store_counts_get(f.store).pairs_copied;
    b.rows[0].accepted = 2;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(fx_slot(&f, 5, RSP_LABEL_MAIN), outs[2]);
    assert_true(fx_has_state(&f, 5, RSP_LABEL_MAIN));
    assert_true(fx_gen(&f, 5, RSP_LABEL_MAIN) != gen);
    assert_true(rsp_test_store_checksum(f.store, (uint32_t)outs[2]) == filled_sum(&f, 0x12));
    assert_int_equal(rsp_test_store_counts_get(f.store).pairs_copied, copied); /* no COPY */
    for (int t = 0; t <= 4; t++)
        if (t != 2)
            assert_int_equal(rsp__core_slot_state(f.core, (uint32_t)outs[t]), RSP__SLOT_FREE);
    assert_int_equal(fx_stats(&f).held_slots, 1);
    fx_check_invariants(&f); /* every freed slot reads zeros */
    /* The next step reads the accepted state. */
    stepb d;
    sb_init(&d, 2);
    sb_row(&d, 5, RSP_LABEL_MAIN, 1);
    fx_admit_ok(&f, &d.s);
    assert_int_equal(fx_plan(&f, &d.s), RSP_OK);
    assert_int_equal(fx_plan_label(&f, RSP_LABEL_MAIN)->slot_indices[0], outs[2]);
    assert_true(fx_plan_label(&f, RSP_LABEL_MAIN)->has_state[0]);
    assert_int_equal(fx_commit(&f, &d.s, &done_ev), RSP_OK);
    fx_fini(&f);
}

static void accept_zero_keeps_the_old_state(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    /* A fresh holding that accepts nothing still reads zeros. */
    stepb b;
    spec_row(&b, 1, 5, 3);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward(&f, 0, 3);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_false(fx_has_state(&f, 5, RSP_LABEL_MAIN));
    assert_int_equal(fx_stats(&f).held_slots, 1);
    fx_check_invariants(&f);
    /* A holding with state keeps its slot and bytes. */
    stepb p;
    sb_init(&p, 2);
    sb_row(&p, 5, RSP_LABEL_MAIN, 8);
    fx_admit_ok(&f, &p.s);
    assert_int_equal(fx_plan(&f, &p.s), RSP_OK);
    int32_t slot = fx_slot(&f, 5, RSP_LABEL_MAIN);
    rsp_test_store_fill(f.store, (uint32_t)slot, 0x77);
    assert_int_equal(fx_commit(&f, &p.s, &done_ev), RSP_OK);
    uint64_t gen = fx_gen(&f, 5, RSP_LABEL_MAIN);
    spec_row(&b, 3, 5, 3);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward(&f, 0, 3);
    b.rows[0].accepted = 0;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(fx_slot(&f, 5, RSP_LABEL_MAIN), slot);
    assert_true(fx_has_state(&f, 5, RSP_LABEL_MAIN));
    assert_true(fx_gen(&f, 5, RSP_LABEL_MAIN) == gen);
    assert_true(rsp_test_store_checksum(f.store, (uint32_t)slot) == filled_sum(&f, 0x77));
    assert_int_equal(fx_stats(&f).held_slots, 1);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void rollback_restores_free_stack_order(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    assert_int_equal(fx_ingest(&f, 4), RSP_OK);
    snap before, after;
    snap_take(&f, &before);
    stepb b;
    spec_row(&b, 1, 4, 3);
    sb_row(&b, 9, RSP_LABEL_MAIN, 2);
    b.rows[1].per_token_states = 1;
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward(&f, 0, 3);
    forward(&f, 1, 2);
    assert_int_equal(fx_rollback(&f, 1, &done_ev), RSP_OK);
    assert_int_equal(fx_remove(&f, 9), RSP_OK); /* the admit's implicit ingest stays (4.2) */
    snap_take(&f, &after);
    after.stats.generation = before.stats.generation; /* it never goes back */
    snap_assert_equal(&before, &after);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void later_step_naming_the_holding_is_order_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb a, b;
    spec_row(&a, 1, 5, 2);
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    sb_init(&b, 2);
    sb_row(&b, 5, RSP_LABEL_MAIN, 1);
    snap before, after;
    snap_take(&f, &before);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "per-token states accepted at the commit of step 1"));
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    /* Another request is fine; this one once step 1 is committed. */
    sb_init(&b, 2);
    sb_row(&b, 6, RSP_LABEL_MAIN, 1);
    fx_admit_ok(&f, &b.s);
    a.rows[0].accepted = 1;
    assert_int_equal(fx_commit(&f, &a.s, &done_ev), RSP_OK);
    sb_row(&b, 5, RSP_LABEL_MAIN, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A later step's fork into a holding an in-flight step accepts into is
 * refused as a row on it is: the accept moves the holding to another
 * slot, and the fork's target mark must not be left on the old one. */
static void later_fork_into_the_holding_is_order_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    stepb a, b;
    spec_row(&a, 1, 5, 2);
    fx_admit_ok(&f, &a.s);
    for (int pre = 0; pre < 2; pre++) {
        sb_init(&b, 2);
        sb_row(&b, 5, draft, 1);
        if (pre)
            sb_pre(&b, draft, RSP_LABEL_MAIN);
        else
            sb_post(&b, draft, RSP_LABEL_MAIN);
        snap before, after;
        snap_take(&f, &before);
        rsp_admit_outcome out;
        assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EORDER);
        assert_non_null(strstr(f.err.message, pre ? "pre_forks[0]: (rid 5, label main)"
                                                  : "post_forks[0]: (rid 5, label main)"));
        assert_non_null(strstr(f.err.message, "per-token states accepted at the commit of step 1"));
        snap_take(&f, &after);
        snap_assert_equal(&before, &after);
    }
    /* A fork into another label is fine; into main once step 1 committed. */
    sb_init(&b, 2);
    sb_row(&b, 5, draft, 1);
    sb_post(&b, RSP_LABEL_MAIN, draft);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    forward(&f, 0, 2);
    a.rows[0].accepted = 2;
    assert_int_equal(fx_commit(&f, &a.s, &done_ev), RSP_OK);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_true(rsp_test_store_checksum(f.store, (uint32_t)fx_slot(&f, 5, draft)) ==
                filled_sum(&f, 0x12));
    sb_init(&b, 3);
    sb_row(&b, 5, draft, 1);
    sb_post(&b, draft, RSP_LABEL_MAIN);
    fx_admit_ok(&f, &b.s);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void checkpoint_take_takes_the_accepted_state(void **state)
{
    (void)state;
    fx f;
    fx_init_ck(&f, 16, 2, 0, false);
    stepb b;
    spec_row(&b, 1, 5, 4);
    sb_take(&b, 5, RSP_LABEL_MAIN, 7, RSP_TIER_DEVICE);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward(&f, 0, 4);
    b.rows[0].accepted = 3;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    rsp_checkpoint_info ck = fx_ck(&f, 7);
    assert_true(rsp_test_store_checksum(f.store, (uint32_t)ck.slot) == filled_sum(&f, 0x13));
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void post_fork_reads_the_accepted_state(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id keep = fx_label(&f, "keep");
    stepb b;
    spec_row(&b, 1, 5, 3);
    sb_post(&b, RSP_LABEL_MAIN, keep);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward(&f, 0, 3);
    b.rows[0].accepted = 3;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    int32_t k = fx_slot(&f, 5, keep);
    assert_true(rsp_test_store_checksum(f.store, (uint32_t)k) == filled_sum(&f, 0x13));
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void reset_during_the_step_frees_every_output(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb b;
    spec_row(&b, 1, 5, 3);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    int32_t outs[4];
    memcpy(outs, spec_of(&f, 0), sizeof outs);
    forward(&f, 0, 3);
    assert_int_equal(fx_reset(&f, 5, false), RSP_OK);
    b.rows[0].accepted = 2;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(fx_slot(&f, 5, RSP_LABEL_MAIN), outs[0]); /* not relabelled */
    assert_false(fx_has_state(&f, 5, RSP_LABEL_MAIN));
    for (int t = 1; t <= 3; t++)
        assert_int_equal(rsp__core_slot_state(f.core, (uint32_t)outs[t]), RSP__SLOT_FREE);
    fx_check_invariants(&f);
    /* Removed during the step: everything goes back. */
    spec_row(&b, 2, 5, 3);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward(&f, 0, 3);
    assert_int_equal(fx_remove(&f, 5), RSP_OK);
    b.rows[0].accepted = 1;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(fx_stats(&f).held_slots, 0);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void bad_per_token_rows_are_refused(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    snap before, after;
    snap_take(&f, &before);
    rsp_admit_outcome out;
    stepb b;
    spec_row(&b, 1, 5, 2);
    b.rows[0].per_token_states = 2; /* an old program's garbage */
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "per_token_states = 2"));
    spec_row(&b, 1, 5, RSP_SPEC_MAX_TOKENS + 1);
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EINVAL);
    spec_row(&b, 1, 5, 2);
    b.rows[0].padding = true;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EINVAL);
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    /* A commit: accepted beyond the span, or per-token rows other than the admit's. */
    spec_row(&b, 1, 5, 2);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    snap_take(&f, &before);
    b.rows[0].accepted = 3;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "accepted = 3: at most its span 2"));
    b.rows[0].accepted = 1;
    b.rows[0].per_token_states = 0;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "per_token_states differs"));
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    b.rows[0].per_token_states = 1;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void readmit_keeps_the_output_slots(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb b;
    spec_row(&b, 1, 5, 3);
    fx_admit_ok(&f, &b.s);
    uint32_t held = fx_stats(&f).held_slots;
    sb_row(&b, 6, RSP_LABEL_MAIN, 1); /* one more plain row */
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_stats(&f).held_slots, held + 1);
    stepb c;
    spec_row(&c, 1, 5, 2); /* another span: refused */
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &c.s, &out), RSP_EINVAL);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_plan_label(&f, RSP_LABEL_MAIN)->spec_width, 4);
    b.rows[0].accepted = 3;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(fx_stats(&f).held_slots, 2);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A steady verify loop: every step takes fresh output slots and gives
 * the rejected ones back; nothing leaks over many steps. */
static void steady_verify_loop_leaks_nothing(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 32, true);
    stepb b;
    for (uint64_t id = 1; id <= 40; id++) {
        sb_init(&b, id);
        for (rsp_rid r = 1; r <= 4; r++) {
            sb_row(&b, r, RSP_LABEL_MAIN, 4);
            b.rows[r - 1].per_token_states = 1;
        }
        fx_admit_ok(&f, &b.s);
        assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
        for (uint32_t e = 0; e < 4; e++)
            forward(&f, e, 4);
        for (uint32_t e = 0; e < 4; e++)
            b.rows[e].accepted = (uint16_t)((id + e) % 5);
        assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
        assert_int_equal(fx_stats(&f).held_slots, 4);
    }
    fx_check_invariants(&f);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(admit_reserves_span_output_slots),
        cmocka_unit_test(plan_lays_out_initial_then_outputs),
        cmocka_unit_test(accept_relabels_without_copy),
        cmocka_unit_test(accept_zero_keeps_the_old_state),
        cmocka_unit_test(rollback_restores_free_stack_order),
        cmocka_unit_test(later_step_naming_the_holding_is_order_error),
        cmocka_unit_test(later_fork_into_the_holding_is_order_error),
        cmocka_unit_test(checkpoint_take_takes_the_accepted_state),
        cmocka_unit_test(post_fork_reads_the_accepted_state),
        cmocka_unit_test(reset_during_the_step_frees_every_output),
        cmocka_unit_test(bad_per_token_rows_are_refused),
        cmocka_unit_test(readmit_keeps_the_output_slots),
        cmocka_unit_test(steady_verify_loop_leaks_nothing),
    };
    return cmocka_run_group_tests_name("core_spec", tests, NULL, NULL);
}
