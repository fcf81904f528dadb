/*
 * GPU helpers for the tests/cuda suites (gpu_helpers.cu): a gate that holds
 * a caller stream until the host opens it, and a stand-in "forward" kernel
 * that writes slots on the caller's stream, as a model's recurrent layer
 * would. Test code; CUDA builds only. Main test thread.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_TESTS_CUDA_GPU_HELPERS_H
#define RSP_TESTS_CUDA_GPU_HELPERS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "../../kernels/rsp_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rsp_test_gate rsp_test_gate;

/* A gate with its own non-blocking stream and a host-mapped flag. */
cudaError_t rsp_test_gate_new(rsp_test_gate **out);
void rsp_test_gate_free(rsp_test_gate *g);
/* Enqueue a kernel that spins until the gate is opened (or ~10 s pass, so a
 * failed test never hangs the GPU), then create and record *after: an event
 * that completes only once the gate was opened (the caller destroys it). */
cudaError_t rsp_test_gate_close(rsp_test_gate *g, cudaEvent_t *after);
/* Let every kernel spinning on the gate finish. Any thread. */
void rsp_test_gate_open(rsp_test_gate *g);
/* The gate's stream (work queued on it runs after the gate opens). */
cudaStream_t rsp_test_gate_stream(const rsp_test_gate *g);

/* The byte a forward with `seed` writes at (block, layer, offset); never 0. */
uint8_t rsp_test_forward_byte(uint64_t seed, uint32_t block, uint32_t layer, uint64_t offset);

/* Enqueue on `stream`: spin for about `delay_us` microseconds (so a pool
 * stream that failed to wait would run first), then write
 * rsp_test_forward_byte(seed, ...) into every byte of every layer of every
 * block of slots[0 .. n) (host array, copied into the launch). */
cudaError_t rsp_test_forward(const rsp__kgeom *geom, const uint32_t *slots, uint32_t n,
                             uint64_t seed, uint32_t delay_us, cudaStream_t stream);

/* Like rsp_test_forward, but the slots come from the device vector
 * d_slot_indices[0 .. n) (a plan's addressing), read by the kernel after
 * the delay, as a backend reads slot_indices. Entries < 0 are skipped. */
cudaError_t rsp_test_forward_indexed(const rsp__kgeom *geom, const int32_t *d_slot_indices,
                                     uint32_t n, uint64_t seed, uint32_t delay_us,
                                     cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
