/* Per-rid forks (rsp_row.fork_group, rsp_fork.group), skip_post_forks at
 * commit and release of one label (docs/semantics.md 8.2):
 * one test per sentence of the rules, failure paths included.
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "helpers.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {
    .kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = 3};

/* rid's slot of label holds state written by a forward (pattern seed). */
static void written(fx *f, uint64_t step, rsp_rid rid, rsp_label_id label, uint64_t seed)
{
    stepb b;
    sb_init(&b, step);
    sb_row(&b, rid, label, 1);
    fx_run_step(f, &b.s);
    rsp_test_store_fill_pattern(f->store, (uint32_t)fx_slot(f, rid, label), seed);
}

static uint64_t sum_of(fx *f, rsp_rid rid, rsp_label_id label)
{
    return rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, rid, label));
}

/* The forward of a planned step wrote (rid, label). */
static void forward_writes(fx *f, rsp_rid rid, rsp_label_id label, uint64_t seed)
{
    rsp_test_store_fill_pattern(f->store, (uint32_t)fx_slot(f, rid, label), seed);
}

enum { PREFILL = 1, PLAIN = 2, DRAFTER = 3, DRAFTER2 = 4, DRAFT_GROUP = 1 };

/* One step of an engine's mixed batch: a prefill (8 tokens), a plain
 * decode and a drafting rid (group 1, rows on main and draft), with the
 * draft forks of group 1: pre main -> draft, post draft -> main. */
static void mixed_step(stepb *b, uint64_t id, rsp_label_id draft)
{
    sb_init(b, id);
    sb_row(b, PREFILL, RSP_LABEL_MAIN, 8);
    sb_row(b, PLAIN, RSP_LABEL_MAIN, 1);
    sb_row(b, DRAFTER, RSP_LABEL_MAIN, 1);
    sb_group(b, DRAFT_GROUP);
    sb_row(b, DRAFTER, draft, 3);
    sb_group(b, DRAFT_GROUP);
    sb_pre(b, RSP_LABEL_MAIN, draft);
    sb_pre_group(b, DRAFT_GROUP);
    sb_post(b, draft, RSP_LABEL_MAIN);
    sb_post_group(b, DRAFT_GROUP);
}

/* A fork of group g applies only to the rids whose rows carry g: in a mixed
 * batch the prefill and plain rows get no draft slot, their writes survive
 * the post-fork; the drafting rid gets its draft, forked both ways. */
static void mixed_batch_forks_only_the_drafting_rid(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, PLAIN, RSP_LABEL_MAIN, 11);
    written(&f, 2, DRAFTER, RSP_LABEL_MAIN, 12);
    uint64_t drafter_main = sum_of(&f, DRAFTER, RSP_LABEL_MAIN);
    stepb b;
    mixed_step(&b, 3, draft);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, PREFILL, draft), -1);
    assert_int_equal(fx_slot(&f, PLAIN, draft), -1);
    assert_true(fx_slot(&f, DRAFTER, draft) > 0);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    /* The pre-fork copied the drafter's main onto its draft, only that. */
    assert_int_equal(sum_of(&f, DRAFTER, draft), drafter_main);
    assert_true(fx_has_state(&f, DRAFTER, draft));
    forward_writes(&f, PREFILL, RSP_LABEL_MAIN, 21);
    forward_writes(&f, PLAIN, RSP_LABEL_MAIN, 22);
    forward_writes(&f, DRAFTER, draft, 23);
    uint64_t prefill = sum_of(&f, PREFILL, RSP_LABEL_MAIN);
    uint64_t plain = sum_of(&f, PLAIN, RSP_LABEL_MAIN);
    uint64_t drafted = sum_of(&f, DRAFTER, draft);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    /* Plain rows keep their writes; the drafter's main is its draft now. */
    assert_int_equal(sum_of(&f, PREFILL, RSP_LABEL_MAIN), prefill);
    assert_int_equal(sum_of(&f, PLAIN, RSP_LABEL_MAIN), plain);
    assert_true(fx_has_state(&f, PREFILL, RSP_LABEL_MAIN));
    assert_true(fx_has_state(&f, PLAIN, RSP_LABEL_MAIN));
    assert_int_equal(sum_of(&f, DRAFTER, RSP_LABEL_MAIN), drafted);
    assert_int_equal(fx_stats(&f).held_slots, 4); /* 3 mains + 1 draft */
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A zeroed declaration (every group 0) is the step-wide form: every rid
 * forks, as before groups existed (the seed's rule). */
static void group_zero_forks_every_rid(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    stepb b;
    mixed_step(&b, 1, draft);
    b.pre[0].group = b.post[0].group = 0;
    fx_admit_ok(&f, &b.s);
    assert_true(fx_slot(&f, PREFILL, draft) > 0);
    assert_true(fx_slot(&f, PLAIN, draft) > 0);
    assert_true(fx_slot(&f, DRAFTER, draft) > 0);
    fx_fini(&f);
}

/* Forks of group 0 still apply to every rid when other forks have groups;
 * a rid of group 2 gets neither group 1's forks nor is it left out of
 * group 0's. */
static void group_zero_and_grouped_forks_mix(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft"), beam = fx_label(&f, "beam");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, RSP_LABEL_MAIN, 1);
    sb_group(&b, 1);
    sb_row(&b, 2, RSP_LABEL_MAIN, 1);
    sb_group(&b, 2);
    sb_pre(&b, RSP_LABEL_MAIN, draft);
    sb_pre_group(&b, 1);
    sb_post(&b, RSP_LABEL_MAIN, beam); /* group 0 */
    fx_admit_ok(&f, &b.s);
    assert_true(fx_slot(&f, 1, draft) > 0);
    assert_int_equal(fx_slot(&f, 2, draft), -1);
    assert_true(fx_slot(&f, 1, beam) > 0);
    assert_true(fx_slot(&f, 2, beam) > 0);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward_writes(&f, 2, RSP_LABEL_MAIN, 5);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(sum_of(&f, 2, beam), sum_of(&f, 2, RSP_LABEL_MAIN));
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* Capacity counts the targets of the rids each fork applies to, in first
 * appearance order; short: ok = false naming the first (rid, label) that
 * finds no slot, nothing changed (all-or-nothing). */
static void group_capacity_at_admit(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true); /* 5 usable */
    rsp_label_id draft = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 10, RSP_LABEL_MAIN, 1); /* plain: main only */
    sb_row(&b, 11, RSP_LABEL_MAIN, 1);
    sb_group(&b, 1);
    sb_row(&b, 12, RSP_LABEL_MAIN, 1);
    sb_group(&b, 1);
    sb_pre(&b, RSP_LABEL_MAIN, draft);
    sb_pre_group(&b, 1);
    /* 3 mains + 2 drafts = 5: fits (step-wide it would need 6). */
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_OK);
    assert_true(out.ok);
    assert_int_equal(out.free, 0);
    /* First appearance order: 10 main, 11 main, 12 main, 11 draft, 12 draft. */
    assert_int_equal(fx_slot(&f, 11, draft), 4);
    assert_int_equal(fx_slot(&f, 12, draft), 5);
    assert_int_equal(fx_slot(&f, 10, draft), -1);
    assert_int_equal(fx_rollback(&f, 1, NULL), RSP_OK);

    /* One more grouped rid: the third draft finds no slot. */
    snap before, after;
    snap_take(&f, &before);
    sb_init(&b, 2);
    sb_row(&b, 10, RSP_LABEL_MAIN, 1);
    sb_row(&b, 11, RSP_LABEL_MAIN, 1);
    sb_group(&b, 1);
    sb_row(&b, 10, draft, 0); /* plain rid, zero span: reserves nothing */
    sb_row(&b, 13, RSP_LABEL_MAIN, 0);
    sb_group(&b, 1);
    sb_row(&b, 12, RSP_LABEL_MAIN, 1);
    sb_group(&b, 1);
    sb_pre(&b, RSP_LABEL_MAIN, draft);
    sb_pre_group(&b, 1);
    /* mains 10, 11, 12; drafts 11, 13, 12: 6 > 5. */
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(out.rid, 12);
    assert_int_equal(out.label, draft);
    assert_int_equal(out.slots_short, 1);
    assert_int_equal(out.free, 5);
    assert_int_equal(out.usable, 5);
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    assert_false(rsp__core_has_request(f.core, 13)); /* no implicit ingest either */
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* Rollback undoes a grouped admit's fresh slots: the free stack ends as
 * before, holdings from before stay. */
static void rollback_of_a_grouped_step_restores_the_free_stack(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, PLAIN, RSP_LABEL_MAIN, 3);
    written(&f, 2, DRAFTER, RSP_LABEL_MAIN, 4);
    snap before, after;
    snap_take(&f, &before);
    stepb b;
    mixed_step(&b, 3, draft);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward_writes(&f, DRAFTER, draft, 9);
    assert_int_equal(fx_rollback(&f, 3, &done_ev), RSP_OK);
    assert_int_equal(fx_slot(&f, DRAFTER, draft), -1);
    assert_int_equal(fx_slot(&f, PREFILL, RSP_LABEL_MAIN), -1);
    snap_take(&f, &after);
    /* The prefill rid stays ingested (implicit ingest is not undone);
     * compare what was there before. */
    after.has_req[PREFILL] = before.has_req[PREFILL];
    after.stats.num_requests = before.stats.num_requests;
    after.stats.generation = before.stats.generation;
    snap_assert_equal(&before, &after);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* skip_post_forks, read at commit only: that rid's post-forks are not
 * applied (a rejected draft); its rows still get has_state; everything
 * else of the commit applies, the other drafting rid's post-forks too. */
static void skip_post_forks_at_commit(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, DRAFTER, RSP_LABEL_MAIN, 1);
    written(&f, 2, DRAFTER2, RSP_LABEL_MAIN, 2);
    stepb b;
    mixed_step(&b, 3, draft);
    sb_row(&b, DRAFTER2, RSP_LABEL_MAIN, 1);
    sb_group(&b, DRAFT_GROUP);
    sb_row(&b, DRAFTER2, draft, 3);
    sb_group(&b, DRAFT_GROUP);
    b.rows[0].skip_post_forks = true; /* ignored at admit and plan */
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward_writes(&f, DRAFTER, RSP_LABEL_MAIN, 31);
    forward_writes(&f, DRAFTER, draft, 32);
    forward_writes(&f, DRAFTER2, RSP_LABEL_MAIN, 33);
    forward_writes(&f, DRAFTER2, draft, 34);
    uint64_t main1 = sum_of(&f, DRAFTER, RSP_LABEL_MAIN);
    uint64_t draft1 = sum_of(&f, DRAFTER, draft);
    uint64_t draft2 = sum_of(&f, DRAFTER2, draft);
    uint64_t gen1 = fx_gen(&f, DRAFTER, RSP_LABEL_MAIN);
    /* Reject DRAFTER's draft (one of its rows says so is enough). */
    b.rows[0].skip_post_forks = false;
    b.rows[3].skip_post_forks = true;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(sum_of(&f, DRAFTER, RSP_LABEL_MAIN), main1);
    assert_int_equal(fx_gen(&f, DRAFTER, RSP_LABEL_MAIN), gen1);
    assert_true(fx_has_state(&f, DRAFTER, RSP_LABEL_MAIN));
    assert_true(fx_has_state(&f, DRAFTER, draft));
    assert_int_equal(sum_of(&f, DRAFTER, draft), draft1);
    /* DRAFTER2's draft is accepted. */
    assert_int_equal(sum_of(&f, DRAFTER2, RSP_LABEL_MAIN), draft2);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* skip_post_forks works on the step-wide form too, and a padding row's
 * flag is ignored. */
static void skip_post_forks_step_wide_and_padding(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, draft, 1);
    sb_row(&b, 2, draft, 1);
    sb_pad(&b, 2, RSP_LABEL_MAIN);
    sb_post(&b, draft, RSP_LABEL_MAIN);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward_writes(&f, 1, draft, 41);
    forward_writes(&f, 2, draft, 42);
    b.rows[0].skip_post_forks = true;
    b.rows[2].skip_post_forks = true; /* padding: no effect on rid 2 */
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    assert_true(rsp_test_store_slot_is_zero(f.store, (uint32_t)fx_slot(&f, 1, RSP_LABEL_MAIN)));
    assert_false(fx_has_state(&f, 1, RSP_LABEL_MAIN));
    assert_int_equal(sum_of(&f, 2, RSP_LABEL_MAIN), sum_of(&f, 2, draft));
    assert_true(fx_has_state(&f, 2, RSP_LABEL_MAIN));
    fx_fini(&f);
}

/* A commit names the groups its admit declared (docs/semantics.md 9.2): a rid
 * moved into or out of a group is RSP_EINVAL naming the row, nothing
 * changed; the admitted groups commit as declared. */
static void commit_with_other_groups_is_refused(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    stepb b;
    mixed_step(&b, 1, draft);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward_writes(&f, DRAFTER, RSP_LABEL_MAIN, 51);
    forward_writes(&f, DRAFTER, draft, 52);
    forward_writes(&f, PLAIN, RSP_LABEL_MAIN, 53);
    uint64_t drafter = sum_of(&f, DRAFTER, RSP_LABEL_MAIN);
    uint64_t plain = sum_of(&f, PLAIN, RSP_LABEL_MAIN);
    uint32_t held = fx_stats(&f).held_slots;
    uint16_t g1 = b.rows[1].fork_group, g2 = b.rows[2].fork_group, g3 = b.rows[3].fork_group;
    b.rows[1].fork_group = DRAFT_GROUP;              /* PLAIN joins group 1 */
    b.rows[2].fork_group = b.rows[3].fork_group = 0; /* DRAFTER leaves it */
    snap a, z;
    snap_take(&f, &a);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "rows[1].fork_group differs from its admit"));
    snap_take(&f, &z);
    snap_assert_equal(&a, &z);
    assert_int_equal(sum_of(&f, DRAFTER, RSP_LABEL_MAIN), drafter);
    assert_int_equal(sum_of(&f, PLAIN, RSP_LABEL_MAIN), plain);
    assert_int_equal(fx_slot(&f, PLAIN, draft), -1);
    assert_int_equal(fx_stats(&f).held_slots, held);
    b.rows[1].fork_group = g1;
    b.rows[2].fork_group = g2;
    b.rows[3].fork_group = g3;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(fx_slot(&f, PLAIN, draft), -1);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A stage's inherited has_state follows only the pre-forks of the row's
 * group, so the promotion of an unchanged stage matches the live plan. */
static void stage_inherits_only_its_groups_forks(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, PLAIN, RSP_LABEL_MAIN, 1);
    written(&f, 2, DRAFTER, RSP_LABEL_MAIN, 2);
    stepb b;
    sb_init(&b, 3);
    sb_row(&b, PLAIN, draft, 1); /* group 0: main -> draft is not its fork */
    sb_row(&b, DRAFTER, draft, 1);
    sb_group(&b, DRAFT_GROUP);
    sb_pre(&b, RSP_LABEL_MAIN, draft);
    sb_pre_group(&b, DRAFT_GROUP);
    b.s.preplan = true;
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_true(f.plan.staged);
    const rsp__label_plan *lp = fx_plan_label(&f, draft);
    assert_false(lp->has_state[0]);
    assert_true(lp->has_state[1]);
    b.s.preplan = false;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_true(f.plan.promoted);
    assert_false(fx_has_state(&f, PLAIN, draft));
    assert_true(fx_has_state(&f, DRAFTER, draft));
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    fx_fini(&f);
}

/* The pipeline check (docs/semantics.md 5.1) is restricted the same way: a
 * grouped fork does not read a slot of a rid outside its group, so a planned
 * step pinning that rid's slot does not refuse the plan; the step-wide fork
 * does. */
static void pipeline_check_only_for_the_groups_rids(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, PLAIN, RSP_LABEL_MAIN, 1);
    written(&f, 2, DRAFTER, RSP_LABEL_MAIN, 2);
    stepb n;
    sb_init(&n, 3);
    sb_row(&n, PLAIN, RSP_LABEL_MAIN, 1);
    fx_admit_ok(&f, &n.s);
    assert_int_equal(fx_plan(&f, &n.s), RSP_OK); /* planned, pins PLAIN's main */
    stepb m;
    sb_init(&m, 4);
    sb_row(&m, PLAIN, RSP_LABEL_MAIN, 0);
    sb_row(&m, DRAFTER, RSP_LABEL_MAIN, 1);
    sb_group(&m, DRAFT_GROUP);
    sb_pre(&m, RSP_LABEL_MAIN, draft);
    fx_admit_ok(&f, &m.s);
    /* Step-wide: the fork of PLAIN reads a slot step 3 may write. */
    assert_int_equal(fx_plan(&f, &m.s), RSP_EORDER);
    assert_non_null(strstr(f.err.message, "commit step 3 first"));
    m.pre[0].group = DRAFT_GROUP;
    fx_admit_ok(&f, &m.s); /* admitted again: the commit names this declaration */
    assert_int_equal(fx_plan(&f, &m.s), RSP_OK);
    assert_int_equal(fx_commit(&f, &n.s, NULL), RSP_OK);
    assert_int_equal(fx_commit(&f, &m.s, NULL), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* All non-padding rows of one rid carry one group: else RSP_EINVAL naming
 * the rid, at admit, plan and commit alike, nothing changed. Padding rows
 * are not checked. A fork's group past 16 bits: RSP_EINVAL. */
static void inconsistent_groups_and_bad_fork_group_are_refused(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, 7, RSP_LABEL_MAIN, 1);
    snap before, after;
    snap_take(&f, &before);
    for (uint32_t rows = 2; rows <= 12; rows += 10) { /* pairwise and hashed paths */
        stepb b;
        sb_init(&b, 2);
        for (uint32_t i = 0; i + 2 < rows; i++)
            sb_row(&b, 100 + i, RSP_LABEL_MAIN, 1);
        sb_row(&b, 7, RSP_LABEL_MAIN, 1);
        sb_group(&b, 1);
        sb_pad(&b, 7, draft); /* padding: any group */
        sb_group(&b, 5);
        sb_row(&b, 7, draft, 1);
        sb_group(&b, 2);
        sb_pre(&b, RSP_LABEL_MAIN, draft);
        sb_pre_group(&b, 1);
        rsp_admit_outcome out;
        assert_int_equal(fx_admit(&f, &b.s, &out), RSP_EINVAL);
        assert_non_null(strstr(f.err.message, "(rid 7) has fork_group 2"));
        assert_non_null(strstr(f.err.message, "has 1"));
        snap_take(&f, &after);
        snap_assert_equal(&before, &after);
    }
    /* At plan and commit of an admitted step too. */
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 7, RSP_LABEL_MAIN, 1);
    sb_group(&b, 1);
    sb_row(&b, 7, draft, 1);
    sb_group(&b, 1);
    sb_pre(&b, RSP_LABEL_MAIN, draft);
    sb_pre_group(&b, 1);
    fx_admit_ok(&f, &b.s);
    snap_take(&f, &before);
    b.rows[1].fork_group = 3;
    assert_int_equal(fx_plan(&f, &b.s), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "rid 7"));
    b.rows[1].fork_group = 1;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    snap_take(&f, &before);
    b.rows[0].fork_group = 0;
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_EINVAL);
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    b.rows[0].fork_group = 1;
    b.post[b.s.num_post_forks++] = (rsp_fork){draft, RSP_LABEL_MAIN, 65536};
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "post_forks[0].group = 65536"));
    b.post[0].group = 65535; /* the largest group: valid, but not admitted */
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_EINVAL);
    assert_non_null(strstr(f.err.message, "1 post_forks, its admit had 0"));
    b.s.num_post_forks = 0;
    assert_int_equal(fx_commit(&f, &b.s, NULL), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* Release of a slot no step pins: zeroed, on top of the free stack; the
 * request and its other labels stay. */
static void release_now(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, 1, RSP_LABEL_MAIN, 1);
    written(&f, 2, 1, draft, 2);
    uint32_t s = (uint32_t)fx_slot(&f, 1, draft);
    uint64_t main_sum = sum_of(&f, 1, RSP_LABEL_MAIN);
    uint64_t g = fx_stats(&f).generation;
    assert_int_equal(fx_release(&f, 1, draft), RSP_OK);
    assert_int_equal(fx_slot(&f, 1, draft), -1);
    assert_true(rsp__core_has_request(f.core, 1));
    assert_int_equal(sum_of(&f, 1, RSP_LABEL_MAIN), main_sum);
    assert_true(rsp_test_store_slot_is_zero(f.store, s));
    assert_int_equal(rsp__core_slot_state(f.core, s), RSP__SLOT_FREE);
    uint32_t top;
    rsp__core_free_order(f.core, &top, 1);
    assert_int_equal(top, s);
    assert_int_equal(fx_stats(&f).generation, g);
    /* The next allocation takes it. */
    stepb b;
    sb_init(&b, 3);
    sb_row(&b, 2, RSP_LABEL_MAIN, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_slot(&f, 2, RSP_LABEL_MAIN), (int32_t)s);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* Unknown rid, or a label the rid does not hold: RSP_OK, nothing happens.
 * An uninterned label: RSP_ENOLABEL, nothing changed. */
static void release_of_nothing_and_bad_label(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, 1, RSP_LABEL_MAIN, 1);
    snap before, after;
    snap_take(&f, &before);
    assert_int_equal(fx_release(&f, 99, RSP_LABEL_MAIN), RSP_OK);
    assert_int_equal(f.work.num_ops, 0);
    assert_int_equal(fx_release(&f, 1, draft), RSP_OK);
    assert_int_equal(f.work.num_ops, 0);
    assert_int_equal(fx_release(&f, 1, 9), RSP_ENOLABEL);
    assert_non_null(strstr(f.err.message, "label 9"));
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    fx_fini(&f);
}

/* Deferred like remove while an in-flight step addresses the slot: the
 * holding goes at once, the slot is zeroed and pushed at that step's end
 * (commit here; rollback in the next test). */
static void release_deferred_until_commit(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, 1, RSP_LABEL_MAIN, 1);
    written(&f, 2, 1, draft, 2);
    uint32_t s = (uint32_t)fx_slot(&f, 1, draft);
    stepb b;
    sb_init(&b, 3);
    sb_row(&b, 1, RSP_LABEL_MAIN, 1);
    sb_row(&b, 1, draft, 1);
    fx_admit_ok(&f, &b.s);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    assert_int_equal(fx_release(&f, 1, draft), RSP_OK);
    assert_int_equal(fx_slot(&f, 1, draft), -1);
    assert_int_equal(rsp__core_slot_state(f.core, s), RSP__SLOT_PENDING);
    assert_int_equal(fx_stats(&f).pending_release, 1);
    assert_false(rsp_test_store_slot_is_zero(f.store, s)); /* the forward may write it */
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, s), RSP__SLOT_FREE);
    assert_true(rsp_test_store_slot_is_zero(f.store, s));
    assert_int_equal(fx_stats(&f).pending_release, 0);
    assert_true(fx_has_state(&f, 1, RSP_LABEL_MAIN));
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* Release of a slot a step forked into (a draft taken at admit) while the
 * step is in flight: deferred to the rollback, which still restores the
 * free stack exactly. */
static void release_of_forked_into_slot_in_flight_then_rollback(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, 1, RSP_LABEL_MAIN, 1);
    uint32_t order_before[8];
    uint32_t n_before = rsp__core_free_order(f.core, order_before, 8);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, RSP_LABEL_MAIN, 1);
    sb_group(&b, 4);
    sb_pre(&b, RSP_LABEL_MAIN, draft);
    sb_pre_group(&b, 4);
    sb_post(&b, draft, RSP_LABEL_MAIN);
    sb_post_group(&b, 4);
    fx_admit_ok(&f, &b.s);
    uint32_t s = (uint32_t)fx_slot(&f, 1, draft);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK); /* the pre-fork copied into s */
    assert_int_equal(fx_release(&f, 1, draft), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, s), RSP__SLOT_PENDING);
    assert_int_equal(fx_rollback(&f, 2, &done_ev), RSP_OK);
    assert_int_equal(rsp__core_slot_state(f.core, s), RSP__SLOT_FREE);
    assert_true(rsp_test_store_slot_is_zero(f.store, s));
    uint32_t order_after[8];
    assert_int_equal(rsp__core_free_order(f.core, order_after, 8), n_before);
    assert_memory_equal(order_before, order_after, n_before * sizeof *order_after);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* The same with a commit: the released draft's post-fork finds no source
 * and does nothing, so the main row's write survives; the slot is freed
 * after the forward. */
static void release_of_forked_into_slot_in_flight_then_commit(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id draft = fx_label(&f, "draft");
    written(&f, 1, 1, RSP_LABEL_MAIN, 1);
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, RSP_LABEL_MAIN, 1);
    sb_pre(&b, RSP_LABEL_MAIN, draft);
    sb_post(&b, draft, RSP_LABEL_MAIN);
    fx_admit_ok(&f, &b.s);
    uint32_t s = (uint32_t)fx_slot(&f, 1, draft);
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    forward_writes(&f, 1, RSP_LABEL_MAIN, 61);
    uint64_t wrote = sum_of(&f, 1, RSP_LABEL_MAIN);
    assert_int_equal(fx_release(&f, 1, draft), RSP_OK);
    assert_int_equal(fx_stats(&f).pending_release, 1);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    assert_int_equal(sum_of(&f, 1, RSP_LABEL_MAIN), wrote);
    assert_true(fx_has_state(&f, 1, RSP_LABEL_MAIN));
    assert_int_equal(rsp__core_slot_state(f.core, s), RSP__SLOT_FREE);
    assert_true(rsp_test_store_slot_is_zero(f.store, s));
    fx_check_invariants(&f);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mixed_batch_forks_only_the_drafting_rid),
        cmocka_unit_test(group_zero_forks_every_rid),
        cmocka_unit_test(group_zero_and_grouped_forks_mix),
        cmocka_unit_test(group_capacity_at_admit),
        cmocka_unit_test(rollback_of_a_grouped_step_restores_the_free_stack),
        cmocka_unit_test(skip_post_forks_at_commit),
        cmocka_unit_test(skip_post_forks_step_wide_and_padding),
        cmocka_unit_test(commit_with_other_groups_is_refused),
        cmocka_unit_test(stage_inherits_only_its_groups_forks),
        cmocka_unit_test(pipeline_check_only_for_the_groups_rids),
        cmocka_unit_test(inconsistent_groups_and_bad_fork_group_are_refused),
        cmocka_unit_test(release_now),
        cmocka_unit_test(release_of_nothing_and_bad_label),
        cmocka_unit_test(release_deferred_until_commit),
        cmocka_unit_test(release_of_forked_into_slot_in_flight_then_rollback),
        cmocka_unit_test(release_of_forked_into_slot_in_flight_then_commit),
    };
    return cmocka_run_group_tests_name("core_fork_groups", tests, NULL, NULL);
}
