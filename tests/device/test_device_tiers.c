/*
 * test_device_tiers: the checkpoint tiers of the device (docs/device.md
 * "Three storages, one id space"). One suite on both devices: every
 * scenario is registered twice, "host: name" and "cuda: name"; the host half
 * always runs, the CUDA half needs a GPU and otherwise reports "skipped: no
 * CUDA device".
 * SPDX-License-Identifier: Apache-2.0
 *
 * Layouts come from rsp__layout_build (the real id space: request slots
 * [0, max_slots), device tier next, host tier last). Every byte of every
 * slot id is checked with rsp__device_read against a reference model that
 * applies the same ops, so a copy that lands in the wrong storage, layer or
 * index, or an op that changes what it must not, is seen.
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

static rsp_device_kind kind_host = RSP_DEVICE_HOST;
static rsp_device_kind kind_cuda = RSP_DEVICE_CUDA;

/* ------------------------------------------------------------------------ */
/* Fixture: a layout, its device and a reference model of every slot id     */
/* ------------------------------------------------------------------------ */

/* Blocks of awkward sizes: bf16[3] (6 bytes), u8[5], f32[1025] (4100
 * bytes, more than a page), so regions straddle alignments and chunks. */
static rsp_block_config blocks[3] = {
    {.name = "bf16x3", .dtype = RSP_DTYPE_BF16, .ndim = 1, .shape = {3}},
    {.name = "u8x5", .dtype = RSP_DTYPE_U8, .ndim = 1, .shape = {5}},
    {.name = "f32x1025", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {1025}},
};

typedef struct fixture {
    rsp_device_kind kind;
    rsp__layout lay; /* the device keeps a pointer: lives as long as it */
    rsp__device *dev;
    /* model[b] holds [num_ids][num_layers][slot_bytes of b]: what each slot
     * id must read. */
    uint8_t *model[3];
} fixture;

static rsp_device_kind kind_of(void **state)
{
    const rsp_device_kind kind = *(const rsp_device_kind *)*state;
    if (kind == RSP_DEVICE_CUDA)
        RSP_TEST_REQUIRE_GPU();
    return kind;
}

static void build_layout(rsp__layout *lay, uint32_t slots, uint32_t dev_ck, uint32_t host_ck)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.blocks = blocks;
    cfg.num_blocks = 3;
    cfg.num_layers = 3;
    cfg.max_slots = slots;
    cfg.max_checkpoints = dev_ck;
    cfg.max_host_checkpoints = host_ck;
    rsp_error err = {0};
    if (rsp__layout_build(&cfg, lay, &err) != RSP_OK)
        fail_msg("layout: %s", err.message);
    assert_int_equal(lay->num_ids, slots + dev_ck + host_ck);
}

static uint8_t *model_at(fixture *f, uint32_t b, uint32_t l, uint32_t id)
{
    const uint64_t sb = f->lay.blocks[b].slot_bytes;
    return f->model[b] + ((uint64_t)id * f->lay.num_layers + l) * sb;
}

static void fixture_open(fixture *f, rsp_device_kind kind, uint32_t slots, uint32_t dev_ck,
                         uint32_t host_ck)
{
    memset(f, 0, sizeof *f);
    f->kind = kind;
    build_layout(&f->lay, slots, dev_ck, host_ck);
    rsp_error err = {0};
    if (rsp__device_create(kind, 0, &f->lay, &f->dev, &err) != RSP_OK)
        fail_msg("device create: %s", err.message);
    for (uint32_t b = 0; b < f->lay.num_blocks; b++) {
        const uint64_t n = f->lay.blocks[b].slot_bytes * f->lay.num_layers * f->lay.num_ids;
        f->model[b] = calloc(1, (size_t)n); /* every storage starts zeroed */
        assert_non_null(f->model[b]);
    }
}

static void fixture_close(fixture *f)
{
    rsp__device_destroy(f->dev);
    for (uint32_t b = 0; b < 3; b++)
        free(f->model[b]);
}

/* Every byte of every slot id reads what the model says. */
static void check_all(fixture *f)
{
    rsp_error err = {0};
    uint8_t buf[4100];
    for (uint32_t id = 0; id < f->lay.num_ids; id++)
        for (uint32_t b = 0; b < f->lay.num_blocks; b++)
            for (uint32_t l = 0; l < f->lay.num_layers; l++) {
                const size_t n = (size_t)f->lay.blocks[b].slot_bytes;
                assert_true(n <= sizeof buf);
                memset(buf, 0xee, n);
                if (rsp__device_read(f->dev, b, l, id, buf, &err) != RSP_OK)
                    fail_msg("read id %u block %u layer %u: %s", id, b, l, err.message);
                if (memcmp(buf, model_at(f, b, l, id), n) != 0)
                    fail_msg("slot id %u (%s) block %u layer %u differs from the model", id,
                             id < f->lay.max_slots                            ? "request"
                             : id < f->lay.max_slots + f->lay.max_checkpoints ? "device tier"
                                                                              : "host tier",
                             b, l);
            }
}

/* The model's side of a submitted list: its ops in order, each COPY op's
 * pairs as one batch (sources read before any destination is written). */
static void model_apply(fixture *f, const test_work *t)
{
    for (uint32_t i = 0; i < t->w.num_ops; i++) {
        const rsp__op *op = &t->ops[i];
        for (uint32_t b = 0; b < f->lay.num_blocks; b++)
            for (uint32_t l = 0; l < f->lay.num_layers; l++) {
                const size_t n = (size_t)f->lay.blocks[b].slot_bytes;
                if (op->kind == RSP__OP_ZERO) {
                    for (uint32_t k = 0; k < op->count; k++)
                        memset(model_at(f, b, l, t->slots[op->first + k]), 0, n);
                    continue;
                }
                uint8_t *tmp = malloc(n * op->count + 1);
                assert_non_null(tmp);
                for (uint32_t k = 0; k < op->count; k++)
                    memcpy(tmp + k * n, model_at(f, b, l, t->pairs[op->first + k].src), n);
                for (uint32_t k = 0; k < op->count; k++)
                    memcpy(model_at(f, b, l, t->pairs[op->first + k].dst), tmp + k * n, n);
                free(tmp);
            }
    }
}

static void submit_ok(fixture *f, const test_work *t)
{
    rsp_error err = {0};
    if (rsp__device_submit(f->dev, &t->w, NULL, &err) != RSP_OK)
        fail_msg("submit: %s", err.message);
    model_apply(f, t);
}

/* Refused whole: RSP_EINVAL, a message naming `needle`, nothing changed. */
static void submit_refused(fixture *f, const test_work *t, const char *needle)
{
    rsp_error err = {0};
    assert_int_equal(rsp__device_submit(f->dev, &t->w, NULL, &err), RSP_EINVAL);
    if (!strstr(err.message, needle))
        fail_msg("message \"%s\" does not say \"%s\"", err.message, needle);
    check_all(f);
}

/* Paint every request slot with distinct bytes: write them into the
 * request storage directly (the device idle), and the model likewise. */
static void paint_requests(fixture *f, uint8_t salt)
{
    rsp_error err = {0};
    assert_int_equal(rsp__device_sync(f->dev, &err), RSP_OK);
    for (uint32_t b = 0; b < f->lay.num_blocks; b++) {
        const uint64_t n = f->lay.blocks[b].bytes; /* [layers, max_slots, ...] */
        uint8_t *img = malloc((size_t)n);
        assert_non_null(img);
        for (uint32_t l = 0; l < f->lay.num_layers; l++)
            for (uint32_t s = 0; s < f->lay.max_slots; s++) {
                const uint64_t sb = f->lay.blocks[b].slot_bytes;
                uint8_t *p = img + rsp__layout_offset(&f->lay, b, l, s);
                for (uint64_t i = 0; i < sb; i++)
                    p[i] = (uint8_t)(1 + (salt + b * 131u + l * 31u + s * 7u + i * 3u) % 251u);
                memcpy(model_at(f, b, l, s), p, (size_t)sb);
            }
        void *base = rsp__device_block_base(f->dev, b);
        if (f->kind == RSP_DEVICE_HOST) {
            memcpy(base, img, (size_t)n);
        } else {
#ifdef RSP_HAVE_CUDA
            RSP_TEST_CUDA(cudaMemcpy(base, img, (size_t)n, cudaMemcpyHostToDevice));
#else
            fail_msg("CUDA memory without CUDA");
#endif
        }
        free(img);
    }
}

/* ------------------------------------------------------------------------ */
/* Scenarios                                                                 */
/* ------------------------------------------------------------------------ */

/* Request slots 0..4, device tier 5..7, host tier 8..10. */
enum { R = 0, D = 5, H = 8 };

/* Copies between the three storages in every direction, each checked byte
 * for byte, then a batch that mixes every direction in one COPY op (one
 * launch on CUDA). */
static void copies_in_every_direction(void **state)
{
    fixture f;
    fixture_open(&f, kind_of(state), 5, 3, 3);
    check_all(&f); /* every storage starts zeroed */
    paint_requests(&f, 0);
    static const rsp__copy steps[][2] = {
        {{R + 1, D + 0}, {R + 2, H + 0}}, /* request -> device tier, -> host tier */
        {{D + 0, H + 1}, {H + 0, D + 1}}, /* device -> host, host -> device */
        {{D + 1, D + 2}, {H + 1, H + 2}}, /* within each tier */
        {{D + 2, R + 3}, {H + 2, R + 4}}, /* device tier -> request, host tier -> request */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        test_work t;
        tw_init(&t);
        tw_copy(&t, steps[i], 2);
        submit_ok(&f, &t);
        check_all(&f);
    }
    /* One COPY op mixing directions (no id both read and written). */
    paint_requests(&f, 77);
    const rsp__copy batch[] = {
        {R + 0, D + 0}, {R + 1, H + 0}, {D + 1, H + 1}, {H + 2, D + 2}, {R + 2, R + 3}};
    test_work t;
    tw_init(&t);
    tw_copy(&t, batch, 5);
    submit_ok(&f, &t);
    check_all(&f);
    fixture_close(&f);
}

/* A swap out and in through the FIFO queue: request -> host tier, the
 * request slot zeroed, host tier -> request, all in one list and in three
 * lists; the bytes come back exactly, the host copy stays as it was. */
static void swap_out_zero_swap_in_is_fifo(void **state)
{
    fixture f;
    fixture_open(&f, kind_of(state), 5, 3, 3);
    paint_requests(&f, 5);
    const rsp__copy out[] = {{R + 1, H + 0}, {R + 2, D + 0}};
    const uint32_t zero[] = {R + 1, R + 2};
    const rsp__copy in[] = {{H + 0, R + 1}, {D + 0, R + 2}};
    test_work t;
    tw_init(&t);
    tw_copy(&t, out, 2);
    tw_zero(&t, zero, 2);
    tw_copy(&t, in, 2);
    submit_ok(&f, &t);
    check_all(&f);
    for (int k = 0; k < 3; k++) {
        tw_init(&t);
        if (k == 0)
            tw_copy(&t, (const rsp__copy[]){{R + 3, H + 2}}, 1);
        else if (k == 1)
            tw_zero(&t, (const uint32_t[]){R + 3}, 1);
        else
            tw_copy(&t, (const rsp__copy[]){{H + 2, R + 4}}, 1);
        submit_ok(&f, &t);
    }
    check_all(&f);
    fixture_close(&f);
}

/* Tiers of no slots: the other tier's ids follow the request slots
 * directly, and an id past num_ids is refused. */
static void zero_size_tiers(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    static const uint32_t shapes[][2] = {{0, 2}, {2, 0}, {0, 0}};
    for (size_t i = 0; i < 3; i++) {
        fixture f;
        fixture_open(&f, kind, 3, shapes[i][0], shapes[i][1]);
        paint_requests(&f, (uint8_t)(11 * i));
        test_work t;
        tw_init(&t);
        if (f.lay.num_ids > 3) {
            /* id 3 is the first slot of whichever tier exists */
            tw_copy(&t, (const rsp__copy[]){{1, 3}}, 1);
            tw_copy(&t, (const rsp__copy[]){{3, 4}, {2, 0}}, 2);
            submit_ok(&f, &t);
            check_all(&f);
            tw_init(&t);
        }
        tw_copy(&t, (const rsp__copy[]){{0, f.lay.num_ids}}, 1);
        submit_refused(&f, &t, "outside the");
        uint8_t buf[8];
        rsp_error err = {0};
        assert_int_equal(rsp__device_read(f.dev, 0, 0, f.lay.num_ids, buf, &err), RSP_EINVAL);
        fixture_close(&f);
    }
}

/* The range checks: a COPY naming an id >= num_ids (either side) or a ZERO
 * naming one refuses the whole list (RSP_EINVAL, nothing of it runs, even
 * the valid ops before the bad one); reads of every id < num_ids work, of
 * num_ids and past do not. */
static void malformed_lists_are_refused_whole(void **state)
{
    fixture f;
    fixture_open(&f, kind_of(state), 5, 3, 3);
    paint_requests(&f, 9);
    const uint32_t n = f.lay.num_ids;
    test_work t;
    tw_init(&t);
    tw_copy(&t, (const rsp__copy[]){{R + 1, D + 0}}, 1); /* valid, must not run */
    tw_copy(&t, (const rsp__copy[]){{R + 2, H + 0}, {R + 3, n}}, 2);
    submit_refused(&f, &t, "outside the 11 slot ids");
    tw_init(&t);
    tw_copy(&t, (const rsp__copy[]){{R + 1, D + 0}}, 1);
    tw_copy(&t, (const rsp__copy[]){{UINT32_MAX, R + 2}}, 1);
    submit_refused(&f, &t, "outside the");
    /* ZERO of num_ids and of UINT32_MAX */
    for (int k = 0; k < 2; k++) {
        tw_init(&t);
        tw_copy(&t, (const rsp__copy[]){{R + 1, D + 0}}, 1);
        tw_zero(&t, (const uint32_t[]){R + 2, k == 0 ? n : UINT32_MAX}, 2);
        submit_refused(&f, &t, "outside the 11 slot ids");
    }
    /* A COPY op whose pairs lie past the list. */
    tw_init(&t);
    rsp__op *op = tw_op(&t, RSP__OP_COPY);
    op->first = 0;
    op->count = 3; /* the list has no pairs */
    submit_refused(&f, &t, "past the list");
    uint8_t buf[4100];
    rsp_error err = {0};
    assert_int_equal(rsp__device_read(f.dev, 2, 2, n - 1, buf, &err), RSP_OK);
    assert_int_equal(rsp__device_read(f.dev, 0, 0, n, buf, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "slot id"));
    assert_int_equal(rsp__device_read(f.dev, 3, 0, 0, buf, &err), RSP_EINVAL);
    assert_int_equal(rsp__device_read(f.dev, 0, 3, 0, buf, &err), RSP_EINVAL);
    assert_int_equal(rsp__device_read(f.dev, 0, 0, 0, NULL, &err), RSP_EINVAL);
    check_all(&f);
    fixture_close(&f);
}

/* ZERO names any id: the core zeroes a checkpoint slot when a take's
 * source is zero-pending. Zeroing a device-tier and a host-tier slot (and a
 * request slot, in one op) clears exactly those, every other byte stays. */
static void zero_reaches_every_storage(void **state)
{
    fixture f;
    fixture_open(&f, kind_of(state), 5, 3, 3);
    paint_requests(&f, 21);
    test_work t;
    tw_init(&t);
    tw_copy(&t, (const rsp__copy[]){{R + 0, D + 0}, {R + 1, D + 1}, {R + 2, H + 0}, {R + 3, H + 2}},
            4);
    submit_ok(&f, &t);
    check_all(&f);
    tw_init(&t);
    tw_zero(&t, (const uint32_t[]){D + 1, H + 2, R + 4}, 3);
    submit_ok(&f, &t);
    check_all(&f);
    fixture_close(&f);
}

/* A layout whose id space does not add up is refused at creation. */
static void inconsistent_id_space_is_refused(void **state)
{
    const rsp_device_kind kind = kind_of(state);
    rsp__layout lay;
    build_layout(&lay, 5, 3, 3);
    lay.num_ids--;
    rsp__device *dev = (rsp__device *)0x1;
    rsp_error err = {0};
    assert_int_equal(rsp__device_create(kind, 0, &lay, &dev, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "id space"));
    assert_ptr_equal(dev, (rsp__device *)0x1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RSP_TEST_BOTH(copies_in_every_direction),
        RSP_TEST_BOTH(swap_out_zero_swap_in_is_fifo),
        RSP_TEST_BOTH(zero_size_tiers),
        RSP_TEST_BOTH(malformed_lists_are_refused_whole),
        RSP_TEST_BOTH(zero_reaches_every_storage),
        RSP_TEST_BOTH(inconsistent_id_space_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
