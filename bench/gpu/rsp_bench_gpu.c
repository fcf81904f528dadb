/*
 * rsp-bench-gpu: the batched zero and fork of the CUDA device against the
 * same work done one region at a time, and against one big memcpy.
 * SPDX-License-Identifier: Apache-2.0
 *
 * For 1, 16 and 256 slots of 64 KiB, 1 MiB and 8 MiB per slot (48 layers,
 * two blocks, "conv" a quarter and "ssm" three quarters of each layer):
 *   batched zero   one ZERO op through rsp__device_submit (one launch)
 *   batched fork   one COPY op of n pairs (one launch)
 *   per-region     cudaMemsetAsync / cudaMemcpyAsync per (layer, block, slot)
 *   reference      one cudaMemcpyAsync device-to-device of n * slot bytes
 * Each is enqueued `reps` times back to back and timed from the first
 * enqueue to the end of a synchronize, so launch and submit costs count.
 * Bandwidth = bytes written (zero) or copied (fork) per second.
 *
 * Targets: batched fork of 256 x 8 MiB >= 80 % of the reference
 * bandwidth; batched >= 10x faster than per-region for 256 x 64 KiB.
 * Prints a table and a verdict per target; --strict exits 1 on a miss.
 * Exit 2 without a GPU. Usage: rsp-bench-gpu [--strict] [--quick]
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/layout.h"
#include "core/work.h"
#include "device/device.h"

#define LAYERS 48u
#define MAX_N 256u

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "rsp-bench-gpu: %s: %s\n", #call, cudaGetErrorString(e_));             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define RK(call)                                                                                   \
    do {                                                                                           \
        rsp_error err_ = {0};                                                                      \
        rsp_status s_ = (call);                                                                    \
        if (s_ != RSP_OK) {                                                                        \
            fprintf(stderr, "rsp-bench-gpu: %s: %s\n", #call, err_.message);                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct result {
    uint32_t n;
    uint64_t slot_bytes;   /* all layers, both blocks */
    double zero_s, fork_s; /* batched, per op */
    double zero_region_s, fork_region_s;
    double memcpy_s;
} result;

/* One pool of 2n+1 slots: sink, n sources, n destinations. */
static void bench_one(uint32_t n, uint64_t per_slot, bool quick, result *r)
{
    /* per layer: round down to 16 bytes, a quarter (rounded) to conv */
    const uint64_t per_layer = per_slot / LAYERS / 16 * 16;
    const uint64_t conv = per_layer / 4 / 16 * 16;
    const uint64_t ssm = per_layer - conv;
    rsp_block_config blocks[2];
    memset(blocks, 0, sizeof blocks);
    blocks[0].name = "conv";
    blocks[0].dtype = RSP_DTYPE_BF16;
    blocks[0].ndim = 1;
    blocks[0].shape[0] = (int64_t)(conv / 2);
    blocks[1].name = "ssm";
    blocks[1].dtype = RSP_DTYPE_F32;
    blocks[1].ndim = 1;
    blocks[1].shape[0] = (int64_t)(ssm / 4);
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = LAYERS;
    cfg.blocks = blocks;
    cfg.num_blocks = 2;
    cfg.max_slots = 2 * n + 1;
    cfg.device = RSP_DEVICE_CUDA;
    rsp__layout lay;
    rsp_error err = {0};
    if (rsp__layout_build(&cfg, &lay, &err) != RSP_OK) {
        fprintf(stderr, "rsp-bench-gpu: layout: %s\n", err.message);
        exit(1);
    }
    rsp__device *dev = NULL;
    if (rsp__device_create(RSP_DEVICE_CUDA, 0, &lay, &dev, &err) != RSP_OK) {
        fprintf(stderr, "rsp-bench-gpu: device: %s\n", err.message);
        exit(1);
    }
    const uint64_t bytes = per_layer * LAYERS * n; /* moved by one op */
    r->n = n;
    r->slot_bytes = per_layer * LAYERS;

    /* repetitions: about 4 GB of traffic per measurement, 10..200 */
    uint32_t reps = (uint32_t)(4e9 / (double)(bytes ? bytes : 1));
    reps = reps < 10 ? 10 : reps > 200 ? 200 : reps;
    if (quick)
        reps = reps > 5 ? 5 : reps;
    const uint32_t region_reps = n * LAYERS * 2 > 4000 ? 2 : (quick ? 3 : 10);

    /* the work lists */
    static uint32_t zslots[MAX_N];
    static rsp__copy pairs[MAX_N];
    for (uint32_t i = 0; i < n; i++) {
        zslots[i] = n + 1 + i;
        pairs[i] = (rsp__copy){1 + i, n + 1 + i};
    }
    rsp__op zop = {.kind = RSP__OP_ZERO, .first = 0, .count = n};
    rsp__op cop = {.kind = RSP__OP_COPY, .first = 0, .count = n};
    rsp__work wz = {
        .ops = &zop, .num_ops = 1, .cap_ops = 1, .slots = zslots, .num_slots = n, .cap_slots = n};
    rsp__work wc = {
        .ops = &cop, .num_ops = 1, .cap_ops = 1, .pairs = pairs, .num_pairs = n, .cap_pairs = n};

    /* warm-up: kernels loaded, staging allocated */
    for (int i = 0; i < 2; i++) {
        RK(rsp__device_submit(dev, &wz, NULL, &err_));
        RK(rsp__device_submit(dev, &wc, NULL, &err_));
    }
    RK(rsp__device_sync(dev, &err_));

    double t0 = now_s();
    for (uint32_t i = 0; i < reps; i++)
        RK(rsp__device_submit(dev, &wz, NULL, &err_));
    RK(rsp__device_sync(dev, &err_));
    r->zero_s = (now_s() - t0) / reps;

    t0 = now_s();
    for (uint32_t i = 0; i < reps; i++)
        RK(rsp__device_submit(dev, &wc, NULL, &err_));
    RK(rsp__device_sync(dev, &err_));
    r->fork_s = (now_s() - t0) / reps;

    /* the same regions, one runtime call each, on a caller stream */
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t rr = pass == 0 ? 1 : region_reps; /* pass 0 warms up */
        t0 = now_s();
        for (uint32_t k = 0; k < rr; k++)
            for (uint32_t l = 0; l < LAYERS; l++)
                for (uint32_t b = 0; b < 2; b++)
                    for (uint32_t i = 0; i < n; i++) {
                        char *base = rsp__device_block_base(dev, b);
                        CK(cudaMemsetAsync(base + rsp__layout_offset(&lay, b, l, zslots[i]), 0,
                                           lay.blocks[b].slot_bytes, s));
                    }
        CK(cudaStreamSynchronize(s));
        r->zero_region_s = (now_s() - t0) / rr;
        t0 = now_s();
        for (uint32_t k = 0; k < rr; k++)
            for (uint32_t l = 0; l < LAYERS; l++)
                for (uint32_t b = 0; b < 2; b++)
                    for (uint32_t i = 0; i < n; i++) {
                        char *base = rsp__device_block_base(dev, b);
                        CK(cudaMemcpyAsync(base + rsp__layout_offset(&lay, b, l, pairs[i].dst),
                                           base + rsp__layout_offset(&lay, b, l, pairs[i].src),
                                           lay.blocks[b].slot_bytes, cudaMemcpyDeviceToDevice, s));
                    }
        CK(cudaStreamSynchronize(s));
        r->fork_region_s = (now_s() - t0) / rr;
    }

    /* the reference: one contiguous copy of the same number of bytes */
    void *src = NULL, *dst = NULL;
    CK(cudaMalloc(&src, bytes));
    CK(cudaMalloc(&dst, bytes));
    CK(cudaMemsetAsync(src, 1, bytes, s));
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s)); /* warm-up */
    CK(cudaStreamSynchronize(s));
    t0 = now_s();
    for (uint32_t i = 0; i < reps; i++)
        CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    CK(cudaStreamSynchronize(s));
    r->memcpy_s = (now_s() - t0) / reps;
    CK(cudaFree(src));
    CK(cudaFree(dst));
    CK(cudaStreamDestroy(s));
    rsp__device_destroy(dev);
}

static double gbps(uint64_t bytes, double s)
{
    return s > 0 ? (double)bytes / s / 1e9 : 0;
}

int main(int argc, char **argv)
{
    bool strict = false, quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--strict"))
            strict = true;
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else {
            fprintf(stderr, "usage: rsp-bench-gpu [--strict] [--quick]\n");
            return 2;
        }
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("rsp-bench-gpu: skipped: no CUDA device (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 2;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("rsp-bench-gpu on %s (%d SMs, %.0f GiB), %u layers, blocks conv 1/4 + ssm 3/4\n",
           prop.name, prop.multiProcessorCount, (double)prop.totalGlobalMem / (1u << 30), LAYERS);
    printf("%5s %9s | %10s %8s | %10s %8s %6s | %10s %10s | %7s %7s\n", "slots", "per-slot",
           "zero us", "GB/s", "fork us", "GB/s", "%mcpy", "zero-reg", "fork-reg", "x zero",
           "x fork");

    const uint32_t ns[3] = {1, 16, 256};
    const uint64_t sizes[3] = {64u << 10, 1u << 20, 8u << 20};
    const char *size_names[3] = {"64KiB", "1MiB", "8MiB"};
    result big = {0}, small = {0};
    for (int si = 0; si < 3; si++)
        for (int ni = 0; ni < 3; ni++) {
            result r;
            bench_one(ns[ni], sizes[si], quick, &r);
            const uint64_t bytes = r.slot_bytes * r.n;
            printf("%5u %9s | %10.1f %8.1f | %10.1f %8.1f %5.0f%% | %8.1fus %8.1fus | %6.1fx "
                   "%6.1fx\n",
                   r.n, size_names[si], r.zero_s * 1e6, gbps(bytes, r.zero_s), r.fork_s * 1e6,
                   gbps(bytes, r.fork_s), 100.0 * r.memcpy_s / r.fork_s, r.zero_region_s * 1e6,
                   r.fork_region_s * 1e6, r.zero_region_s / r.zero_s, r.fork_region_s / r.fork_s);
            fflush(stdout);
            if (r.n == 256 && si == 2)
                big = r;
            if (r.n == 256 && si == 0)
                small = r;
        }

    const double fork_vs_memcpy = big.memcpy_s / big.fork_s;
    const double zero_x = small.zero_region_s / small.zero_s;
    const double fork_x = small.fork_region_s / small.fork_s;
    const bool t1 = fork_vs_memcpy >= 0.8;
    const bool t2 = zero_x >= 10 && fork_x >= 10;
    printf("\nreference memcpy 256 x 8MiB: %.1f GB/s; batched fork %.1f GB/s = %.0f%% "
           "(target >= 80%%): %s\n",
           gbps(big.slot_bytes * 256, big.memcpy_s), gbps(big.slot_bytes * 256, big.fork_s),
           100 * fork_vs_memcpy, t1 ? "MET" : "MISSED");
    printf("256 x 64KiB: batched zero %.1fx, batched fork %.1fx faster than per-region "
           "(target >= 10x): %s\n",
           zero_x, fork_x, t2 ? "MET" : "MISSED");
    return strict && !(t1 && t2) ? 1 : 0;
}
