/*
 * Checkpoints ranked by value (docs/semantics.md 9.5) through the public
 * API on the host device: weight 0 evicts exactly as LRU on a random
 * trace, the value policy's order, pins, demotion then eviction by score,
 * recency against value under a finite weight, the counters, and the
 * refusals. Only the main thread calls the pool; the eviction callback
 * runs on the owner and is read after a synchronous answer.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

static const rsp_block_config blocks[1] = {
    {.name = "ssm", .dtype = RSP_DTYPE_U8, .ndim = 1, .shape = {64}},
};
#define SLOT_BYTES 128u /* 64 bytes x 2 layers */

#define MAX_EVENTS 4096
typedef struct seen {
    uint32_t n;
    rsp_checkpoint_event ev[MAX_EVENTS];
} seen;

static void on_evict(void *ctx, const rsp_checkpoint_event *ev)
{
    seen *s = ctx;
    if (s->n < MAX_EVENTS)
        s->ev[s->n] = *ev;
    s->n++;
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        rsp_error e_;                                                                              \
        rsp_status st_ = (call);                                                                   \
        if (st_ != RSP_OK)                                                                         \
            print_error("%s: %s\n", #call, e_.message);                                            \
        assert_int_equal(st_, RSP_OK);                                                             \
    } while (0)
#define E (&e_)

static rsp_pool *make_pool(uint32_t dev, uint32_t host, bool demote, rsp_checkpoint_policy policy,
                           double weight, seen *s)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 2;
    cfg.blocks = blocks;
    cfg.num_blocks = 1;
    cfg.max_slots = 8;
    cfg.max_checkpoints = dev;
    cfg.max_host_checkpoints = host;
    cfg.checkpoint_demote = demote;
    cfg.checkpoint_policy = policy;
    cfg.checkpoint_value_weight = weight;
    memset(s, 0, sizeof *s);
    cfg.on_checkpoint_evict = on_evict;
    cfg.on_checkpoint_evict_ctx = s;
    rsp_pool *pool = NULL;
    OK(rsp_pool_create(&cfg, &pool, E));
    return pool;
}

/* rid 1 holds a slot (a committed step of one row). */
static void hold(rsp_pool *pool)
{
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome a;
    OK(rsp_step_admit(pool, &s, &a, E));
    assert_true(a.ok);
    OK(rsp_step_plan(pool, &s, E));
    rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(pool, &s, &done, E));
}

static void take(rsp_pool *pool, uint64_t key, uint64_t value)
{
    OK(rsp_checkpoint_take(pool, key, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    OK(rsp_checkpoint_value(pool, key, value, E));
}

static bool stored(rsp_pool *pool, uint64_t key)
{
    rsp_checkpoint_info info;
    return rsp_checkpoint_query(pool, key, &info, NULL) == RSP_OK;
}

static rsp_stats stats(rsp_pool *pool)
{
    rsp_stats s;
    OK(rsp_stats_snapshot(pool, &s, E));
    return s;
}

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* One random operation on pool: take (with a value), value, pin, unpin or
 * drop of a key among 24, into tiers of 6 + 4 with demotion. Each pool of
 * a pair sees the same operation and answers the same. */
static rsp_status random_op(rsp_pool *pool, uint64_t r, uint64_t *pins)
{
    uint64_t key = r % 24, v = (r >> 8) % 1000;
    rsp_status st;
    switch ((r >> 20) % 8) {
    case 0:
    case 1:
    case 2:
        st = rsp_checkpoint_take(pool, key, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, NULL);
        return st == RSP_OK ? rsp_checkpoint_value(pool, key, v, NULL) : st;
    case 3: return rsp_checkpoint_value(pool, key, v, NULL);
    case 4:
        st = rsp_checkpoint_pin(pool, key, NULL);
        pins[key] += st == RSP_OK;
        return st;
    case 5:
    case 6:
        st = rsp_checkpoint_unpin(pool, key, NULL);
        pins[key] -= st == RSP_OK;
        return st;
    default: return rsp_checkpoint_drop(pool, key, NULL);
    }
}

/* With weight 0 the value policy makes the same evictions and demotions,
 * in the same order, as LRU, whatever the values: every answer and every
 * event of a random trace of takes, values, pins, unpins and drops. */
static void weight_zero_is_lru(void **state)
{
    (void)state;
    static seen sl, sv;
    rsp_pool *lru = make_pool(6, 4, true, RSP_CHECKPOINT_LRU, 0, &sl);
    rsp_pool *val = make_pool(6, 4, true, RSP_CHECKPOINT_VALUE, 0, &sv);
    hold(lru);
    hold(val);
    uint64_t x = 0x9e3779b97f4a7c15ull, pl[24] = {0}, pv[24] = {0};
    for (int i = 0; i < 3000; i++) {
        uint64_t r = rnd(&x);
        rsp_status a = random_op(lru, r, pl), b = random_op(val, r, pv);
        assert_int_equal(a, b);
    }
    assert_true(sl.n > 500); /* the trace evicts */
    assert_int_equal(sl.n, sv.n);
    for (uint32_t i = 0; i < sl.n && i < MAX_EVENTS; i++) {
        assert_true(sl.ev[i].key == sv.ev[i].key);
        assert_int_equal(sl.ev[i].tier, sv.ev[i].tier);
        assert_int_equal(sl.ev[i].demoted, sv.ev[i].demoted);
    }
    rsp_stats a = stats(lru), b = stats(val);
    assert_true(a.checkpoints_evicted == b.checkpoints_evicted);
    assert_true(a.checkpoints_demoted == b.checkpoints_demoted);
    OK(rsp_pool_close(lru, E));
    OK(rsp_pool_close(val, E));
}

/* Under a large weight the lowest value goes first, whatever its recency. */
static void value_orders_evictions(void **state)
{
    (void)state;
    static seen s;
    rsp_pool *pool = make_pool(4, 0, false, RSP_CHECKPOINT_VALUE, 1e9, &s);
    hold(pool);
    take(pool, 1, 40);
    take(pool, 2, 10);
    take(pool, 3, 30);
    take(pool, 4, 20);
    take(pool, 5, 50); /* evicts 2 (10) */
    assert_int_equal(s.n, 1);
    assert_true(s.ev[0].key == 2 && !s.ev[0].demoted);
    take(pool, 6, 25); /* evicts 4 (20) */
    assert_true(s.ev[1].key == 4);
    take(pool, 7, 5); /* evicts 6 (25), not the newcomer's value 0 yet... */
    assert_true(s.ev[2].key == 6);
    take(pool, 8, 100); /* ... but 7 now has 5: it goes */
    assert_true(s.ev[3].key == 7);
    /* A value set later re-ranks: 1 (40) drops to 1, below 3 (30). */
    OK(rsp_checkpoint_value(pool, 1, 1, E));
    take(pool, 9, 100);
    assert_true(s.ev[4].key == 1);
    assert_true(stored(pool, 3) && stored(pool, 5) && stored(pool, 8) && stored(pool, 9));
    rsp_stats st = stats(pool);
    assert_true(st.checkpoints_evicted == 5 && st.checkpoints_evicted_device == 5);
    assert_true(st.checkpoints_evicted_host == 0);
    OK(rsp_pool_close(pool, E));
}

/* A pinned checkpoint is never the victim, whatever its score; an unpin
 * puts it back in the running; every one pinned: RSP_ECAPACITY. */
static void pins_are_never_evicted(void **state)
{
    (void)state;
    static seen s;
    rsp_pool *pool = make_pool(3, 0, false, RSP_CHECKPOINT_VALUE, 1e9, &s);
    hold(pool);
    take(pool, 1, 1);
    take(pool, 2, 2);
    take(pool, 3, 3);
    OK(rsp_checkpoint_pin(pool, 1, E));
    take(pool, 4, 9); /* 1 is pinned: 2 goes */
    assert_true(s.n == 1 && s.ev[0].key == 2);
    OK(rsp_checkpoint_pin(pool, 3, E));
    OK(rsp_checkpoint_pin(pool, 4, E));
    rsp_error err;
    assert_int_equal(rsp_checkpoint_take(pool, 5, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, &err),
                     RSP_ECAPACITY);
    assert_int_equal(s.n, 1);
    OK(rsp_checkpoint_unpin(pool, 1, E));
    take(pool, 5, 9); /* 1 is back, and lowest */
    assert_true(s.n == 2 && s.ev[1].key == 1);
    OK(rsp_pool_close(pool, E));
}

/* With demotion the device victim is the lowest score and moves to the
 * host tier with its value; the host tier evicts its lowest score. */
static void demotion_then_eviction_by_score(void **state)
{
    (void)state;
    static seen s;
    rsp_pool *pool = make_pool(2, 2, true, RSP_CHECKPOINT_VALUE, 1e9, &s);
    hold(pool);
    take(pool, 1, 50);
    take(pool, 2, 10);
    take(pool, 3, 70); /* 2 demoted */
    take(pool, 4, 60); /* 1 demoted (50 < 70) */
    assert_int_equal(s.n, 2);
    assert_true(s.ev[0].key == 2 && s.ev[0].demoted && s.ev[0].tier == RSP_TIER_DEVICE);
    assert_true(s.ev[1].key == 1 && s.ev[1].demoted);
    take(pool, 5, 80); /* 4 (60) demoted; the host tier evicts 2 (10), not 1 (50) */
    assert_int_equal(s.n, 4);
    assert_true(s.ev[2].key == 2 && !s.ev[2].demoted && s.ev[2].tier == RSP_TIER_HOST);
    assert_true(s.ev[3].key == 4 && s.ev[3].demoted);
    rsp_checkpoint_info info;
    OK(rsp_checkpoint_query(pool, 1, &info, E));
    assert_int_equal(info.tier, RSP_TIER_HOST);
    rsp_stats st = stats(pool);
    assert_true(st.checkpoints_demoted == 3 && st.checkpoints_evicted_host == 1);
    assert_true(st.checkpoints_evicted_device == 0);
    OK(rsp_pool_close(pool, E));
}

/* Under a finite weight recency still counts: a valuable checkpoint not
 * used for long enough goes before a newer one of less value. Weight
 * SLOT_BYTES / 10: a value of 10 is worth one use. */
static void recency_ages_a_valuable_checkpoint(void **state)
{
    (void)state;
    static seen s;
    rsp_pool *pool = make_pool(2, 0, false, RSP_CHECKPOINT_VALUE, SLOT_BYTES / 10.0, &s);
    hold(pool);
    take(pool, 1, 35); /* score: its push (1) + 3.5 */
    take(pool, 2, 0);
    take(pool, 3, 0); /* 2 goes: 1 is older but worth 3 uses */
    assert_true(s.n == 1 && s.ev[0].key == 2);
    take(pool, 4, 0); /* 3 goes (newer than 1 by 1 push, worth 0) */
    assert_true(s.ev[1].key == 3);
    take(pool, 5, 0); /* 4 goes (4 < 4.5) */
    assert_true(s.ev[2].key == 4);
    take(pool, 6, 0); /* 5's push is 5 > 4.5: 1 goes at last */
    assert_int_equal(s.n, 4);
    assert_true(s.ev[3].key == 1);
    OK(rsp_pool_close(pool, E));
}

/* Hits per tier, bytes and value restored, misses (an admit naming a key
 * not stored). */
static void restores_are_counted(void **state)
{
    (void)state;
    static seen s;
    rsp_pool *pool = make_pool(2, 2, false, RSP_CHECKPOINT_VALUE, 1.0, &s);
    hold(pool);
    take(pool, 1, 300);
    OK(rsp_checkpoint_take(pool, 2, 1, RSP_LABEL_MAIN, RSP_TIER_HOST, 0, E));
    OK(rsp_checkpoint_value(pool, 2, 45, E));
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_restore r = {.rid = 1, .label = RSP_LABEL_MAIN, .key = 1};
    uint64_t id = 2;
    for (uint64_t key = 1; key <= 2; key++) {
        r.key = key;
        rsp_step st = {
            .step_id = id++, .rows = &row, .num_rows = 1, .restores = &r, .num_restores = 1};
        rsp_admit_outcome a;
        OK(rsp_step_admit(pool, &st, &a, E));
        OK(rsp_step_plan(pool, &st, E));
        rsp_event done = rsp_event_complete();
        OK(rsp_step_commit(pool, &st, &done, E));
    }
    r.key = 99;
    rsp_step miss = {.step_id = id, .rows = &row, .num_rows = 1, .restores = &r, .num_restores = 1};
    rsp_admit_outcome a;
    rsp_error err;
    assert_int_equal(rsp_step_admit(pool, &miss, &a, &err), RSP_ENOKEY);
    rsp_stats st = stats(pool);
    assert_true(st.checkpoint_hits_device == 1 && st.checkpoint_hits_host == 1);
    assert_true(st.checkpoints_restored == 2);
    assert_true(st.checkpoint_bytes_restored == 2 * SLOT_BYTES);
    assert_true(st.checkpoint_value_restored == 345);
    assert_true(st.checkpoint_misses == 1);
    /* The lock-free read has them too; a 0.1-sized struct gets 0.1's. */
    rsp_stats peek;
    OK(rsp_stats_peek(pool, &peek, E));
    assert_true(peek.checkpoint_value_restored == 345);
    rsp_stats_0_1 old;
    OK(rsp_stats_peek_size(pool, (rsp_stats *)&old, sizeof old, E));
    assert_true(old.checkpoints_restored == 2);
    assert_int_equal(rsp_stats_peek_size(pool, &peek, 8, &err), RSP_EINVAL);
    OK(rsp_pool_close(pool, E));
}

/* Refusals, nothing created or changed: a policy that is not one, a
 * weight negative or not finite, a value for a key not stored. */
static void bad_config_and_keys_are_refused(void **state)
{
    (void)state;
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    assert_int_equal(cfg.checkpoint_policy, RSP_CHECKPOINT_LRU);
    cfg.num_layers = 1;
    cfg.blocks = blocks;
    cfg.num_blocks = 1;
    cfg.max_slots = 4;
    cfg.max_checkpoints = 2;
    rsp_pool *pool = NULL;
    rsp_error err;
    cfg.checkpoint_policy = 7;
    assert_int_equal(rsp_pool_create(&cfg, &pool, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "checkpoint_policy"));
    cfg.checkpoint_policy = RSP_CHECKPOINT_VALUE;
    const double bad[] = {-1.0, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        cfg.checkpoint_value_weight = bad[i];
        assert_int_equal(rsp_pool_create(&cfg, &pool, &err), RSP_EINVAL);
        assert_non_null(strstr(err.message, "checkpoint_value_weight"));
    }
    assert_null(pool);
    cfg.checkpoint_value_weight = 2.5;
    OK(rsp_pool_create(&cfg, &pool, E));
    assert_int_equal(rsp_checkpoint_value(pool, 5, 1, &err), RSP_ENOKEY);
    OK(rsp_pool_close(pool, E));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(weight_zero_is_lru),
        cmocka_unit_test(value_orders_evictions),
        cmocka_unit_test(pins_are_never_evicted),
        cmocka_unit_test(demotion_then_eviction_by_score),
        cmocka_unit_test(recency_ages_a_valuable_checkpoint),
        cmocka_unit_test(restores_are_counted),
        cmocka_unit_test(bad_config_and_keys_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
