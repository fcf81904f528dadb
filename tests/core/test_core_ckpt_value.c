/* The value policy's heaps (src/core/ckpt_value.h) under a random trace of
 * takes, values, pins, unpins, drops and restores in steps, with demotion:
 * after every call each tier's heap holds exactly its used, unpinned
 * records, each at the place its hpos says, in (score, seq) order, each
 * score seq + weight x f x value / slot_bytes, f = 1 + floor(log2
 * restores); and the restores' count at work: a checkpoint restored again
 * outlives a dearer one never restored, one restored once does not.
 * SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "core/ckpt.h"
#include "helpers.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {
    .kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = 3};

static bool heap_before(const rsp__core *c, uint32_t a, uint32_t b)
{
    const rsp__ckrec *x = &c->ck[a], *y = &c->ck[b];
    return x->score < y->score || (x->score == y->score && x->seq < y->seq);
}

static void check_heaps(const rsp__core *c, double weight_byte)
{
    const rsp__layout *lay = rsp__core_layout(c);
    uint32_t n = lay->max_checkpoints + lay->max_host_checkpoints, in[RSP_TIER_COUNT_] = {0};
    for (uint32_t i = 0; i < n; i++) {
        const rsp__ckrec *k = &c->ck[i];
        bool want = k->used && !rsp__ck_pinned(k);
        if (!want) {
            assert_int_equal(k->hpos, RSP__NONE);
            continue;
        }
        const rsp__tier *t = &c->tiers[k->tier];
        in[k->tier]++;
        assert_true(k->hpos < t->heap_n);
        assert_int_equal(t->heap[k->hpos], i);
        double f = 1.0;
        for (uint32_t r = k->restores; r > 1; r /= 2)
            f += 1.0;
        assert_true(k->score == (double)k->seq + weight_byte * f * (double)k->value);
        if (k->hpos > 0)
            assert_false(heap_before(c, i, t->heap[(k->hpos - 1) / 2]));
    }
    for (int t = 0; t < RSP_TIER_COUNT_; t++)
        assert_int_equal(in[t], c->tiers[t].heap_n);
}

/* Step `step`: rid 1 written (span 1), restoring `from` (0: none), taking
 * `take` (0: none) at its commit. */
static rsp_status run_step(fx *f, uint64_t step, uint64_t from, uint64_t take)
{
    stepb b;
    sb_init(&b, step);
    sb_row(&b, 1, 0, 1);
    rsp_restore r = {.rid = 1, .label = 0, .key = from};
    rsp_checkpoint_decl d = {.rid = 1, .label = 0, .tier = RSP_TIER_DEVICE, .key = take};
    if (from) {
        b.s.restores = &r;
        b.s.num_restores = 1;
    }
    if (take) {
        b.s.checkpoints = &d;
        b.s.num_checkpoints = 1;
    }
    rsp_admit_outcome out;
    rsp_status st = fx_admit(f, &b.s, &out);
    if (st != RSP_OK)
        return st;
    assert_true(out.ok);
    assert_int_equal(fx_plan(f, &b.s), RSP_OK);
    return fx_commit(f, &b.s, &done_ev);
}

static void heaps_follow_every_operation(void **state)
{
    (void)state;
    fx shape, f; /* shape's config (its blocks live in shape), with the policy */
    fx_init_ck(&shape, 8, 5, 3, true);
    rsp_pool_config cfg = shape.cfg;
    fx_fini(&shape);
    cfg.checkpoint_policy = RSP_CHECKPOINT_VALUE;
    cfg.checkpoint_value_weight = 3.0;
    fx_init_cfg(&f, &cfg);
    double wb = 3.0 / (double)rsp__core_layout(f.core)->slot_bytes;
    assert_int_equal(run_step(&f, 1, 0, 0), RSP_OK);
    uint64_t x = 88172645463325252ull, step = 2;
    uint32_t pins[16] = {0}, restores = 0, full = 0;
    for (int i = 0; i < 4000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t key = 1 + x % 16;
        switch ((x >> 16) % 6) {
        case 0: (void)fx_checkpoint(&f, key, 1, 0, RSP_TIER_DEVICE, 0); break;
        case 1: (void)rsp__core_checkpoint_value(f.core, key, (x >> 24) % 5000, &f.err); break;
        case 2:
            if (fx_ck_pin(&f, key, true) == RSP_OK)
                pins[key - 1]++;
            break;
        case 3:
            if (pins[key - 1] && fx_ck_pin(&f, key, false) == RSP_OK)
                pins[key - 1]--;
            break;
        case 4: (void)fx_ck_drop(&f, key); break;
        default: {
            bool stored = rsp__ck_find(f.core, key) != RSP__NONE;
            restores +=
                run_step(&f, step++, stored ? key : 0, 1 + (x >> 32) % 16) == RSP_OK && stored;
        }
        }
        check_heaps(f.core, wb);
        full += f.core->tiers[RSP_TIER_HOST].count == f.core->tiers[RSP_TIER_HOST].size;
    }
    /* The trace restored and filled both tiers (so it evicted and demoted),
     * and some checkpoint lived through several restores (f > 1 scored). */
    uint32_t most = 0, n = rsp__core_layout(f.core)->max_checkpoints +
                           rsp__core_layout(f.core)->max_host_checkpoints;
    for (uint32_t i = 0; i < n; i++)
        most = f.core->ck[i].used && f.core->ck[i].restores > most ? f.core->ck[i].restores : most;
    assert_true(restores > 100 && full > 100 && most >= 2);
    fx_fini(&f);
}

/* A device tier of 2, no host tier, weight = slot_bytes (so a unit of value
 * is worth one push). Key 1 (value 10) restored `restores` times, then key
 * 2 (value 15, taken after those restores, never restored), then key 3:
 * the tier is full, and the victim is 1 or 2. */
static uint64_t victim_after_restores(uint32_t restores)
{
    fx shape, f;
    fx_init_ck(&shape, 4, 2, 0, false);
    rsp_pool_config cfg = shape.cfg;
    cfg.checkpoint_policy = RSP_CHECKPOINT_VALUE;
    cfg.checkpoint_value_weight = (double)rsp__core_layout(shape.core)->slot_bytes;
    fx_fini(&shape);
    fx_init_cfg(&f, &cfg);
    uint64_t step = 1;
    assert_int_equal(run_step(&f, step++, 0, 1), RSP_OK);
    assert_int_equal(rsp__core_checkpoint_value(f.core, 1, 10, &f.err), RSP_OK);
    for (uint32_t i = 0; i < restores; i++)
        assert_int_equal(run_step(&f, step++, 1, 0), RSP_OK);
    assert_int_equal(run_step(&f, step++, 0, 2), RSP_OK);
    assert_int_equal(rsp__core_checkpoint_value(f.core, 2, 15, &f.err), RSP_OK);
    assert_int_equal(run_step(&f, step++, 0, 3), RSP_OK);
    bool kept1 = rsp__ck_find(f.core, 1) != RSP__NONE, kept2 = rsp__ck_find(f.core, 2) != RSP__NONE;
    assert_true(kept1 != kept2 && rsp__ck_find(f.core, 3) != RSP__NONE);
    fx_fini(&f);
    return kept1 ? 2 : 1;
}

/* Restored twice (f = 2): key 1 scores its push + 20 against key 2's
 * later push + 15, so the dearer checkpoint never restored goes. Without
 * the count key 1 would score + 10 and go. */
static void a_restored_again_checkpoint_outlives_a_dearer_one(void **state)
{
    (void)state;
    assert_int_equal(victim_after_restores(2), 2);
    assert_int_equal(victim_after_restores(3), 2); /* floor(log2 3) = 1: f = 2 still */
}

/* Restored once (f = 1): the first restore continues the request that
 * took it and only refreshes its recency, so key 1 (+ 10) goes before key
 * 2 (+ 15) as without the count. */
static void the_first_restore_counts_only_as_a_use(void **state)
{
    (void)state;
    assert_int_equal(victim_after_restores(1), 1);
    assert_int_equal(victim_after_restores(0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heaps_follow_every_operation),
        cmocka_unit_test(a_restored_again_checkpoint_outlives_a_dearer_one),
        cmocka_unit_test(the_first_restore_counts_only_as_a_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
