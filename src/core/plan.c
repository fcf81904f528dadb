/*
 * Plans: live, staged, promoted; addressing (SEMANTICS 4.3, 4.4) and the
 * addressing buffers (eager rings, leased keys). SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core_impl.h"
#include "util/error.h"

void rsp__addr_fini(rsp__addr *a)
{
    free(a->slots);
    free(a->has_state);
    free(a->gens);
    memset(a, 0, sizeof *a);
}

static rsp_status addr_reserve(rsp__addr *a, uint64_t entries, uint64_t gens)
{
    if (entries > UINT32_MAX / 2 || gens > UINT32_MAX / 2)
        return RSP_ENOMEM;
    if (entries > a->cap_entries) {
        uint32_t n = a->cap_entries ? a->cap_entries : 64;
        while (n < entries)
            n *= 2;
        int32_t *s = realloc(a->slots, (size_t)n * sizeof *s);
        if (!s)
            return RSP_ENOMEM;
        a->slots = s;
        bool *h = realloc(a->has_state, (size_t)n * sizeof *h);
        if (!h)
            return RSP_ENOMEM;
        a->has_state = h;
        a->cap_entries = n;
    }
    if (gens > a->cap_gens) {
        uint32_t n = a->cap_gens ? a->cap_gens : 64;
        while (n < gens)
            n *= 2;
        uint64_t *g = realloc(a->gens, (size_t)n * sizeof *g);
        if (!g)
            return RSP_ENOMEM;
        a->gens = g;
        a->cap_gens = n;
    }
    return RSP_OK;
}

/* --- buffers ------------------------------------------------------------- */

static uint32_t lease_find(const rsp__core *c, const rsp_lease *l, rsp_label_id label)
{
    for (uint32_t i = 0; i < c->num_bufs; i++) {
        const rsp__buf *b = &c->bufs[i];
        if (b->leased && b->label == label && b->bucket_id == l->bucket_id &&
            b->lease_slot == l->lease_slot)
            return i;
    }
    return RSP__NONE;
}

static rsp_status bufs_reserve(rsp__core *c, uint32_t more)
{
    if (c->num_bufs + more <= c->cap_bufs)
        return RSP_OK;
    uint32_t n = c->cap_bufs ? c->cap_bufs : 16;
    while (n < c->num_bufs + more)
        n *= 2;
    rsp__buf *b = realloc(c->bufs, (size_t)n * sizeof *b);
    if (!b)
        return RSP_ENOMEM;
    c->bufs = b;
    c->cap_bufs = n;
    return RSP_OK;
}

void rsp__bufs_release(rsp__core *c, uint32_t rec)
{
    for (uint32_t i = 0; i < c->num_bufs; i++)
        if (c->bufs[i].owner == rec)
            c->bufs[i].owner = RSP__NONE;
}

void rsp__stage_drop(rsp__core *c)
{
    if (!c->stage_active)
        return;
    /* The stage's step has no live plan yet, so its eager buffers are the
     * stage's own. */
    rsp__bufs_release(c, c->stage_rec);
    c->stage_active = false;
}

/* Decide the buffer of each label of a plan (c->label_order, lengths),
 * before anything changes: an existing one (leased key, or the lowest free
 * buffer of the label's eager ring), grown if too short, or a new one with
 * the next id. A buffer owned by record `freed` counts as free: its stage
 * is dropped before the buffers are bound. Fills c->picks; returns how many
 * buffers it creates. O(labels x buffers). */
static uint32_t choose_buffers(rsp__core *c, const rsp_step *step, const uint32_t *lengths,
                               uint32_t freed)
{
    uint32_t next = c->num_bufs;
    for (uint32_t li = 0; li < c->num_plan_labels; li++) {
        rsp_label_id L = c->label_order[li];
        rsp__buf_pick *pk = &c->picks[li];
        pk->create = false;
        pk->capacity = 0;
        uint32_t id = RSP__NONE;
        if (step->has_lease) {
            id = lease_find(c, &step->lease, L);
        } else {
            /* Lowest free buffer of the label's ring: a buffer a step in
             * flight reads is never overwritten. */
            for (uint32_t i = 0; i < c->num_bufs && id == RSP__NONE; i++) {
                const rsp__buf *b = &c->bufs[i];
                if (!b->leased && b->label == L && (b->owner == RSP__NONE || b->owner == freed))
                    id = i;
            }
            if (id != RSP__NONE && c->bufs[id].capacity < lengths[li]) {
                uint32_t cap = c->bufs[id].capacity * 2;
                pk->capacity = cap > lengths[li] ? cap : lengths[li];
            }
        }
        if (id == RSP__NONE) {
            id = next++;
            pk->create = true;
            pk->capacity = lengths[li];
        }
        pk->id = id;
    }
    return next - c->num_bufs;
}

/* Bind each label's chosen buffer (c->picks) to record rec, creating or
 * growing it, then upload. The caller reserved buffer records and work
 * room (2 ops per label) and froze the list, so the appends below cannot
 * fail (a frozen list that would grow trips RSP__ASSERT): their statuses
 * are dropped on purpose. */
static void bind_and_upload(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec,
                            rsp__work *w)
{
    for (uint32_t li = 0; li < a->num_labels; li++) {
        rsp__label_plan *lp = &a->labels[li];
        const rsp__buf_pick *pk = &c->picks[li];
        uint32_t id = pk->id;
        if (pk->create) {
            RSP__ASSERT(id == c->num_bufs && c->num_bufs < c->cap_bufs);
            c->num_bufs++;
            rsp__buf *b = &c->bufs[id];
            b->leased = step->has_lease;
            b->label = lp->label;
            b->bucket_id = step->has_lease ? step->lease.bucket_id : 0;
            b->lease_slot = step->has_lease ? step->lease.lease_slot : 0;
            b->capacity = pk->capacity;
            (void)rsp__work_buffer(w, id, b->capacity);
        } else if (pk->capacity) {
            c->bufs[id].capacity = pk->capacity;
            (void)rsp__work_buffer(w, id, pk->capacity);
        }
        c->bufs[id].owner = rec;
        lp->buffer = id;
        (void)rsp__work_upload(w, id, lp->slot_indices, lp->has_state, lp->length);
    }
}

/* --- addressing ------------------------------------------------------------ */

/* The flag (rid, label) will have once the pre-forks before index k ran in
 * order (stage): follow the last fork into label back to its source. */
static bool inherited_flag(const rsp__req *r, const rsp_fork *f, uint32_t k, rsp_label_id label)
{
    for (;;) {
        uint32_t j = k;
        while (j-- > 0)
            if (f[j].to == label && f[j].from != label && rsp__hold_find_const(r, f[j].from))
                break;
        if (j == UINT32_MAX) {
            const rsp__hold *h = rsp__hold_find_const(r, label);
            return h && h->has_state;
        }
        label = f[j].from;
        k = j;
    }
}

/* Fill a's vectors per SEMANTICS 4.4 for the labels in c->label_order. */
static void build(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec, bool staged,
                  const uint32_t *lengths)
{
    uint32_t pos[RSP_MAX_LABELS], gpos[RSP_MAX_LABELS];
    uint32_t index_of[RSP_MAX_LABELS];
    uint32_t off = 0, goff = 0;
    a->num_labels = c->num_plan_labels;
    for (uint32_t li = 0; li < a->num_labels; li++) {
        rsp_label_id L = c->label_order[li];
        rsp__label_plan *lp = &a->labels[li];
        lp->label = L;
        lp->num_rows = c->label_rows[L];
        lp->length = lengths[li];
        lp->buffer = RSP__NONE;
        lp->slot_indices = a->slots + off;
        lp->has_state = a->has_state + off;
        lp->generations = a->gens + goff;
        /* Every entry past num_rows is the pad target, on every plan. */
        int32_t pad = c->layout.pad_index;
        for (uint32_t i = 0; i < lp->length; i++)
            a->slots[off + i] = pad;
        memset(a->has_state + off, 0, lp->length * sizeof *a->has_state);
        memset(a->gens + goff, 0, lp->num_rows * sizeof *a->gens);
        index_of[L] = li;
        off += lp->length;
        goff += lp->num_rows;
    }
    /* Locals, not fields: the stores below would make the compiler reload
     * every field through c on each row. */
    rsp__steprec *s = &c->steps[rec];
    rsp__arow *arows = s->arows;
    uint32_t num_arows = s->num_arows;
    rsp__prow *prows = s->prows;
    uint32_t num_prows = s->num_prows;
    uint32_t *pinned = s->pinned;
    uint32_t num_pinned = s->num_pinned;
    rsp__slot *slots = c->slots;
    int32_t *a_slots = a->slots;
    bool *a_has = a->has_state;
    uint64_t *a_gens = a->gens;
    uint64_t bit = 1ull << rec;
    bool inherit = staged && step->num_pre_forks;
    for (uint32_t li = 0; li < a->num_labels; li++) {
        pos[li] = (uint32_t)(a->labels[li].slot_indices - a->slots);
        gpos[li] = (uint32_t)(a->labels[li].generations - a->gens);
    }
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        uint32_t li = index_of[row->label];
        uint32_t at = pos[li]++;
        uint32_t gat = gpos[li]++;
        if (step->capture || row->padding || row->span <= 0)
            continue;
        uint32_t rh = RSP__NONE, hh = RSP__NONE;
        uint32_t *rec_hint = i < num_arows ? &arows[i].rec : &rh;
        uint32_t *hold_hint = i < num_arows ? &arows[i].hold : &hh;
        rsp__req *r;
        const rsp__hold *h = rsp__hold_lookup(c, row->rid, row->label, rec_hint, hold_hint, &r);
        if (!h)
            continue;
        uint32_t slot = h->slot;
        a_slots[at] = (int32_t)slot;
        a_has[at] = inherit ? inherited_flag(r, step->pre_forks, step->num_pre_forks, row->label)
                            : h->has_state;
        a_gens[gat] = h->generation;
        rsp__slot *sl = &slots[slot];
        if (!(sl->pins & bit)) { /* rsp__pin, on the locals */
            RSP__ASSERT(num_pinned < s->cap_pinned);
            sl->pins |= bit;
            pinned[num_pinned++] = slot;
        }
        if (staged)
            continue;
        rsp__prow *p = &prows[num_prows++];
        p->rid = row->rid;
        p->label = row->label;
        p->generation = h->generation;
        p->rec = *rec_hint;
        p->hold = *hold_hint;
        if (sl->zero_pending) {
            /* Reset while an earlier planned step's forward may still write
             * it: this forward runs after that one and rewrites the slot
             * from zeros (has_state false), so it supersedes the pending
             * zero; a rollback of this step puts the zero back. */
            sl->zero_pending = false;
            sl->took_zero |= bit;
        }
    }
    s->num_prows = num_prows;
    s->num_pinned = num_pinned;
}

/* Slot of (rid, label), RSP__NONE when the rid holds nothing there. */
static uint32_t slot_of(const rsp__core *c, rsp_rid rid, rsp_label_id label)
{
    const rsp__req *r = rsp__req_find(c, rid);
    const rsp__hold *h = r ? rsp__hold_find_const(r, label) : NULL;
    return h ? h->slot : RSP__NONE;
}

/* slot_of for the forking rid c->rids[k] (its record remembered). */
static uint32_t rid_slot_of(rsp__core *c, uint32_t k, rsp_label_id label)
{
    const rsp__req *r = rsp__rid_req(c, k);
    const rsp__hold *h = r ? rsp__hold_find_const(r, label) : NULL;
    return h ? h->slot : RSP__NONE;
}

/* Lowest record in mask (not 0). */
static uint32_t first_rec(uint64_t mask)
{
    uint32_t r = 0;
    while (!(mask & 1u))
        mask >>= 1, r++;
    return r;
}

/* SEMANTICS 5 with steps pipelined: a live plan's forks (pre-forks now,
 * post-forks at its commit) must not read or write a slot that another
 * planned, uncommitted step's forward or post-forks may touch, and its rows
 * must not address a slot another planned step's post-forks will touch:
 * neither is ordered after that step's forward (its forward_done is only
 * known at its commit). Refused with RSP_EORDER, nothing changed; the
 * caller commits that step and plans again. Uses c->rids. */
static rsp_status check_pipeline(rsp__core *c, const rsp_step *step, uint32_t rec, rsp_error *err)
{
    uint64_t others = rsp__planned_mask(c) & ~(1ull << rec);
    if (!others || step->capture)
        return RSP_OK;
    for (uint32_t k = 0; k < c->num_rids; k++)
        for (uint32_t i = 0; i < step->num_pre_forks + step->num_post_forks; i++) {
            bool pre = i < step->num_pre_forks;
            const rsp_fork *f =
                pre ? &step->pre_forks[i] : &step->post_forks[i - step->num_pre_forks];
            uint32_t from = rid_slot_of(c, k, f->from);
            uint32_t to = rid_slot_of(c, k, f->to);
            if (from == RSP__NONE || to == RSP__NONE)
                continue; /* nothing happens (SEMANTICS 4.6) */
            for (int e = 0; e < 2; e++) {
                uint32_t slot = e ? to : from;
                uint64_t busy = (c->slots[slot].pins | c->slots[slot].fork_pins) & others;
                if (!busy)
                    continue;
                uint64_t n = c->steps[first_rec(busy)].step_id;
                return rsp__fail(
                    err, RSP_EORDER,
                    "plan: step %" PRIu64 ": %s[%" PRIu32 "] (rid %" PRIu64
                    ", \"%s\" -> \"%s\") %s slot %" PRIu32 ", which step %" PRIu64
                    " (planned, not committed) may still write; commit step %" PRIu64 " first",
                    step->step_id, pre ? "pre_forks" : "post_forks",
                    pre ? i : i - step->num_pre_forks, c->rids[k], c->label_names[f->from],
                    c->label_names[f->to], e ? "writes" : "reads", slot, n, n);
            }
        }
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (row->padding || row->span <= 0)
            continue;
        uint32_t slot = slot_of(c, row->rid, row->label);
        if (slot == RSP__NONE || !(c->slots[slot].fork_pins & others))
            continue;
        uint64_t n = c->steps[first_rec(c->slots[slot].fork_pins & others)].step_id;
        return rsp__fail(
            err, RSP_EORDER,
            "plan: step %" PRIu64 ": rows[%" PRIu32 "] (rid %" PRIu64
            ", \"%s\") addresses slot %" PRIu32 ", which the post-forks of step %" PRIu64
            " (planned, not committed) will touch at its commit; commit step %" PRIu64 " first",
            step->step_id, i, row->rid, c->label_names[row->label], slot, n, n);
    }
    return RSP_OK;
}

/* Mark the slots this step's post-forks will read and write at its commit
 * (holdings as they are now), for check_pipeline of later plans. The
 * caller reserved fslots (2 per rid and post-fork). */
static void mark_post_forks(rsp__core *c, const rsp_step *step, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    s->num_fslots = 0;
    if (step->capture)
        return;
    for (uint32_t k = 0; k < c->num_rids; k++)
        for (uint32_t i = 0; i < step->num_post_forks; i++) {
            uint32_t from = rid_slot_of(c, k, step->post_forks[i].from);
            uint32_t to = rid_slot_of(c, k, step->post_forks[i].to);
            if (from == RSP__NONE || to == RSP__NONE)
                continue;
            for (int e = 0; e < 2; e++) {
                uint32_t slot = e ? to : from;
                if (c->slots[slot].fork_pins & bit)
                    continue;
                c->slots[slot].fork_pins |= bit;
                s->fslots[s->num_fslots++] = slot;
            }
        }
}

static bool same_addressing(const rsp__core *c, const rsp__addr *live, const rsp__addr *stage,
                            const rsp_step *step)
{
    if (live->num_labels != stage->num_labels)
        return false;
    for (uint32_t li = 0; li < live->num_labels; li++) {
        const rsp__label_plan *x = &live->labels[li], *y = &stage->labels[li];
        if (x->label != y->label || x->num_rows != y->num_rows || x->length != y->length)
            return false;
        const rsp__buf *b = &c->bufs[y->buffer];
        if (b->leased != step->has_lease)
            return false;
        if (b->leased && lease_find(c, &step->lease, x->label) != y->buffer)
            return false;
        if (memcmp(x->slot_indices, y->slot_indices, x->length * sizeof *x->slot_indices) ||
            memcmp(x->has_state, y->has_state, x->length * sizeof *x->has_state))
            return false;
    }
    return true;
}

rsp_status rsp__core_plan(rsp__core *c, const rsp_step *step, rsp__plan_out *out, rsp__work *w,
                          rsp_error *err)
{
    if (!out || !w)
        return rsp__fail(err, RSP_EINVAL, "plan: out or work is NULL");
    bool same;
    rsp_status st = rsp__step_revalidate(c, step, &same, err);
    if (st)
        return st;
    uint32_t rec = rsp__step_find(c, step->step_id);
    if (rec == RSP__NONE)
        return rsp__fail(err, RSP_EORDER,
                         "plan: step %" PRIu64 " is not in flight (not admitted, or finished)",
                         step->step_id);
    rsp__steprec *s = &c->steps[rec];
    if (s->phase == RSP__PHASE_PLANNED)
        return rsp__fail(err, RSP_EORDER, "plan: step %" PRIu64 " is already planned",
                         step->step_id);
    bool promote = false;
    if (step->preplan) {
        if (c->stage_active)
            return rsp__fail(err, RSP_ESTAGED,
                             "plan: a stage (step %" PRIu64 ") already exists; promote it or "
                             "clear_preplan first",
                             c->stage_step);
    } else if (c->stage_active && c->stage_step == step->step_id) {
        promote = true;
    }

    /* Labels with rows, first-appearance order. */
    c->num_plan_labels = 0;
    for (uint32_t L = 0; L < c->num_labels; L++)
        c->label_rows[L] = 0;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        rsp_label_id L = step->rows[i].label;
        if (c->label_rows[L]++ == 0)
            c->label_order[c->num_plan_labels++] = L;
    }
    uint32_t lengths[RSP_MAX_LABELS];
    uint64_t total = 0;
    bool drop_other_stage = false;
    for (uint32_t li = 0; li < c->num_plan_labels; li++) {
        rsp_label_id L = c->label_order[li];
        uint32_t rows = c->label_rows[L];
        if (step->has_lease) {
            uint32_t id = lease_find(c, &step->lease, L);
            if (id != RSP__NONE && rows > c->bufs[id].capacity) {
                return rsp__fail(err, RSP_ECAPACITY,
                                 "plan: step %" PRIu64 ": label \"%s\" has %" PRIu32
                                 " rows but its leased buffer (bucket %" PRIu32
                                 ", lease slot %" PRIu32 ") holds %" PRIu32,
                                 step->step_id, c->label_names[L], rows, step->lease.bucket_id,
                                 step->lease.lease_slot, c->bufs[id].capacity);
            }
            uint32_t owner = id == RSP__NONE ? RSP__NONE : c->bufs[id].owner;
            if (owner != RSP__NONE && owner != rec) {
                /* A captured graph reads this one buffer: it can hold one
                 * step's addressing at a time. A live plan takes it from
                 * another step's stage (the stage is dropped); anything
                 * else is refused, nothing changed. */
                if (!step->preplan && c->stage_active && c->stage_rec == owner) {
                    drop_other_stage = true;
                } else {
                    return rsp__fail(err, RSP_ECAPACITY,
                                     "plan: step %" PRIu64 ": the leased buffer (bucket %" PRIu32
                                     ", lease slot %" PRIu32 ", label \"%s\") holds the %s of "
                                     "step %" PRIu64 ", still in flight; use another lease slot",
                                     step->step_id, step->lease.bucket_id, step->lease.lease_slot,
                                     c->label_names[L],
                                     c->stage_active && c->stage_rec == owner ? "stage"
                                                                              : "live plan",
                                     c->steps[owner].step_id);
                }
            }
            if (id != RSP__NONE) {
                lengths[li] = c->bufs[id].capacity;
            } else {
                uint32_t len = rows;
                if (step->lease.bucket_bs > len)
                    len = step->lease.bucket_bs;
                if (c->graph_max_bs > len)
                    len = c->graph_max_bs;
                lengths[li] = len;
            }
        } else {
            lengths[li] = rows;
        }
        total += lengths[li];
    }
    rsp__addr *target = step->preplan ? &c->stage : &c->live;
    if (!step->capture && rsp__collect_rids_for(c, step, rec, same))
        return rsp__fail(err, RSP_ENOMEM, "out of memory planning step %" PRIu64, step->step_id);
    if (step->capture)
        c->num_rids = 0;
    if (!step->preplan) {
        st = check_pipeline(c, step, rec, err);
        if (st)
            return st;
    }
    uint64_t pairs = step->preplan ? 0 : (uint64_t)c->num_rids * step->num_pre_forks;
    uint64_t fslots = step->preplan ? 0 : (uint64_t)c->num_rids * step->num_post_forks * 2;
    if (fslots > c->layout.max_slots)
        fslots = c->layout.max_slots;
    /* A stage that goes before the buffers are bound (this step's, at a
     * promotion that does not match; another step's, whose leased buffer
     * this live plan takes) leaves its buffers free for this plan. */
    uint32_t freed = promote || drop_other_stage ? c->stage_rec : RSP__NONE;
    uint32_t new_bufs = choose_buffers(c, step, lengths, freed);
    uint32_t ops = 2 * (uint32_t)pairs + 2 * c->num_plan_labels + 1;
    if (pairs > UINT32_MAX / 4 || addr_reserve(target, total, step->num_rows) ||
        bufs_reserve(c, new_bufs) || rsp__steprec_reserve(s, 0, step->num_rows) ||
        rsp__steprec_reserve_plan(s, step->num_rows, (uint32_t)fslots) ||
        rsp__work_reserve(w, ops, (uint32_t)pairs, (uint32_t)pairs) ||
        (pairs && rsp__work_reserve_marks(w, c->layout.max_slots)))
        return rsp__fail(err, RSP_ENOMEM, "out of memory planning step %" PRIu64, step->step_id);
    rsp__ext_need need = {.ops = ops,
                          .slots = (uint32_t)pairs,
                          .pairs = (uint32_t)pairs,
                          .upload_entries = total,
                          .plan = true,
                          .plan_labels = c->num_plan_labels,
                          .plan_rows = step->num_rows,
                          .plan_entries = total};
    for (uint32_t li = 0; li < c->num_plan_labels; li++)
        if (c->picks[li].capacity) {
            need.buffer_id[need.num_buffers] = c->picks[li].id;
            need.buffer_cap[need.num_buffers++] = c->picks[li].capacity;
        }
    st = rsp__core_reserve_ext(c, &need, err);
    if (st)
        return st;

    /* Nothing below fails. */
    rsp__work_freeze(w);
    if (drop_other_stage)
        rsp__stage_drop(c);
    memset(out, 0, sizeof *out);
    out->step_id = step->step_id;
    if (step->preplan) {
        build(c, target, step, rec, true, lengths);
        bind_and_upload(c, target, step, rec, w);
        c->stage_active = true;
        c->stage_step = step->step_id;
        c->stage_rec = rec;
        out->staged = true;
    } else {
        /* Pre-forks run now, before the forward (also at promotion: the stage
         * deferred them). */
        rsp__apply_forks(c, step->pre_forks, step->num_pre_forks, 0, w);
        s->num_prows = 0;
        build(c, target, step, rec, false, lengths);
        mark_post_forks(c, step, rec);
        if (promote && same_addressing(c, target, &c->stage, step)) {
            /* The stage's uploaded buffers already hold exactly this. */
            for (uint32_t li = 0; li < target->num_labels; li++)
                target->labels[li].buffer = c->stage.labels[li].buffer;
            c->stage_active = false; /* its buffers now serve the live plan */
            out->promoted = true;
        } else {
            if (promote)
                rsp__stage_drop(c);
            bind_and_upload(c, target, step, rec, w);
        }
        s->phase = RSP__PHASE_PLANNED;
    }
    rsp__work_thaw(w);
    out->num_labels = target->num_labels;
    out->labels = target->labels;
    return RSP_OK;
}

bool rsp__core_stage(const rsp__core *c, uint64_t *step_id)
{
    if (c->stage_active && step_id)
        *step_id = c->stage_step;
    return c->stage_active;
}

rsp_status rsp__core_clear_preplan(rsp__core *c, rsp_error *err)
{
    (void)err;
    rsp__stage_drop(c);
    return RSP_OK;
}

rsp_status rsp__core_build_graph_buffers(rsp__core *c, uint32_t max_bs, uint32_t max_seq_len,
                                         rsp__work *w, rsp_error *err)
{
    (void)max_seq_len; /* recurrent state does not grow with the sequence */
    (void)w;
    if (max_bs == 0 || max_bs > rsp__core_max_rows(c))
        return rsp__fail(err, RSP_EINVAL,
                         "build_graph_buffers: max_bs = %" PRIu32 ": must be 1 .. %" PRIu32
                         " (max(8192, 2 x max_slots): past that a batch is only padding)",
                         max_bs, rsp__core_max_rows(c));
    /* Only the length of leased buffers created from now on; existing ones
     * never move (a captured graph baked their addresses in). */
    if (max_bs > c->graph_max_bs)
        c->graph_max_bs = max_bs;
    return RSP_OK;
}
