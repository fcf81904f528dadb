/*
 * The metrics of steps and holdings: rsp_holdings by label, the
 * histograms of a step's post to its plan and of device lag (counts that
 * match the steps run), and the switch off reading no clock at all.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "pool.h"      /* rsp__latency.clock_reads, rsp__pool_forward_waits */
#include "util/sync.h" /* rsp__load_relaxed_u64 */

#define E NULL
#define OK(x) assert_int_equal((x), RSP_OK)

static rsp_pool *make_pool(void)
{
    static const rsp_block_config block = {
        .name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 1;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 9;
    rsp_pool *p = NULL;
    OK(rsp_pool_create(&cfg, &p, E));
    return p;
}

static char *metrics(rsp_pool *p)
{
    OK(rsp_barrier(p, E)); /* the owner mirrors its gauges before answering */
    size_t n = 0;
    OK(rsp_metrics_text(p, "m", NULL, 0, &n, E));
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    OK(rsp_metrics_text(p, "m", buf, n + 1, &n, E));
    return buf;
}

/* The value of the sample `name{pool="m",rank="0"<more>}`; -1 if absent. */
static long long sample(const char *text, const char *name, const char *more)
{
    char head[256];
    snprintf(head, sizeof head, "\n%s{pool=\"m\",rank=\"0\"%s} ", name, more);
    const char *at = strstr(text, head);
    return at ? atoll(at + strlen(head)) : -1;
}

static long long holdings(rsp_pool *p, const char *label)
{
    char *t = metrics(p);
    char more[64];
    snprintf(more, sizeof more, ",label=\"%s\"", label);
    const long long v = sample(t, "rsp_holdings", more);
    free(t);
    return v;
}

static void holdings_are_counted_per_label(void **state)
{
    (void)state;
    rsp_pool *p = make_pool();
    rsp_label_id draft, empty;
    OK(rsp_label(p, "draft", &draft, E));
    OK(rsp_label(p, "empty", &empty, E));
    assert_int_equal(holdings(p, "main"), 0);
    assert_int_equal(holdings(p, "draft"), 0);
    for (rsp_rid r = 1; r <= 3; r++)
        OK(rsp_ingest(p, r, E));
    rsp_row rows[4] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1},
                       {.rid = 2, .label = RSP_LABEL_MAIN, .span = 1},
                       {.rid = 3, .label = RSP_LABEL_MAIN, .span = 1},
                       {.rid = 1, .label = draft, .span = 1}};
    rsp_step s = {.step_id = 1, .rows = rows, .num_rows = 4};
    rsp_admit_outcome o;
    OK(rsp_step_admit(p, &s, &o, E));
    assert_true(o.ok);
    assert_int_equal(holdings(p, "main"), 3);
    assert_int_equal(holdings(p, "draft"), 1);
    assert_int_equal(holdings(p, "empty"), 0);
    OK(rsp_step_plan(p, &s, E));
    rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(p, &s, &done, E));
    OK(rsp_release(p, 1, draft, E));
    assert_int_equal(holdings(p, "draft"), 0);
    OK(rsp_remove(p, 2, E));
    assert_int_equal(holdings(p, "main"), 2);
    /* The labels' sum is the pool's count of holdings. */
    char *t = metrics(p);
    assert_int_equal(sample(t, "rsp_num_holdings", ""), 2);
    assert_non_null(strstr(t, "# TYPE rsp_holdings gauge\n"));
    free(t);
    rsp_pool_destroy(p);
}

/* Runs `sync` steps through the synchronous admit, plan and commit (a
 * PLAN each) and then `next` through rsp_step_next (a STEP each), every
 * commit naming a host fence signalled before it; a PLAN that fails
 * publishes nothing. Returns the commits that named a fence. */
static uint32_t run_steps(rsp_pool *p, uint64_t *id, uint32_t sync, uint32_t next)
{
    rsp_host_fence *fence;
    OK(rsp_host_fence_create(&fence, E));
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    uint32_t fenced = 0;
    for (uint32_t i = 0; i < sync; i++) {
        rsp_step s = {.step_id = ++*id, .rows = &row, .num_rows = 1};
        rsp_admit_outcome o;
        OK(rsp_step_admit(p, &s, &o, E));
        assert_true(o.ok);
        OK(rsp_step_plan(p, &s, E));
        rsp_host_fence_signal(fence, *id);
        rsp_event done = rsp_event_host(fence, *id);
        OK(rsp_step_commit(p, &s, &done, E));
        fenced++;
    }
    rsp_step bad = {.step_id = 999999, .rows = &row, .num_rows = 1};
    assert_int_not_equal(rsp_step_plan(p, &bad, E), RSP_OK); /* never admitted */
    rsp_step prev = {0};
    for (uint32_t i = 0; i < next; i++) {
        rsp_step s = {.step_id = ++*id, .rows = &row, .num_rows = 1};
        rsp_host_fence_signal(fence, prev.step_id);
        rsp_event done = rsp_event_host(fence, prev.step_id);
        rsp_step_outcome out;
        OK(rsp_step_next(p, &s, i ? &prev : NULL, i ? &done : NULL, &out, E));
        fenced += i ? 1 : 0;
        prev = s;
    }
    if (next) {
        rsp_host_fence_signal(fence, prev.step_id);
        rsp_event done = rsp_event_host(fence, prev.step_id);
        OK(rsp_step_commit(p, &prev, &done, E));
        fenced++;
    }
    rsp_host_fence_destroy(fence);
    /* Every forward_done wait ran (the device is FIFO); the barrier's
     * handling then sees each done. */
    OK(rsp__pool_forward_waits(p, RSP_WAIT_FOREVER, NULL, E));
    OK(rsp_barrier(p, E));
    return fenced;
}

static void step_histograms_count_the_steps_run(void **state)
{
    (void)state;
    rsp_pool *p = make_pool();
    OK(rsp_ingest(p, 1, E));
    uint64_t id = 0;
    run_steps(p, &id, 2, 2); /* off: nothing counted */
    OK(rsp_metrics_latency(p, true, E));
    const uint32_t fenced = run_steps(p, &id, 3, 4);
    assert_int_equal(fenced, 3 + 4);
    char *t = metrics(p);
    assert_non_null(strstr(t, "# TYPE rsp_post_to_plan_seconds histogram\n"));
    assert_non_null(strstr(t, "# TYPE rsp_device_lag_seconds histogram\n"));
    /* A plan per PLAN and per STEP posted while on; the failed PLAN none. */
    assert_int_equal(sample(t, "rsp_post_to_plan_seconds_count", ""), 3 + 4);
    assert_int_equal(sample(t, "rsp_post_to_plan_seconds_bucket", ",le=\"+Inf\""), 3 + 4);
    assert_int_equal(sample(t, "rsp_device_lag_seconds_count", ""), fenced);
    assert_int_equal(sample(t, "rsp_device_lag_seconds_bucket", ",le=\"+Inf\""), fenced);
    assert_non_null(strstr(t, "rsp_post_to_plan_seconds_sum{pool=\"m\",rank=\"0\"} "));
    assert_non_null(
        strstr(t, "rsp_device_lag_seconds_bucket{pool=\"m\",rank=\"0\",le=\"1e-06\"} "));
    /* Cumulative buckets, ending at the count. */
    long long prev = 0;
    for (const char *at = strstr(t, "rsp_post_to_plan_seconds_bucket{"); at;
         at = strstr(at + 1, "rsp_post_to_plan_seconds_bucket{")) {
        const long long v = atoll(strchr(at, '}') + 2);
        assert_true(v >= prev);
        prev = v;
    }
    assert_int_equal(prev, 3 + 4);
    free(t);
    rsp_pool_destroy(p);
}

static void off_reads_no_clock_and_exposes_nothing(void **state)
{
    (void)state;
    rsp_pool *p = make_pool();
    OK(rsp_ingest(p, 1, E));
    uint64_t id = 0;
    run_steps(p, &id, 3, 3);
    char *t = metrics(p);
    assert_null(strstr(t, "rsp_post_to_plan_seconds"));
    assert_null(strstr(t, "rsp_device_lag_seconds"));
    assert_null(strstr(t, "rsp_owner_seconds"));
    free(t);
    assert_int_equal(rsp__load_relaxed_u64(&p->lat.clock_reads), 0);
    /* The counter does count: on, the same steps read clocks. */
    OK(rsp_metrics_latency(p, true, E));
    run_steps(p, &id, 1, 1);
    assert_true(rsp__load_relaxed_u64(&p->lat.clock_reads) > 0);
    OK(rsp_metrics_latency(p, false, E));
    OK(rsp_barrier(p, E));
    const uint64_t reads = rsp__load_relaxed_u64(&p->lat.clock_reads);
    run_steps(p, &id, 2, 2);
    assert_true(rsp__load_relaxed_u64(&p->lat.clock_reads) == reads);
    rsp_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(holdings_are_counted_per_label),
        cmocka_unit_test(step_histograms_count_the_steps_run),
        cmocka_unit_test(off_reads_no_clock_and_exposes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
