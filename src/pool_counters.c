/*
 * The pool's counters and gauges: the owner's mirror of the core's gauges
 * (refreshed when the actor settles) and the lock-free reader behind
 * rsp_stats_peek, both made from RSP__POOL_COUNTERS (pool.h), with the
 * compile-time asserts that tie that list to rsp_stats and the core.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

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
    p->mirrored = g;
    p->mirrored_ok = true;
    rsp__pool_counters *c = &p->ctr;
#define MIRROR_GAUGE(bits, name) rsp__store_relaxed_u##bits(&c->name, g.name);
#define MIRROR_COUNT(bits, name)
#define MIRROR(bits, name, kind) MIRROR_##kind(bits, name)
    RSP__POOL_COUNTERS(MIRROR)
#undef MIRROR
#undef MIRROR_COUNT
#undef MIRROR_GAUGE
}

/* Each mirrored field has rsp_stats's width, and each gauge the core's. */
#define SAME_WIDTH(bits, name, kind)                                                               \
    _Static_assert(sizeof(((rsp_stats *)0)->name) * 8 == (bits), #name ": width differs");
RSP__POOL_COUNTERS(SAME_WIDTH)
#undef SAME_WIDTH
#define GAUGE_WIDTH_GAUGE(bits, name)                                                              \
    _Static_assert(sizeof(((rsp__core_gauges *)0)->name) * 8 == (bits), #name ": gauge width");
#define GAUGE_WIDTH_COUNT(bits, name)
#define GAUGE_WIDTH(bits, name, kind) GAUGE_WIDTH_##kind(bits, name)
RSP__POOL_COUNTERS(GAUGE_WIDTH)
#undef GAUGE_WIDTH
#undef GAUGE_WIDTH_COUNT
#undef GAUGE_WIDTH_GAUGE
/* And rsp_stats has no field the list and rsp__pool_read_counters miss:
 * the mirrored ones, max_slots, usable_slots, inbox_depth (32 bits),
 * messages_handled and posts_failed (64), with no padding between. */
#define BYTES(bits, name, kind) +(bits) / 8
enum { MIRRORED_BYTES = 0 RSP__POOL_COUNTERS(BYTES) };
#undef BYTES
_Static_assert(MIRRORED_BYTES + 3 * 4 + 2 * 8 == sizeof(rsp_stats),
               "an rsp_stats field is neither in RSP__POOL_COUNTERS nor read by "
               "rsp__pool_read_counters");

void rsp__pool_read_counters(const rsp_pool *p, rsp_stats *out)
{
    rsp__pool_counters *c = (rsp__pool_counters *)&p->ctr;
    out->max_slots = p->layout->max_slots;
    out->usable_slots = p->layout->usable_slots;
    /* Relaxed everywhere: gauges, each read whole, none orders anything. */
#define READ(bits, name, kind) out->name = rsp__load_relaxed_u##bits(&c->name);
    RSP__POOL_COUNTERS(READ)
#undef READ
    out->inbox_depth = rsp__actor_depth(p->actor);
    out->messages_handled = rsp__actor_handled(p->actor);
    out->posts_failed = rsp__actor_unwaited_failures(p->actor);
}
