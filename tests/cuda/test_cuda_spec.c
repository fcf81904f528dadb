/*
 * test_cuda_spec: the per-token index tensor of a leased key on either
 * device (docs/semantics.md 9.3). Registered twice ("host: ..." runs
 * everywhere, "cuda: ..." needs a GPU and skips visibly without one).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Plans on one lease with per-token rows of varying spans, then a plain
 * step: after each plan's `ready`, the device copy read back equals the
 * host copy entry for entry, and its address and width never change (a
 * captured graph replays against them). Without a lease the device copy
 * is the host copy on the host device and NULL on a CUDA device.
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

static rsp_device_kind kind_host = RSP_DEVICE_HOST;
static rsp_device_kind kind_cuda = RSP_DEVICE_CUDA;

#define OK(call)                                                                                   \
    do {                                                                                           \
        rsp_error e_ = {0};                                                                        \
        rsp_status s_ = (call);                                                                    \
        if (s_ != RSP_OK)                                                                          \
            fail_msg("%s: %s", #call, e_.message);                                                 \
    } while (0)

static rsp_pool *make_pool(rsp_device_kind kind)
{
    static const rsp_block_config block = {
        .name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {8}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 1;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 32;
    cfg.device = kind;
    rsp_pool *pool = NULL;
    OK(rsp_pool_create(&cfg, &pool, &e_));
    return pool;
}

/* The device copy's n entries, read back to the host. */
static void read_back(rsp_device_kind kind, const void *dev, int32_t *out, size_t n)
{
    if (kind == RSP_DEVICE_HOST) {
        memcpy(out, dev, n * sizeof *out);
        return;
    }
#ifdef RSP_HAVE_CUDA
    assert_int_equal(cudaMemcpy(out, dev, n * sizeof *out, cudaMemcpyDeviceToHost), cudaSuccess);
#else
    fail_msg("a CUDA pool in a build without CUDA");
#endif
}

/* Admit, plan, read the live plan's tensor after its ready event, check
 * the device copy against the host copy; commit with each row's accepted
 * count. Returns the device address; *width gets the width. */
static void *one_step(rsp_pool *pool, rsp_device_kind kind, rsp_step *step, uint32_t *width)
{
    rsp_admit_outcome out;
    OK(rsp_step_admit(pool, step, &out, &e_));
    assert_true(out.ok);
    OK(rsp_step_plan(pool, step, &e_));
    assert_int_equal(rsp_read_begin(), RSP_OK);
    const rsp_plan *plan = rsp_plan_ref(rsp_plan_live(pool));
    rsp_read_end();
    rsp_spec_indices si;
    OK(rsp_plan_spec_indices(plan, RSP_LABEL_MAIN, &si, &e_));
    OK(rsp_event_wait(pool, &si.ready, RSP_WAIT_FOREVER, &e_));
    assert_non_null(si.device_indices);
    size_t n = (size_t)si.length * si.width;
    int32_t *got = malloc(n * sizeof *got);
    assert_non_null(got);
    read_back(kind, si.device_indices, got, n);
    assert_memory_equal(got, si.indices, n * sizeof *got);
    free(got);
    void *addr = si.device_indices;
    *width = si.width;
    rsp_plan_unref(plan);
    const rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(pool, step, &done, &e_));
    return addr;
}

static rsp_row row(rsp_rid rid, int32_t span, bool per_token)
{
    rsp_row r;
    memset(&r, 0, sizeof r);
    r.rid = rid;
    r.label = RSP_LABEL_MAIN;
    r.span = span;
    r.per_token_states = per_token ? 1 : 0;
    r.accepted = per_token ? (uint16_t)span : 0;
    return r;
}

static void leased_tensor_is_uploaded_in_place(void **state)
{
    rsp_device_kind kind = *(rsp_device_kind *)*state;
    if (kind == RSP_DEVICE_CUDA)
        RSP_TEST_REQUIRE_GPU();
    rsp_pool *pool = make_pool(kind);
    OK(rsp_reader_register(&e_));
    const rsp_lease lease = {.bucket_bs = 8, .bucket_id = 0, .lease_slot = 0};
    void *first = NULL;
    for (uint64_t id = 1; id <= 6; id++) {
        bool plain = id == 6;
        rsp_row rows[3] = {row(1, plain ? 1 : 1 + (int32_t)(id % 4), !plain),
                           row(2, plain ? 1 : 4, !plain), row(3, 1, false)};
        rsp_step step = {
            .step_id = id, .rows = rows, .num_rows = 3, .has_lease = true, .lease = lease};
        uint32_t width = 0;
        void *addr = one_step(pool, kind, &step, &width);
        assert_int_equal(width, 5); /* 1 + the first plan's widest span, 4 */
        if (!first)
            first = addr;
        assert_ptr_equal(addr, first);
    }
    rsp_reader_unregister();
    OK(rsp_pool_close(pool, &e_));
}

static void without_a_lease_no_device_buffer(void **state)
{
    rsp_device_kind kind = *(rsp_device_kind *)*state;
    if (kind == RSP_DEVICE_CUDA)
        RSP_TEST_REQUIRE_GPU();
    rsp_pool *pool = make_pool(kind);
    OK(rsp_reader_register(&e_));
    rsp_row rows[1] = {row(1, 3, true)};
    rsp_step step = {.step_id = 1, .rows = rows, .num_rows = 1};
    rsp_admit_outcome out;
    OK(rsp_step_admit(pool, &step, &out, &e_));
    OK(rsp_step_plan(pool, &step, &e_));
    assert_int_equal(rsp_read_begin(), RSP_OK);
    rsp_spec_indices si;
    OK(rsp_plan_spec_indices(rsp_plan_live(pool), RSP_LABEL_MAIN, &si, &e_));
    if (kind == RSP_DEVICE_HOST)
        assert_ptr_equal(si.device_indices, si.indices);
    else
        assert_null(si.device_indices);
    rsp_read_end();
    const rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(pool, &step, &done, &e_));
    rsp_reader_unregister();
    OK(rsp_pool_close(pool, &e_));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        RSP_TEST_BOTH(leased_tensor_is_uploaded_in_place),
        RSP_TEST_BOTH(without_a_lease_no_device_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
