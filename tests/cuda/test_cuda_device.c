/*
 * test_cuda_device: the device contract (device.h), one suite run on both
 * devices. Every scenario is registered twice, "host: name" and
 * "cuda: name": the host half always runs; the CUDA half needs a GPU and
 * otherwise reports "skipped: no CUDA device". A few CUDA-only rules follow
 * (unchanged uploads skipped, creation without a device fails cleanly; that
 * one runs everywhere).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Work lists are built by hand, so each test pins one device rule.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/layout.h"
#include "core/work.h"
#include "cuda/fixture.h"
#include "cuda/gpu.h"
#include "device/device.h"
#ifdef RSP_HAVE_CUDA
#include "cuda/gpu_helpers.h"
#endif

static rsp_device_kind kind_host = RSP_DEVICE_HOST;
static rsp_device_kind kind_cuda = RSP_DEVICE_CUDA;

/* ------------------------------------------------------------------------ */
/* Device-kind neutral helpers                                               */
/* ------------------------------------------------------------------------ */

static rsp_device_kind kind_of(void **state)
{
    const rsp_device_kind kind = *(const rsp_device_kind *)*state;
    if (kind == RSP_DEVICE_CUDA)
        RSP_TEST_REQUIRE_GPU();
    return kind;
}

static rsp__device *dev_new(rsp_device_kind kind, const rsp__layout *lay)
{
    rsp__device *dev = NULL;
    rsp_error err = {0};
    rsp_status st = rsp__device_create(kind, 0, lay, &dev, &err);
    if (st != RSP_OK)
        fail_msg("device create: %s", err.message);
    assert_int_equal(rsp__device_kind(dev), kind);
    return dev;
}

static uint8_t pattern(uint32_t b, uint32_t l, uint32_t s, uint64_t i)
{
    return (uint8_t)(1 + ((b * 131u + l * 31u + s * 7u + (uint32_t)i * 3u) % 251u));
}

/* Write host bytes into block memory of either device (idle device only). */
static void poke(rsp_device_kind kind, void *dst, const void *src, size_t n)
{
    if (kind == RSP_DEVICE_HOST) {
        memcpy(dst, src, n);
        return;
    }
#ifdef RSP_HAVE_CUDA
    RSP_TEST_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
#else
    fail_msg("CUDA memory without CUDA");
#endif
}

static void peek(rsp_device_kind kind, void *dst, const void *src, size_t n)
{
    if (kind == RSP_DEVICE_HOST) {
        memcpy(dst, src, n);
        return;
    }
#ifdef RSP_HAVE_CUDA
    RSP_TEST_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
#else
    fail_msg("CUDA memory without CUDA");
#endif
}

/* Every byte of every block = pattern(); waits for the device first. */
static void fill_pattern(rsp_device_kind kind, rsp__device *dev, const rsp__layout *lay)
{
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    for (uint32_t b = 0; b < lay->num_blocks; b++) {
        uint8_t *img = malloc(lay->blocks[b].bytes);
        assert_non_null(img);
        for (uint32_t l = 0; l < lay->num_layers; l++)
            for (uint32_t s = 0; s < lay->max_slots; s++)
                for (uint64_t i = 0; i < lay->blocks[b].slot_bytes; i++)
                    img[rsp__layout_offset(lay, b, l, s) + i] = pattern(b, l, s, i);
        poke(kind, rsp__device_block_base(dev, b), img, lay->blocks[b].bytes);
        free(img);
    }
}

/* Slot s, read through rsp__device_read, equals slot `from`'s pattern
 * (from < 0: zeros) in every block and layer. */
static void check_slot(rsp__device *dev, const rsp__layout *lay, uint32_t s, int from)
{
    uint8_t *buf = malloc(lay->blocks[3].slot_bytes);
    assert_non_null(buf);
    for (uint32_t b = 0; b < lay->num_blocks; b++)
        for (uint32_t l = 0; l < lay->num_layers; l++) {
            memset(buf, 0xAB, lay->blocks[b].slot_bytes);
            assert_int_equal(rsp__device_read(dev, b, l, s, buf, NULL), RSP_OK);
            for (uint64_t i = 0; i < lay->blocks[b].slot_bytes; i++) {
                const uint8_t want = from < 0 ? 0 : pattern(b, l, (uint32_t)from, i);
                if (buf[i] != want)
                    fail_msg("slot %u block %s layer %u byte %llu: got %u want %u (from %d)", s,
                             lay->blocks[b].name, l, (unsigned long long)i, buf[i], want, from);
            }
        }
    free(buf);
}

/* A gate: work after a WAIT on its event stays queued until the gate opens.
 * Host: an rsp_host_fence value; CUDA: a kernel spinning on a caller
 * stream, and the event recorded after it. */
typedef struct gate {
    rsp_device_kind kind;
    rsp_host_fence *fence;
#ifdef RSP_HAVE_CUDA
    rsp_test_gate *g;
    cudaEvent_t ev;
#endif
} gate;

static rsp_event gate_close(gate *g, rsp_device_kind kind)
{
    memset(g, 0, sizeof *g);
    g->kind = kind;
    if (kind == RSP_DEVICE_HOST) {
        assert_int_equal(rsp_host_fence_create(&g->fence, NULL), RSP_OK);
        return rsp_event_host(g->fence, 1);
    }
#ifdef RSP_HAVE_CUDA
    RSP_TEST_CUDA(rsp_test_gate_new(&g->g));
    RSP_TEST_CUDA(rsp_test_gate_close(g->g, &g->ev));
    return rsp_event_cuda((void *)g->ev);
#else
    fail_msg("CUDA gate without CUDA");
    return (rsp_event){0};
#endif
}

static void gate_open(gate *g)
{
    if (g->kind == RSP_DEVICE_HOST) {
        rsp_host_fence_signal(g->fence, 1);
        return;
    }
#ifdef RSP_HAVE_CUDA
    rsp_test_gate_open(g->g);
#endif
}

/* Only once nothing waits on the gate any more. */
static void gate_free(gate *g)
{
    if (g->kind == RSP_DEVICE_HOST) {
        rsp_host_fence_destroy(g->fence);
        return;
    }
#ifdef RSP_HAVE_CUDA
    rsp_test_gate_free(g->g);
    (void)cudaEventDestroy(g->ev);
#endif
}

static void read_buffer(rsp_device_kind kind, rsp__device *dev, uint32_t id, int32_t *idx,
                        bool *has, uint32_t n, uint32_t *cap)
{
    void *di = NULL, *dh = NULL;
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    assert_int_equal(rsp__device_buffer(dev, id, &di, &dh, cap, NULL), RSP_OK);
    assert_non_null(di);
    assert_non_null(dh);
    peek(kind, idx, di, n * sizeof *idx);
    peek(kind, has, dh, n * sizeof *has);
}

/* ------------------------------------------------------------------------ */
/* Both devices                                                              */
/* ------------------------------------------------------------------------ */

static void storage_starts_zeroed(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    make_layout(&lay, 3, 6);
    rsp__device *dev = dev_new(kind, &lay);
    for (uint32_t b = 0; b < lay.num_blocks; b++) {
        assert_non_null(rsp__device_block_base(dev, b));
        for (uint32_t c = 0; c < b; c++)
            assert_ptr_not_equal(rsp__device_block_base(dev, b), rsp__device_block_base(dev, c));
    }
    for (uint32_t s = 0; s < lay.max_slots; s++)
        check_slot(dev, &lay, s, -1);
    rsp__device_destroy(dev);
}

static void zero_and_copy_batches_touch_exact_bytes(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    make_layout(&lay, 3, 9);
    rsp__device *dev = dev_new(kind, &lay);
    fill_pattern(kind, dev, &lay);

    /* one list: zero 2, 8 (the largest slot) and 4 in one op; copy 1->3,
     * 5->0 and 7->6 (adjacent: misaligned for bf16x3) in another; then a
     * second COPY op copies the zeroed largest slot onto 1 */
    test_work t;
    tw_init(&t);
    const uint32_t z[3] = {2, 8, 4};
    tw_zero(&t, z, 3);
    const rsp__copy c[3] = {{1, 3}, {5, 0}, {7, 6}};
    tw_copy(&t, c, 3);
    const rsp__copy c2[1] = {{8, 1}}; /* copies the zeros of 8 */
    tw_copy(&t, c2, 1);
    rsp_event done;
    assert_int_equal(rsp__device_submit(dev, &t.w, &done, NULL), RSP_OK);
    assert_int_equal(rsp__device_event_wait(dev, &done, RSP_WAIT_FOREVER, NULL), RSP_OK);

    check_slot(dev, &lay, 0, 5);
    check_slot(dev, &lay, 1, -1);
    check_slot(dev, &lay, 2, -1);
    check_slot(dev, &lay, 3, 1);
    check_slot(dev, &lay, 4, -1);
    check_slot(dev, &lay, 5, 5);
    check_slot(dev, &lay, 6, 7);
    check_slot(dev, &lay, 7, 7);
    check_slot(dev, &lay, 8, -1);
    rsp__device_destroy(dev);
}

static void copy_onto_itself_changes_nothing(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    make_layout(&lay, 2, 4);
    rsp__device *dev = dev_new(kind, &lay);
    fill_pattern(kind, dev, &lay);
    test_work t;
    tw_init(&t);
    const rsp__copy c[2] = {{3, 3}, {1, 2}};
    tw_copy(&t, c, 2);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    check_slot(dev, &lay, 3, 3);
    check_slot(dev, &lay, 2, 1);
    check_slot(dev, &lay, 0, 0);
    rsp__device_destroy(dev);
}

static void submits_run_in_order_behind_a_wait(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    make_layout(&lay, 2, 4);
    rsp__device *dev = dev_new(kind, &lay);
    fill_pattern(kind, dev, &lay);
    gate g;
    const rsp_event closed = gate_close(&g, kind);

    /* three submits queued behind the closed gate; they must run in order */
    test_work t;
    tw_init(&t);
    tw_wait(&t, closed);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    tw_init(&t);
    const uint32_t z = 1;
    tw_zero(&t, &z, 1);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    tw_init(&t);
    const rsp__copy c = {1, 2};
    tw_copy(&t, &c, 1);
    rsp_event done;
    assert_int_equal(rsp__device_submit(dev, &t.w, &done, NULL), RSP_OK);

    /* the gate is closed, so the work cannot have run: a fact, not a timing */
    assert_int_equal(rsp__device_event_wait(dev, &done, 0, NULL), RSP_ETIMEDOUT);
    rsp_error err = {0};
    assert_int_equal(rsp__device_event_wait(dev, &done, 1000000, &err), RSP_ETIMEDOUT);
    assert_int_equal(err.status, RSP_ETIMEDOUT);
    gate_open(&g);
    assert_int_equal(rsp__device_event_wait(dev, &done, RSP_WAIT_FOREVER, NULL), RSP_OK);

    check_slot(dev, &lay, 1, -1);
    check_slot(dev, &lay, 2, -1); /* the copy saw the zeroed source */
    check_slot(dev, &lay, 3, 3);
    rsp__device_destroy(dev);
    gate_free(&g);
}

static void null_event_is_complete(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    make_layout(&lay, 1, 2);
    rsp__device *dev = dev_new(kind, &lay);
    rsp_event none = {.handle = NULL, .value = 7};
    assert_int_equal(rsp__device_event_wait(dev, &none, 0, NULL), RSP_OK);
    /* a WAIT on it in a list is a no-op too */
    test_work t;
    tw_init(&t);
    tw_wait(&t, none);
    rsp_event done;
    assert_int_equal(rsp__device_submit(dev, &t.w, &done, NULL), RSP_OK);
    assert_int_equal(rsp__device_event_wait(dev, &done, RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp__device_destroy(dev);
}

static void buffers_upload_and_grow_keeping_entries(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    make_layout(&lay, 1, 4);
    rsp__device *dev = dev_new(kind, &lay);

    const int32_t idx[4] = {3, 0, 2, 0};
    const bool has[4] = {true, false, true, false};
    test_work t;
    tw_init(&t);
    tw_buffer(&t, 5, 4);
    tw_upload(&t, 5, idx, has, 4);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    int32_t ri[64];
    bool rh[64];
    uint32_t cap = 0;
    read_buffer(kind, dev, 5, ri, rh, 4, &cap);
    assert_true(cap >= 4);
    assert_memory_equal(ri, idx, sizeof idx);
    assert_memory_equal(rh, has, sizeof has);

    /* grow: the old entries stay, the new pointer is reported at once */
    tw_init(&t);
    tw_buffer(&t, 5, 64);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    read_buffer(kind, dev, 5, ri, rh, 4, &cap);
    assert_true(cap >= 64);
    assert_memory_equal(ri, idx, sizeof idx);
    assert_memory_equal(rh, has, sizeof has);

    /* a longer upload, then a shorter one over it */
    int32_t big[40];
    bool bh[40];
    for (int i = 0; i < 40; i++) {
        big[i] = i % 4;
        bh[i] = i % 3 == 0;
    }
    tw_init(&t);
    tw_upload(&t, 5, big, bh, 40);
    tw_upload(&t, 5, idx, has, 4);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    read_buffer(kind, dev, 5, ri, rh, 40, &cap);
    assert_memory_equal(ri, idx, sizeof idx);
    assert_memory_equal(ri + 4, big + 4, 36 * sizeof *big);
    assert_memory_equal(rh + 4, bh + 4, 36 * sizeof *bh);

    rsp_error err = {0};
    void *p = NULL;
    assert_int_equal(rsp__device_buffer(dev, 6, &p, NULL, NULL, &err), RSP_EINVAL);
    assert_int_equal(err.status, RSP_EINVAL);
    rsp__device_destroy(dev);
}

static void bad_work_is_refused_and_changes_nothing(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    make_layout(&lay, 2, 4);
    rsp__device *dev = dev_new(kind, &lay);
    fill_pattern(kind, dev, &lay);

    test_work t;
    rsp_error err = {0};
    /* a valid zero before a bad op: the whole list is refused */
    tw_init(&t);
    const uint32_t z[2] = {1, 4};
    tw_zero(&t, z, 1);
    tw_zero(&t, z + 1, 1);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, &err), RSP_EINVAL);
    assert_int_equal(err.status, RSP_EINVAL);

    tw_init(&t);
    const rsp__copy c = {0, 4};
    tw_copy(&t, &c, 1);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_EINVAL);

    const int32_t idx[2] = {1, 2};
    const bool has[2] = {true, true};
    tw_init(&t);
    tw_upload(&t, 9, idx, has, 2); /* buffer 9 never created */
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_EINVAL);
    tw_init(&t);
    tw_buffer(&t, 9, 1);
    tw_upload(&t, 9, idx, has, 2); /* longer than the buffer */
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_EINVAL);

    uint8_t b;
    assert_int_equal(rsp__device_read(dev, 4, 0, 0, &b, NULL), RSP_EINVAL);
    assert_int_equal(rsp__device_read(dev, 0, 2, 0, &b, NULL), RSP_EINVAL);
    assert_int_equal(rsp__device_read(dev, 0, 0, 4, &b, NULL), RSP_EINVAL);

    for (uint32_t s = 0; s < 4; s++)
        check_slot(dev, &lay, s, (int)s);
    rsp__device_destroy(dev);
}

/* Thousands of submits: wraps the CUDA event ring (1024) and reuses every
 * staging buffer many times; each step's bytes must still be exact. */
static void many_submits_recycle_events_and_staging(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    make_layout(&lay, 1, 6);
    rsp__device *dev = dev_new(kind, &lay);
    fill_pattern(kind, dev, &lay);

    /* slot 5 = the source (never written); each step copies it to 1 + i % 4
     * and zeroes another, and uploads a vector naming the step */
    int32_t idx[2500][3];
    bool has[3] = {true, false, true};
    rsp_event last = {0};
    for (uint32_t i = 0; i < 2500; i++) {
        test_work t;
        tw_init(&t);
        if (i == 0)
            tw_buffer(&t, 0, 3);
        const rsp__copy c = {5, 1 + i % 4};
        tw_copy(&t, &c, 1);
        const uint32_t z = 1 + (i + 1) % 4;
        tw_zero(&t, &z, 1);
        idx[i][0] = (int32_t)(i % 5);
        idx[i][1] = (int32_t)(i / 5 % 5);
        idx[i][2] = 0;
        tw_upload(&t, 0, idx[i], has, 3);
        assert_int_equal(rsp__device_submit(dev, &t.w, &last, NULL), RSP_OK);
    }
    assert_int_equal(rsp__device_event_wait(dev, &last, RSP_WAIT_FOREVER, NULL), RSP_OK);
    /* last step i = 2499: copied into 1 + 2499 % 4 = 4, zeroed 1 + 2500 % 4 = 1 */
    check_slot(dev, &lay, 4, 5);
    check_slot(dev, &lay, 1, -1);
    check_slot(dev, &lay, 5, 5);
    int32_t ri[3];
    bool rh[3];
    uint32_t cap;
    read_buffer(kind, dev, 0, ri, rh, 3, &cap);
    assert_memory_equal(ri, idx[2499], sizeof ri);
    assert_memory_equal(rh, has, sizeof rh);
    rsp__device_destroy(dev);
}

/* ------------------------------------------------------------------------ */
/* CUDA only                                                                 */
/* ------------------------------------------------------------------------ */

/* Runs without a GPU too: that is the case it pins. */
static void cuda_create_without_device_or_bad_ordinal_is_enodev(void **state)
{
    (void)state;
    rsp__layout lay;
    make_layout(&lay, 1, 2);
    char why[160];
    const bool gpu = rsp_test_gpu(why, sizeof why);
    const int ordinals[3] = {0, -1, 4096};
    for (int i = gpu ? 1 : 0; i < 3; i++) {
        rsp__device *dev = (rsp__device *)&lay; /* must stay untouched */
        rsp_error err = {0};
        assert_int_equal(rsp__device_create(RSP_DEVICE_CUDA, ordinals[i], &lay, &dev, &err),
                         RSP_ENODEV);
        assert_int_equal(err.status, RSP_ENODEV);
        assert_true(strlen(err.message) > 0);
        assert_ptr_equal(dev, (rsp__device *)&lay);
    }
}

#ifdef RSP_HAVE_CUDA
static void cuda_oom_at_creation_fails_cleanly(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    rsp__layout lay;
    make_layout(&lay, 1, 2);
    /* block 3 asks for 2^50 bytes: no GPU has that */
    lay.blocks[3].bytes = UINT64_C(1) << 50;
    size_t free0 = 0, free1 = 0, total = 0;
    RSP_TEST_CUDA(cudaMemGetInfo(&free0, &total));
    rsp__device *dev = (rsp__device *)&lay;
    rsp_error err = {0};
    assert_int_equal(rsp__device_create(RSP_DEVICE_CUDA, 0, &lay, &dev, &err), RSP_ENOMEM);
    assert_non_null(strstr(err.message, "f64x4097"));
    assert_ptr_equal(dev, (rsp__device *)&lay);
    RSP_TEST_CUDA(cudaMemGetInfo(&free1, &total));
    /* blocks 0..2 were freed again (allow the allocator's granularity) */
    assert_true(free1 + (size_t)(64u << 20) >= free0);
    /* and the device works afterwards */
    make_layout(&lay, 1, 2);
    dev = dev_new(RSP_DEVICE_CUDA, &lay);
    rsp__device_destroy(dev);
}

/* A checkpoint tier that does not fit (the device tier in GPU memory, the
 * host tier in pinned host memory: 2^30 slots of 32 KiB) fails creation
 * with RSP_ENOMEM naming the tier, after the request slots were allocated:
 * they are freed again, and a device with small tiers works afterwards. */
static void cuda_tier_oom_at_creation_fails_cleanly(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    static const char *const what[2] = {"device-tier checkpoints", "host-tier checkpoints"};
    for (int t = 0; t < 2; t++) {
        rsp__layout lay;
        make_layout(&lay, 1, 2);
        if (t == 0)
            lay.max_checkpoints = 1u << 30;
        else
            lay.max_host_checkpoints = 1u << 30;
        lay.num_ids = lay.max_slots + lay.max_checkpoints + lay.max_host_checkpoints;
        size_t free0 = 0, free1 = 0, total = 0;
        RSP_TEST_CUDA(cudaMemGetInfo(&free0, &total));
        rsp__device *dev = (rsp__device *)&lay;
        rsp_error err = {0};
        assert_int_equal(rsp__device_create(RSP_DEVICE_CUDA, 0, &lay, &dev, &err), RSP_ENOMEM);
        if (!strstr(err.message, what[t]))
            fail_msg("message \"%s\" does not name the %s", err.message, what[t]);
        assert_ptr_equal(dev, (rsp__device *)&lay);
        RSP_TEST_CUDA(cudaMemGetInfo(&free1, &total));
        assert_true(free1 + (size_t)(64u << 20) >= free0);
    }
    rsp__layout lay;
    make_layout(&lay, 1, 2);
    lay.max_checkpoints = 2;
    lay.max_host_checkpoints = 3;
    lay.num_ids = 7;
    rsp__device *dev = dev_new(RSP_DEVICE_CUDA, &lay);
    rsp__device_destroy(dev);
}

static void cuda_unchanged_upload_is_skipped(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    rsp__layout lay;
    make_layout(&lay, 1, 4);
    rsp__device *dev = dev_new(RSP_DEVICE_CUDA, &lay);
    const int32_t idx[3] = {1, 2, 3};
    const bool has[3] = {true, true, false};
    test_work t;
    tw_init(&t);
    tw_buffer(&t, 0, 3);
    tw_upload(&t, 0, idx, has, 3);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);

    /* scribble on the device copy behind the device's back: an upload of
     * the same entries is skipped, so the scribble survives it */
    void *di = NULL;
    assert_int_equal(rsp__device_buffer(dev, 0, &di, NULL, NULL, NULL), RSP_OK);
    RSP_TEST_CUDA(cudaMemset(di, 0x7f, sizeof idx));
    tw_init(&t);
    tw_upload(&t, 0, idx, has, 3);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    int32_t ri[3];
    bool rh[3];
    uint32_t cap;
    read_buffer(RSP_DEVICE_CUDA, dev, 0, ri, rh, 3, &cap);
    assert_int_equal(ri[0], 0x7f7f7f7f);

    /* a changed vector is uploaded */
    const int32_t idx2[3] = {1, 2, 0};
    tw_init(&t);
    tw_upload(&t, 0, idx2, has, 3);
    assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
    read_buffer(RSP_DEVICE_CUDA, dev, 0, ri, rh, 3, &cap);
    assert_memory_equal(ri, idx2, sizeof ri);
    assert_memory_equal(rh, has, sizeof rh);
    rsp__device_destroy(dev);
}

static void cuda_event_wait_keeps_the_callers_current_device(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    int n = 0;
    RSP_TEST_CUDA(cudaGetDeviceCount(&n));
    rsp__layout lay;
    make_layout(&lay, 1, 2);
    rsp__device *dev = dev_new(RSP_DEVICE_CUDA, &lay);
    const int other = n > 1 ? 1 : 0;
    RSP_TEST_CUDA(cudaSetDevice(other));
    test_work t;
    tw_init(&t);
    const uint32_t z = 1;
    tw_zero(&t, &z, 1);
    rsp_event done;
    assert_int_equal(rsp__device_submit(dev, &t.w, &done, NULL), RSP_OK);
    assert_int_equal(rsp__device_event_wait(dev, &done, RSP_WAIT_FOREVER, NULL), RSP_OK);
    uint8_t b;
    assert_int_equal(rsp__device_read(dev, 0, 0, 1, &b, NULL), RSP_OK);
    int cur = -1;
    RSP_TEST_CUDA(cudaGetDevice(&cur));
    assert_int_equal(cur, other);
    RSP_TEST_CUDA(cudaSetDevice(0));
    rsp__device_destroy(dev);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        RSP_TEST_BOTH(storage_starts_zeroed),
        RSP_TEST_BOTH(zero_and_copy_batches_touch_exact_bytes),
        RSP_TEST_BOTH(copy_onto_itself_changes_nothing),
        RSP_TEST_BOTH(submits_run_in_order_behind_a_wait),
        RSP_TEST_BOTH(null_event_is_complete),
        RSP_TEST_BOTH(buffers_upload_and_grow_keeping_entries),
        RSP_TEST_BOTH(bad_work_is_refused_and_changes_nothing),
        RSP_TEST_BOTH(many_submits_recycle_events_and_staging),
        cmocka_unit_test(cuda_create_without_device_or_bad_ordinal_is_enodev),
#ifdef RSP_HAVE_CUDA
        cmocka_unit_test(cuda_oom_at_creation_fails_cleanly),
        cmocka_unit_test(cuda_tier_oom_at_creation_fails_cleanly),
        cmocka_unit_test(cuda_unchanged_upload_is_skipped),
        cmocka_unit_test(cuda_event_wait_keeps_the_callers_current_device),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
