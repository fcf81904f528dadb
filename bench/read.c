/*
 * read: R reader threads reading the live plan's addressing while a new plan
 * is published every 50 us.
 * SPDX-License-Identifier: Apache-2.0
 *
 * A publisher thread runs steps (admit, plan, commit of 64 rows on "main")
 * paced at one every 50 us. Each reader loops: open a read section, take the
 * live plan, fetch the addressing of "main", touch it (step id, row count,
 * first slot and flag), close the section.
 *   rsp:      rsp_read_begin / rsp_plan_live_addressing / rsp_read_end, as a
 *             default (urcu-memb) reader: bench "read", params flavour
 *             "memb"; and as a QSBR reader announcing a quiescent state after
 *             each batch of 1024 reads (a partition thread does once per
 *             step): bench "read_qsbr", flavour "qsbr", with the same
 *             baseline run beside it.
 *   baseline: rdlock / copy the published addressing / unlock (bl_read_*),
 *             the publisher taking the write lock once per plan.
 * One sample = the wall time of a batch of 1024 reads, divided by 1024. The
 * median batch is one that ran without being preempted, so the median is
 * the per-read cost while running (the honest figure with 8 readers on 2
 * cores); preemption and blocking behind the writer show in the p99.
 * ops_per_s = all readers' reads / wall time.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "baseline.h"
#include "bench.h"
#include "util/sync.h"

/* forward_done of a commit whose forward (none runs here) is already done:
 * rsp_event_complete(). */
static const rsp_event forward_complete = {.kind = RSP_EVENT_COMPLETE};

#define PERIOD_NS 50000u
#define BATCH 1024u
#define ROWS 64u

typedef struct rd_shared {
    rsp_pool *pool; /* exactly one of pool / bl */
    bl_pool *bl;
    bool qsbr;     /* rsp readers register as QSBR readers */
    uint32_t stop; /* main -> all: written once; relaxed polling is enough */
    pthread_barrier_t gate;
    uint64_t plans; /* publisher only; read after join */
    uint64_t sid;   /* publisher only: last step id (ids keep increasing across runs) */
} rd_shared;

typedef struct rd_reader {
    rd_shared *sh;
    bench_samples samples;
    uint64_t reads;
    uint64_t cpu_ns;         /* this reader's CPU time over the run */
    uint64_t t_start, t_end; /* this reader's own clock readings */
    uint64_t sink;           /* keeps the touched fields alive */
} rd_reader;

static void *rd_publisher(void *p)
{
    rd_shared *sh = p;
    rsp_error err = {0};
    rsp_row rows[ROWS];
    for (uint32_t i = 0; i < ROWS; i++)
        rows[i] = (rsp_row){.rid = i + 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step step = {.rows = rows, .num_rows = ROWS};
    rsp_admit_outcome out;
    bench_tight_timer_slack();
    pthread_barrier_wait(&sh->gate);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (!rsp__load_relaxed_u32(&sh->stop)) {
        step.step_id = ++sh->sid;
        if (sh->pool) {
            BENCH_CHECK(rsp_step_admit(sh->pool, &step, &out, &err), &err);
            BENCH_CHECK(rsp_step_plan(sh->pool, &step, &err), &err);
            BENCH_CHECK(rsp_step_commit(sh->pool, &step, &forward_complete, &err), &err);
        } else {
            BENCH_CHECK(bl_admit(sh->bl, &step, &out, &err), &err);
            BENCH_CHECK(bl_plan(sh->bl, &step, &err), &err);
            BENCH_CHECK(bl_commit(sh->bl, &step, NULL, &err), &err);
        }
        sh->plans++;
        bench_pace(&next, PERIOD_NS);
    }
    return NULL;
}

static void *rd_rsp_reader(void *p)
{
    rd_reader *r = p;
    rsp_error err = {0};
    const bool qsbr = r->sh->qsbr;
    if (qsbr)
        BENCH_CHECK(rsp_reader_register_qsbr(&err), &err);
    else
        BENCH_CHECK(rsp_reader_register(&err), &err);
    /* Offline while blocked at the gate (a QSBR reader's rule). */
    if (qsbr)
        rsp_reader_offline();
    pthread_barrier_wait(&r->sh->gate);
    if (qsbr)
        rsp_reader_online();
    rsp_pool *pool = r->sh->pool;
    uint64_t acc = 0;
    uint64_t c0 = bench_thread_cpu_ns();
    r->t_start = bench_now_ns();
    while (!rsp__load_relaxed_u32(&r->sh->stop)) {
        uint64_t t0 = bench_now_ns();
        for (uint32_t i = 0; i < BATCH; i++) {
            rsp_read_begin();
            rsp_addressing a;
            if (rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, NULL) == RSP_OK)
                acc += a.step_id + a.num_rows + (uint64_t)a.slot_indices[0] + a.has_state[0];
            rsp_read_end();
        }
        if (qsbr)
            rsp_reader_quiescent();
        bench_samples_add(&r->samples, (double)(bench_now_ns() - t0) / BATCH);
        r->reads += BATCH;
    }
    r->t_end = bench_now_ns();
    r->cpu_ns = bench_thread_cpu_ns() - c0;
    r->sink = acc;
    rsp_reader_unregister();
    return NULL;
}

static void *rd_bl_reader(void *p)
{
    rd_reader *r = p;
    pthread_barrier_wait(&r->sh->gate);
    bl_pool *bl = r->sh->bl;
    uint64_t acc = 0;
    uint64_t c0 = bench_thread_cpu_ns();
    r->t_start = bench_now_ns();
    while (!rsp__load_relaxed_u32(&r->sh->stop)) {
        uint64_t t0 = bench_now_ns();
        for (uint32_t i = 0; i < BATCH; i++) {
            bl_read_begin(bl);
            rsp_addressing a;
            if (bl_plan_addressing(bl, RSP_LABEL_MAIN, &a) == RSP_OK)
                acc += a.step_id + a.num_rows + (uint64_t)a.slot_indices[0] + a.has_state[0];
            bl_read_end(bl);
        }
        bench_samples_add(&r->samples, (double)(bench_now_ns() - t0) / BATCH);
        r->reads += BATCH;
    }
    r->t_end = bench_now_ns();
    r->cpu_ns = bench_thread_cpu_ns() - c0;
    r->sink = acc;
    return NULL;
}

typedef struct rd_run {
    bench_samples samples; /* all readers' batches */
    uint64_t reads;
    uint64_t wall_ns;
    uint64_t plans;
    uint64_t last_sid;
    uint64_t cpu_ns; /* all readers' CPU time */
} rd_run;

static void rd_once(rsp_pool *pool, bl_pool *bl, bool qsbr, uint32_t R, uint64_t dur_ns,
                    rd_run *out)
{
    rd_shared sh = {.pool = pool, .bl = bl, .qsbr = qsbr, .sid = out->last_sid};
    pthread_barrier_init(&sh.gate, NULL, R + 2);
    rd_reader rd[8];
    pthread_t th[8], pub;
    for (uint32_t i = 0; i < R; i++) {
        rd[i] = (rd_reader){.sh = &sh};
        bench_samples_init(&rd[i].samples, 4096);
        if (pthread_create(&th[i], NULL, pool ? rd_rsp_reader : rd_bl_reader, &rd[i]) != 0)
            bench_die("pthread_create", RSP_ENOMEM, "");
    }
    if (pthread_create(&pub, NULL, rd_publisher, &sh) != 0)
        bench_die("pthread_create", RSP_ENOMEM, "");
    pthread_barrier_wait(&sh.gate);
    bench_sleep_ns(dur_ns);
    rsp__store_relaxed_u32(&sh.stop, 1);
    for (uint32_t i = 0; i < R; i++)
        pthread_join(th[i], NULL);
    pthread_join(pub, NULL);
    /* Wall time as the readers saw it (main may start late after the gate). */
    uint64_t first = UINT64_MAX, last = 0;
    for (uint32_t i = 0; i < R; i++) {
        if (rd[i].t_start < first)
            first = rd[i].t_start;
        if (rd[i].t_end > last)
            last = rd[i].t_end;
    }
    out->wall_ns += last - first;
    for (uint32_t i = 0; i < R; i++) {
        bench_samples_merge(&out->samples, &rd[i].samples);
        out->reads += rd[i].reads;
        out->cpu_ns += rd[i].cpu_ns;
        bench_samples_fini(&rd[i].samples);
    }
    out->plans += sh.plans;
    out->last_sid = sh.sid;
    pthread_barrier_destroy(&sh.gate);
}

/* One result line: rsp's run rr beside the rwlock's br. */
static void rd_report(const bench_opts *o, const char *bench, const char *flavour, uint32_t R,
                      const rd_run *rr, const rd_run *br)
{
    bench_result res = {.bench = bench, .baseline = "rwlock"};
    snprintf(res.params, sizeof res.params,
             "\"readers\": %u, \"period_ns\": %u, \"rows\": %u, \"flavour\": \"%s\"", R, PERIOD_NS,
             ROWS, flavour);
    bench_result_samples(&res, &rr->samples, &br->samples);
    res.ops_per_s = 1e9 * (double)rr->reads / (double)rr->wall_ns;
    res.baseline_ops_per_s = 1e9 * (double)br->reads / (double)br->wall_ns;
    /* cpus_used: the readers' CPU time over wall time, i.e. how many
     * cores the readers actually had (2 at most here): on a busy
     * machine it shows how often two readers really ran at once. */
    snprintf(res.extra, sizeof res.extra,
             "\"plans_per_s\": %.0f, \"baseline_plans_per_s\": %.0f, "
             "\"readers_cpus_used\": %.2f, \"baseline_readers_cpus_used\": %.2f",
             1e9 * (double)rr->plans / (double)rr->wall_ns,
             1e9 * (double)br->plans / (double)br->wall_ns,
             (double)rr->cpu_ns / (double)rr->wall_ns, (double)br->cpu_ns / (double)br->wall_ns);
    bench_report(o, &res);
}

void bench_read(const bench_opts *o)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 2 * ROWS + 8);
    rsp_error err = {0};
    static const uint32_t readers[] = {1, 2, 4, 8};
    const uint64_t dur = o->quick ? 250000000ull : 1000000000ull;
    const uint32_t reps = o->quick ? 2 : 3;

    for (size_t k = 0; k < sizeof readers / sizeof readers[0]; k++) {
        uint32_t R = readers[k];
        rsp_pool *pool;
        BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
        bl_pool *bl;
        BENCH_CHECK(bl_create(&cfg, &bl, &err), &err);
        rd_run rr = {0}, qr = {0}, br = {0};
        bench_samples_init(&rr.samples, 4096);
        bench_samples_init(&qr.samples, 4096);
        bench_samples_init(&br.samples, 4096);
        for (uint32_t r = 0; r < reps; r++) {
            rd_once(pool, NULL, false, R, dur, &rr);
            qr.last_sid = rr.last_sid;
            rd_once(pool, NULL, true, R, dur, &qr);
            rr.last_sid = qr.last_sid;
            rd_once(NULL, bl, false, R, dur, &br);
        }
        rd_report(o, "read", "memb", R, &rr, &br);
        rd_report(o, "read_qsbr", "qsbr", R, &qr, &br);
        bench_samples_fini(&rr.samples);
        bench_samples_fini(&qr.samples);
        bench_samples_fini(&br.samples);
        rsp_pool_destroy(pool);
        bl_destroy(bl);
    }
}
