/*
 * Guard mode's checksum kernel (rsp_guard.h). One thread block per region
 * at a time (grid-stride over all regions); its threads stride over the
 * region's words, and each adds its partial sum with one atomicAdd.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "rsp_guard.h"

namespace
{

constexpr unsigned kThreads = 256;
constexpr unsigned kMaxGrid = 4096;

/* rsp__sum_mix of device_impl.h: mix(0) == 0. */
__device__ unsigned long long mix(unsigned long long x)
{
    x *= 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

/* Word i of a region of n bytes at p, little-endian, zero past the end;
 * byte loads unless the word is whole and 8-byte aligned. */
__device__ unsigned long long word_at(const unsigned char *p, unsigned long long n,
                                      unsigned long long i)
{
    const unsigned char *w = p + i * 8;
    if ((i + 1) * 8 <= n && (reinterpret_cast<uintptr_t>(w) & 7) == 0)
        return *reinterpret_cast<const unsigned long long *>(w);
    unsigned long long v = 0;
    for (unsigned k = 0; k < 8 && i * 8 + k < n; k++)
        v |= static_cast<unsigned long long>(w[k]) << (8 * k);
    return v;
}

__global__ void checksum_kernel(rsp__kgeom geom, const uint32_t *slots, uint32_t count,
                                unsigned long long *out)
{
    const unsigned long long regions =
        static_cast<unsigned long long>(count) * geom.num_blocks * geom.num_layers;
    for (unsigned long long r = blockIdx.x; r < regions; r += gridDim.x) {
        const unsigned l = static_cast<unsigned>(r % geom.num_layers);
        const unsigned b = static_cast<unsigned>((r / geom.num_layers) % geom.num_blocks);
        const unsigned long long i =
            r / (static_cast<unsigned long long>(geom.num_layers) * geom.num_blocks);
        const rsp__kblock &bl = geom.blocks[b];
        const unsigned char *p = bl.base + l * bl.layer_bytes + slots[i] * bl.slot_bytes;
        const unsigned long long words = (bl.slot_bytes + 7) / 8;
        unsigned long long h = 0;
        for (unsigned long long w = threadIdx.x; w < words; w += blockDim.x)
            h += mix(word_at(p, bl.slot_bytes, w)) * (2 * w + 1);
        if (h)
            atomicAdd(&out[r], h); /* wraps mod 2^64, like the host's sum */
    }
}

} // namespace

extern "C" cudaError_t rsp__kernels_checksum(const rsp__kgeom *geom, const uint32_t *slots,
                                             uint32_t count, unsigned long long *out,
                                             cudaStream_t stream)
{
    const unsigned long long regions =
        static_cast<unsigned long long>(count) * geom->num_blocks * geom->num_layers;
    if (regions == 0)
        return cudaSuccess;
    const unsigned grid = regions < kMaxGrid ? static_cast<unsigned>(regions) : kMaxGrid;
    checksum_kernel<<<grid, kThreads, 0, stream>>>(*geom, slots, count, out);
    return cudaGetLastError();
}
