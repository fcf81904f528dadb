/*
 * What the metrics keep beside rsp_stats (pool_metrics.c): the latency
 * histograms (the owner's time per message by kind, a step's post to its
 * plan, device lag) and the holdings per label. Kept in struct rsp_pool
 * (pool.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_POOL_METRICS_H
#define RSP_POOL_METRICS_H

#include <stdint.h>

#include <rsp/rsp.h>

/* Buckets le = 2^b us for b in [0, RSP__LAT_BUCKETS), then one past the
 * last (+Inf only): 1 us to about 1 s. */
#define RSP__LAT_BUCKETS 21u

typedef struct rsp__latency {
    /* Any thread stores (rsp_metrics_latency), the owner loads: relaxed,
     * a switch that orders nothing (a message counted or not either side
     * of the flip is fine). */
    uint32_t on;
    /* Owner (or the thread in its role) the only writer, relaxed stores of
     * load + 1; rsp_metrics_text loads relaxed on any thread: each value
     * is whole, the set is not a snapshot. Per bucket, not cumulative. */
    uint64_t count[RSP_MSG_KIND_COUNT_][RSP__LAT_BUCKETS + 1];
    uint64_t sum_ns[RSP_MSG_KIND_COUNT_];
    /* The same form, same writer: a PLAN's or STEP's post to the plan it
     * published; a forward_done's commit queued to its work seen done. */
    uint64_t plan_count[RSP__LAT_BUCKETS + 1], plan_sum_ns;
    uint64_t lag_count[RSP__LAT_BUCKETS + 1], lag_sum_ns;
    /* Same writer: clocks the histograms read, a stamped message's
     * poster's read counted when the owner decodes it. Tests read it: off
     * reads none. */
    uint64_t clock_reads;
    /* Owner only, of the message being handled: the clock when its
     * handling began (0: off; a commit's device lag starts there), its
     * post stamp (0: none), the plans and stages published before it. */
    uint64_t t0, post_ns, plans_before;
} rsp__latency;

/* The holdings per label, mirrored from the core when the owner settles
 * (rsp__pool_mirror_gauges, only when a holding moved or a label was
 * interned). The owner writes; rsp_metrics_text reads on any thread. */
typedef struct rsp__label_metrics {
    /* Labels whose name is here: the owner writes names[count] first, then
     * store-releases count (LM1); a reader load-acquires it (LM2) and
     * reads the names below it, which never change again. */
    uint32_t count;
    char names[RSP_MAX_LABELS][RSP_NAME_MAX];
    /* Holdings of each label: owner relaxed stores, readers relaxed loads
     * (each whole; the set is not a snapshot). */
    uint32_t holdings[RSP_MAX_LABELS];
} rsp__label_metrics;

#endif
