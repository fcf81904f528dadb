/*
 * rsp-bench: shared helpers (clock, samples, result lines, scenario entry points).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Every scenario measures the pool (the public API, include/rsp/rsp.h) and a
 * baseline (baseline.h: the same core behind one mutex) in the same run, and
 * reports one bench_result per parameter point. Single-threaded helpers
 * unless a function says otherwise.
 */
#ifndef RSP_BENCH_BENCH_H
#define RSP_BENCH_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <rsp/rsp.h>

/* Command line. `quick` scales repetitions down so the whole run stays under
 * 60 s on a 2-core machine; `only` (NULL = all) names one scenario. */
typedef struct bench_opts {
    bool quick;
    bool json;
    const char *only;
} bench_opts;

/* Monotonic clock in ns. Any thread; one vDSO call. */
uint64_t bench_now_ns(void);
/* CPU time of the calling thread in ns. */
uint64_t bench_thread_cpu_ns(void);
/* Sleep `ns` (relative, best effort). */
void bench_sleep_ns(uint64_t ns);
/* Ask for 1 ns timer slack on the calling thread, so short sleeps are short. */
void bench_tight_timer_slack(void);

/* A growable array of ns samples. Owned by one thread. */
typedef struct bench_samples {
    double *v;
    size_t n, cap;
} bench_samples;

void bench_samples_init(bench_samples *s, size_t cap_hint);
void bench_samples_fini(bench_samples *s);
/* Append; aborts the bench (exit 2) on allocation failure: a bench without
 * its samples has nothing to say. */
void bench_samples_add(bench_samples *s, double ns);
/* Append every sample of `from`. */
void bench_samples_merge(bench_samples *s, const bench_samples *from);
/* Quantile q in [0, 1] (nearest rank on a sorted copy); 0 when empty. */
double bench_samples_quantile(const bench_samples *s, double q);

/* One reported point: rsp beside its baseline. */
typedef struct bench_result {
    const char *bench; /* scenario name, e.g. "step" */
    char params[256];  /* JSON object body, e.g. "\"rows\": 8, \"labels\": 1" */
    double median_ns, p99_ns, ops_per_s;
    const char *baseline; /* what the baseline is, e.g. "mutex" */
    double baseline_median_ns, baseline_p99_ns, baseline_ops_per_s;
    char extra[256]; /* extra top-level JSON members ("" or "\"k\": v, ...") */
} bench_result;

/* Fill r's medians and p99s from the samples of rsp and of the baseline,
 * and each side's ops_per_s as 1e9 / its median (0 when no samples); a
 * scenario that counts its rate otherwise sets ops_per_s after. */
void bench_result_samples(bench_result *r, const bench_samples *rsp, const bench_samples *base);
/* Sleep until *next + period_ns (absolute, CLOCK_MONOTONIC) and make that
 * the new *next; when already late (an oversubscribed machine), restart
 * the schedule from now instead of catching up in a burst. Paces a
 * publisher or writer thread. */
void bench_pace(struct timespec *next, uint64_t period_ns);

/* Print r as a JSON line or a table row (a header before the first row).
 * ratio = baseline_median_ns / median_ns (above 1: rsp is faster). */
void bench_report(const bench_opts *o, const bench_result *r);

/* Fail loudly: print what failed and exit 2. BENCH_CHECK takes a valid
 * rsp_error pointer (its message is printed). For setup errors only (a pool
 * that cannot be created, a step the core refused): measuring past them
 * would report nonsense. */
void bench_die(const char *what, rsp_status st, const char *msg) __attribute__((noreturn));
#define BENCH_CHECK(expr, errp)                                                                    \
    do {                                                                                           \
        rsp_status st_ = (expr);                                                                   \
        if (st_ != RSP_OK)                                                                         \
            bench_die(#expr, st_, (errp)->message);                                                \
    } while (0)

/* Thread placement (--pin): "none" (the default: the scheduler places
 * every thread), "split" (the calling thread, i.e. the client, on the first
 * CPU of the process's mask, the pool's owner on the second: each has a
 * core of its own) or "shared" (client and owner on the first CPU).
 * Pins the calling thread; threads it creates later (client threads, the
 * pools' device workers, the floor's partner unless pinned with
 * bench_pin_partner) inherit its CPU. Returns false with a message on
 * stderr when the mode is unknown or the CPUs are missing. Main thread,
 * before any scenario. */
bool bench_set_pin(const char *mode);
/* The mode in effect ("none", "split", "shared"), reported in every JSON
 * line as "pin". */
const char *bench_pin_mode(void);
/* Pin the calling thread where the pool's owner goes (the partner of a
 * floor measurement); a no-op under "none". */
void bench_pin_partner(void);

/* Pool shapes used by the scenarios. `tiny`: 2 layers x {conv f32[4], ssm
 * f32[4]} = 64 bytes a slot, so bookkeeping dominates. `kib`: 2 layers x
 * {conv f32[64], ssm f32[64]} = 1 KiB a slot. `mib`: 1 layer x {state u8
 * [1 MiB]}. */
typedef enum bench_shape { BENCH_TINY = 0, BENCH_KIB, BENCH_MIB } bench_shape;
/* Fill cfg (blocks point at static storage) for shape and max_slots; its
 * owner_cpu follows bench_set_pin. */
void bench_config(rsp_pool_config *cfg, bench_shape shape, uint32_t max_slots);
const char *bench_shape_name(bench_shape shape);

/* Scenarios (one file each). */
void bench_rtt(const bench_opts *o);
void bench_ingest_remove(const bench_opts *o);
void bench_step(const bench_opts *o);
void bench_guard(const bench_opts *o);
void bench_read(const bench_opts *o);
void bench_zero_fork(const bench_opts *o);
void bench_spec_accept(const bench_opts *o);
void bench_create(const bench_opts *o);
/* Checkpoints: ckpt.c, prefix.c. */
void bench_ckpt_copy(const bench_opts *o);
void bench_ckpt_lookup(const bench_opts *o);
void bench_ckpt_churn(const bench_opts *o);
void bench_prefix_reuse(const bench_opts *o);
/* The owner's latency histograms on against off: metrics.c. */
void bench_metrics(const bench_opts *o);
/* The value policy against LRU on workload traces: prefix_trace.c. */
void bench_prefix_trace(const bench_opts *o);

#endif
