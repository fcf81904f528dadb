/*
 * rsp-gpu-tiers: checkpoint-tier copy figures on a GPU, for tests/gpu/run.sh.
 * SPDX-License-Identifier: Apache-2.0
 *
 * A 1 MiB slot (two bf16 blocks, 8 layers: 16 KiB + 112 KiB a layer) is
 * copied through the CUDA device's work list (rsp__device_submit: one COPY
 * op, one batched kernel launch on the pool stream) between the request
 * slots and the checkpoint tiers:
 *   D2D  request slot -> device tier (a take on the device tier)
 *   H2D  host tier -> request slot (a restore from the host tier, through
 *        mapped pinned memory)
 *   D2H  request slot -> host tier (a demotion / swap out)
 * against cudaMemcpyAsync of the same bytes (one contiguous copy per slot
 * between cudaMalloc and cudaHostAlloc memory) on a stream of its own. Each
 * figure is the mean of REPS back-to-back operations after a warm-up, timed
 * by the host clock around the whole run (submit to completion), for one
 * slot and for a batch of 8 slots in one op. Before timing, the bytes of
 * each direction are verified once with rsp__device_read.
 *
 * Prints one line per figure, starting "tiers:"; exit 0 when it ran (the
 * figures are not judged), 1 on an error, 2 without a GPU. Not a test: a
 * benchmark lives outside the assertions (docs/testing.md).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/layout.h"
#include "core/work.h"
#include "device/device.h"

#define REPS 200
#define WARM 20
#define BATCH 8

static rsp_block_config blocks[2] = {
    {.name = "conv", .dtype = RSP_DTYPE_BF16, .ndim = 2, .shape = {4, 2048}},
    {.name = "ssm", .dtype = RSP_DTYPE_BF16, .ndim = 2, .shape = {56, 1024}},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rsp-gpu-tiers: " __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct run {
    rsp__layout lay;
    rsp__device *dev;
    rsp__op op;
    rsp__copy pairs[BATCH];
    rsp__work w;
} run;

/* One work list: one COPY op of n pairs src[i] -> dst[i]. */
static void set_pairs(run *r, uint32_t src0, uint32_t dst0, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        r->pairs[i] = (rsp__copy){src0 + i, dst0 + i};
    memset(&r->op, 0, sizeof r->op);
    r->op.kind = RSP__OP_COPY;
    r->op.count = n;
    memset(&r->w, 0, sizeof r->w);
    r->w.ops = &r->op;
    r->w.num_ops = r->w.cap_ops = 1;
    r->w.pairs = r->pairs;
    r->w.num_pairs = r->w.cap_pairs = n;
}

/* Seconds per work list: REPS submits, then a sync. */
static double time_pool(run *r)
{
    rsp_error err = {0};
    for (int i = 0; i < WARM; i++)
        CHECK(rsp__device_submit(r->dev, &r->w, NULL, &err) == RSP_OK, "submit: %s", err.message);
    CHECK(rsp__device_sync(r->dev, &err) == RSP_OK, "sync: %s", err.message);
    const double t0 = now_s();
    for (int i = 0; i < REPS; i++)
        CHECK(rsp__device_submit(r->dev, &r->w, NULL, &err) == RSP_OK, "submit: %s", err.message);
    CHECK(rsp__device_sync(r->dev, &err) == RSP_OK, "sync: %s", err.message);
    return (now_s() - t0) / REPS;
}

/* Seconds per cudaMemcpyAsync of `bytes` (n slots back to back count as
 * one copy of n * slot bytes). */
static double time_memcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                          cudaStream_t s)
{
    for (int i = 0; i < WARM; i++)
        CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s) == cudaSuccess, "cudaMemcpyAsync");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
    const double t0 = now_s();
    for (int i = 0; i < REPS; i++)
        CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s) == cudaSuccess, "cudaMemcpyAsync");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "cudaStreamSynchronize");
    return (now_s() - t0) / REPS;
}

/* Paint request slot 0 on the device, copy it src -> dst through the work
 * list and compare every (block, layer) of dst with slot 0. */
static void verify(run *r, uint32_t via, uint32_t dst)
{
    rsp_error err = {0};
    const rsp__layout *lay = &r->lay;
    for (uint32_t b = 0; b < lay->num_blocks; b++) {
        const size_t n = (size_t)lay->blocks[b].slot_bytes;
        unsigned char *img = malloc(n);
        CHECK(img, "out of memory");
        for (uint32_t l = 0; l < lay->num_layers; l++) {
            for (size_t i = 0; i < n; i++)
                img[i] = (unsigned char)(1 + (b * 131u + l * 31u + i * 7u) % 251u);
            unsigned char *base = rsp__device_block_base(r->dev, b);
            CHECK(cudaMemcpy(base + rsp__layout_offset(lay, b, l, 0), img, n,
                             cudaMemcpyHostToDevice) == cudaSuccess,
                  "painting slot 0");
        }
        free(img);
    }
    set_pairs(r, 0, via, 1);
    CHECK(rsp__device_submit(r->dev, &r->w, NULL, &err) == RSP_OK, "submit: %s", err.message);
    set_pairs(r, via, dst, 1);
    CHECK(rsp__device_submit(r->dev, &r->w, NULL, &err) == RSP_OK, "submit: %s", err.message);
    for (uint32_t b = 0; b < lay->num_blocks; b++) {
        const size_t n = (size_t)lay->blocks[b].slot_bytes;
        unsigned char *want = malloc(n), *got = malloc(n);
        CHECK(want && got, "out of memory");
        for (uint32_t l = 0; l < lay->num_layers; l++) {
            CHECK(rsp__device_read(r->dev, b, l, 0, want, &err) == RSP_OK, "read");
            CHECK(rsp__device_read(r->dev, b, l, dst, got, &err) == RSP_OK, "read");
            CHECK(memcmp(want, got, n) == 0, "slot %u differs from slot 0 after 0 -> %u -> %u", dst,
                  via, dst);
        }
        free(want);
        free(got);
    }
}

static void report(const char *name, uint32_t n, double pool, double base, size_t slot)
{
    const double bytes = (double)slot * n;
    printf("tiers: %s %u x 1 MiB: rsp work list %8.1f us (%6.1f GB/s)  cudaMemcpyAsync %8.1f us "
           "(%6.1f GB/s)  rsp/memcpy time %.2f\n",
           name, n, pool * 1e6, bytes / pool * 1e-9, base * 1e6, bytes / base * 1e-9, pool / base);
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("rsp-gpu-tiers: skipped: no CUDA device\n");
        return 2;
    }
    run r;
    memset(&r, 0, sizeof r);
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.blocks = blocks;
    cfg.num_blocks = 2;
    cfg.num_layers = 8;
    cfg.max_slots = BATCH + 1;
    cfg.max_checkpoints = BATCH;
    cfg.max_host_checkpoints = BATCH;
    rsp_error err = {0};
    CHECK(rsp__layout_build(&cfg, &r.lay, &err) == RSP_OK, "layout: %s", err.message);
    CHECK(r.lay.slot_bytes == (1u << 20), "slot is %llu bytes, not 1 MiB",
          (unsigned long long)r.lay.slot_bytes);
    CHECK(rsp__device_create(RSP_DEVICE_CUDA, 0, &r.lay, &r.dev, &err) == RSP_OK, "create: %s",
          err.message);
    const uint32_t R0 = 1, D0 = r.lay.max_slots, H0 = D0 + r.lay.max_checkpoints;
    verify(&r, D0, 1);          /* request -> device tier -> request */
    verify(&r, H0, 2);          /* request -> host tier -> request */
    verify(&r, H0 + 1, D0 + 1); /* request -> host tier -> device tier */
    printf("tiers: bytes verified: request <-> device tier, request <-> host tier, host -> "
           "device tier\n");

    const size_t slot = (size_t)r.lay.slot_bytes, big = slot * BATCH;
    void *dev_a = NULL, *dev_b = NULL, *pinned = NULL;
    cudaStream_t s = NULL;
    CHECK(cudaMalloc(&dev_a, big) == cudaSuccess && cudaMalloc(&dev_b, big) == cudaSuccess &&
              cudaHostAlloc(&pinned, big, cudaHostAllocDefault) == cudaSuccess &&
              cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess,
          "baseline buffers");
    memset(pinned, 1, big);
    static const uint32_t ns[2] = {1, BATCH};
    for (int k = 0; k < 2; k++) {
        const uint32_t n = ns[k];
        set_pairs(&r, R0, D0, n);
        report("D2D (request -> device tier)", n, time_pool(&r),
               time_memcpy(dev_b, dev_a, slot * n, cudaMemcpyDeviceToDevice, s), slot);
        set_pairs(&r, H0, R0, n);
        report("H2D (host tier -> request)  ", n, time_pool(&r),
               time_memcpy(dev_a, pinned, slot * n, cudaMemcpyHostToDevice, s), slot);
        set_pairs(&r, R0, H0, n);
        report("D2H (request -> host tier)  ", n, time_pool(&r),
               time_memcpy(pinned, dev_a, slot * n, cudaMemcpyDeviceToHost, s), slot);
    }
    cudaStreamDestroy(s);
    cudaFree(dev_a);
    cudaFree(dev_b);
    cudaFreeHost(pinned);
    rsp__device_destroy(r.dev);
    return 0;
}
