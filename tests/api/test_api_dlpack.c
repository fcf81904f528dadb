/*
 * DLPack exports: rsp_pool_block_dlpack and rsp_addressing_dlpack.
 * The tensors describe the pool's memory exactly; a block export keeps the
 * storage after rsp_pool_close until its deleter (ASan: no use after free,
 * no leak), on any thread (TSan); host addressing exports are copies that
 * outlive the plan; bad arguments change nothing.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <dlpack/dlpack.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

static const rsp_event forward_complete = {.kind = RSP_EVENT_COMPLETE};

static rsp_pool *make_pool(void)
{
    static const rsp_block_config blocks[2] = {
        {.name = "conv", .dtype = RSP_DTYPE_BF16, .ndim = 2, .shape = {3, 5}},
        {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {6}},
    };
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 2;
    cfg.blocks = blocks;
    cfg.num_blocks = 2;
    cfg.max_slots = 8;
    rsp_pool *pool = NULL;
    assert_int_equal(rsp_pool_create(&cfg, &pool, NULL), RSP_OK);
    return pool;
}

static void block_export_describes_the_block_view(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool();
    rsp_error err;
    DLManagedTensor *t = NULL;
    assert_int_equal(rsp_pool_block_dlpack(pool, "conv", 1, &t, &err), RSP_OK);
    rsp_block_view v;
    assert_int_equal(rsp_pool_block(pool, "conv", 1, &v, &err), RSP_OK);
    const DLTensor *d = &t->dl_tensor;
    assert_ptr_equal(d->data, v.data);
    assert_int_equal(d->byte_offset, 0);
    assert_int_equal(d->device.device_type, kDLCPU);
    assert_int_equal(d->ndim, 3);
    assert_int_equal(d->dtype.code, kDLBfloat);
    assert_int_equal(d->dtype.bits, 16);
    assert_int_equal(d->dtype.lanes, 1);
    const int64_t shape[3] = {8, 3, 5}, strides[3] = {15, 5, 1};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(d->shape[i], shape[i]);
        assert_int_equal(d->strides[i], strides[i]);
    }
    assert_non_null(t->deleter);
    t->deleter(t);
    DLManagedTensor *s = NULL;
    assert_int_equal(rsp_pool_block_dlpack(pool, "ssm", 0, &s, &err), RSP_OK);
    assert_int_equal(s->dl_tensor.dtype.code, kDLFloat);
    assert_int_equal(s->dl_tensor.dtype.bits, 32);
    assert_int_equal(s->dl_tensor.ndim, 2);
    s->deleter(s);
    assert_int_equal(rsp_pool_close(pool, &err), RSP_OK);
}

static void bad_arguments_are_refused_and_export_nothing(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool();
    rsp_error err;
    DLManagedTensor *t = (DLManagedTensor *)&err; /* must stay as it is */
    DLManagedTensor *const before = t;
    assert_int_equal(rsp_pool_block_dlpack(pool, "nope", 0, &t, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "nope"));
    assert_int_equal(rsp_pool_block_dlpack(pool, "ssm", 2, &t, &err), RSP_EINVAL);
    assert_int_equal(rsp_pool_block_dlpack(NULL, "ssm", 0, &t, &err), RSP_EINVAL);
    assert_int_equal(rsp_pool_block_dlpack(pool, "ssm", 0, NULL, &err), RSP_EINVAL);
    assert_ptr_equal(t, before);
    rsp_addressing a;
    memset(&a, 0, sizeof a);
    assert_int_equal(rsp_addressing_dlpack(pool, &a, (rsp_dlpack_part)9, &t, &err), RSP_EINVAL);
    assert_int_equal(rsp_addressing_dlpack(pool, NULL, RSP_DLPACK_SLOT_INDICES, &t, &err),
                     RSP_EINVAL);
    a.length = 2; /* vectors missing */
    assert_int_equal(rsp_addressing_dlpack(pool, &a, RSP_DLPACK_HAS_STATE, &t, &err), RSP_EINVAL);
    assert_int_equal(rsp_addressing_dlpack(pool, &a, RSP_DLPACK_DEVICE_HAS_STATE, &t, &err),
                     RSP_EINVAL);
    assert_ptr_equal(t, before);
    assert_int_equal(rsp_pool_close(pool, &err), RSP_OK);
}

/* The storage outlives the pool while an export holds it: written and
 * read after rsp_pool_close (ASan would report a use after free), freed by
 * the last deleter (ASan's leak check would report it otherwise). */
static void block_export_outlives_pool_close(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool();
    rsp_error err;
    DLManagedTensor *a = NULL, *b = NULL;
    assert_int_equal(rsp_pool_block_dlpack(pool, "ssm", 1, &a, &err), RSP_OK);
    assert_int_equal(rsp_pool_block_dlpack(pool, "ssm", 1, &b, &err), RSP_OK);
    float *x = a->dl_tensor.data;
    x[6] = 2.5f; /* slot 1, element 0 */
    assert_int_equal(rsp_pool_close(pool, &err), RSP_OK);
    assert_true(x[6] == 2.5f);
    x[47] = 1.0f; /* the last element of the layer */
    a->deleter(a);
    const float *y = b->dl_tensor.data;
    assert_true(y[6] == 2.5f && y[47] == 1.0f);
    b->deleter(b); /* the last holder: the storage goes here */
}

typedef struct deleter_arg {
    DLManagedTensor *t;
    int slot; /* each thread writes a slot of its own */
} deleter_arg;

static void *delete_export(void *arg)
{
    deleter_arg *d = arg;
    float *x = d->t->dl_tensor.data;
    x[d->slot * 6] += 1.0f;
    d->t->deleter(d->t);
    return NULL;
}

/* Deleters on other threads, racing with close and with each other. */
static void exports_deleted_on_other_threads(void **state)
{
    (void)state;
    enum { N = 4 };
    for (int round = 0; round < 20; round++) {
        rsp_pool *pool = make_pool();
        DLManagedTensor *t[N];
        for (int i = 0; i < N; i++)
            assert_int_equal(rsp_pool_block_dlpack(pool, "ssm", (uint32_t)(i % 2), &t[i], NULL),
                             RSP_OK);
        pthread_t th[N];
        deleter_arg args[N];
        for (int i = 0; i < N; i++) {
            args[i] = (deleter_arg){t[i], i + 1};
            assert_int_equal(pthread_create(&th[i], NULL, delete_export, &args[i]), 0);
        }
        assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
        for (int i = 0; i < N; i++)
            assert_int_equal(pthread_join(th[i], NULL), 0);
    }
}

static void addressing_exports_copy_the_host_vectors(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool();
    rsp_error err;
    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    const rsp_row rows[3] = {{.rid = 7, .span = 2}, {.rid = 8, .span = 1}, {.rid = 9, .span = 1}};
    rsp_step s = {.step_id = 1, .rows = rows, .num_rows = 3};
    rsp_admit_outcome out;
    assert_int_equal(rsp_step_admit(pool, &s, &out, &err), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_OK);
    DLManagedTensor *si = NULL, *hs = NULL, *dsi = NULL;
    int32_t want[3];
    assert_int_equal(rsp_read_begin(), RSP_OK);
    rsp_addressing a;
    assert_int_equal(rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, &err), RSP_OK);
    memcpy(want, a.slot_indices, sizeof want);
    assert_int_equal(rsp_addressing_dlpack(pool, &a, RSP_DLPACK_SLOT_INDICES, &si, &err), RSP_OK);
    assert_int_equal(rsp_addressing_dlpack(pool, &a, RSP_DLPACK_HAS_STATE, &hs, &err), RSP_OK);
    assert_int_equal(rsp_addressing_dlpack(pool, &a, RSP_DLPACK_DEVICE_SLOT_INDICES, &dsi, &err),
                     RSP_OK);
    assert_ptr_not_equal(si->dl_tensor.data, a.slot_indices);     /* a copy */
    assert_ptr_equal(dsi->dl_tensor.data, a.device_slot_indices); /* the buffer itself */
    assert_int_equal(rsp_read_end(), RSP_OK);
    assert_int_equal(si->dl_tensor.ndim, 1);
    assert_int_equal(si->dl_tensor.shape[0], 3);
    assert_int_equal(si->dl_tensor.dtype.code, kDLInt);
    assert_int_equal(si->dl_tensor.dtype.bits, 32);
    assert_int_equal(hs->dl_tensor.dtype.code, kDLUInt);
    assert_int_equal(hs->dl_tensor.dtype.bits, 8);
    assert_int_equal(si->dl_tensor.device.device_type, kDLCPU);
    assert_int_equal(dsi->dl_tensor.device.device_type, kDLCPU); /* host device */
    /* The plan is gone after the commit and more steps; the copies stay. */
    assert_int_equal(rsp_step_commit(pool, &s, &forward_complete, &err), RSP_OK);
    for (uint64_t id = 2; id < 6; id++) {
        rsp_step n = {.step_id = id, .rows = rows + 1, .num_rows = 1};
        assert_int_equal(rsp_step_admit(pool, &n, &out, &err), RSP_OK);
        assert_int_equal(rsp_step_plan(pool, &n, &err), RSP_OK);
        assert_int_equal(rsp_step_commit(pool, &n, &forward_complete, &err), RSP_OK);
    }
    assert_memory_equal(si->dl_tensor.data, want, sizeof want);
    const uint8_t *h = hs->dl_tensor.data;
    assert_true(h[0] == 0 && h[1] == 0 && h[2] == 0);
    rsp_reader_unregister();
    assert_int_equal(rsp_pool_close(pool, &err), RSP_OK);
    si->deleter(si);
    hs->deleter(hs);
    dsi->deleter(dsi); /* held the storage past close */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(block_export_describes_the_block_view),
        cmocka_unit_test(bad_arguments_are_refused_and_export_nothing),
        cmocka_unit_test(block_export_outlives_pool_close),
        cmocka_unit_test(exports_deleted_on_other_threads),
        cmocka_unit_test(addressing_exports_copy_the_host_vectors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
