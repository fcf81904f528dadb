/*
 * Checkpoints and swaps through the public API on the host device (issue
 * 12): every message and wrapper with its failure paths (nothing changed),
 * takes ordered after the step's forward_done, restores in a step with the
 * bytes checked, eviction (LRU, callback, counters), demotion, skipped
 * takes reported, swap out and in with the bytes, and the readers' key
 * index from several threads of both flavours. Bytes are read with
 * rsp__device_read (any slot id, after everything submitted).
 * Worker threads record; the main thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "pool.h" /* pool->dev: rsp__device_read */

#define LAYERS 2
#define BLOCKS 2
static const rsp_block_config blocks[BLOCKS] = {
    {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {3}},
    {.name = "ssm", .dtype = RSP_DTYPE_U8, .ndim = 2, .shape = {5, 3}},
};
static const size_t block_bytes[BLOCKS] = {12, 15};

/* What the last eviction callbacks saw (owner thread writes, main reads
 * after a synchronous call: the answer orders them). */
#define MAX_EVENTS 16
typedef struct seen {
    uint32_t evictions;
    rsp_checkpoint_event ev[MAX_EVENTS];
    uint32_t failures;
    rsp_status fail_status;
    rsp_msg_kind fail_kind;
    uint64_t fail_step;
    uint64_t fail_key; /* the skipped take's key, UINT64_MAX when the failure names none */
    char fail_msg[RSP_ERROR_MAX];
} seen;

static void on_evict(void *ctx, const rsp_checkpoint_event *ev)
{
    seen *s = ctx;
    if (s->evictions < MAX_EVENTS)
        s->ev[s->evictions] = *ev;
    s->evictions++;
}

static void on_error(void *ctx, const rsp_failure *f)
{
    seen *s = ctx;
    s->failures++;
    s->fail_status = f->status;
    s->fail_kind = f->kind;
    s->fail_step = f->step_id;
    s->fail_key = f->has_checkpoint_key ? f->checkpoint_key : UINT64_MAX;
    snprintf(s->fail_msg, sizeof s->fail_msg, "%s", f->message);
}

static rsp_pool *make_pool(uint32_t max_slots, uint32_t dev, uint32_t host, bool demote, seen *s)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = LAYERS;
    cfg.blocks = blocks;
    cfg.num_blocks = BLOCKS;
    cfg.max_slots = max_slots;
    cfg.max_checkpoints = dev;
    cfg.max_host_checkpoints = host;
    cfg.checkpoint_demote = demote;
    if (s) {
        memset(s, 0, sizeof *s);
        cfg.on_checkpoint_evict = on_evict;
        cfg.on_checkpoint_evict_ctx = s;
        cfg.on_error = on_error;
        cfg.on_error_ctx = s;
    }
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_create: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    return pool;
}

/* The byte i of (block, layer) of a slot filled with seed (0: zeros). */
static uint8_t pattern(uint32_t seed, uint32_t b, uint32_t l, size_t i)
{
    return seed ? (uint8_t)(seed * 31u + b * 7u + l * 3u + i + 1u) : 0;
}

/* Write seed's pattern into request slot `slot` (host memory), as a forward
 * would. The caller knows no device work is writing it. */
static void fill(rsp_pool *pool, int32_t slot, uint32_t seed)
{
    for (uint32_t b = 0; b < BLOCKS; b++)
        for (uint32_t l = 0; l < LAYERS; l++) {
            rsp_block_view v;
            assert_int_equal(rsp_pool_block(pool, blocks[b].name, l, &v, NULL), RSP_OK);
            uint8_t *at = (uint8_t *)v.data + (size_t)slot * block_bytes[b];
            for (size_t i = 0; i < block_bytes[b]; i++)
                at[i] = pattern(seed, b, l, i);
        }
}

/* Whether slot id `id` (any storage) holds seed's pattern, after everything
 * the pool submitted so far. */
static bool holds(rsp_pool *pool, uint32_t id, uint32_t seed)
{
    uint8_t buf[64];
    for (uint32_t b = 0; b < BLOCKS; b++)
        for (uint32_t l = 0; l < LAYERS; l++) {
            rsp_error err;
            rsp_status st = rsp__device_read(pool->dev, b, l, id, buf, &err);
            if (st != RSP_OK) {
                print_error("rsp__device_read(%u): %s\n", id, err.message);
                return false;
            }
            for (size_t i = 0; i < block_bytes[b]; i++)
                if (buf[i] != pattern(seed, b, l, i))
                    return false;
        }
    return true;
}

static int32_t slot_of(rsp_pool *pool, rsp_rid rid, rsp_label_id label)
{
    rsp_holding h;
    rsp_error err;
    rsp_status st = rsp_holding_get(pool, rid, label, &h, &err);
    if (st != RSP_OK)
        print_error("rsp_holding_get(%llu): %s\n", (unsigned long long)rid, err.message);
    assert_int_equal(st, RSP_OK);
    return h.index;
}

static rsp_stats stats(rsp_pool *pool)
{
    rsp_stats s;
    assert_int_equal(rsp_stats_snapshot(pool, &s, NULL), RSP_OK);
    return s;
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

/* Wait for the live plan's ready: its copies (restores) have run, and the
 * caller may write its slots as a forward would. */
static void wait_live_ready(rsp_pool *pool)
{
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    rsp_read_begin();
    rsp_addressing ad;
    assert_int_equal(rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &ad, NULL), RSP_OK);
    rsp_event ready = ad.ready;
    rsp_read_end();
    assert_int_equal(rsp_event_wait(pool, &ready, RSP_WAIT_FOREVER, NULL), RSP_OK);
}

/* One row (rid, main, span 1) admitted and planned, the plan's ready
 * waited for. */
static void run_step(rsp_pool *pool, uint64_t id, rsp_rid rid, const rsp_restore *rs, uint32_t nrs,
                     const rsp_checkpoint_decl *ck, uint32_t nck, rsp_step *out_step, rsp_row *row)
{
    *row = (rsp_row){.rid = rid, .label = RSP_LABEL_MAIN, .span = 1};
    *out_step = (rsp_step){.step_id = id,
                           .rows = row,
                           .num_rows = 1,
                           .restores = rs,
                           .num_restores = nrs,
                           .checkpoints = ck,
                           .num_checkpoints = nck};
    rsp_admit_outcome a;
    OK(rsp_step_admit(pool, out_step, &a, E));
    assert_true(a.ok);
    OK(rsp_step_plan(pool, out_step, E));
    wait_live_ready(pool);
}

static void commit_now(rsp_pool *pool, const rsp_step *s)
{
    rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(pool, s, &done, E));
}

/* A request holding a slot of label filled with seed (after step id). */
static int32_t make_holding(rsp_pool *pool, uint64_t id, rsp_rid rid, uint32_t seed)
{
    rsp_step s;
    rsp_row row;
    run_step(pool, id, rid, NULL, 0, NULL, 0, &s, &row);
    int32_t slot = slot_of(pool, rid, RSP_LABEL_MAIN);
    fill(pool, slot, seed);
    commit_now(pool, &s);
    return slot;
}

static rsp_checkpoint_info query(rsp_pool *pool, uint64_t key)
{
    rsp_checkpoint_info info;
    OK(rsp_checkpoint_query(pool, key, &info, E));
    assert_int_equal(info.key, key);
    return info;
}

/* ------------------------------------------------------------------------ */
/* Take at commit, restore in a step                                         */
/* ------------------------------------------------------------------------ */

/* The take declared in step 1 copies what the forward wrote, although the
 * forward writes after the commit was posted: the copy waits for the host
 * fence. Then step 2 restores it into another request's slot. */
static void take_at_commit_holds_the_forwards_bytes_and_restores(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 4, 2, false, NULL);
    rsp_checkpoint_decl ck = {
        .rid = 1, .label = RSP_LABEL_MAIN, .tier = RSP_TIER_DEVICE, .key = 77};
    rsp_step s1, s2;
    rsp_row r1, r2;
    run_step(pool, 1, 1, NULL, 0, &ck, 1, &s1, &r1);
    int32_t src = slot_of(pool, 1, RSP_LABEL_MAIN);
    fill(pool, src, 5); /* before the commit: not what the take must hold */
    rsp_host_fence *fence;
    OK(rsp_host_fence_create(&fence, E));
    rsp_event done = rsp_event_host(fence, 1);
    OK(rsp_step_commit(pool, &s1, &done, E));
    /* The key is in the index as soon as its copy is queued. */
    rsp_checkpoint_info info = query(pool, 77);
    assert_int_equal(info.tier, RSP_TIER_DEVICE);
    assert_true(info.slot >= 8 && info.slot < 12);
    assert_int_equal(info.bytes, 2 * (12 + 15));
    assert_int_equal(info.pins, 0);
    /* The forward finishes late: it writes, then signals. */
    fill(pool, src, 9);
    rsp_host_fence_signal(fence, 1);
    assert_true(holds(pool, (uint32_t)info.slot, 9));
    rsp_stats st = stats(pool);
    assert_int_equal(st.checkpoints_taken, 1);
    assert_int_equal(st.checkpoints_device, 1);

    /* Restore into rid 2: the plan copies it before ready. */
    rsp_restore rs = {.rid = 2, .label = RSP_LABEL_MAIN, .key = 77};
    run_step(pool, 2, 2, &rs, 1, NULL, 0, &s2, &r2);
    int32_t dst = slot_of(pool, 2, RSP_LABEL_MAIN);
    assert_true(dst != src);
    assert_true(holds(pool, (uint32_t)dst, 9));
    rsp_holding h;
    OK(rsp_holding_get(pool, 2, RSP_LABEL_MAIN, &h, E));
    assert_true(h.has_state);
    assert_int_equal(query(pool, 77).pins, 1); /* pinned while step 2 is in flight */
    rsp_error err;
    assert_int_equal(rsp_checkpoint_drop(pool, 77, &err), RSP_EPINNED);
    commit_now(pool, &s2);
    assert_int_equal(query(pool, 77).pins, 0);
    st = stats(pool);
    assert_int_equal(st.checkpoints_restored, 1);
    rsp_host_fence_destroy(fence);
    rsp_pool_destroy(pool);
}

/* A rolled-back step with a restore leaves every pin count as it was; a
 * restore of a missing key refuses the admit, nothing changed. */
static void restore_failures_and_rollback_change_nothing(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 2, 0, false, NULL);
    make_holding(pool, 1, 1, 3);
    OK(rsp_checkpoint_take(pool, 10, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    rsp_stats before = stats(pool);

    rsp_row row = {.rid = 2, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_restore rs = {.rid = 2, .label = RSP_LABEL_MAIN, .key = 11};
    rsp_step s = {.step_id = 2, .rows = &row, .num_rows = 1, .restores = &rs, .num_restores = 1};
    rsp_admit_outcome a;
    rsp_error err;
    assert_int_equal(rsp_step_admit(pool, &s, &a, &err), RSP_ENOKEY);
    assert_non_null(strstr(err.message, "11"));
    rsp_stats after = stats(pool);
    assert_int_equal(after.free_slots, before.free_slots);
    assert_int_equal(after.admits_ok, before.admits_ok);

    /* A restore naming no row of the step: the core's rule. */
    rs = (rsp_restore){.rid = 3, .label = RSP_LABEL_MAIN, .key = 10};
    assert_int_equal(rsp_step_admit(pool, &s, &a, &err), RSP_EINVAL);
    /* NULL arrays with counts, an uninterned label: refused before posting. */
    s.restores = NULL;
    assert_int_equal(rsp_step_admit(pool, &s, &a, &err), RSP_EINVAL);
    rs = (rsp_restore){.rid = 2, .label = 9, .key = 10};
    s.restores = &rs;
    assert_int_equal(rsp_step_admit(pool, &s, &a, &err), RSP_ENOLABEL);
    rsp_checkpoint_decl ck = {.rid = 2, .label = RSP_LABEL_MAIN, .tier = (rsp_tier)7, .key = 1};
    rsp_step bad = {
        .step_id = 2, .rows = &row, .num_rows = 1, .checkpoints = &ck, .num_checkpoints = 1};
    assert_int_equal(rsp_step_admit(pool, &bad, &a, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "tier"));
    assert_int_equal(stats(pool).free_slots, before.free_slots);

    /* Admitted, planned (copied in), rolled back: pins as before. */
    rs = (rsp_restore){.rid = 2, .label = RSP_LABEL_MAIN, .key = 10};
    rsp_row r2;
    rsp_step s2;
    run_step(pool, 2, 2, &rs, 1, NULL, 0, &s2, &r2);
    assert_int_equal(query(pool, 10).pins, 1);
    OK(rsp_step_rollback(pool, 2, NULL, E));
    assert_int_equal(query(pool, 10).pins, 0);
    OK(rsp_checkpoint_drop(pool, 10, E)); /* unpinned again: droppable */
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* The messages one by one                                                   */
/* ------------------------------------------------------------------------ */

static void take_message_rules(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 2, 0, false, NULL);
    int32_t slot = make_holding(pool, 1, 1, 4);
    rsp_error err;
    /* Refused before posting. */
    assert_int_equal(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, (rsp_tier)2, 0, &err),
                     RSP_EINVAL);
    assert_non_null(strstr(err.message, "tier"));
    assert_int_equal(rsp_checkpoint_take(pool, 1, 1, 5, RSP_TIER_DEVICE, 0, &err), RSP_ENOLABEL);
    assert_int_equal(rsp_checkpoint_take(NULL, 1, 1, 0, RSP_TIER_DEVICE, 0, &err), RSP_EINVAL);
    /* Refused by the owner. */
    assert_int_equal(rsp_checkpoint_take(pool, 1, 9, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, &err),
                     RSP_ENOREQ);
    assert_int_equal(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_HOST, 0, &err),
                     RSP_EINVAL); /* a tier of size 0 */
    assert_int_equal(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 5, &err),
                     RSP_EORDER); /* step 5 was never admitted */
    rsp_stats st = stats(pool);
    assert_int_equal(st.checkpoints_taken, 0);
    assert_int_equal(st.checkpoints_device, 0);
    assert_int_equal(rsp_checkpoint_query(pool, 1, &(rsp_checkpoint_info){0}, &err), RSP_ENOKEY);

    /* after_step: a committed step; one in flight is refused. */
    OK(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 1, E));
    rsp_checkpoint_info a = query(pool, 1);
    assert_true(holds(pool, (uint32_t)a.slot, 4));
    rsp_step s2;
    rsp_row r2;
    run_step(pool, 2, 1, NULL, 0, NULL, 0, &s2, &r2);
    assert_int_equal(rsp_checkpoint_take(pool, 2, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 2, &err),
                     RSP_EORDER);
    assert_non_null(strstr(err.message, "2"));
    fill(pool, slot, 6);
    commit_now(pool, &s2);
    OK(rsp_checkpoint_take(pool, 2, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 2, E));
    assert_true(holds(pool, (uint32_t)query(pool, 2).slot, 6));

    /* A pinned key is not replaced; an unpinned one is (counted as a drop). */
    OK(rsp_checkpoint_pin(pool, 1, E));
    assert_int_equal(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, &err),
                     RSP_EPINNED);
    assert_true(holds(pool, (uint32_t)query(pool, 1).slot, 4));
    OK(rsp_checkpoint_unpin(pool, 1, E));
    OK(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    assert_true(holds(pool, (uint32_t)query(pool, 1).slot, 6));
    st = stats(pool);
    assert_int_equal(st.checkpoints_taken, 3);
    assert_int_equal(st.checkpoints_dropped, 1);
    assert_int_equal(st.checkpoints_evicted, 0);
    assert_int_equal(st.checkpoints_device, 2);
    /* The lock-free counters say the same (the owner mirrored them). */
    rsp_stats c;
    OK(rsp_stats_peek(pool, &c, E));
    assert_int_equal(c.checkpoints_taken, 3);
    assert_int_equal(c.checkpoints_dropped, 1);
    assert_int_equal(c.checkpoints_device, 2);
    assert_int_equal(c.checkpoints_host, 0);
    rsp_pool_destroy(pool);
}

static void drop_pin_query_rules(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 2, 0, false, NULL);
    make_holding(pool, 1, 1, 2);
    rsp_error err;
    assert_int_equal(rsp_checkpoint_drop(pool, 5, &err), RSP_ENOKEY);
    assert_non_null(strstr(err.message, "5"));
    assert_int_equal(rsp_checkpoint_pin(pool, 5, &err), RSP_ENOKEY);
    assert_int_equal(rsp_checkpoint_unpin(pool, 5, &err), RSP_ENOKEY);
    assert_int_equal(rsp_checkpoint_query(pool, 5, NULL, &err), RSP_EINVAL);
    assert_int_equal(rsp_checkpoint_drop(NULL, 5, &err), RSP_EINVAL);

    OK(rsp_checkpoint_take(pool, 5, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    rsp_checkpoint_info i0 = query(pool, 5);
    assert_int_equal(rsp_checkpoint_unpin(pool, 5, &err), RSP_EINVAL); /* not pinned */
    OK(rsp_checkpoint_pin(pool, 5, E));
    OK(rsp_checkpoint_pin(pool, 5, E));
    rsp_checkpoint_info i1 = query(pool, 5);
    assert_int_equal(i1.user_pins, 2);
    assert_true(i1.last_use > i0.last_use); /* a pin is a use */
    assert_int_equal(rsp_checkpoint_drop(pool, 5, &err), RSP_EPINNED);
    OK(rsp_checkpoint_unpin(pool, 5, E));
    assert_int_equal(rsp_checkpoint_drop(pool, 5, &err), RSP_EPINNED);
    OK(rsp_checkpoint_unpin(pool, 5, E));
    OK(rsp_checkpoint_drop(pool, 5, E));
    assert_int_equal(rsp_checkpoint_query(pool, 5, &i1, &err), RSP_ENOKEY);
    rsp_stats st = stats(pool);
    assert_int_equal(st.checkpoints_dropped, 1);
    assert_int_equal(st.checkpoints_device, 0);
    assert_int_equal(st.checkpoints_evicted, 0);
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* Eviction, demotion, skipped takes                                         */
/* ------------------------------------------------------------------------ */

static void eviction_takes_the_lru_unpinned_and_reports_it(void **state)
{
    (void)state;
    seen s;
    rsp_pool *pool = make_pool(8, 2, 0, false, &s);
    make_holding(pool, 1, 1, 2);
    OK(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    OK(rsp_checkpoint_take(pool, 2, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    assert_int_equal(s.evictions, 0);
    OK(rsp_checkpoint_take(pool, 3, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.ev[0].key, 1); /* least recently used */
    assert_int_equal(s.ev[0].tier, RSP_TIER_DEVICE);
    assert_false(s.ev[0].demoted);
    rsp_error err;
    assert_int_equal(rsp_checkpoint_query(pool, 1, &(rsp_checkpoint_info){0}, &err), RSP_ENOKEY);
    /* A pin is a use and protects: 2 is pinned, 3 goes. */
    OK(rsp_checkpoint_pin(pool, 2, E));
    OK(rsp_checkpoint_take(pool, 4, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    assert_int_equal(s.evictions, 2);
    assert_int_equal(s.ev[1].key, 3);
    /* Every checkpoint pinned: no room, nothing changed. */
    OK(rsp_checkpoint_pin(pool, 4, E));
    rsp_stats before = stats(pool);
    assert_int_equal(rsp_checkpoint_take(pool, 5, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, &err),
                     RSP_ECAPACITY);
    rsp_stats after = stats(pool);
    assert_int_equal(s.evictions, 2);
    assert_int_equal(after.checkpoints_taken, before.checkpoints_taken);
    assert_int_equal(after.checkpoints_evicted, 2);
    assert_int_equal(after.checkpoints_device, 2);
    query(pool, 2);
    query(pool, 4);
    rsp_pool_destroy(pool);
}

static void demotion_moves_the_victim_to_the_host_tier_with_its_bytes(void **state)
{
    (void)state;
    seen s;
    rsp_pool *pool = make_pool(8, 1, 1, true, &s);
    int32_t slot = make_holding(pool, 1, 1, 7);
    OK(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    rsp_step s2;
    rsp_row r2;
    run_step(pool, 2, 1, NULL, 0, NULL, 0, &s2, &r2);
    fill(pool, slot, 8);
    commit_now(pool, &s2);
    OK(rsp_checkpoint_take(pool, 2, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    assert_int_equal(s.evictions, 1);
    assert_int_equal(s.ev[0].key, 1);
    assert_int_equal(s.ev[0].tier, RSP_TIER_DEVICE);
    assert_true(s.ev[0].demoted);
    rsp_checkpoint_info k1 = query(pool, 1), k2 = query(pool, 2);
    assert_int_equal(k1.tier, RSP_TIER_HOST);
    assert_int_equal(k1.slot, 8 + 1); /* the host tier follows the device tier */
    assert_int_equal(k2.tier, RSP_TIER_DEVICE);
    assert_true(holds(pool, (uint32_t)k1.slot, 7));
    assert_true(holds(pool, (uint32_t)k2.slot, 8));
    /* The readers' index follows the move. */
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    rsp_read_begin();
    rsp_checkpoint_loc loc;
    assert_int_equal(rsp_checkpoint_lookup(pool, 1, &loc, NULL), RSP_OK);
    assert_int_equal(loc.tier, RSP_TIER_HOST);
    assert_int_equal(loc.slot, k1.slot);
    rsp_read_end();
    rsp_stats st = stats(pool);
    assert_int_equal(st.checkpoints_demoted, 1);
    assert_int_equal(st.checkpoints_evicted, 0);
    assert_int_equal(st.checkpoints_host, 1);
    assert_int_equal(st.checkpoints_device, 1);
    /* A third take demotes 2 and evicts 1 from the host tier. */
    OK(rsp_checkpoint_take(pool, 3, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    assert_int_equal(s.evictions, 3);
    st = stats(pool);
    assert_int_equal(st.checkpoints_demoted, 2);
    assert_int_equal(st.checkpoints_evicted, 1);
    rsp_error err;
    assert_int_equal(rsp_checkpoint_query(pool, 1, &k1, &err), RSP_ENOKEY);
    assert_true(holds(pool, (uint32_t)query(pool, 2).slot, 8));

    /* A restore from the host tier (an H2D copy on the CUDA device). */
    rsp_restore rs = {.rid = 5, .label = RSP_LABEL_MAIN, .key = 2};
    rsp_step s3;
    rsp_row r3;
    run_step(pool, 3, 5, &rs, 1, NULL, 0, &s3, &r3);
    assert_true(holds(pool, (uint32_t)slot_of(pool, 5, RSP_LABEL_MAIN), 8));
    commit_now(pool, &s3);
    rsp_pool_destroy(pool);
}

/* A take declared in a step that finds no room is skipped: the commit
 * stands, the skip is counted and reported to on_error. */
static void a_take_at_commit_without_room_is_skipped_and_reported(void **state)
{
    (void)state;
    seen s;
    rsp_pool *pool = make_pool(8, 1, 0, false, &s);
    make_holding(pool, 1, 1, 2);
    OK(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    OK(rsp_checkpoint_pin(pool, 1, E));
    rsp_checkpoint_decl ck = {.rid = 1, .label = RSP_LABEL_MAIN, .tier = RSP_TIER_DEVICE, .key = 2};
    rsp_step s2;
    rsp_row r2;
    run_step(pool, 2, 1, NULL, 0, &ck, 1, &s2, &r2);
    commit_now(pool, &s2);
    assert_int_equal(s.failures, 1);
    assert_int_equal(s.fail_status, RSP_ECAPACITY);
    assert_int_equal(s.fail_kind, RSP_MSG_COMMIT);
    assert_int_equal(s.fail_step, 2);
    assert_int_equal(s.fail_key, 2);
    assert_non_null(strstr(s.fail_msg, "key 2"));
    rsp_stats st = stats(pool);
    assert_int_equal(st.checkpoints_skipped, 1);
    assert_int_equal(st.posts_failed, 0); /* not a failed message */
    assert_int_equal(st.commits, 2);
    assert_int_equal(st.checkpoints_taken, 1);
    rsp_error err;
    assert_int_equal(rsp_checkpoint_query(pool, 2, &(rsp_checkpoint_info){0}, &err), RSP_ENOKEY);
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* Swap out and in                                                           */
/* ------------------------------------------------------------------------ */

static void swap_out_and_in_keep_every_labels_bytes(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4, 0, 3, false, NULL); /* sink + 3 usable */
    rsp_label_id draft;
    OK(rsp_label(pool, "draft", &draft, E));
    rsp_row rows[2] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1},
                       {.rid = 1, .label = draft, .span = 1}};
    rsp_step s1 = {.step_id = 1, .rows = rows, .num_rows = 2};
    rsp_admit_outcome a;
    OK(rsp_step_admit(pool, &s1, &a, E));
    OK(rsp_step_plan(pool, &s1, E));
    rsp_error err;
    /* Pinned by the step in flight. */
    assert_int_equal(rsp_swap_out(pool, 1, &err), RSP_EORDER);
    int32_t m0 = slot_of(pool, 1, RSP_LABEL_MAIN), d0 = slot_of(pool, 1, draft);
    wait_live_ready(pool);
    fill(pool, m0, 3);
    fill(pool, d0, 4);
    commit_now(pool, &s1);
    rsp_holding hm0, hd0;
    OK(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &hm0, E));
    OK(rsp_holding_get(pool, 1, draft, &hd0, E));
    assert_int_equal(rsp_swap_out(pool, 9, &err), RSP_ENOREQ);
    assert_int_equal(rsp_swap_in(pool, 1, &a, &err), RSP_EORDER); /* not swapped out */
    assert_int_equal(rsp_swap_in(pool, 1, NULL, &err), RSP_EINVAL);

    OK(rsp_swap_out(pool, 1, E));
    assert_int_equal(rsp_swap_out(pool, 1, &err), RSP_EORDER); /* already */
    rsp_stats st = stats(pool);
    assert_int_equal(st.swaps_out, 1);
    assert_int_equal(st.swapped_slots, 2);
    assert_int_equal(st.free_slots, 3);
    assert_true(holds(pool, (uint32_t)m0, 0)); /* released: zeroed */
    assert_true(holds(pool, (uint32_t)d0, 0));
    assert_int_equal(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &hm0, &err), RSP_ENOREQ);
    /* A step naming a swapped rid is refused. */
    rsp_step s2 = {.step_id = 2, .rows = rows, .num_rows = 1};
    assert_int_equal(rsp_step_admit(pool, &s2, &a, &err), RSP_EORDER);

    /* Pool full: ok false, nothing changed. */
    make_holding(pool, 3, 7, 1);
    make_holding(pool, 4, 8, 1);
    OK(rsp_swap_in(pool, 1, &a, E));
    assert_false(a.ok);
    assert_int_equal(a.slots_short, 1);
    st = stats(pool);
    assert_int_equal(st.swapped_slots, 2);
    assert_int_equal(st.swaps_in, 0);
    OK(rsp_remove(pool, 8, E));

    OK(rsp_swap_in(pool, 1, &a, E));
    assert_true(a.ok);
    rsp_holding hm, hd;
    OK(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &hm, E));
    OK(rsp_holding_get(pool, 1, draft, &hd, E));
    assert_true(hm.has_state && hd.has_state);
    assert_true(hm.generation > hm0.generation);
    assert_true(holds(pool, (uint32_t)hm.index, 3));
    assert_true(holds(pool, (uint32_t)hd.index, 4));
    st = stats(pool);
    assert_int_equal(st.swaps_in, 1);
    assert_int_equal(st.swapped_slots, 0);
    rsp_pool_destroy(pool);
}

/* A pool without a host tier refuses every swap out with RSP_ECAPACITY,
 * a request without holdings included (it needs no host slot, and was once
 * marked swapped out there, every later step naming it refused), and
 * changes nothing. With a host tier such a request is swapped out like any
 * other: no host slot, its steps refused until swap_in, which gives it
 * back nothing (rsp.h, rsp_swap_out). */
static void swap_out_needs_a_host_tier_and_takes_an_empty_request(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4, 2, 0, false, NULL); /* device tier only */
    OK(rsp_ingest(pool, 1, E));                       /* holds nothing */
    int32_t slot2 = make_holding(pool, 1, 2, 5);
    rsp_error err;
    memset(&err, 0, sizeof err);
    assert_int_equal(rsp_swap_out(pool, 1, &err), RSP_ECAPACITY);
    assert_int_equal(err.status, RSP_ECAPACITY);
    assert_non_null(strstr(err.message, "no host tier"));
    assert_non_null(strstr(err.message, "max_host_checkpoints"));
    memset(&err, 0, sizeof err);
    assert_int_equal(rsp_swap_out(pool, 2, &err), RSP_ECAPACITY);
    assert_non_null(strstr(err.message, "no host tier"));
    assert_int_equal(rsp_swap_out(pool, 9, &err), RSP_ECAPACITY); /* whatever the rid */
    rsp_stats st = stats(pool);
    assert_int_equal(st.swaps_out, 0);
    assert_int_equal(st.swapped_slots, 0);
    /* Nothing changed: rid 2 keeps its slot and bytes, rid 1 is not
     * swapped out (swap_in says so) and its steps admit. */
    assert_int_equal(slot_of(pool, 2, RSP_LABEL_MAIN), slot2);
    assert_true(holds(pool, (uint32_t)slot2, 5));
    rsp_admit_outcome a;
    assert_int_equal(rsp_swap_in(pool, 1, &a, &err), RSP_EORDER);
    make_holding(pool, 2, 1, 6);
    rsp_pool_destroy(pool);

    pool = make_pool(4, 0, 2, false, NULL); /* a host tier */
    OK(rsp_ingest(pool, 5, E));
    OK(rsp_swap_out(pool, 5, E));
    st = stats(pool);
    assert_int_equal(st.swaps_out, 1);
    assert_int_equal(st.swapped_slots, 0);
    assert_int_equal(st.free_slots, 3);
    assert_int_equal(rsp_swap_out(pool, 5, &err), RSP_EORDER); /* already */
    rsp_row row = {.rid = 5, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s1 = {.step_id = 1, .rows = &row, .num_rows = 1};
    memset(&err, 0, sizeof err);
    assert_int_equal(rsp_step_admit(pool, &s1, &a, &err), RSP_EORDER);
    assert_non_null(strstr(err.message, "swapped out"));
    OK(rsp_swap_in(pool, 5, &a, E));
    assert_true(a.ok);
    st = stats(pool);
    assert_int_equal(st.swaps_in, 1);
    assert_int_equal(st.swapped_slots, 0);
    assert_int_equal(st.free_slots, 3);
    assert_int_equal(rsp_holding_get(pool, 5, RSP_LABEL_MAIN, &(rsp_holding){0}, &err),
                     RSP_ENOREQ); /* nothing given back */
    make_holding(pool, 2, 5, 7);  /* its steps admit again */
    rsp_pool_destroy(pool);
}

/* Ordered pools: the new kinds carry their number, but the query is
 * exempt like HOLDING. */
static void ordered_pools_number_checkpoint_messages_but_not_the_query(void **state)
{
    (void)state;
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = LAYERS;
    cfg.blocks = blocks;
    cfg.num_blocks = BLOCKS;
    cfg.max_slots = 8;
    cfg.max_checkpoints = 2;
    cfg.ordered = true;
    rsp_pool *pool;
    OK(rsp_pool_create(&cfg, &pool, E));
    rsp_error err;
    rsp_ticket *t;
    rsp_reply r;
    rsp_msg take = {.kind = RSP_MSG_CHECKPOINT, .key = 3, .rid = 1};
    assert_int_equal(rsp_post(pool, &take, &t, RSP_WAIT_FOREVER, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "CHECKPOINT_QUERY"));
    assert_int_equal(rsp_checkpoint_take(pool, 3, 1, 0, RSP_TIER_DEVICE, 0, &err), RSP_EINVAL);
    rsp_msg q = {.kind = RSP_MSG_CHECKPOINT_QUERY, .key = 3};
    OK(rsp_post(pool, &q, &t, RSP_WAIT_FOREVER, E));
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, &r), RSP_ENOKEY);
    rsp_msg ingest = {.kind = RSP_MSG_INGEST, .rid = 1, .seq = 1};
    OK(rsp_post(pool, &ingest, NULL, RSP_WAIT_FOREVER, E));
    take.seq = 2; /* numbered: handled, in turn (rid 1 holds nothing) */
    OK(rsp_post(pool, &take, &t, RSP_WAIT_FOREVER, E));
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, &r), RSP_ENOREQ);
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* Readers                                                                   */
/* ------------------------------------------------------------------------ */

static void lookup_refusals(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, 2, 0, false, NULL);
    rsp_pool *plain = make_pool(8, 0, 0, false, NULL);
    make_holding(pool, 1, 1, 2);
    OK(rsp_checkpoint_take(pool, 1, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    rsp_reader_unregister();
    rsp_error err;
    rsp_checkpoint_loc loc = {.key = 99};
    assert_int_equal(rsp_checkpoint_lookup(pool, 1, &loc, &err), RSP_ENOTREG);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    assert_int_equal(rsp_checkpoint_lookup(pool, 1, &loc, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "read section"));
    assert_int_equal(loc.key, 99); /* untouched */
    rsp_read_begin();
    assert_int_equal(rsp_checkpoint_lookup(NULL, 1, &loc, &err), RSP_EINVAL);
    assert_int_equal(rsp_checkpoint_lookup(pool, 2, &loc, &err), RSP_ENOKEY);
    assert_non_null(strstr(err.message, "2"));
    assert_int_equal(rsp_checkpoint_lookup(pool, 2, NULL, NULL), RSP_ENOKEY);
    assert_int_equal(rsp_checkpoint_lookup(plain, 1, &loc, NULL), RSP_ENOKEY); /* no tiers */
    assert_int_equal(rsp_checkpoint_lookup(pool, 1, NULL, NULL), RSP_OK);
    assert_int_equal(loc.key, 99);
    assert_int_equal(rsp_checkpoint_lookup(pool, 1, &loc, &err), RSP_OK);
    rsp_read_end();
    assert_int_equal(loc.key, 1);
    assert_int_equal(loc.tier, RSP_TIER_DEVICE);
    assert_int_equal(loc.slot, query(pool, 1).slot);
    rsp_pool_destroy(plain);
    rsp_pool_destroy(pool);
}

#define KEYS 48
#define READERS 4

typedef struct lookup_reader {
    rsp_pool *pool;
    bool qsbr;
    uint32_t *stop; /* main stores 1 (atomic) */
    /* Atomic, thread -> main: 1 once registered (or refused: reg says),
     * then the passes over the keys made so far. */
    uint32_t started, passes;
    /* Recorded by the thread, asserted by main. */
    rsp_status reg;
    uint64_t lookups, found, bad; /* bad: a found key whose answer is not a checkpoint slot */
    rsp_checkpoint_loc final[KEYS];
    rsp_status final_st[KEYS];
} lookup_reader;

static void *lookup_main(void *arg)
{
    lookup_reader *r = arg;
    r->reg = r->qsbr ? rsp_reader_register_qsbr(NULL) : rsp_reader_register(NULL);
    __atomic_store_n(&r->started, 1, __ATOMIC_RELEASE); /* reg is written */
    if (r->reg != RSP_OK)
        return NULL;
    while (!__atomic_load_n(r->stop, __ATOMIC_ACQUIRE)) {
        rsp_read_begin();
        for (uint64_t k = 1; k <= KEYS; k++) {
            rsp_checkpoint_loc loc;
            rsp_status st = rsp_checkpoint_lookup(r->pool, k, &loc, NULL);
            r->lookups++;
            if (st == RSP_OK) {
                r->found++;
                if (loc.key != k || loc.slot < 8 || loc.slot >= 8 + KEYS / 2 ||
                    loc.tier != RSP_TIER_DEVICE)
                    r->bad++;
            } else if (st != RSP_ENOKEY) {
                r->bad++;
            }
        }
        rsp_read_end();
        rsp_reader_quiescent(); /* QSBR: nodes read before may go */
        __atomic_fetch_add(&r->passes, 1, __ATOMIC_RELEASE);
    }
    rsp_read_begin();
    for (uint64_t k = 1; k <= KEYS; k++)
        r->final_st[k - 1] = rsp_checkpoint_lookup(r->pool, k, &r->final[k - 1], NULL);
    rsp_read_end();
    rsp_reader_unregister();
    return NULL;
}

/* Readers of both flavours look keys up while the owner takes, evicts and
 * drops them (nodes unlinked and freed after grace periods); at the end
 * every reader sees exactly the stored keys where query says they are. */
static void readers_of_both_flavours_look_up_under_churn(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8, KEYS / 2, 0, false, NULL);
    make_holding(pool, 1, 1, 2);
    uint32_t stop = 0;
    lookup_reader rd[READERS];
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++) {
        rd[i] = (lookup_reader){.pool = pool, .qsbr = i % 2 == 1, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, lookup_main, &rd[i]), 0);
    }
    /* Every reader is looking keys up before the churn starts (on a loaded
     * machine a thread may otherwise not run before the churn is over). */
    for (int i = 0; i < READERS; i++) {
        while (!__atomic_load_n(&rd[i].started, __ATOMIC_ACQUIRE))
            sched_yield();
        while (rd[i].reg == RSP_OK && __atomic_load_n(&rd[i].passes, __ATOMIC_ACQUIRE) == 0)
            sched_yield();
    }
    /* Churn: KEYS keys through a tier of KEYS / 2 (evictions), drops. */
    for (int round = 0; round < 20; round++) {
        for (uint64_t k = 1; k <= KEYS; k++)
            OK(rsp_checkpoint_take(pool, k, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
        for (uint64_t k = KEYS - 3; k <= KEYS; k += 2)
            OK(rsp_checkpoint_drop(pool, k, E));
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < READERS; i++)
        pthread_join(th[i], NULL);
    rsp_stats st = stats(pool);
    assert_int_equal(st.checkpoints_taken, 20 * KEYS);
    assert_int_equal(st.checkpoints_dropped, 20 * 2);
    for (int i = 0; i < READERS; i++) {
        assert_int_equal(rd[i].reg, RSP_OK);
        assert_true(rd[i].lookups > 0);
        assert_int_equal(rd[i].bad, 0);
        for (uint64_t k = 1; k <= KEYS; k++) {
            rsp_checkpoint_info info;
            rsp_status qs = rsp_checkpoint_query(pool, k, &info, NULL);
            assert_int_equal(rd[i].final_st[k - 1], qs);
            if (qs == RSP_OK)
                assert_int_equal(rd[i].final[k - 1].slot, info.slot);
        }
    }
    assert_int_equal(st.checkpoints_device, KEYS / 2 - 2);
    rsp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(take_at_commit_holds_the_forwards_bytes_and_restores),
        cmocka_unit_test(restore_failures_and_rollback_change_nothing),
        cmocka_unit_test(take_message_rules),
        cmocka_unit_test(drop_pin_query_rules),
        cmocka_unit_test(eviction_takes_the_lru_unpinned_and_reports_it),
        cmocka_unit_test(demotion_moves_the_victim_to_the_host_tier_with_its_bytes),
        cmocka_unit_test(a_take_at_commit_without_room_is_skipped_and_reported),
        cmocka_unit_test(swap_out_and_in_keep_every_labels_bytes),
        cmocka_unit_test(swap_out_needs_a_host_tier_and_takes_an_empty_request),
        cmocka_unit_test(ordered_pools_number_checkpoint_messages_but_not_the_query),
        cmocka_unit_test(lookup_refusals),
        cmocka_unit_test(readers_of_both_flavours_look_up_under_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
