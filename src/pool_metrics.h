/*
 * The owner's latency histograms (pool_metrics.c): the owner's time per
 * message, by kind. Kept in struct rsp_pool (pool.h).
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
} rsp__latency;

#endif
