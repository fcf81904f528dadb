/* Plans and addressing: live, stage, promotion, eager and leased buffers
 * (docs/semantics.md 4.3, 4.4). SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "helpers.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {
    .kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = 7};

static uint32_t count_ops(fx *f, rsp__op_kind kind)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < f->work.num_ops; i++)
        n += f->work.ops[i].kind == kind;
    return n;
}

/* The stage report c says `ended` of step id (core.h rsp__stage_change). */
static void assert_stage(rsp__stage_change c, rsp__stage_end ended, uint64_t id)
{
    assert_int_equal(c.ended, ended);
    if (ended != RSP__STAGE_KEPT)
        assert_int_equal(c.step_id, id);
}

/* The device buffer of a label plan equals its host vectors over length. */
static void assert_uploaded(fx *f, const rsp__label_plan *lp)
{
    assert_true(rsp_test_store_buffer_capacity(f->store, lp->buffer) >= lp->length);
    assert_memory_equal(rsp_test_store_buffer_slots(f->store, lp->buffer), lp->slot_indices,
                        lp->length * sizeof(int32_t));
    assert_memory_equal(rsp_test_store_buffer_has_state(f->store, lp->buffer), lp->has_state,
                        lp->length * sizeof(bool));
}

static void addressing_follows_the_table(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 10, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    fx_run_step(&f, &b.s); /* rid 1 main: slot 1, has_state */
    sb_init(&b, 2);
    sb_row(&b, 2, d, 4);  /* draft first: first-appearance order */
    sb_row(&b, 1, 0, 1);  /* has_state true */
    sb_row(&b, 3, 0, 0);  /* span 0 */
    sb_pad(&b, 4, 0);     /* padding */
    sb_row(&b, 5, 0, 2);  /* fresh: has_state false */
    sb_row(&b, 2, 0, -3); /* negative span */
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(f.plan.step_id, 2);
    assert_false(f.plan.staged);
    assert_false(f.plan.promoted);
    assert_int_equal(f.plan.num_labels, 2);
    assert_int_equal(f.plan.labels[0].label, d);
    assert_int_equal(f.plan.labels[1].label, 0);
    const rsp__label_plan *dm = &f.plan.labels[0], *mm = &f.plan.labels[1];
    assert_int_equal(dm->num_rows, 1);
    assert_int_equal(dm->length, 1);
    assert_int_equal(dm->slot_indices[0], fx_slot(&f, 2, d));
    assert_false(dm->has_state[0]);
    assert_int_equal(dm->generations[0], fx_gen(&f, 2, d));
    assert_int_equal(mm->num_rows, 5);
    assert_int_equal(mm->length, 5);
    int32_t want[5] = {1, 0, 0, fx_slot(&f, 5, 0), 0};
    bool want_hs[5] = {true, false, false, false, false};
    assert_memory_equal(mm->slot_indices, want, sizeof want);
    assert_memory_equal(mm->has_state, want_hs, sizeof want_hs);
    assert_int_equal(mm->generations[0], fx_gen(&f, 1, 0));
    assert_int_equal(mm->generations[1], 0);
    assert_int_equal(mm->generations[3], fx_gen(&f, 5, 0));
    assert_uploaded(&f, dm);
    assert_uploaded(&f, mm);
    fx_fini(&f);
}

static void padding_rows_address_no_slot_without_sink(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, false);
    stepb b;
    sb_init(&b, 1);
    sb_pad(&b, 1, 0);
    sb_row(&b, 2, 0, 1);
    sb_row(&b, 3, 0, 0);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    const rsp__label_plan *lp = fx_plan_label(&f, 0);
    assert_int_equal(lp->slot_indices[0], RSP_NO_SLOT);
    assert_int_equal(lp->slot_indices[1], 0);
    assert_int_equal(lp->slot_indices[2], RSP_NO_SLOT);
    assert_int_equal(fx_stats(&f).held_slots, 1);
    fx_fini(&f);
}

static void capture_rows_address_pad_sink_on_and_off(void **state)
{
    (void)state;
    for (int sink = 0; sink < 2; sink++) {
        fx f;
        fx_init(&f, 4, sink);
        stepb b;
        sb_init(&b, 1);
        sb_row(&b, 1, 0, 1);
        fx_run_step(&f, &b.s);
        sb_init(&b, 2);
        sb_row(&b, 1, 0, 1); /* even an existing holding */
        sb_row(&b, 2, 0, 1);
        b.s.capture = true;
        fx_admit_ok(&f, &b.s);
        assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
        const rsp__label_plan *lp = fx_plan_label(&f, 0);
        int32_t pad = sink ? RSP_SINK_SLOT : RSP_NO_SLOT;
        assert_int_equal(lp->slot_indices[0], pad);
        assert_int_equal(lp->slot_indices[1], pad);
        assert_false(lp->has_state[0]);
        assert_int_equal(fx_stats(&f).held_slots, 1);
        assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
        fx_fini(&f);
    }
}

static void small_pool_admits_one_real_row_in_bucket_of_32(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 3, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    for (int i = 0; i < 31; i++)
        sb_pad(&b, 0, 0);
    sb_lease(&b, 32, 0, 0);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    const rsp__label_plan *lp = fx_plan_label(&f, 0);
    assert_int_equal(lp->num_rows, 32);
    assert_int_equal(lp->length, 32);
    assert_int_equal(lp->slot_indices[0], 1);
    for (int i = 1; i < 32; i++)
        assert_int_equal(lp->slot_indices[i], 0);
    assert_uploaded(&f, lp);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    assert_int_equal(fx_stats(&f).free_slots, 1);
    fx_fini(&f);
}

static void leased_buffer_length_and_tail_padding(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    assert_int_equal(rsp__core_build_graph_buffers(f.core, 12, 4096, &f.work, NULL), RSP_OK);
    stepb b;
    sb_init(&b, 1);
    for (rsp_rid r = 1; r <= 6; r++)
        sb_row(&b, r, 0, 1);
    sb_lease(&b, 8, 3, 1);
    fx_run_step(&f, &b.s);
    /* Created with max(graph max_bs 12, bucket 8, rows 6). */
    sb_init(&b, 2);
    for (rsp_rid r = 1; r <= 6; r++)
        sb_row(&b, r, 0, 1);
    sb_lease(&b, 8, 3, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    const rsp__label_plan *lp = fx_plan_label(&f, 0);
    uint32_t buf = lp->buffer;
    assert_int_equal(lp->length, 12);
    assert_int_equal(rsp_test_store_buffer_capacity(f.store, buf), 12);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    /* A smaller batch follows: rows 2.. of the device vector must be pad,
     * not the stale slots of the larger batch. */
    sb_init(&b, 3);
    sb_row(&b, 4, 0, 1);
    sb_row(&b, 5, 0, 1);
    sb_lease(&b, 8, 3, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    lp = fx_plan_label(&f, 0);
    assert_int_equal(lp->buffer, buf);
    assert_int_equal(lp->num_rows, 2);
    assert_int_equal(lp->length, 12);
    const int32_t *dev = rsp_test_store_buffer_slots(f.store, buf);
    const bool *dev_hs = rsp_test_store_buffer_has_state(f.store, buf);
    assert_int_equal(dev[0], fx_slot(&f, 4, 0));
    assert_int_equal(dev[1], fx_slot(&f, 5, 0));
    assert_true(dev_hs[0]);
    for (int i = 2; i < 12; i++) {
        assert_int_equal(dev[i], 0);
        assert_false(dev_hs[i]);
    }
    assert_int_equal(rsp_test_store_buffer_moves(f.store, buf), 0);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    fx_fini(&f);
}

static void leased_buffers_never_move_across_plans(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id d = fx_label(&f, "draft");
    uint32_t first_main = 0, first_draft = 0;
    for (uint64_t s = 1; s <= 6; s++) {
        stepb b;
        sb_init(&b, s);
        for (rsp_rid r = 1; r <= (rsp_rid)(s % 3) + 1; r++) {
            sb_row(&b, r, 0, 1);
            sb_row(&b, r, d, 1);
        }
        sb_lease(&b, 4, 9, 0);
        fx_admit_ok(&f, &b.s);
        assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
        if (s == 3) /* larger graph max_bs later: existing buffers stay */
            assert_int_equal(rsp__core_build_graph_buffers(f.core, 64, 0, &f.work, NULL), RSP_OK);
        const rsp__label_plan *m = fx_plan_label(&f, 0), *dd = fx_plan_label(&f, d);
        if (s == 1) {
            first_main = m->buffer;
            first_draft = dd->buffer;
            assert_int_not_equal(first_main, first_draft);
        }
        assert_int_equal(m->buffer, first_main);
        assert_int_equal(dd->buffer, first_draft);
        assert_int_equal(m->length, 4);
        assert_uploaded(&f, m);
        assert_uploaded(&f, dd);
        assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    }
    assert_int_equal(rsp_test_store_buffer_moves(f.store, first_main), 0);
    assert_int_equal(rsp_test_store_buffer_moves(f.store, first_draft), 0);
    assert_int_equal(rsp_test_store_buffer_capacity(f.store, first_main), 4);
    /* A new key created after build_graph_buffers(64) gets the larger length. */
    stepb b;
    sb_init(&b, 10);
    sb_row(&b, 1, 0, 1);
    sb_lease(&b, 4, 9, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_not_equal(fx_plan_label(&f, 0)->buffer, first_main);
    assert_int_equal(fx_plan_label(&f, 0)->length, 64);
    fx_fini(&f);
}

static void build_graph_buffers_keeps_largest(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    assert_int_equal(rsp__core_build_graph_buffers(f.core, 16, 0, &f.work, NULL), RSP_OK);
    assert_int_equal(rsp__core_build_graph_buffers(f.core, 8, 0, &f.work, NULL), RSP_OK);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_lease(&b, 2, 0, 0);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_plan_label(&f, 0)->length, 16);
    fx_fini(&f);
}

/* A capture step that was preplanned and then committed
 * leaves no stage behind. A stale one pointed at a step record the next
 * admit reuses: a later live plan "took the lease from that stage" and
 * handed step 11's leased buffer to step 12 while 11 was in flight. */
static void committed_capture_step_drops_its_stage(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    stepb cap;
    sb_init(&cap, 10);
    sb_row(&cap, 1, 0, 1);
    sb_lease(&cap, 4, 0, 0);
    cap.s.capture = true;
    fx_admit_ok(&f, &cap.s);
    cap.s.preplan = true;
    assert_int_equal(fx_plan(&f, &cap.s), RSP_OK);
    assert_true(rsp__core_stage(f.core, NULL));
    assert_true(f.plan.staged);
    assert_stage(f.plan.stage, RSP__STAGE_KEPT, 0);
    cap.s.preplan = false;
    assert_int_equal(fx_commit(&f, &cap.s, &done_ev), RSP_OK);
    assert_false(rsp__core_stage(f.core, NULL));
    /* The commit says so: the pool unpublishes the stage on this report. */
    assert_stage(f.stage, RSP__STAGE_STEP_ENDED, 10);

    stepb b11, b12;
    sb_init(&b11, 11);
    sb_row(&b11, 1, 0, 1);
    sb_lease(&b11, 4, 0, 0);
    fx_admit_ok(&f, &b11.s);
    assert_int_equal(fx_plan(&f, &b11.s), RSP_OK);
    assert_stage(f.plan.stage, RSP__STAGE_KEPT, 0);
    uint32_t buf11 = fx_plan_label(&f, 0)->buffer;
    sb_init(&b12, 12);
    sb_row(&b12, 2, 0, 1);
    sb_lease(&b12, 4, 0, 0);
    fx_admit_ok(&f, &b12.s);
    /* Step 11's live plan holds the leased buffer: refused, nothing changed. */
    assert_int_equal(fx_plan(&f, &b12.s), RSP_ECAPACITY);
    assert_int_equal(rsp_test_store_buffer_slots(f.store, buf11)[0], fx_slot(&f, 1, 0));
    assert_int_equal(fx_commit(&f, &b11.s, &done_ev), RSP_OK);
    assert_stage(f.stage, RSP__STAGE_KEPT, 0); /* a live-planned step had none */
    assert_int_equal(fx_plan(&f, &b12.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b12.s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* Sizes that would cost gigabytes are refused up front. */
static void oversized_buckets_are_invalid(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    /* max(8192, 2 x max_slots) rows: 8192 here. */
    assert_int_equal(rsp__core_build_graph_buffers(f.core, 8192, 0, &f.work, &f.err), RSP_OK);
    assert_int_equal(rsp__core_build_graph_buffers(f.core, 8193, 0, &f.work, &f.err), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "8192"));
    assert_int_equal(rsp__core_build_graph_buffers(f.core, UINT32_MAX, 0, &f.work, &f.err),
                     RSP_EINVAL);
    assert_int_equal(rsp__core_build_graph_buffers(f.core, 0, 0, &f.work, &f.err), RSP_EINVAL);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_lease(&b, 1u << 28, 0, 0);
    rsp_admit_outcome out;
    snap before, after;
    snap_take(&f, &before);
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EINVAL);
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    sb_lease(&b, 8192, 0, 0);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_plan_label(&f, 0)->length, 8192);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    fx_fini(&f);
}

static void more_rows_than_leased_buffer_is_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    sb_lease(&b, 2, 5, 0);
    fx_run_step(&f, &b.s);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    sb_row(&b, 3, 0, 1);
    sb_row(&b, 1, d, 1);
    sb_pre(&b, 0, d);
    sb_lease(&b, 2, 5, 0);
    fx_admit_ok(&f, &b.s);
    rsp_test_store_fill(f.store, 1, 0x31);
    snap a, z;
    snap_take(&f, &a);
    assert_int_equal(fx_plan(&f, &b.s), RSP_ECAPACITY);
    assert_non_null(strstr(f.err.message, "3 rows"));
    assert_non_null(strstr(f.err.message, "holds 2"));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z); /* no pre-fork copied, nothing changed */
    /* The step is still admitted and can be rolled back. */
    assert_int_equal(fx_rollback(&f, 2, NULL), RSP_OK);
    fx_fini(&f);
}

static void eager_buffers_grow_and_never_shrink(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 32, true);
    uint32_t sizes[4] = {3, 10, 2, 11};
    uint32_t buf = UINT32_MAX, cap = 0;
    for (uint64_t s = 0; s < 4; s++) {
        stepb b;
        sb_init(&b, s + 1);
        for (uint32_t r = 0; r < sizes[s]; r++)
            sb_row(&b, r + 1, 0, 1);
        fx_admit_ok(&f, &b.s);
        assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
        const rsp__label_plan *lp = fx_plan_label(&f, 0);
        assert_int_equal(lp->length, sizes[s]);
        if (buf == UINT32_MAX)
            buf = lp->buffer;
        assert_int_equal(lp->buffer, buf); /* nothing in flight: same ring entry */
        uint32_t c = rsp_test_store_buffer_capacity(f.store, buf);
        assert_true(c >= cap);
        assert_true(c >= sizes[s]);
        cap = c;
        assert_uploaded(&f, lp);
        assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    }
    assert_int_equal(cap, 20); /* 3 -> max(10, 6) -> 10 -> max(11, 20) */
    fx_fini(&f);
}

static void eager_buffer_of_step_in_flight_is_not_overwritten(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    stepb b1, b2;
    sb_init(&b1, 1);
    sb_row(&b1, 1, 0, 1);
    sb_init(&b2, 2);
    sb_row(&b2, 2, 0, 1);
    fx_admit_ok(&f, &b1.s);
    assert_int_equal(fx_plan(&f, &b1.s), RSP_OK);
    uint32_t buf1 = fx_plan_label(&f, 0)->buffer;
    fx_admit_ok(&f, &b2.s);
    assert_int_equal(fx_plan(&f, &b2.s), RSP_OK);
    uint32_t buf2 = fx_plan_label(&f, 0)->buffer;
    assert_int_not_equal(buf1, buf2);
    /* Step 1's device vector still says slot 1. */
    assert_int_equal(rsp_test_store_buffer_slots(f.store, buf1)[0], 1);
    assert_int_equal(fx_commit(&f, &b1.s, NULL), RSP_OK);
    /* Step 1 done: its buffer is reused by step 3. */
    stepb b3;
    sb_init(&b3, 3);
    sb_row(&b3, 3, 0, 1);
    fx_admit_ok(&f, &b3.s);
    assert_int_equal(fx_plan(&f, &b3.s), RSP_OK);
    assert_int_equal(fx_plan_label(&f, 0)->buffer, buf1);
    assert_int_equal(rsp_test_store_buffer_slots(f.store, buf2)[0], 2);
    fx_fini(&f);
}

static void plan_of_step_not_admitted_is_order_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    assert_int_equal(fx_plan(&f, &b.s), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "step 1"));
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_plan(&f, &b.s), RSP_EORDER); /* already planned */
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_EORDER);
    fx_fini(&f);
}

/* Stage tests share this setup: rid 1 main (has_state, bytes written),
 * rid 2 main fresh; step 2 admitted with a pre-fork main -> draft. */
static void stage_setup(fx *f, stepb *b, rsp_label_id *draft)
{
    fx_init(f, 10, true);
    *draft = fx_label(f, "draft");
    stepb s1;
    sb_init(&s1, 1);
    sb_row(&s1, 1, 0, 1);
    fx_run_step(f, &s1.s);
    rsp_test_store_fill_pattern(f->store, (uint32_t)fx_slot(f, 1, 0), 1);
    sb_init(b, 2);
    sb_row(b, 1, *draft, 1);
    sb_row(b, 2, *draft, 1);
    sb_row(b, 1, 0, 0);
    sb_pre(b, 0, *draft);
    fx_admit_ok(f, &b->s);
}

static void stage_changes_no_state_and_no_bytes(void **state)
{
    (void)state;
    fx f;
    stepb b;
    rsp_label_id d;
    stage_setup(&f, &b, &d);
    snap a, z;
    snap_take(&f, &a);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_true(f.plan.staged);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0);
    assert_int_equal(count_ops(&f, RSP__OP_ZERO), 0);
    assert_int_equal(count_ops(&f, RSP__OP_WAIT), 0);
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* has_state of the fork target is what it will be once the pre-fork ran. */
    const rsp__label_plan *lp = fx_plan_label(&f, d);
    assert_true(lp->has_state[0]);
    assert_false(lp->has_state[1]);
    assert_false(fx_has_state(&f, 1, d));
    /* A second stage is an error; clear_preplan is safe twice. */
    assert_int_equal(fx_plan(&f, &b.s), RSP_ESTAGED);
    rsp__stage_change c;
    assert_int_equal(rsp__core_clear_preplan(f.core, &c, NULL), RSP_OK);
    assert_stage(c, RSP__STAGE_CLEARED, 2);
    assert_int_equal(rsp__core_clear_preplan(f.core, &c, NULL), RSP_OK);
    assert_stage(c, RSP__STAGE_KEPT, 0);
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    fx_fini(&f);
}

static void stage_never_changes_the_live_plan(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 10, true);
    stepb b1, b2;
    sb_init(&b1, 1);
    sb_row(&b1, 1, 0, 1);
    sb_row(&b1, 2, 0, 1);
    fx_admit_ok(&f, &b1.s);
    assert_int_equal(fx_plan(&f, &b1.s), RSP_OK);
    uint32_t live_buf = fx_plan_label(&f, 0)->buffer;
    int32_t live[2];
    memcpy(live, rsp_test_store_buffer_slots(f.store, live_buf), sizeof live);
    sb_init(&b2, 2);
    sb_row(&b2, 3, 0, 1);
    sb_row(&b2, 4, 0, 1);
    b2.s.preplan = true;
    fx_admit_ok(&f, &b2.s);
    assert_int_equal(fx_plan(&f, &b2.s), RSP_OK);
    assert_int_not_equal(fx_plan_label(&f, 0)->buffer, live_buf);
    assert_memory_equal(rsp_test_store_buffer_slots(f.store, live_buf), live, sizeof live);
    assert_int_equal(fx_commit(&f, &b1.s, NULL), RSP_OK);
    b2.s.preplan = false;
    assert_int_equal(fx_plan(&f, &b2.s), RSP_OK);
    assert_true(f.plan.promoted);
    fx_fini(&f);
}

static void promotion_applies_deferred_pre_forks(void **state)
{
    (void)state;
    fx f;
    stepb b;
    rsp_label_id d;
    stage_setup(&f, &b, &d);
    uint32_t src = (uint32_t)fx_slot(&f, 1, 0), dst = (uint32_t)fx_slot(&f, 1, d);
    uint64_t sum = rsp_test_store_checksum(f.store, src);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    uint32_t staged_buf = fx_plan_label(&f, d)->buffer;
    assert_true(rsp_test_store_slot_is_zero(f.store, dst));
    uint64_t gen = fx_gen(&f, 1, d);
    b.s.preplan = false;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_true(f.plan.promoted);
    assert_false(f.plan.staged);
    assert_stage(f.plan.stage, RSP__STAGE_PROMOTED, 2);
    assert_false(rsp__core_stage(f.core, NULL));
    assert_int_equal(count_ops(&f, RSP__OP_UPLOAD), 0);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 1);
    assert_int_equal(rsp_test_store_checksum(f.store, dst), sum);
    assert_true(fx_has_state(&f, 1, d));
    assert_true(fx_gen(&f, 1, d) > gen);
    const rsp__label_plan *lp = fx_plan_label(&f, d);
    assert_int_equal(lp->buffer, staged_buf);
    assert_true(lp->has_state[0]);
    assert_int_equal(lp->generations[0], fx_gen(&f, 1, d));
    assert_uploaded(&f, lp);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    fx_fini(&f);
}

static void promotion_after_change_rebuilds_live(void **state)
{
    (void)state;
    fx f;
    stepb b;
    rsp_label_id d;
    stage_setup(&f, &b, &d);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    /* rid 1 is reset: the stage read has_state = true, live will say false. */
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    b.s.preplan = false;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_false(f.plan.promoted);
    assert_stage(f.plan.stage, RSP__STAGE_REPLACED, 2);
    assert_false(rsp__core_stage(f.core, NULL));
    assert_true(count_ops(&f, RSP__OP_UPLOAD) >= 1);
    const rsp__label_plan *lp = fx_plan_label(&f, d);
    assert_false(lp->has_state[0]);
    assert_uploaded(&f, lp);
    fx_fini(&f);
}

static void promotion_after_removal_rebuilds_live(void **state)
{
    (void)state;
    fx f;
    stepb b;
    rsp_label_id d;
    stage_setup(&f, &b, &d);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_remove(&f, 2), RSP_OK);
    b.s.preplan = false;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_false(f.plan.promoted);
    const rsp__label_plan *lp = fx_plan_label(&f, d);
    assert_int_equal(lp->slot_indices[1], 0);
    assert_uploaded(&f, lp);
    fx_fini(&f);
}

static void promotion_with_changed_declaration_rebuilds_live(void **state)
{
    (void)state;
    fx f;
    stepb b;
    rsp_label_id d;
    stage_setup(&f, &b, &d);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    b.s.preplan = false;
    b.s.num_rows = 2; /* the span-0 main row is dropped */
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_false(f.plan.promoted);
    assert_int_equal(f.plan.num_labels, 1);
    fx_fini(&f);
}

static void staged_chain_inherits_flags_through_forks(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 12, true);
    rsp_label_id a = fx_label(&f, "a"), bb = fx_label(&f, "b"), c = fx_label(&f, "c");
    stepb s;
    sb_init(&s, 1);
    sb_row(&s, 1, a, 1);
    fx_run_step(&f, &s.s); /* a has state */
    sb_init(&s, 2);
    sb_row(&s, 1, c, 1);
    sb_row(&s, 1, bb, 1);
    sb_pre(&s, a, bb);
    sb_pre(&s, bb, c);
    fx_admit_ok(&f, &s.s);
    s.s.preplan = true;
    assert_int_equal(fx_plan(&f, &s.s), RSP_OK);
    assert_true(fx_plan_label(&f, c)->has_state[0]);
    assert_true(fx_plan_label(&f, bb)->has_state[0]);
    assert_false(fx_has_state(&f, 1, c));
    s.s.preplan = false;
    assert_int_equal(fx_plan(&f, &s.s), RSP_OK);
    assert_true(f.plan.promoted);
    fx_fini(&f);
}

static void rollback_returns_slots_of_a_staged_admit(void **state)
{
    (void)state;
    fx f;
    stepb b;
    rsp_label_id d;
    stage_setup(&f, &b, &d);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(rsp__core_clear_preplan(f.core, NULL, NULL), RSP_OK);
    assert_int_equal(fx_rollback(&f, 2, NULL), RSP_OK);
    assert_stage(f.stage, RSP__STAGE_KEPT, 0); /* cleared before */
    assert_int_equal(fx_slot(&f, 1, d), -1);
    assert_int_equal(fx_slot(&f, 2, d), -1);
    assert_int_equal(fx_stats(&f).held_slots, 1);
    /* Rollback with the stage still there drops it too. */
    stepb c;
    sb_init(&c, 3);
    sb_row(&c, 5, 0, 1);
    fx_admit_ok(&f, &c.s);
    c.s.preplan = true;
    assert_int_equal(fx_plan(&f, &c.s), RSP_OK);
    assert_int_equal(fx_rollback(&f, 3, NULL), RSP_OK);
    assert_stage(f.stage, RSP__STAGE_STEP_ENDED, 3);
    stepb e;
    sb_init(&e, 4);
    sb_row(&e, 6, 0, 1);
    fx_admit_ok(&f, &e.s);
    e.s.preplan = true;
    assert_int_equal(fx_plan(&f, &e.s), RSP_OK); /* no ESTAGED */
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void stage_of_next_step_while_current_is_live(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 10, true);
    stepb b1, b2;
    sb_init(&b1, 1);
    sb_row(&b1, 1, 0, 1);
    fx_admit_ok(&f, &b1.s);
    assert_int_equal(fx_plan(&f, &b1.s), RSP_OK);
    sb_init(&b2, 2);
    sb_row(&b2, 1, 0, 1);
    b2.s.preplan = true;
    fx_admit_ok(&f, &b2.s);
    assert_int_equal(fx_plan(&f, &b2.s), RSP_OK);
    /* Staged before step 1's commit: step 1, in flight, writes the slot,
     * so the row has state (docs/semantics.md 9.1). */
    assert_true(fx_plan_label(&f, 0)->has_state[0]);
    assert_int_equal(fx_commit(&f, &b1.s, &done_ev), RSP_OK);
    b2.s.preplan = false;
    assert_int_equal(fx_plan(&f, &b2.s), RSP_OK);
    /* Step 1's commit gave the holding the flag the stage already had:
     * the stage is promoted. */
    assert_true(f.plan.promoted);
    assert_true(fx_plan_label(&f, 0)->has_state[0]);
    assert_uploaded(&f, fx_plan_label(&f, 0));
    fx_fini(&f);
}

/* Steps 1 and 2 admitted, both on lease (bucket 0, slot 0). */
static void two_on_one_lease(fx *f, stepb *a, stepb *b)
{
    fx_init(f, 10, true);
    sb_init(a, 1);
    sb_row(a, 1, 0, 4);
    sb_lease(a, 4, 0, 0);
    sb_init(b, 2);
    sb_row(b, 2, 0, 4);
    sb_row(b, 3, 0, 4);
    sb_lease(b, 4, 0, 0);
    fx_admit_ok(f, &a->s);
    fx_admit_ok(f, &b->s);
}

static void stage_on_lease_of_live_step_is_refused(void **state)
{
    (void)state;
    fx f;
    stepb a, b;
    two_on_one_lease(&f, &a, &b);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    const rsp__label_plan la = *fx_plan_label(&f, 0);
    int32_t want[4] = {1, 0, 0, 0};
    assert_memory_equal(la.slot_indices, want, sizeof want);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_ECAPACITY);
    assert_non_null(strstr(f.err.message, "live plan of step 1"));
    assert_memory_equal(rsp_test_store_buffer_slots(f.store, la.buffer), want, sizeof want);
    /* Another lease slot is fine; after step 1 commits, slot 0 is too. */
    b.s.lease.lease_slot = 1;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_not_equal(fx_plan_label(&f, 0)->buffer, la.buffer);
    assert_memory_equal(rsp_test_store_buffer_slots(f.store, la.buffer), want, sizeof want);
    fx_fini(&f);
}

static void live_plan_on_lease_of_live_step_is_refused(void **state)
{
    (void)state;
    fx f;
    stepb a, b;
    two_on_one_lease(&f, &a, &b);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    assert_int_equal(fx_plan(&f, &b.s), RSP_ECAPACITY);
    assert_int_equal(fx_commit(&f, &a.s, NULL), RSP_OK);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_uploaded(&f, fx_plan_label(&f, 0));
    fx_fini(&f);
}

static void live_plan_takes_leased_buffer_from_another_stage(void **state)
{
    (void)state;
    fx f;
    stepb a, b;
    two_on_one_lease(&f, &a, &b);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    /* Step 1 goes live on the same lease: it takes the buffer, the stage of
     * step 2 is dropped, and the plan says so. */
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    assert_stage(f.plan.stage, RSP__STAGE_TAKEN, 2);
    assert_false(rsp__core_stage(f.core, NULL));
    assert_uploaded(&f, fx_plan_label(&f, 0));
    assert_int_equal(fx_commit(&f, &a.s, NULL), RSP_OK);
    b.s.preplan = false;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_false(f.plan.promoted);
    assert_stage(f.plan.stage, RSP__STAGE_KEPT, 0); /* it had none any more */
    assert_uploaded(&f, fx_plan_label(&f, 0));
    assert_int_equal(fx_plan_label(&f, 0)->slot_indices[0], fx_slot(&f, 2, 0));
    /* And a new stage is allowed again (the old one is gone). */
    stepb c;
    sb_init(&c, 3);
    sb_row(&c, 1, 0, 1);
    c.s.preplan = true;
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_plan(&f, &c.s), RSP_OK);
    fx_fini(&f);
}

static void staged_flags_match_live_with_self_and_missing_sources(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 12, true);
    rsp_label_id a = fx_label(&f, "a"), bb = fx_label(&f, "b"), c = fx_label(&f, "c");
    stepb s;
    sb_init(&s, 1);
    sb_row(&s, 1, a, 1);
    sb_row(&s, 1, c, 1);
    sb_row(&s, 2, a, 1);
    fx_run_step(&f, &s.s); /* rid 1: a, c with state; rid 2: a with state */
    sb_init(&s, 2);
    sb_row(&s, 1, c, 1);
    sb_row(&s, 2, c, 1);
    sb_row(&s, 1, bb, 1);
    sb_pre(&s, bb, c); /* rid 1 b is fresh: c becomes false */
    sb_pre(&s, c, c);  /* self: flag unchanged */
    sb_pre(&s, 0, c);  /* no main holding: nothing happens */
    sb_pre(&s, a, bb); /* b gets a's flag (true) after c was set */
    fx_admit_ok(&f, &s.s);
    s.s.preplan = true;
    assert_int_equal(fx_plan(&f, &s.s), RSP_OK);
    const rsp__label_plan *lc = fx_plan_label(&f, c);
    bool staged_c[2] = {lc->has_state[0], lc->has_state[1]};
    bool staged_b = fx_plan_label(&f, bb)->has_state[0];
    assert_false(staged_c[0]); /* rid 1: c <- b (fresh) */
    assert_false(staged_c[1]); /* rid 2: c <- b, a fresh fork target */
    assert_true(staged_b);
    s.s.preplan = false;
    assert_int_equal(fx_plan(&f, &s.s), RSP_OK);
    assert_true(f.plan.promoted);
    assert_int_equal(fx_plan_label(&f, c)->has_state[0], staged_c[0]);
    assert_int_equal(fx_plan_label(&f, c)->has_state[1], staged_c[1]);
    assert_int_equal(fx_plan_label(&f, bb)->has_state[0], staged_b);
    fx_fini(&f);
}

/* The operations that never end a stage leave it, and errors report KEPT:
 * the pool follows the reports alone. */
static void only_plan_commit_rollback_and_clear_end_a_stage(void **state)
{
    (void)state;
    fx f;
    stepb b;
    rsp_label_id d;
    stage_setup(&f, &b, &d);
    b.s.preplan = true;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_true(f.plan.staged);
    assert_stage(f.plan.stage, RSP__STAGE_KEPT, 0);
    /* Admit (a new step and a re-admit of the staged one), ingest, reset,
     * remove and build_graph_buffers do not touch it. */
    stepb n;
    sb_init(&n, 3);
    sb_row(&n, 7, 0, 1);
    fx_admit_ok(&f, &n.s);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_ingest(&f, 8), RSP_OK);
    assert_int_equal(fx_reset(&f, 7, false), RSP_OK);
    assert_int_equal(fx_remove(&f, 8), RSP_OK);
    assert_int_equal(rsp__core_build_graph_buffers(f.core, 8, 0, &f.work, NULL), RSP_OK);
    uint64_t id = 0;
    assert_true(rsp__core_stage(f.core, &id));
    assert_int_equal(id, 2);
    /* Refused calls report KEPT and keep it. */
    f.stage.ended = RSP__STAGE_CLEARED;
    assert_int_equal(fx_commit(&f, &n.s, NULL), RSP_EORDER); /* not planned */
    assert_stage(f.stage, RSP__STAGE_KEPT, 0);
    assert_int_equal(fx_plan(&f, &n.s), RSP_OK); /* another step, live: kept */
    assert_stage(f.plan.stage, RSP__STAGE_KEPT, 0);
    f.stage.ended = RSP__STAGE_CLEARED;
    assert_int_equal(fx_rollback(&f, 99, NULL), RSP_OK); /* unknown: nothing */
    assert_stage(f.stage, RSP__STAGE_KEPT, 0);
    assert_int_equal(fx_commit(&f, &n.s, &done_ev), RSP_OK); /* another step */
    assert_stage(f.stage, RSP__STAGE_KEPT, 0);
    assert_true(rsp__core_stage(f.core, NULL));
    /* Its own step's rollback ends it. */
    assert_int_equal(fx_rollback(&f, 2, NULL), RSP_OK);
    assert_stage(f.stage, RSP__STAGE_STEP_ENDED, 2);
    assert_false(rsp__core_stage(f.core, NULL));
    fx_check_invariants(&f);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(addressing_follows_the_table),
        cmocka_unit_test(padding_rows_address_no_slot_without_sink),
        cmocka_unit_test(capture_rows_address_pad_sink_on_and_off),
        cmocka_unit_test(small_pool_admits_one_real_row_in_bucket_of_32),
        cmocka_unit_test(leased_buffer_length_and_tail_padding),
        cmocka_unit_test(leased_buffers_never_move_across_plans),
        cmocka_unit_test(build_graph_buffers_keeps_largest),
        cmocka_unit_test(more_rows_than_leased_buffer_is_error),
        cmocka_unit_test(committed_capture_step_drops_its_stage),
        cmocka_unit_test(oversized_buckets_are_invalid),
        cmocka_unit_test(eager_buffers_grow_and_never_shrink),
        cmocka_unit_test(eager_buffer_of_step_in_flight_is_not_overwritten),
        cmocka_unit_test(plan_of_step_not_admitted_is_order_error),
        cmocka_unit_test(stage_changes_no_state_and_no_bytes),
        cmocka_unit_test(stage_never_changes_the_live_plan),
        cmocka_unit_test(promotion_applies_deferred_pre_forks),
        cmocka_unit_test(promotion_after_change_rebuilds_live),
        cmocka_unit_test(promotion_after_removal_rebuilds_live),
        cmocka_unit_test(promotion_with_changed_declaration_rebuilds_live),
        cmocka_unit_test(staged_chain_inherits_flags_through_forks),
        cmocka_unit_test(rollback_returns_slots_of_a_staged_admit),
        cmocka_unit_test(stage_of_next_step_while_current_is_live),
        cmocka_unit_test(stage_on_lease_of_live_step_is_refused),
        cmocka_unit_test(live_plan_on_lease_of_live_step_is_refused),
        cmocka_unit_test(live_plan_takes_leased_buffer_from_another_stage),
        cmocka_unit_test(staged_flags_match_live_with_self_and_missing_sources),
        cmocka_unit_test(only_plan_commit_rollback_and_clear_end_a_stage),
    };
    return cmocka_run_group_tests_name("core_plan", tests, NULL, NULL);
}
