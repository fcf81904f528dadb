/*
 * Export and import through the public API on the host device
 * (docs/semantics.md 9.4): an export pins its holdings until it closes, an
 * import is invisible until its commit and leaves nothing after an abort
 * or a refusal, a layout that differs is refused naming the difference,
 * an export waits for the step in flight, an ordered pool numbers the
 * import, a checkpoint exports like a request, and tensor-parallel shares
 * move between TP sizes with every byte equal to the reference. The
 * "transport" is memcpy between the two pools' regions.
 * Worker threads record; the main thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

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
/* conv: split on its last axis (runs of 2 of 8); h: split on its first
 * (one run); ssm: replicated. */
static const rsp_block_config blocks[3] = {
    {.name = "conv",
     .dtype = RSP_DTYPE_F32,
     .ndim = 2,
     .shape = {3, 8},
     .num_shard_dims = 1,
     .shard_dims = {1}},
    {.name = "h",
     .dtype = RSP_DTYPE_U8,
     .ndim = 2,
     .shape = {4, 5},
     .num_shard_dims = 1,
     .shard_dims = {0}},
    {.name = "ssm", .dtype = RSP_DTYPE_U8, .ndim = 1, .shape = {6}},
};

static rsp_pool *make_pool_tp(uint32_t slots, uint32_t world, uint32_t rank, bool ordered,
                              uint32_t host_ckpts, const rsp_block_config *b)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = LAYERS;
    cfg.blocks = b ? b : blocks;
    cfg.num_blocks = 3;
    cfg.max_slots = slots;
    cfg.world_size = world;
    cfg.rank = rank;
    cfg.ordered = ordered;
    cfg.max_host_checkpoints = host_ckpts;
    rsp_pool *pool = NULL;
    OK(rsp_pool_create(&cfg, &pool, E));
    return pool;
}

static rsp_pool *make_pool(uint32_t slots)
{
    return make_pool_tp(slots, 1, 0, false, 0, NULL);
}

/* One row (rid, main, span 1) admitted, planned and committed: the
 * holding has state. */
static void run_step(rsp_pool *pool, uint64_t id, rsp_rid rid)
{
    rsp_row row = {.rid = rid, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = id, .rows = &row, .num_rows = 1};
    rsp_admit_outcome a;
    OK(rsp_step_admit(pool, &s, &a, E));
    assert_true(a.ok);
    OK(rsp_step_plan(pool, &s, E));
    rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(pool, &s, &done, E));
}

/* The global element (block b, layer l, slot-relative flat index g of the
 * unsharded shape) of request `seed`: what every rank's share must hold. */
static uint8_t global_byte(uint32_t seed, uint32_t b, uint32_t l, size_t g)
{
    return (uint8_t)(seed * 37u + b * 11u + l * 5u + g * 3u + 1u);
}

/* Bytes of one element of block b. */
static size_t elem(uint32_t b)
{
    return b == 0 ? 4 : 1;
}

/* Visit every byte of slot `slot` in a pool of (world, rank): its local
 * address and its global (unsharded) byte index. */
typedef void (*byte_fn)(uint8_t *at, uint8_t want, void *ctx);
static void each_byte(rsp_pool *pool, int32_t slot, uint32_t world, uint32_t rank, uint32_t seed,
                      byte_fn fn, void *ctx)
{
    for (uint32_t b = 0; b < 3; b++)
        for (uint32_t l = 0; l < LAYERS; l++) {
            rsp_block_view v;
            OK(rsp_pool_block(pool, blocks[b].name, l, &v, E));
            int64_t r0 = blocks[b].shape[0], c0 = blocks[b].ndim > 1 ? blocks[b].shape[1] : 1;
            int64_t lr = r0, lc = c0, orow = 0, ocol = 0; /* local shape and offset */
            if (b == 0)
                lc = c0 / world, ocol = rank * lc;
            if (b == 1)
                lr = r0 / world, orow = rank * lr;
            size_t local_bytes = (size_t)(lr * lc) * elem(b);
            uint8_t *base = (uint8_t *)v.data + (size_t)slot * local_bytes;
            for (int64_t i = 0; i < lr; i++)
                for (int64_t j = 0; j < lc; j++)
                    for (size_t e = 0; e < elem(b); e++) {
                        size_t g = ((size_t)((orow + i) * c0 + ocol + j)) * elem(b) + e;
                        size_t at = ((size_t)(i * lc + j)) * elem(b) + e;
                        fn(base + at, global_byte(seed, b, l, g), ctx);
                    }
        }
}

static void put_byte(uint8_t *at, uint8_t want, void *ctx)
{
    (void)ctx;
    *at = want;
}

static void count_wrong(uint8_t *at, uint8_t want, void *ctx)
{
    *(size_t *)ctx += *at != want;
}

static void count_nonzero(uint8_t *at, uint8_t want, void *ctx)
{
    (void)want;
    *(size_t *)ctx += *at != 0;
}

static int32_t slot_of(rsp_pool *pool, rsp_rid rid)
{
    rsp_holding h;
    OK(rsp_holding_get(pool, rid, RSP_LABEL_MAIN, &h, E));
    return h.index;
}

/* Copy an export's extents into an import's (the transport). */
static void carry(rsp_pool *src, const rsp_export *exp, rsp_pool *dst, const rsp_import *imp,
                  uint32_t src_world, uint32_t src_rank)
{
    rsp_region sr[16], dr[16];
    uint32_t ns, nd, n, m;
    OK(rsp_pool_regions(src, sr, 16, &ns, E));
    OK(rsp_pool_regions(dst, dr, 16, &nd, E));
    const rsp_extent *from = rsp_export_extents(exp, &n);
    rsp_extent *to = calloc(n + 1, sizeof *to);
    OK(rsp_import_extents(imp, src_world, src_rank, to, n + 1, &m, E));
    assert_int_equal(m, n);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(from[i].length, to[i].length);
        assert_true(from[i].offset + from[i].length <= sr[from[i].region].length);
        assert_true(to[i].offset + to[i].length <= dr[to[i].region].length);
        memcpy((char *)dr[to[i].region].base + to[i].offset,
               (char *)sr[from[i].region].base + from[i].offset, from[i].length);
    }
    free(to);
}

static rsp_export *open_export(rsp_pool *pool, rsp_rid rid, uint32_t tw, uint32_t tr)
{
    rsp_export_spec s;
    rsp_export_spec_init(&s);
    s.rid = rid;
    s.tag = 77;
    s.target_world_size = tw;
    s.target_rank = tr;
    rsp_export *e = NULL;
    OK(rsp_export_open(pool, &s, &e, E));
    return e;
}

static void regions_cover_the_storage(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool_tp(8, 1, 0, false, 2, NULL);
    rsp_region r[16];
    uint32_t n;
    OK(rsp_pool_regions(pool, r, 16, &n, E));
    assert_int_equal(n, 6); /* request slots and the host tier, 3 blocks each */
    for (uint32_t b = 0; b < 3; b++) {
        rsp_block_view v;
        OK(rsp_pool_block(pool, blocks[b].name, 0, &v, E));
        assert_ptr_equal(r[b].base, v.data);
        assert_int_equal(r[b].space, RSP_REGION_SLOTS);
        assert_int_equal(r[3 + b].space, RSP_REGION_HOST_TIER);
        assert_int_equal(r[3 + b].memory, RSP_DEVICE_HOST);
    }
    assert_int_equal(r[0].length, 8u * LAYERS * 3 * 8 * 4);
    assert_int_equal(rsp_pool_regions(pool, NULL, 0, &n, E), RSP_OK);
    assert_int_equal(n, 6);
    OK(rsp_pool_close(pool, E));
}

static void export_pins_until_close(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8);
    run_step(pool, 1, 5);
    rsp_export *e = open_export(pool, 5, 0, 0);
    const rsp_xfer_header *h = rsp_export_header(e);
    assert_int_equal(h->num_holdings, 1);
    assert_string_equal(h->holdings[0].label, "main");
    assert_true(h->holdings[0].has_state);
    assert_int_equal(h->tag, 77);
    assert_int_equal(h->fingerprint, rsp_xfer_header_fingerprint(h));

    rsp_row row = {.rid = 5, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 2, .rows = &row, .num_rows = 1};
    rsp_admit_outcome a;
    assert_int_equal(rsp_step_admit(pool, &s, &a, E), RSP_EPINNED);
    assert_non_null(strstr(last_err.message, "exported"));
    assert_int_equal(rsp_release(pool, 5, RSP_LABEL_MAIN, E), RSP_EPINNED);
    assert_int_equal(rsp_remove(pool, 5, E), RSP_EPINNED);
    assert_int_equal(rsp_reset(pool, 5, false, E), RSP_EPINNED);
    /* A second export of the same holding: two pins. */
    rsp_export *e2 = open_export(pool, 5, 0, 0);
    OK(rsp_export_close(e, E));
    assert_int_equal(rsp_remove(pool, 5, E), RSP_EPINNED);
    OK(rsp_export_close(e2, E));
    OK(rsp_step_admit(pool, &s, &a, E));
    assert_true(a.ok);
    OK(rsp_step_rollback(pool, 2, NULL, E));
    OK(rsp_remove(pool, 5, E));
    /* Nothing to export: refused, nothing pinned. */
    rsp_export_spec sp;
    rsp_export_spec_init(&sp);
    sp.rid = 5;
    assert_int_equal(rsp_export_open(pool, &sp, &e, E), RSP_ENOREQ);
    sp.struct_size = 3;
    assert_int_equal(rsp_export_open(pool, &sp, &e, E), RSP_EINVAL);
    OK(rsp_pool_close(pool, E));
}

static void import_is_invisible_until_commit(void **state)
{
    (void)state;
    rsp_pool *a = make_pool(8), *b = make_pool(8);
    run_step(a, 1, 5);
    each_byte(a, slot_of(a, 5), 1, 0, 9, put_byte, NULL);
    rsp_export *e = open_export(a, 5, 0, 0);
    rsp_import *imp = NULL;
    OK(rsp_import_begin(b, rsp_export_header(e), 50, 0, &imp, E));
    /* Begun, not committed: nothing may address it or free it. */
    rsp_row row = {.rid = 50, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome out;
    assert_int_equal(rsp_step_admit(b, &s, &out, E), RSP_EPINNED);
    assert_non_null(strstr(last_err.message, "being imported"));
    assert_int_equal(rsp_remove(b, 50, E), RSP_EPINNED);
    carry(a, e, b, imp, 1, 0);
    OK(rsp_import_commit(imp, 0, E));
    OK(rsp_export_close(e, E));
    rsp_holding hb;
    OK(rsp_holding_get(b, 50, RSP_LABEL_MAIN, &hb, E));
    assert_true(hb.has_state);
    size_t wrong = 0;
    each_byte(b, hb.index, 1, 0, 9, count_wrong, &wrong);
    assert_int_equal(wrong, 0);
    OK(rsp_step_admit(b, &s, &out, E));
    assert_true(out.ok);
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

static void abort_zeroes_and_frees(void **state)
{
    (void)state;
    rsp_pool *a = make_pool(8), *b = make_pool(8);
    run_step(a, 1, 5);
    each_byte(a, slot_of(a, 5), 1, 0, 3, put_byte, NULL);
    rsp_export *e = open_export(a, 5, 0, 0);
    rsp_stats before, after;
    OK(rsp_stats_snapshot(b, &before, E));
    rsp_import *imp = NULL;
    OK(rsp_import_begin(b, rsp_export_header(e), 50, 0, &imp, E));
    int32_t slot = slot_of(b, 50);
    carry(a, e, b, imp, 1, 0); /* a transfer that got halfway */
    OK(rsp_import_abort(imp, 0, E));
    OK(rsp_barrier(b, E));
    OK(rsp_stats_snapshot(b, &after, E));
    assert_int_equal(after.held_slots, before.held_slots);
    assert_int_equal(after.num_requests, before.num_requests);
    rsp_holding hb;
    assert_int_equal(rsp_holding_get(b, 50, RSP_LABEL_MAIN, &hb, E), RSP_ENOREQ);
    /* The slot was zeroed on its way back: the next holder reads zeros. */
    OK(rsp_import_begin(b, rsp_export_header(e), 51, 0, &imp, E));
    assert_int_equal(slot_of(b, 51), slot);
    OK(rsp_import_commit(imp, 0, E));
    size_t nz = 0;
    each_byte(b, slot, 1, 0, 3, count_nonzero, &nz);
    assert_int_equal(nz, 0);
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

static void refused_import_changes_nothing(void **state)
{
    (void)state;
    rsp_pool *a = make_pool(8), *full = make_pool(2); /* the sink and one slot */
    run_step(a, 1, 5);
    run_step(full, 1, 7);
    rsp_export *e = open_export(a, 5, 0, 0);
    rsp_stats before, after;
    OK(rsp_stats_snapshot(full, &before, E));
    rsp_import *imp = (rsp_import *)1;
    assert_int_equal(rsp_import_begin(full, rsp_export_header(e), 50, 0, &imp, E), RSP_ECAPACITY);
    assert_null(imp);
    /* A rid that already holds the label. */
    rsp_pool *b = make_pool(8);
    run_step(b, 1, 50);
    assert_int_equal(rsp_import_begin(b, rsp_export_header(e), 50, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "already holds"));
    /* A label this pool has not interned. */
    rsp_xfer_header h = *rsp_export_header(e);
    snprintf(h.holdings[0].label, RSP_NAME_MAX, "draft");
    assert_int_equal(rsp_import_begin(b, &h, 60, 0, &imp, E), RSP_ENOLABEL);
    OK(rsp_stats_snapshot(full, &after, E));
    assert_int_equal(after.held_slots, before.held_slots);
    assert_int_equal(after.num_requests, before.num_requests);
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
    OK(rsp_pool_close(full, E));
}

static void layout_mismatch_names_the_first_difference(void **state)
{
    (void)state;
    rsp_block_config other[3];
    memcpy(other, blocks, sizeof other);
    other[1].shape[1] = 6;
    rsp_pool *a = make_pool(8), *b = make_pool_tp(8, 1, 0, false, 0, other);
    run_step(a, 1, 5);
    rsp_export *e = open_export(a, 5, 0, 0);
    rsp_import *imp = NULL;
    assert_int_equal(rsp_import_begin(b, rsp_export_header(e), 5, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "blocks[1]"));
    assert_non_null(strstr(last_err.message, "shape[1] 6 here, 5 in the export"));
    rsp_xfer_header h = *rsp_export_header(e);
    h.num_layers = 3; /* a damaged header: its fingerprint no longer matches */
    assert_int_equal(rsp_import_begin(a, &h, 6, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "fingerprint"));
    h.fingerprint = rsp_xfer_header_fingerprint(&h);
    assert_int_equal(rsp_import_begin(a, &h, 6, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "num_layers 2 here, 3"));
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

/* The exporting thread: opens while step 2 is in flight, records what it
 * read once open returned. */
typedef struct waiter {
    rsp_pool *pool;
    rsp_status st;
    size_t wrong;
    rsp_export *e;
} waiter;

static void *export_thread(void *arg)
{
    waiter *w = arg;
    rsp_export_spec s;
    rsp_export_spec_init(&s);
    s.rid = 5;
    w->st = rsp_export_open(w->pool, &s, &w->e, NULL);
    if (w->st == RSP_OK)
        each_byte(w->pool, slot_of(w->pool, 5), 1, 0, 4, count_wrong, &w->wrong);
    return NULL;
}

static void export_waits_for_the_step_in_flight(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8);
    run_step(pool, 1, 5);
    rsp_row row = {.rid = 5, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 2, .rows = &row, .num_rows = 1};
    rsp_admit_outcome a;
    OK(rsp_step_admit(pool, &s, &a, E));
    OK(rsp_step_plan(pool, &s, E));
    /* A short timeout gives up, naming the step, with nothing pinned. */
    rsp_export_spec sp;
    rsp_export_spec_init(&sp);
    sp.rid = 5;
    sp.timeout_ns = 1000000;
    rsp_export *e = NULL;
    assert_int_equal(rsp_export_open(pool, &sp, &e, E), RSP_ETIMEDOUT);
    assert_non_null(strstr(last_err.message, "step 2"));

    waiter w = {.pool = pool};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, export_thread, &w), 0);
    rsp_host_fence *fence;
    OK(rsp_host_fence_create(&fence, E));
    rsp_event done = rsp_event_host(fence, 1);
    OK(rsp_step_commit(pool, &s, &done, E));
    /* The forward writes after its commit was posted, then signals. */
    each_byte(pool, slot_of(pool, 5), 1, 0, 4, put_byte, NULL);
    rsp_host_fence_signal(fence, 1);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(w.st, RSP_OK);
    assert_int_equal(w.wrong, 0);
    OK(rsp_export_close(w.e, E));
    rsp_host_fence_destroy(fence);
    OK(rsp_pool_close(pool, E));
}

static void ordered_pool_numbers_the_import(void **state)
{
    (void)state;
    rsp_pool *a = make_pool(8), *b = make_pool_tp(8, 1, 0, true, 0, NULL);
    run_step(a, 1, 5);
    rsp_export *e = open_export(a, 5, 0, 0);
    rsp_import *imp = NULL;
    assert_int_equal(rsp_import_begin(b, rsp_export_header(e), 50, 0, &imp, E), RSP_EINVAL);
    assert_non_null(strstr(last_err.message, "seq"));
    OK(rsp_import_begin(b, rsp_export_header(e), 50, 1, &imp, E));
    carry(a, e, b, imp, 1, 0);
    OK(rsp_import_commit(imp, 2, E));
    rsp_holding h;
    OK(rsp_holding_get(b, 50, RSP_LABEL_MAIN, &h, E));
    assert_true(h.has_state);
    OK(rsp_export_close(e, E));
    OK(rsp_pool_close(a, E));
    OK(rsp_pool_close(b, E));
}

static void checkpoint_export_pins_its_key(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool_tp(8, 1, 0, false, 2, NULL);
    run_step(pool, 1, 5);
    each_byte(pool, slot_of(pool, 5), 1, 0, 6, put_byte, NULL);
    OK(rsp_checkpoint_take(pool, 99, 5, RSP_LABEL_MAIN, RSP_TIER_HOST, 0, E));
    rsp_export_spec s;
    rsp_export_spec_init(&s);
    s.what = RSP_XFER_CHECKPOINT;
    s.key = 99;
    rsp_export *e = NULL;
    OK(rsp_export_open(pool, &s, &e, E));
    assert_int_equal(rsp_checkpoint_drop(pool, 99, E), RSP_EPINNED);
    rsp_region r[8];
    uint32_t nr, n;
    OK(rsp_pool_regions(pool, r, 8, &nr, E));
    const rsp_extent *x = rsp_export_extents(e, &n);
    assert_int_equal(n, 3 * LAYERS); /* whole slots: one extent a block and layer */
    uint8_t want[128];
    for (uint32_t i = 0; i < n; i++) {
        assert_true(x[i].region < nr && x[i].length <= sizeof want);
        assert_int_equal(r[x[i].region].space, RSP_REGION_HOST_TIER);
        rsp_block_view v; /* the same bytes in the request slot */
        uint32_t b = i / LAYERS, l = i % LAYERS;
        OK(rsp_pool_block(pool, blocks[b].name, l, &v, E));
        memcpy(want, (char *)v.data + (size_t)slot_of(pool, 5) * x[i].length, x[i].length);
        assert_memory_equal((char *)r[x[i].region].base + x[i].offset, want, x[i].length);
    }
    OK(rsp_export_close(e, E));
    OK(rsp_checkpoint_drop(pool, 99, E));
    s.key = 98;
    assert_int_equal(rsp_export_open(pool, &s, &e, E), RSP_ENOKEY);
    OK(rsp_pool_close(pool, E));
}

/* TP=2 prefill ranks fill their shares of request 5 with the global
 * pattern; each of `tw` decode ranks imports its share from both. */
static void reshard_to(uint32_t tw)
{
    rsp_pool *src[2];
    for (uint32_t r = 0; r < 2; r++) {
        src[r] = make_pool_tp(8, 2, r, false, 0, NULL);
        run_step(src[r], 1, 5);
        each_byte(src[r], slot_of(src[r], 5), 2, r, 21, put_byte, NULL);
    }
    for (uint32_t d = 0; d < tw; d++) {
        rsp_pool *dst = make_pool_tp(8, tw, d, false, 0, NULL);
        rsp_export *e[2];
        for (uint32_t r = 0; r < 2; r++)
            e[r] = open_export(src[r], 5, tw, d);
        rsp_import *imp = NULL;
        OK(rsp_import_begin(dst, rsp_export_header(e[1]), 5, 0, &imp, E));
        for (uint32_t r = 0; r < 2; r++)
            carry(src[r], e[r], dst, imp, 2, r);
        OK(rsp_import_commit(imp, 0, E));
        size_t wrong = 0;
        each_byte(dst, slot_of(dst, 5), tw, d, 21, count_wrong, &wrong);
        assert_int_equal(wrong, 0);
        for (uint32_t r = 0; r < 2; r++)
            OK(rsp_export_close(e[r], E));
        OK(rsp_pool_close(dst, E));
    }
    for (uint32_t r = 0; r < 2; r++)
        OK(rsp_pool_close(src[r], E));
}

static void reshard_tp2_to_tp1(void **state)
{
    (void)state;
    reshard_to(1);
}

static void reshard_tp2_to_tp4(void **state)
{
    (void)state;
    reshard_to(4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(regions_cover_the_storage),
        cmocka_unit_test(export_pins_until_close),
        cmocka_unit_test(import_is_invisible_until_commit),
        cmocka_unit_test(abort_zeroes_and_frees),
        cmocka_unit_test(refused_import_changes_nothing),
        cmocka_unit_test(layout_mismatch_names_the_first_difference),
        cmocka_unit_test(export_waits_for_the_step_in_flight),
        cmocka_unit_test(ordered_pool_numbers_the_import),
        cmocka_unit_test(checkpoint_export_pins_its_key),
        cmocka_unit_test(reshard_tp2_to_tp1),
        cmocka_unit_test(reshard_tp2_to_tp4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
