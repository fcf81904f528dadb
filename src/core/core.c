/*
 * The core's state (core_impl.h) and its lowest layer: creation and
 * destruction, labels, requests and holdings, the free stack, slot states, the
 * scratch pair set, ingest / reset / remove, queries (docs/semantics.md 1-3).
 * Calls no other module of src/core/ but check.c (core_impl.h lists them).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core_impl.h"
#include "util/error.h"
#include "util/mem.h"

_Static_assert(1 == RSP__FREE_HASH_P * RSP__FREE_HASH_PINV, "PINV is P's inverse mod 2^64");

/* The free stack's only push and pop (core_impl.h: released slots above
 * the fresh ones): they keep free_hash (the slot's weight is P^depth, its
 * depth the index it takes in the stack) and free_pow = P^free_top. */
static void free_push(rsp__core *c, uint32_t slot)
{
    c->free_hash += (uint64_t)(slot + 1) * c->free_pow;
    c->free_pow *= RSP__FREE_HASH_P;
    c->free_stack[c->num_pushed++] = slot;
    c->free_top++;
}

static uint32_t free_pop(rsp__core *c)
{
    /* Below the pushed slots lie the fresh ones, lowest on top. */
    uint32_t slot = c->num_pushed ? c->free_stack[--c->num_pushed] : c->fresh++;
    c->free_top--;
    c->free_pow *= RSP__FREE_HASH_PINV;
    c->free_hash -= (uint64_t)(slot + 1) * c->free_pow;
    return slot;
}

/* free_hash and free_pow of a stack holding the slots top, ..., n - 1, the
 * highest at the bottom: depth d < m = n - top holds slot n - 1 - d, of
 * weight n - d, so the hash is n g(m) - e(m) with g(m) = sum P^d and
 * e(m) = sum d P^d over d < m (mod 2^64). O(log m): the sums double. */
static void free_hash_fresh(rsp__core *c, uint32_t n, uint32_t top)
{
    uint32_t m = n - top;
    uint64_t g = 0, e = 0, pm = 1; /* g(k), e(k), P^k for k = the bits of m seen */
    uint64_t k = 0;
    for (int b = 31; b >= 0; b--) {
        e += pm * (e + k * g); /* k -> 2k */
        g += pm * g;
        pm *= pm;
        k *= 2;
        if (m >> b & 1) { /* k -> k + 1 */
            g += pm;
            e += k * pm;
            pm *= RSP__FREE_HASH_P;
            k++;
        }
    }
    c->free_hash = (uint64_t)n * g - e;
    c->free_pow = pm;
}

/* The checkpoint tiers, their records and the key table (ckpt.h): sized
 * once for every checkpoint slot, so no take ever allocates for them. */
static rsp_status ck_create(rsp__core *c)
{
    const rsp__layout *lay = &c->layout;
    uint64_t n = (uint64_t)lay->max_checkpoints + lay->max_host_checkpoints;
    c->ck = calloc(n ? n : 1, sizeof *c->ck);
    if (!c->ck || rsp__map_init(&c->keys, n))
        return RSP_ENOMEM;
    for (uint64_t i = 0; i < n; i++)
        c->ck[i].hpos = RSP__NONE;
    uint32_t first = lay->max_slots;
    for (int t = 0; t < RSP_TIER_COUNT_; t++) {
        rsp__tier *tr = &c->tiers[t];
        tr->size = t == RSP_TIER_DEVICE ? lay->max_checkpoints : lay->max_host_checkpoints;
        tr->first = first;
        tr->head = tr->tail = RSP__NONE;
        tr->free = calloc(tr->size ? tr->size : 1, sizeof *tr->free);
        /* The value policy's heap (ckpt_value.h): one entry a record. */
        tr->heap = c->ck_value ? malloc((tr->size ? tr->size : 1) * sizeof *tr->heap) : NULL;
        if (!tr->free || (c->ck_value && !tr->heap))
            return RSP_ENOMEM;
        /* Descending, so a fresh tier pops its first id first. */
        for (uint32_t i = tr->size; i-- > 0;)
            rsp__tier_push(c, (rsp_tier)t, first + i);
        first += tr->size;
    }
    return RSP_OK;
}

rsp_status rsp__core_create(const rsp_pool_config *cfg, rsp__core **out, rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "out is NULL");
    rsp__layout lay;
    rsp_status st = rsp__layout_build(cfg, &lay, err);
    if (st)
        return st;
    uint32_t inflight = cfg->max_inflight_steps ? cfg->max_inflight_steps : RSP__DEFAULT_INFLIGHT;
    if (inflight > RSP__MAX_INFLIGHT)
        return rsp__fail(err, RSP_EINVAL, "max_inflight_steps = %" PRIu32 ": at most %u",
                         cfg->max_inflight_steps, RSP__MAX_INFLIGHT);
    /* Each queued message holds a copy of its arrays: bound what a full
     * inbox may hold (and keep capacity + slack far from overflowing). */
    if (cfg->inbox_capacity > RSP__MAX_INBOX)
        return rsp__fail(err, RSP_EINVAL, "inbox_capacity = %" PRIu32 ": at most %u",
                         cfg->inbox_capacity, RSP__MAX_INBOX);

    rsp__core *c = calloc(1, sizeof *c);
    if (!c)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the core");
    c->layout = lay;
    c->max_inflight = inflight;
    c->same.ghost = RSP__NONE;
    /* Zero pages touched as slots are used (util/mem.h): creation and
     * destruction cost the same for any max_slots. */
    c->slots = rsp__lazy_calloc(lay.max_slots, sizeof *c->slots);
    c->free_stack = rsp__lazy_calloc(lay.max_slots, sizeof *c->free_stack);
    c->steps = calloc(inflight, sizeof *c->steps);
    rsp_status mst = rsp__map_init(&c->table, 32);
    if (!c->slots || !c->free_stack || !c->steps || mst) {
        rsp__core_destroy(c);
        return rsp__fail(err, RSP_ENOMEM, "out of memory for %" PRIu32 " slots", lay.max_slots);
    }
    c->ck_value = cfg->checkpoint_policy == RSP_CHECKPOINT_VALUE;
    c->ck_weight_byte = cfg->checkpoint_value_weight / (double)lay.slot_bytes;
    if (ck_create(c)) {
        rsp__core_destroy(c);
        return rsp__fail(err, RSP_ENOMEM,
                         "out of memory for %" PRIu32 " + %" PRIu32 " checkpoint records",
                         lay.max_checkpoints, lay.max_host_checkpoints);
    }
    rsp__op_begin(c);
    c->ck_demote = cfg->checkpoint_demote;
    c->free_swap = RSP__NONE;
    c->free_rec = RSP__NONE;
    /* Every slot but the sink is fresh: the stack an explicit push of
     * max_slots - 1, ..., 1 (0 without the sink) would give, so a fresh
     * pool pops 1, 2, 3... (0, 1, 2... without the sink). The slot array
     * is zeroed (RSP__SLOT_FREE), so nothing here is O(max_slots). */
    c->fresh = lay.sink ? 1u : 0u;
    c->free_top = lay.max_slots - c->fresh;
    free_hash_fresh(c, lay.max_slots, c->fresh);
    if (lay.sink)
        c->slots[RSP_SINK_SLOT].state = RSP__SLOT_SINK;
    memcpy(c->label_names[RSP_LABEL_MAIN], "main", 5);
    c->num_labels = 1;
    *out = c;
    return RSP_OK;
}

static void addr_free(rsp__addr *a)
{
    free(a->slots);
    free(a->has_state);
    free(a->gens);
    free(a->spec);
}

void rsp__core_destroy(rsp__core *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->num_recs; i++)
        free(c->reqs[i].heap);
    free(c->reqs);
    rsp__map_fini(&c->table);
    if (c->steps)
        for (uint32_t i = 0; i < c->max_inflight; i++) {
            free(c->steps[i].journal);
            free(c->steps[i].pinned);
            free(c->steps[i].post_slots);
            free(c->steps[i].ckrecs);
            free(c->steps[i].prows);
            free(c->steps[i].fslots);
            free(c->steps[i].valid_rows);
            free(c->steps[i].dforks);
            free(c->steps[i].dtakes);
            free(c->steps[i].drest);
            free(c->steps[i].raw);
            free(c->steps[i].spec_rows);
            free(c->steps[i].spec_slots);
            rsp__same_free(&c->steps[i].same);
        }
    free(c->steps);
    rsp__lazy_free(c->slots, c->layout.max_slots, sizeof *c->slots);
    rsp__lazy_free(c->free_stack, c->layout.max_slots, sizeof *c->free_stack);
    addr_free(&c->stage);
    addr_free(&c->live);
    for (uint32_t i = 0; i < c->num_spare_heaps; i++)
        free(c->spare_heaps[i]);
    free(c->spare_heaps);
    free(c->bufs);
    free(c->set);
    free(c->rids);
    free(c->rid_recs);
    free(c->rid_groups);
    free(c->rid_skip);
    free(c->ck);
    rsp__map_fini(&c->keys);
    for (int t = 0; t < RSP_TIER_COUNT_; t++) {
        free(c->tiers[t].free);
        free(c->tiers[t].heap);
    }
    free(c->swaps);
    free(c->rep_changes);
    free(c->rep_evictions);
    free(c->rep_skips);
    free(c);
}

void rsp__core_set_reserve_hook(rsp__core *c, rsp__reserve_hook hook, void *ctx)
{
    c->reserve_hook = hook;
    c->reserve_ctx = ctx;
}

const rsp__layout *rsp__core_layout(const rsp__core *c)
{
    return &c->layout;
}

/* --- labels -------------------------------------------------------------- */

rsp_status rsp__core_label(rsp__core *c, const char *name, rsp_label_id *out, rsp_error *err)
{
    if (!name)
        return rsp__fail(err, RSP_EINVAL, "label name is NULL");
    size_t len = strnlen(name, RSP_NAME_MAX);
    if (len == 0)
        return rsp__fail(err, RSP_EINVAL, "label name is empty");
    if (len >= RSP_NAME_MAX)
        return rsp__fail(err, RSP_EINVAL, "label name is too long: at most %d characters",
                         RSP_NAME_MAX - 1);
    for (uint32_t i = 0; i < c->num_labels; i++)
        if (strcmp(c->label_names[i], name) == 0) {
            if (out)
                *out = i;
            return RSP_OK;
        }
    if (c->num_labels >= RSP_MAX_LABELS)
        return rsp__fail(err, RSP_ECAPACITY, "label \"%s\": all %d label ids are taken", name,
                         RSP_MAX_LABELS);
    memcpy(c->label_names[c->num_labels], name, len + 1);
    if (out)
        *out = c->num_labels;
    c->num_labels++;
    return RSP_OK;
}

uint32_t rsp__core_num_labels(const rsp__core *c)
{
    return c->num_labels;
}

const char *rsp__core_label_name(const rsp__core *c, rsp_label_id id)
{
    return id < c->num_labels ? c->label_names[id] : NULL;
}

/* --- the rid table (map.h) --------------------------------------------- */

rsp__req *rsp__req_find(const rsp__core *c, rsp_rid rid)
{
    uint32_t rec = rsp__map_get(&c->table, rid);
    return rec == RSP__MAP_EMPTY ? NULL : &c->reqs[rec];
}

rsp_status rsp__req_reserve(rsp__core *c, uint32_t n)
{
    if (rsp__map_reserve(&c->table, n))
        return RSP_ENOMEM;
    if (n <= c->num_free_recs)
        return RSP_OK;
    uint64_t recs = (uint64_t)c->num_recs + (n - c->num_free_recs);
    return rsp__grow((void **)&c->reqs, &c->cap_recs, recs, sizeof *c->reqs);
}

rsp__req *rsp__req_get(rsp__core *c, rsp_rid rid)
{
    /* One probe when nothing grows: the entry found, or the empty one
     * where the rid goes. */
    uint32_t at = rsp__map_probe(&c->table, rid);
    if (c->table.t[at].val != RSP__MAP_EMPTY)
        return &c->reqs[c->table.t[at].val];
    /* Room for one more (rsp__req_reserve(c, 1)), its usual case inline. */
    if (((uint64_t)c->table.count + 1) * 2 > c->table.size || !c->num_free_recs) {
        const uint32_t size = c->table.size;
        if (rsp__req_reserve(c, 1))
            return NULL;
        if (c->table.size != size) /* grown: every entry moved */
            at = rsp__map_probe(&c->table, rid);
    }
    uint32_t rec;
    if (c->free_rec != RSP__NONE) {
        rec = c->free_rec;
        c->free_rec = c->reqs[rec].next_free;
        c->num_free_recs--;
    } else {
        RSP__ASSERT(c->num_recs < c->cap_recs);
        rec = c->num_recs++;
        c->reqs[rec].heap = NULL;
    }
    rsp__req *r = &c->reqs[rec];
    rsp__hold *keep_heap = r->heap; /* a recycled record keeps its spill array */
    uint32_t keep_cap = keep_heap ? r->cap_holds : RSP__INLINE_HOLDINGS;
    /* Everything but the inline holdings, which nothing reads past
     * num_holds (a recycled record's heap keeps stale ones too). */
    const size_t tail = offsetof(rsp__req, inl) + sizeof r->inl;
    memset(r, 0, offsetof(rsp__req, inl));
    memset((unsigned char *)r + tail, 0, sizeof *r - tail);
    r->heap = keep_heap;
    r->cap_holds = keep_cap;
    r->rid = rid;
    r->live = true;
    r->next_free = RSP__NONE;
    rsp__map_put_at(&c->table, at, rid, rec);
    c->num_requests++;
    return r;
}

/* Forget r, whose table entry is at (rsp__map_probe of its rid, the map
 * unchanged since). */
static void req_forget_at(rsp__core *c, rsp__req *r, uint32_t at)
{
    uint32_t rec = (uint32_t)(r - c->reqs);
    RSP__ASSERT(c->table.t[at].val == rec && c->table.t[at].key == r->rid);
    rsp__map_del_at(&c->table, at);
    rsp__holders_changed(c); /* a later admit of its rid ingests again */
    r->live = false;
    r->next_free = c->free_rec;
    c->free_rec = rec;
    c->num_free_recs++;
    RSP__ASSERT(c->num_requests > 0);
    c->num_requests--;
}

rsp__hold *rsp__hold_lookup_slow(rsp__core *c, rsp_rid rid, rsp_label_id label, uint32_t *rec,
                                 uint32_t *hold, rsp__req **out_r)
{
    rsp__req *r;
    /* A rid has at most one live record, so a live record carrying this rid
     * is the one the table would find. */
    if (*rec < c->num_recs && c->reqs[*rec].live && c->reqs[*rec].rid == rid) {
        r = &c->reqs[*rec];
    } else {
        r = rsp__req_find(c, rid);
        *rec = r ? (uint32_t)(r - c->reqs) : RSP__NONE;
    }
    *out_r = r;
    if (!r)
        return NULL;
    rsp__hold *h = rsp__req_holds(r);
    /* Labels are unique within a request. */
    if (*hold < r->num_holds && h[*hold].label == label)
        return &h[*hold];
    for (uint32_t i = 0; i < r->num_holds; i++)
        if (h[i].label == label) {
            *hold = i;
            return &h[i];
        }
    *hold = RSP__NONE;
    return NULL;
}

void rsp__core_set_fast(rsp__core *c, bool on)
{
    c->same.off = !on;
}

void rsp__core_rows_fixed(rsp__core *c, bool on)
{
    rsp__same_fix_rows(&c->same, on);
}

rsp__fast_counts rsp__core_fast_counts(const rsp__core *c)
{
    return c->fast;
}

rsp_status rsp__hold_reserve_spills(rsp__core *c, uint32_t n)
{
    if (n <= c->num_spare_heaps)
        return RSP_OK;
    if (rsp__grow((void **)&c->spare_heaps, &c->cap_spare_heaps, n, sizeof *c->spare_heaps))
        return RSP_ENOMEM;
    while (c->num_spare_heaps < n) {
        rsp__hold *h = malloc(RSP_MAX_LABELS * sizeof *h);
        if (!h)
            return RSP_ENOMEM;
        c->spare_heaps[c->num_spare_heaps++] = h;
    }
    return RSP_OK;
}

rsp__hold *rsp__hold_assign(rsp__core *c, rsp__req *r, rsp_label_id label)
{
    if (r->num_holds == r->cap_holds) {
        /* Spill once to room for every label: a request never needs more.
         * (A record with a heap already has cap_holds = RSP_MAX_LABELS.) */
        RSP__ASSERT(!r->heap && c->num_spare_heaps > 0);
        rsp__hold *h = c->spare_heaps[--c->num_spare_heaps];
        memcpy(h, r->inl, r->num_holds * sizeof *h);
        r->heap = h;
        r->cap_holds = RSP_MAX_LABELS;
    }
    RSP__ASSERT(c->free_top > 0);
    rsp__holders_changed(c); /* a holding appears */
    uint32_t slot = free_pop(c);
    c->slots[slot].state = RSP__SLOT_HELD;
    c->held++;
    rsp__hold *h = &rsp__req_holds(r)[r->num_holds++];
    h->label = label;
    h->slot = slot;
    h->has_state = false; /* free slots read zeros */
    h->generation = rsp__next_generation(c);
    c->num_holdings++;
    c->label_holdings[label]++;
    c->holding_moves++;
    return h;
}

uint32_t rsp__slot_take(rsp__core *c)
{
    RSP__ASSERT(c->free_top > 0);
    uint32_t slot = free_pop(c);
    c->slots[slot].state = RSP__SLOT_HELD;
    c->held++;
    return slot;
}

void rsp__slot_release(rsp__core *c, uint32_t slot, rsp__work *w)
{
    /* Invariant: every free slot reads zeros. The caller reserved work room. */
    RSP__MUST_OK(rsp__work_zero(w, slot));
    RSP__ASSERT(c->free_top < c->layout.max_slots);
    c->slots[slot].state = RSP__SLOT_FREE;
    rsp__zero_pending(c, &c->slots[slot], false);
    c->slots[slot].took_zero = 0;
    c->slots[slot].fork_pins = 0; /* marks were for the holding that left */
    free_push(c, slot);
}

void rsp__hold_drop(rsp__core *c, rsp__req *r, uint32_t i, rsp__work *w)
{
    rsp__hold *h = rsp__req_holds(r);
    uint32_t slot = h[i].slot;
    RSP__ASSERT(i < r->num_holds && c->num_holdings > 0 && c->held > 0);
    RSP__ASSERT(c->label_holdings[h[i].label] > 0);
    c->label_holdings[h[i].label]--;
    c->holding_moves++;
    rsp__holders_changed(c); /* the holding goes; the later ones move down */
    memmove(&h[i], &h[i + 1], (r->num_holds - i - 1) * sizeof *h);
    r->num_holds--;
    c->num_holdings--;
    c->held--;
    RSP__ASSERT(c->same.ghost == RSP__NONE); /* a lingering pin would read as a step's */
    if (c->slots[slot].pins) {
        /* A forward in flight may still write it: zero and free it when the
         * last step addressing it ends (commit or rollback, after its WAIT). */
        c->slots[slot].state = RSP__SLOT_PENDING;
        c->pending++;
    } else {
        rsp__slot_release(c, slot, w);
    }
}

/* --- (rid, label) scratch set ------------------------------------------- */

rsp_status rsp__set_reset(rsp__core *c, uint32_t n)
{
    uint64_t need = (uint64_t)n * 2 + 16;
    if (need > c->set_size) {
        uint64_t size = c->set_size ? c->set_size : 64;
        while (size < need)
            size *= 2;
        if (size > UINT32_MAX / 2)
            return RSP_ENOMEM;
        rsp__pair_entry *s = calloc((size_t)size, sizeof *s);
        if (!s)
            return RSP_ENOMEM;
        free(c->set);
        c->set = s;
        c->set_size = (uint32_t)size;
        c->set_epoch = 0;
    }
    if (++c->set_epoch == 0) { /* wrapped: clear the stamps once */
        memset(c->set, 0, (size_t)c->set_size * sizeof *c->set);
        c->set_epoch = 1;
    }
    return RSP_OK;
}

/* The entry of (rid, label) in the set, or the free one where it goes.
 * The reset's room keeps a free entry: the probe ends. */
static uint32_t set_probe(const rsp__core *c, rsp_rid rid, rsp_label_id label)
{
    uint32_t mask = c->set_size - 1;
    uint32_t i = (uint32_t)rsp__mix64(rid * 0x9e3779b97f4a7c15ull + label) & mask;
    while (c->set[i].stamp == c->set_epoch && !(c->set[i].rid == rid && c->set[i].label == label))
        i = (i + 1) & mask;
    return i;
}

static void set_fill(rsp__core *c, uint32_t i, rsp_rid rid, rsp_label_id label)
{
    c->set[i].stamp = c->set_epoch;
    c->set[i].rid = rid;
    c->set[i].label = label;
}

bool rsp__set_insert(rsp__core *c, rsp_rid rid, rsp_label_id label)
{
    uint32_t i = set_probe(c, rid, label);
    if (c->set[i].stamp == c->set_epoch)
        return false;
    set_fill(c, i, rid, label);
    return true;
}

void rsp__set_add(rsp__core *c, rsp_rid rid, rsp_label_id label)
{
    set_fill(c, set_probe(c, rid, label), rid, label);
}

/* --- lifecycle (docs/semantics.md 3) ------------------------------------ */

rsp_status rsp__core_ingest(rsp__core *c, rsp_rid rid, rsp_error *err)
{
    rsp__op_begin(c);
    if (!rsp__req_get(c, rid))
        return rsp__fail(err, RSP_ENOMEM, "out of memory ingesting rid %" PRIu64, rid);
    return RSP_OK;
}

void rsp__swap_forget(rsp__core *c, rsp__req *r)
{
    rsp__swap *sw = &c->swaps[r->swap - 1];
    for (uint32_t i = sw->n; i-- > 0;)
        rsp__tier_push(c, RSP_TIER_HOST, sw->slot[i]);
    RSP__ASSERT(c->swapped_slots >= sw->n && c->num_swapped > 0);
    c->swapped_slots -= sw->n;
    c->num_swapped--;
    sw->next_free = c->free_swap;
    c->free_swap = r->swap - 1;
    r->swap = 0;
}

/* Reset (or, free, empty) r's holdings. A request that holds nothing and
 * has nothing swapped out has nothing to zero or free: it reserves
 * nothing either (a remove right after an ingest, the common case of a
 * request that never ran, pays only its lookup). */
static rsp_status reset_req(rsp__core *c, rsp__req *r, bool free, rsp__work *w, rsp_error *err)
{
    if (!r->num_holds && !r->swap)
        return RSP_OK;
    rsp_status xst = rsp__xfer_check_req(c, r, RSP__NONE, free ? "remove" : "reset", err);
    if (xst)
        return xst;
    if (rsp__work_reserve(w, 1, r->num_holds, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory resetting rid %" PRIu64, r->rid);
    rsp_status st =
        rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = 1, .slots = r->num_holds}, err);
    if (st)
        return st;
    rsp__work_freeze(w); /* nothing below fails */
    if (r->swap)         /* it holds nothing; the state it would keep is zeros */
        rsp__swap_forget(c, r);
    if (free) {
        /* Label insertion order: the last label's slot ends on top. */
        while (r->num_holds)
            rsp__hold_drop(c, r, 0, w);
        rsp__work_thaw(w);
        return RSP_OK;
    }
    rsp__hold *h = rsp__req_holds(r);
    uint64_t planned = rsp__planned_mask(c);
    for (uint32_t i = 0; i < r->num_holds; i++) {
        h[i].has_state = false;
        h[i].generation = rsp__next_generation(c);
        rsp__slot *s = &c->slots[h[i].slot];
        rsp__writes_forget(c, s);
        /* Only a planned step's forward may be writing the slot: then the
         * zero waits for it (see commit). Admitted or staged steps run no
         * forward, so the zero goes out now and their plan sees zeros. */
        if (s->pins & planned)
            rsp__zero_pending(c, s, true);
        else
            RSP__MUST_OK(rsp__work_zero(w, h[i].slot)); /* reserved above; the list is frozen */
    }
    rsp__work_thaw(w);
    return RSP_OK;
}

rsp_status rsp__core_reset(rsp__core *c, rsp_rid rid, bool free, rsp__work *w, rsp_error *err)
{
    rsp__op_begin(c);
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "work is NULL");
    rsp__req *r = rsp__req_find(c, rid);
    if (!r)
        return RSP_OK; /* sent once per partition: unknown rid is a no-op */
    return reset_req(c, r, free, w, err);
}

rsp_status rsp__core_remove(rsp__core *c, rsp_rid rid, rsp__work *w, rsp_error *err)
{
    rsp__op_begin(c);
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "work is NULL");
    const uint32_t at = rsp__map_probe(&c->table, rid);
    const uint32_t rec = c->table.t[at].val;
    if (rec == RSP__MAP_EMPTY)
        return RSP_OK; /* like reset: an unknown rid is a no-op */
    rsp__req *r = &c->reqs[rec];
    rsp_status st = reset_req(c, r, true, w, err);
    if (st)
        return st;
    req_forget_at(c, r, at); /* reset_req leaves the rid table alone */
    return RSP_OK;
}

rsp_status rsp__core_release(rsp__core *c, rsp_rid rid, rsp_label_id label, rsp__work *w,
                             rsp_error *err)
{
    rsp__op_begin(c);
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "work is NULL");
    rsp_status st = rsp__check_label(label, c->num_labels, err);
    if (st != RSP_OK)
        return st;
    rsp__req *r = rsp__req_find(c, rid);
    rsp__hold *h = r ? rsp__hold_find(r, label) : NULL;
    if (!h)
        return RSP_OK; /* like remove: nothing held there is nothing to give back */
    st = rsp__xfer_check_req(c, r, label, "release", err);
    if (st)
        return st;
    if (rsp__work_reserve(w, 1, 1, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory releasing rid %" PRIu64, rid);
    st = rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = 1, .slots = 1}, err);
    if (st)
        return st;
    /* Pinned by a step in flight (its rows address the slot, or its forks
     * write into it): the holding goes now, the slot when the last such
     * step ends (rsp__hold_drop), exactly as for remove. */
    rsp__work_freeze(w); /* nothing below fails */
    rsp__hold_drop(c, r, (uint32_t)(h - rsp__req_holds(r)), w);
    rsp__work_thaw(w);
    return RSP_OK;
}

/* --- queries ------------------------------------------------------------- */

rsp_status rsp__core_holding(const rsp__core *c, rsp_rid rid, rsp_label_id label, rsp_holding *out,
                             rsp_error *err)
{
    rsp_status st = rsp__check_label(label, c->num_labels, err);
    if (st != RSP_OK)
        return st;
    const rsp__req *r = rsp__req_find(c, rid);
    if (!r)
        return rsp__fail(err, RSP_ENOREQ, "rid %" PRIu64 " does not exist", rid);
    const rsp__hold *h = rsp__hold_find_const(r, label);
    if (!h)
        return rsp__fail(err, RSP_ENOREQ, "rid %" PRIu64 " holds no slot under label \"%s\"", rid,
                         c->label_names[label]);
    if (out) {
        out->index = (int32_t)h->slot;
        out->has_state = h->has_state;
        out->generation = h->generation;
    }
    return RSP_OK;
}

bool rsp__core_has_request(const rsp__core *c, rsp_rid rid)
{
    return rsp__req_find(c, rid) != NULL;
}

rsp__slot_state rsp__core_slot_state(const rsp__core *c, uint32_t slot)
{
    if (slot >= c->layout.max_slots)
        return RSP__SLOT_SINK; /* out of range: not a slot anyone may use */
    return (rsp__slot_state)c->slots[slot].state;
}

/* One line per CORE field of the list: a field listed without one here
 * would read 0, which the random model test (its gauges against the
 * model's, through rsp__core_stats) and tests/api catch. */
void rsp__core_gauges_get(const rsp__core *c, rsp__core_gauges *out)
{
    memset(out, 0, sizeof *out); /* the padding too: the pool compares them whole */
    out->free_slots = c->free_top;
    out->held_slots = c->held;
    out->pending_release = c->pending;
    out->num_requests = c->num_requests;
    out->num_holdings = c->num_holdings;
    out->checkpoints_device = c->tiers[RSP_TIER_DEVICE].count;
    out->checkpoints_host = c->tiers[RSP_TIER_HOST].count;
    out->swapped_slots = c->swapped_slots;
    out->generation = c->generation;
    out->steps_in_flight = c->steps_used;
    out->num_labels = c->num_labels;
    out->holding_moves = c->holding_moves;
}

const uint32_t *rsp__core_label_holdings(const rsp__core *c)
{
    return c->label_holdings;
}

void rsp__core_stats(const rsp__core *c, rsp_stats *out)
{
    rsp__core_gauges g; /* where each gauge comes from: one place */
    rsp__core_gauges_get(c, &g);
    out->max_slots = c->layout.max_slots;
    out->usable_slots = c->layout.usable_slots;
#define COPY_CORE(bits, name) out->name = g.name;
#define COPY_OWNER(bits, name)
#define COPY_LAYOUT(bits, name)
#define COPY_ACTOR(bits, name)
#define COPY(bits, name, kind, source, help) COPY_##source(bits, name)
    RSP_STATS_FIELDS(COPY)
#undef COPY
#undef COPY_ACTOR
#undef COPY_LAYOUT
#undef COPY_OWNER
#undef COPY_CORE
}

bool rsp__core_ckpt_report_clean(const rsp__core *c)
{
    return !c->rep_dirty;
}

const rsp__ckpt_report *rsp__core_ckpt_report(const rsp__core *c)
{
    return &c->rep;
}

uint64_t rsp__core_free_hash(const rsp__core *c)
{
    return c->free_hash;
}

uint32_t rsp__core_free_order(const rsp__core *c, uint32_t *out, uint32_t cap)
{
    for (uint32_t i = 0; i < c->free_top && i < cap; i++)
        out[i] = i < c->num_pushed ? c->free_stack[c->num_pushed - 1 - i]
                                   : c->fresh + (i - c->num_pushed);
    return c->free_top;
}

/* The lingering pins of a committed record (c->same.ghost) go: no call other
 * than its same-declaration admit may see them (rsp__op_begin). O(pins). */
void rsp__ghost_clear(rsp__core *c)
{
    uint32_t rec = c->same.ghost;
    uint64_t bit = 1ull << rec;
    rsp__slot *slots = c->slots;
    const uint32_t *pinned = c->steps[rec].pinned;
    RSP__ASSERT(!c->steps[rec].used);
    for (uint32_t i = 0; i < c->same.ghost_pins; i++) {
        slots[pinned[i]].pins &= ~bit;
        slots[pinned[i]].writes &= ~bit;
    }
    c->same.ghost = RSP__NONE;
}
