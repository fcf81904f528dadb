/* Checkpoints and the host tier (docs/semantics.md 8.4 to 8.9; docs/design.md
 * "Checkpoints and the host tier"): take, restore, pin, evict, demote, drop,
 * query, swap, the step declarations and their validation, and the report
 * of every call. Runs on every store (emulated, and as test_core_ckpt_host
 * / _cuda on the devices' checkpoint tiers: every store holds checkpoint
 * slots). SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "helpers.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {
    .kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = 3};

/* A core of `slots` request slots (sink on) and the two tiers. */
static void ck_init(fx *f, uint32_t slots, uint32_t dev, uint32_t host, bool demote)
{
    fx_init_ck(f, slots, dev, host, demote);
}

static uint32_t first_dev(fx *f)
{
    return rsp__core_layout(f->core)->max_slots;
}

static uint32_t first_host(fx *f)
{
    const rsp__layout *lay = rsp__core_layout(f->core);
    return lay->max_slots + lay->max_checkpoints;
}

/* Step `step` writes (rid, label) (span 1), committed; the forward's bytes
 * are pattern `seed`. */
static void written(fx *f, uint64_t step, rsp_rid rid, rsp_label_id label, uint64_t seed)
{
    stepb b;
    sb_init(&b, step);
    sb_row(&b, rid, label, 1);
    fx_admit_ok(f, &b.s);
    assert_int_equal(fx_plan(f, &b.s), RSP_OK);
    rsp_test_store_fill_pattern(f->store, (uint32_t)fx_slot(f, rid, label), seed);
    assert_int_equal(fx_commit(f, &b.s, &done_ev), RSP_OK);
}

static uint64_t sum(fx *f, uint32_t slot)
{
    return rsp_test_store_checksum(f->store, slot);
}

/* Index of the first op of kind in the last work list (num_ops: none). */
static uint32_t op_index(fx *f, rsp__op_kind kind)
{
    uint32_t i = 0;
    while (i < f->work.num_ops && f->work.ops[i].kind != kind)
        i++;
    return i;
}

/* --- take ---------------------------------------------------------------- */

static void take_copies_the_slot_and_reports_it(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 2, false);
    written(&f, 1, 1, 0, 11);
    uint32_t src = (uint32_t)fx_slot(&f, 1, 0);
    uint64_t before = sum(&f, src);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 1), RSP_OK);
    const rsp__ckpt_report *r = fx_ck_report(&f);
    assert_int_equal(r->num_changes, 1);
    assert_true(r->changes[0].key == 7 && r->changes[0].present);
    assert_int_equal(r->changes[0].tier, RSP_TIER_DEVICE);
    assert_int_equal(r->changes[0].slot, first_dev(&f));
    assert_int_equal(r->taken, 1);
    assert_int_equal(r->num_evictions, 0);
    rsp_checkpoint_info info = fx_ck(&f, 7);
    assert_int_equal(info.tier, RSP_TIER_DEVICE);
    assert_int_equal(info.slot, (int32_t)first_dev(&f));
    assert_true(info.bytes == rsp__core_layout(f.core)->slot_bytes);
    assert_int_equal(info.pins, 0);
    assert_int_equal(info.user_pins, 0);
    assert_true(info.last_use > 0);
    assert_true(sum(&f, first_dev(&f)) == before);
    assert_true(sum(&f, src) == before); /* the source is untouched */
    rsp_stats st = fx_stats(&f);
    assert_int_equal(st.checkpoints_device, 1);
    assert_int_equal(st.checkpoints_host, 0);
    /* Another call starts an empty report. */
    assert_int_equal(fx_ingest(&f, 5), RSP_OK);
    assert_int_equal(fx_ck_report(&f)->num_changes, 0);
    assert_int_equal(fx_ck_report(&f)->taken, 0);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void take_message_refusals_change_nothing(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    written(&f, 1, 1, 0, 11);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 2, 0, 1);
    fx_admit_ok(&f, &b.s);
    snap s0, s1;
    snap_take(&f, &s0);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 5, RSP_TIER_DEVICE, 0), RSP_ENOLABEL);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, (rsp_tier)9, 0), RSP_EINVAL);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_HOST, 0), RSP_EINVAL); /* no slots */
    assert_int_equal(fx_checkpoint(&f, 7, 3, 0, RSP_TIER_DEVICE, 0), RSP_ENOREQ);
    /* after_step in flight, or not committed yet */
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 2), RSP_EORDER);
    assert_true(strstr(f.err.message, "declare the checkpoint in step 2") != NULL);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 9), RSP_EORDER);
    /* the slot of a planned step, whose forward may be writing it */
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    snap_take(&f, &s0);
    assert_int_equal(fx_checkpoint(&f, 7, 2, 0, RSP_TIER_DEVICE, 0), RSP_EORDER);
    assert_true(strstr(f.err.message, "commit step 2 first") != NULL);
    snap_take(&f, &s1);
    snap_assert_equal(&s0, &s1);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(fx_checkpoint(&f, 7, 2, 0, RSP_TIER_DEVICE, 2), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void take_replaces_an_unpinned_key_freeing_its_slot_first(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 1, 0, false);
    written(&f, 1, 1, 0, 11);
    written(&f, 2, 2, 0, 22);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    /* The tier is full, but the replaced key's slot makes the room. */
    assert_int_equal(fx_checkpoint(&f, 7, 2, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    const rsp__ckpt_report *r = fx_ck_report(&f);
    assert_int_equal(r->num_evictions, 0);
    assert_int_equal(r->num_changes, 2);
    assert_true(r->changes[0].key == 7 && !r->changes[0].present);
    assert_true(r->changes[1].key == 7 && r->changes[1].present);
    assert_int_equal(r->dropped, 1);
    assert_int_equal(r->taken, 1);
    assert_true(sum(&f, first_dev(&f)) == sum(&f, (uint32_t)fx_slot(&f, 2, 0)));
    /* Pinned: refused, nothing changed. */
    assert_int_equal(fx_ck_pin(&f, 7, true), RSP_OK);
    snap s0, s1;
    snap_take(&f, &s0);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 0), RSP_EPINNED);
    snap_take(&f, &s1);
    snap_assert_equal(&s0, &s1);
    fx_fini(&f);
}

static void full_tier_evicts_its_least_recently_used_unpinned(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 3, 0, false);
    written(&f, 1, 1, 0, 11);
    for (uint64_t k = 1; k <= 3; k++)
        assert_int_equal(fx_checkpoint(&f, k, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    /* Use 1 (a pin moves it to the head); 2 is now least recently used. */
    assert_int_equal(fx_ck_pin(&f, 1, true), RSP_OK);
    assert_int_equal(fx_ck_pin(&f, 1, false), RSP_OK);
    assert_true(fx_ck(&f, 1).last_use > fx_ck(&f, 3).last_use);
    assert_int_equal(fx_checkpoint(&f, 4, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    const rsp__ckpt_report *r = fx_ck_report(&f);
    assert_int_equal(r->num_evictions, 1);
    assert_true(r->evictions[0].key == 2 && !r->evictions[0].demoted);
    assert_int_equal(r->evictions[0].tier, RSP_TIER_DEVICE);
    assert_false(fx_ck_has(&f, 2));
    /* A pinned tail is passed over: 3 is pinned, 1 goes. */
    assert_int_equal(fx_ck_pin(&f, 3, true), RSP_OK);
    assert_int_equal(fx_checkpoint(&f, 5, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    assert_true(fx_ck_report(&f)->evictions[0].key == 1);
    /* Every one pinned: RSP_ECAPACITY naming the tier, nothing changed. */
    assert_int_equal(fx_ck_pin(&f, 4, true), RSP_OK);
    assert_int_equal(fx_ck_pin(&f, 5, true), RSP_OK);
    snap s0, s1;
    snap_take(&f, &s0);
    assert_int_equal(fx_checkpoint(&f, 6, 1, 0, RSP_TIER_DEVICE, 0), RSP_ECAPACITY);
    assert_true(strstr(f.err.message, "device tier") != NULL);
    snap_take(&f, &s1);
    snap_assert_equal(&s0, &s1);
    assert_int_equal(fx_stats(&f).checkpoints_device, 3);
    fx_fini(&f);
}

static void device_victims_are_demoted_to_the_host_tier(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 1, 1, true);
    written(&f, 1, 1, 0, 11);
    written(&f, 2, 2, 0, 22);
    written(&f, 3, 3, 0, 33);
    uint64_t b1 = sum(&f, (uint32_t)fx_slot(&f, 1, 0));
    uint64_t b2 = sum(&f, (uint32_t)fx_slot(&f, 2, 0));
    assert_int_equal(fx_checkpoint(&f, 1, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    uint64_t used = fx_ck(&f, 1).last_use;
    assert_int_equal(fx_checkpoint(&f, 2, 2, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    const rsp__ckpt_report *r = fx_ck_report(&f);
    assert_int_equal(r->num_evictions, 1);
    assert_true(r->evictions[0].key == 1 && r->evictions[0].demoted);
    assert_int_equal(r->evictions[0].tier, RSP_TIER_DEVICE);
    rsp_checkpoint_info i1 = fx_ck(&f, 1);
    assert_int_equal(i1.tier, RSP_TIER_HOST);
    assert_int_equal(i1.slot, (int32_t)first_host(&f));
    assert_true(i1.last_use == used); /* a demotion is no use */
    assert_true(sum(&f, first_host(&f)) == b1);
    assert_true(sum(&f, first_dev(&f)) == b2);
    /* The work: the demotion's copy, then the take's into the freed slot,
     * in two ordered COPY ops (the slot is read, then written). */
    assert_int_equal(f.work.num_pairs, 2);
    assert_int_equal(f.work.pairs[0].src, first_dev(&f));
    assert_int_equal(f.work.pairs[0].dst, first_host(&f));
    assert_int_equal(f.work.pairs[1].dst, first_dev(&f));
    assert_int_equal(f.work.num_ops, 2);
    /* Host full too: its least recently used one is dropped for the next. */
    assert_int_equal(fx_checkpoint(&f, 3, 3, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    r = fx_ck_report(&f);
    assert_int_equal(r->num_evictions, 2);
    assert_true(r->evictions[0].key == 1 && !r->evictions[0].demoted);
    assert_int_equal(r->evictions[0].tier, RSP_TIER_HOST);
    assert_true(r->evictions[1].key == 2 && r->evictions[1].demoted);
    assert_false(fx_ck_has(&f, 1));
    assert_int_equal(fx_ck(&f, 2).tier, RSP_TIER_HOST);
    assert_true(sum(&f, first_host(&f)) == b2);
    /* Host full of pinned ones: the device victim is dropped instead. */
    assert_int_equal(fx_ck_pin(&f, 2, true), RSP_OK);
    assert_int_equal(fx_checkpoint(&f, 4, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    r = fx_ck_report(&f);
    assert_int_equal(r->num_evictions, 1);
    assert_true(r->evictions[0].key == 3 && !r->evictions[0].demoted);
    assert_int_equal(fx_stats(&f).checkpoints_host, 1);
    fx_fini(&f);
}

/* --- takes declared in a step -------------------------------------------- */

static void step_take_runs_after_forward_done_before_post_forks(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 11);
    written(&f, 2, 1, d, 12);
    stepb b;
    sb_init(&b, 3);
    sb_row(&b, 1, 0, 1);
    sb_post(&b, 0, d);
    sb_take(&b, 1, 0, 9, RSP_TIER_DEVICE);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_false(fx_ck_has(&f, 9)); /* nothing before the commit */
    uint32_t slot = (uint32_t)fx_slot(&f, 1, 0);
    rsp_test_store_fill_pattern(f.store, slot, 33); /* the forward */
    uint64_t fwd = sum(&f, slot);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    /* WAIT, then the take's COPY, then the post-fork's. */
    uint32_t wait = op_index(&f, RSP__OP_WAIT), copy = op_index(&f, RSP__OP_COPY);
    assert_true(wait < copy && copy < f.work.num_ops);
    assert_int_equal(f.work.pairs[0].src, slot);
    assert_int_equal(f.work.pairs[0].dst, first_dev(&f));
    assert_int_equal(f.work.pairs[1].dst, (uint32_t)fx_slot(&f, 1, d));
    assert_true(sum(&f, first_dev(&f)) == fwd);
    assert_int_equal(fx_ck_report(&f)->taken, 1);
    assert_int_equal(fx_ck(&f, 9).tier, RSP_TIER_DEVICE);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* The request is reset (free = false) while the step that declares a take
 * of it is in flight: the reset's zero runs after the forward, before the
 * take, so the take would store zeros that a restore then serves with
 * has_state true. It is skipped and reported instead (RSP_ENOREQ: the
 * state the forward wrote is gone), and no key is stored. A later plan's
 * take (the row then starts from zeros and the forward writes) counts. */
static void step_take_of_a_request_reset_during_the_step_is_skipped(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    written(&f, 1, 1, 0, 11);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    sb_take(&b, 1, 0, 7, RSP_TIER_DEVICE);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    rsp_test_store_fill_pattern(f.store, (uint32_t)fx_slot(&f, 1, 0), 33); /* the forward */
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK); /* never refused */
    const rsp__ckpt_report *r = fx_ck_report(&f);
    assert_int_equal(r->taken, 0);
    assert_int_equal(r->num_skips, 1);
    assert_true(r->skips[0].key == 7 && r->skips[0].step_id == 2);
    assert_int_equal(r->skips[0].status, RSP_ENOREQ);
    assert_false(fx_ck_has(&f, 7));
    assert_false(fx_has_state(&f, 1, 0));
    /* Reset before the plan: the forward rewrites from zeros, its take
     * stands. */
    stepb c;
    sb_init(&c, 3);
    sb_row(&c, 1, 0, 1);
    sb_take(&c, 1, 0, 8, RSP_TIER_DEVICE);
    fx_admit_ok(&f, &c.s);
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    assert_int_equal(fx_plan(&f, &c.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &c.s, &done_ev), RSP_OK);
    assert_int_equal(fx_ck_report(&f)->taken, 1);
    assert_true(fx_ck_has(&f, 8));
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void step_take_without_room_is_skipped_and_reported(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 1, 0, false);
    written(&f, 1, 1, 0, 11);
    assert_int_equal(fx_checkpoint(&f, 1, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    assert_int_equal(fx_ck_pin(&f, 1, true), RSP_OK);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    sb_take(&b, 1, 0, 2, RSP_TIER_DEVICE);
    sb_take(&b, 1, 0, 1, RSP_TIER_DEVICE); /* pinned key */
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK); /* never refused */
    const rsp__ckpt_report *r = fx_ck_report(&f);
    assert_int_equal(r->num_skips, 2);
    assert_true(r->skips[0].key == 2 && r->skips[0].step_id == 2);
    assert_int_equal(r->skips[0].status, RSP_ECAPACITY);
    assert_true(r->skips[1].key == 1);
    assert_int_equal(r->skips[1].status, RSP_EPINNED);
    assert_int_equal(r->taken, 0);
    assert_false(fx_ck_has(&f, 2));
    assert_false(rsp__core_step_in_flight(f.core, 2));
    fx_fini(&f);
}

static void later_plan_addressing_a_take_source_is_order_error(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    stepb a, b;
    sb_init(&a, 1);
    sb_row(&a, 1, 0, 1);
    sb_take(&a, 1, 0, 5, RSP_TIER_DEVICE);
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    fx_admit_ok(&f, &b.s);
    snap s0, s1;
    snap_take(&f, &s0);
    assert_int_equal(fx_plan(&f, &b.s), RSP_EORDER);
    assert_true(strstr(f.err.message, "commit step 1 first") != NULL);
    snap_take(&f, &s1);
    snap_assert_equal(&s0, &s1);
    assert_int_equal(fx_commit(&f, &a.s, &done_ev), RSP_OK);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_true(fx_ck_has(&f, 5));
    /* The other order: a planned step's slot refuses a taking plan. */
    sb_init(&a, 3);
    sb_row(&a, 1, 0, 1);
    sb_init(&b, 4);
    sb_row(&b, 2, 0, 1);
    sb_take(&b, 1, 0, 6, RSP_TIER_DEVICE);
    sb_row(&b, 1, 0, 0); /* span 0: the take needs span > 0 */
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_admit(&f, &b.s, &(rsp_admit_outcome){0}), RSP_EINVAL);
    b.rows[1].span = 1;
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_EORDER);
    fx_fini(&f);
}

/* --- restores ------------------------------------------------------------ */

static void restore_copies_before_the_plans_upload(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 2, false);
    written(&f, 1, 1, 0, 11);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_HOST, 0), RSP_OK);
    uint64_t saved = sum(&f, first_host(&f));
    uint64_t used = fx_ck(&f, 7).last_use;
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 2, 0, 40); /* a new request starts from the saved prefix */
    sb_restore(&b, 2, 0, 7);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_ck(&f, 7).pins, 1);
    assert_false(fx_has_state(&f, 2, 0));
    uint64_t g = fx_gen(&f, 2, 0);
    /* A pinned key is neither dropped nor replaced. */
    assert_int_equal(fx_ck_drop(&f, 7), RSP_EPINNED);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_HOST, 0), RSP_EPINNED);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    uint32_t slot = (uint32_t)fx_slot(&f, 2, 0);
    uint32_t copy = op_index(&f, RSP__OP_COPY), up = op_index(&f, RSP__OP_UPLOAD);
    assert_true(copy < up && up < f.work.num_ops);
    assert_int_equal(f.work.pairs[0].src, first_host(&f));
    assert_int_equal(f.work.pairs[0].dst, slot);
    assert_true(sum(&f, slot) == saved);
    assert_true(fx_has_state(&f, 2, 0));
    assert_true(fx_gen(&f, 2, 0) > g);
    assert_true(fx_plan_label(&f, 0)->has_state[0]);
    assert_int_equal(fx_ck_report(&f)->restored, 1);
    assert_true(fx_ck(&f, 7).last_use > used);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(fx_ck(&f, 7).pins, 0);
    assert_int_equal(fx_ck_drop(&f, 7), RSP_OK);
    assert_int_equal(fx_ck_report(&f)->dropped, 1);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void restore_runs_before_the_pre_forks(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 11);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    uint64_t saved = sum(&f, first_dev(&f));
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 2, 0, 8);
    sb_row(&b, 2, d, 1);
    sb_restore(&b, 2, 0, 7);
    sb_pre(&b, 0, d); /* the draft starts from the restored state */
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_true(sum(&f, (uint32_t)fx_slot(&f, 2, d)) == saved);
    assert_true(fx_has_state(&f, 2, d));
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    fx_fini(&f);
}

static void missing_restore_key_is_enokey_with_nothing_changed(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 2, 0, 4);
    sb_restore(&b, 2, 0, 99);
    snap s0, s1;
    snap_take(&f, &s0);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_ENOKEY);
    assert_true(strstr(f.err.message, "key 99") != NULL);
    snap_take(&f, &s1);
    snap_assert_equal(&s0, &s1);
    assert_false(rsp__core_step_in_flight(f.core, 1));
    assert_false(rsp__core_has_request(f.core, 2)); /* no implicit ingest */
    fx_fini(&f);
}

static void rollback_of_a_step_with_restores_leaves_pin_counts_as_before(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    written(&f, 1, 1, 0, 11);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    assert_int_equal(fx_ck_pin(&f, 7, true), RSP_OK);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 2, 0, 4);
    sb_row(&b, 3, 0, 4);
    sb_restore(&b, 2, 0, 7);
    sb_restore(&b, 3, 0, 7);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_ck(&f, 7).pins, 1); /* one step: one pin */
    fx_admit_ok(&f, &b.s);                  /* a re-admit pins nothing twice */
    assert_int_equal(fx_ck(&f, 7).pins, 1);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_ck(&f, 7).pins, 1);
    assert_int_equal(fx_rollback(&f, 2, &done_ev), RSP_OK);
    rsp_checkpoint_info i = fx_ck(&f, 7);
    assert_int_equal(i.pins, 0);
    assert_int_equal(i.user_pins, 1);
    /* Admitted only, then rolled back. */
    sb_init(&b, 3);
    sb_row(&b, 4, 0, 4);
    sb_restore(&b, 4, 0, 7);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_rollback(&f, 3, NULL), RSP_OK);
    assert_int_equal(fx_ck(&f, 7).pins, 0);
    assert_int_equal(fx_ck_pin(&f, 7, false), RSP_OK);
    assert_int_equal(fx_ck_drop(&f, 7), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void restore_into_a_planned_steps_slot_is_order_error(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    written(&f, 1, 1, 0, 11);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    stepb a, b;
    sb_init(&a, 2);
    sb_row(&a, 1, 0, 1);
    sb_init(&b, 3);
    sb_row(&b, 1, 0, 4);
    sb_restore(&b, 1, 0, 7);
    fx_admit_ok(&f, &a.s);
    assert_int_equal(fx_plan(&f, &a.s), RSP_OK);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_EORDER);
    assert_true(strstr(f.err.message, "restores[0]") != NULL);
    assert_int_equal(fx_commit(&f, &a.s, &done_ev), RSP_OK);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    fx_fini(&f);
}

/* --- validation ---------------------------------------------------------- */

static void declarations_are_validated_with_nothing_changed(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    written(&f, 1, 1, 0, 11);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    snap s0, s1;
    snap_take(&f, &s0);
    rsp_admit_outcome out;
    stepb b;
    struct {
        const char *what;
        rsp_status st;
    } cases[] = {
        {"checkpoints is NULL", RSP_EINVAL},  {"restores is NULL", RSP_EINVAL},
        {"names no row", RSP_EINVAL},         {"names no row", RSP_EINVAL},
        {"repeats (rid 2", RSP_EINVAL},       {"repeats key 8", RSP_EINVAL},
        {"is not a tier", RSP_EINVAL},        {"host tier has no slots", RSP_EINVAL},
        {"is not an interned", RSP_ENOLABEL}, {"capture step", RSP_EINVAL},
    };
    for (uint32_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sb_init(&b, 2);
        sb_row(&b, 2, 0, 4);
        sb_row(&b, 3, 0, 0);
        switch (c) {
        case 0: b.s.num_checkpoints = 1; break;
        case 1: b.s.num_restores = 1; break;
        case 2: sb_restore(&b, 3, 0, 7); break; /* span 0 */
        case 3: sb_take(&b, 4, 0, 8, RSP_TIER_DEVICE); break;
        case 4:
            sb_restore(&b, 2, 0, 7);
            sb_restore(&b, 2, 0, 7);
            break;
        case 5:
            sb_take(&b, 2, 0, 8, RSP_TIER_DEVICE);
            sb_take(&b, 2, 0, 8, RSP_TIER_DEVICE);
            break;
        case 6: sb_take(&b, 2, 0, 8, (rsp_tier)5); break;
        case 7: sb_take(&b, 2, 0, 8, RSP_TIER_HOST); break;
        case 8: sb_restore(&b, 2, 9, 7); break;
        case 9:
            b.s.capture = true;
            sb_restore(&b, 2, 0, 7);
            break;
        }
        assert_int_equal(fx_admit(&f, &b.s, &out), cases[c].st);
        if (!strstr(f.err.message, cases[c].what))
            fail_msg("case %u: \"%s\" not in \"%s\"", c, cases[c].what, f.err.message);
        snap_take(&f, &s1);
        snap_assert_equal(&s0, &s1);
    }
    fx_fini(&f);
}

/* --- pin, drop, query ---------------------------------------------------- */

static void pin_drop_query_rules(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 2, 0, false);
    written(&f, 1, 1, 0, 11);
    assert_int_equal(fx_ck_drop(&f, 7), RSP_ENOKEY);
    assert_int_equal(fx_ck_pin(&f, 7, true), RSP_ENOKEY);
    assert_int_equal(rsp__core_checkpoint_query(f.core, 7, NULL, &f.err), RSP_ENOKEY);
    assert_int_equal(fx_checkpoint(&f, 7, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    assert_int_equal(fx_ck_pin(&f, 7, false), RSP_EINVAL); /* not pinned */
    uint64_t t = fx_ck(&f, 7).last_use;
    assert_int_equal(fx_ck_pin(&f, 7, true), RSP_OK);
    assert_int_equal(fx_ck_pin(&f, 7, true), RSP_OK);
    rsp_checkpoint_info i = fx_ck(&f, 7);
    assert_int_equal(i.user_pins, 2);
    assert_true(i.last_use > t);
    assert_int_equal(fx_ck_drop(&f, 7), RSP_EPINNED);
    assert_int_equal(fx_ck_pin(&f, 7, false), RSP_OK);
    assert_int_equal(fx_ck_pin(&f, 7, false), RSP_OK);
    assert_int_equal(fx_ck_drop(&f, 7), RSP_OK);
    const rsp__ckpt_report *r = fx_ck_report(&f);
    assert_int_equal(r->num_changes, 1);
    assert_true(r->changes[0].key == 7 && !r->changes[0].present);
    assert_int_equal(r->num_evictions, 0); /* a drop is no eviction */
    assert_false(fx_ck_has(&f, 7));
    assert_int_equal(fx_stats(&f).checkpoints_device, 0);
    /* Its slot is free again: the next take gets it. */
    assert_int_equal(fx_checkpoint(&f, 8, 1, 0, RSP_TIER_DEVICE, 0), RSP_OK);
    assert_int_equal(fx_ck(&f, 8).slot, (int32_t)first_dev(&f));
    fx_fini(&f);
}

/* --- swap ---------------------------------------------------------------- */

static void swap_out_and_in_keeps_every_label_byte_for_byte(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 0, 4, false);
    rsp_label_id d = fx_label(&f, "draft");
    written(&f, 1, 1, 0, 11);
    written(&f, 2, 1, d, 12);
    uint32_t s0 = (uint32_t)fx_slot(&f, 1, 0), s1 = (uint32_t)fx_slot(&f, 1, d);
    uint64_t b0 = sum(&f, s0), b1 = sum(&f, s1);
    rsp_stats st0 = fx_stats(&f);
    assert_int_equal(fx_swap_out(&f, 1), RSP_OK);
    assert_true(rsp_test_store_slot_is_zero(f.store, s0)); /* released: zeroed */
    assert_true(rsp_test_store_slot_is_zero(f.store, s1));
    assert_int_equal(fx_slot(&f, 1, 0), -1);
    rsp_stats st = fx_stats(&f);
    assert_int_equal(st.swapped_slots, 2);
    assert_int_equal(st.free_slots, st0.free_slots + 2);
    assert_true(rsp__core_has_request(f.core, 1));
    assert_int_equal(fx_swap_out(&f, 1), RSP_EORDER); /* already */
    /* A step naming it is refused until it is back. */
    stepb b;
    sb_init(&b, 3);
    sb_row(&b, 1, 0, 1);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EORDER);
    assert_true(strstr(f.err.message, "rid 1 is swapped out") != NULL);
    assert_int_equal(fx_checkpoint(&f, 1, 1, 0, RSP_TIER_HOST, 0), RSP_ENOREQ);
    assert_int_equal(fx_swap_in(&f, 1, &out), RSP_OK);
    assert_true(out.ok);
    assert_int_equal(fx_stats(&f).swapped_slots, 0);
    assert_true(fx_has_state(&f, 1, 0) && fx_has_state(&f, 1, d));
    assert_true(sum(&f, (uint32_t)fx_slot(&f, 1, 0)) == b0);
    assert_true(sum(&f, (uint32_t)fx_slot(&f, 1, d)) == b1);
    assert_int_equal(fx_swap_in(&f, 1, &out), RSP_EORDER); /* not swapped out */
    assert_int_equal(fx_swap_in(&f, 9, &out), RSP_ENOREQ);
    fx_admit_ok(&f, &b.s);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void swap_refusals_change_nothing(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 4, 1, 1, false); /* 3 usable request slots */
    written(&f, 1, 1, 0, 11);
    written(&f, 2, 2, 0, 22);
    snap s0, s1;
    /* Pinned by a step in flight. */
    stepb b;
    sb_init(&b, 3);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    snap_take(&f, &s0);
    assert_int_equal(fx_swap_out(&f, 1), RSP_EORDER);
    assert_true(strstr(f.err.message, "step 3") != NULL);
    assert_int_equal(fx_swap_out(&f, 7), RSP_ENOREQ);
    snap_take(&f, &s1);
    snap_assert_equal(&s0, &s1);
    assert_int_equal(fx_rollback(&f, 3, NULL), RSP_OK);
    /* The host tier holds a pinned checkpoint: no room. */
    assert_int_equal(fx_checkpoint(&f, 5, 2, 0, RSP_TIER_HOST, 0), RSP_OK);
    assert_int_equal(fx_ck_pin(&f, 5, true), RSP_OK);
    snap_take(&f, &s0);
    assert_int_equal(fx_swap_out(&f, 1), RSP_ECAPACITY);
    snap_take(&f, &s1);
    snap_assert_equal(&s0, &s1);
    /* Unpinned, it is evicted for the swap (reported). */
    assert_int_equal(fx_ck_pin(&f, 5, false), RSP_OK);
    assert_int_equal(fx_swap_out(&f, 1), RSP_OK);
    const rsp__ckpt_report *r = fx_ck_report(&f);
    assert_int_equal(r->num_evictions, 1);
    assert_true(r->evictions[0].key == 5 && !r->evictions[0].demoted);
    assert_false(fx_ck_has(&f, 5));
    /* Swap slots are never evicted: a take into the full host tier fails. */
    assert_int_equal(fx_checkpoint(&f, 6, 2, 0, RSP_TIER_HOST, 0), RSP_ECAPACITY);
    /* Pool full: swap_in is an outcome, nothing changed. */
    written(&f, 4, 3, 0, 33);
    written(&f, 5, 4, 0, 44);
    snap_take(&f, &s0);
    rsp_admit_outcome out;
    assert_int_equal(fx_swap_in(&f, 1, &out), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(out.slots_short, 1);
    assert_true(out.rid == 1);
    snap_take(&f, &s1);
    snap_assert_equal(&s0, &s1);
    /* Remove gives its host slots back. */
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    assert_int_equal(fx_stats(&f).swapped_slots, 0);
    assert_int_equal(fx_checkpoint(&f, 6, 2, 0, RSP_TIER_HOST, 0), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void reset_of_a_swapped_request_drops_its_host_slots(void **state)
{
    (void)state;
    fx f;
    ck_init(&f, 8, 0, 2, false);
    written(&f, 1, 1, 0, 11);
    assert_int_equal(fx_swap_out(&f, 1), RSP_OK);
    assert_int_equal(fx_reset(&f, 1, false), RSP_OK);
    assert_int_equal(fx_stats(&f).swapped_slots, 0);
    rsp_admit_outcome out;
    assert_int_equal(fx_swap_in(&f, 1, &out), RSP_EORDER);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, 0, 1);
    fx_admit_ok(&f, &b.s);
    assert_false(fx_has_state(&f, 1, 0)); /* starts from zeros */
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(take_copies_the_slot_and_reports_it),
        cmocka_unit_test(take_message_refusals_change_nothing),
        cmocka_unit_test(take_replaces_an_unpinned_key_freeing_its_slot_first),
        cmocka_unit_test(full_tier_evicts_its_least_recently_used_unpinned),
        cmocka_unit_test(device_victims_are_demoted_to_the_host_tier),
        cmocka_unit_test(step_take_runs_after_forward_done_before_post_forks),
        cmocka_unit_test(step_take_without_room_is_skipped_and_reported),
        cmocka_unit_test(step_take_of_a_request_reset_during_the_step_is_skipped),
        cmocka_unit_test(later_plan_addressing_a_take_source_is_order_error),
        cmocka_unit_test(restore_copies_before_the_plans_upload),
        cmocka_unit_test(restore_runs_before_the_pre_forks),
        cmocka_unit_test(missing_restore_key_is_enokey_with_nothing_changed),
        cmocka_unit_test(rollback_of_a_step_with_restores_leaves_pin_counts_as_before),
        cmocka_unit_test(restore_into_a_planned_steps_slot_is_order_error),
        cmocka_unit_test(declarations_are_validated_with_nothing_changed),
        cmocka_unit_test(pin_drop_query_rules),
        cmocka_unit_test(swap_out_and_in_keeps_every_label_byte_for_byte),
        cmocka_unit_test(swap_refusals_change_nothing),
        cmocka_unit_test(reset_of_a_swapped_request_drops_its_host_slots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
