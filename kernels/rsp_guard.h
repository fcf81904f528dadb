/*
 * Guard mode's checksum kernel (kernels/rsp_guard.cu): one 64-bit checksum
 * per (slot, block, layer) region of the request slots, the formula of
 * rsp__sum_bytes (src/device/device_impl.h): over the region's 8-byte
 * little-endian words w_i (the last zero-padded), the sum mod 2^64 of
 * mix(w_i) * (2i + 1). A sum is order-free, so the threads' partial sums
 * meet by atomicAdd and the result is the host formula's, bit for bit.
 * SPDX-License-Identifier: Apache-2.0
 *
 * C-callable; only src/device/cuda_guard.c and tests/cuda include it.
 * The launcher only enqueues on `stream`; any thread with the right CUDA
 * device current.
 */
#ifndef RSP_GUARD_KERNELS_H
#define RSP_GUARD_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "rsp_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Enqueue one kernel on `stream`: for slots[i] (device memory, request
 * slot ids, trusted), block b < geom->num_blocks, layer l, add the
 * region's checksum into out[(i * num_blocks + b) * num_layers + l]
 * (device memory, which the caller zeroed). count == 0 launches nothing.
 * Returns the launch error (cudaSuccess if none); never waits.
 */
cudaError_t rsp__kernels_checksum(const rsp__kgeom *geom, const uint32_t *slots, uint32_t count,
                                  unsigned long long *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
