/*
 * Guard mode on the CUDA device: the checksums of request slots by one
 * kernel (kernels/rsp_guard.cu). device.c synced the pool stream first, so
 * everything submitted has run and the pool's own stream and staging are
 * not needed: this file reads only the device's common head (layout,
 * block bases) and works on the calling thread's per-thread stream, with
 * scratch of its own per call (guard mode is a debugging mode; a call
 * costs two small cudaMallocs).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Built only with RSP_HAVE_CUDA. Owner thread.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "rsp_guard.h"
#include "util/error.h"
#include "device_impl.h"

static rsp_status fail(rsp_error *err, cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    return rsp__fail(err, e == cudaErrorMemoryAllocation ? RSP_ENOMEM : RSP_EDEVICE,
                     "guard checksum: CUDA %s: %s (%s)", what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

/* The request slots as the kernels see them (no tiers). */
static void geom_of(const rsp__device *dev, rsp__kgeom *g)
{
    const rsp__layout *lay = dev->layout;
    *g = (rsp__kgeom){.num_blocks = lay->num_blocks, .num_layers = lay->num_layers};
    for (uint32_t b = 0; b < lay->num_blocks; b++)
        g->blocks[b] = (rsp__kblock){.base = dev->block_base[b],
                                     .slot_bytes = lay->blocks[b].slot_bytes,
                                     .layer_bytes = lay->blocks[b].layer_bytes};
}

/* Upload the slots, run the kernel, read the sums back: on `stream`. */
static cudaError_t run(const rsp__device *dev, const uint32_t *slots, uint32_t n, uint64_t *out,
                       uint32_t *d_slots, unsigned long long *d_out, size_t out_bytes)
{
    cudaStream_t s = cudaStreamPerThread;
    rsp__kgeom g;
    geom_of(dev, &g);
    cudaError_t e =
        cudaMemcpyAsync(d_slots, slots, (size_t)n * sizeof *slots, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(d_out, 0, out_bytes, s);
    if (e == cudaSuccess)
        e = rsp__kernels_checksum(&g, d_slots, n, d_out, s);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(out, d_out, out_bytes, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    return e;
}

rsp_status rsp__cuda_checksum(rsp__device *dev, const uint32_t *slots, uint32_t n, uint64_t *out,
                              rsp_error *err)
{
    if (n == 0)
        return RSP_OK;
    /* The pool's GPU is where its storage lives; the caller's current
     * device is restored after. */
    struct cudaPointerAttributes attr;
    cudaError_t e = cudaPointerGetAttributes(&attr, dev->block_base[0]);
    if (e != cudaSuccess)
        return fail(err, e, "cudaPointerGetAttributes");
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        (void)cudaGetLastError();
    if (prev != attr.device && (e = cudaSetDevice(attr.device)) != cudaSuccess)
        return fail(err, e, "cudaSetDevice");
    const size_t out_bytes = (size_t)n * dev->layout->num_blocks * dev->layout->num_layers * 8;
    uint32_t *d_slots = NULL;
    unsigned long long *d_out = NULL;
    e = cudaMalloc((void **)&d_slots, (size_t)n * sizeof *slots);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&d_out, out_bytes);
    if (e == cudaSuccess)
        e = run(dev, slots, n, out, d_slots, d_out, out_bytes);
    rsp_status st = e == cudaSuccess ? RSP_OK : fail(err, e, "checksum");
    (void)cudaFree(d_slots);
    (void)cudaFree(d_out);
    if (prev >= 0 && prev != attr.device)
        (void)cudaSetDevice(prev);
    return st;
}
