/*
 * ingest_remove: T client threads posting ingest + remove pairs; messages/s.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Each thread owns distinct rids and sends, for each, an ingest then a
 * remove (a request that comes and goes without a step: pure bookkeeping).
 * rsp side: fire-and-forget rsp_post (ticket NULL, waiting for inbox credit
 * when the inbox is full), then one rsp_barrier per thread, so the clock
 * stops when the owner has handled every message. Baseline: bl_ingest /
 * bl_remove, each a lock + core call + unlock. The total work per
 * repetition is the same at every thread count.
 * Vector form (rids_per_msg 64): the same rids and the same
 * work, posted as RSP_MSG_INGEST / RSP_MSG_REMOVE with a list of 64 rids
 * (msg.rids) each; the baseline is the same per-rid mutex calls (one lock
 * per rid: bench/baseline.c has no batched entry point).
 * One sample = one repetition: wall ns from the first thread's start to the
 * last thread's finish, divided by the rid operations (an ingest or a
 * remove of one rid: a message in the single form).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "baseline.h"
#include "bench.h"

typedef struct ir_arg {
    rsp_pool *pool;
    bl_pool *bl;
    uint32_t tid;
    uint32_t pairs;
    uint32_t batch; /* rids per message: 1 = the single form */
    pthread_barrier_t *gate;
    uint64_t t_start, t_end; /* this thread's own clock readings */
} ir_arg;

static rsp_rid ir_rid(uint32_t tid, uint32_t i, uint32_t rep)
{
    return ((rsp_rid)(tid + 1) << 48) | ((rsp_rid)rep << 32) | i;
}

static uint32_t g_rep; /* written by main between repetitions only */

#define IR_MAX_BATCH 64

/* The vector form: ingest a list of `batch` rids, then remove it. */
static void *ir_rsp_vector(ir_arg *a)
{
    rsp_error err = {0};
    rsp_rid rids[IR_MAX_BATCH];
    rsp_msg m = {.rids = rids};
    pthread_barrier_wait(a->gate);
    a->t_start = bench_now_ns();
    for (uint32_t i = 0; i < a->pairs; i += a->batch) {
        m.num_rids = a->pairs - i < a->batch ? a->pairs - i : a->batch;
        for (uint32_t k = 0; k < m.num_rids; k++)
            rids[k] = ir_rid(a->tid, i + k, g_rep);
        m.kind = RSP_MSG_INGEST;
        BENCH_CHECK(rsp_post(a->pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
        m.kind = RSP_MSG_REMOVE;
        BENCH_CHECK(rsp_post(a->pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
    }
    BENCH_CHECK(rsp_barrier(a->pool, &err), &err);
    a->t_end = bench_now_ns();
    return NULL;
}

static void *ir_rsp_thread(void *p)
{
    ir_arg *a = p;
    rsp_error err = {0};
    rsp_msg m = {0};
    if (a->batch > 1)
        return ir_rsp_vector(a);
    pthread_barrier_wait(a->gate);
    a->t_start = bench_now_ns();
    for (uint32_t i = 0; i < a->pairs; i++) {
        m.rid = ir_rid(a->tid, i, g_rep);
        m.kind = RSP_MSG_INGEST;
        BENCH_CHECK(rsp_post(a->pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
        m.kind = RSP_MSG_REMOVE;
        BENCH_CHECK(rsp_post(a->pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
    }
    BENCH_CHECK(rsp_barrier(a->pool, &err), &err);
    a->t_end = bench_now_ns();
    return NULL;
}

static void *ir_bl_thread(void *p)
{
    ir_arg *a = p;
    rsp_error err = {0};
    pthread_barrier_wait(a->gate);
    a->t_start = bench_now_ns();
    for (uint32_t i = 0; i < a->pairs; i++) {
        rsp_rid rid = ir_rid(a->tid, i, g_rep);
        BENCH_CHECK(bl_ingest(a->bl, rid, &err), &err);
        BENCH_CHECK(bl_remove(a->bl, rid, &err), &err);
    }
    a->t_end = bench_now_ns();
    return NULL;
}

/* One repetition with T threads; returns wall ns from the first thread's
 * start to the last thread's end, read by the threads themselves (main may
 * be descheduled right after the gate on a busy machine). */
static uint64_t ir_rep(rsp_pool *pool, bl_pool *bl, uint32_t T, uint32_t total_pairs,
                       uint32_t batch)
{
    pthread_t th[8];
    ir_arg args[8];
    pthread_barrier_t gate;
    pthread_barrier_init(&gate, NULL, T + 1);
    for (uint32_t t = 0; t < T; t++) {
        args[t] = (ir_arg){.pool = pool,
                           .bl = bl,
                           .tid = t,
                           .pairs = total_pairs / T,
                           .batch = batch,
                           .gate = &gate};
        if (pthread_create(&th[t], NULL, pool ? ir_rsp_thread : ir_bl_thread, &args[t]) != 0)
            bench_die("pthread_create", RSP_ENOMEM, "");
    }
    pthread_barrier_wait(&gate);
    for (uint32_t t = 0; t < T; t++)
        pthread_join(th[t], NULL);
    uint64_t first = UINT64_MAX, last = 0;
    for (uint32_t t = 0; t < T; t++) {
        if (args[t].t_start < first)
            first = args[t].t_start;
        if (args[t].t_end > last)
            last = args[t].t_end;
    }
    pthread_barrier_destroy(&gate);
    return last - first;
}

/* One point: T threads, `batch` rids per rsp message. */
static void ir_point(const bench_opts *o, uint32_t T, uint32_t batch)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 64);
    rsp_error err = {0};
    const uint32_t total_pairs = o->quick ? 40000 : 200000;
    const uint32_t reps = o->quick ? 5 : 11;
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    bl_pool *bl;
    BENCH_CHECK(bl_create(&cfg, &bl, &err), &err);
    uint32_t pairs = total_pairs / T * T;
    double ops = 2.0 * pairs;

    bench_samples rs, bs;
    bench_samples_init(&rs, reps);
    bench_samples_init(&bs, reps);
    /* One untimed repetition each to warm up, then alternate. */
    for (uint32_t r = 0; r <= reps; r++) {
        g_rep = 2 * r;
        uint64_t ns = ir_rep(pool, NULL, T, pairs, batch);
        if (r)
            bench_samples_add(&rs, (double)ns / ops);
        g_rep = 2 * r + 1;
        ns = ir_rep(NULL, bl, T, pairs, 1);
        if (r)
            bench_samples_add(&bs, (double)ns / ops);
    }

    bench_result res = {.bench = "ingest_remove", .baseline = "mutex"};
    uint32_t per_thread = pairs / T;
    double msgs = 2.0 * T * ((per_thread + batch - 1) / batch);
    snprintf(res.params, sizeof res.params,
             "\"threads\": %u, \"messages\": %.0f, \"rids_per_msg\": %u, \"rid_ops\": %.0f", T,
             msgs, batch, ops);
    bench_result_samples(&res, &rs, &bs);
    bench_report(o, &res);
    bench_samples_fini(&rs);
    bench_samples_fini(&bs);
    rsp_pool_destroy(pool);
    bl_destroy(bl);
}

void bench_ingest_remove(const bench_opts *o)
{
    static const uint32_t threads[] = {1, 2, 4, 8};
    static const uint32_t batches[] = {1, IR_MAX_BATCH};
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
        for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++)
            ir_point(o, threads[k], batches[b]);
}
