/*
 * Guard mode (rsp_pool_config.guard; docs/semantics.md 9.6): at each
 * commit, once its forward_done has fired, free slots must sum to 0 and
 * every held slot that no step has addressed since the last check must sum
 * as it did then. The core says what each slot is (rsp__core_guard_slots),
 * the device computes (rsp__device_checksum); this file decides which
 * slots to compare, keeps the baselines and reports. Owner thread only.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Baselines are taken at a check, not at a plan: a check waits for the
 * device anyway (forward_done, then everything submitted), so a plan needs
 * neither a device wait nor checksums of its own (one pass a step, not
 * two), and the baselines are one array allocated at creation (no check
 * is skipped for want of memory).
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/sync.h"

/* Slots checksummed per device call: bounds the scratch, not the work. */
#define GUARD_BATCH 256u
/* batch_role: compare with zero (a free slot), or take a baseline. */
#define ROLE_FREE UINT32_MAX

/* A held slot's bytes at the check numbered seq, and whose they were. */
typedef struct guard_base {
    bool valid;
    rsp_label_id label;
    rsp_rid rid;
    uint64_t generation;
    uint64_t seq;
} guard_base;

struct rsp__guard {
    uint32_t max_slots, per; /* per: num_blocks * num_layers sums a slot */
    uint32_t num_layers;
    uint64_t seq;          /* plans and checks, numbered in order */
    rsp__guard_slot *view; /* [max_slots]: the core's answer, per call */
    uint64_t *pinned_at;   /* [max_slots]: the last plan that saw it pinned */
    guard_base *base;      /* [max_slots] */
    uint64_t *base_sums;   /* [max_slots * per] */
    uint32_t batch[GUARD_BATCH];
    bool compare[GUARD_BATCH]; /* a held slot whose baseline is compared */
    bool is_free[GUARD_BATCH];
    uint64_t *sums; /* [GUARD_BATCH * per] */
};

/* The counts (commits checked, slots found) are rsp_stats fields, kept in
 * the pool's counters: the owner is their one writer. */
static void count(uint64_t *c)
{
    rsp__store_relaxed_u64(c, rsp__load_relaxed_u64(c) + 1);
}

rsp_status rsp__guard_create(const rsp__layout *lay, rsp__guard **out, rsp_error *err)
{
    rsp__guard *g = calloc(1, sizeof *g);
    if (!g)
        return rsp__fail(err, RSP_ENOMEM, "guard mode: no memory for its state");
    g->max_slots = lay->max_slots;
    g->num_layers = lay->num_layers;
    g->per = lay->num_blocks * lay->num_layers;
    g->view = calloc(lay->max_slots, sizeof *g->view);
    g->pinned_at = calloc(lay->max_slots, sizeof *g->pinned_at);
    g->base = calloc(lay->max_slots, sizeof *g->base);
    g->base_sums = calloc((size_t)lay->max_slots * g->per, sizeof *g->base_sums);
    g->sums = calloc((size_t)GUARD_BATCH * g->per, sizeof *g->sums);
    if (!g->view || !g->pinned_at || !g->base || !g->base_sums || !g->sums) {
        rsp__guard_destroy(g);
        return rsp__fail(err, RSP_ENOMEM, "guard mode: no memory for %u slots' checksums",
                         lay->max_slots);
    }
    *out = g;
    return RSP_OK;
}

void rsp__guard_destroy(rsp__guard *g)
{
    if (!g)
        return;
    free(g->view);
    free(g->pinned_at);
    free(g->base);
    free(g->base_sums);
    free(g->sums);
    free(g);
}

void rsp__guard_plan(rsp_pool *p, uint64_t step_id)
{
    rsp__guard *g = p->guard;
    g->seq++;
    rsp__core_guard_slots(p->core, step_id, g->view);
    for (uint32_t s = 0; s < g->max_slots; s++)
        if (g->view[s].pinned)
            g->pinned_at[s] = g->seq; /* its forward may write it: no baseline before holds */
}

/* Tell on_error (if any) what guard mode found or could not do. */
static void report(rsp_pool *p, uint64_t step_id, const rsp_guard_violation *v, const char *text)
{
    if (!p->on_error)
        return;
    rsp_failure f = {.status = RSP_EDEVICE,
                     .kind = p->handling,
                     .step_id = step_id,
                     .has_step = true,
                     .message = text,
                     .guard = v};
    p->on_error(p->on_error_ctx, &f);
}

/* Compare one slot's sums with what they must be (want NULL: all zero);
 * a difference is one violation, reported and counted. */
static void compare(rsp_pool *p, uint64_t step_id, uint32_t slot, const uint64_t *got,
                    const uint64_t *want, const guard_base *holder)
{
    rsp__guard *g = p->guard;
    uint32_t first = UINT32_MAX, regions = 0;
    for (uint32_t r = 0; r < g->per; r++)
        if (got[r] != (want ? want[r] : 0)) {
            regions++;
            if (first == UINT32_MAX)
                first = r;
        }
    if (!regions)
        return;
    rsp_guard_violation v = {.slot = slot,
                             .held = holder != NULL,
                             .rid = holder ? holder->rid : 0,
                             .label = holder ? holder->label : 0,
                             .step_id = step_id,
                             .block = first / g->num_layers,
                             .layer = first % g->num_layers,
                             .regions = regions};
    char who[96], text[2 * RSP_ERROR_MAX];
    if (holder)
        snprintf(who, sizeof who, "held by rid %llu label %u, addressed by no step since",
                 (unsigned long long)holder->rid, holder->label);
    else
        snprintf(who, sizeof who, "free");
    snprintf(text, sizeof text,
             "guard mode: at the commit of step %llu, slot %u (%s) %s (block %u layer %u; %u "
             "block-layer regions differ): a forward wrote a slot it did not address",
             (unsigned long long)step_id, slot, who,
             holder ? "changed since the last check" : "is not zero", v.block, v.layer, regions);
    count(&p->ctr.guard_violations);
    report(p, step_id, &v, text);
}

/* Checksum batch[0 .. k), then per slot: a free one must be zero; a held
 * one is compared with its baseline if compare[j], then baselined anew. */
static rsp_status run_batch(rsp_pool *p, uint64_t step_id, uint32_t k, rsp_error *e)
{
    rsp__guard *g = p->guard;
    rsp_status st = rsp__device_checksum(p->dev, g->batch, k, g->sums, e);
    for (uint32_t j = 0; st == RSP_OK && j < k; j++) {
        const uint32_t slot = g->batch[j];
        const uint64_t *got = g->sums + (uint64_t)j * g->per;
        uint64_t *base = g->base_sums + (uint64_t)slot * g->per;
        if (g->is_free[j]) {
            compare(p, step_id, slot, got, NULL, NULL);
            continue;
        }
        if (g->compare[j])
            compare(p, step_id, slot, got, base, &g->base[slot]);
        const rsp__guard_slot *v = &g->view[slot];
        g->base[slot] = (guard_base){true, v->label, v->rid, v->generation, g->seq};
        memcpy(base, got, (size_t)g->per * sizeof *got);
    }
    return st;
}

/* Whether held slot s's baseline may be compared now: still the same
 * holding, addressed by no step now nor planned since the baseline. */
static bool comparable(const rsp__guard *g, uint32_t s)
{
    const rsp__guard_slot *v = &g->view[s];
    const guard_base *b = &g->base[s];
    return b->valid && !v->pinned && b->rid == v->rid && b->label == v->label &&
           b->generation == v->generation && g->pinned_at[s] <= b->seq;
}

/* Which slots a check reads: free ones (zero), and held ones no other
 * in-flight step addresses and no zero waits for (compared if they may
 * be, baselined in any case); the others lose their baseline. */
static rsp_status check_slots(rsp_pool *p, uint64_t step_id, rsp_error *e)
{
    rsp__guard *g = p->guard;
    uint32_t k = 0;
    rsp_status st = RSP_OK;
    for (uint32_t s = 0; st == RSP_OK && s < g->max_slots; s++) {
        const rsp__guard_slot *v = &g->view[s];
        const bool free_slot = v->state == RSP__SLOT_FREE;
        if (!free_slot && (v->state != RSP__SLOT_HELD || v->others || v->zero_pending)) {
            g->base[s].valid = false; /* the sink, pending, or another forward may write it */
            continue;
        }
        if (free_slot)
            g->base[s].valid = false;
        g->batch[k] = s;
        g->is_free[k] = free_slot;
        g->compare[k] = !free_slot && comparable(g, s);
        if (++k == GUARD_BATCH) {
            st = run_batch(p, step_id, k, e);
            k = 0;
        }
    }
    return st == RSP_OK && k ? run_batch(p, step_id, k, e) : st;
}

void rsp__guard_commit(rsp_pool *p, uint64_t step_id, const rsp_event *forward_done)
{
    rsp__guard *g = p->guard;
    rsp_error e = {0};
    rsp_status st = RSP_OK;
    if (forward_done && forward_done->handle)
        st = rsp__device_event_wait(p->dev, forward_done, UINT64_MAX, &e);
    if (st == RSP_OK) {
        g->seq++;
        rsp__core_guard_slots(p->core, step_id, g->view);
        st = check_slots(p, step_id, &e);
    }
    if (st == RSP_OK) {
        count(&p->ctr.guard_checks);
        return;
    }
    for (uint32_t s = 0; s < g->max_slots; s++)
        g->base[s].valid = false; /* half a pass: start over at the next check */
    char text[2 * RSP_ERROR_MAX];
    snprintf(text, sizeof text, "guard mode: step %llu's commit was not checked: %s",
             (unsigned long long)step_id, e.status != RSP_OK ? e.message : rsp_strerror(st));
    report(p, step_id, NULL, text);
}
