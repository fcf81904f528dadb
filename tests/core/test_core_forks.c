/* Forks: pre and post, chains, from == to, missing sources, fork-rid order
 * (docs/semantics.md 4.1 item 3, 4.6). SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "helpers.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {
    .kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = 3};

static uint32_t count_ops(fx *f, rsp__op_kind kind)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < f->work.num_ops; i++)
        n += f->work.ops[i].kind == kind;
    return n;
}

/* rid's main slot holds state written by a forward (pattern seed). */
static void written(fx *f, uint64_t step, rsp_rid rid, rsp_label_id label, uint64_t seed)
{
    stepb b;
    sb_init(&b, step);
    sb_row(&b, rid, label, 1);
    fx_run_step(f, &b.s);
    rsp_test_store_fill_pattern(f->store, (uint32_t)fx_slot(f, rid, label), seed);
}

static void assert_same_bytes(fx *f, uint32_t a, uint32_t b)
{
    const rsp__layout *lay = rsp__core_layout(f->core);
    for (uint32_t blk = 0; blk < lay->num_blocks; blk++)
        for (uint32_t l = 0; l < lay->num_layers; l++)
            assert_memory_equal(rsp_test_store_slot_ptr(f->store, blk, l, a),
                                rsp_test_store_slot_ptr(f->store, blk, l, b),
                                lay->blocks[blk].slot_bytes);
}

static void pre_fork_copies_every_layer_and_block(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 11);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, d, 2);
    sb_pre(&b, 0, d);
    fx_admit_ok(&f, &b.s);
    uint64_t g = fx_gen(&f, 1, d);
    assert_false(fx_has_state(&f, 1, d));
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 1);
    uint32_t src = (uint32_t)fx_slot(&f, 1, 0), dst = (uint32_t)fx_slot(&f, 1, d);
    assert_same_bytes(&f, src, dst);
    assert_true(fx_has_state(&f, 1, d));
    assert_true(fx_gen(&f, 1, d) > g);
    /* The addressing shows the state after the fork. */
    assert_true(fx_plan_label(&f, d)->has_state[0]);
    assert_int_equal(fx_plan_label(&f, d)->generations[0], fx_gen(&f, 1, d));
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void fork_copies_has_state_false_and_zeros(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, d, 5); /* draft has state */
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1); /* main: fresh, zeros, no state */
    sb_pre(&b, 0, d);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_false(fx_has_state(&f, 1, d));
    assert_true(rsp_test_store_slot_is_zero(f.store, (uint32_t)fx_slot(&f, 1, d)));
    fx_fini(&f);
}

static void fork_onto_same_label_moves_generation_only(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    written(&f, 1, 1, 0, 7);
    uint32_t s = (uint32_t)fx_slot(&f, 1, 0);
    uint64_t sum = rsp_test_store_checksum(f.store, s);
    uint64_t g = fx_gen(&f, 1, 0);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    sb_pre(&b, 0, 0);
    sb_post(&b, 0, 0);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_stats(&f).held_slots, 1);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0);
    assert_int_equal(rsp_test_store_checksum(f.store, s), sum);
    assert_true(fx_has_state(&f, 1, 0));
    uint64_t g2 = fx_gen(&f, 1, 0);
    assert_true(g2 > g);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0);
    assert_true(fx_gen(&f, 1, 0) > g2);
    fx_fini(&f);
}

static void fork_without_source_does_nothing(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft"), beam = fx_label(&f, "beam");
    written(&f, 1, 1, 0, 3);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    sb_pre(&b, beam, d); /* rid 1 holds no beam */
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, 1, beam), -1); /* sources are not reserved */
    int32_t dst = fx_slot(&f, 1, d);
    assert_true(dst > 0); /* the target is */
    uint64_t g = fx_gen(&f, 1, d);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0);
    assert_int_equal(fx_gen(&f, 1, d), g);
    assert_false(fx_has_state(&f, 1, d));
    assert_true(rsp_test_store_slot_is_zero(f.store, (uint32_t)dst));
    fx_fini(&f);
}

static void fork_chain_is_split_into_ordered_copies(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 10, true);
    rsp_label_id a = fx_label(&f, "a"), bb = fx_label(&f, "b"), c = fx_label(&f, "c");
    written(&f, 1, 1, a, 21);
    written(&f, 2, 1, bb, 22);
    stepb s;
    sb_init(&s, 3);
    sb_row(&s, 1, c, 1);
    sb_pre(&s, a, bb);
    sb_pre(&s, bb, c);
    fx_admit_ok(&f, &s.s);
    assert_int_equal(fx_plan(&f, &s.s), RSP_OK);
    /* c got a's state through b, not b's old state. */
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 2);
    assert_same_bytes(&f, (uint32_t)fx_slot(&f, 1, a), (uint32_t)fx_slot(&f, 1, c));
    assert_same_bytes(&f, (uint32_t)fx_slot(&f, 1, a), (uint32_t)fx_slot(&f, 1, bb));
    fx_fini(&f);
}

static void fork_swap_is_sequential(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 10, true);
    rsp_label_id a = fx_label(&f, "a"), bb = fx_label(&f, "b");
    written(&f, 1, 1, a, 31);
    written(&f, 2, 1, bb, 32);
    uint64_t sum_a = rsp_test_store_checksum(f.store, (uint32_t)fx_slot(&f, 1, a));
    stepb s;
    sb_init(&s, 3);
    sb_row(&s, 1, a, 1);
    sb_pre(&s, a, bb);
    sb_pre(&s, bb, a);
    fx_admit_ok(&f, &s.s);
    assert_int_equal(fx_plan(&f, &s.s), RSP_OK);
    assert_int_equal(rsp_test_store_checksum(f.store, (uint32_t)fx_slot(&f, 1, a)), sum_a);
    assert_int_equal(rsp_test_store_checksum(f.store, (uint32_t)fx_slot(&f, 1, bb)), sum_a);
    fx_fini(&f);
}

static void forks_of_many_rids_are_one_batched_copy(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    for (rsp_rid r = 1; r <= 4; r++)
        sb_row(&b, r, 0, 1);
    fx_run_step(&f, &b.s);
    for (rsp_rid r = 1; r <= 4; r++)
        rsp_test_store_fill_pattern(f.store, (uint32_t)fx_slot(&f, r, 0), r);
    sb_init(&b, 2);
    for (rsp_rid r = 1; r <= 4; r++)
        sb_row(&b, r, d, 1);
    sb_pre(&b, 0, d);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 1);
    for (uint32_t i = 0; i < f.work.num_ops; i++)
        if (f.work.ops[i].kind == RSP__OP_COPY)
            assert_int_equal(f.work.ops[i].count, 4);
    for (rsp_rid r = 1; r <= 4; r++)
        assert_same_bytes(&f, (uint32_t)fx_slot(&f, r, 0), (uint32_t)fx_slot(&f, r, d));
    fx_fini(&f);
}

static void post_forks_copy_what_the_step_wrote_after_the_forward(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, 0, 1);
    sb_post(&b, 0, d);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0); /* post-forks wait for commit */
    uint32_t m = (uint32_t)fx_slot(&f, 1, 0), dr = (uint32_t)fx_slot(&f, 1, d);
    rsp_test_store_fill_pattern(f.store, m, 77); /* the forward */
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(f.work.ops[0].kind, RSP__OP_WAIT);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 1);
    assert_same_bytes(&f, m, dr);
    /* main got has_state from the commit, draft inherits it. */
    assert_true(fx_has_state(&f, 1, 0));
    assert_true(fx_has_state(&f, 1, d));
    fx_fini(&f);
}

static void zero_span_rows_reserve_nothing_but_still_fork(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 41);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 0); /* span 0: reserves nothing, still a forking rid */
    sb_row(&b, 2, 0, 0); /* no holding at all */
    sb_pre(&b, 0, d);
    uint32_t free0 = fx_stats(&f).free_slots;
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, 2, 0), -1);
    /* Fork targets are reserved for both rids (sources are not). */
    assert_true(fx_slot(&f, 1, d) > 0);
    assert_true(fx_slot(&f, 2, d) > 0);
    assert_int_equal(fx_stats(&f).free_slots, free0 - 2);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_same_bytes(&f, (uint32_t)fx_slot(&f, 1, 0), (uint32_t)fx_slot(&f, 1, d));
    assert_true(fx_has_state(&f, 1, d));
    /* The zero-span row itself addresses the pad. */
    assert_int_equal(fx_plan_label(&f, 0)->slot_indices[0], 0);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    fx_fini(&f);
}

static void padding_rows_do_not_fork(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 41);
    stepb b;
    sb_init(&b, 2);
    sb_pad(&b, 1, 0);
    sb_pre(&b, 0, d);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, 1, d), -1);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0);
    fx_fini(&f);
}

static void forking_rids_allocate_in_first_appearance_order(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 12, true);
    rsp_label_id d = fx_label(&f, "draft"), e = fx_label(&f, "extra");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 5, 0, 0);
    sb_pad(&b, 9, 0);
    sb_row(&b, 3, 0, 0);
    sb_row(&b, 5, e, 0);
    sb_pre(&b, 0, d);
    sb_post(&b, 0, e);
    fx_admit_ok(&f, &b.s);
    /* rid 5: draft, extra; then rid 3: draft, extra. */
    assert_int_equal(fx_slot(&f, 5, d), 1);
    assert_int_equal(fx_slot(&f, 5, e), 2);
    assert_int_equal(fx_slot(&f, 3, d), 3);
    assert_int_equal(fx_slot(&f, 3, e), 4);
    assert_int_equal(fx_slot(&f, 9, d), -1);
    fx_fini(&f);
}

static void two_forking_requests_that_cannot_both_fit_leave_pool_as_before(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true); /* 3 usable */
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 1);
    written(&f, 2, 2, 0, 2);
    snap a, z;
    snap_take(&f, &a);
    stepb b;
    sb_init(&b, 3);
    sb_row(&b, 1, 0, 1);
    sb_row(&b, 2, 0, 1);
    sb_pre(&b, 0, d); /* each rid needs a draft slot: 2 needed, 1 free */
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(out.rid, 2);
    assert_int_equal(out.label, d);
    assert_int_equal(out.slots_short, 1);
    assert_int_equal(out.free, 1);
    assert_int_equal(out.usable, 3);
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* Neither request keeps the slot the other's fork needs: one at a time fits. */
    assert_int_equal(fx_rollback(&f, 3, NULL), RSP_OK);
    sb_init(&b, 3);
    sb_row(&b, 2, 0, 1);
    sb_pre(&b, 0, d);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, 2, d), 3);
    fx_fini(&f);
}

static void forks_of_capture_step_are_ignored(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 1);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    sb_pre(&b, 0, d);
    sb_post(&b, 0, d);
    b.s.capture = true;
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0);
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0);
    assert_int_equal(fx_slot(&f, 1, d), -1);
    fx_fini(&f);
}

static void fork_from_slot_reset_during_step_copies_zeros(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 5);
    stepb n;
    sb_init(&n, 2);
    sb_row(&n, 1, 0, 1);
    sb_post(&n, 0, d);
    fx_admit_ok(&f, &n.s);
    assert_int_equal(fx_plan(&f, &n.s), RSP_OK);
    uint32_t m = (uint32_t)fx_slot(&f, 1, 0), dr = (uint32_t)fx_slot(&f, 1, d);
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    /* main's zero waits for step 2's forward; its bytes are still there. */
    assert_false(rsp_test_store_slot_is_zero(f.store, m));
    rsp_test_store_fill(f.store, dr, 0x66); /* make a copy visible */
    stepb s;
    sb_init(&s, 3);
    sb_row(&s, 1, d, 1);
    sb_pre(&s, 0, d);
    /* Step 2's post-fork replaces draft at its commit: a step naming draft
     * is refused until then (docs/semantics.md 9.1), nothing changed. */
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &s.s, &out), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "post-fork target of step 2"));
    assert_non_null(strstr(f.err.message, "label draft"));
    /* Step 2's post-fork copies zeros (its source was reset). */
    assert_int_equal(fx_commit(&f, &n.s, &done_ev), RSP_OK);
    fx_admit_ok(&f, &s.s);
    assert_true(rsp_test_store_slot_is_zero(f.store, m));
    assert_true(rsp_test_store_slot_is_zero(f.store, dr));
    assert_false(fx_has_state(&f, 1, 0));
    assert_false(fx_has_state(&f, 1, d));
    /* Now the pre-fork runs; the source reads zeros, so does the target. */
    rsp_test_store_fill(f.store, dr, 0x66);
    assert_int_equal(fx_plan(&f, &s.s), RSP_OK);
    assert_true(rsp_test_store_slot_is_zero(f.store, dr));
    assert_false(fx_has_state(&f, 1, d));
    assert_false(fx_plan_label(&f, d)->has_state[0]);
    assert_int_equal(fx_commit(&f, &s.s, &done_ev), RSP_OK);
    assert_true(fx_has_state(&f, 1, d));
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* docs/semantics.md 5.1, pipelined steps: step 1 planned on (rid 1, draft), not
 * committed; step 2's pre-fork main -> draft would copy onto a slot step 1's
 * forward may still write, with no WAIT possible. Refused (RSP_EORDER,
 * names the step and the slot), nothing changed; after step 1's commit the
 * same plan runs. */
static void pre_fork_onto_a_planned_steps_slot_is_order_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 5);
    stepb s1, s2;
    sb_init(&s1, 2);
    sb_row(&s1, 1, d, 1);
    fx_admit_ok(&f, &s1.s);
    assert_int_equal(fx_plan(&f, &s1.s), RSP_OK);
    sb_init(&s2, 3);
    sb_row(&s2, 1, 0, 1);
    sb_pre(&s2, 0, d);
    fx_admit_ok(&f, &s2.s);
    snap a, z;
    snap_take(&f, &a);
    assert_int_equal(fx_plan(&f, &s2.s), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "commit step 2 first"));
    char slot[32];
    snprintf(slot, sizeof slot, "slot %d", fx_slot(&f, 1, d));
    assert_non_null(strstr(f.err.message, slot));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* Still admitted: commit step 2, plan again. */
    assert_int_equal(fx_commit(&f, &s1.s, &done_ev), RSP_OK);
    assert_int_equal(fx_plan(&f, &s2.s), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 1);
    assert_same_bytes(&f, (uint32_t)fx_slot(&f, 1, 0), (uint32_t)fx_slot(&f, 1, d));
    assert_int_equal(fx_commit(&f, &s2.s, &done_ev), RSP_OK);
    fx_fini(&f);
}

/* A fork that reads a slot a planned step's forward writes is refused too
 * (it would copy a half-written state), and so is a post-fork of the step
 * being planned that would touch it at its commit. */
static void fork_reading_a_planned_steps_slot_is_order_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 5);
    stepb s1, s2;
    sb_init(&s1, 2);
    sb_row(&s1, 1, 0, 1); /* writes main */
    fx_admit_ok(&f, &s1.s);
    assert_int_equal(fx_plan(&f, &s1.s), RSP_OK);
    sb_init(&s2, 3);
    sb_row(&s2, 1, d, 1);
    sb_post(&s2, 0, d); /* would read main at its commit */
    fx_admit_ok(&f, &s2.s);
    assert_int_equal(fx_plan(&f, &s2.s), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "post_forks[0]"));
    assert_non_null(strstr(f.err.message, "commit step 2 first"));
    sb_init(&s2, 3);
    sb_row(&s2, 1, d, 1);
    sb_pre(&s2, 0, d); /* reads main now */
    assert_int_equal(fx_plan(&f, &s2.s), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "pre_forks[0]"));
    /* A step on other requests is not held back. */
    stepb o;
    sb_init(&o, 4);
    sb_row(&o, 2, 0, 1);
    sb_pre(&o, 0, d);
    fx_admit_ok(&f, &o.s);
    assert_int_equal(fx_plan(&f, &o.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &s1.s, &done_ev), RSP_OK);
    assert_int_equal(fx_plan(&f, &s2.s), RSP_OK);
    fx_fini(&f);
}

/* The other order: step 2 planned with a post-fork main -> draft (it writes
 * draft at its commit, after its forward only); step 3's rows on draft
 * would have their forward race that copy. Refused at step 3's plan. */
static void row_on_a_planned_steps_post_fork_slot_is_order_error(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 5);
    stepb s1, s2;
    sb_init(&s1, 2);
    sb_row(&s1, 1, 0, 1);
    sb_post(&s1, 0, d);
    fx_admit_ok(&f, &s1.s);
    assert_int_equal(fx_plan(&f, &s1.s), RSP_OK);
    sb_init(&s2, 3);
    sb_row(&s2, 1, d, 1);
    /* The post-fork's target: refused at admit (docs/semantics.md 9.1). */
    snap a, z;
    snap_take(&f, &a);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &s2.s, &out), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "post-fork target of step 2"));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    /* Rows on main too: step 2's post-fork reads main after step 2's
     * forward, while step 4's forward may be writing it. */
    stepb p;
    sb_init(&p, 4);
    sb_row(&p, 1, 0, 1);
    fx_admit_ok(&f, &p.s);
    assert_int_equal(fx_plan(&f, &p.s), RSP_EORDER);
    /* Other requests pipeline as before. */
    stepb q;
    sb_init(&q, 5);
    sb_row(&q, 2, 0, 1);
    fx_admit_ok(&f, &q.s);
    assert_int_equal(fx_plan(&f, &q.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &s1.s, &done_ev), RSP_OK);
    s2.s.step_id = 6; /* step ids increase: 3 was refused */
    fx_admit_ok(&f, &s2.s);
    assert_int_equal(fx_plan(&f, &s2.s), RSP_OK);
    fx_fini(&f);
}

/* A request removed during the step and re-created by a later, planned step
 * (new slots, that step's forward may be writing them): the earlier step's
 * commit cannot be refused, so its post-fork onto those slots is skipped. */
static void post_forks_skip_a_request_removed_and_recreated_during_the_step(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 5);
    stepb s1, s2;
    sb_init(&s1, 2);
    sb_row(&s1, 1, 0, 1);
    sb_post(&s1, 0, d);
    fx_admit_ok(&f, &s1.s);
    assert_int_equal(fx_plan(&f, &s1.s), RSP_OK);
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    sb_init(&s2, 3);
    sb_row(&s2, 1, 0, 1);
    sb_row(&s2, 1, d, 1);
    fx_admit_ok(&f, &s2.s);
    assert_int_equal(fx_plan(&f, &s2.s), RSP_OK);
    uint32_t m = (uint32_t)fx_slot(&f, 1, 0), dr = (uint32_t)fx_slot(&f, 1, d);
    rsp_test_store_fill(f.store, m, 0x21); /* step 3's forward */
    rsp_test_store_fill(f.store, dr, 0x22);
    uint64_t gen = fx_gen(&f, 1, d);
    assert_int_equal(fx_commit(&f, &s1.s, &done_ev), RSP_OK);
    assert_int_equal(count_ops(&f, RSP__OP_COPY), 0);
    assert_int_equal(fx_gen(&f, 1, d), gen);
    assert_int_equal(fx_commit(&f, &s2.s, &done_ev), RSP_OK);
    assert_true(fx_has_state(&f, 1, d));
    assert_false(rsp_test_store_slot_is_zero(f.store, dr));
    fx_check_invariants(&f);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pre_fork_copies_every_layer_and_block),
        cmocka_unit_test(fork_copies_has_state_false_and_zeros),
        cmocka_unit_test(fork_onto_same_label_moves_generation_only),
        cmocka_unit_test(fork_without_source_does_nothing),
        cmocka_unit_test(fork_chain_is_split_into_ordered_copies),
        cmocka_unit_test(fork_swap_is_sequential),
        cmocka_unit_test(forks_of_many_rids_are_one_batched_copy),
        cmocka_unit_test(post_forks_copy_what_the_step_wrote_after_the_forward),
        cmocka_unit_test(zero_span_rows_reserve_nothing_but_still_fork),
        cmocka_unit_test(padding_rows_do_not_fork),
        cmocka_unit_test(forking_rids_allocate_in_first_appearance_order),
        cmocka_unit_test(two_forking_requests_that_cannot_both_fit_leave_pool_as_before),
        cmocka_unit_test(forks_of_capture_step_are_ignored),
        cmocka_unit_test(fork_from_slot_reset_during_step_copies_zeros),
        cmocka_unit_test(pre_fork_onto_a_planned_steps_slot_is_order_error),
        cmocka_unit_test(fork_reading_a_planned_steps_slot_is_order_error),
        cmocka_unit_test(row_on_a_planned_steps_post_fork_slot_is_order_error),
        cmocka_unit_test(post_forks_skip_a_request_removed_and_recreated_during_the_step),
    };
    return cmocka_run_group_tests_name("core_forks", tests, NULL, NULL);
}
