/*
 * test_device_faults: the host device's submit under allocation failure
 * (src/device/host_submit.c: validate, reserve, apply, hand off).
 * SPDX-License-Identifier: Apache-2.0
 *
 * The interposed allocator of tests/fault (inject.c) fails the N-th
 * allocation of the process during one submit, for every N until the submit
 * makes no more. A failed submit answers RSP_ENOMEM and changes nothing: no
 * buffer is created, grown or moved, no slot byte is written, nothing leaks
 * (LeakSanitizer in the sanitizer builds), and the same submit then works.
 * A submit after rsp__device_reserve for its work allocates nothing at all.
 * The pool-level sweeps (tests/fault) cannot see this: the owner always
 * reserves ahead, so the submit's own fallible path never runs there.
 * Creation is swept too, with storage mappings (mmap) as fault points.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/layout.h"
#include "core/work.h"
#include "device/device.h"
#include "fault/inject.h"

#define SLOTS 6
#define SLOT_BYTES 8

static void make_layout(rsp__layout *lay)
{
    memset(lay, 0, sizeof *lay);
    lay->num_layers = 2;
    lay->max_slots = SLOTS;
    lay->sink = true;
    lay->usable_slots = SLOTS - 1;
    lay->num_blocks = 1;
    rsp__block_layout *bl = &lay->blocks[0];
    snprintf(bl->name, sizeof bl->name, "b0");
    bl->dtype = RSP_DTYPE_U8;
    bl->elem_size = 1;
    bl->ndim = 1;
    bl->shape[0] = SLOT_BYTES;
    bl->slot_bytes = SLOT_BYTES;
    bl->layer_bytes = (uint64_t)SLOT_BYTES * SLOTS;
    bl->bytes = bl->layer_bytes * lay->num_layers;
    lay->slot_bytes = (uint64_t)SLOT_BYTES * lay->num_layers;
    lay->total_bytes = lay->slot_bytes * SLOTS;
    lay->num_ids = lay->max_slots; /* no checkpoint tiers */
}

/* A hand-built work list with fixed room. */
typedef struct test_work {
    rsp__work w;
    rsp__op ops[16];
    uint32_t slots[8];
    rsp__copy pairs[8];
} test_work;

static rsp__op *push(test_work *t, rsp__op_kind kind)
{
    rsp__op *op = &t->ops[t->w.num_ops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    return op;
}

static void init_work(test_work *t)
{
    memset(t, 0, sizeof *t);
    t->w.ops = t->ops;
    t->w.cap_ops = 16;
    t->w.slots = t->slots;
    t->w.cap_slots = 8;
    t->w.pairs = t->pairs;
    t->w.cap_pairs = 8;
}

static void add_buffer(test_work *t, uint32_t id, uint32_t cap)
{
    rsp__op *op = push(t, RSP__OP_BUFFER);
    op->buffer = id;
    op->capacity = cap;
}

static void add_upload(test_work *t, uint32_t id, const int32_t *idx, const bool *has, uint32_t n)
{
    rsp__op *op = push(t, RSP__OP_UPLOAD);
    op->buffer = id;
    op->slot_indices = idx;
    op->has_state = has;
    op->count = n;
}

static uint8_t pattern(uint32_t l, uint32_t s, uint32_t i)
{
    return (uint8_t)(1 + (l * 31u + s * 7u + i * 3u) % 251u);
}

/* Vectors the lists upload: entry i of buffer b is b * 100 + i. */
static int32_t up_idx[3][64];
static bool up_has[3][64];

static void fill_vectors(void)
{
    for (uint32_t b = 0; b < 3; b++)
        for (uint32_t i = 0; i < 64; i++) {
            up_idx[b][i] = (int32_t)(b * 100 + i);
            up_has[b][i] = (i % 3) == 0;
        }
}

/* Every slot painted (the device idle), buffers 0 (4 entries) and 1 (2)
 * created and uploaded. */
static rsp__device *setup(const rsp__layout *lay)
{
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, lay, &dev, NULL), RSP_OK);
    uint8_t *base = rsp__device_block_base(dev, 0);
    for (uint32_t l = 0; l < lay->num_layers; l++)
        for (uint32_t s = 0; s < SLOTS; s++)
            for (uint32_t i = 0; i < SLOT_BYTES; i++)
                base[rsp__layout_offset(lay, 0, l, s) + i] = pattern(l, s, i);
    test_work t;
    init_work(&t);
    add_buffer(&t, 0, 4);
    add_upload(&t, 0, up_idx[0], up_has[0], 4);
    add_buffer(&t, 1, 2);
    add_upload(&t, 1, up_idx[1], up_has[1], 2);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    return dev;
}

/*
 * The list under test: (a WAIT on `gate` when queued, so it runs on the
 * worker), ZERO slot 1, COPY 2 -> 3, grow buffer 0 to 40, create buffer 2
 * at 8 (`twice`: and grow it to 16 in the same list; else at 16), a no-op
 * BUFFER for buffer 1, uploads into buffers 0 and 2.
 */
static void build_list(test_work *t, rsp_host_fence *gate, bool twice)
{
    init_work(t);
    if (gate) {
        rsp__op *op = push(t, RSP__OP_WAIT);
        op->event = rsp_event_host(gate, 1);
    }
    rsp__op *z = push(t, RSP__OP_ZERO);
    z->first = t->w.num_slots;
    z->count = 1;
    t->slots[t->w.num_slots++] = 1;
    rsp__op *c = push(t, RSP__OP_COPY);
    c->first = t->w.num_pairs;
    c->count = 1;
    t->pairs[t->w.num_pairs++] = (rsp__copy){2, 3};
    add_buffer(t, 0, 40);
    if (twice) {
        add_buffer(t, 2, 8);
        add_upload(t, 2, up_idx[2], up_has[2], 8);
    }
    add_buffer(t, 2, 16);
    add_buffer(t, 1, 1);
    add_upload(t, 0, up_idx[0], up_has[0], 40);
    add_upload(t, 2, up_idx[2], up_has[2], 16);
}

/* What the list (built once) needs, as the core would declare it to the
 * reserve hook. */
static void list_need(rsp__ext_need *need, bool queued)
{
    memset(need, 0, sizeof *need);
    need->ops = 7 + (queued ? 1 : 0);
    need->slots = 1;
    need->pairs = 1;
    need->upload_entries = 40 + 16;
    need->num_buffers = 3;
    static const uint32_t ids[3] = {0, 2, 1}, caps[3] = {40, 16, 1};
    need->buffer_id = ids;
    need->buffer_cap = caps;
}

typedef struct buf_view {
    rsp_status st;
    void *idx, *has;
    uint32_t cap;
} buf_view;

static void view_buffers(rsp__device *dev, buf_view v[3])
{
    for (uint32_t b = 0; b < 3; b++) {
        memset(&v[b], 0, sizeof v[b]);
        v[b].st = rsp__device_buffer(dev, b, &v[b].idx, &v[b].has, &v[b].cap, NULL);
    }
}

/* Slots as setup left them: every byte its pattern. */
static void assert_slots_untouched(rsp__device *dev, const rsp__layout *lay)
{
    uint8_t buf[SLOT_BYTES];
    for (uint32_t l = 0; l < lay->num_layers; l++)
        for (uint32_t s = 0; s < SLOTS; s++) {
            assert_int_equal(rsp__device_read(dev, 0, l, s, buf, NULL), RSP_OK);
            for (uint32_t i = 0; i < SLOT_BYTES; i++)
                assert_int_equal(buf[i], pattern(l, s, i));
        }
}

/* Slots and buffers as the list leaves them. */
static void assert_list_done(rsp__device *dev, const rsp__layout *lay)
{
    uint8_t buf[SLOT_BYTES];
    for (uint32_t l = 0; l < lay->num_layers; l++)
        for (uint32_t s = 0; s < SLOTS; s++) {
            assert_int_equal(rsp__device_read(dev, 0, l, s, buf, NULL), RSP_OK);
            for (uint32_t i = 0; i < SLOT_BYTES; i++)
                assert_int_equal(buf[i], s == 1 ? 0 : pattern(l, s == 3 ? 2 : s, i));
        }
    const uint32_t want_cap[3] = {40, 2, 16}, want_len[3] = {40, 2, 16};
    for (uint32_t b = 0; b < 3; b++) {
        void *idx, *has;
        uint32_t cap;
        assert_int_equal(rsp__device_buffer(dev, b, &idx, &has, &cap, NULL), RSP_OK);
        assert_int_equal(cap, want_cap[b]);
        for (uint32_t i = 0; i < want_len[b]; i++) {
            assert_int_equal(((const int32_t *)idx)[i], up_idx[b][i]);
            assert_int_equal(((const bool *)has)[i], up_has[b][i]);
        }
    }
}

/* Submit the list with the n-th allocation failing, for every n until the
 * submit makes no more; `queued`: behind a closed gate (the worker's path),
 * else on an idle device (the inline path). */
static void sweep(bool queued)
{
    rsp__layout lay;
    make_layout(&lay);
    fill_vectors();
    for (uint64_t n = 1;; n++) {
        rsp__device *dev = setup(&lay);
        rsp_host_fence *gate = NULL;
        if (queued)
            assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);
        buf_view before[3], after[3];
        view_buffers(dev, before);
        test_work t;
        build_list(&t, gate, true);
        rsp_error err = {0};
        fault_arm(n);
        rsp_status st = rsp__device_submit(dev, &t.w, NULL, &err);
        uint64_t points = fault_disarm();
        if (points >= n) {
            /* The n-th allocation failed: nothing changed. */
            assert_int_equal(st, RSP_ENOMEM);
            assert_int_equal(err.status, RSP_ENOMEM);
            view_buffers(dev, after);
            for (uint32_t b = 0; b < 3; b++) {
                assert_int_equal(after[b].st, before[b].st);
                assert_ptr_equal(after[b].idx, before[b].idx);
                assert_ptr_equal(after[b].has, before[b].has);
                assert_int_equal(after[b].cap, before[b].cap);
            }
            assert_slots_untouched(dev, &lay);
            /* And the same submit works now. */
            assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
        } else {
            assert_int_equal(st, RSP_OK);
        }
        if (gate)
            rsp_host_fence_signal(gate, 1);
        assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
        assert_list_done(dev, &lay);
        rsp__device_destroy(dev);
        if (gate)
            rsp_host_fence_destroy(gate);
        if (points < n) {
            /* The sweep saw every allocation of the submit fail once. */
            printf("[%s] swept N=1..%llu: %llu allocations failed in turn\n",
                   queued ? "queued" : "inline", (unsigned long long)n,
                   (unsigned long long)(n - 1));
            assert_true(n > 1);
            break;
        }
    }
}

static void failed_inline_submit_changes_nothing(void **state)
{
    (void)state;
    sweep(false);
}

static void failed_queued_submit_changes_nothing(void **state)
{
    (void)state;
    sweep(true);
}

/* After rsp__device_reserve for its work, a submit allocates nothing. */
static void reserved_submit_allocates_nothing(bool queued)
{
    rsp__layout lay;
    make_layout(&lay);
    fill_vectors();
    rsp__device *dev = setup(&lay);
    rsp_host_fence *gate = NULL;
    if (queued)
        assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);
    rsp__ext_need need;
    list_need(&need, queued);
    assert_int_equal(rsp__device_reserve(dev, &need, NULL), RSP_OK);
    test_work t;
    build_list(&t, gate, false);
    fault_arm(0);
    rsp_status st = rsp__device_submit(dev, &t.w, NULL, NULL);
    uint64_t points = fault_disarm();
    assert_int_equal(st, RSP_OK);
    assert_int_equal(points, 0);
    if (gate)
        rsp_host_fence_signal(gate, 1);
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    assert_list_done(dev, &lay);
    rsp__device_destroy(dev);
    if (gate)
        rsp_host_fence_destroy(gate);
}

static void reserved_inline_submit_allocates_nothing(void **state)
{
    (void)state;
    reserved_submit_allocates_nothing(false);
}

static void reserved_queued_submit_allocates_nothing(void **state)
{
    (void)state;
    reserved_submit_allocates_nothing(true);
}

/*
 * Creation under failure: every allocation, thread creation and storage
 * mapping (mmap: fault_mmap) of rsp__device_create fails in turn. Each
 * failure is RSP_ENOMEM, names what failed, leaves *out as it was and
 * leaves nothing behind: every mapping is unmapped (the interposer's byte
 * count comes back) and every allocation freed (LeakSanitizer). The
 * mappings are the three storages' (request slots, device tier, host
 * tier), one per block each, and a failure of each is seen.
 */
static void failed_create_leaves_nothing(void **state)
{
    (void)state;
    static rsp_block_config blocks[2] = {
        {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 2, .shape = {4, 3}},
        {.name = "ssm", .dtype = RSP_DTYPE_BF16, .ndim = 1, .shape = {17}},
    };
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.blocks = blocks;
    cfg.num_blocks = 2;
    cfg.num_layers = 3;
    cfg.max_slots = 4;
    cfg.max_checkpoints = 3;
    cfg.max_host_checkpoints = 2;
    rsp__layout lay;
    assert_int_equal(rsp__layout_build(&cfg, &lay, NULL), RSP_OK);
    static const char *const storages[3] = {"request slots", "device-tier checkpoints",
                                            "host-tier checkpoints"};
    uint32_t map_failures = 0, storage_seen[3] = {0, 0, 0};
    fault_mmap(true);
    for (uint64_t n = 1;; n++) {
        const int64_t mapped = fault_mapped_bytes();
        rsp__device *dev = (rsp__device *)0x1;
        rsp_error err = {0};
        fault_arm(n);
        rsp_status st = rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, &err);
        uint64_t points = fault_disarm();
        if (points < n) {
            assert_int_equal(st, RSP_OK);
            rsp__device_destroy(dev);
            assert_int_equal(fault_mapped_bytes(), mapped);
            printf("create: swept N=1..%llu; %u storage mappings failed in turn\n",
                   (unsigned long long)n, map_failures);
            break;
        }
        assert_int_equal(st, RSP_ENOMEM);
        assert_int_equal(err.status, RSP_ENOMEM);
        assert_ptr_equal(dev, (rsp__device *)0x1);
        assert_int_equal(fault_mapped_bytes(), mapped);
        if (strcmp(fault_last_hit()->what, "mmap") == 0) {
            map_failures++;
            for (int k = 0; k < 3; k++)
                if (strstr(err.message, storages[k]))
                    storage_seen[k]++;
        }
    }
    fault_mmap(false);
    /* One mapping per block of each storage, each failed once. */
    assert_int_equal(map_failures, 3 * lay.num_blocks);
    for (int k = 0; k < 3; k++)
        assert_int_equal(storage_seen[k], lay.num_blocks);
}

int main(void)
{
    if (!fault_interposer_active()) {
        fprintf(stderr, "test_device_faults: the allocator is not interposed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(failed_inline_submit_changes_nothing),
        cmocka_unit_test(failed_queued_submit_changes_nothing),
        cmocka_unit_test(reserved_inline_submit_allocates_nothing),
        cmocka_unit_test(reserved_queued_submit_allocates_nothing),
        cmocka_unit_test(failed_create_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
