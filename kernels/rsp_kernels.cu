/*
 * Batched zero and copy kernels (see rsp_kernels.h for the contract).
 * SPDX-License-Identifier: Apache-2.0
 *
 * One routine, rsp__kchunk, moves the bytes of one chunk; it is __host__
 * __device__ so the host emulators run exactly the code the GPU runs.
 */
#include "rsp_kernels.h"

#include <cuda_runtime.h>
#include <stddef.h>

namespace
{

/* Host emulation only: accesses whose address is not a multiple of their
 * width. x86 forgives them, a GPU faults, so the emulators count them. */
thread_local uint64_t rsp__kmisaligned;

/* Everything one launch needs, passed by value (about 2.3 KB of the 4 KB of
 * kernel parameters): the geometry plus, per block, the chunks of one region
 * and the first chunk id of the block, so a chunk id decodes without
 * searching memory. */
struct rsp__klaunch {
    rsp__kgeom geom;
    uint64_t region_chunks[RSP__KMAX_BLOCKS];
    uint64_t first_chunk[RSP__KMAX_BLOCKS + 1]; /* [num_blocks] = total */
};

static_assert(sizeof(rsp__klaunch) <= 4000, "kernel parameters must stay under 4 KB");
static_assert(RSP__KCHUNK % (16u * RSP__KTHREADS) == 0, "a chunk is whole 16-byte rounds");

/* Fill *L for `count` items; returns the total number of chunks. */
uint64_t rsp__kprepare(const rsp__kgeom *geom, uint32_t count, rsp__klaunch *L)
{
    L->geom = *geom;
    L->first_chunk[0] = 0;
    for (uint32_t b = 0; b < geom->num_blocks; b++) {
        const uint64_t sb = geom->blocks[b].slot_bytes;
        /* +15: the chunk grid starts at the destination rounded down to 16,
         * so a region may straddle one more chunk than its size says. */
        const uint64_t per_region = sb ? (sb + 15 + RSP__KCHUNK - 1) / RSP__KCHUNK : 0;
        L->region_chunks[b] = per_region;
        L->first_chunk[b + 1] = L->first_chunk[b] + per_region * count * geom->num_layers;
    }
    return L->first_chunk[geom->num_blocks];
}

/* Move n elements of type T: dst[i] = src[i], or 0 when ZERO. Four accesses
 * are issued before the first store so each thread keeps several loads in
 * flight; the result is the same for any thread count. */
template <typename T, bool ZERO>
__host__ __device__ inline void rsp__kbody(unsigned char *dst, const unsigned char *src, uint64_t n,
                                           unsigned tid, unsigned nt)
{
    T *d = reinterpret_cast<T *>(dst);
    const T *s = reinterpret_cast<const T *>(src);
#ifndef __CUDA_ARCH__
    if ((uintptr_t)dst % sizeof(T) || (!ZERO && (uintptr_t)src % sizeof(T)))
        rsp__kmisaligned++;
#endif
    const uint64_t st = nt;
    uint64_t i = tid;
    for (; i + 3 * st < n; i += 4 * st) {
        if (ZERO) {
            const T z = T();
            d[i] = z;
            d[i + st] = z;
            d[i + 2 * st] = z;
            d[i + 3 * st] = z;
        } else {
            const T v0 = s[i], v1 = s[i + st], v2 = s[i + 2 * st], v3 = s[i + 3 * st];
            d[i] = v0;
            d[i + st] = v1;
            d[i + 2 * st] = v2;
            d[i + 3 * st] = v3;
        }
    }
    for (; i < n; i += st)
        d[i] = ZERO ? T() : s[i];
}

/* Bytes [x0, x1) one by one (heads and tails, fewer than 32 bytes). */
template <bool ZERO>
__host__ __device__ inline void rsp__kbytes(unsigned char *dst, const unsigned char *src,
                                            uint64_t x0, uint64_t x1, unsigned tid, unsigned nt)
{
    for (uint64_t x = x0 + tid; x < x1; x += nt)
        dst[x] = ZERO ? (unsigned char)0 : src[x];
}

/* (layer, slot id) of block bl: the id resolved to its storage (a tier
 * when at or past that tier's first id, else the request slots). */
__host__ __device__ inline unsigned char *rsp__kslot(const rsp__kgeom &g, const rsp__kblock &bl,
                                                     uint64_t layer, uint32_t id)
{
    for (int t = RSP__KTIERS - 1; t >= 0; t--)
        if (g.tier_first[t] && id >= g.tier_first[t])
            return bl.tier_base[t] + layer * bl.tier_layer_bytes[t] +
                   (uint64_t)(id - g.tier_first[t]) * bl.slot_bytes;
    return bl.base + layer * bl.layer_bytes + (uint64_t)id * bl.slot_bytes;
}

/* The work of one chunk, for thread `tid` of `nt`. */
template <bool ZERO>
__host__ __device__ inline void rsp__kchunk(const rsp__klaunch &L, const uint32_t *slots,
                                            const rsp__kpair *pairs, uint64_t chunk, unsigned tid,
                                            unsigned nt)
{
    uint32_t b = 0;
    while (chunk >= L.first_chunk[b + 1])
        b++; /* empty blocks have first_chunk[b + 1] == first_chunk[b]: skipped */
    const rsp__kblock &bl = L.geom.blocks[b];
    const uint64_t local = chunk - L.first_chunk[b];
    const uint64_t region = local / L.region_chunks[b];
    const uint64_t c = local - region * L.region_chunks[b];
    const uint64_t item = region / L.geom.num_layers;
    const uint64_t layer = region - item * L.geom.num_layers;

    unsigned char *dst = rsp__kslot(L.geom, bl, layer, ZERO ? slots[item] : pairs[item].dst);
    const unsigned char *src = dst;
    if (!ZERO) {
        src = rsp__kslot(L.geom, bl, layer, pairs[item].src);
        if (src == dst)
            return; /* a copy onto itself leaves every byte as it is */
    }

    /* This chunk's bytes, as offsets from dst: the chunk grid is anchored at
     * dst rounded down to 16 bytes, so every chunk but the first starts
     * 16-byte aligned. */
    const uint64_t mis = (uint64_t)((uintptr_t)dst & 15u);
    uint64_t x0 = c * RSP__KCHUNK;
    uint64_t x1 = x0 + RSP__KCHUNK;
    x0 = x0 > mis ? x0 - mis : 0;
    x1 = x1 - mis < bl.slot_bytes ? x1 - mis : bl.slot_bytes;
    if (x0 >= x1)
        return; /* the spare chunk of a region that did not straddle */

    /* Widest access on which dst and src agree modulo the width. */
    uint64_t width = 16;
    if (!ZERO) {
        const uint64_t delta = (uint64_t)((uintptr_t)src - (uintptr_t)dst) | 16u;
        width = delta & (~delta + 1); /* lowest set bit: 1, 2, 4, 8 or 16 */
    }
    const uint64_t amis = (uint64_t)((uintptr_t)dst & (width - 1));
    /* Body [b0, b1): offsets whose dst address is a multiple of width. */
    uint64_t b0 = (x0 + amis + width - 1) / width * width - amis;
    const uint64_t b1r = (x1 + amis) / width * width;
    uint64_t b1 = b1r > amis ? b1r - amis : 0;
    if (width == 1 || b0 >= b1) {
        b0 = x1; /* too short for one aligned access: all bytes are head */
        b1 = x1;
    }
    rsp__kbytes<ZERO>(dst, src, x0, b0, tid, nt);
    rsp__kbytes<ZERO>(dst, src, b1, x1, tid, nt);
    if (b0 == b1)
        return;
    const uint64_t n = (b1 - b0) / width;
    switch (width) {
    case 16: rsp__kbody<uint4, ZERO>(dst + b0, src + b0, n, tid, nt); break;
    case 8: rsp__kbody<uint2, ZERO>(dst + b0, src + b0, n, tid, nt); break;
    case 4: rsp__kbody<uint32_t, ZERO>(dst + b0, src + b0, n, tid, nt); break;
    default: rsp__kbody<uint16_t, ZERO>(dst + b0, src + b0, n, tid, nt); break;
    }
}

/* Grid-stride over every chunk of the launch. __grid_constant__ keeps the
 * parameter block in parameter space (no per-thread copy). */
template <bool ZERO>
__global__ void __launch_bounds__(RSP__KTHREADS)
    rsp__kkernel(const __grid_constant__ rsp__klaunch L, const uint32_t *__restrict__ slots,
                 const rsp__kpair *__restrict__ pairs)
{
    const uint64_t total = L.first_chunk[L.geom.num_blocks];
    for (uint64_t chunk = blockIdx.x; chunk < total; chunk += gridDim.x)
        rsp__kchunk<ZERO>(L, slots, pairs, chunk, threadIdx.x, blockDim.x);
}

template <bool ZERO>
cudaError_t rsp__klaunch_on(const rsp__kgeom *geom, const uint32_t *slots, const rsp__kpair *pairs,
                            uint32_t count, uint32_t max_grid, cudaStream_t stream)
{
    if (count == 0 || geom->num_blocks == 0 || geom->num_blocks > RSP__KMAX_BLOCKS ||
        geom->num_layers == 0)
        return geom->num_blocks > RSP__KMAX_BLOCKS ? cudaErrorInvalidValue : cudaSuccess;
    rsp__klaunch L;
    const uint64_t total = rsp__kprepare(geom, count, &L);
    if (total == 0)
        return cudaSuccess;
    uint64_t grid = total;
    if (max_grid && grid > max_grid)
        grid = max_grid;
    if (grid > 0x7fffffffu)
        grid = 0x7fffffffu;
    rsp__kkernel<ZERO><<<(unsigned)grid, RSP__KTHREADS, 0, stream>>>(L, slots, pairs);
    return cudaGetLastError();
}

template <bool ZERO>
uint64_t rsp__kemulate(const rsp__kgeom *geom, const uint32_t *slots, const rsp__kpair *pairs,
                       uint32_t count, unsigned threads)
{
    if (count == 0 || geom->num_blocks == 0 || geom->num_blocks > RSP__KMAX_BLOCKS ||
        geom->num_layers == 0 || threads == 0)
        return 0;
    rsp__klaunch L;
    const uint64_t total = rsp__kprepare(geom, count, &L);
    rsp__kmisaligned = 0;
    for (uint64_t chunk = 0; chunk < total; chunk++)
        for (unsigned t = 0; t < threads; t++)
            rsp__kchunk<ZERO>(L, slots, pairs, chunk, t, threads);
    return rsp__kmisaligned;
}

} // namespace

extern "C" uint64_t rsp__kernels_chunks(const rsp__kgeom *geom, uint32_t count)
{
    if (geom->num_blocks > RSP__KMAX_BLOCKS || geom->num_layers == 0)
        return 0;
    rsp__klaunch L;
    return rsp__kprepare(geom, count, &L);
}

extern "C" cudaError_t rsp__kernels_zero(const rsp__kgeom *geom, const uint32_t *slots,
                                         uint32_t count, uint32_t max_grid, cudaStream_t stream)
{
    return rsp__klaunch_on<true>(geom, slots, nullptr, count, max_grid, stream);
}

extern "C" cudaError_t rsp__kernels_copy(const rsp__kgeom *geom, const rsp__kpair *pairs,
                                         uint32_t count, uint32_t max_grid, cudaStream_t stream)
{
    return rsp__klaunch_on<false>(geom, nullptr, pairs, count, max_grid, stream);
}

extern "C" uint64_t rsp__kernels_zero_host(const rsp__kgeom *geom, const uint32_t *slots,
                                           uint32_t count, unsigned threads)
{
    return rsp__kemulate<true>(geom, slots, nullptr, count, threads);
}

extern "C" uint64_t rsp__kernels_copy_host(const rsp__kgeom *geom, const rsp__kpair *pairs,
                                           uint32_t count, unsigned threads)
{
    return rsp__kemulate<false>(geom, nullptr, pairs, count, threads);
}
