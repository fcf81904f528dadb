/*
 * DLPack exports: a block of the pool, or one addressing vector,
 * as a DLManagedTensor that any framework takes without a copy
 * (torch.from_dlpack, CuPy, JAX, ...). SPDX-License-Identifier: Apache-2.0
 *
 * Every export is one allocation: the DLManagedTensor, its shape and
 * strides, and what keeps its memory alive. The deleter is this file's C
 * code, so it runs correctly on any thread at any time, interpreter exit
 * and garbage-collection order included:
 *   - a block export holds a reference on the pool's storage
 *     (rsp__storage, pool.h), which outlives rsp_pool_close until the last
 *     export is deleted;
 *   - a host addressing vector is copied into the export (a few KiB at
 *     most), so it depends on nothing: a plan reference would make
 *     rsp_pool_close wait for the consumer to drop the tensor;
 *   - a device addressing vector is the pool's addressing buffer, kept
 *     allocated by a storage reference; its contents are this step's while
 *     the step is in flight (rsp.h, rsp_addressing).
 */
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include <rsp/rsp.h>

#include "pool.h"
#include "util/error.h"

typedef struct export_ctx {
    DLManagedTensor mt;
    rsp__storage *storage; /* NULL: the data lives in this allocation */
    int64_t shape[RSP_MAX_DIMS + 1];
    int64_t strides[RSP_MAX_DIMS + 1];
    _Alignas(64) unsigned char data[]; /* host addressing copies */
} export_ctx;

static void export_delete(DLManagedTensor *mt)
{
    if (!mt)
        return;
    export_ctx *x = (export_ctx *)mt->manager_ctx;
    rsp__storage *s = x->storage;
    free(x);
    if (s)
        rsp__storage_release(s); /* the last one frees the storage */
}

static DLDataType dl_dtype(rsp_dtype t)
{
    static const DLDataType map[RSP_DTYPE_COUNT_] = {
        [RSP_DTYPE_F32] = {kDLFloat, 32, 1},   [RSP_DTYPE_F16] = {kDLFloat, 16, 1},
        [RSP_DTYPE_BF16] = {kDLBfloat, 16, 1}, [RSP_DTYPE_F64] = {kDLFloat, 64, 1},
        [RSP_DTYPE_I8] = {kDLInt, 8, 1},       [RSP_DTYPE_U8] = {kDLUInt, 8, 1},
        [RSP_DTYPE_I32] = {kDLInt, 32, 1},     [RSP_DTYPE_I64] = {kDLInt, 64, 1},
    };
    return map[t];
}

static DLDevice dl_device(const rsp_pool *pool, bool host_copy)
{
    if (host_copy || pool->device_kind == RSP_DEVICE_HOST)
        return (DLDevice){kDLCPU, 0};
    return (DLDevice){kDLCUDA, pool->cuda_ordinal};
}

/* One export of ndim dims (shape given, strides row-major) over data, with
 * extra bytes of its own for a copy. NULL: out of memory. */
static export_ctx *export_new(void *data, DLDevice dev, DLDataType dtype, uint32_t ndim,
                              const int64_t *shape, size_t extra)
{
    export_ctx *x = calloc(1, sizeof *x + extra);
    if (!x)
        return NULL;
    int64_t stride = 1;
    for (uint32_t d = ndim; d-- > 0;) {
        x->shape[d] = shape[d];
        x->strides[d] = stride;
        stride *= shape[d];
    }
    DLTensor *t = &x->mt.dl_tensor;
    t->data = data ? data : x->data;
    t->device = dev;
    t->ndim = (int32_t)ndim;
    t->dtype = dtype;
    t->shape = x->shape;
    t->strides = x->strides;
    t->byte_offset = 0;
    x->mt.manager_ctx = x;
    x->mt.deleter = export_delete;
    return x;
}

rsp_status rsp_pool_block_dlpack(rsp_pool *pool, const char *name, uint32_t layer,
                                 struct DLManagedTensor **out, rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "out is NULL");
    rsp_block_view v;
    rsp_status st = rsp_pool_block(pool, name, layer, &v, err);
    if (st != RSP_OK)
        return st;
    export_ctx *x =
        export_new(v.data, dl_device(pool, false), dl_dtype(v.dtype), v.ndim, v.shape, 0);
    if (!x)
        return rsp__fail(err, RSP_ENOMEM, "rsp_pool_block_dlpack: no memory for the export");
    x->storage = rsp__pool_storage_hold(pool);
    *out = &x->mt;
    return RSP_OK;
}

rsp_status rsp_addressing_dlpack(rsp_pool *pool, const rsp_addressing *a, rsp_dlpack_part part,
                                 struct DLManagedTensor **out, rsp_error *err)
{
    if (!pool || !a || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : !a ? "addressing" : "out");
    const bool indices = part == RSP_DLPACK_SLOT_INDICES || part == RSP_DLPACK_DEVICE_SLOT_INDICES;
    const bool device =
        part == RSP_DLPACK_DEVICE_SLOT_INDICES || part == RSP_DLPACK_DEVICE_HAS_STATE;
    if ((unsigned)part > RSP_DLPACK_DEVICE_HAS_STATE)
        return rsp__fail(err, RSP_EINVAL, "part %d is not an rsp_dlpack_part", (int)part);
    /* has_state is a C bool: one byte, exported as uint8 (DLPack 0.6 has no
     * bool code; a consumer views it as bool). */
    const DLDataType dtype = indices ? (DLDataType){kDLInt, 32, 1} : (DLDataType){kDLUInt, 8, 1};
    const size_t elem = indices ? sizeof(int32_t) : sizeof(bool);
    const int64_t shape[1] = {a->length};
    const void *src = indices ? (const void *)a->slot_indices : (const void *)a->has_state;
    void *dev_data = indices ? a->device_slot_indices : a->device_has_state;
    if (device ? (!dev_data && a->length) : (!src && a->length))
        return rsp__fail(err, RSP_EINVAL, "the addressing has no %s vector",
                         device ? "device" : "host");
    export_ctx *x = export_new(device ? dev_data : NULL, dl_device(pool, !device), dtype, 1, shape,
                               device ? 0 : elem * a->length);
    if (!x)
        return rsp__fail(err, RSP_ENOMEM, "rsp_addressing_dlpack: no memory for the export");
    if (device)
        x->storage = rsp__pool_storage_hold(pool);
    else if (a->length)
        memcpy(x->data, src, elem * a->length);
    *out = &x->mt;
    return RSP_OK;
}
