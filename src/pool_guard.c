/*
 * Guard mode (rsp_pool_config.guard; docs/semantics.md 9.6): after each
 * live plan, a snapshot of the checksums of the held slots no in-flight
 * step addresses; at each commit, once its forward_done has fired, free
 * slots must sum to 0 and snapshot slots still theirs must sum as they
 * did. The core says what each slot is (rsp__core_guard_slots), the
 * device computes (rsp__device_checksum); this file decides which slots
 * to compare and reports. Owner thread only.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/mem.h"

/* At most 64 steps in flight (a slot's pins are a 64-bit mask). */
#define GUARD_MAX_SNAPS 64u
/* Slots checksummed per device call: bounds the scratch, not the work. */
#define GUARD_BATCH 256u

/* A held slot as step step_id's plan saw it: whose, and its sums. */
typedef struct guard_entry {
    uint32_t slot;
    rsp_label_id label;
    rsp_rid rid;
    uint64_t generation;
} guard_entry;

typedef struct guard_snap {
    bool used;
    bool lost; /* no memory for it: its commit checks free slots only */
    uint64_t step_id;
    uint64_t seq; /* the guard's snapshot number when it was taken */
    guard_entry *entries;
    uint64_t *sums; /* per entry, `per` sums (device.h's order) */
    uint32_t n, cap_entries, cap_sums;
} guard_snap;

struct rsp__guard {
    uint32_t max_slots, per; /* per: num_blocks * num_layers sums a slot */
    uint32_t num_layers;
    rsp__guard_slot *view; /* [max_slots]: the core's answer, refreshed per call */
    uint64_t *pinned_at;   /* [max_slots]: the last snapshot number that saw it pinned */
    uint32_t *batch;       /* [GUARD_BATCH] slots of one device call */
    uint64_t *sums;        /* [GUARD_BATCH * per] */
    uint64_t seq;
    /* Commits checked and slots found. Not rsp_stats fields: rsp_stats
     * cannot grow before its fillers learn the caller's size (docs/abi.md);
     * the dump carries them (rsp__guard_counts). */
    uint64_t checks, violations;
    guard_snap snaps[GUARD_MAX_SNAPS];
};

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
    g->batch = calloc(GUARD_BATCH, sizeof *g->batch);
    g->sums = calloc((size_t)GUARD_BATCH * g->per, sizeof *g->sums);
    if (!g->view || !g->pinned_at || !g->batch || !g->sums) {
        rsp__guard_destroy(g);
        return rsp__fail(err, RSP_ENOMEM, "guard mode: no memory for %u slots' state",
                         lay->max_slots);
    }
    *out = g;
    return RSP_OK;
}

void rsp__guard_destroy(rsp__guard *g)
{
    if (!g)
        return;
    for (uint32_t i = 0; i < GUARD_MAX_SNAPS; i++) {
        free(g->snaps[i].entries);
        free(g->snaps[i].sums);
    }
    free(g->view);
    free(g->pinned_at);
    free(g->batch);
    free(g->sums);
    free(g);
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

static guard_snap *snap_of(rsp__guard *g, uint64_t step_id)
{
    for (uint32_t i = 0; i < GUARD_MAX_SNAPS; i++)
        if (g->snaps[i].used && g->snaps[i].step_id == step_id)
            return &g->snaps[i];
    return NULL;
}

/* A table full of snapshots: one whose step is no longer in flight (it
 * ended on a path that did not say so, such as a broken pool's) is taken. */
static guard_snap *snap_stale(rsp__guard *g, const rsp__core *core)
{
    for (uint32_t i = 0; i < GUARD_MAX_SNAPS; i++)
        if (!rsp__core_step_in_flight(core, g->snaps[i].step_id))
            return &g->snaps[i];
    return NULL;
}

static guard_snap *snap_new(rsp__guard *g, const rsp__core *core, uint64_t step_id)
{
    guard_snap *s = snap_of(g, step_id);
    for (uint32_t i = 0; !s && i < GUARD_MAX_SNAPS; i++)
        if (!g->snaps[i].used)
            s = &g->snaps[i];
    if (!s)
        s = snap_stale(g, core);
    if (s) { /* a step planned again (after a refused plan) takes a new one */
        s->used = true;
        s->lost = false;
        s->step_id = step_id;
        s->n = 0;
    }
    return s;
}

/* Checksum slots[0 .. n) into out (n * per), GUARD_BATCH at a time. */
static rsp_status sum_slots(rsp_pool *p, const uint32_t *slots, uint32_t n, uint64_t *out,
                            rsp_error *e)
{
    for (uint32_t i = 0; i < n; i += GUARD_BATCH) {
        uint32_t k = n - i < GUARD_BATCH ? n - i : GUARD_BATCH;
        rsp_status st =
            rsp__device_checksum(p->dev, slots + i, k, out + (uint64_t)i * p->guard->per, e);
        if (st != RSP_OK)
            return st;
    }
    return RSP_OK;
}

/* Collect the snapshot's entries: held slots no in-flight step pins; stamp
 * the pinned ones with this snapshot's number. */
static rsp_status snap_collect(rsp__guard *g, guard_snap *s)
{
    for (uint32_t slot = 0; slot < g->max_slots; slot++) {
        const rsp__guard_slot *v = &g->view[slot];
        if (v->pinned)
            g->pinned_at[slot] = s->seq;
        if (v->state != RSP__SLOT_HELD || v->pinned)
            continue;
        if (rsp__grow((void **)&s->entries, &s->cap_entries, s->n + 1, sizeof *s->entries) !=
            RSP_OK)
            return RSP_ENOMEM;
        s->entries[s->n++] = (guard_entry){slot, v->label, v->rid, v->generation};
    }
    return rsp__grow((void **)&s->sums, &s->cap_sums, (uint64_t)s->n * g->per, sizeof *s->sums);
}

void rsp__guard_plan(rsp_pool *p, uint64_t step_id)
{
    rsp__guard *g = p->guard;
    guard_snap *s = snap_new(g, p->core, step_id);
    if (!s)
        return; /* 64 steps in flight: the pins' bound, the core refuses the 65th */
    s->seq = ++g->seq;
    rsp__core_guard_slots(p->core, g->view);
    rsp_error e = {0};
    rsp_status st = snap_collect(g, s);
    for (uint32_t i = 0; st == RSP_OK && i < s->n; i += GUARD_BATCH) {
        uint32_t k = s->n - i < GUARD_BATCH ? s->n - i : GUARD_BATCH;
        for (uint32_t j = 0; j < k; j++)
            g->batch[j] = s->entries[i + j].slot;
        st = sum_slots(p, g->batch, k, s->sums + (uint64_t)i * g->per, &e);
    }
    if (st == RSP_OK)
        return;
    s->lost = true;
    char text[2 * RSP_ERROR_MAX];
    snprintf(text, sizeof text,
             "guard mode: no snapshot of step %llu's unaddressed slots (%s): its commit checks "
             "free slots only",
             (unsigned long long)step_id, e.status != RSP_OK ? e.message : rsp_strerror(st));
    report(p, step_id, NULL, text);
}

void rsp__guard_end(rsp_pool *p, uint64_t step_id)
{
    guard_snap *s = snap_of(p->guard, step_id);
    if (s)
        s->used = false;
}

/* Compare one slot's sums with what they must be (want NULL: all zero);
 * a difference is one violation, reported and counted. */
static void compare(rsp_pool *p, uint64_t step_id, uint32_t slot, const uint64_t *got,
                    const uint64_t *want, const guard_entry *holder)
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
        snprintf(who, sizeof who, "held by rid %llu label %u, addressed by no step in flight",
                 (unsigned long long)holder->rid, holder->label);
    else
        snprintf(who, sizeof who, "free");
    snprintf(text, sizeof text,
             "guard mode: at the commit of step %llu, slot %u (%s) %s (block %u layer %u; %u "
             "block-layer regions differ): a forward wrote a slot it did not address",
             (unsigned long long)step_id, slot, who,
             holder ? "changed since the step's plan" : "is not zero", v.block, v.layer, regions);
    p->guard->violations++;
    report(p, step_id, &v, text);
}

/* Whether snapshot entry x may still be compared: the same holding (holder
 * and generation) and no step pins it now or pinned it since. */
static bool entry_live(const rsp__guard *g, const guard_snap *s, const guard_entry *x)
{
    const rsp__guard_slot *v = &g->view[x->slot];
    return v->state == RSP__SLOT_HELD && !v->pinned && v->rid == x->rid && v->label == x->label &&
           v->generation == x->generation && g->pinned_at[x->slot] <= s->seq;
}

/* Checksum and compare batch[0 .. k): idx[j] is the snapshot entry of
 * batch[j], or UINT32_MAX for a free slot. */
static rsp_status check_batch(rsp_pool *p, uint64_t step_id, const guard_snap *s, uint32_t k,
                              const uint32_t *idx, rsp_error *e)
{
    rsp__guard *g = p->guard;
    rsp_status st = sum_slots(p, g->batch, k, g->sums, e);
    for (uint32_t j = 0; st == RSP_OK && j < k; j++) {
        const bool free_slot = idx[j] == UINT32_MAX;
        compare(p, step_id, g->batch[j], g->sums + (uint64_t)j * g->per,
                free_slot ? NULL : s->sums + (uint64_t)idx[j] * g->per,
                free_slot ? NULL : &s->entries[idx[j]]);
    }
    return st;
}

static rsp_status check_slots(rsp_pool *p, uint64_t step_id, const guard_snap *s, rsp_error *e)
{
    rsp__guard *g = p->guard;
    uint32_t idx[GUARD_BATCH], k = 0, x = 0; /* x: the next snapshot entry (slot order) */
    rsp_status st = RSP_OK;
    for (uint32_t slot = 0; st == RSP_OK && slot < g->max_slots; slot++) {
        uint32_t which = UINT32_MAX;
        while (s && x < s->n && s->entries[x].slot < slot)
            x++;
        if (s && x < s->n && s->entries[x].slot == slot && entry_live(g, s, &s->entries[x]))
            which = x;
        else if (g->view[slot].state != RSP__SLOT_FREE)
            continue; /* the sink, pending, addressed, or a holding changed for a reason */
        g->batch[k] = slot;
        idx[k++] = which;
        if (k == GUARD_BATCH) {
            st = check_batch(p, step_id, s, k, idx, e);
            k = 0;
        }
    }
    return st == RSP_OK && k ? check_batch(p, step_id, s, k, idx, e) : st;
}

void rsp__guard_commit(rsp_pool *p, uint64_t step_id, const rsp_event *forward_done)
{
    rsp__guard *g = p->guard;
    rsp_error e = {0};
    rsp_status st = RSP_OK;
    if (forward_done && forward_done->handle)
        st = rsp__device_event_wait(p->dev, forward_done, UINT64_MAX, &e);
    if (st == RSP_OK) {
        guard_snap *s = snap_of(g, step_id);
        rsp__core_guard_slots(p->core, g->view);
        st = check_slots(p, step_id, s && !s->lost ? s : NULL, &e);
    }
    if (st == RSP_OK) {
        g->checks++;
        return;
    }
    char text[2 * RSP_ERROR_MAX];
    snprintf(text, sizeof text, "guard mode: step %llu's commit was not checked: %s",
             (unsigned long long)step_id, e.status != RSP_OK ? e.message : rsp_strerror(st));
    report(p, step_id, NULL, text);
}

void rsp__guard_counts(const rsp__guard *g, uint64_t *checks, uint64_t *violations)
{
    *checks = g->checks;
    *violations = g->violations;
}
