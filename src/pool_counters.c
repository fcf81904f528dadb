/*
 * The pool's counters and gauges, all made from RSP_STATS_FIELDS
 * (rsp_stats.h): the owner's mirror of the core's gauges (refreshed when
 * the actor settles), the lock-free reader behind rsp_stats_peek, the
 * table rsp_stats_fields returns, and the compile-time asserts that tie
 * the list to the core's gauges.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

#include <stddef.h>
#include <string.h>

#include "util/sync.h"

void rsp__pool_mirror_gauges(rsp_pool *p)
{
    rsp__core_gauges g;
    rsp__core_gauges_get(p->core, &g);
    /* Nothing moved (a barrier, a read-only query, most of a steady step's
     * messages): no store, so the pool's lines that posters read
     * (num_labels shares one with the gauges) stay theirs: ~0.3 us on a
     * round trip measured (rtt "owner busy", split). */
    if (p->mirrored_ok && memcmp(&g, &p->mirrored, sizeof g) == 0)
        return;
    /* The per-label copies move only with a holding or a label. */
    if (!p->mirrored_ok || g.holding_moves != p->mirrored.holding_moves ||
        g.num_labels != p->mirrored.num_labels)
        rsp__metrics_mirror_labels(p);
    p->mirrored = g;
    p->mirrored_ok = true;
    rsp__pool_counters *c = &p->ctr;
#define MIRROR_CORE(bits, name) rsp__store_relaxed_u##bits(&c->name, g.name);
#define MIRROR_OWNER(bits, name)
#define MIRROR_LAYOUT(bits, name)
#define MIRROR_ACTOR(bits, name)
#define MIRROR(bits, name, kind, source, help) MIRROR_##source(bits, name)
    RSP_STATS_FIELDS(MIRROR)
    rsp__store_relaxed_u32(&c->steps_in_flight, g.steps_in_flight);
#undef MIRROR
#undef MIRROR_ACTOR
#undef MIRROR_LAYOUT
#undef MIRROR_OWNER
#undef MIRROR_CORE
}

/* The LAYOUT and ACTOR fields, one reader each by the field's name: a new
 * field of those sources fails to compile until it has one. */
static uint32_t layout_max_slots(const rsp_pool *p)
{
    return p->layout->max_slots;
}

static uint32_t layout_usable_slots(const rsp_pool *p)
{
    return p->layout->usable_slots;
}

static uint32_t actor_inbox_depth(const rsp_pool *p)
{
    return rsp__actor_depth(p->actor);
}

static uint64_t actor_messages_handled(const rsp_pool *p)
{
    return rsp__actor_handled(p->actor);
}

static uint64_t actor_posts_failed(const rsp_pool *p)
{
    return rsp__actor_unwaited_failures(p->actor);
}

void rsp__pool_read_counters(const rsp_pool *p, rsp_stats *out)
{
    rsp__pool_counters *c = (rsp__pool_counters *)&p->ctr;
    /* Relaxed everywhere: gauges, each read whole, none orders anything. */
#define READ_CORE(bits, name) out->name = rsp__load_relaxed_u##bits(&c->name);
#define READ_OWNER(bits, name) out->name = rsp__load_relaxed_u##bits(&c->name);
#define READ_LAYOUT(bits, name) out->name = layout_##name(p);
#define READ_ACTOR(bits, name) out->name = actor_##name(p);
#define READ(bits, name, kind, source, help) READ_##source(bits, name)
    RSP_STATS_FIELDS(READ)
#undef READ
#undef READ_ACTOR
#undef READ_LAYOUT
#undef READ_OWNER
#undef READ_CORE
}

/* The exporter's table: Prometheus names by kind (a counter's ends in
 * _total, as Prometheus names them). */
#define METRIC_COUNTER(name) "rsp_" #name "_total"
#define METRIC_GAUGE(name) "rsp_" #name
#define FIELD(bits, name, kind, source, help)                                                      \
    {#name, METRIC_##kind(name), help, (uint32_t)offsetof(rsp_stats, name),                        \
     bits,  RSP_METRIC_##kind},
static const rsp_stats_field stats_fields[] = {RSP_STATS_FIELDS(FIELD)};
#undef FIELD
#undef METRIC_GAUGE
#undef METRIC_COUNTER

const rsp_stats_field *rsp_stats_fields(uint32_t *count)
{
    if (count)
        *count = (uint32_t)(sizeof stats_fields / sizeof stats_fields[0]);
    return stats_fields;
}
