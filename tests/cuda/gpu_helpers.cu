/* GPU helpers for the tests (see gpu_helpers.h). SPDX-License-Identifier: Apache-2.0 */
#include "gpu_helpers.h"
#include "pattern.h"

#include <cuda_runtime.h>
#include <stdlib.h>

struct rsp_test_gate {
    cudaStream_t stream;
    volatile int *flag_host; /* pinned, mapped */
    int *flag_dev;
};

namespace
{

__global__ void rsp_test_spin(const volatile int *flag)
{
    const long long start = clock64();
    /* ~10 s at 1-2 GHz: a test that never opens the gate fails, not hangs */
    while (*flag == 0 && clock64() - start < 20000000000LL)
        __nanosleep(1000);
}

constexpr uint32_t kMaxSlots = 64;

struct forward_args {
    rsp__kgeom geom;
    uint32_t n;
    uint32_t slots[kMaxSlots];
    const int32_t *indices; /* device; when set, slots[] is not used */
    uint64_t seed;
    long long delay_cycles;
};

__host__ __device__ inline uint8_t forward_byte(uint64_t seed, uint32_t b, uint32_t l, uint64_t i)
{
    return rsp_test_pattern(seed, b, l, i);
}

__global__ void rsp_test_forward_kernel(const __grid_constant__ forward_args a)
{
    const long long start = clock64();
    while (clock64() - start < a.delay_cycles) {
    }
    /* read the addressing only now, after the delay, as late as a backend
     * would: an upload that did not precede it would show */
    for (uint32_t b = 0; b < a.geom.num_blocks; b++) {
        const rsp__kblock &bl = a.geom.blocks[b];
        const uint64_t per = bl.slot_bytes * a.n * a.geom.num_layers;
        for (uint64_t x = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; x < per;
             x += (uint64_t)gridDim.x * blockDim.x) {
            const uint64_t i = x % bl.slot_bytes;
            const uint64_t r = x / bl.slot_bytes;
            const uint32_t l = (uint32_t)(r % a.geom.num_layers);
            const uint64_t row = r / a.geom.num_layers;
            const int64_t s = a.indices ? (int64_t)a.indices[row] : (int64_t)a.slots[row];
            if (s < 0)
                continue;
            bl.base[l * bl.layer_bytes + (uint64_t)s * bl.slot_bytes + i] =
                forward_byte(a.seed, b, l, i);
        }
    }
}

} // namespace

extern "C" cudaError_t rsp_test_gate_new(rsp_test_gate **out)
{
    rsp_test_gate *g = (rsp_test_gate *)calloc(1, sizeof *g);
    if (!g)
        return cudaErrorMemoryAllocation;
    cudaError_t e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaHostAlloc((void **)&g->flag_host, sizeof(int), cudaHostAllocMapped);
    if (e == cudaSuccess) {
        *g->flag_host = 0;
        e = cudaHostGetDevicePointer((void **)&g->flag_dev, (void *)g->flag_host, 0);
    }
    if (e != cudaSuccess) {
        rsp_test_gate_free(g);
        return e;
    }
    *out = g;
    return cudaSuccess;
}

extern "C" void rsp_test_gate_free(rsp_test_gate *g)
{
    if (!g)
        return;
    if (g->flag_host)
        *g->flag_host = 1;
    if (g->stream) {
        (void)cudaStreamSynchronize(g->stream);
        (void)cudaStreamDestroy(g->stream);
    }
    if (g->flag_host)
        (void)cudaFreeHost((void *)g->flag_host);
    free(g);
}

extern "C" cudaError_t rsp_test_gate_close(rsp_test_gate *g, cudaEvent_t *after)
{
    *g->flag_host = 0;
    rsp_test_spin<<<1, 1, 0, g->stream>>>(g->flag_dev);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(after, cudaEventDisableTiming);
    if (e == cudaSuccess)
        e = cudaEventRecord(*after, g->stream);
    return e;
}

extern "C" void rsp_test_gate_open(rsp_test_gate *g)
{
    __atomic_store_n((int *)g->flag_host, 1, __ATOMIC_SEQ_CST);
}

extern "C" cudaStream_t rsp_test_gate_stream(const rsp_test_gate *g)
{
    return g->stream;
}

extern "C" uint8_t rsp_test_forward_byte(uint64_t seed, uint32_t block, uint32_t layer,
                                         uint64_t offset)
{
    return forward_byte(seed, block, layer, offset);
}

namespace
{
cudaError_t forward_launch(const rsp__kgeom *geom, const uint32_t *slots, const int32_t *indices,
                           uint32_t n, uint64_t seed, uint32_t delay_us, cudaStream_t stream)
{
    if (n > kMaxSlots)
        return cudaErrorInvalidValue;
    forward_args a;
    a.geom = *geom;
    a.n = n;
    for (uint32_t i = 0; i < n; i++)
        a.slots[i] = slots ? slots[i] : 0;
    a.indices = indices;
    a.seed = seed;
    int khz = 0;
    int dev = 0;
    (void)cudaGetDevice(&dev);
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess || khz <= 0)
        khz = 1500000;
    a.delay_cycles = (long long)delay_us * khz / 1000;
    rsp_test_forward_kernel<<<64, 256, 0, stream>>>(a);
    return cudaGetLastError();
}
} // namespace

extern "C" cudaError_t rsp_test_forward(const rsp__kgeom *geom, const uint32_t *slots, uint32_t n,
                                        uint64_t seed, uint32_t delay_us, cudaStream_t stream)
{
    return forward_launch(geom, slots, nullptr, n, seed, delay_us, stream);
}

extern "C" cudaError_t rsp_test_forward_indexed(const rsp__kgeom *geom,
                                                const int32_t *d_slot_indices, uint32_t n,
                                                uint64_t seed, uint32_t delay_us,
                                                cudaStream_t stream)
{
    return forward_launch(geom, nullptr, d_slot_indices, n, seed, delay_us, stream);
}
