/*
 * guard: what guard mode costs a step. The same steady decode step (N
 * requests, one row each on "main", admit + plan + commit by the
 * synchronous wrappers, forward_done complete) on two pools of the same
 * shape in the same run, guard mode on against off ("baseline": off), in
 * alternating blocks so drift hits both. Points: rows N with slots 2N + 8
 * (the free slots are checked too), and 8 rows in a 1032-slot pool with
 * 64 more requests held but not in the step (the unaddressed holdings
 * are snapshotted and compared). Slots of 1 KiB.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

static void one_step(rsp_pool *pool, rsp_row *rows, uint32_t n, uint64_t sid)
{
    rsp_error err = {0};
    rsp_step s = {.step_id = sid, .rows = rows, .num_rows = n};
    rsp_admit_outcome o;
    BENCH_CHECK(rsp_step_admit(pool, &s, &o, &err), &err);
    if (!o.ok)
        bench_die("guard: admit", RSP_ECAPACITY, "pool full");
    BENCH_CHECK(rsp_step_plan(pool, &s, &err), &err);
    rsp_event done = rsp_event_complete();
    BENCH_CHECK(rsp_step_commit(pool, &s, &done, &err), &err);
}

/* A pool with `idle` requests that hold a slot and are in no later step. */
static rsp_pool *make_pool(uint32_t max_slots, bool guard, uint32_t idle, uint64_t *sid)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_KIB, max_slots);
    cfg.guard = guard;
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    if (idle) {
        rsp_row *rows = calloc(idle, sizeof *rows);
        if (!rows)
            bench_die("calloc rows", RSP_ENOMEM, "");
        for (uint32_t i = 0; i < idle; i++)
            rows[i] = (rsp_row){.rid = 1000000 + i, .label = RSP_LABEL_MAIN, .span = 1};
        one_step(pool, rows, idle, ++*sid);
        free(rows);
    }
    return pool;
}

static void run_point(const bench_opts *o, uint32_t n, uint32_t max_slots, uint32_t idle)
{
    uint64_t sid[2] = {0, 0};
    rsp_pool *pools[2] = {make_pool(max_slots, true, idle, &sid[0]),
                          make_pool(max_slots, false, idle, &sid[1])};
    rsp_row *rows = calloc(n, sizeof *rows);
    if (!rows)
        bench_die("calloc rows", RSP_ENOMEM, "");
    for (uint32_t i = 0; i < n; i++)
        rows[i] = (rsp_row){.rid = i + 1, .label = RSP_LABEL_MAIN, .span = 1};
    const uint32_t warm = o->quick ? 50 : 200, iters = o->quick ? 300 : 2000, rounds = 2;
    bench_samples s[2];
    uint64_t wall[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        bench_samples_init(&s[k], (size_t)iters * rounds);
    for (uint32_t r = 0; r < rounds; r++)
        for (int k = 0; k < 2; k++) {
            for (uint32_t i = 0; i < warm; i++)
                one_step(pools[k], rows, n, ++sid[k]);
            uint64_t w0 = bench_now_ns();
            for (uint32_t i = 0; i < iters; i++) {
                uint64_t t0 = bench_now_ns();
                one_step(pools[k], rows, n, ++sid[k]);
                bench_samples_add(&s[k], (double)(bench_now_ns() - t0));
            }
            wall[k] += bench_now_ns() - w0;
        }
    bench_result res = {.bench = "guard", .baseline = "guard_off"};
    snprintf(res.params, sizeof res.params,
             "\"rows\": %u, \"max_slots\": %u, \"idle_held\": %u, \"slot_bytes\": 1024", n,
             max_slots, idle);
    bench_result_samples(&res, &s[0], &s[1]);
    res.ops_per_s = 1e9 * (double)s[0].n / (double)wall[0];
    res.baseline_ops_per_s = 1e9 * (double)s[1].n / (double)wall[1];
    bench_report(o, &res);
    for (int k = 0; k < 2; k++) {
        bench_samples_fini(&s[k]);
        rsp_pool_destroy(pools[k]);
    }
    free(rows);
}

void bench_guard(const bench_opts *o)
{
    static const uint32_t rows[] = {1, 8, 64};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        run_point(o, rows[i], 2 * rows[i] + 8, 0);
    run_point(o, 8, 1032, 64);
}
