/*
 * rsp_metrics_text and rsp_metrics_latency: the Prometheus exposition of
 * every counter and gauge, labelled, sized like snprintf; the owner's
 * latency histograms counted only while on.
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

#define E NULL
#define OK(x) assert_int_equal((x), RSP_OK)

static rsp_pool *make_pool(uint32_t rank, uint32_t world)
{
    static const rsp_block_config block = {
        .name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 1;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 5;
    cfg.world_size = world;
    cfg.rank = rank;
    rsp_pool *p = NULL;
    OK(rsp_pool_create(&cfg, &p, E));
    return p;
}

/* The whole text, in a buffer of the size the first call asked for. */
static char *metrics(rsp_pool *p, const char *name)
{
    size_t n = 0;
    OK(rsp_metrics_text(p, name, NULL, 0, &n, E));
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    size_t again = 0;
    OK(rsp_metrics_text(p, name, buf, n + 1, &again, E));
    assert_int_equal(again, n);
    assert_int_equal(strlen(buf), n);
    return buf;
}

/* The value of the sample line that starts with `head` ("rsp_x{...}"). */
static long long sample(const char *text, const char *head)
{
    const char *at = strstr(text, head);
    assert_non_null(at);
    return atoll(at + strlen(head) + 1);
}

static void one_step(rsp_pool *p, uint64_t id)
{
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = id, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    OK(rsp_step_admit(p, &s, &o, E));
    assert_true(o.ok);
    OK(rsp_step_plan(p, &s, E));
    rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(p, &s, &done, E));
}

static void every_field_is_exposed_with_type_help_and_labels(void **state)
{
    (void)state;
    rsp_pool *p = make_pool(1, 2);
    OK(rsp_ingest(p, 1, E));
    one_step(p, 1);
    char *t = metrics(p, "mamba \"a\"\\b");
    uint32_t n = 0;
    const rsp_stats_field *f = rsp_stats_fields(&n);
    for (uint32_t i = 0; i < n; i++) {
        char line[160];
        snprintf(line, sizeof line, "# TYPE %s %s\n", f[i].metric,
                 f[i].kind == RSP_METRIC_COUNTER ? "counter" : "gauge");
        assert_non_null(strstr(t, line));
        snprintf(line, sizeof line, "# HELP %s ", f[i].metric);
        assert_non_null(strstr(t, line));
    }
    const char *labels = "{pool=\"mamba \\\"a\\\"\\\\b\",rank=\"1\"}";
    char head[160];
    snprintf(head, sizeof head, "rsp_commits_total%s", labels);
    assert_int_equal(sample(t, head), 1);
    snprintf(head, sizeof head, "rsp_max_slots%s", labels);
    assert_int_equal(sample(t, head), 5);
    snprintf(head, sizeof head, "rsp_steps_in_flight%s", labels);
    assert_int_equal(sample(t, head), 0);
    snprintf(head, sizeof head, "rsp_num_requests%s", labels);
    assert_int_equal(sample(t, head), 1);
    assert_null(strstr(t, "rsp_owner_seconds")); /* histograms off */
    free(t);
    t = metrics(p, NULL);
    assert_non_null(strstr(t, "rsp_commits_total{pool=\"rsp\",rank=\"1\"} 1\n"));
    free(t);
    rsp_pool_destroy(p);
}

/* The text of pool p with the default name, and its steps_in_flight. */
static long long in_flight(rsp_pool *p)
{
    OK(rsp_barrier(p, E)); /* the owner mirrors its gauges before answering */
    char *t = metrics(p, NULL);
    const long long v = sample(t, "rsp_steps_in_flight{pool=\"rsp\",rank=\"0\"}");
    free(t);
    return v;
}

static void steps_in_flight_is_a_gauge(void **state)
{
    (void)state;
    rsp_pool *p = make_pool(0, 1);
    OK(rsp_ingest(p, 1, E));
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    OK(rsp_step_admit(p, &s, &o, E));
    assert_int_equal(in_flight(p), 1);
    OK(rsp_step_plan(p, &s, E));
    rsp_event done = rsp_event_complete();
    OK(rsp_step_commit(p, &s, &done, E));
    assert_int_equal(in_flight(p), 0);
    rsp_step s2 = {.step_id = 2, .rows = &row, .num_rows = 1};
    OK(rsp_step_admit(p, &s2, &o, E));
    assert_int_equal(in_flight(p), 1);
    OK(rsp_step_rollback(p, 2, NULL, E));
    assert_int_equal(in_flight(p), 0);
    rsp_pool_destroy(p);
}

static void a_short_buffer_is_cut_and_sized(void **state)
{
    (void)state;
    rsp_pool *p = make_pool(0, 1);
    size_t n = 0;
    OK(rsp_metrics_text(p, "x", NULL, 0, &n, E));
    assert_true(n > 1000);
    char small[64];
    size_t need = 0;
    rsp_error err;
    assert_int_equal(rsp_metrics_text(p, "x", small, sizeof small, &need, &err), RSP_ECAPACITY);
    assert_int_equal(need, n);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_non_null(strstr(err.message, "needs"));
    assert_int_equal(rsp_metrics_text(p, "x", NULL, 8, &need, &err), RSP_EINVAL);
    assert_int_equal(rsp_metrics_text(NULL, "x", small, sizeof small, &need, &err), RSP_EINVAL);
    /* Exactly n + 1 fits; n does not (no room for the NUL). */
    char *buf = malloc(n + 1);
    assert_non_null(buf);
    assert_int_equal(rsp_metrics_text(p, "x", buf, n, &need, &err), RSP_ECAPACITY);
    OK(rsp_metrics_text(p, "x", buf, n + 1, &need, E));
    free(buf);
    rsp_pool_destroy(p);
}

static void latency_histograms_count_only_while_on(void **state)
{
    (void)state;
    rsp_pool *p = make_pool(0, 1);
    OK(rsp_ingest(p, 1, E));
    one_step(p, 1); /* off: not counted */
    OK(rsp_metrics_latency(p, true, E));
    OK(rsp_barrier(p, E));
    one_step(p, 2);
    one_step(p, 3);
    OK(rsp_metrics_latency(p, false, E));
    one_step(p, 4);
    char *t = metrics(p, "h");
    assert_non_null(strstr(t, "# TYPE rsp_owner_seconds histogram\n"));
    const char *l = "{pool=\"h\",rank=\"0\",kind=\"commit\"}";
    char head[160];
    snprintf(head, sizeof head, "rsp_owner_seconds_count%s", l);
    assert_int_equal(sample(t, head), 2);
    snprintf(head, sizeof head,
             "rsp_owner_seconds_bucket{pool=\"h\",rank=\"0\",kind=\"commit\",le=\"+Inf\"}");
    assert_int_equal(sample(t, head), 2);
    snprintf(head, sizeof head, "rsp_owner_seconds_count{pool=\"h\",rank=\"0\",kind=\"admit\"}");
    assert_int_equal(sample(t, head), 2);
    /* Buckets are cumulative: each le's count is at least the one before. */
    long long prev = 0;
    for (const char *at = strstr(t, "kind=\"commit\",le=\""); at;
         at = strstr(at + 1, "kind=\"commit\",le=\"")) {
        const long long v = atoll(strchr(at, '}') + 2);
        assert_true(v >= prev);
        prev = v;
    }
    assert_int_equal(prev, 2);
    assert_null(strstr(t, "kind=\"remove\"")); /* no remove handled */
    free(t);
    rsp_pool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_field_is_exposed_with_type_help_and_labels),
        cmocka_unit_test(steps_in_flight_is_a_gauge),
        cmocka_unit_test(a_short_buffer_is_cut_and_sized),
        cmocka_unit_test(latency_histograms_count_only_while_on),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
