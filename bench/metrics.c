/*
 * metrics: what the owner's latency histograms cost a step.
 * SPDX-License-Identifier: Apache-2.0
 *
 * One pool, steady decode (N requests, one row each, the same rows every
 * step), each step admit + plan + commit through the synchronous wrappers,
 * the commit naming a host fence signalled before it (as an engine's
 * forward_done: the owner's device-lag entry is made and seen done).
 * Blocks of steps alternate with rsp_metrics_latency off and on, so both
 * see the same drift; "rsp" is on, the baseline ("latency_off") is off.
 * The ratio on / off is the histograms' cost: the owner's time per
 * message, the PLAN's post to its plan, and the commit's device lag.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

static void one_step(rsp_pool *pool, rsp_step *s, uint64_t sid, rsp_host_fence *fence)
{
    rsp_error err = {0};
    rsp_admit_outcome a;
    s->step_id = sid;
    BENCH_CHECK(rsp_step_admit(pool, s, &a, &err), &err);
    BENCH_CHECK(rsp_step_plan(pool, s, &err), &err);
    rsp_host_fence_signal(fence, sid); /* the forward is done */
    rsp_event done = rsp_event_host(fence, sid);
    BENCH_CHECK(rsp_step_commit(pool, s, &done, &err), &err);
}

static void run_point(const bench_opts *o, uint32_t n)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 2 * n + 8);
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    rsp_row *rows = calloc(n, sizeof *rows);
    if (!rows)
        bench_die("calloc", RSP_ENOMEM, "rows");
    for (uint32_t i = 0; i < n; i++) {
        rows[i] = (rsp_row){.rid = i + 1, .label = RSP_LABEL_MAIN, .span = 1};
        BENCH_CHECK(rsp_ingest(pool, i + 1, &err), &err);
    }
    rsp_step s = {.rows = rows, .num_rows = n};
    rsp_host_fence *fence;
    BENCH_CHECK(rsp_host_fence_create(&fence, &err), &err);
    const uint32_t warm = o->quick ? 100 : 500, iters = o->quick ? 600 : 4000, rounds = 4;
    bench_samples on, off;
    bench_samples_init(&on, (size_t)iters * rounds / 2);
    bench_samples_init(&off, (size_t)iters * rounds / 2);
    uint64_t sid = 0, wall[2] = {0, 0};
    for (uint32_t r = 0; r < rounds; r++) {
        const bool lat = r % 2 == 1;
        BENCH_CHECK(rsp_metrics_latency(pool, lat, &err), &err);
        for (uint32_t i = 0; i < warm; i++)
            one_step(pool, &s, ++sid, fence);
        const uint64_t w0 = bench_now_ns();
        for (uint32_t i = 0; i < iters; i++) {
            const uint64_t t0 = bench_now_ns();
            one_step(pool, &s, ++sid, fence);
            bench_samples_add(lat ? &on : &off, (double)(bench_now_ns() - t0));
        }
        wall[lat] += bench_now_ns() - w0;
    }
    bench_result res = {.bench = "metrics", .baseline = "latency_off"};
    snprintf(res.params, sizeof res.params, "\"api\": \"sync\", \"rows\": %u", n);
    bench_result_samples(&res, &on, &off);
    res.ops_per_s = 1e9 * (double)on.n / (double)wall[1];
    res.baseline_ops_per_s = 1e9 * (double)off.n / (double)wall[0];
    bench_report(o, &res);
    bench_samples_fini(&on);
    bench_samples_fini(&off);
    free(rows);
    rsp_pool_destroy(pool);
    rsp_host_fence_destroy(fence);
}

void bench_metrics(const bench_opts *o)
{
    static const uint32_t rows[] = {1, 64};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        run_point(o, rows[i]);
}
