/*
 * test_device_host: the host device (src/device/host*.c) and rsp_host_fence.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Work lists are built by hand (no core), so each test pins one device rule.
 * cmocka is not thread-safe: helper threads record, the main thread asserts.
 * No timed assertions: short sleeps only give a broken ordering the chance to
 * show; the asserted facts hold (or fail) whatever the timing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/layout.h"
#include "core/work.h"
#include "device/device.h"

/* The OOM test asks for 2^62 bytes; sanitizers abort on that by default. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
    return "allocator_may_return_null=1";
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* A layout of u8 blocks whose slot sizes are slot_bytes[b] (odd on purpose). */
static void make_layout(rsp__layout *lay, uint32_t layers, uint32_t slots, uint32_t nblocks,
                        const uint64_t *slot_bytes)
{
    memset(lay, 0, sizeof *lay);
    lay->num_layers = layers;
    lay->max_slots = slots;
    lay->sink = true;
    lay->usable_slots = slots - 1;
    lay->pad_index = 0;
    lay->num_blocks = nblocks;
    for (uint32_t b = 0; b < nblocks; b++) {
        rsp__block_layout *bl = &lay->blocks[b];
        snprintf(bl->name, sizeof bl->name, "b%u", b);
        bl->dtype = RSP_DTYPE_U8;
        bl->elem_size = 1;
        bl->ndim = 1;
        bl->shape[0] = (int64_t)slot_bytes[b];
        bl->slot_bytes = slot_bytes[b];
        bl->layer_bytes = slot_bytes[b] * slots;
        bl->bytes = bl->layer_bytes * layers;
        lay->slot_bytes += slot_bytes[b] * layers;
    }
    lay->total_bytes = lay->slot_bytes * slots;
    lay->num_ids = lay->max_slots; /* no checkpoint tiers */
}

/* A hand-built work list with fixed room. */
typedef struct test_work {
    rsp__work w;
    rsp__op ops[16];
    uint32_t slots[64];
    rsp__copy pairs[64];
} test_work;

static void tw_init(test_work *t)
{
    memset(t, 0, sizeof *t);
    t->w.ops = t->ops;
    t->w.cap_ops = 16;
    t->w.slots = t->slots;
    t->w.cap_slots = 64;
    t->w.pairs = t->pairs;
    t->w.cap_pairs = 64;
}

static void tw_wait(test_work *t, rsp_host_fence *f, uint64_t v)
{
    rsp__op *op = &t->ops[t->w.num_ops++];
    memset(op, 0, sizeof *op);
    op->kind = RSP__OP_WAIT;
    op->event.kind = RSP_EVENT_HOST_FENCE;
    op->event.handle = f;
    op->event.value = v;
}

static void tw_zero(test_work *t, uint32_t slot)
{
    rsp__op *op = &t->ops[t->w.num_ops++];
    memset(op, 0, sizeof *op);
    op->kind = RSP__OP_ZERO;
    op->first = t->w.num_slots;
    op->count = 1;
    t->slots[t->w.num_slots++] = slot;
}

static void tw_copy(test_work *t, uint32_t src, uint32_t dst)
{
    rsp__op *op = &t->ops[t->w.num_ops++];
    memset(op, 0, sizeof *op);
    op->kind = RSP__OP_COPY;
    op->first = t->w.num_pairs;
    op->count = 1;
    t->pairs[t->w.num_pairs++] = (rsp__copy){src, dst};
}

static void tw_buffer(test_work *t, uint32_t id, uint32_t cap)
{
    rsp__op *op = &t->ops[t->w.num_ops++];
    memset(op, 0, sizeof *op);
    op->kind = RSP__OP_BUFFER;
    op->buffer = id;
    op->capacity = cap;
}

static void tw_upload(test_work *t, uint32_t id, const int32_t *idx, const bool *has, uint32_t n)
{
    rsp__op *op = &t->ops[t->w.num_ops++];
    memset(op, 0, sizeof *op);
    op->kind = RSP__OP_UPLOAD;
    op->buffer = id;
    op->slot_indices = idx;
    op->has_state = has;
    op->count = n;
}

static uint8_t pattern(uint32_t b, uint32_t l, uint32_t s, uint64_t i)
{
    return (uint8_t)(1 + ((b * 131u + l * 31u + s * 7u + (uint32_t)i * 3u) % 251u));
}

/* Fill every byte of every block with pattern(); only while the device is idle. */
static void fill_pattern(rsp__device *dev, const rsp__layout *lay)
{
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    for (uint32_t b = 0; b < lay->num_blocks; b++) {
        uint8_t *base = rsp__device_block_base(dev, b);
        for (uint32_t l = 0; l < lay->num_layers; l++)
            for (uint32_t s = 0; s < lay->max_slots; s++)
                for (uint64_t i = 0; i < lay->blocks[b].slot_bytes; i++)
                    base[rsp__layout_offset(lay, b, l, s) + i] = pattern(b, l, s, i);
    }
}

/* Read slot s of every block and layer through rsp__device_read and compare
 * each byte with expect(b, l, i): `from` = pattern of slot from, or zero. */
static void check_slot(rsp__device *dev, const rsp__layout *lay, uint32_t s, int from)
{
    uint8_t buf[256];
    for (uint32_t b = 0; b < lay->num_blocks; b++)
        for (uint32_t l = 0; l < lay->num_layers; l++) {
            assert_true(lay->blocks[b].slot_bytes <= sizeof buf);
            assert_int_equal(rsp__device_read(dev, b, l, s, buf, NULL), RSP_OK);
            for (uint64_t i = 0; i < lay->blocks[b].slot_bytes; i++)
                assert_int_equal(buf[i], from < 0 ? 0 : pattern(b, l, (uint32_t)from, i));
        }
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------ */
/* Storage                                                                   */
/* ------------------------------------------------------------------------ */

static void create_gives_zeroed_64_byte_aligned_blocks(void **state)
{
    (void)state;
    const uint64_t sb[3] = {13, 1, 77};
    rsp__layout lay;
    make_layout(&lay, 3, 5, 3, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    assert_non_null(dev);
    assert_int_equal(rsp__device_kind(dev), RSP_DEVICE_HOST);
    for (uint32_t b = 0; b < 3; b++) {
        const uint8_t *p = rsp__device_block_base(dev, b);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        for (uint64_t i = 0; i < lay.blocks[b].bytes; i++)
            assert_int_equal(p[i], 0);
    }
    assert_null(rsp__device_block_base(dev, RSP_MAX_BLOCKS));
    rsp__device_destroy(dev);
    rsp__device_destroy(NULL); /* no-op */
}

static void oom_at_creation_fails_cleanly(void **state)
{
    (void)state;
    /* Block 0 fits; block 1 needs 2^62 bytes, which no allocator gives. The
     * ASan/LSan build proves block 0 was freed. */
    const uint64_t sb[2] = {64, UINT64_C(1) << 60};
    rsp__layout lay;
    make_layout(&lay, 2, 2, 2, sb);
    rsp__device *dev = (rsp__device *)&lay; /* sentinel: must stay untouched */
    rsp_error err = {0};
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, &err), RSP_ENOMEM);
    assert_int_equal(err.status, RSP_ENOMEM);
    assert_non_null(strstr(err.message, "b1"));
    assert_ptr_equal(dev, (rsp__device *)&lay);
}

static void cuda_kind_without_cuda_is_enodev(void **state)
{
    (void)state;
#ifdef RSP_HAVE_CUDA
    skip(); /* the CUDA device's own tests cover this build */
#else
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 2, 1, sb);
    rsp__device *dev = NULL;
    rsp_error err = {0};
    assert_int_equal(rsp__device_create(RSP_DEVICE_CUDA, 0, &lay, &dev, &err), RSP_ENODEV);
    assert_non_null(strstr(err.message, "built without CUDA"));
    assert_null(dev);
    assert_int_equal(rsp__device_create((rsp_device_kind)7, 0, &lay, &dev, &err), RSP_EINVAL);
    assert_null(dev);
#endif
}

/* ------------------------------------------------------------------------ */
/* Work: ordering and exact bytes                                            */
/* ------------------------------------------------------------------------ */

static void copy_after_zero_sees_zeros_fifo(void **state)
{
    (void)state;
    const uint64_t sb[2] = {24, 9};
    rsp__layout lay;
    make_layout(&lay, 2, 4, 2, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    fill_pattern(dev, &lay);
    rsp_host_fence *gate = NULL;
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);

    /* Three separate submits queued behind a closed gate, then released at
     * once: they must run in submission order. */
    test_work t;
    tw_init(&t);
    tw_wait(&t, gate, 1);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    tw_init(&t);
    tw_zero(&t, 1);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    tw_init(&t);
    tw_copy(&t, 1, 2);
    rsp_event done;
    assert_int_equal(rsp__device_submit(dev, &t.w, &done, NULL), RSP_OK);
    rsp_host_fence_signal(gate, 1);
    assert_int_equal(rsp__device_event_wait(dev, &done, RSP_WAIT_FOREVER, NULL), RSP_OK);

    check_slot(dev, &lay, 1, -1);
    check_slot(dev, &lay, 2, -1); /* the copy saw the zeroed source */
    check_slot(dev, &lay, 0, 0);
    check_slot(dev, &lay, 3, 3);
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(gate);
}

static void zero_and_copy_touch_exact_bytes_of_odd_sizes(void **state)
{
    (void)state;
    const uint64_t sb[3] = {13, 1, 37};
    rsp__layout lay;
    make_layout(&lay, 3, 6, 3, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    fill_pattern(dev, &lay);

    /* One list: zero 2 and 4, copy 1 -> 3 and 5 -> 0 (one batched COPY). */
    test_work t;
    tw_init(&t);
    tw_zero(&t, 2);
    t.ops[0].count = 2;
    t.slots[t.w.num_slots++] = 4;
    tw_copy(&t, 1, 3);
    t.ops[1].count = 2;
    t.pairs[t.w.num_pairs++] = (rsp__copy){5, 0};
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);

    check_slot(dev, &lay, 0, 5);
    check_slot(dev, &lay, 1, 1);
    check_slot(dev, &lay, 2, -1);
    check_slot(dev, &lay, 3, 1);
    check_slot(dev, &lay, 4, -1);
    check_slot(dev, &lay, 5, 5);
    rsp__device_destroy(dev);
}

/* A helper thread waits for an event and records what it saw then. */
typedef struct waiter_rec {
    rsp__device *dev;
    rsp_event event;
    rsp_host_fence *gate;
    rsp_status status;
    uint64_t gate_value_at_done;
} waiter_rec;

static void *waiter_main(void *arg)
{
    waiter_rec *r = arg;
    r->status = rsp__device_event_wait(r->dev, &r->event, RSP_WAIT_FOREVER, NULL);
    r->gate_value_at_done = rsp_host_fence_value(r->gate);
    return NULL;
}

static void wait_blocks_later_work_until_fence_signalled(void **state)
{
    (void)state;
    const uint64_t sb[1] = {16};
    rsp__layout lay;
    make_layout(&lay, 1, 3, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    fill_pattern(dev, &lay);
    rsp_host_fence *gate = NULL;
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);

    test_work t;
    tw_init(&t);
    tw_wait(&t, gate, 2);
    tw_zero(&t, 1);
    waiter_rec rec = {.dev = dev, .gate = gate, .status = RSP_EDEVICE};
    assert_int_equal(rsp__device_submit(dev, &t.w, &rec.event, NULL), RSP_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &rec), 0);

    sleep_ms(20); /* room for a broken WAIT to let the zero run early */
    assert_int_equal(rsp__device_event_wait(dev, &rec.event, 0, NULL), RSP_ETIMEDOUT);
    rsp_host_fence_signal(gate, 1); /* below the wait value: still closed */
    sleep_ms(5);
    assert_int_equal(rsp__device_event_wait(dev, &rec.event, 0, NULL), RSP_ETIMEDOUT);
    rsp_host_fence_signal(gate, 2);
    pthread_join(th, NULL);

    assert_int_equal(rec.status, RSP_OK);
    assert_int_equal(rec.gate_value_at_done, 2);
    check_slot(dev, &lay, 1, -1);
    check_slot(dev, &lay, 2, 2);
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(gate);
}

static void event_values_increase_per_submit(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 4, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);

    rsp_event prev = {0};
    for (uint32_t i = 0; i < 50; i++) {
        test_work t;
        tw_init(&t);
        tw_zero(&t, 1 + i % 3);
        rsp_event e;
        assert_int_equal(rsp__device_submit(dev, &t.w, &e, NULL), RSP_OK);
        assert_non_null(e.handle);
        if (i > 0) {
            assert_ptr_equal(e.handle, prev.handle);
            assert_true(e.value > prev.value);
        }
        prev = e;
    }
    /* An empty list completes with everything before it. */
    test_work t;
    tw_init(&t);
    rsp_event e;
    assert_int_equal(rsp__device_submit(dev, &t.w, &e, NULL), RSP_OK);
    assert_int_equal(e.value, prev.value);
    assert_int_equal(rsp__device_event_wait(dev, &e, RSP_WAIT_FOREVER, NULL), RSP_OK);
    assert_true(rsp_host_fence_value(e.handle) >= prev.value);
    /* A NULL handle is an event that is already complete. */
    rsp_event none = {.handle = NULL, .value = 12345};
    assert_int_equal(rsp__device_event_wait(dev, &none, 0, NULL), RSP_OK);
    rsp__device_destroy(dev);
}

/* A list the worker need not run (nothing, or a plan's upload alone) on an
 * idle device: its event is complete when submit returns and the worker was
 * never handed a job, so a reader's ready wait never waits for it. */
static void no_work_submit_on_idle_device_is_complete_at_once(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 4, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    rsp_host_fence *gate = NULL;
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);

    /* Some earlier work, through the worker (behind a gate), then done. */
    test_work t;
    tw_init(&t);
    tw_wait(&t, gate, 1);
    tw_zero(&t, 1);
    tw_buffer(&t, 0, 4);
    rsp_event first;
    assert_int_equal(rsp__device_submit(dev, &t.w, &first, NULL), RSP_OK);
    const uint64_t queued = rsp__host_jobs_queued(dev);
    assert_int_equal(queued, 1);
    rsp_host_fence_signal(gate, 1);
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);

    /* Nothing to run: the value of the last job, already reached. */
    tw_init(&t);
    rsp_event e;
    assert_int_equal(rsp__device_submit(dev, &t.w, &e, NULL), RSP_OK);
    assert_int_equal(e.kind, RSP_EVENT_HOST_FENCE);
    assert_int_equal(e.value, first.value);
    assert_int_equal(rsp__device_event_wait(dev, &e, 0, NULL), RSP_OK);

    /* A plan's upload alone: copied before submit returns. */
    int32_t idx[4] = {3, 1, 2, 0};
    bool has[4] = {true, false, true, false};
    tw_init(&t);
    tw_upload(&t, 0, idx, has, 4);
    assert_int_equal(rsp__device_submit(dev, &t.w, &e, NULL), RSP_OK);
    assert_int_equal(rsp__device_event_wait(dev, &e, 0, NULL), RSP_OK);
    void *pi, *ph;
    uint32_t cap;
    assert_int_equal(rsp__device_buffer(dev, 0, &pi, &ph, &cap, NULL), RSP_OK);
    assert_memory_equal(pi, idx, sizeof idx);
    assert_memory_equal(ph, has, sizeof has);

    /* A WAIT on a reached fence blocks nothing either. */
    tw_init(&t);
    tw_wait(&t, gate, 1);
    tw_upload(&t, 0, idx, has, 2);
    assert_int_equal(rsp__device_submit(dev, &t.w, &e, NULL), RSP_OK);
    assert_int_equal(rsp__device_event_wait(dev, &e, 0, NULL), RSP_OK);

    assert_int_equal(rsp__host_jobs_queued(dev), queued);
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(gate);
}

/* The same lists behind a job the worker has not finished: their events
 * complete only once that job has run, so a plan's ready covers the
 * earlier zeroes of the slots it hands out, and an upload lands after the
 * earlier one into the same arrays. */
static void no_work_submit_behind_pending_work_waits_for_it(void **state)
{
    (void)state;
    const uint64_t sb[1] = {16};
    rsp__layout lay;
    make_layout(&lay, 1, 3, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    fill_pattern(dev, &lay);
    rsp_host_fence *gate = NULL;
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);

    int32_t old_idx[2] = {1, 1}, new_idx[2] = {2, 0};
    bool old_has[2] = {false, false}, new_has[2] = {true, true};
    test_work t;
    tw_init(&t);
    tw_wait(&t, gate, 1); /* the worker blocks here until the gate opens */
    tw_zero(&t, 1);
    tw_buffer(&t, 0, 2);
    tw_upload(&t, 0, old_idx, old_has, 2);
    rsp_event pending;
    assert_int_equal(rsp__device_submit(dev, &t.w, &pending, NULL), RSP_OK);

    tw_init(&t);
    rsp_event empty;
    assert_int_equal(rsp__device_submit(dev, &t.w, &empty, NULL), RSP_OK);
    assert_int_equal(empty.value, pending.value);
    tw_init(&t);
    tw_upload(&t, 0, new_idx, new_has, 2);
    rsp_event upload;
    assert_int_equal(rsp__device_submit(dev, &t.w, &upload, NULL), RSP_OK);
    assert_true(upload.value > pending.value);
    assert_int_equal(rsp__host_jobs_queued(dev), 2);

    sleep_ms(20); /* room for a broken ordering to complete them early */
    assert_int_equal(rsp__device_event_wait(dev, &empty, 0, NULL), RSP_ETIMEDOUT);
    assert_int_equal(rsp__device_event_wait(dev, &upload, 0, NULL), RSP_ETIMEDOUT);

    rsp_host_fence_signal(gate, 1);
    assert_int_equal(rsp__device_event_wait(dev, &empty, RSP_WAIT_FOREVER, NULL), RSP_OK);
    check_slot(dev, &lay, 1, -1);
    assert_int_equal(rsp__device_event_wait(dev, &upload, RSP_WAIT_FOREVER, NULL), RSP_OK);
    void *pi, *ph;
    uint32_t cap;
    assert_int_equal(rsp__device_buffer(dev, 0, &pi, &ph, &cap, NULL), RSP_OK);
    assert_memory_equal(pi, new_idx, sizeof new_idx);
    assert_memory_equal(ph, new_has, sizeof new_has);
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(gate);
}

/* ------------------------------------------------------------------------ */
/* Addressing buffers                                                        */
/* ------------------------------------------------------------------------ */

static void buffer_upload_and_growth_keep_contents(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 8, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    rsp_host_fence *gate = NULL;
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);
    rsp_error err = {0};
    void *pi, *ph;
    uint32_t cap;
    assert_int_equal(rsp__device_buffer(dev, 3, &pi, &ph, &cap, &err), RSP_EINVAL);

    /* Create buffer 3 (4 entries) and queue an upload behind a closed gate. */
    int32_t idx[4] = {5, 6, 7, 0};
    bool has[4] = {true, false, true, false};
    test_work t;
    tw_init(&t);
    tw_wait(&t, gate, 1);
    tw_buffer(&t, 3, 4);
    tw_upload(&t, 3, idx, has, 4);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    /* BUFFER takes effect at submit time. */
    assert_int_equal(rsp__device_buffer(dev, 3, &pi, &ph, &cap, NULL), RSP_OK);
    assert_int_equal(cap, 4);
    assert_int_equal((uintptr_t)pi % 64, 0);
    /* The caller may reuse its vectors once submit returns. */
    memset(idx, 0x7f, sizeof idx);
    memset(has, 0, sizeof has);

    /* A smaller request changes nothing. */
    tw_init(&t);
    tw_buffer(&t, 3, 2);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    void *pi2, *ph2;
    uint32_t cap2;
    assert_int_equal(rsp__device_buffer(dev, 3, &pi2, &ph2, &cap2, NULL), RSP_OK);
    assert_ptr_equal(pi2, pi);
    assert_int_equal(cap2, 4);

    /* Grow while the upload into the old arrays is still queued: the old
     * arrays must stay valid until it ran (ASan sees a use-after-free
     * otherwise) and the new arrays must start with what it wrote. */
    tw_init(&t);
    tw_buffer(&t, 3, 100);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    assert_int_equal(rsp__device_buffer(dev, 3, &pi2, &ph2, &cap2, NULL), RSP_OK);
    assert_true(cap2 >= 100);
    rsp_host_fence_signal(gate, 1);
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    const int32_t *ni = pi2;
    const bool *nh = ph2;
    assert_int_equal(ni[0], 5);
    assert_int_equal(ni[1], 6);
    assert_int_equal(ni[2], 7);
    assert_int_equal(ni[3], 0);
    assert_true(nh[0] && !nh[1] && nh[2] && !nh[3]);
    for (uint32_t i = 4; i < cap2; i++) {
        assert_int_equal(ni[i], 0);
        assert_false(nh[i]);
    }

    /* An upload longer than the buffer is refused and queues nothing. */
    int32_t big[128] = {0};
    bool bigh[128] = {0};
    tw_init(&t);
    tw_upload(&t, 3, big, bigh, 128);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "capacity"));
    /* Unless the same list grows the buffer first. */
    big[127] = 9;
    tw_init(&t);
    tw_buffer(&t, 3, 128);
    tw_upload(&t, 3, big, bigh, 128);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    assert_int_equal(rsp__device_buffer(dev, 3, &pi2, NULL, &cap2, NULL), RSP_OK);
    assert_int_equal(((const int32_t *)pi2)[127], 9);
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(gate);
}

static void bad_work_is_refused_and_changes_nothing(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 2, 4, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    fill_pattern(dev, &lay);
    rsp_error err = {0};
    test_work t;

    /* A valid zero followed by an out-of-range slot: the whole list is refused. */
    tw_init(&t);
    tw_zero(&t, 1);
    tw_zero(&t, 4);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "max_slots"));
    tw_init(&t);
    tw_copy(&t, 9, 1);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, &err), RSP_EINVAL);
    tw_init(&t);
    tw_zero(&t, 1);
    t.ops[0].count = 40; /* past the list's slots */
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, &err), RSP_EINVAL);
    tw_init(&t);
    tw_buffer(&t, 0, 4);
    tw_upload(&t, 1, NULL, NULL, 0); /* buffer 1 does not exist: capacity 0 */
    tw_upload(&t, 0, NULL, NULL, 2);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, &err), RSP_EINVAL);
    assert_int_equal(rsp__device_buffer(dev, 0, NULL, NULL, NULL, NULL), RSP_EINVAL);
    tw_init(&t);
    tw_buffer(&t, UINT32_MAX - 1, 4);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, &err), RSP_EINVAL);
    /* Waiting on the device's own timeline ahead of itself would deadlock. */
    tw_init(&t);
    tw_zero(&t, 1);
    rsp_event own;
    assert_int_equal(rsp__device_submit(dev, &t.w, &own, NULL), RSP_OK);
    fill_pattern(dev, &lay);
    tw_init(&t);
    tw_wait(&t, own.handle, own.value + 5);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, &err), RSP_EINVAL);

    uint8_t buf[8];
    assert_int_equal(rsp__device_read(dev, 1, 0, 0, buf, NULL), RSP_EINVAL);
    assert_int_equal(rsp__device_read(dev, 0, 2, 0, buf, NULL), RSP_EINVAL);
    assert_int_equal(rsp__device_read(dev, 0, 0, 4, buf, NULL), RSP_EINVAL);
    assert_int_equal(rsp__device_read(dev, 0, 0, 0, NULL, NULL), RSP_EINVAL);
    assert_int_equal(rsp__device_event_wait(dev, NULL, 0, NULL), RSP_EINVAL);
    for (uint32_t s = 0; s < 4; s++)
        check_slot(dev, &lay, s, (int)s);
    rsp__device_destroy(dev);
}

/* ------------------------------------------------------------------------ */
/* The worker's queue and sleep                                              */
/* ------------------------------------------------------------------------ */

typedef struct producer_rec {
    rsp__device *dev;
    rsp_host_fence *gate;
    uint32_t n;
    uint32_t failures;
    uint32_t non_increasing;
    rsp_event last;
} producer_rec;

/* Acts as the owner: a WAIT on the gate, then n lists (more than the ring
 * holds), so it must block on a full ring until the gate opens. */
static void *producer_main(void *arg)
{
    producer_rec *r = arg;
    test_work t;
    tw_init(&t);
    tw_wait(&t, r->gate, 1);
    if (rsp__device_submit(r->dev, &t.w, &r->last, NULL) != RSP_OK)
        r->failures++;
    for (uint32_t i = 0; i < r->n; i++) {
        tw_init(&t);
        tw_zero(&t, 1 + i % 3);
        tw_copy(&t, 1 + (i + 1) % 3, 1 + i % 3);
        rsp_event e;
        if (rsp__device_submit(r->dev, &t.w, &e, NULL) != RSP_OK)
            r->failures++;
        if (e.value <= r->last.value)
            r->non_increasing++;
        r->last = e;
    }
    return NULL;
}

static void full_ring_blocks_the_producer_until_work_completes(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 4, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    rsp_host_fence *gate = NULL;
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);
    producer_rec rec = {.dev = dev, .gate = gate, .n = 3000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, producer_main, &rec), 0);
    sleep_ms(20);
    rsp_host_fence_signal(gate, 1);
    pthread_join(th, NULL);
    assert_int_equal(rec.failures, 0);
    assert_int_equal(rec.non_increasing, 0);
    assert_int_equal(rsp__device_event_wait(dev, &rec.last, RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(gate);
}

/* Opens gate i once the main thread announced (on `submitted`) that round
 * i's list is queued, sometimes after a nap so that the worker and the
 * waiters are asleep on their futexes when the raise comes. */
typedef struct gate_keeper {
    rsp_host_fence *submitted;
    rsp_host_fence *gate;
    uint32_t rounds;
    uint32_t failures;
} gate_keeper;

static void *gate_keeper_main(void *arg)
{
    gate_keeper *k = arg;
    for (uint32_t i = 1; i <= k->rounds; i++) {
        if (rsp_host_fence_wait(k->submitted, i, RSP_WAIT_FOREVER) != RSP_OK)
            k->failures++;
        if (i % 4 == 0) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
        rsp_host_fence_signal(k->gate, i);
    }
    return NULL;
}

static void no_lost_wakeup_when_submits_alternate_with_idle(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 4, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    rsp_host_fence *submitted = NULL, *gate = NULL;
    assert_int_equal(rsp_host_fence_create(&submitted, NULL), RSP_OK);
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);
    gate_keeper k = {submitted, gate, 2000, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, gate_keeper_main, &k), 0);
    /* Each round's list waits on a gate that is still closed when it is
     * submitted, so it always goes through the worker (never run at once):
     * the worker sleeps between rounds and must be woken by the submit, then
     * sleep on the gate and be woken by its raise, and we sleep on the
     * device timeline. A lost wake-up anywhere hangs here (the ctest timeout
     * reports it). */
    for (uint32_t i = 1; i <= k.rounds; i++) {
        test_work t;
        tw_init(&t);
        tw_wait(&t, gate, i);
        tw_zero(&t, 1 + i % 3);
        rsp_event e;
        assert_int_equal(rsp__device_submit(dev, &t.w, &e, NULL), RSP_OK);
        rsp_host_fence_signal(submitted, i);
        assert_int_equal(rsp__device_event_wait(dev, &e, RSP_WAIT_FOREVER, NULL), RSP_OK);
        assert_true(rsp_host_fence_value(gate) >= i);
    }
    pthread_join(th, NULL);
    assert_int_equal(k.failures, 0);
    /* The device is done with both fences once its last event completed. */
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(gate);
    rsp_host_fence_destroy(submitted);
}

/* destroy drains: work queued behind a gate runs before the device is freed. */
typedef struct gate_opener {
    rsp_host_fence *gate;
    int opened; /* written before the signal; read by main after destroy */
} gate_opener;

static void *open_gate_later(void *arg)
{
    gate_opener *g = arg;
    sleep_ms(10);
    g->opened = 1;
    rsp_host_fence_signal(g->gate, 1);
    return NULL;
}

static void destroy_drains_queued_work(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 4, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    rsp_host_fence *gate = NULL;
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);
    test_work t;
    tw_init(&t);
    tw_wait(&t, gate, 1);
    tw_zero(&t, 1);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    gate_opener g = {gate, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, open_gate_later, &g), 0);
    /* Returns only after the gate opened and the queued work ran; the
     * gate's release and the worker's join order `opened` before our read. */
    rsp__device_destroy(dev);
    assert_int_equal(g.opened, 1);
    pthread_join(th, NULL);
    rsp_host_fence_destroy(gate);
}

/* ------------------------------------------------------------------------ */
/* rsp_host_fence                                                            */
/* ------------------------------------------------------------------------ */

typedef struct fence_waiter {
    rsp_host_fence *f;
    uint64_t value;
    rsp_status status;
    uint64_t seen;
} fence_waiter;

/* A backend may drop its forward-done fence right after the commit that
 * carries it: the queued WAIT keeps the fence alive until it has run. Without
 * the reference the worker reads freed memory here (ASan reports it). */
static void fence_destroyed_while_a_wait_is_queued_stays_alive(void **state)
{
    (void)state;
    const uint64_t sb[1] = {32};
    rsp__layout lay;
    make_layout(&lay, 1, 4, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    fill_pattern(dev, &lay);
    rsp_host_fence *gate = NULL, *forward_done = NULL;
    assert_int_equal(rsp_host_fence_create(&gate, NULL), RSP_OK);
    assert_int_equal(rsp_host_fence_create(&forward_done, NULL), RSP_OK);

    test_work t;
    tw_init(&t);
    tw_wait(&t, gate, 1); /* holds the worker so the next WAIT stays queued */
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    tw_init(&t);
    tw_wait(&t, forward_done, 1);
    tw_zero(&t, 2);
    rsp_event done;
    assert_int_equal(rsp__device_submit(dev, &t.w, &done, NULL), RSP_OK);
    rsp_host_fence_signal(forward_done, 1);
    rsp_host_fence_destroy(forward_done);
    /* A fresh fence at value 0 likely takes the freed memory (glibc reuses
     * the chunk at once; ck_pr's loads are invisible to ASan): a worker
     * reading freed memory would wait on it instead of passing. */
    rsp_host_fence *reuse = NULL;
    assert_int_equal(rsp_host_fence_create(&reuse, NULL), RSP_OK);
    rsp_host_fence_signal(gate, 1);
    const rsp_status st = rsp__device_event_wait(dev, &done, 10ull * 1000000000ull, NULL);
    rsp_host_fence_signal(reuse, 1); /* lets a broken worker finish */
    assert_int_equal(st, RSP_OK);

    check_slot(dev, &lay, 2, -1);
    check_slot(dev, &lay, 1, 1);
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(gate);
    rsp_host_fence_destroy(reuse);
}

static void *fence_waiter_main(void *arg)
{
    fence_waiter *w = arg;
    w->status = rsp_host_fence_wait(w->f, w->value, RSP_WAIT_FOREVER);
    w->seen = rsp_host_fence_value(w->f);
    return NULL;
}

static void fence_is_monotonic_and_wait_times_out(void **state)
{
    (void)state;
    rsp_host_fence *f = NULL;
    assert_int_equal(rsp_host_fence_create(&f, NULL), RSP_OK);
    assert_int_equal(rsp_host_fence_value(f), 0);
    assert_int_equal(rsp_host_fence_wait(f, 0, 0), RSP_OK);
    assert_int_equal(rsp_host_fence_wait(f, 1, 0), RSP_ETIMEDOUT);
    assert_int_equal(rsp_host_fence_wait(f, 1, 2000000), RSP_ETIMEDOUT); /* 2 ms */
    rsp_host_fence_signal(f, 5);
    assert_int_equal(rsp_host_fence_value(f), 5);
    assert_int_equal(rsp_host_fence_wait(f, 3, 0), RSP_OK);
    rsp_host_fence_signal(f, 2); /* never lowers */
    assert_int_equal(rsp_host_fence_value(f), 5);
    assert_int_equal(rsp_host_fence_wait(f, 6, 1000000), RSP_ETIMEDOUT);

    /* A sleeping waiter wakes on the raise that reaches its value. */
    fence_waiter w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (fence_waiter){f, 6 + (uint64_t)i % 2 * 4, RSP_EDEVICE, 0};
        assert_int_equal(pthread_create(&th[i], NULL, fence_waiter_main, &w[i]), 0);
    }
    sleep_ms(10);
    rsp_host_fence_signal(f, 7);
    rsp_host_fence_signal(f, UINT64_C(1) << 40);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].status, RSP_OK);
        assert_true(w[i].seen >= w[i].value);
    }
    rsp_error err = {0};
    assert_int_equal(rsp_host_fence_create(NULL, &err), RSP_EINVAL);
    assert_int_equal(rsp_host_fence_wait(NULL, 1, 0), RSP_EINVAL);
    rsp_host_fence_signal(NULL, 1); /* no-op */
    rsp_host_fence_destroy(NULL);   /* no-op */
    rsp_host_fence_destroy(f);
}

static void event_wait_timeout_names_the_fence(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 2, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    rsp_host_fence *f = NULL;
    assert_int_equal(rsp_host_fence_create(&f, NULL), RSP_OK);
    rsp_event e = rsp_event_host(f, 3);
    rsp_error err = {0};
    assert_int_equal(rsp__device_event_wait(dev, &e, 1000000, &err), RSP_ETIMEDOUT);
    assert_int_equal(err.status, RSP_ETIMEDOUT);
    assert_non_null(strstr(err.message, "did not reach 3"));
    rsp_host_fence_signal(f, 3);
    assert_int_equal(rsp__device_event_wait(dev, &e, 0, NULL), RSP_OK);
    rsp__device_destroy(dev);
    rsp_host_fence_destroy(f);
}

/* The host device waits on host fences only: any other kind, and a handle
 * that does not carry a live fence's tag, is refused (RSP_EINVAL) by the
 * check the owner makes before the core changes, by event_wait, and by
 * submit itself; nothing is queued and nothing is written through it. */
static void host_device_refuses_events_it_cannot_wait_on(void **state)
{
    (void)state;
    const uint64_t sb[1] = {8};
    rsp__layout lay;
    make_layout(&lay, 1, 4, 1, sb);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, NULL), RSP_OK);
    uint64_t stray[16];
    memset(stray, 0, sizeof stray);
    const rsp_event bad[] = {
        rsp_event_cuda(stray),
        {.kind = RSP_EVENT_NONE, .handle = stray, .value = 1},
        {.kind = (rsp_event_kind)9, .handle = NULL},
        rsp_event_host((rsp_host_fence *)stray, 1),
    };
    const char *why[] = {"CUDA event", "RSP_EVENT_NONE", "not an event kind",
                         "not a live rsp_host_fence"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rsp_error err = {0};
        assert_int_equal(rsp__device_check_event(dev, &bad[i], &err), RSP_EINVAL);
        assert_non_null(strstr(err.message, why[i]));
        assert_int_equal(rsp__device_event_wait(dev, &bad[i], 0, &err), RSP_EINVAL);
        test_work t;
        tw_init(&t);
        rsp__op *op = &t.ops[t.w.num_ops++];
        op->kind = RSP__OP_WAIT;
        op->event = bad[i];
        tw_zero(&t, 1);
        rsp_event done;
        rsp_status st = rsp__device_submit(dev, &t.w, &done, &err);
        /* A NULL handle is "complete" for submit whatever the kind: the
         * kind's range is checked where events enter (post, owner). */
        assert_int_equal(st, bad[i].handle ? RSP_EINVAL : RSP_OK);
    }
    for (size_t i = 0; i < sizeof stray / sizeof stray[0]; i++)
        assert_true(stray[i] == 0);
    /* NULL and a zeroed event are complete; a real fence is accepted. */
    rsp_event none = {0};
    assert_int_equal(rsp__device_check_event(dev, NULL, NULL), RSP_OK);
    assert_int_equal(rsp__device_check_event(dev, &none, NULL), RSP_OK);
    assert_int_equal(rsp__device_event_wait(dev, &none, 0, NULL), RSP_OK);
    rsp_host_fence *f = NULL;
    assert_int_equal(rsp_host_fence_create(&f, NULL), RSP_OK);
    rsp_event good = rsp_event_host(f, 0);
    assert_int_equal(rsp__device_check_event(dev, &good, NULL), RSP_OK);
    assert_int_equal(rsp__device_event_wait(dev, &good, 0, NULL), RSP_OK);
    rsp_host_fence_destroy(f);
    rsp__device_destroy(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(create_gives_zeroed_64_byte_aligned_blocks),
        cmocka_unit_test(oom_at_creation_fails_cleanly),
        cmocka_unit_test(cuda_kind_without_cuda_is_enodev),
        cmocka_unit_test(copy_after_zero_sees_zeros_fifo),
        cmocka_unit_test(fence_destroyed_while_a_wait_is_queued_stays_alive),
        cmocka_unit_test(zero_and_copy_touch_exact_bytes_of_odd_sizes),
        cmocka_unit_test(wait_blocks_later_work_until_fence_signalled),
        cmocka_unit_test(event_values_increase_per_submit),
        cmocka_unit_test(no_work_submit_on_idle_device_is_complete_at_once),
        cmocka_unit_test(no_work_submit_behind_pending_work_waits_for_it),
        cmocka_unit_test(buffer_upload_and_growth_keep_contents),
        cmocka_unit_test(bad_work_is_refused_and_changes_nothing),
        cmocka_unit_test(full_ring_blocks_the_producer_until_work_completes),
        cmocka_unit_test(no_lost_wakeup_when_submits_alternate_with_idle),
        cmocka_unit_test(destroy_drains_queued_work),
        cmocka_unit_test(fence_is_monotonic_and_wait_times_out),
        cmocka_unit_test(event_wait_timeout_names_the_fence),
        cmocka_unit_test(host_device_refuses_events_it_cannot_wait_on),
    };
    return cmocka_run_group_tests_name("device_host", tests, NULL, NULL);
}
