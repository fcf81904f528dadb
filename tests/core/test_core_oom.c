/* Allocation failure inside every core operation (item 2): the
 * N-th allocation of the call fails, for every N until the call no longer
 * allocates. The call must then either refuse with RSP_ENOMEM and change
 * nothing (same free stack, holdings, generations, slot bytes, requests),
 * or succeed completely (an OK admit holds every row it declared, an OK
 * plan copied every pre-fork). Afterwards the same call succeeds.
 *
 * malloc, calloc and realloc are wrapped at link time (-Wl,--wrap), armed
 * only inside the core call (fx_core_hook), so the fixture's own checks
 * and the device executor allocate normally.
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);

static bool armed;
static unsigned long fail_at; /* 1-based index of the allocation to fail */
static unsigned long seen;    /* allocations while armed */
static bool injected;         /* the failure happened in this call */

static bool fail_now(void)
{
    if (!armed)
        return false;
    if (++seen == fail_at) {
        injected = true;
        return true;
    }
    return false;
}

void *__wrap_malloc(size_t n);
void *__wrap_malloc(size_t n)
{
    return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __real_realloc(p, n);
}

static bool arm_next; /* the next core call is the one under test */

static void core_hook(bool enter)
{
    if (enter && arm_next) {
        arm_next = false;
        armed = true;
        seen = 0;
        injected = false;
    } else if (!enter) {
        armed = false;
    }
}

static const int fence_dummy = 0;
static const rsp_event done_ev = {.handle = (void *)&fence_dummy, .value = 1};

/* A scenario: set-up (not armed), then the operation under test (armed),
 * then checks of a successful outcome. */
typedef struct scenario {
    const char *name;
    void (*setup)(fx *f);
    rsp_status (*op)(fx *f);
    void (*check_ok)(fx *f);
} scenario;

/* Labels: main, then draft, l2, l3, l4 (interned in every scenario). */
static rsp_label_id L[5];

static void labels(fx *f)
{
    L[0] = RSP_LABEL_MAIN;
    L[1] = fx_label(f, "draft");
    L[2] = fx_label(f, "l2");
    L[3] = fx_label(f, "l3");
    L[4] = fx_label(f, "l4");
}

/* --- admit: a request outgrows its inline holdings ----------------------- */

static void spill_setup(fx *f)
{
    labels(f);
    stepb b;
    sb_init(&b, 1);
    for (int l = 0; l < 4; l++)
        sb_row(&b, 1, L[l], 1);
    fx_run_step(f, &b.s); /* rid 1 holds 4 labels: its inline array is full */
}

static rsp_status spill_op(fx *f)
{
    stepb b;
    sb_init(&b, 2);
    sb_row(&b, 1, L[4], 1); /* the fifth label spills */
    for (int l = 0; l < 5; l++)
        sb_row(&b, 2, L[l], 1); /* a new rid with five labels at once */
    rsp_admit_outcome out;
    rsp_status st = fx_admit(f, &b.s, &out);
    if (st == RSP_OK)
        assert_true(out.ok);
    return st;
}

static void spill_check(fx *f)
{
    for (int l = 0; l < 5; l++) {
        assert_true(fx_slot(f, 1, L[l]) > 0);
        assert_true(fx_slot(f, 2, L[l]) > 0);
    }
}

/* --- admit: implicit ingest of many new rids ------------------------------ */

static void ingest_setup(fx *f)
{
    labels(f);
}

static rsp_status ingest_op(fx *f)
{
    stepb b;
    sb_init(&b, 1);
    /* Span 0: ingested, nothing allocated; 100 rids grow the record array
     * and the rid table. */
    for (rsp_rid r = 0; r < 100; r++)
        sb_row(&b, r + 1, L[0], 0);
    sb_row(&b, 200, L[0], 1);
    rsp_admit_outcome out;
    return fx_admit(f, &b.s, &out);
}

static void ingest_check(fx *f)
{
    rsp_stats s = fx_stats(f);
    assert_int_equal(s.num_requests, 101);
    assert_true(fx_slot(f, 200, L[0]) > 0);
}

/* --- plan: pre-forks copy (the work list's conflict marks grow) ----------- */

static stepb fork_step;

static void fork_setup(fx *f)
{
    labels(f);
    stepb b;
    sb_init(&b, 1);
    for (rsp_rid r = 1; r <= 3; r++)
        sb_row(&b, r, L[0], 1);
    fx_run_step(f, &b.s);
    for (rsp_rid r = 1; r <= 3; r++) /* what the forward wrote */
        rsp_test_store_fill_pattern(f->store, (uint32_t)fx_slot(f, r, L[0]), r * 77);
    sb_init(&fork_step, 2);
    for (rsp_rid r = 1; r <= 3; r++) {
        sb_row(&fork_step, r, L[0], 1);
        sb_row(&fork_step, r, L[1], 2);
    }
    sb_pre(&fork_step, L[0], L[1]);
    sb_post(&fork_step, L[1], L[0]);
}

static void fork_admit(fx *f)
{
    fork_setup(f);
    fx_admit_ok(f, &fork_step.s);
}

static rsp_status plan_op(fx *f)
{
    return fx_plan(f, &fork_step.s);
}

static void plan_check(fx *f)
{
    for (rsp_rid r = 1; r <= 3; r++)
        assert_int_equal(rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, r, L[0])),
                         rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, r, L[1])));
}

/* --- plan: a preplan, then its promotion, on a lease ---------------------- */

static void lease_step(stepb *b, uint64_t id)
{
    sb_init(b, id);
    for (rsp_rid r = 1; r <= 3; r++)
        sb_row(b, r, L[0], 1);
    sb_lease(b, 16, 2, 0);
}

static void stage_setup(fx *f)
{
    labels(f);
    stepb b;
    lease_step(&b, 1);
    fx_admit_ok(f, &b.s);
}

static rsp_status stage_op(fx *f)
{
    stepb b;
    lease_step(&b, 1);
    b.s.preplan = true;
    return fx_plan(f, &b.s);
}

static void stage_check(fx *f)
{
    assert_true(rsp__core_stage(f->core, NULL));
}

static void promote_setup(fx *f)
{
    stage_setup(f);
    assert_int_equal(stage_op(f), RSP_OK);
}

static rsp_status promote_op(fx *f)
{
    stepb b;
    lease_step(&b, 1);
    return fx_plan(f, &b.s);
}

static void promote_check(fx *f)
{
    assert_false(rsp__core_stage(f->core, NULL));
    assert_int_equal(fx_plan_label(f, L[0])->length, 16);
}

/* --- commit: post-forks ----------------------------------------------------- */

static void commit_setup(fx *f)
{
    fork_admit(f);
    assert_int_equal(fx_plan(f, &fork_step.s), RSP_OK);
    for (rsp_rid r = 1; r <= 3; r++) /* the forward wrote the drafts */
        rsp_test_store_fill_pattern(f->store, (uint32_t)fx_slot(f, r, L[1]), r * 91);
}

static rsp_status commit_op(fx *f)
{
    return fx_commit(f, &fork_step.s, &done_ev);
}

static void commit_check(fx *f)
{
    plan_check(f); /* draft -> main was copied back */
    for (rsp_rid r = 1; r <= 3; r++)
        assert_true(fx_has_state(f, r, L[0]));
}

/* --- rollback, reset, remove ------------------------------------------------ */

static void planned_setup(fx *f)
{
    fork_admit(f);
    assert_int_equal(fx_plan(f, &fork_step.s), RSP_OK);
}

static rsp_status rollback_op(fx *f)
{
    return fx_rollback(f, 2, &done_ev);
}

static void rollback_check(fx *f)
{
    for (rsp_rid r = 1; r <= 3; r++)
        assert_int_equal(fx_slot(f, r, L[1]), -1);
}

static rsp_status reset_op(fx *f)
{
    return fx_reset(f, 2, false);
}

static void reset_check(fx *f)
{
    assert_false(fx_has_state(f, 2, L[0]));
}

static rsp_status remove_op(fx *f)
{
    return fx_remove(f, 2);
}

static void remove_check(fx *f)
{
    assert_int_equal(fx_slot(f, 2, L[0]), -1);
}

static void steady_setup(fx *f)
{
    labels(f);
    stepb b;
    sb_init(&b, 1);
    for (rsp_rid r = 1; r <= 3; r++) {
        sb_row(&b, r, L[0], 1);
        sb_row(&b, r, L[1], 1);
    }
    fx_run_step(f, &b.s);
}

/* --- per-rid forks, skip at commit, release -------------------------------- */

/* fork_step with its forks in group 1 and rids 2, 3 in it (rid 1 plain). */
static stepb group_step;

static void group_setup(fx *f)
{
    fork_setup(f);
    group_step = fork_step;
    group_step.s.rows = group_step.rows;
    group_step.s.pre_forks = group_step.pre;
    group_step.s.post_forks = group_step.post;
    for (uint32_t i = 2; i < group_step.s.num_rows; i++)
        group_step.rows[i].fork_group = 1;
    group_step.pre[0].group = group_step.post[0].group = 1;
}

static rsp_status group_admit_op(fx *f)
{
    rsp_admit_outcome out;
    rsp_status st = fx_admit(f, &group_step.s, &out);
    assert_true(st != RSP_OK || out.ok);
    return st;
}

static void group_admit_check(fx *f)
{
    for (rsp_rid r = 1; r <= 3; r++)
        assert_true(fx_slot(f, r, L[1]) > 0); /* rid 1's draft is its own row's */
}

static void group_admitted(fx *f)
{
    group_setup(f);
    fx_admit_ok(f, &group_step.s);
}

static rsp_status group_plan_op(fx *f)
{
    return fx_plan(f, &group_step.s);
}

static void group_plan_check(fx *f)
{
    for (rsp_rid r = 2; r <= 3; r++)
        assert_int_equal(rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, r, L[0])),
                         rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, r, L[1])));
    assert_false(fx_has_state(f, 1, L[1])); /* rid 1 got no pre-fork */
}

static void group_planned(fx *f)
{
    group_admitted(f);
    assert_int_equal(fx_plan(f, &group_step.s), RSP_OK);
    group_step.rows[4].skip_post_forks = true; /* rid 3's draft is rejected */
}

static rsp_status group_commit_op(fx *f)
{
    return fx_commit(f, &group_step.s, &done_ev);
}

static void group_commit_check(fx *f)
{
    assert_int_equal(rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, 2, L[0])),
                     rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, 2, L[1])));
    assert_true(fx_has_state(f, 3, L[0]));
}

static rsp_status release_op(fx *f)
{
    return fx_release(f, 2, L[1]);
}

static void release_check(fx *f)
{
    assert_int_equal(fx_slot(f, 2, L[1]), -1);
    assert_true(fx_slot(f, 2, L[0]) > 0);
}

/* --- checkpoints and swaps -------------------------------------- */

/* steady_setup, the forwards' bytes, and keys 1, 2 (rids 1, 2) filling the
 * device tier (2 slots). */
static void ck_setup(fx *f)
{
    steady_setup(f);
    for (rsp_rid r = 1; r <= 3; r++)
        rsp_test_store_fill_pattern(f->store, (uint32_t)fx_slot(f, r, L[0]), r * 17);
    assert_int_equal(fx_checkpoint(f, 1, 1, L[0], RSP_TIER_DEVICE, 1), RSP_OK);
    assert_int_equal(fx_checkpoint(f, 2, 2, L[0], RSP_TIER_DEVICE, 1), RSP_OK);
}

static rsp_status take_op(fx *f)
{
    return fx_checkpoint(f, 3, 3, L[0], RSP_TIER_DEVICE, 1);
}

static void take_check(fx *f)
{
    assert_int_equal(fx_ck(f, 3).tier, RSP_TIER_DEVICE);
    assert_int_equal(fx_ck(f, 1).tier, RSP_TIER_HOST); /* demoted for room */
    assert_int_equal(rsp_test_store_checksum(f->store, (uint32_t)fx_ck(f, 3).slot),
                     rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, 3, L[0])));
}

static rsp_status drop_op(fx *f)
{
    return fx_ck_drop(f, 2);
}

static void drop_check(fx *f)
{
    assert_false(fx_ck_has(f, 2));
}

/* Step 2: rid 4 starts from key 1; rid 1's state is taken as key 5. */
static stepb ck_step;

static void ck_step_init(void)
{
    sb_init(&ck_step, 2);
    sb_row(&ck_step, 1, L[0], 1);
    sb_row(&ck_step, 4, L[0], 4);
    sb_restore(&ck_step, 4, L[0], 1);
    sb_take(&ck_step, 1, L[0], 5, RSP_TIER_HOST);
}

static rsp_status ck_admit_op(fx *f)
{
    ck_step_init();
    rsp_admit_outcome out;
    rsp_status st = fx_admit(f, &ck_step.s, &out);
    if (st == RSP_OK)
        assert_true(out.ok);
    return st;
}

static void ck_admit_check(fx *f)
{
    assert_int_equal(fx_ck(f, 1).pins, 1);
    assert_true(fx_slot(f, 4, L[0]) > 0);
}

static void ck_admitted(fx *f)
{
    ck_setup(f);
    assert_int_equal(ck_admit_op(f), RSP_OK);
}

static rsp_status ck_plan_op(fx *f)
{
    return fx_plan(f, &ck_step.s);
}

static void ck_plan_check(fx *f)
{
    assert_true(fx_has_state(f, 4, L[0]));
    assert_int_equal(rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, 4, L[0])),
                     rsp_test_store_checksum(f->store, (uint32_t)fx_ck(f, 1).slot));
}

static void ck_planned(fx *f)
{
    ck_admitted(f);
    assert_int_equal(ck_plan_op(f), RSP_OK);
}

static rsp_status ck_commit_op(fx *f)
{
    return fx_commit(f, &ck_step.s, &done_ev);
}

static void ck_commit_check(fx *f)
{
    assert_int_equal(fx_ck(f, 5).tier, RSP_TIER_HOST);
    assert_int_equal(fx_ck(f, 1).pins, 0);
    assert_int_equal(fx_ck_report(f)->num_skips, 0);
}

static rsp_status swap_out_op(fx *f)
{
    return fx_swap_out(f, 2);
}

static void swap_out_check(fx *f)
{
    assert_int_equal(fx_stats(f).swapped_slots, 2);
    assert_int_equal(fx_slot(f, 2, L[0]), -1);
}

static void swapped_setup(fx *f)
{
    steady_setup(f);
    assert_int_equal(swap_out_op(f), RSP_OK);
}

static rsp_status swap_in_op(fx *f)
{
    rsp_admit_outcome out;
    rsp_status st = fx_swap_in(f, 2, &out);
    if (st == RSP_OK)
        assert_true(out.ok);
    return st;
}

static void swap_in_check(fx *f)
{
    assert_int_equal(fx_stats(f).swapped_slots, 0);
    assert_true(fx_has_state(f, 2, L[0]) && fx_has_state(f, 2, L[1]));
}

/* --- per-token states (docs/semantics.md 9.3) ------------------------------ */

/* Step 2 after steady_setup: verify rows of rids 1 and 2 (span 3, rid 2's
 * holding is new), a plain row of rid 3, a take of rid 1's accepted state. */
static stepb spec_step;

static void spec_setup(fx *f)
{
    steady_setup(f);
    sb_init(&spec_step, 2);
    sb_row(&spec_step, 1, L[0], 3);
    spec_step.rows[0].per_token_states = 1;
    sb_row(&spec_step, 2, L[2], 3);
    spec_step.rows[1].per_token_states = 1;
    sb_row(&spec_step, 3, L[0], 1);
    sb_take(&spec_step, 1, L[0], 1, RSP_TIER_DEVICE);
}

static rsp_status spec_admit_op(fx *f)
{
    rsp_admit_outcome out;
    rsp_status st = fx_admit(f, &spec_step.s, &out);
    assert_true(st != RSP_OK || out.ok);
    return st;
}

static void spec_admit_check(fx *f)
{
    assert_int_equal(fx_stats(f).held_slots, 6 + 1 + 6); /* steady, rid 2's l2, outputs */
}

static void spec_admitted(fx *f)
{
    spec_setup(f);
    fx_admit_ok(f, &spec_step.s);
}

static rsp_status spec_plan_op(fx *f)
{
    return fx_plan(f, &spec_step.s);
}

static void spec_plan_check(fx *f)
{
    const rsp__label_plan *lp = fx_plan_label(f, L[0]);
    assert_int_equal(lp->spec_width, 4);
    assert_int_equal(lp->spec_indices[0], fx_slot(f, 1, L[0]));
}

/* The same plan under a lease: it creates the key's vector buffer and its
 * per-token tensor buffer. */
static void spec_admitted_leased(fx *f)
{
    spec_admitted(f);
    spec_step.s.has_lease = true;
    spec_step.s.lease = (rsp_lease){.bucket_bs = 4, .bucket_id = 0, .lease_slot = 0};
}

static void spec_plan_leased_check(fx *f)
{
    const rsp__label_plan *lp = fx_plan_label(f, L[0]);
    assert_int_equal(lp->spec_width, 4);
    assert_int_equal(lp->length, 4);
    assert_true(lp->spec_buffer != UINT32_MAX);
    assert_memory_equal(rsp_test_store_buffer_slots(f->store, lp->spec_buffer), lp->spec_indices,
                        (size_t)lp->length * lp->spec_width * sizeof(int32_t));
}

static void spec_planned(fx *f)
{
    spec_admitted(f);
    assert_int_equal(fx_plan(f, &spec_step.s), RSP_OK);
    const int32_t *out = fx_plan_label(f, L[0])->spec_indices;
    rsp_test_store_fill_pattern(f->store, (uint32_t)out[2], 77); /* token 2 of rid 1 */
    spec_step.rows[0].accepted = 2;
    spec_step.rows[1].accepted = 0;
}

static rsp_status spec_commit_op(fx *f)
{
    return fx_commit(f, &spec_step.s, &done_ev);
}

static void spec_commit_check(fx *f)
{
    assert_true(fx_has_state(f, 1, L[0]));
    assert_false(fx_has_state(f, 2, L[2]));
    assert_int_equal(fx_stats(f).held_slots, 7);
    assert_int_equal(rsp_test_store_checksum(f->store, (uint32_t)fx_ck(f, 1).slot),
                     rsp_test_store_checksum(f->store, (uint32_t)fx_slot(f, 1, L[0])));
}

static rsp_status spec_rollback_op(fx *f)
{
    return fx_rollback(f, 2, &done_ev);
}

static void spec_rollback_check(fx *f)
{
    assert_int_equal(fx_stats(f).held_slots, 6);
    assert_int_equal(fx_slot(f, 2, L[2]), -1);
}

static const scenario scenarios[] = {
    {"checkpoint_take_demote", ck_setup, take_op, take_check},
    {"checkpoint_drop", ck_setup, drop_op, drop_check},
    {"admit_restore", ck_setup, ck_admit_op, ck_admit_check},
    {"plan_restore", ck_admitted, ck_plan_op, ck_plan_check},
    {"commit_takes", ck_planned, ck_commit_op, ck_commit_check},
    {"swap_out", steady_setup, swap_out_op, swap_out_check},
    {"swap_in", swapped_setup, swap_in_op, swap_in_check},
    {"admit_grouped", group_setup, group_admit_op, group_admit_check},
    {"plan_grouped", group_admitted, group_plan_op, group_plan_check},
    {"commit_grouped_skip", group_planned, group_commit_op, group_commit_check},
    {"admit_per_token", spec_setup, spec_admit_op, spec_admit_check},
    {"plan_per_token", spec_admitted, spec_plan_op, spec_plan_check},
    {"plan_per_token_leased", spec_admitted_leased, spec_plan_op, spec_plan_leased_check},
    {"commit_per_token_accept", spec_planned, spec_commit_op, spec_commit_check},
    {"rollback_per_token", spec_planned, spec_rollback_op, spec_rollback_check},
    {"release", steady_setup, release_op, release_check},
    {"release_in_flight", planned_setup, release_op, release_check},
    {"admit_spill", spill_setup, spill_op, spill_check},
    {"admit_implicit_ingest", ingest_setup, ingest_op, ingest_check},
    {"plan_pre_forks", fork_admit, plan_op, plan_check},
    {"plan_preplan_lease", stage_setup, stage_op, stage_check},
    {"plan_promote", promote_setup, promote_op, promote_check},
    {"commit_post_forks", commit_setup, commit_op, commit_check},
    {"rollback", planned_setup, rollback_op, rollback_check},
    {"reset_keep", steady_setup, reset_op, reset_check},
    {"remove", steady_setup, remove_op, remove_check},
};

/* fx_init's pool (48 slots, sink) with both checkpoint tiers (2 slots
 * each, demotion on). */
static void oom_init(fx *f)
{
    fx_init_ck(f, 48, 2, 2, true);
}

/* For N = 1, 2, ...: fresh core, set-up, fail the N-th allocation of the
 * operation, check the outcome; until the operation allocates fewer than N
 * times. */
static void sweep(const scenario *sc)
{
    fx_core_hook = core_hook;
    for (unsigned long n = 1;; n++) {
        fx f;
        oom_init(&f);
        sc->setup(&f);
        snap before, after;
        snap_take(&f, &before);
        fail_at = n;
        arm_next = true;
        rsp_status st = sc->op(&f);
        arm_next = false;
        bool was_injected = injected;
        if (st == RSP_ENOMEM) {
            assert_true(was_injected);
            snap_take(&f, &after);
            snap_assert_equal(&before, &after);
            fx_check_invariants(&f);
            /* With memory back, the same operation succeeds. */
            assert_int_equal(sc->op(&f), RSP_OK);
        } else {
            if (st != RSP_OK)
                fail_msg("%s, allocation %lu failed: status %d (%s)", sc->name, n, st,
                         f.err.message);
        }
        sc->check_ok(&f);
        fx_check_invariants(&f);
        fx_fini(&f);
        if (!was_injected)
            break; /* the operation made fewer than n allocations: all covered */
    }
    fx_core_hook = NULL;
}

static void run_sweep(void **state)
{
    sweep(*state);
}

int main(void)
{
    enum { N = sizeof scenarios / sizeof scenarios[0] };
    struct CMUnitTest tests[N];
    for (int i = 0; i < N; i++)
        tests[i] = (struct CMUnitTest){.name = scenarios[i].name,
                                       .test_func = run_sweep,
                                       .initial_state = (void *)&scenarios[i]};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
