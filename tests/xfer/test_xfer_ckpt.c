/*
 * Checkpoint export and import through the public API on the host device
 * (docs/semantics.md 9.4): a checkpoint exported from pool A and imported
 * into pool B restores in B into a request with every byte equal; the
 * import is invisible until its commit, reserved zeroed, given back
 * zeroed by an abort; a key collision is handled as a take handles it
 * (pinned: refused; unpinned: replaced at the commit); a full tier evicts
 * for room; a layout that differs is refused; an ordered pool numbers the
 * import; and under allocation failure (the N-th allocation of the call
 * fails, for every N) begin, commit and abort change nothing or
 * everything. The "transport" is memcpy between the two pools' regions.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "../fault/inject.h"

static rsp_error last_err;
#define E (&last_err)
#define OK(call)                                                                                   \
    do {                                                                                           \
        rsp_status st_ = (call);                                                                   \
        if (st_ != RSP_OK)                                                                         \
            print_error("%s: %s\n", #call, last_err.message);                                      \
        assert_int_equal(st_, RSP_OK);                                                             \
    } while (0)

#define LAYERS 2
#define KEY 99u
static const rsp_block_config blocks[2] = {
    {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 2, .shape = {3, 8}},
    {.name = "ssm", .dtype = RSP_DTYPE_U8, .ndim = 1, .shape = {6}},
};

/* Evictions reported by the pool (the owner thread records; the main
 * thread reads after the call returned, which orders them). */
static uint64_t evicted_keys[8];
static uint32_t num_evicted;

static void on_evict(void *ctx, const rsp_checkpoint_event *ev)
{
    (void)ctx;
    if (num_evicted < 8)
        evicted_keys[num_evicted] = ev->key;
    num_evicted++;
}

static rsp_pool *make_pool_cfg(uint32_t dev_ckpts, uint32_t host_ckpts, bool ordered,
                               const rsp_block_config *b)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = LAYERS;
    cfg.blocks = b ? b : blocks;
    cfg.num_blocks = 2;
    cfg.max_slots = 8;
    cfg.max_checkpoints = dev_ckpts;
    cfg.max_host_checkpoints = host_ckpts;
    cfg.ordered = ordered;
    cfg.on_checkpoint_evict = on_evict;
    rsp_pool *pool = NULL;
    OK(rsp_pool_create(&cfg, &pool, E));
    return pool;
}

static rsp_pool *make_pool(uint32_t dev_ckpts, uint32_t host_ckpts)
{
    return make_pool_cfg(dev_ckpts, host_ckpts, false, NULL);
}

/* One step of row (rid, main), restoring key when restore is set. */
static void run_step(rsp_pool *pool, uint64_t id, rsp_rid rid, bool restore, uint64_t key)
{
    rsp_row row = {.rid = rid, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_restore r = {.rid = rid, .label = RSP_LABEL_MAIN, .key = key};
    rsp_step s = {.step_id = id, .rows = &row, .num_rows = 1};
    if (restore) {
        s.restores = &r;
        s.num_restores = 1;
    }
    rsp_admit_outcome a;
    OK(rsp_step_admit(pool, &s, &a, E));
    assert_true(a.ok);
    OK(rsp_step_plan(pool, &s, E));
    rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(pool, &s, &done, E));
}

static int32_t slot_of(rsp_pool *pool, rsp_rid rid)
{
    rsp_holding h;
    OK(rsp_holding_get(pool, rid, RSP_LABEL_MAIN, &h, E));
    return h.index;
}

/* Fill (or check: returns the wrong bytes) request slot `slot` with the
 * pattern of seed, every block and layer. */
static size_t pattern(rsp_pool *pool, int32_t slot, uint32_t seed, bool fill)
{
    size_t wrong = 0;
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t l = 0; l < LAYERS; l++) {
            rsp_block_view v;
            OK(rsp_pool_block(pool, blocks[b].name, l, &v, E));
            size_t n = b == 0 ? 3 * 8 * 4 : 6;
            uint8_t *at = (uint8_t *)v.data + (size_t)slot * n;
            for (size_t i = 0; i < n; i++) {
                uint8_t want = (uint8_t)(seed * 31u + b * 7u + l * 3u + i + 1u);
                if (fill)
                    at[i] = want;
                else
                    wrong += at[i] != want;
            }
        }
    return wrong;
}

/* Pool A's checkpoint KEY (device tier) of request 5 painted with seed. */
static rsp_pool *exporter(uint32_t seed)
{
    rsp_pool *a = make_pool(2, 0);
    run_step(a, 1, 5, false, 0);
    pattern(a, slot_of(a, 5), seed, true);
    OK(rsp_checkpoint_take(a, KEY, 5, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    return a;
}

static rsp_export *export_ckpt(rsp_pool *pool, uint64_t key)
{
    rsp_export_spec s;
    rsp_export_spec_init(&s);
    s.what = RSP_XFER_CHECKPOINT;
    s.key = key;
    rsp_export *e = NULL;
    OK(rsp_export_open(pool, &s, &e, E));
    return e;
}

/* Copy the export's extents into the import's; returns the import's
 * extents' bytes that were not zero before the copy. */
static size_t carry(rsp_pool *src, const rsp_export *exp, rsp_pool *dst, const rsp_import *imp,
                    bool copy)
{
    rsp_region sr[8], dr[8];
    uint32_t ns, nd, n, m;
    OK(rsp_pool_regions(src, sr, 8, &ns, E));
    OK(rsp_pool_regions(dst, dr, 8, &nd, E));
    const rsp_extent *from = rsp_export_extents(exp, &n);
    rsp_extent to[16];
    OK(rsp_import_extents(imp, 1, 0, to, 16, &m, E));
    assert_int_equal(m, n);
    assert_int_equal(n, 2 * LAYERS); /* whole slots: one extent a block and layer */
    size_t nonzero = 0;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(from[i].length, to[i].length);
        assert_int_equal(dr[to[i].region].space, RSP_REGION_DEVICE_TIER);
        assert_true(to[i].offset + to[i].length <= dr[to[i].region].length);
        uint8_t *d = (uint8_t *)dr[to[i].region].base + to[i].offset;
        for (uint64_t k = 0; k < to[i].length; k++)
            nonzero += d[k] != 0;
        if (copy)
            memcpy(d, (char *)sr[from[i].region].base + from[i].offset, from[i].length);
    }
    return nonzero;
}

static rsp_stats stats(rsp_pool *pool)
{
    rsp_stats s;
    OK(rsp_stats_snapshot(pool, &s, E));
    return s;
}

static void checkpoint_moves_between_pools_byte_for_byte(void **state)
{
    (void)state;
    rsp_pool *a = exporter(3), *b = make_pool(2, 0);
    rsp_export *e = export_ckpt(a, KEY);
    const rsp_xfer_header *h = rsp_export_header(e);
    assert_int_equal(h->what, RSP_XFER_CHECKPOINT);
    assert_int_equal(h->key, KEY);
    rsp_import *imp = NULL;
    OK(rsp_import_begin(b, h, 0, 0, &imp, E));
    /* Begun: under no key, in no count. */
    rsp_checkpoint_info info;
    assert_int_equal(rsp_checkpoint_query(b, KEY, &info, E), RSP_ENOKEY);
    assert_int_equal(stats(b).checkpoints_device, 0);
    assert_int_equal(carry(a, e, b, imp, true), 0); /* reserved zeroed */
    OK(rsp_import_commit(imp, 0, E));
    OK(rsp_export_close(e, E));
    OK(rsp_checkpoint_query(b, KEY, &info, E));
    assert_int_equal(info.tier, RSP_TIER_DEVICE);
    assert_int_equal(stats(b).checkpoints_device, 1);
    /* Its reader sees it too. */
    OK(rsp_reader_register(E));
    OK(rsp_read_begin());
    rsp_checkpoint_loc loc;
    assert_int_equal(rsp_checkpoint_lookup(b, KEY, &loc, E), RSP_OK);
    rsp_read_end();
    rsp_reader_unregister();
    /* Restored into a request of B: every byte is A's. */
    run_step(b, 1, 50, true, KEY);
    rsp_holding hb;
    OK(rsp_holding_get(b, 50, RSP_LABEL_MAIN, &hb, E));
    assert_true(hb.has_state);
    assert_int_equal(pattern(b, hb.index, 3, false), 0);
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

static void checkpoint_import_aborts_zeroed_and_freed(void **state)
{
    (void)state;
    rsp_pool *a = exporter(4), *b = make_pool(2, 0);
    /* A checkpoint dropped from B leaves its bytes in a free slot. */
    run_step(b, 1, 7, false, 0);
    pattern(b, slot_of(b, 7), 9, true);
    OK(rsp_checkpoint_take(b, 7, 7, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    OK(rsp_checkpoint_drop(b, 7, E));
    rsp_stats before = stats(b);
    rsp_export *e = export_ckpt(a, KEY);
    rsp_import *imp = NULL;
    OK(rsp_import_begin(b, rsp_export_header(e), 0, 0, &imp, E));
    assert_int_equal(carry(a, e, b, imp, true), 0); /* that slot, zeroed */
    OK(rsp_import_abort(imp, 0, E));
    OK(rsp_barrier(b, E));
    rsp_stats after = stats(b);
    assert_int_equal(after.checkpoints_device, before.checkpoints_device);
    rsp_checkpoint_info info;
    assert_int_equal(rsp_checkpoint_query(b, KEY, &info, E), RSP_ENOKEY);
    /* Given back zeroed: the next import of the same slot reads zeros,
     * and the tier has both its slots (two imports at once). */
    rsp_import *i1 = NULL, *i2 = NULL;
    OK(rsp_import_begin(b, rsp_export_header(e), 0, 0, &i1, E));
    assert_int_equal(carry(a, e, b, i1, false), 0);
    OK(rsp_import_begin(b, rsp_export_header(e), 0, 0, &i2, E));
    OK(rsp_import_abort(i2, 0, E));
    OK(rsp_import_abort(i1, 0, E));
    assert_int_equal(rsp_import_abort(NULL, 0, E), RSP_OK);
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

static void checkpoint_import_key_collision_as_a_take(void **state)
{
    (void)state;
    num_evicted = 0;
    rsp_pool *a = exporter(5), *b = make_pool(4, 0);
    run_step(b, 1, 7, false, 0);
    pattern(b, slot_of(b, 7), 11, true);
    OK(rsp_checkpoint_take(b, KEY, 7, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    rsp_checkpoint_info old, now;
    OK(rsp_checkpoint_query(b, KEY, &old, E));
    rsp_export *e = export_ckpt(a, KEY);
    rsp_import *imp = (rsp_import *)1;
    /* Stored and pinned: refused at begin, nothing changed. */
    OK(rsp_checkpoint_pin(b, KEY, E));
    rsp_stats before = stats(b);
    assert_int_equal(rsp_import_begin(b, rsp_export_header(e), 0, 0, &imp, E), RSP_EPINNED);
    assert_null(imp);
    assert_non_null(strstr(last_err.message, "pinned"));
    OK(rsp_checkpoint_unpin(b, KEY, E));
    /* Unpinned: begun; the old checkpoint stays until the commit. */
    OK(rsp_import_begin(b, rsp_export_header(e), 0, 0, &imp, E));
    carry(a, e, b, imp, true);
    OK(rsp_checkpoint_query(b, KEY, &now, E));
    assert_int_equal(now.slot, old.slot);
    /* Pinned again before the commit: the commit is refused, the import
     * stays open and commits once the pin is gone. */
    OK(rsp_checkpoint_pin(b, KEY, E));
    assert_int_equal(rsp_import_commit(imp, 0, E), RSP_EPINNED);
    OK(rsp_checkpoint_query(b, KEY, &now, E));
    assert_int_equal(now.slot, old.slot);
    OK(rsp_checkpoint_unpin(b, KEY, E));
    OK(rsp_import_commit(imp, 0, E));
    OK(rsp_checkpoint_query(b, KEY, &now, E));
    assert_int_not_equal(now.slot, old.slot);
    rsp_stats after = stats(b);
    assert_int_equal(after.checkpoints_dropped, before.checkpoints_dropped + 1);
    assert_int_equal(after.checkpoints_device, before.checkpoints_device);
    assert_int_equal(num_evicted, 0); /* a replacement is not an eviction */
    run_step(b, 2, 50, true, KEY);
    assert_int_equal(pattern(b, slot_of(b, 50), 5, false), 0);
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

static void checkpoint_import_evicts_for_room(void **state)
{
    (void)state;
    num_evicted = 0;
    rsp_pool *a = exporter(6), *b = make_pool(1, 0);
    run_step(b, 1, 7, false, 0);
    OK(rsp_checkpoint_take(b, 7, 7, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
    rsp_export *e = export_ckpt(a, KEY);
    rsp_import *imp = NULL;
    /* Every checkpoint of the tier pinned: no room, nothing changed. */
    OK(rsp_checkpoint_pin(b, 7, E));
    assert_int_equal(rsp_import_begin(b, rsp_export_header(e), 0, 0, &imp, E), RSP_ECAPACITY);
    assert_non_null(strstr(last_err.message, "device tier is full"));
    assert_int_equal(num_evicted, 0);
    OK(rsp_checkpoint_unpin(b, 7, E));
    /* Unpinned: the begin evicts it, reported and counted. */
    OK(rsp_import_begin(b, rsp_export_header(e), 0, 0, &imp, E));
    assert_int_equal(num_evicted, 1);
    assert_int_equal(evicted_keys[0], 7);
    rsp_checkpoint_info info;
    assert_int_equal(rsp_checkpoint_query(b, 7, &info, E), RSP_ENOKEY);
    assert_int_equal(stats(b).checkpoints_evicted, 1);
    /* The reserved slot is no checkpoint: a take finds the tier full of
     * nothing it may evict. */
    assert_int_equal(rsp_checkpoint_take(b, 8, 7, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E),
                     RSP_ECAPACITY);
    carry(a, e, b, imp, true);
    OK(rsp_import_commit(imp, 0, E));
    /* A pool without checkpoint slots refuses, naming why. */
    rsp_pool *none = make_pool(0, 0);
    assert_int_equal(rsp_import_begin(none, rsp_export_header(e), 0, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "no checkpoint slots"));
    /* Without a device tier, the host tier. */
    rsp_pool *host = make_pool(0, 1);
    OK(rsp_import_begin(host, rsp_export_header(e), 0, 0, &imp, E));
    OK(rsp_import_commit(imp, 0, E));
    OK(rsp_checkpoint_query(host, KEY, &info, E));
    assert_int_equal(info.tier, RSP_TIER_HOST);
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
    OK(rsp_pool_close(none, E));
    OK(rsp_pool_close(host, E));
}

static void checkpoint_import_refuses_another_layout(void **state)
{
    (void)state;
    rsp_block_config other[2];
    memcpy(other, blocks, sizeof other);
    other[1].shape[0] = 7;
    rsp_pool *a = exporter(7), *b = make_pool_cfg(2, 0, false, other);
    rsp_export *e = export_ckpt(a, KEY);
    rsp_import *imp = NULL;
    assert_int_equal(rsp_import_begin(b, rsp_export_header(e), 0, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "blocks[1]"));
    assert_non_null(strstr(last_err.message, "shape[0] 7 here, 6 in the export"));
    rsp_xfer_header h = *rsp_export_header(e);
    h.num_layers = 3; /* damaged: the fingerprint no longer matches */
    assert_int_equal(rsp_import_begin(a, &h, 0, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "fingerprint"));
    h = *rsp_export_header(e);
    h.num_holdings = 2;
    assert_int_equal(rsp_import_begin(a, &h, 0, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "one holding"));
    assert_int_equal(stats(b).checkpoints_device, 0);
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

static void ordered_pool_numbers_the_checkpoint_import(void **state)
{
    (void)state;
    rsp_pool *a = exporter(8), *b = make_pool_cfg(2, 0, true, NULL);
    rsp_export *e = export_ckpt(a, KEY);
    rsp_import *imp = NULL;
    assert_int_equal(rsp_import_begin(b, rsp_export_header(e), 0, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "seq"));
    OK(rsp_import_begin(b, rsp_export_header(e), 0, 1, &imp, E));
    carry(a, e, b, imp, true);
    OK(rsp_import_commit(imp, 2, E));
    rsp_checkpoint_info info;
    OK(rsp_checkpoint_query(b, KEY, &info, E));
    OK(rsp_import_begin(b, rsp_export_header(e), 0, 3, &imp, E));
    OK(rsp_import_abort(imp, 4, E));
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

/* --- allocation failure ---------------------------------------------------- */

/* What the sweep compares: the counts and where KEY and key 7 are. */
typedef struct view {
    rsp_stats s;
    rsp_status key_st, k7_st;
    rsp_checkpoint_info key, k7;
} view;

static view look(rsp_pool *b)
{
    view v;
    memset(&v, 0, sizeof v);
    v.s = stats(b);
    v.key_st = rsp_checkpoint_query(b, KEY, &v.key, NULL);
    v.k7_st = rsp_checkpoint_query(b, 7, &v.k7, NULL);
    return v;
}

static void assert_same(const view *x, const view *y)
{
    assert_int_equal(x->s.checkpoints_device, y->s.checkpoints_device);
    assert_int_equal(x->s.checkpoints_evicted, y->s.checkpoints_evicted);
    assert_int_equal(x->s.checkpoints_dropped, y->s.checkpoints_dropped);
    assert_int_equal(x->s.free_slots, y->s.free_slots);
    assert_int_equal(x->key_st, y->key_st);
    assert_int_equal(x->k7_st, y->k7_st);
    if (x->key_st == RSP_OK)
        assert_int_equal(x->key.slot, y->key.slot);
    if (x->k7_st == RSP_OK)
        assert_int_equal(x->k7.slot, y->k7.slot);
}

typedef enum phase { BEGIN, COMMIT, ABORT } phase;

/* B, warm: a full device tier of one slot holding key 7 (a begin evicts
 * it) and KEY's old checkpoint on the host tier (a commit replaces it);
 * cold: no checkpoint ever taken (the first growth of everything the
 * import reserves). The import begun unless the phase is BEGIN. */
static bool warm;

static rsp_pool *sweep_pool(const rsp_xfer_header *h, phase ph, rsp_import **imp)
{
    rsp_pool *b = make_pool(1, 1);
    run_step(b, 1, 7, false, 0);
    if (warm) {
        OK(rsp_checkpoint_take(b, 7, 7, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E));
        OK(rsp_checkpoint_take(b, KEY, 7, RSP_LABEL_MAIN, RSP_TIER_HOST, 0, E));
    }
    *imp = NULL;
    if (ph != BEGIN)
        OK(rsp_import_begin(b, h, 0, 0, imp, E));
    return b;
}

static rsp_status sweep_call(rsp_pool *b, const rsp_xfer_header *h, phase ph, rsp_import **imp,
                             rsp_error *err)
{
    switch (ph) {
    case BEGIN: return rsp_import_begin(b, h, 0, 0, imp, err);
    case COMMIT: return rsp_import_commit(*imp, 0, err);
    case ABORT: return rsp_import_abort(*imp, 0, err);
    }
    return RSP_EINVAL;
}

/* Each N: the N-th allocation of the call fails. RSP_ENOMEM changes
 * nothing (and the call then succeeds); RSP_OK did everything. Cold, then
 * warm. */
static void sweep_one(phase ph);

static void sweep(phase ph)
{
    for (int w = 0; w < 2; w++) {
        warm = w;
        sweep_one(ph);
    }
}

static void sweep_one(phase ph)
{
    static const char *const names[] = {"begin", "commit", "abort"};
    rsp_pool *a = exporter(12);
    rsp_export *e = export_ckpt(a, KEY);
    rsp_xfer_header h = *rsp_export_header(e);
    view done;
    {
        rsp_import *imp;
        rsp_pool *b = sweep_pool(&h, ph, &imp);
        OK(sweep_call(b, &h, ph, &imp, E));
        done = look(b);
        if (ph == BEGIN)
            OK(rsp_import_abort(imp, 0, E));
        OK(rsp_pool_close(b, E));
    }
    for (uint64_t n = 1;; n++) {
        rsp_import *imp;
        rsp_pool *b = sweep_pool(&h, ph, &imp);
        view before = look(b);
        rsp_error err = {0};
        fault_arm(n);
        rsp_status st = sweep_call(b, &h, ph, &imp, &err);
        uint64_t points = fault_disarm();
        if (st == RSP_ENOMEM) {
            assert_true(points >= n);
            view now = look(b);
            assert_same(&now, &before);
            if (ph == BEGIN)
                assert_null(imp);
            OK(sweep_call(b, &h, ph, &imp, E));
        } else {
            if (st != RSP_OK)
                print_error("%s N=%llu: %s\n", names[ph], (unsigned long long)n, err.message);
            assert_int_equal(st, RSP_OK);
        }
        view now = look(b);
        assert_same(&now, &done);
        if (ph == BEGIN)
            OK(rsp_import_abort(imp, 0, E));
        OK(rsp_pool_close(b, E));
        if (points < n) {
            printf("[%s, %s] swept N=1..%llu\n", names[ph], warm ? "warm" : "cold",
                   (unsigned long long)n);
            break;
        }
    }
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
}

static void import_begin_is_all_or_nothing_under_allocation_failure(void **state)
{
    (void)state;
    assert_true(fault_interposer_active());
    sweep(BEGIN);
}

static void import_commit_is_all_or_nothing_under_allocation_failure(void **state)
{
    (void)state;
    sweep(COMMIT);
}

static void import_abort_is_all_or_nothing_under_allocation_failure(void **state)
{
    (void)state;
    sweep(ABORT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(checkpoint_moves_between_pools_byte_for_byte),
        cmocka_unit_test(checkpoint_import_aborts_zeroed_and_freed),
        cmocka_unit_test(checkpoint_import_key_collision_as_a_take),
        cmocka_unit_test(checkpoint_import_evicts_for_room),
        cmocka_unit_test(checkpoint_import_refuses_another_layout),
        cmocka_unit_test(ordered_pool_numbers_the_checkpoint_import),
        cmocka_unit_test(import_begin_is_all_or_nothing_under_allocation_failure),
        cmocka_unit_test(import_commit_is_all_or_nothing_under_allocation_failure),
        cmocka_unit_test(import_abort_is_all_or_nothing_under_allocation_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
