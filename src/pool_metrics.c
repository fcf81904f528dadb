/*
 * Metrics: the Prometheus text exposition of the pool's counters and
 * gauges (from rsp_stats_fields, the one list), of the holdings per label
 * and of the latency histograms (per message kind, post to plan, device
 * lag); this file also keeps the last two (pool_metrics.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "face.h"
#include "msg.h"
#include "pool.h"
#include "util/error.h"
#include "util/sync.h"
#include "util/time.h"

/* One writer (the owner's role) for each histogram word: a load and a
 * relaxed store, no read-modify-write. */
static void lat_add(uint64_t *c, uint64_t d)
{
    rsp__store_relaxed_u64(c, rsp__load_relaxed_u64(c) + d);
}

/* The histograms' clock, counted (the owner's role only). */
static uint64_t lat_now(rsp_pool *p)
{
    lat_add(&p->lat.clock_reads, 1);
    const uint64_t t = rsp__now_ns();
    return t ? t : 1; /* 0 means "off" */
}

uint64_t rsp__latency_start(rsp_pool *p)
{
    return rsp__load_relaxed_u32(&p->lat.on) ? lat_now(p) : 0;
}

uint64_t rsp__latency_stamp(const rsp_pool *p, const rsp_msg *m)
{
    if (m->kind != RSP_MSG_PLAN && m->kind != RSP_MSG_STEP)
        return 0;
    if (!rsp__load_relaxed_u32(&p->lat.on))
        return 0;
    const uint64_t t = rsp__now_ns(); /* the poster's: counted when decoded */
    return t ? t : 1;
}

const rsp_msg *rsp__latency_decode(rsp_pool *p, void *wire, size_t size, uint64_t t0)
{
    uint64_t post_ns;
    const rsp_msg *m = rsp__msg_decode_stamped(wire, size, &post_ns);
    p->lat.t0 = t0;
    /* Turned off since the post (t0 0): the stamp is not used. */
    p->lat.post_ns = t0 ? post_ns : 0;
    if (p->lat.post_ns) {
        lat_add(&p->lat.clock_reads, 1); /* the poster's read */
        p->lat.plans_before =
            rsp__load_relaxed_u64(&p->ctr.plans) + rsp__load_relaxed_u64(&p->ctr.stages);
    }
    return m;
}

/* The bucket of a duration: the first b with ns <= 2^b us, or the
 * overflow bucket past the last. */
static uint32_t lat_bucket(uint64_t ns)
{
    const uint64_t us = (ns + 999) / 1000;
    const uint32_t b = us <= 1 ? 0 : (uint32_t)(64 - __builtin_clzll(us - 1));
    return b < RSP__LAT_BUCKETS ? b : RSP__LAT_BUCKETS;
}

static uint64_t since(uint64_t then, uint64_t now)
{
    return now > then ? now - then : 0;
}

void rsp__latency_count(rsp_pool *p, rsp_msg_kind kind, uint64_t t0)
{
    if ((unsigned)kind >= RSP_MSG_KIND_COUNT_)
        return;
    const uint64_t now = lat_now(p);
    const uint64_t ns = since(t0, now);
    lat_add(&p->lat.count[kind][lat_bucket(ns)], 1);
    lat_add(&p->lat.sum_ns[kind], ns);
    /* The plan a stamped PLAN or STEP asked for is published once its
     * handler returns: the same clock read ends both. */
    if (p->lat.post_ns &&
        rsp__load_relaxed_u64(&p->ctr.plans) + rsp__load_relaxed_u64(&p->ctr.stages) !=
            p->lat.plans_before) {
        const uint64_t waited = since(p->lat.post_ns, now);
        lat_add(&p->lat.plan_count[lat_bucket(waited)], 1);
        lat_add(&p->lat.plan_sum_ns, waited);
    }
    p->lat.post_ns = 0;
}

uint64_t rsp__latency_lag_done(rsp_pool *p, uint64_t queued_ns, uint64_t now)
{
    if (!queued_ns) /* queued while off */
        return now;
    if (!now)
        now = lat_now(p);
    const uint64_t ns = since(queued_ns, now);
    lat_add(&p->lat.lag_count[lat_bucket(ns)], 1);
    lat_add(&p->lat.lag_sum_ns, ns);
    return now;
}

void rsp__metrics_mirror_labels(rsp_pool *p)
{
    rsp__label_metrics *lm = &p->labels;
    const uint32_t n = rsp__core_num_labels(p->core);
    if (lm->count != n) { /* its one writer reads it plainly */
        for (uint32_t i = lm->count; i < n; i++)
            snprintf(lm->names[i], sizeof lm->names[i], "%s", rsp__core_label_name(p->core, i));
        /* LM1: the names above are written before readers may see them;
         * pairs with the load-acquire in put_label_holdings (LM2). */
        rsp__store_release_u32(&lm->count, n);
    }
    const uint32_t *held = rsp__core_label_holdings(p->core);
    for (uint32_t i = 0; i < n; i++)
        if (rsp__load_relaxed_u32(&lm->holdings[i]) != held[i])
            rsp__store_relaxed_u32(&lm->holdings[i], held[i]);
}

rsp_status rsp_metrics_latency(rsp_pool *pool, bool on, rsp_error *err)
{
    if (!pool)
        return rsp__fail(err, RSP_EINVAL, "pool is NULL");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    rsp__store_relaxed_u32(&pool->lat.on, on ? 1u : 0u);
    return RSP_OK;
}

/* The text as it is written: what fits goes into buf, len counts it all. */
typedef struct text {
    char *buf;
    size_t size, len;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const size_t room = t->len < t->size ? t->size - t->len : 0;
    const int n = vsnprintf(room ? t->buf + t->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n;
}

/* s as a label value (backslash, quote and newline escaped), cut to fit
 * cap with its NUL; returns the bytes written. */
static size_t escape(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (const char *c = s; *c && n + 3 < cap; c++) {
        const char esc = *c == '\\' ? '\\' : *c == '"' ? '"' : *c == '\n' ? 'n' : 0;
        if (esc) {
            out[n++] = '\\';
            out[n++] = esc;
        } else {
            out[n++] = *c;
        }
    }
    out[n] = '\0';
    return n;
}

/* The labels every sample carries, escaped once: pool="...",rank="...". */
static void make_labels(char *out, size_t cap, const char *name, uint32_t rank)
{
    size_t n = (size_t)snprintf(out, cap, "pool=\"");
    n += escape(out + n, cap - n, name && *name ? name : "rsp");
    snprintf(out + n, cap - n, "\",rank=\"%u\"", rank);
}

static void put_stats(text *t, const rsp_pool *p, const char *labels)
{
    rsp_stats s;
    rsp__pool_read_counters(p, &s);
    uint32_t n = 0;
    const rsp_stats_field *f = rsp_stats_fields(&n);
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *at = (const unsigned char *)&s + f[i].offset;
        uint64_t v = 0;
        if (f[i].bits == 32) {
            uint32_t v32;
            memcpy(&v32, at, sizeof v32);
            v = v32;
        } else {
            memcpy(&v, at, sizeof v);
        }
        put(t, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %llu\n", f[i].metric, f[i].help, f[i].metric,
            f[i].kind == RSP_METRIC_COUNTER ? "counter" : "gauge", f[i].metric, labels,
            (unsigned long long)v);
    }
    /* The gauges beyond rsp_stats (it cannot grow: rsp_reply embeds it). */
    put(t,
        "# HELP rsp_steps_in_flight steps admitted and not yet committed or rolled back\n"
        "# TYPE rsp_steps_in_flight gauge\nrsp_steps_in_flight{%s} %u\n",
        labels, rsp__load_relaxed_u32(&p->ctr.steps_in_flight));
}

/* The samples of one histogram (count: per bucket, not cumulative) under
 * `labels` (all of them: the pool's and any of the series'); nothing for
 * an empty one. */
static void put_histogram(text *t, const char *name, const char *labels, const uint64_t *count,
                          const uint64_t *sum_ns)
{
    uint64_t counts[RSP__LAT_BUCKETS + 1], total = 0;
    for (uint32_t b = 0; b <= RSP__LAT_BUCKETS; b++) {
        counts[b] = rsp__load_relaxed_u64(&count[b]);
        total += counts[b];
    }
    if (!total)
        return;
    uint64_t cum = 0;
    for (uint32_t b = 0; b < RSP__LAT_BUCKETS; b++) {
        cum += counts[b];
        put(t, "%s_bucket{%s,le=\"%.9g\"} %llu\n", name, labels, 1e-6 * (double)(1ull << b),
            (unsigned long long)cum);
    }
    put(t, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)total);
    put(t, "%s_sum{%s} %.9g\n", name, labels, 1e-9 * (double)rsp__load_relaxed_u64(sum_ns));
    put(t, "%s_count{%s} %llu\n", name, labels, (unsigned long long)total);
}

static bool any_counted(const uint64_t *count)
{
    for (uint32_t b = 0; b <= RSP__LAT_BUCKETS; b++)
        if (rsp__load_relaxed_u64(&count[b]))
            return true;
    return false;
}

/* A histogram's HELP and TYPE, and its samples, when on or not empty: a
 * pool that never turned the histograms on exposes none of them. */
static void put_family(text *t, const rsp_pool *p, const char *name, const char *help,
                       const char *labels, const uint64_t *count, const uint64_t *sum_ns)
{
    if (!rsp__load_relaxed_u32(&p->lat.on) && !any_counted(count))
        return;
    put(t, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    put_histogram(t, name, labels, count, sum_ns);
}

static void put_latency(text *t, const rsp_pool *p, const char *labels)
{
    bool any = rsp__load_relaxed_u32(&p->lat.on) != 0;
    for (uint32_t k = 0; !any && k < RSP_MSG_KIND_COUNT_; k++)
        any = any_counted(p->lat.count[k]);
    if (any) {
        put(t, "# HELP rsp_owner_seconds the owner's time per message handled, by kind\n"
               "# TYPE rsp_owner_seconds histogram\n");
        char with_kind[2 * RSP_ERROR_MAX + 64];
        for (uint32_t k = 0; k < RSP_MSG_KIND_COUNT_; k++) {
            snprintf(with_kind, sizeof with_kind, "%s,kind=\"%s\"", labels,
                     rsp__pool_kind_name((rsp_msg_kind)k));
            put_histogram(t, "rsp_owner_seconds", with_kind, p->lat.count[k], &p->lat.sum_ns[k]);
        }
    }
    put_family(t, p, "rsp_post_to_plan_seconds",
               "from the post of a PLAN or STEP to the plan it asked for published", labels,
               p->lat.plan_count, &p->lat.plan_sum_ns);
    put_family(t, p, "rsp_device_lag_seconds",
               "from a commit naming forward_done queuing its device work to the owner seeing "
               "that work done",
               labels, p->lat.lag_count, &p->lat.lag_sum_ns);
}

/* rsp_holdings{label=...} for every label interned (LM2). */
static void put_label_holdings(text *t, const rsp_pool *p, const char *labels)
{
    const rsp__label_metrics *lm = &p->labels;
    /* LM2: pairs with the store-release in rsp__metrics_mirror_labels
     * (LM1): the names below count are written. */
    const uint32_t n = rsp__load_acquire_u32(&lm->count);
    put(t, "# HELP rsp_holdings (request, label) holdings by label\n"
           "# TYPE rsp_holdings gauge\n");
    for (uint32_t i = 0; i < n; i++) {
        char name[2 * RSP_NAME_MAX];
        escape(name, sizeof name, lm->names[i]);
        put(t, "rsp_holdings{%s,label=\"%s\"} %u\n", labels, name,
            rsp__load_relaxed_u32(&lm->holdings[i]));
    }
}

rsp_status rsp_metrics_text(rsp_pool *pool, const char *name, char *buf, size_t size,
                            size_t *needed, rsp_error *err)
{
    if (!pool)
        return rsp__fail(err, RSP_EINVAL, "pool is NULL");
    if (!buf && size)
        return rsp__fail(err, RSP_EINVAL, "buf is NULL with size %zu", size);
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    char labels[2 * RSP_ERROR_MAX];
    make_labels(labels, sizeof labels, name, pool->rank);
    text t = {.buf = buf, .size = size, .len = 0};
    if (size)
        buf[0] = '\0';
    put_stats(&t, pool, labels);
    put_label_holdings(&t, pool, labels);
    put_latency(&t, pool, labels);
    if (needed)
        *needed = t.len;
    if (size && t.len >= size)
        return rsp__fail(err, RSP_ECAPACITY,
                         "the metrics text needs %zu bytes and a NUL; buf has %zu", t.len, size);
    return RSP_OK;
}
