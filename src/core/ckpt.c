/*
 * Checkpoints (ckpt.h): records, tiers, LRU, take / evict / demote, the
 * step hooks, and the operations of core.h (checkpoint, drop, pin, query).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "ckpt.h"

#include "ckpt_value.h"

#include <inttypes.h>

#include "util/error.h"
#include "util/mem.h"

static const char *const tier_names[RSP_TIER_COUNT_] = {"device", "host"};

/* --- records, LRU -------------------------------------------------------- */

static uint32_t rec_slot(const rsp__core *c, uint32_t i)
{
    return c->layout.max_slots + i;
}

static void lru_unlink(rsp__core *c, uint32_t i)
{
    rsp__ckrec *k = &c->ck[i];
    rsp__tier *t = &c->tiers[k->tier];
    if (k->prev != RSP__NONE)
        c->ck[k->prev].next = k->next;
    else
        t->head = k->next;
    if (k->next != RSP__NONE)
        c->ck[k->next].prev = k->prev;
    else
        t->tail = k->prev;
}

static void lru_push_head(rsp__core *c, uint32_t i)
{
    rsp__ckrec *k = &c->ck[i];
    rsp__tier *t = &c->tiers[k->tier];
    k->seq = ++c->ck_seq;
    k->prev = RSP__NONE;
    k->next = t->head;
    if (t->head != RSP__NONE)
        c->ck[t->head].prev = i;
    else
        t->tail = i;
    t->head = i;
}

/* The value policy's heap follows record i (ckpt_value.h): in it while
 * used and unpinned. Nothing under LRU. */
static void value_sync(rsp__core *c, uint32_t i)
{
    if (c->ck_value)
        rsp__ckv_sync(c, i, c->ck[i].used && !rsp__ck_pinned(&c->ck[i]));
}

/* A use: the clock moves, the record goes to the head of its LRU list. */
static void touch(rsp__core *c, uint32_t i)
{
    c->ck[i].last_use = ++c->ck_clock;
    lru_unlink(c, i);
    lru_push_head(c, i);
    value_sync(c, i);
}

/* Store key in record i (its slot was popped), at the head of its tier;
 * value and restores: 0 for a take, the victim's for a demotion. */
static void rec_set(rsp__core *c, uint32_t i, uint64_t key, rsp_tier tier, uint64_t last_use,
                    uint64_t value, uint32_t restores)
{
    rsp__ckrec *k = &c->ck[i];
    k->key = key;
    k->tier = (uint8_t)tier;
    k->used = true;
    k->step_pins = 0;
    k->user_pins = 0;
    k->last_use = last_use;
    k->value = value;
    k->restores = restores;
    lru_push_head(c, i);
    rsp__map_put(&c->keys, key, i); /* sized for every record: never grows */
    c->tiers[tier].count++;
    value_sync(c, i);
}

/* Forget record i: key, LRU place, and its slot back to its tier. */
static void rec_free(rsp__core *c, uint32_t i)
{
    rsp__ckrec *k = &c->ck[i];
    RSP__ASSERT(k->used && !rsp__ck_pinned(k) && c->tiers[k->tier].count > 0);
    rsp__map_del(&c->keys, k->key);
    lru_unlink(c, i);
    k->used = false;
    value_sync(c, i); /* out of the heap */
    c->tiers[k->tier].count--;
    rsp__tier_push(c, (rsp_tier)k->tier, rec_slot(c, i));
}

/* The record of tier t a take evicts for room: the least recently used
 * unpinned one (LRU), or the lowest score's (value); RSP__NONE. */
static uint32_t lru_victim(const rsp__core *c, rsp_tier t)
{
    if (c->ck_value)
        return rsp__ckv_victim(c, t);
    uint32_t i = c->tiers[t].tail;
    while (i != RSP__NONE && rsp__ck_pinned(&c->ck[i]))
        i = c->ck[i].prev;
    return i;
}

/* --- the report ---------------------------------------------------------- */

rsp_status rsp__ck_report_reserve(rsp__core *c, uint64_t changes, uint64_t evictions,
                                  uint64_t skips)
{
    rsp__ckpt_report *r = &c->rep;
    c->rep_dirty = true; /* the call may write it from here on */
    if (rsp__grow((void **)&c->rep_changes, &c->cap_rep_changes, r->num_changes + changes,
                  sizeof *c->rep_changes) ||
        rsp__grow((void **)&c->rep_evictions, &c->cap_rep_evictions, r->num_evictions + evictions,
                  sizeof *c->rep_evictions) ||
        rsp__grow((void **)&c->rep_skips, &c->cap_rep_skips, r->num_skips + skips,
                  sizeof *c->rep_skips))
        return RSP_ENOMEM;
    /* The arrays may have moved. */
    r->changes = c->rep_changes;
    r->evictions = c->rep_evictions;
    r->skips = c->rep_skips;
    return RSP_OK;
}

static void rep_change(rsp__core *c, uint64_t key, bool present, rsp_tier tier, uint32_t slot)
{
    RSP__ASSERT(c->rep.num_changes < c->cap_rep_changes);
    c->rep_changes[c->rep.num_changes++] = (rsp__ckpt_change){key, present, tier, slot};
}

static void rep_evict(rsp__core *c, uint64_t key, rsp_tier tier, bool demoted)
{
    RSP__ASSERT(c->rep.num_evictions < c->cap_rep_evictions);
    c->rep_evictions[c->rep.num_evictions++] = (rsp_checkpoint_event){key, tier, demoted};
}

/* Evict record i for room, dropped: gone from the key set. */
static void evict_drop(rsp__core *c, uint32_t i)
{
    uint64_t key = c->ck[i].key;
    rsp_tier tier = (rsp_tier)c->ck[i].tier;
    rec_free(c, i);
    rep_change(c, key, false, tier, 0);
    rep_evict(c, key, tier, false);
}

/* Demote device record i to the host tier (evicting host record hv
 * first when not RSP__NONE): copied, same key, its last use kept, at the
 * head of the host LRU list. */
static void demote(rsp__core *c, uint32_t i, uint32_t hv, rsp__work *w)
{
    if (hv != RSP__NONE)
        evict_drop(c, hv);
    uint64_t key = c->ck[i].key, last = c->ck[i].last_use, value = c->ck[i].value;
    uint32_t restores = c->ck[i].restores;
    uint32_t hs = rsp__tier_pop(c, RSP_TIER_HOST);
    RSP__MUST_OK(rsp__work_copy(w, rec_slot(c, i), hs)); /* reserved, frozen */
    rec_free(c, i);
    rec_set(c, hs - c->layout.max_slots, key, RSP_TIER_HOST, last, value, restores);
    rep_change(c, key, true, RSP_TIER_HOST, hs);
    rep_evict(c, key, RSP_TIER_DEVICE, true);
}

/* --- take ---------------------------------------------------------------- */

rsp_status rsp__ck_take_check(const rsp__core *c, uint64_t key, rsp_tier tier, rsp__take *t,
                              rsp_error *err)
{
    *t = (rsp__take){rsp__ck_find(c, key), RSP__NONE, false, RSP__NONE};
    const rsp__ckrec *old = t->replace != RSP__NONE ? &c->ck[t->replace] : NULL;
    if (old && rsp__ck_pinned(old))
        return rsp__fail(err, RSP_EPINNED,
                         "checkpoint key %" PRIu64 " exists and is pinned (%d steps restoring "
                         "from it, %" PRIu32 " caller pins): it cannot be replaced",
                         key, __builtin_popcountll(old->step_pins), old->user_pins);
    /* The replaced checkpoint's slot is freed first: it makes room. */
    if (c->tiers[tier].free_top + (old && old->tier == tier))
        return RSP_OK;
    t->victim = lru_victim(c, tier);
    if (t->victim == RSP__NONE)
        return rsp__fail(err, RSP_ECAPACITY,
                         "checkpoint key %" PRIu64 ": the %s tier is full (%" PRIu32
                         " slots) and none can be evicted: %" PRIu32 " pinned checkpoints, %" PRIu32
                         " slots of swapped-out requests",
                         key, tier_names[tier], c->tiers[tier].size, c->tiers[tier].count,
                         c->tiers[tier].size - c->tiers[tier].count);
    if (tier != RSP_TIER_DEVICE || !c->ck_demote || !c->tiers[RSP_TIER_HOST].size)
        return RSP_OK;
    if (c->tiers[RSP_TIER_HOST].free_top + (old && old->tier == RSP_TIER_HOST)) {
        t->demote = true;
        return RSP_OK;
    }
    /* No host room and nothing to evict there: the victim is dropped. */
    t->host_victim = lru_victim(c, RSP_TIER_HOST);
    t->demote = t->host_victim != RSP__NONE;
    return RSP_OK;
}

void rsp__ck_take_apply(rsp__core *c, uint64_t key, rsp_tier tier, const rsp__take *t, uint32_t src,
                        rsp__work *w)
{
    if (t->replace != RSP__NONE) {
        rep_change(c, key, false, (rsp_tier)c->ck[t->replace].tier, 0);
        rec_free(c, t->replace);
        c->rep.dropped++;
    }
    if (t->victim != RSP__NONE && t->demote)
        demote(c, t->victim, t->host_victim, w);
    else if (t->victim != RSP__NONE)
        evict_drop(c, t->victim);
    uint32_t slot = rsp__tier_pop(c, tier);
    /* A source whose zero is pending would read zeros; it cannot get here:
     * only a planned step pinning the slot defers its zero, and both
     * callers refuse (or skip) a take from a slot a planned step pins. So
     * no ZERO ever names a checkpoint slot (work.h). */
    RSP__ASSERT(!c->slots[src].zero_pending);
    RSP__MUST_OK(rsp__work_copy(w, src, slot)); /* reserved, in a frozen list */
    uint32_t i = slot - c->layout.max_slots;
    rec_set(c, i, key, tier, ++c->ck_clock, 0, 0);
    rep_change(c, key, true, tier, slot);
    c->rep.taken++;
}

uint32_t rsp__ck_room(const rsp__core *c, rsp_tier t)
{
    uint32_t n = c->tiers[t].free_top;
    for (uint32_t i = c->tiers[t].tail; i != RSP__NONE; i = c->ck[i].prev)
        n += !rsp__ck_pinned(&c->ck[i]);
    return n;
}

uint32_t rsp__ck_slot_for(rsp__core *c, rsp_tier t)
{
    if (!c->tiers[t].free_top)
        evict_drop(c, lru_victim(c, t));
    return rsp__tier_pop(c, t);
}

void rsp__ck_store(rsp__core *c, uint64_t key, rsp_tier tier, uint32_t slot)
{
    uint32_t old = rsp__ck_find(c, key);
    if (old != RSP__NONE) {
        rep_change(c, key, false, (rsp_tier)c->ck[old].tier, 0);
        rec_free(c, old);
        c->rep.dropped++;
    }
    rec_set(c, slot - c->layout.max_slots, key, tier, ++c->ck_clock, 0, 0);
    rep_change(c, key, true, tier, slot);
}

/* --- steps --------------------------------------------------------------- */

/* The holding of (rid, label), NULL when none. */
static rsp__hold *hold_of(const rsp__core *c, rsp_rid rid, rsp_label_id label)
{
    rsp__req *r = rsp__req_find(c, rid);
    return r ? rsp__hold_find(r, label) : NULL;
}

/* Step id of the lowest step record in mask (not 0). */
static uint64_t first_step(const rsp__core *c, uint64_t mask)
{
    return c->steps[__builtin_ctzll(mask)].step_id;
}

rsp_status rsp__ck_check_restores(const rsp__core *c, const rsp_step *step, rsp_error *err)
{
    for (uint32_t i = 0; i < step->num_restores; i++)
        if (rsp__ck_find(c, step->restores[i].key) == RSP__NONE)
            return rsp__fail(err, RSP_ENOKEY,
                             "step %" PRIu64 ": restores[%" PRIu32 "] (rid %" PRIu64
                             "): no checkpoint is stored under key %" PRIu64,
                             step->step_id, i, step->restores[i].rid, step->restores[i].key);
    return RSP_OK;
}

rsp_status rsp__ck_reserve_pins(rsp__steprec *s, uint32_t n)
{
    return rsp__grow((void **)&s->ckrecs, &s->cap_ckrecs, (uint64_t)s->num_ckrecs + n,
                     sizeof *s->ckrecs);
}

void rsp__ck_pin_restores(rsp__core *c, const rsp_step *step, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    for (uint32_t i = 0; i < step->num_restores; i++) {
        uint32_t k = rsp__ck_find(c, step->restores[i].key);
        RSP__ASSERT(k != RSP__NONE);
        if (c->ck[k].step_pins & bit)
            continue;
        c->ck[k].step_pins |= bit;
        value_sync(c, k); /* out of the heap */
        RSP__ASSERT(s->num_ckrecs < s->cap_ckrecs);
        s->ckrecs[s->num_ckrecs++] = k;
    }
}

void rsp__ck_unpin_step(rsp__core *c, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    for (uint32_t i = 0; i < s->num_ckrecs; i++) {
        c->ck[s->ckrecs[i]].step_pins &= ~(1ull << rec);
        value_sync(c, s->ckrecs[i]); /* back in the heap when no pin is left */
    }
    s->num_ckrecs = 0;
}

/* restores[i] (restore) or checkpoints[i] of step: RSP_EORDER when
 * another planned step in `others` pins its slot (a restore writes it
 * now, a take reads it at this step's commit, either under that step's
 * forward). */
static rsp_status check_busy(const rsp__core *c, const rsp_step *step, bool restore, uint32_t i,
                             uint64_t others, rsp_error *err)
{
    rsp_rid rid = restore ? step->restores[i].rid : step->checkpoints[i].rid;
    rsp_label_id label = restore ? step->restores[i].label : step->checkpoints[i].label;
    const rsp__hold *h = hold_of(c, rid, label);
    uint64_t busy = h ? c->slots[h->slot].pins & others : 0;
    if (!busy)
        return RSP_OK;
    return rsp__fail(err, RSP_EORDER,
                     "plan: step %" PRIu64 ": %s[%" PRIu32 "] (rid %" PRIu64 ", \"%s\") %s slot "
                     "%" PRIu32 ", which step %" PRIu64 " (planned, not committed) may still "
                     "write; commit step %" PRIu64 " first",
                     step->step_id, restore ? "restores" : "checkpoints", i, rid,
                     c->label_names[label], restore ? "writes" : "reads at this step's commit",
                     h->slot, first_step(c, busy), first_step(c, busy));
}

rsp_status rsp__ck_plan_check(rsp__core *c, const rsp_step *step, uint32_t rec, rsp_error *err)
{
    rsp_status st = rsp__ck_check_restores(c, step, err);
    uint64_t others = rsp__planned_mask(c) & ~(1ull << rec);
    for (uint32_t i = 0; st == RSP_OK && others && i < step->num_restores; i++)
        st = check_busy(c, step, true, i, others, err);
    for (uint32_t i = 0; st == RSP_OK && others && i < step->num_checkpoints; i++)
        st = check_busy(c, step, false, i, others, err);
    return st;
}

void rsp__ck_apply_restores(rsp__core *c, const rsp_step *step, uint32_t rec, rsp__work *w)
{
    c->rep_dirty = true; /* restored counts */
    rsp__ck_pin_restores(c, step, rec);
    for (uint32_t i = 0; i < step->num_restores; i++) {
        const rsp_restore *r = &step->restores[i];
        rsp__hold *h = hold_of(c, r->rid, r->label);
        uint32_t k = rsp__ck_find(c, r->key);
        if (!h)
            continue; /* a row its admit did not reserve: nothing to start */
        RSP__MUST_OK(rsp__work_copy(w, rec_slot(c, k), h->slot)); /* reserved, frozen */
        h->has_state = true;
        h->generation = rsp__next_generation(c);
        rsp__writes_forget(c, &c->slots[h->slot]);
        c->ck[k].restores += c->ck[k].restores != UINT32_MAX; /* scored by the touch */
        touch(c, k);
        c->rep.restored++;
        c->rep.restored_host += c->ck[k].tier == RSP_TIER_HOST;
        c->rep.value_restored += c->ck[k].value;
        c->rep.bytes_restored += c->layout.slot_bytes;
    }
}

void rsp__ck_mark_takes(rsp__core *c, const rsp_step *step, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    for (uint32_t i = 0; i < step->num_checkpoints; i++) {
        const rsp__hold *h = hold_of(c, step->checkpoints[i].rid, step->checkpoints[i].label);
        if (!h || (c->slots[h->slot].fork_pins & bit))
            continue;
        RSP__ASSERT(s->num_fslots < s->cap_fslots);
        c->slots[h->slot].fork_pins |= bit;
        s->fslots[s->num_fslots++] = h->slot;
    }
}

/* A declared take that was not done. */
static void rep_skip(rsp__core *c, uint64_t key, uint64_t step_id, rsp_status st)
{
    RSP__ASSERT(c->rep.num_skips < c->cap_rep_skips);
    c->rep_skips[c->rep.num_skips++] = (rsp__ckpt_skip){key, step_id, st};
}

/* Is h still the holding record rec's live plan addressed as (rid, label)
 * (same generation): the state its forward wrote? A reset (free = false)
 * during the step keeps the slot but moves the generation, and its zero
 * runs before the takes. */
static bool planned_holding(const rsp__core *c, uint32_t rec, rsp_rid rid, rsp_label_id label,
                            const rsp__hold *h)
{
    const rsp__steprec *s = &c->steps[rec];
    for (uint32_t i = 0; i < s->num_prows; i++)
        if (s->prows[i].rid == rid && s->prows[i].label == label)
            return s->prows[i].generation == h->generation;
    return false;
}

void rsp__ck_commit_takes(rsp__core *c, const rsp_step *step, uint32_t rec, uint64_t others,
                          rsp__work *w)
{
    for (uint32_t i = 0; i < step->num_checkpoints; i++) {
        const rsp_checkpoint_decl *d = &step->checkpoints[i];
        const rsp__hold *h = hold_of(c, d->rid, d->label);
        rsp__take t;
        rsp_status st = RSP_ENOREQ; /* removed, released or reset during the step */
        if (h && !planned_holding(c, rec, d->rid, d->label, h))
            h = NULL;
        if (h && (c->slots[h->slot].pins & others))
            st = RSP_EORDER; /* re-created after the plan, under another step's forward */
        else if (h)
            st = rsp__ck_take_check(c, d->key, d->tier, &t, NULL);
        if (st == RSP_OK)
            rsp__ck_take_apply(c, d->key, d->tier, &t, h->slot, w);
        else
            rep_skip(c, d->key, step->step_id, st);
    }
}

/* --- the operations (core.h) --------------------------------------------- */

/* The tier is one of rsp_tier and has slots (RSP_EINVAL). */
static rsp_status check_tier(const rsp__core *c, rsp_tier tier, rsp_error *err)
{
    if ((unsigned)tier >= RSP_TIER_COUNT_)
        return rsp__fail(err, RSP_EINVAL, "checkpoint tier %d: not a tier", (int)tier);
    if (!c->tiers[tier].size)
        return rsp__fail(err, RSP_EINVAL, "the %s tier has no slots (%s = 0)", tier_names[tier],
                         tier == RSP_TIER_DEVICE ? "max_checkpoints" : "max_host_checkpoints");
    return RSP_OK;
}

/* after_step names a committed step (0: now): the device queue already
 * holds that step's WAIT on its forward, so a COPY queued now reads what
 * the forward left (RSP_EORDER otherwise). */
static rsp_status check_after(const rsp__core *c, uint64_t after_step, rsp_error *err)
{
    if (!after_step)
        return RSP_OK;
    for (uint32_t i = 0; i < c->max_inflight; i++)
        if (c->steps[i].used && c->steps[i].step_id == after_step)
            return rsp__fail(err, RSP_EORDER,
                             "checkpoint after step %" PRIu64 ": the step is in flight; declare "
                             "the checkpoint in step %" PRIu64 ", or post after its commit",
                             after_step, after_step);
    if (!c->any_committed || after_step > c->last_committed)
        return rsp__fail(err, RSP_EORDER,
                         "checkpoint after step %" PRIu64 ": the step is not committed yet",
                         after_step);
    return RSP_OK;
}

/* The source holding of a take message (*out), after the argument checks. */
static rsp_status take_source(const rsp__core *c, rsp_rid rid, rsp_label_id label, rsp_tier tier,
                              uint64_t after_step, rsp__hold **out, rsp_error *err)
{
    rsp_status st = check_tier(c, tier, err);
    if (st == RSP_OK)
        st = rsp__check_label(label, c->num_labels, err);
    if (st != RSP_OK)
        return st;
    const rsp__req *r = rsp__req_find(c, rid);
    *out = r ? rsp__hold_find((rsp__req *)r, label) : NULL;
    if (!*out)
        return rsp__fail(err, RSP_ENOREQ,
                         "checkpoint: rid %" PRIu64 " holds no slot under \"%s\"%s", rid,
                         c->label_names[label], r && r->swap ? " (it is swapped out)" : "");
    st = check_after(c, after_step, err);
    uint64_t busy = c->slots[(*out)->slot].pins & rsp__planned_mask(c);
    if (st == RSP_OK && busy)
        return rsp__fail(err, RSP_EORDER,
                         "checkpoint: rid %" PRIu64 " \"%s\" (slot %" PRIu32 ") is addressed by "
                         "step %" PRIu64 " (planned, not committed), whose forward may still "
                         "write it; commit step %" PRIu64 " first, or declare the checkpoint in it",
                         rid, c->label_names[label], (*out)->slot, first_step(c, busy),
                         first_step(c, busy));
    return st;
}

rsp_status rsp__core_checkpoint(rsp__core *c, uint64_t key, rsp_rid rid, rsp_label_id label,
                                rsp_tier tier, uint64_t after_step, rsp__work *w, rsp_error *err)
{
    rsp__op_begin(c);
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "checkpoint: work is NULL");
    rsp__hold *h;
    rsp__take t;
    rsp_status st = take_source(c, rid, label, tier, after_step, &h, err);
    if (st == RSP_OK)
        st = rsp__ck_take_check(c, key, tier, &t, err);
    if (st != RSP_OK)
        return st;
    /* A demotion's COPY and the take's (two ops when the freed slot is
     * written right after it is read), two pairs. */
    if (rsp__work_reserve(w, 2, 0, 2) || rsp__work_reserve_marks(w, c->layout.num_ids) ||
        rsp__ck_report_reserve(c, 4, 2, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory taking checkpoint %" PRIu64, key);
    st = rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = 2, .pairs = 2}, err);
    if (st != RSP_OK)
        return st;
    rsp__work_freeze(w); /* nothing below fails */
    rsp__ck_take_apply(c, key, tier, &t, h->slot, w);
    rsp__work_thaw(w);
    return RSP_OK;
}

/* The record of key (RSP_ENOKEY). */
static rsp_status find_key(const rsp__core *c, uint64_t key, uint32_t *i, rsp_error *err)
{
    *i = rsp__ck_find(c, key);
    if (*i == RSP__NONE)
        return rsp__fail(err, RSP_ENOKEY, "no checkpoint is stored under key %" PRIu64, key);
    return RSP_OK;
}

rsp_status rsp__core_checkpoint_drop(rsp__core *c, uint64_t key, rsp_error *err)
{
    rsp__op_begin(c);
    uint32_t i;
    rsp_status st = find_key(c, key, &i, err);
    if (st != RSP_OK)
        return st;
    if (rsp__ck_pinned(&c->ck[i]))
        return rsp__fail(err, RSP_EPINNED,
                         "checkpoint key %" PRIu64 " is pinned (%d steps restoring from it, "
                         "%" PRIu32 " caller pins): it cannot be dropped",
                         key, __builtin_popcountll(c->ck[i].step_pins), c->ck[i].user_pins);
    if (rsp__ck_report_reserve(c, 1, 0, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory dropping checkpoint %" PRIu64, key);
    rep_change(c, key, false, (rsp_tier)c->ck[i].tier, 0);
    rec_free(c, i);
    c->rep.dropped++;
    return RSP_OK;
}

rsp_status rsp__core_checkpoint_pin(rsp__core *c, uint64_t key, bool pin, rsp_error *err)
{
    rsp__op_begin(c);
    uint32_t i;
    rsp_status st = find_key(c, key, &i, err);
    if (st != RSP_OK)
        return st;
    rsp__ckrec *k = &c->ck[i];
    if (!pin && !k->user_pins)
        return rsp__fail(err, RSP_EINVAL,
                         "checkpoint key %" PRIu64 " is not pinned by the caller: nothing to unpin",
                         key);
    if (pin && k->user_pins == UINT32_MAX)
        return rsp__fail(err, RSP_EINVAL, "checkpoint key %" PRIu64 ": too many pins", key);
    k->user_pins += pin ? 1u : (uint32_t)-1;
    if (pin)
        touch(c, i);
    else
        value_sync(c, i); /* back in the heap when no pin is left */
    return RSP_OK;
}

rsp_status rsp__core_checkpoint_query(const rsp__core *c, uint64_t key, rsp_checkpoint_info *out,
                                      rsp_error *err)
{
    uint32_t i;
    rsp_status st = find_key(c, key, &i, err);
    if (st != RSP_OK)
        return st;
    if (out) {
        const rsp__ckrec *k = &c->ck[i];
        out->key = key;
        out->tier = (rsp_tier)k->tier;
        out->slot = (int32_t)rec_slot(c, i);
        out->bytes = c->layout.slot_bytes;
        out->pins = (uint32_t)__builtin_popcountll(k->step_pins);
        out->user_pins = k->user_pins;
        out->last_use = k->last_use;
    }
    return RSP_OK;
}

rsp_status rsp__core_checkpoint_value(rsp__core *c, uint64_t key, uint64_t value, rsp_error *err)
{
    rsp__op_begin(c);
    uint32_t i;
    rsp_status st = find_key(c, key, &i, err);
    if (st != RSP_OK)
        return st;
    c->ck[i].value = value;
    value_sync(c, i); /* a new score, the same recency */
    return RSP_OK;
}
