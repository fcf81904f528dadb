/*
 * rsp-bench: helpers and main().
 * SPDX-License-Identifier: Apache-2.0
 */
#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t bench_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void bench_sleep_ns(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void bench_tight_timer_slack(void)
{
    /* Default slack is 50 us, which would turn a 50 us period into ~100 us. */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

void bench_samples_init(bench_samples *s, size_t cap_hint)
{
    s->n = 0;
    s->cap = cap_hint ? cap_hint : 64;
    s->v = malloc(s->cap * sizeof *s->v);
    if (!s->v) {
        fprintf(stderr, "rsp-bench: out of memory for samples\n");
        exit(2);
    }
}

void bench_samples_fini(bench_samples *s)
{
    free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

void bench_samples_add(bench_samples *s, double ns)
{
    if (s->n == s->cap) {
        size_t cap = s->cap * 2;
        double *v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            fprintf(stderr, "rsp-bench: out of memory for samples\n");
            exit(2);
        }
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = ns;
}

void bench_samples_merge(bench_samples *s, const bench_samples *from)
{
    for (size_t i = 0; i < from->n; i++)
        bench_samples_add(s, from->v[i]);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_samples_quantile(const bench_samples *s, double q)
{
    if (s->n == 0)
        return 0.0;
    double *tmp = malloc(s->n * sizeof *tmp);
    if (!tmp) {
        fprintf(stderr, "rsp-bench: out of memory for quantile\n");
        exit(2);
    }
    memcpy(tmp, s->v, s->n * sizeof *tmp);
    qsort(tmp, s->n, sizeof *tmp, cmp_double);
    /* Nearest rank: the smallest sample with at least q of the samples <= it. */
    size_t rank = (size_t)(q * (double)s->n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > s->n)
        rank = s->n;
    double v = tmp[rank - 1];
    free(tmp);
    return v;
}

void bench_result_samples(bench_result *r, const bench_samples *rsp, const bench_samples *base)
{
    r->median_ns = bench_samples_quantile(rsp, 0.5);
    r->p99_ns = bench_samples_quantile(rsp, 0.99);
    r->ops_per_s = r->median_ns > 0 ? 1e9 / r->median_ns : 0;
    r->baseline_median_ns = bench_samples_quantile(base, 0.5);
    r->baseline_p99_ns = bench_samples_quantile(base, 0.99);
    r->baseline_ops_per_s = r->baseline_median_ns > 0 ? 1e9 / r->baseline_median_ns : 0;
}

void bench_pace(struct timespec *next, uint64_t period_ns)
{
    next->tv_nsec += (long)period_ns;
    while (next->tv_nsec >= 1000000000L) {
        next->tv_nsec -= 1000000000L;
        next->tv_sec++;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > next->tv_sec || (now.tv_sec == next->tv_sec && now.tv_nsec > next->tv_nsec))
        *next = now;
    else
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL);
}

void bench_die(const char *what, rsp_status st, const char *msg)
{
    fprintf(stderr, "rsp-bench: %s failed: %s%s%s\n", what, rsp_strerror(st),
            msg && *msg ? ": " : "", msg ? msg : "");
    exit(2);
}

static const rsp_block_config tiny_blocks[2] = {
    {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}},
    {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}},
};
static const rsp_block_config kib_blocks[2] = {
    {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {64}},
    {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {64}},
};
static const rsp_block_config mib_blocks[1] = {
    {.name = "state", .dtype = RSP_DTYPE_U8, .ndim = 1, .shape = {1 << 20}},
};

static const char *pin_mode = "none";
static int pin_owner_cpu = -1; /* the owner's CPU (and the floor partner's) */

bool bench_set_pin(const char *mode)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        perror("rsp-bench: sched_getaffinity");
        return false;
    }
    int cpus[2] = {-1, -1}, n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    bool split = strcmp(mode, "split") == 0;
    if (strcmp(mode, "none") == 0)
        return true;
    if (!split && strcmp(mode, "shared") != 0) {
        fprintf(stderr, "rsp-bench: --pin %s: expected none, split or shared\n", mode);
        return false;
    }
    if (n < (split ? 2 : 1)) {
        fprintf(stderr, "rsp-bench: --pin %s needs %d CPUs in the affinity mask, %d there\n", mode,
                split ? 2 : 1, n);
        return false;
    }
    CPU_ZERO(&set);
    CPU_SET(cpus[0], &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0) {
        fprintf(stderr, "rsp-bench: pinning to CPU %d: %s\n", cpus[0], strerror(rc));
        return false;
    }
    pin_mode = split ? "split" : "shared";
    pin_owner_cpu = split ? cpus[1] : cpus[0];
    fprintf(stderr, "# rsp-bench pin %s: client on CPU %d, owner on CPU %d\n", pin_mode, cpus[0],
            pin_owner_cpu);
    return true;
}

const char *bench_pin_mode(void)
{
    return pin_mode;
}

void bench_pin_partner(void)
{
    if (pin_owner_cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pin_owner_cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
}

void bench_config(rsp_pool_config *cfg, bench_shape shape, uint32_t max_slots)
{
    rsp_pool_config_init(cfg);
    cfg->owner_cpu = pin_owner_cpu;
    switch (shape) {
    case BENCH_TINY:
        cfg->num_layers = 2;
        cfg->blocks = tiny_blocks;
        cfg->num_blocks = 2;
        break;
    case BENCH_KIB:
        cfg->num_layers = 2;
        cfg->blocks = kib_blocks;
        cfg->num_blocks = 2;
        break;
    case BENCH_MIB:
        cfg->num_layers = 1;
        cfg->blocks = mib_blocks;
        cfg->num_blocks = 1;
        break;
    }
    cfg->max_slots = max_slots;
    cfg->device = RSP_DEVICE_HOST;
}

const char *bench_shape_name(bench_shape shape)
{
    switch (shape) {
    case BENCH_TINY: return "tiny_64B";
    case BENCH_KIB: return "1KiB";
    case BENCH_MIB: return "1MiB";
    }
    return "?";
}

static void fmt_ns(char *buf, size_t n, double ns)
{
    if (ns <= 0)
        snprintf(buf, n, "-");
    else if (ns < 1e3)
        snprintf(buf, n, "%.1f ns", ns);
    else if (ns < 1e6)
        snprintf(buf, n, "%.2f us", ns / 1e3);
    else
        snprintf(buf, n, "%.2f ms", ns / 1e6);
}

static void fmt_rate(char *buf, size_t n, double r)
{
    if (r <= 0)
        snprintf(buf, n, "-");
    else if (r < 1e3)
        snprintf(buf, n, "%.1f/s", r);
    else if (r < 1e6)
        snprintf(buf, n, "%.1fk/s", r / 1e3);
    else
        snprintf(buf, n, "%.2fM/s", r / 1e6);
}

/* JSON numbers: finite, plain notation. */
static double finite_or_zero(double v)
{
    return (v == v && v < 1e300 && v > -1e300) ? v : 0.0;
}

void bench_report(const bench_opts *o, const bench_result *r)
{
    double ratio = r->median_ns > 0 ? r->baseline_median_ns / r->median_ns : 0.0;
    if (o->json) {
        printf("{\"bench\": \"%s\", \"params\": {%s}, \"median_ns\": %.1f, \"p99_ns\": %.1f, "
               "\"ops_per_s\": %.1f, \"baseline\": \"%s\", \"baseline_median_ns\": %.1f, "
               "\"baseline_p99_ns\": %.1f, \"baseline_ops_per_s\": %.1f, \"ratio\": %.3f, "
               "\"pin\": \"%s\"%s%s}\n",
               r->bench, r->params, finite_or_zero(r->median_ns), finite_or_zero(r->p99_ns),
               finite_or_zero(r->ops_per_s), r->baseline ? r->baseline : "",
               finite_or_zero(r->baseline_median_ns), finite_or_zero(r->baseline_p99_ns),
               finite_or_zero(r->baseline_ops_per_s), finite_or_zero(ratio), pin_mode,
               r->extra[0] ? ", " : "", r->extra);
    } else {
        static bool header;
        if (!header) {
            printf("%-13s %-66s %10s %10s %10s | %-18s %10s %10s %7s\n", "bench", "params",
                   "median", "p99", "ops", "baseline", "median", "ops", "ratio");
            header = true;
        }
        char m[32], p[32], ops[32], bm[32], bops[32];
        fmt_ns(m, sizeof m, r->median_ns);
        fmt_ns(p, sizeof p, r->p99_ns);
        fmt_rate(ops, sizeof ops, r->ops_per_s);
        fmt_ns(bm, sizeof bm, r->baseline_median_ns);
        fmt_rate(bops, sizeof bops, r->baseline_ops_per_s);
        char params[256];
        /* The table shows params without JSON quotes. */
        size_t j = 0;
        for (size_t i = 0; r->params[i] && j + 1 < sizeof params; i++)
            if (r->params[i] != '"')
                params[j++] = r->params[i];
        params[j] = '\0';
        printf("%-13s %-66s %10s %10s %10s | %-18s %10s %10s %6.2fx\n", r->bench, params, m, p, ops,
               r->baseline ? r->baseline : "", bm, bops, ratio);
    }
    fflush(stdout);
}
