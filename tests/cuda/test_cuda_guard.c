/*
 * Guard mode on both devices: the device's checksums are the formula of
 * rsp__sum_bytes (device_impl.h) byte for byte, over blocks whose slots
 * are not a multiple of 8 bytes; and a forward that writes a free slot is
 * reported at its commit. Registered twice ("host: ..." everywhere,
 * "cuda: ..." needs a GPU and skips saying so without one).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <rsp/rsp.h>

#include "cuda/gpu.h"
#include "device/device_impl.h" /* rsp__sum_bytes */
#include "pool.h"               /* pool->dev */

static rsp_device_kind kind_host = RSP_DEVICE_HOST;
static rsp_device_kind kind_cuda = RSP_DEVICE_CUDA;

#define LAYERS 2u
#define SLOTS 6u

static const rsp_block_config blocks[3] = {
    {.name = "conv", .dtype = RSP_DTYPE_BF16, .ndim = 2, .shape = {1, 3}},
    {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {1025}},
    {.name = "tail", .dtype = RSP_DTYPE_U8, .ndim = 1, .shape = {7}},
};

static int reports;
static rsp_guard_violation last;

static void on_error(void *ctx, const rsp_failure *f)
{
    (void)ctx;
    if (f->guard) {
        reports++;
        last = *f->guard;
    }
}

static rsp_pool *make_pool(rsp_device_kind kind, bool guard)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = LAYERS;
    cfg.blocks = blocks;
    cfg.num_blocks = 3;
    cfg.max_slots = SLOTS;
    cfg.device = kind;
    cfg.guard = guard;
    cfg.on_error = on_error;
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_create: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    reports = 0;
    return pool;
}

/* Copy n bytes of host memory onto (block, layer, slot) of the pool. */
static void put(rsp_pool *pool, rsp_device_kind kind, uint32_t b, uint32_t l, uint32_t slot,
                const void *src, size_t n)
{
    rsp_block_view v;
    assert_int_equal(rsp_pool_block(pool, blocks[b].name, l, &v, NULL), RSP_OK);
    unsigned char *dst = (unsigned char *)v.data + (size_t)slot * n;
    if (kind == RSP_DEVICE_HOST) {
        memcpy(dst, src, n);
        return;
    }
#ifdef RSP_HAVE_CUDA
    assert_int_equal(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), cudaSuccess);
#else
    fail();
#endif
}

static void checksums_are_the_host_formula(void **state)
{
    const rsp_device_kind kind = *(rsp_device_kind *)*state;
    if (kind == RSP_DEVICE_CUDA)
        RSP_TEST_REQUIRE_GPU();
    rsp_pool *pool = make_pool(kind, false);
    const rsp__layout *lay = pool->layout;
    unsigned char *bytes = malloc(8192);
    assert_non_null(bytes);
    uint64_t want[SLOTS][3][LAYERS];
    for (uint32_t s = 0; s < SLOTS; s++)
        for (uint32_t b = 0; b < 3; b++)
            for (uint32_t l = 0; l < LAYERS; l++) {
                const size_t n = lay->blocks[b].slot_bytes;
                for (size_t i = 0; i < n; i++)
                    bytes[i] = (unsigned char)(s == 2 ? 0 : (i * 131 + s * 17 + b * 5 + l + 1));
                put(pool, kind, b, l, s, bytes, n);
                want[s][b][l] = rsp__sum_bytes(bytes, n);
            }
    assert_int_equal(want[2][1][1], 0); /* zeros sum to 0 */
    uint32_t slots[SLOTS] = {5, 0, 3, 2, 1, 4};
    uint64_t got[SLOTS * 3 * LAYERS];
    rsp_error err;
    rsp_status st = rsp__device_checksum(pool->dev, slots, SLOTS, got, &err);
    if (st != RSP_OK)
        print_error("rsp__device_checksum: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    for (uint32_t i = 0; i < SLOTS; i++)
        for (uint32_t b = 0; b < 3; b++)
            for (uint32_t l = 0; l < LAYERS; l++)
                assert_int_equal(got[(i * 3 + b) * LAYERS + l], want[slots[i]][b][l]);
    uint32_t bad = SLOTS;
    assert_int_equal(rsp__device_checksum(pool->dev, &bad, 1, got, NULL), RSP_EINVAL);
    free(bytes);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void a_write_into_a_free_slot_is_reported(void **state)
{
    const rsp_device_kind kind = *(rsp_device_kind *)*state;
    if (kind == RSP_DEVICE_CUDA)
        RSP_TEST_REQUIRE_GPU();
    rsp_pool *pool = make_pool(kind, true);
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, &s, &o, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s, NULL), RSP_OK);
    const unsigned char one[7] = {0, 0, 0, 0, 0, 0, 1};
    put(pool, kind, 2, 1, SLOTS - 1, one, sizeof one); /* "tail", layer 1, never handed out */
    rsp_event done = rsp_event_complete();
    assert_int_equal(rsp_step_commit(pool, &s, &done, NULL), RSP_OK);
    assert_int_equal(reports, 1);
    assert_int_equal(last.slot, SLOTS - 1);
    assert_false(last.held);
    assert_int_equal(last.block, 2);
    assert_int_equal(last.layer, 1);
    assert_int_equal(last.regions, 1);
    assert_int_equal(last.step_id, 1);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RSP_TEST_BOTH(checksums_are_the_host_formula),
        RSP_TEST_BOTH(a_write_into_a_free_slot_is_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
