/*
 * zero_fork: zero and fork (copy) of 1, 16, 256 slots of 1 MiB through the
 * host device, beside plain memset / memcpy of the same bytes.
 * SPDX-License-Identifier: Apache-2.0
 *
 * rsp side: the device layer the owner uses (src/device): one work list
 * with a ZERO of N slots (or a COPY of N pairs), rsp__device_submit, then
 * rsp__device_sync; the time includes the hand-off to the device worker and
 * the wake-up of the waiting thread (work of at most 1 MiB on an idle host
 * device runs inline in submit instead: see docs/device.md).
 * Baseline: memset / memcpy, in the calling thread, of exactly the same
 * byte ranges of the same storage (rsp__device_block_base), one call per
 * (block, layer, slot), so memory, pages and alignment are identical.
 * Repetitions alternate rsp and plain so both see the same cache state.
 * ratio = plain time / rsp time (1 = the device adds nothing).
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "core/layout.h"
#include "core/work.h"
#include "device/device.h"

#define MAXN 256u

static uint8_t *slot_ptr(rsp__device *dev, const rsp__layout *lay, uint32_t b, uint32_t l,
                         uint32_t s)
{
    return (uint8_t *)rsp__device_block_base(dev, b) + rsp__layout_offset(lay, b, l, s);
}

static void plain_zero(rsp__device *dev, const rsp__layout *lay, uint32_t n)
{
    for (uint32_t b = 0; b < lay->num_blocks; b++)
        for (uint32_t l = 0; l < lay->num_layers; l++)
            for (uint32_t k = 0; k < n; k++)
                memset(slot_ptr(dev, lay, b, l, 1 + k), 0, (size_t)lay->blocks[b].slot_bytes);
}

static void plain_copy(rsp__device *dev, const rsp__layout *lay, uint32_t n)
{
    for (uint32_t b = 0; b < lay->num_blocks; b++)
        for (uint32_t l = 0; l < lay->num_layers; l++)
            for (uint32_t k = 0; k < n; k++)
                memcpy(slot_ptr(dev, lay, b, l, 1 + MAXN + k), slot_ptr(dev, lay, b, l, 1 + k),
                       (size_t)lay->blocks[b].slot_bytes);
}

static uint64_t rsp_run(rsp__device *dev, rsp__work *w)
{
    rsp_error err = {0};
    uint64_t t0 = bench_now_ns();
    BENCH_CHECK(rsp__device_submit(dev, w, NULL, &err), &err);
    BENCH_CHECK(rsp__device_sync(dev, &err), &err);
    return bench_now_ns() - t0;
}

void bench_zero_fork(const bench_opts *o)
{
    rsp_pool_config cfg;
    /* Sink + MAXN sources + MAXN destinations. */
    bench_config(&cfg, BENCH_MIB, 1 + 2 * MAXN);
    rsp_error err = {0};
    static rsp__layout lay; /* large (RSP_MAX_BLOCKS entries): keep it off the stack */
    BENCH_CHECK(rsp__layout_build(&cfg, &lay, &err), &err);
    rsp__device *dev;
    BENCH_CHECK(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, &err), &err);
    rsp__work w;
    rsp__work_init(&w);

    /* Touch every page once (storage may come zeroed but unfaulted) so no
     * side pays the first-touch faults in its measured runs. */
    plain_copy(dev, &lay, MAXN);
    plain_zero(dev, &lay, MAXN);

    static const uint32_t counts[] = {1, 16, 256};
    for (int op = 0; op < 2; op++) {
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            uint32_t n = counts[k];
            uint32_t reps = n == 1    ? (o->quick ? 200 : 1000)
                            : n == 16 ? (o->quick ? 40 : 200)
                                      : (o->quick ? 6 : 30);
            rsp__work_clear(&w);
            for (uint32_t i = 0; i < n; i++) {
                rsp_status st =
                    op == 0 ? rsp__work_zero(&w, 1 + i) : rsp__work_copy(&w, 1 + i, 1 + MAXN + i);
                BENCH_CHECK(st, &err);
            }
            bench_samples rs, bs;
            bench_samples_init(&rs, reps);
            bench_samples_init(&bs, reps);
            for (uint32_t r = 0; r < reps + 2; r++) { /* 2 untimed warm-ups */
                uint64_t ns = rsp_run(dev, &w);
                if (r >= 2)
                    bench_samples_add(&rs, (double)ns);
                uint64_t t0 = bench_now_ns();
                if (op == 0)
                    plain_zero(dev, &lay, n);
                else
                    plain_copy(dev, &lay, n);
                ns = bench_now_ns() - t0;
                if (r >= 2)
                    bench_samples_add(&bs, (double)ns);
            }
            double bytes = (double)n * (double)lay.slot_bytes;
            bench_result res = {.bench = "zero_fork", .baseline = op == 0 ? "memset" : "memcpy"};
            snprintf(res.params, sizeof res.params,
                     "\"op\": \"%s\", \"slots\": %u, \"slot_bytes\": %llu",
                     op == 0 ? "zero" : "fork", n, (unsigned long long)lay.slot_bytes);
            bench_result_samples(&res, &rs, &bs);
            snprintf(res.extra, sizeof res.extra, "\"gb_per_s\": %.2f, \"baseline_gb_per_s\": %.2f",
                     bytes / res.median_ns, bytes / res.baseline_median_ns);
            bench_report(o, &res);
            bench_samples_fini(&rs);
            bench_samples_fini(&bs);
        }
    }
    rsp__work_fini(&w);
    rsp__device_destroy(dev);
}
