/*
 * The same-declaration path (docs/design.md "The core"): a step
 * whose rows equal its record's last ones while no holding changed takes
 * the fast path at admit, plan and commit. Every test drives two cores on
 * the same operations, one with the path on and one with it off
 * (rsp__core_set_fast), and asserts that they agree on every plan
 * (vectors, generations, buffers, digest), every status, and the whole
 * observable pool (snap), and whether the path was taken where it must or
 * must not be: after a release, reset, remove, fork or rollback between
 * two equal declarations (a reset that keeps its slots: the admit, which
 * only resolves slots, still takes it; the plan does not); the has_state flip after the first
 * write; padding rows and a graph bucket's pad tail; stages and capture steps.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <string.h>

#include "helpers.h"
#include "core/same.h"

/* Two cores: [0] with the path, [1] without. */
typedef struct duo {
    fx f[2];
    rsp_label_id draft;
} duo;

static void duo_init(duo *d, uint32_t max_slots)
{
    for (int i = 0; i < 2; i++) {
        fx_init(&d->f[i], max_slots, true);
        d->draft = fx_label(&d->f[i], "draft");
    }
    rsp__core_set_fast(d->f[1].core, false);
}

static void duo_fini(duo *d)
{
    rsp__fast_counts slow = rsp__core_fast_counts(d->f[1].core);
    assert_int_equal(slow.admits + slow.plans + slow.commits, 0);
    for (int i = 0; i < 2; i++)
        fx_fini(&d->f[i]);
}

static rsp__fast_counts counts(duo *d)
{
    return rsp__core_fast_counts(d->f[0].core);
}

/* The two pools are the same to every query. */
static void same_pools(duo *d)
{
    snap a, b;
    snap_take(&d->f[0], &a);
    snap_take(&d->f[1], &b);
    snap_assert_equal(&a, &b);
}

static void same_plans(duo *d)
{
    const rsp__plan_out *x = &d->f[0].plan, *y = &d->f[1].plan;
    assert_int_equal(x->step_id, y->step_id);
    assert_int_equal(x->staged, y->staged);
    assert_int_equal(x->promoted, y->promoted);
    assert_int_equal(x->num_labels, y->num_labels);
    assert_int_equal(x->digest, y->digest);
    for (uint32_t li = 0; li < x->num_labels; li++) {
        const rsp__label_plan *a = &x->labels[li], *b = &y->labels[li];
        assert_int_equal(a->label, b->label);
        assert_int_equal(a->num_rows, b->num_rows);
        assert_int_equal(a->length, b->length);
        assert_int_equal(a->buffer, b->buffer);
        assert_memory_equal(a->slot_indices, b->slot_indices, a->length * sizeof(int32_t));
        assert_memory_equal(a->has_state, b->has_state, a->length * sizeof(bool));
        assert_memory_equal(a->generations, b->generations, a->num_rows * sizeof(uint64_t));
    }
}

static void admit(duo *d, const rsp_step *s)
{
    for (int i = 0; i < 2; i++)
        fx_admit_ok(&d->f[i], s);
    same_pools(d);
}

static void plan(duo *d, const rsp_step *s)
{
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_plan(&d->f[i], s), RSP_OK);
    same_plans(d);
    same_pools(d);
}

static void commit(duo *d, const rsp_step *s)
{
    rsp_event done = rsp_event_complete();
    for (int i = 0; i < 2; i++) {
        rsp_status st_ = fx_commit(&d->f[i], s, &done);
        if (st_)
            print_error("%s\n", d->f[i].err.message);
        assert_int_equal(st_, RSP_OK);
    }
    same_pools(d);
}

static void step(duo *d, rsp_step *s, uint64_t id)
{
    s->step_id = id;
    admit(d, s);
    plan(d, s);
    commit(d, s);
}

/* rids 1..n, one row each on label, span 1. */
static void rows_of(stepb *b, uint32_t n, rsp_label_id label)
{
    sb_init(b, 1);
    for (uint32_t i = 0; i < n; i++)
        sb_row(b, i + 1, label, 1);
}

static void steady_steps_take_the_path_after_the_first_write(void **state)
{
    (void)state;
    duo d;
    duo_init(&d, 16);
    stepb b;
    rows_of(&b, 5, RSP_LABEL_MAIN);
    step(&d, &b.s, 1); /* allocates: the general path */
    assert_int_equal(counts(&d).admits, 0);
    assert_false(d.f[0].plan.labels[0].has_state[0]);
    /* Step 2: admit repeats step 1's pins; the plan cache says has_state
     * false, and step 1 wrote: the plan reads has_state again (DERIVE). */
    step(&d, &b.s, 2);
    assert_int_equal(counts(&d).admits, 1);
    assert_int_equal(counts(&d).plans, 1);
    for (uint32_t i = 0; i < 5; i++)
        assert_true(d.f[0].plan.labels[0].has_state[i]);
    for (uint64_t id = 3; id <= 6; id++)
        step(&d, &b.s, id);
    assert_int_equal(counts(&d).admits, 5);
    assert_int_equal(counts(&d).plans, 5);
    assert_true(counts(&d).commits >= 4);
    duo_fini(&d);
}

/* Between two equal declarations, each operation that changes a holding
 * sends the next step down the general path; the result is the same.
 * The change comes before the admit (the admit must not repeat its pins)
 * or between admit and plan (the plan must not copy its cache). */
typedef enum between { B_RELEASE, B_RESET_KEEP, B_RESET_FREE, B_REMOVE, B_FORK, B_INGEST } between;

static void make_change(duo *d, between what, uint64_t fork_id)
{
    stepb fb;
    for (int i = 0; i < 2; i++) {
        fx *f = &d->f[i];
        switch (what) {
        case B_RELEASE: assert_int_equal(fx_release(f, 2, RSP_LABEL_MAIN), RSP_OK); break;
        case B_RESET_KEEP: assert_int_equal(fx_reset(f, 3, false), RSP_OK); break;
        case B_RESET_FREE: assert_int_equal(fx_reset(f, 1, true), RSP_OK); break;
        case B_REMOVE: assert_int_equal(fx_remove(f, 4), RSP_OK); break;
        case B_INGEST: assert_int_equal(fx_ingest(f, 77), RSP_OK); break;
        case B_FORK:
            /* A step with a pre-fork into rid 2's main. */
            sb_init(&fb, fork_id);
            sb_row(&fb, 2, d->draft, 1);
            sb_pre(&fb, d->draft, RSP_LABEL_MAIN);
            fx_run_step(f, &fb.s);
            break;
        }
    }
    same_pools(d);
}

static void change_between_steps(between what, bool after_admit)
{
    duo d;
    duo_init(&d, 16);
    stepb b;
    rows_of(&b, 4, RSP_LABEL_MAIN);
    for (uint64_t id = 1; id <= 3; id++)
        step(&d, &b.s, id);
    assert_int_equal(counts(&d).plans, 2); /* steps 2 and 3 */
    rsp__fast_counts before = counts(&d);
    /* Step ids in admission order: the fork step's is 5 after the
     * steady step's admit, else 4 (then the steady step is 5). */
    bool forks = what == B_FORK;
    b.s.step_id = forks && !after_admit ? 5 : 4;
    if (after_admit)
        admit(&d, &b.s);
    make_change(&d, what, after_admit ? 5 : 4);
    if (!after_admit)
        admit(&d, &b.s);
    plan(&d, &b.s);
    commit(&d, &b.s);
    rsp__fast_counts after = counts(&d);
    /* A new rid changes no holding; a reset that keeps its slots (zeroed
     * at once: no planned step) changes has_state and generations, which
     * the admit does not read (only which slot each (rid, label) holds)
     * and the plan reads again (DERIVE). */
    bool kept = what == B_INGEST || what == B_RESET_KEEP;
    assert_int_equal(after.admits, before.admits + (kept || after_admit ? 1 : 0));
    assert_int_equal(after.plans, before.plans + (kept ? 1 : 0));
    /* Steady again: the path comes back (after one more write where this
     * step left a holding without state). */
    uint64_t id0 = forks ? 6 : 5;
    for (uint64_t id = id0; id < id0 + 3; id++)
        step(&d, &b.s, id);
    assert_true(counts(&d).plans > after.plans);
    duo_fini(&d);
}

static void release_between_equal_steps_takes_the_general_path(void **state)
{
    (void)state;
    change_between_steps(B_RELEASE, false);
    change_between_steps(B_RELEASE, true);
}
static void reset_keep_between_equal_steps_takes_the_general_path(void **state)
{
    (void)state;
    change_between_steps(B_RESET_KEEP, false);
    change_between_steps(B_RESET_KEEP, true);
}
static void reset_free_between_equal_steps_takes_the_general_path(void **state)
{
    (void)state;
    change_between_steps(B_RESET_FREE, false);
    change_between_steps(B_RESET_FREE, true);
}
static void remove_between_equal_steps_takes_the_general_path(void **state)
{
    (void)state;
    change_between_steps(B_REMOVE, false);
    change_between_steps(B_REMOVE, true);
}
static void fork_between_equal_steps_takes_the_general_path(void **state)
{
    (void)state;
    change_between_steps(B_FORK, false);
    change_between_steps(B_FORK, true);
}
static void ingest_between_equal_steps_gives_the_general_result(void **state)
{
    (void)state;
    change_between_steps(B_INGEST, false);
    change_between_steps(B_INGEST, true);
}

/* A reset while the step is planned: its commit must not take the path
 * (the zero is pending until the forward is done). */
static void reset_during_a_steady_step_zeroes_at_its_commit(void **state)
{
    (void)state;
    duo d;
    duo_init(&d, 16);
    stepb b;
    rows_of(&b, 3, RSP_LABEL_MAIN);
    for (uint64_t id = 1; id <= 3; id++)
        step(&d, &b.s, id);
    b.s.step_id = 4;
    admit(&d, &b.s);
    plan(&d, &b.s);
    uint64_t commits = counts(&d).commits;
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_reset(&d.f[i], 2, false), RSP_OK);
    commit(&d, &b.s);
    assert_int_equal(counts(&d).commits, commits);
    assert_false(fx_has_state(&d.f[0], 2, RSP_LABEL_MAIN));
    duo_fini(&d);
}

/* A reset while one steady step is planned and the next admitted: the
 * zero is pending, and the next plan takes it over (its forward rewrites
 * the slot from zeros), so that plan must not come from the cache. */
static void reset_with_two_steady_steps_in_flight(void **state)
{
    (void)state;
    duo d;
    duo_init(&d, 16);
    stepb b, c;
    rows_of(&b, 3, RSP_LABEL_MAIN);
    rows_of(&c, 3, RSP_LABEL_MAIN);
    /* Pipelined: both records get a plan cache. */
    stepb *q[2] = {&b, &c};
    b.s.step_id = 1;
    admit(&d, &b.s);
    plan(&d, &b.s);
    for (uint64_t id = 2; id <= 6; id++) { /* odd ids b, even ids c */
        stepb *next = q[(id + 1) % 2], *prev = q[id % 2];
        next->s.step_id = id;
        admit(&d, &next->s);
        plan(&d, &next->s);
        commit(&d, &prev->s);
    }
    assert_true(counts(&d).plans >= 3);
    b.s.step_id = 7; /* step 6 (c) is planned */
    admit(&d, &b.s);
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_reset(&d.f[i], 2, false), RSP_OK);
    same_pools(&d);
    uint64_t plans = counts(&d).plans;
    plan(&d, &b.s);
    assert_int_equal(counts(&d).plans, plans);
    assert_false(fx_plan_label(&d.f[0], RSP_LABEL_MAIN)->has_state[1]);
    commit(&d, &c.s);
    commit(&d, &b.s);
    step(&d, &b.s, 8);
    step(&d, &c.s, 9);
    duo_fini(&d);
}

/* Padding rows, zero spans and a leased graph bucket: the pad tail and
 * the unaddressed rows are copied exactly; another bucket length goes
 * down the general path. */
static void padding_and_graph_bucket_tail(void **state)
{
    (void)state;
    duo d;
    duo_init(&d, 16);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 1, RSP_LABEL_MAIN, 1);
    sb_pad(&b, 9, RSP_LABEL_MAIN);
    sb_row(&b, 2, RSP_LABEL_MAIN, 0);
    sb_row(&b, 3, RSP_LABEL_MAIN, 1);
    sb_row(&b, 3, d.draft, 1);
    sb_lease(&b, 8, 0, 0);
    for (uint64_t id = 1; id <= 4; id++)
        step(&d, &b.s, id);
    assert_true(counts(&d).plans >= 2);
    const rsp__label_plan *lp = fx_plan_label(&d.f[0], RSP_LABEL_MAIN);
    assert_int_equal(lp->length, 8);
    assert_int_equal(lp->num_rows, 4);
    /* Another lease slot with a bigger bucket: other lengths. */
    uint64_t plans = counts(&d).plans;
    sb_lease(&b, 16, 1, 0);
    step(&d, &b.s, 5);
    assert_int_equal(counts(&d).plans, plans);
    assert_int_equal(fx_plan_label(&d.f[0], RSP_LABEL_MAIN)->length, 16);
    step(&d, &b.s, 6);
    assert_int_equal(counts(&d).plans, plans + 1);
    duo_fini(&d);
}

/* Steady steps staged (preplan) then promoted, and a capture step between
 * steady steps: the same as the general path. */
static void stages_and_capture_steps_between_steady_steps(void **state)
{
    (void)state;
    duo d;
    duo_init(&d, 16);
    stepb b;
    rows_of(&b, 4, RSP_LABEL_MAIN);
    for (uint64_t id = 1; id <= 3; id++)
        step(&d, &b.s, id);
    uint64_t plans = counts(&d).plans;
    for (uint64_t id = 4; id <= 6; id++) {
        b.s.step_id = id;
        admit(&d, &b.s);
        b.s.preplan = true;
        plan(&d, &b.s);
        b.s.preplan = false;
        plan(&d, &b.s); /* promotion: the live plan equals the stage */
        assert_true(d.f[0].plan.promoted);
        commit(&d, &b.s);
    }
    assert_int_equal(counts(&d).plans, plans + 3);
    /* A capture step with the same rows: dummies, no fast path. */
    rsp__fast_counts before = counts(&d);
    b.s.capture = true;
    step(&d, &b.s, 7);
    assert_int_equal(counts(&d).admits, before.admits);
    b.s.capture = false;
    for (uint64_t id = 8; id <= 10; id++)
        step(&d, &b.s, id);
    assert_true(counts(&d).plans > before.plans);
    duo_fini(&d);
}

/* A steady step rolled back after its plan, then retried and continued;
 * and two steps in flight on alternating records. */
static void rollback_and_pipelined_steady_steps(void **state)
{
    (void)state;
    duo d;
    duo_init(&d, 16);
    stepb b;
    rows_of(&b, 4, RSP_LABEL_MAIN);
    for (uint64_t id = 1; id <= 3; id++)
        step(&d, &b.s, id);
    b.s.step_id = 4;
    admit(&d, &b.s);
    plan(&d, &b.s);
    rsp_event done = rsp_event_complete();
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_rollback(&d.f[i], 4, &done), RSP_OK);
    same_pools(&d);
    step(&d, &b.s, 4); /* the retry */
    step(&d, &b.s, 5);
    /* Pipelined: admit and plan N+1 before committing N. */
    stepb c;
    rows_of(&c, 4, RSP_LABEL_MAIN);
    b.s.step_id = 6;
    admit(&d, &b.s);
    plan(&d, &b.s);
    for (uint64_t id = 7; id <= 12; id++) {
        stepb *next = id % 2 ? &c : &b, *prev = id % 2 ? &b : &c;
        next->s.step_id = id;
        admit(&d, &next->s);
        plan(&d, &next->s);
        commit(&d, &prev->s);
    }
    assert_true(counts(&d).plans >= 6);
    duo_fini(&d);
}

/* Steady fork steps (rows on draft, pre-fork main -> draft, post-fork
 * draft -> main): the forks move generations and has_state every step, not
 * which slots are held, so the admit takes the path (its pins: rows and
 * fork targets), the plan reads has_state and generations again (DERIVE)
 * and the forks are resolved once; other forks, or forks with a group, do
 * not take the admit's path. */
static void steady_fork_steps_take_the_path(void **state)
{
    (void)state;
    duo d;
    duo_init(&d, 24);
    stepb b;
    sb_init(&b, 1);
    for (uint32_t i = 0; i < 5; i++)
        sb_row(&b, i + 1, d.draft, 1);
    sb_pre(&b, RSP_LABEL_MAIN, d.draft);
    sb_post(&b, d.draft, RSP_LABEL_MAIN);
    for (uint64_t id = 1; id <= 5; id++)
        step(&d, &b.s, id);
    assert_int_equal(counts(&d).admits, 4); /* steps 2..5 (step 1 assigned both) */
    assert_int_equal(counts(&d).plans, 4);
    /* Every plan and commit used the (rid, fork) holdings resolved once,
     * by step 1's plan. */
    assert_int_equal(counts(&d).fork_pairs, 10);
    /* A release between the admit and the plan: resolved again (rid 3's
     * main moves to index 0), the same result; then between two steps
     * (rid 3's draft comes back at index 1). */
    b.s.step_id = 6;
    admit(&d, &b.s);
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_release(&d.f[i], 3, d.draft), RSP_OK);
    same_pools(&d);
    plan(&d, &b.s);
    commit(&d, &b.s);
    for (int i = 0; i < 2; i++)
        assert_int_equal(fx_release(&d.f[i], 3, RSP_LABEL_MAIN), RSP_OK);
    step(&d, &b.s, 7);
    /* Another post-fork target: the general path. */
    rsp__fast_counts before = counts(&d);
    b.post[0].to = d.draft;
    b.post[0].from = RSP_LABEL_MAIN;
    step(&d, &b.s, 8);
    assert_int_equal(counts(&d).admits, before.admits);
    step(&d, &b.s, 9);
    assert_int_equal(counts(&d).admits, before.admits + 1);
    /* A group on a fork: never the path. */
    sb_post_group(&b, 1);
    for (uint32_t i = 0; i < b.s.num_rows; i++)
        b.rows[i].fork_group = 1;
    rsp__fast_counts grouped = counts(&d);
    step(&d, &b.s, 10);
    step(&d, &b.s, 11);
    assert_int_equal(counts(&d).admits, before.admits + 1);
    assert_int_equal(counts(&d).fork_pairs, grouped.fork_pairs);
    duo_fini(&d);
}

/* Steps that restore or take checkpoints take the general path
 * at admit and plan; the steady steps around them, a swap out and in
 * between, still agree with the general path everywhere. */
static void checkpoint_steps_take_the_general_path(void **state)
{
    (void)state;
    duo d;
    for (int i = 0; i < 2; i++) {
        fx_init_ck(&d.f[i], 16, 2, 4, false);
        d.draft = fx_label(&d.f[i], "draft");
    }
    rsp__core_set_fast(d.f[1].core, false);
    stepb b;
    rows_of(&b, 4, RSP_LABEL_MAIN);
    step(&d, &b.s, 1);
    step(&d, &b.s, 2);
    rsp__fast_counts before = counts(&d);
    /* The same rows, plus a take: general admit and plan. */
    stepb t = b;
    t.s.rows = t.rows;
    sb_take(&t, 1, RSP_LABEL_MAIN, 5, RSP_TIER_DEVICE);
    step(&d, &t.s, 3);
    assert_int_equal(counts(&d).admits, before.admits);
    assert_int_equal(counts(&d).plans, before.plans);
    /* The same rows, restoring rid 2 from it. */
    stepb r = b;
    r.s.rows = r.rows;
    sb_restore(&r, 2, RSP_LABEL_MAIN, 5);
    step(&d, &r.s, 4);
    assert_int_equal(counts(&d).admits, before.admits);
    assert_int_equal(counts(&d).plans, before.plans);
    /* Steady again; then rid 3 swapped out and in (its holding moves). */
    step(&d, &b.s, 5);
    for (int i = 0; i < 2; i++) {
        rsp_admit_outcome out;
        assert_int_equal(fx_swap_out(&d.f[i], 3), RSP_OK);
        assert_int_equal(fx_swap_in(&d.f[i], 3, &out), RSP_OK);
        assert_true(out.ok);
    }
    same_pools(&d);
    step(&d, &b.s, 6);
    step(&d, &b.s, 7);
    assert_true(counts(&d).admits > before.admits);
    duo_fini(&d);
}

/* same.h's one check: a cache that names holdings by index (RESOLVED)
 * goes when a holding or request comes or goes; one that depends on the
 * rows only stays; a holding that changes in place drops none; the path
 * off hides the fast ones; a lost writes bit drops only ADMIT. */
static void resolved_caches_go_with_holders_rows_caches_stay(void **state)
{
    (void)state;
    rsp__same_pool g = {.ghost = UINT32_MAX};
    rsp__same m = {0};
    uint32_t all = RSP__SAME_RAW | RSP__SAME_RIDS | RSP__SAME_FORKS | RSP__SAME_ADMIT |
                   RSP__SAME_PAIRS | RSP__SAME_PLAN | RSP__SAME_VHASH;
    rsp__same_keep(&g, &m, all);
    assert_int_equal(rsp__same_valid(&g, &m), all);
    rsp__same_holdings_changed(&g); /* a fork or reset: slots stay */
    assert_int_equal(rsp__same_valid(&g, &m), all);
    rsp__same_writes_lost(&m);
    assert_int_equal(rsp__same_valid(&g, &m), all & ~(uint32_t)RSP__SAME_ADMIT);
    rsp__same_keep(&g, &m, RSP__SAME_ADMIT);
    g.off = true;
    assert_int_equal(rsp__same_valid(&g, &m), RSP__SAME_RAW | RSP__SAME_RIDS | RSP__SAME_FORKS);
    g.off = false;
    rsp__same_holders_changed(&g);
    assert_int_equal(rsp__same_valid(&g, &m), RSP__SAME_RAW | RSP__SAME_RIDS | RSP__SAME_FORKS);
    rsp__same_keep(&g, &m, RSP__SAME_PLAN); /* kept again: valid from now */
    assert_true(rsp__same_has(&g, &m, RSP__SAME_PLAN));
    assert_false(rsp__same_has(&g, &m, RSP__SAME_PLAN | RSP__SAME_ADMIT));
    rsp__same_rows_changed(&g, &m);
    assert_int_equal(rsp__same_valid(&g, &m), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(steady_steps_take_the_path_after_the_first_write),
        cmocka_unit_test(release_between_equal_steps_takes_the_general_path),
        cmocka_unit_test(reset_keep_between_equal_steps_takes_the_general_path),
        cmocka_unit_test(reset_free_between_equal_steps_takes_the_general_path),
        cmocka_unit_test(remove_between_equal_steps_takes_the_general_path),
        cmocka_unit_test(fork_between_equal_steps_takes_the_general_path),
        cmocka_unit_test(ingest_between_equal_steps_gives_the_general_result),
        cmocka_unit_test(reset_during_a_steady_step_zeroes_at_its_commit),
        cmocka_unit_test(reset_with_two_steady_steps_in_flight),
        cmocka_unit_test(padding_and_graph_bucket_tail),
        cmocka_unit_test(stages_and_capture_steps_between_steady_steps),
        cmocka_unit_test(rollback_and_pipelined_steady_steps),
        cmocka_unit_test(steady_fork_steps_take_the_path),
        cmocka_unit_test(checkpoint_steps_take_the_general_path),
        cmocka_unit_test(resolved_caches_go_with_holders_rows_caches_stay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
