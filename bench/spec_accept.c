/*
 * spec_accept: the end of a speculative verify step (docs/semantics.md 9.3)
 * for 1, 64 and 256 requests, K = 4 draft tokens (span 5), 1 MiB slots, the
 * host device, each request accepting a count that cycles 1..5.
 * SPDX-License-Identifier: Apache-2.0
 *
 * rsp ("relabel"): one verify row per request (per_token_states, span 5);
 * the admit takes 5 fresh output slots per request, the commit makes output
 * slot a the holding's slot and frees the old slot and the 4 others (each
 * zeroed: free slots read zeros).
 * Baseline ("copy", the post-fork form): each request holds main and one
 * label per token (t1..t5) for good; a step has a row per label, and
 * post-forks t_a -> main of group a, each request's rows carrying its group
 * a: the commit copies 1 MiB per request, nothing is allocated or zeroed.
 * (A commit names its admit's fork groups, docs/semantics.md 9.2, so the
 * group is chosen at admit here; the cost measured, one copy a request, is
 * the same.)
 * One sample = admit + plan + its ready event + commit of one step, then a
 * step of one padding row whose ready event waits for that commit's device
 * work (the device is FIFO): each sample holds one commit's zeroing or
 * copying, and nothing of it runs into the other form's sample. The two
 * forms alternate step by step on two pools, so both see the same machine.
 * No forward runs: neither form writes the output slots or token labels.
 * ratio = copy / relabel (above 1: relabel is faster).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define SPAN 5u /* 1 + K, K = 4 */
#define MAXN 256u

typedef struct form {
    rsp_pool *pool;
    bool relabel;
    rsp_label_id tok[SPAN]; /* copy form: t1..t5 */
    rsp_row *rows;
    rsp_fork post[SPAN];
    rsp_step step;
    uint64_t sid;
} form;

static void wait_ready(rsp_pool *pool)
{
    rsp_error err = {0};
    rsp_addressing a;
    rsp_read_begin();
    rsp_status st = rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, &err);
    rsp_event ready = a.ready;
    rsp_read_end();
    BENCH_CHECK(st, &err);
    BENCH_CHECK(rsp_event_wait(pool, &ready, RSP_WAIT_FOREVER, &err), &err);
}

/* The declaration of the next step of f over n requests; accepted counts
 * cycle 1..SPAN with the step and the request. */
static void declare(form *f, uint32_t n)
{
    uint64_t sid = ++f->sid;
    uint32_t k = 0;
    for (uint32_t r = 0; r < n; r++) {
        uint16_t a = (uint16_t)(1 + (sid + r) % SPAN);
        if (f->relabel) {
            f->rows[k++] = (rsp_row){.rid = r + 1,
                                     .label = RSP_LABEL_MAIN,
                                     .span = SPAN,
                                     .per_token_states = 1,
                                     .accepted = a};
            continue;
        }
        f->rows[k++] =
            (rsp_row){.rid = r + 1, .label = RSP_LABEL_MAIN, .span = SPAN, .fork_group = a};
        for (uint32_t t = 0; t < SPAN; t++)
            f->rows[k++] = (rsp_row){.rid = r + 1, .label = f->tok[t], .span = 1, .fork_group = a};
    }
    f->step = (rsp_step){.step_id = sid, .rows = f->rows, .num_rows = k};
    if (!f->relabel) {
        f->step.post_forks = f->post;
        f->step.num_post_forks = SPAN;
    }
}

/* One step of f: the sample's ns. */
static uint64_t run_step(form *f, uint32_t n)
{
    rsp_error err = {0};
    rsp_admit_outcome out;
    const rsp_event done = rsp_event_complete();
    declare(f, n);
    uint64_t t0 = bench_now_ns();
    BENCH_CHECK(rsp_step_admit(f->pool, &f->step, &out, &err), &err);
    if (!out.ok)
        bench_die("spec_accept admit", RSP_ECAPACITY, "pool full");
    BENCH_CHECK(rsp_step_plan(f->pool, &f->step, &err), &err);
    wait_ready(f->pool);
    BENCH_CHECK(rsp_step_commit(f->pool, &f->step, &done, &err), &err);
    /* A step of one padding row: its ready event fires once the commit's
     * device work has run (FIFO), so the sample holds all of it and the
     * other pool's sample runs on an idle machine. */
    rsp_row pad = {.label = RSP_LABEL_MAIN, .padding = true};
    rsp_step drain = {.step_id = ++f->sid, .rows = &pad, .num_rows = 1};
    BENCH_CHECK(rsp_step_admit(f->pool, &drain, &out, &err), &err);
    BENCH_CHECK(rsp_step_plan(f->pool, &drain, &err), &err);
    wait_ready(f->pool);
    BENCH_CHECK(rsp_step_commit(f->pool, &drain, &done, &err), &err);
    return bench_now_ns() - t0;
}

static void form_open(form *f, bool relabel, uint32_t n)
{
    memset(f, 0, sizeof *f);
    f->relabel = relabel;
    rsp_pool_config cfg;
    /* relabel: a holding and SPAN outputs a request; copy: 1 + SPAN labels. */
    bench_config(&cfg, BENCH_MIB, 1 + n * (1 + SPAN));
    rsp_error err = {0};
    BENCH_CHECK(rsp_pool_create(&cfg, &f->pool, &err), &err);
    for (uint32_t t = 0; t < SPAN && !relabel; t++) {
        char name[8];
        snprintf(name, sizeof name, "t%u", t + 1);
        BENCH_CHECK(rsp_label(f->pool, name, &f->tok[t], &err), &err);
        f->post[t] = (rsp_fork){.from = f->tok[t], .to = RSP_LABEL_MAIN, .group = t + 1};
    }
    f->rows = calloc((size_t)n * (1 + SPAN), sizeof *f->rows);
    if (!f->rows)
        bench_die("spec_accept", RSP_ENOMEM, "rows");
}

static void form_close(form *f)
{
    rsp_pool_destroy(f->pool);
    free(f->rows);
}

void bench_spec_accept(const bench_opts *o)
{
    static const uint32_t counts[] = {1, 64, MAXN};
    rsp_error err = {0};
    BENCH_CHECK(rsp_reader_register(&err), &err); /* wait_ready reads the live plan */
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        uint32_t n = counts[c];
        uint32_t reps = n == 1    ? (o->quick ? 100 : 500)
                        : n == 64 ? (o->quick ? 10 : 40)
                                  : (o->quick ? 4 : 12);
        form rel, cp;
        form_open(&rel, true, n);
        form_open(&cp, false, n);
        bench_samples rs, bs;
        bench_samples_init(&rs, reps);
        bench_samples_init(&bs, reps);
        /* Two untimed steps each: every page touched, every holding made. */
        for (uint32_t r = 0; r < reps + 2; r++) {
            uint64_t a = run_step(&rel, n), b = run_step(&cp, n);
            if (r >= 2) {
                bench_samples_add(&rs, (double)a);
                bench_samples_add(&bs, (double)b);
            }
        }
        bench_result res = {.bench = "spec_accept", .baseline = "post_fork_copy"};
        snprintf(res.params, sizeof res.params,
                 "\"rows\": %u, \"k\": %u, \"slot_bytes\": %u, \"device\": \"host\"", n, SPAN - 1,
                 1u << 20);
        bench_result_samples(&res, &rs, &bs);
        rsp_stats sr, sc;
        BENCH_CHECK(rsp_stats_snapshot(rel.pool, &sr, &err), &err);
        BENCH_CHECK(rsp_stats_snapshot(cp.pool, &sc, &err), &err);
        double steps = reps + 2; /* the padding steps move no bytes */
        snprintf(res.extra, sizeof res.extra,
                 "\"relabel_mib_zeroed_per_step\": %.1f, \"relabel_mib_copied_per_step\": %.1f, "
                 "\"copy_mib_copied_per_step\": %.1f, \"copy_mib_zeroed_per_step\": %.1f",
                 sr.bytes_zeroed / steps / (1 << 20), sr.bytes_copied / steps / (1 << 20),
                 sc.bytes_copied / steps / (1 << 20), sc.bytes_zeroed / steps / (1 << 20));
        bench_report(o, &res);
        bench_samples_fini(&rs);
        bench_samples_fini(&bs);
        form_close(&rel);
        form_close(&cp);
    }
    rsp_reader_unregister();
}
