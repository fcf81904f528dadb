/*
 * Batched slot kernels: zero a set of slots, copy a set of slot pairs, across
 * every layer of every block of a pool, in one launch each.
 * SPDX-License-Identifier: Apache-2.0
 *
 * C-callable (the launchers are extern "C"); the kernels live in
 * rsp_kernels.cu. Only src/device/cuda.c, tests/cuda/ and bench/gpu/ include
 * this file. Knows nothing of requests, labels or the core: it sees block
 * base pointers, byte strides and slot numbers.
 *
 * Work split. A *region* is one (block, layer, slot): slot_bytes contiguous
 * bytes at base + layer * layer_bytes + slot * slot_bytes. Each region is cut
 * into chunks of RSP__KCHUNK bytes on the 16-byte grid of its destination
 * address; one thread block handles one chunk at a time (grid-stride over all
 * chunks of all regions of all blocks), so the cost of a launch does not
 * depend on how the bytes are spread over slots, layers and blocks.
 *
 * Width. Inside a chunk the body is moved with the widest access W in
 * {16, 8, 4, 2} bytes such that destination and source agree modulo W (zero:
 * always 16); the unaligned head and tail (< W bytes each) are moved byte by
 * byte. So a bf16 block of 3 elements (6-byte slots) is exact, and 16-byte
 * aligned blocks run entirely on 16-byte accesses.
 *
 * Threads: the launchers may be called from any thread that has the right
 * CUDA device current; they only enqueue on `stream`. The emulators run on
 * the calling thread and touch host memory only.
 */
#ifndef RSP_KERNELS_H
#define RSP_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Same bound as RSP_MAX_BLOCKS in rsp.h; cuda.c checks they agree. */
#define RSP__KMAX_BLOCKS 32
/* Bytes of one chunk: 256 threads x 16 bytes x 8 accesses. */
#define RSP__KCHUNK 32768u
/* Threads per thread block of both kernels. */
#define RSP__KTHREADS 256u

/* Checkpoint tiers the kernels address besides the request slots: the
 * device tier and the host tier (rsp_tier order). */
#define RSP__KTIERS 2

/* One block of the pool as the kernels see it: the request slots, and the
 * same block of each checkpoint tier (the same [num_layers, count, *shape]
 * layout, its own count). */
typedef struct rsp__kblock {
    unsigned char *base;  /* device pointer of (layer 0, slot 0); host for the emulators */
    uint64_t slot_bytes;  /* bytes of one slot of one layer; 0 = skip the block */
    uint64_t layer_bytes; /* distance between layers: slot_bytes * max_slots */
    /* Tier t: (layer 0, slot index 0) and its distance between layers
     * (slot_bytes * the tier's count). The host tier's base is the device
     * pointer of mapped pinned host memory (cudaHostGetDevicePointer). */
    unsigned char *tier_base[RSP__KTIERS];
    uint64_t tier_layer_bytes[RSP__KTIERS];
} rsp__kblock;

/* The pool's geometry: built once, passed by value to every launch. */
typedef struct rsp__kgeom {
    uint32_t num_blocks; /* <= RSP__KMAX_BLOCKS */
    uint32_t num_layers;
    /* Slot ids from tier_first[t] on (up to the next tier) are tier t's
     * slots, index id - tier_first[t]; 0: no such tier (request slots start
     * at id 0, so no tier can). A geometry zeroed but for the request slots
     * addresses request slots only. */
    uint32_t tier_first[RSP__KTIERS];
    rsp__kblock blocks[RSP__KMAX_BLOCKS];
} rsp__kgeom;

/* One copy: slot id src onto slot id dst (same layout as rsp__copy in
 * work.h); each id is resolved to its storage (tier_first), so a copy may
 * go any way between request slots and the tiers. */
typedef struct rsp__kpair {
    uint32_t src;
    uint32_t dst;
} rsp__kpair;

/*
 * Chunks (thread-block work items) one launch over `count` slots or pairs
 * would process. 0 means nothing to do (no launch). O(blocks).
 */
uint64_t rsp__kernels_chunks(const rsp__kgeom *geom, uint32_t count);

/*
 * Enqueue one kernel on `stream` that zeroes slots[0 .. count) (device
 * memory, uint32 slot ids, each resolved to its storage like a copy's) in
 * every layer of every block. max_grid caps
 * the grid (e.g. 8 x multiprocessors); 0 = no cap. count == 0 launches
 * nothing. Slot numbers are trusted: the caller checks them against
 * the storages (request slots and tiers) the geometry has. Returns the
 * launch error (cudaSuccess if none); never waits.
 */
cudaError_t rsp__kernels_zero(const rsp__kgeom *geom, const uint32_t *slots, uint32_t count,
                              uint32_t max_grid, cudaStream_t stream);

/*
 * Enqueue one kernel on `stream` that copies, for every pair of
 * pairs[0 .. count) (device memory), slot src onto slot dst in every layer of
 * every block. No slot may be the destination of two pairs, nor both a
 * source and a destination, unless src == dst (a copy onto itself, which
 * leaves the bytes as they are). Same contract as rsp__kernels_zero.
 */
cudaError_t rsp__kernels_copy(const rsp__kgeom *geom, const rsp__kpair *pairs, uint32_t count,
                              uint32_t max_grid, cudaStream_t stream);

/*
 * Host emulators: run the very chunk code of the kernels on the CPU, chunk by
 * chunk and thread by thread (`threads` emulated threads per chunk, >= 1), on
 * host memory (geom bases, slots and pairs are host pointers). They exist so
 * the split, alignment and tail logic is tested byte for byte on machines
 * without a GPU. They return how many wide accesses were misaligned for
 * their width (the CPU forgives those, a GPU would fault): must be 0.
 * Calling thread; cost: the bytes moved, serially.
 */
uint64_t rsp__kernels_zero_host(const rsp__kgeom *geom, const uint32_t *slots, uint32_t count,
                                unsigned threads);
uint64_t rsp__kernels_copy_host(const rsp__kgeom *geom, const rsp__kpair *pairs, uint32_t count,
                                unsigned threads);

#ifdef __cplusplus
}
#endif

#endif
