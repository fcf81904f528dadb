/*
 * Metrics: the Prometheus text exposition of the pool's counters and
 * gauges (from rsp_stats_fields, the one list) and of the owner's latency
 * histograms, which this file also keeps (pool_metrics.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "face.h"
#include "pool.h"
#include "util/error.h"
#include "util/sync.h"
#include "util/time.h"

uint64_t rsp__latency_start(const rsp_pool *p)
{
    if (!rsp__load_relaxed_u32(&p->lat.on))
        return 0;
    const uint64_t t = rsp__now_ns();
    return t ? t : 1; /* 0 means "off" */
}

/* The bucket of a duration: the first b with ns <= 2^b us, or the
 * overflow bucket past the last. */
static uint32_t lat_bucket(uint64_t ns)
{
    const uint64_t us = (ns + 999) / 1000;
    const uint32_t b = us <= 1 ? 0 : (uint32_t)(64 - __builtin_clzll(us - 1));
    return b < RSP__LAT_BUCKETS ? b : RSP__LAT_BUCKETS;
}

void rsp__latency_count(rsp_pool *p, rsp_msg_kind kind, uint64_t t0)
{
    if ((unsigned)kind >= RSP_MSG_KIND_COUNT_)
        return;
    const uint64_t now = rsp__now_ns();
    const uint64_t ns = now > t0 ? now - t0 : 0;
    /* One writer: a load and a relaxed store, no read-modify-write. */
    uint64_t *c = &p->lat.count[kind][lat_bucket(ns)];
    rsp__store_relaxed_u64(c, rsp__load_relaxed_u64(c) + 1);
    uint64_t *s = &p->lat.sum_ns[kind];
    rsp__store_relaxed_u64(s, rsp__load_relaxed_u64(s) + ns);
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

/* The labels every sample carries, escaped once: pool="...",rank="...". */
static void make_labels(char *out, size_t cap, const char *name, uint32_t rank)
{
    size_t n = 0;
    const char *head = "pool=\"";
    for (; *head && n + 1 < cap; head++)
        out[n++] = *head;
    for (const char *c = name && *name ? name : "rsp"; *c && n + 3 < cap; c++) {
        const char esc = *c == '\\' ? '\\' : *c == '"' ? '"' : *c == '\n' ? 'n' : 0;
        if (esc) {
            out[n++] = '\\';
            out[n++] = esc;
        } else {
            out[n++] = *c;
        }
    }
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

static void put_kind_histogram(text *t, const rsp_pool *p, rsp_msg_kind k, const char *labels)
{
    uint64_t counts[RSP__LAT_BUCKETS + 1], total = 0;
    for (uint32_t b = 0; b <= RSP__LAT_BUCKETS; b++) {
        counts[b] = rsp__load_relaxed_u64(&p->lat.count[k][b]);
        total += counts[b];
    }
    if (!total)
        return;
    const char *kind = rsp__pool_kind_name(k);
    uint64_t cum = 0;
    for (uint32_t b = 0; b < RSP__LAT_BUCKETS; b++) {
        cum += counts[b];
        put(t, "rsp_owner_seconds_bucket{%s,kind=\"%s\",le=\"%.9g\"} %llu\n", labels, kind,
            1e-6 * (double)(1ull << b), (unsigned long long)cum);
    }
    put(t, "rsp_owner_seconds_bucket{%s,kind=\"%s\",le=\"+Inf\"} %llu\n", labels, kind,
        (unsigned long long)total);
    put(t, "rsp_owner_seconds_sum{%s,kind=\"%s\"} %.9g\n", labels, kind,
        1e-9 * (double)rsp__load_relaxed_u64(&p->lat.sum_ns[k]));
    put(t, "rsp_owner_seconds_count{%s,kind=\"%s\"} %llu\n", labels, kind,
        (unsigned long long)total);
}

static void put_latency(text *t, const rsp_pool *p, const char *labels)
{
    bool any = rsp__load_relaxed_u32(&p->lat.on) != 0;
    for (uint32_t k = 0; !any && k < RSP_MSG_KIND_COUNT_; k++)
        for (uint32_t b = 0; !any && b <= RSP__LAT_BUCKETS; b++)
            any = rsp__load_relaxed_u64(&p->lat.count[k][b]) != 0;
    if (!any)
        return;
    put(t, "# HELP rsp_owner_seconds the owner's time per message handled, by kind\n"
           "# TYPE rsp_owner_seconds histogram\n");
    for (uint32_t k = 0; k < RSP_MSG_KIND_COUNT_; k++)
        put_kind_histogram(t, p, (rsp_msg_kind)k, labels);
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
    put_latency(&t, pool, labels);
    if (needed)
        *needed = t.len;
    if (size && t.len >= size)
        return rsp__fail(err, RSP_ECAPACITY,
                         "the metrics text needs %zu bytes and a NUL; buf has %zu", t.len, size);
    return RSP_OK;
}
