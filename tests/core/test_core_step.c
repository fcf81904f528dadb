/* Admit, rollback, commit, steps in flight, removal during a step
 * (docs/semantics.md 3, 4.1, 4.2, 4.5). SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "helpers.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {
    .kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = 42};

/* Index of the first op of `kind` in the last work list, -1 if none. */
static int op_index(fx *f, rsp__op_kind kind)
{
    for (uint32_t i = 0; i < f->work.num_ops; i++)
        if (f->work.ops[i].kind == kind)
            return (int)i;
    return -1;
}

static bool work_zeroes(fx *f, uint32_t slot)
{
    for (uint32_t i = 0; i < f->work.num_ops; i++) {
        const rsp__op *op = &f->work.ops[i];
        if (op->kind != RSP__OP_ZERO)
            continue;
        for (uint32_t k = 0; k < op->count; k++)
            if (f->work.slots[op->first + k] == slot)
                return true;
    }
    return false;
}

static void admit_allocates_rows_in_declaration_order(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 30, 0, 5);
    sb_row(&b, 10, d, 1);
    sb_row(&b, 20, 0, 1);
    sb_row(&b, 10, 0, 2);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_OK);
    assert_true(out.ok);
    assert_int_equal(out.usable, 7);
    assert_int_equal(out.free, 3);
    assert_int_equal(fx_slot(&f, 30, 0), 1);
    assert_int_equal(fx_slot(&f, 10, d), 2);
    assert_int_equal(fx_slot(&f, 20, 0), 3);
    assert_int_equal(fx_slot(&f, 10, 0), 4);
    /* Admit never touches slot bytes: fresh slots are already zero. */
    assert_true(rsp__work_empty(&f.work));
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void padding_and_zero_span_rows_reserve_nothing(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_pad(&b, 1, 0);
    sb_row(&b, 2, 0, 0);
    sb_row(&b, 3, 0, -1);
    sb_row(&b, 4, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, 1, 0), -1);
    assert_int_equal(fx_slot(&f, 2, 0), -1);
    assert_int_equal(fx_slot(&f, 3, 0), -1);
    assert_int_equal(fx_slot(&f, 4, 0), 1);
    /* Padding rows are dummies: their rid is not ingested; others are. */
    assert_false(rsp__core_has_request(f.core, 1));
    assert_true(rsp__core_has_request(f.core, 2));
    assert_true(rsp__core_has_request(f.core, 3));
    assert_int_equal(fx_stats(&f).held_slots, 1);
    fx_fini(&f);
}

static void capture_step_reserves_nothing(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 3, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    for (int i = 0; i < 32; i++)
        sb_row(&b, (rsp_rid)i, 0, 1);
    sb_pre(&b, 0, d);
    sb_post(&b, 0, d);
    b.s.capture = true;
    snap a, z;
    snap_take(&f, &a);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    fx_fini(&f);
}

static void readmit_allocates_nothing_new(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&f, &b.s);
    snap a, z;
    snap_take(&f, &a);
    fx_admit_ok(&f, &b.s);
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* Rolling back once undoes the first admit's allocations. */
    assert_int_equal(fx_rollback(&f, 1, NULL), RSP_OK);
    assert_int_equal(fx_stats(&f).held_slots, 0);
    fx_fini(&f);
}

static void existing_holding_is_kept(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_run_step(&f, &b.s);
    rsp_test_store_fill(f.store, 1, 0x42);
    uint64_t g = fx_gen(&f, 1, 0);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, 1, 0), 1);
    assert_true(fx_has_state(&f, 1, 0));
    assert_int_equal(fx_gen(&f, 1, 0), g);
    assert_false(rsp_test_store_slot_is_zero(f.store, 1));
    fx_fini(&f);
}

static void pool_full_is_an_outcome_and_changes_nothing(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 5, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    fx_run_step(&f, &b.s);
    snap a, z;
    snap_take(&f, &a);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1); /* kept: needs nothing */
    sb_row(&b, 3, 0, 1);
    sb_row(&b, 4, 0, 1);
    sb_row(&b, 5, 0, 1); /* the first that finds no slot */
    sb_row(&b, 6, 0, 1);
    rsp_admit_outcome out;
    memset(&out, 0xff, sizeof out);
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(out.rid, 5);
    assert_int_equal(out.label, 0);
    assert_int_equal(out.slots_short, 2);
    assert_int_equal(out.usable, 4);
    assert_int_equal(out.free, 2);
    assert_true(rsp__work_empty(&f.work));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* Not even the implicit ingest happened. */
    assert_false(rsp__core_has_request(f.core, 3));
    /* A caller whose other resources refused still calls rollback: no-op. */
    assert_int_equal(fx_rollback(&f, 2, &done_ev), RSP_OK);
    assert_true(rsp__work_empty(&f.work));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* The refused step id is not "in flight": it can be admitted again. */
    sb_init(&b, 2);
    sb_row(&b, 3, 0, 1);
    fx_admit_ok(&f, &b.s);
    fx_fini(&f);
}

static void rollback_restores_free_stack_so_retry_gets_same_ids(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 10, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    /* Scramble the free stack first. */
    sb_init(&b, 1);
    for (rsp_rid r = 1; r <= 5; r++)
        sb_row(&b, r, 0, 1);
    fx_run_step(&f, &b.s);
    assert_int_equal(fx_remove(&f, 2), RSP_OK);
    assert_int_equal(fx_remove(&f, 4), RSP_OK);
    /* Rollback undoes allocations, not the implicit ingest: ingest first. */
    assert_int_equal(fx_ingest(&f, 7), RSP_OK);
    assert_int_equal(fx_ingest(&f, 8), RSP_OK);
    snap a, z;
    snap_take(&f, &a);
    sb_init(&b, 2);
    sb_row(&b, 7, 0, 1);
    sb_row(&b, 1, 0, 1); /* held before: stays */
    sb_row(&b, 8, d, 3);
    sb_pre(&b, 0, d);
    fx_admit_ok(&f, &b.s);
    int32_t s7 = fx_slot(&f, 7, 0), s8 = fx_slot(&f, 8, d), s1d = fx_slot(&f, 1, d),
            s7d = fx_slot(&f, 7, d), s8m = fx_slot(&f, 8, 0);
    assert_int_equal(s7, 4);
    assert_int_equal(s8, 2);
    assert_int_equal(fx_rollback(&f, 2, NULL), RSP_OK);
    snap_take(&f, &z);
    /* Generations moved (the counter is pool-wide), nothing else did. */
    z.stats.generation = a.stats.generation;
    snap_assert_equal(&a, &z);
    fx_check_invariants(&f);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, 7, 0), s7);
    assert_int_equal(fx_slot(&f, 8, d), s8);
    assert_int_equal(fx_slot(&f, 1, d), s1d);
    assert_int_equal(fx_slot(&f, 7, d), s7d);
    assert_int_equal(fx_slot(&f, 8, 0), s8m);
    fx_fini(&f);
}

static void rollback_keeps_prior_holdings_with_contents(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_run_step(&f, &b.s);
    rsp_test_store_fill_pattern(f.store, 1, 9);
    uint64_t sum = rsp_test_store_checksum(f.store, 1);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    rsp_test_store_fill(f.store, 2, 0x99); /* the forward wrote rid 2's slot */
    assert_int_equal(fx_rollback(&f, 2, &done_ev), RSP_OK);
    assert_int_equal(fx_slot(&f, 1, 0), 1);
    assert_true(fx_has_state(&f, 1, 0));
    assert_int_equal(rsp_test_store_checksum(f.store, 1), sum);
    assert_int_equal(fx_slot(&f, 2, 0), -1);
    assert_true(rsp_test_store_slot_is_zero(f.store, 2));
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void rollback_waits_for_forward_before_zeroing(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_rollback(&f, 1, &done_ev), RSP_OK);
    int w = op_index(&f, RSP__OP_WAIT), z = op_index(&f, RSP__OP_ZERO);
    assert_int_equal(w, 0);
    assert_true(z > w);
    assert_ptr_equal(f.work.ops[0].event.handle, done_ev.handle);
    assert_int_equal(f.work.ops[0].event.value, 42);
    assert_true(work_zeroes(&f, 1));
    fx_fini(&f);
}

static void rollback_after_commit_or_unknown_is_noop(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_run_step(&f, &b.s);
    snap a, z;
    snap_take(&f, &a);
    assert_int_equal(fx_rollback(&f, 1, &done_ev), RSP_OK);
    assert_int_equal(fx_rollback(&f, 12345, NULL), RSP_OK);
    assert_true(rsp__work_empty(&f.work));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    fx_fini(&f);
}

static void rollback_skips_holdings_removed_meanwhile(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    /* Pinned by step 1: pending, not free. */
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_PENDING);
    assert_int_equal(fx_stats(&f).pending_release, 1);
    assert_int_equal(fx_rollback(&f, 1, NULL), RSP_OK);
    assert_int_equal(fx_stats(&f).pending_release, 0);
    assert_int_equal(fx_stats(&f).free_slots, 5);
    assert_false(rsp__core_has_request(f.core, 1));
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void commit_sets_has_state_on_written_rows_only(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    sb_pre(&b, 0, d); /* gives rid 1, 2 a draft holding */
    fx_run_step(&f, &b.s);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 3);
    sb_row(&b, 2, 0, 0); /* span 0: not written */
    sb_pad(&b, 2, d);    /* padding: not written */
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(op_index(&f, RSP__OP_WAIT), 0);
    assert_true(fx_has_state(&f, 1, 0));
    assert_true(fx_has_state(&f, 2, 0)); /* from step 1 */
    assert_false(fx_has_state(&f, 2, d));
    assert_false(fx_has_state(&f, 1, d));
    fx_fini(&f);
}

static void commit_requires_plan(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_EORDER);
    fx_admit_ok(&f, &b.s);
    snap a, z;
    snap_take(&f, &a);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "not planned"));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    /* Committed: a second commit is out of order. */
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_EORDER);
    fx_fini(&f);
}

static void capture_commit_needs_only_admit(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    b.s.capture = true;
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_EORDER);
    fx_fini(&f);
}

static void removal_during_step_defers_release_to_commit(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 3, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    rsp_test_store_fill(f.store, 1, 0xab); /* the forward is writing slot 1 */
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    /* Gone at once for later steps, but the slot is neither zeroed nor free. */
    assert_false(rsp__core_has_request(f.core, 1));
    assert_false(work_zeroes(&f, 1));
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_PENDING);
    fx_check_invariants(&f);
    /* Another request cannot get it before the forward is done. */
    stepb c;
    sb_init(&c, 2);
    sb_row(&c, 3, 0, 1);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &c.s, &out), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(out.free, 0);
    /* Commit: WAIT, then the zero, then the slot is free again. */
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(op_index(&f, RSP__OP_WAIT), 0);
    assert_true(work_zeroes(&f, 1));
    assert_true(op_index(&f, RSP__OP_ZERO) > 0);
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_FREE);
    assert_true(rsp_test_store_slot_is_zero(f.store, 1));
    assert_int_equal(fx_stats(&f).pending_release, 0);
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_slot(&f, 3, 0), 1);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void removal_of_admitted_unplanned_step_is_deferred_too(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_reset(&f, 1, true), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_PENDING);
    assert_true(rsp__core_has_request(f.core, 1));
    assert_int_equal(fx_slot(&f, 1, 0), -1);
    /* The plan no longer sees the holding: the row addresses the pad. */
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_plan_label(&f, 0)->slot_indices[0], 0);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_FREE);
    /* Commit did not resurrect a holding for the removed (rid, label). */
    assert_int_equal(fx_slot(&f, 1, 0), -1);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void removal_pinned_by_two_steps_waits_for_both(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b1, b2;
    sb_init(&b1, 1);
    sb_row(&b1, 1, 0, 1);
    sb_init(&b2, 2);
    sb_row(&b2, 1, 0, 1);
    fx_admit_ok(&f, &b1.s);
    assert_int_equal(fx_plan(&f, &b1.s), RSP_OK);
    fx_admit_ok(&f, &b2.s);
    assert_int_equal(fx_plan(&f, &b2.s), RSP_OK);
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    assert_int_equal(fx_commit(&f, &b1.s, &done_ev), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_PENDING);
    assert_int_equal(fx_commit(&f, &b2.s, &done_ev), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_FREE);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void reset_keep_during_step_zeroes_after_forward(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_run_step(&f, &b.s);
    rsp_test_store_fill(f.store, 1, 0x10);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    /* has_state is false at once; the zero waits for the forward. */
    assert_false(fx_has_state(&f, 1, 0));
    assert_false(work_zeroes(&f, 1));
    rsp_test_store_fill(f.store, 1, 0x20); /* the forward writes */
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(op_index(&f, RSP__OP_WAIT), 0);
    assert_true(work_zeroes(&f, 1));
    assert_false(fx_has_state(&f, 1, 0));
    assert_true(rsp_test_store_slot_is_zero(f.store, 1));
    assert_int_equal(fx_slot(&f, 1, 0), 1);
    fx_fini(&f);
}

/* A step admitted before reset(free = false) but planned after it starts
 * from zeros (its plan says has_state false); its forward's write is the
 * request's state: has_state true at its commit, no zero after it. With no
 * planned step, the reset zeroes at once (no forward may write the slot). */
static void step_planned_after_reset_keeps_its_write(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_run_step(&f, &b.s);
    rsp_test_store_fill(f.store, 1, 0x10);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    assert_true(work_zeroes(&f, 1));
    assert_true(rsp_test_store_slot_is_zero(f.store, 1));
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_false(fx_plan_label(&f, 0)->has_state[0]); /* the kernel starts from zeros */
    rsp_test_store_fill(f.store, 1, 0x20);            /* ... and writes the slot */
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_false(work_zeroes(&f, 1));
    assert_true(fx_has_state(&f, 1, 0));
    assert_false(rsp_test_store_slot_is_zero(f.store, 1));
    fx_fini(&f);
}

/* Pipelined: step 2 planned, reset(free = false), step 3 admitted and
 * planned behind it. Step 2's write is discarded (planned before the
 * reset), step 3's counts: the zero step 2's forward was waiting for is
 * taken over by step 3's plan (its forward rewrites the slot from zeros
 * after step 2's), so step 2's commit zeroes nothing and step 3's commit
 * sets has_state. */
static void step_planned_behind_a_reset_takes_over_the_pending_zero(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb a, b, c;
    sb_init(&a, 1);
    sb_row(&a, 1, 0, 1);
    fx_run_step(&f, &a.s);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    assert_false(work_zeroes(&f, 1)); /* step 2's forward may write it */
    sb_init(&c, 3);
    sb_row(&c, 1, 0, 1);
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_plan(&f, &c.s), RSP_OK);
    assert_false(fx_plan_label(&f, 0)->has_state[0]);
    assert_false(work_zeroes(&f, 1));
    rsp_test_store_fill(f.store, 1, 0x20); /* step 2's forward */
    rsp_test_store_fill(f.store, 1, 0x30); /* step 3's forward, after it */
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_false(work_zeroes(&f, 1)); /* would wipe step 3's write */
    assert_false(fx_has_state(&f, 1, 0));
    assert_int_equal(fx_commit(&f, &c.s, &done_ev), RSP_OK);
    assert_false(work_zeroes(&f, 1));
    assert_true(fx_has_state(&f, 1, 0));
    assert_false(rsp_test_store_slot_is_zero(f.store, 1));
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* The step that took a pending zero over is rolled back: the zero is back,
 * and done after that step's forward once no planned step may write it. */
static void rollback_of_the_step_that_took_a_pending_zero_gives_it_back(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb a, b, c;
    sb_init(&a, 1);
    sb_row(&a, 1, 0, 1);
    fx_run_step(&f, &a.s);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    sb_init(&c, 3);
    sb_row(&c, 1, 0, 1);
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_plan(&f, &c.s), RSP_OK);
    rsp_test_store_fill(f.store, 1, 0x20);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    rsp_test_store_fill(f.store, 1, 0x30);
    assert_int_equal(fx_rollback(&f, 3, &done_ev), RSP_OK);
    assert_int_equal(op_index(&f, RSP__OP_WAIT), 0);
    assert_true(work_zeroes(&f, 1));
    assert_true(rsp_test_store_slot_is_zero(f.store, 1));
    assert_false(fx_has_state(&f, 1, 0));
    assert_int_equal(fx_slot(&f, 1, 0), 1);
    /* Rolled back while step 2 is still in flight: the zero waits for it. */
    sb_init(&b, 4);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    sb_init(&c, 5);
    sb_row(&c, 1, 0, 1);
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_plan(&f, &c.s), RSP_OK);
    assert_int_equal(fx_rollback(&f, 5, NULL), RSP_OK);
    assert_false(work_zeroes(&f, 1));
    rsp_test_store_fill(f.store, 1, 0x40); /* step 4's forward */
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_true(work_zeroes(&f, 1));
    assert_true(rsp_test_store_slot_is_zero(f.store, 1));
    assert_false(fx_has_state(&f, 1, 0));
    fx_fini(&f);
}

static void too_many_steps_in_flight_is_capacity_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    stepb b;
    for (uint64_t s = 1; s <= 4; s++) {
        sb_init(&b, s);
        sb_row(&b, s, 0, 1);
        fx_admit_ok(&f, &b.s);
    }
    snap a, z;
    snap_take(&f, &a);
    sb_init(&b, 5);
    sb_row(&b, 5, 0, 1);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_ECAPACITY);
    assert_non_null(strstr(f.err.message, "in flight"));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* Re-admitting one in flight still works; finishing one frees a record. */
    sb_init(&b, 3);
    sb_row(&b, 3, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_rollback(&f, 2, NULL), RSP_OK);
    sb_init(&b, 5);
    sb_row(&b, 5, 0, 1);
    fx_admit_ok(&f, &b.s);
    fx_fini(&f);
}

static void step_id_going_backwards_is_order_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    stepb b;
    sb_init(&b, 10);
    sb_row(&b, 1, 0, 1);
    fx_run_step(&f, &b.s);
    snap a, z;
    snap_take(&f, &a);
    sb_init(&b, 9);
    sb_row(&b, 2, 0, 1);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "goes backwards"));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* A larger id is fine; the same id again after a rollback (a retry) too. */
    sb_init(&b, 11);
    sb_row(&b, 3, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_rollback(&f, 11, NULL), RSP_OK);
    fx_admit_ok(&f, &b.s);
    fx_fini(&f);
}

/* Step ids increase: the id of a committed step is never a new step again
 * (admit 5, commit 5, admit 5 is refused, nothing changes). */
static void admit_of_a_committed_step_id_is_order_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    stepb b;
    sb_init(&b, 5);
    sb_row(&b, 1, 0, 1);
    fx_run_step(&f, &b.s);
    snap a, z;
    snap_take(&f, &a);
    sb_init(&b, 5);
    sb_row(&b, 2, 0, 1);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "committed"));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    assert_false(rsp__core_has_request(f.core, 2));
    /* Plan and commit of it stay refused too (it is not in flight). */
    assert_int_equal(fx_plan(&f, &b.s), RSP_EORDER);
    sb_init(&b, 6);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&f, &b.s);
    fx_fini(&f);
}

/* docs/semantics.md 4.2: a row removed during the step is released at its
 * journal position by the rollback, so the free stack ends exactly as before
 * the admit (1 2 3 4, not 2 1 3 4). */
static void rollback_restores_free_order_after_removal_during_step(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 5, true);
    uint32_t before[8], after[8];
    uint32_t n = rsp__core_free_order(f.core, before, 8);
    assert_int_equal(n, 4);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_remove(&f, 2), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, 2), RSP__SLOT_PENDING);
    assert_int_equal(fx_rollback(&f, 1, &done_ev), RSP_OK);
    assert_int_equal(op_index(&f, RSP__OP_WAIT), 0);
    assert_int_equal(rsp__core_free_order(f.core, after, 8), n);
    assert_memory_equal(before, after, n * sizeof before[0]);
    assert_int_equal(fx_stats(&f).pending_release, 0);
    fx_check_invariants(&f);
    /* Removal of the other row instead, with a second step pinning it: the
     * slot stays pending until that step ends. */
    fx_admit_ok(&f, &b.s);
    stepb c;
    sb_init(&c, 2);
    sb_row(&c, 1, 0, 1);
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    assert_int_equal(fx_rollback(&f, 1, NULL), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_PENDING);
    assert_int_equal(fx_rollback(&f, 2, NULL), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_FREE);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void rid_never_ingested_is_ingested_by_admit(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 77, 0, 1);
    assert_false(rsp__core_has_request(f.core, 77));
    fx_admit_ok(&f, &b.s);
    assert_true(rsp__core_has_request(f.core, 77));
    assert_int_equal(fx_stats(&f).num_requests, 1);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(admit_allocates_rows_in_declaration_order),
        cmocka_unit_test(padding_and_zero_span_rows_reserve_nothing),
        cmocka_unit_test(capture_step_reserves_nothing),
        cmocka_unit_test(readmit_allocates_nothing_new),
        cmocka_unit_test(existing_holding_is_kept),
        cmocka_unit_test(pool_full_is_an_outcome_and_changes_nothing),
        cmocka_unit_test(rollback_restores_free_stack_so_retry_gets_same_ids),
        cmocka_unit_test(rollback_keeps_prior_holdings_with_contents),
        cmocka_unit_test(rollback_waits_for_forward_before_zeroing),
        cmocka_unit_test(rollback_after_commit_or_unknown_is_noop),
        cmocka_unit_test(rollback_skips_holdings_removed_meanwhile),
        cmocka_unit_test(commit_sets_has_state_on_written_rows_only),
        cmocka_unit_test(commit_requires_plan),
        cmocka_unit_test(capture_commit_needs_only_admit),
        cmocka_unit_test(removal_during_step_defers_release_to_commit),
        cmocka_unit_test(removal_of_admitted_unplanned_step_is_deferred_too),
        cmocka_unit_test(removal_pinned_by_two_steps_waits_for_both),
        cmocka_unit_test(reset_keep_during_step_zeroes_after_forward),
        cmocka_unit_test(step_planned_after_reset_keeps_its_write),
        cmocka_unit_test(step_planned_behind_a_reset_takes_over_the_pending_zero),
        cmocka_unit_test(rollback_of_the_step_that_took_a_pending_zero_gives_it_back),
        cmocka_unit_test(too_many_steps_in_flight_is_capacity_error),
        cmocka_unit_test(step_id_going_backwards_is_order_error),
        cmocka_unit_test(admit_of_a_committed_step_id_is_order_error),
        cmocka_unit_test(rollback_restores_free_order_after_removal_during_step),
        cmocka_unit_test(rid_never_ingested_is_ingested_by_admit),
    };
    return cmocka_run_group_tests_name("core_step", tests, NULL, NULL);
}
