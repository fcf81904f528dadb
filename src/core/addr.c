/*
 * Addressing and buffers (addr.h): the vectors of a plan, the buffers they
 * go to, and the stage. SPDX-License-Identifier: Apache-2.0
 */
#include "addr.h"

#include <string.h>

#include "util/mem.h"

rsp_status rsp__addr_reserve(rsp__addr *a, uint64_t entries, uint64_t gens)
{
    /* slots and has_state grow together; each keeps its own capacity, so a
     * failure between the two leaves both valid. */
    if (rsp__grow((void **)&a->slots, &a->cap_slots, entries, sizeof *a->slots) ||
        rsp__grow((void **)&a->has_state, &a->cap_has_state, entries, sizeof *a->has_state) ||
        rsp__grow((void **)&a->gens, &a->cap_gens, gens, sizeof *a->gens))
        return RSP_ENOMEM;
    return RSP_OK;
}

/* --- buffers ------------------------------------------------------------- */

uint32_t rsp__lease_find(const rsp__core *c, const rsp_lease *l, rsp_label_id label)
{
    for (uint32_t i = 0; i < c->num_bufs; i++) {
        const rsp__buf *b = &c->bufs[i];
        if (b->leased && !b->width && b->label == label && b->bucket_id == l->bucket_id &&
            b->lease_slot == l->lease_slot)
            return i;
    }
    return RSP__NONE;
}

rsp_status rsp__bufs_reserve(rsp__core *c, uint32_t more)
{
    return rsp__grow((void **)&c->bufs, &c->cap_bufs, (uint64_t)c->num_bufs + more,
                     sizeof *c->bufs);
}

void rsp__bufs_release(rsp__core *c, uint32_t rec)
{
    for (uint32_t i = 0; i < c->num_bufs; i++)
        if (c->bufs[i].owner == rec)
            c->bufs[i].owner = RSP__NONE;
}

uint32_t rsp__choose_buffers(rsp__core *c, const rsp_step *step, const uint32_t *lengths,
                             uint32_t freed)
{
    /* An existing one (leased key, or the lowest free buffer of the label's
     * eager ring), grown if too short, or a new one with the next id. */
    uint32_t next = c->num_bufs;
    for (uint32_t li = 0; li < c->num_plan_labels; li++) {
        rsp_label_id L = c->label_order[li];
        rsp__buf_pick *pk = &c->picks[li];
        pk->create = false;
        pk->capacity = 0;
        uint32_t id = RSP__NONE;
        if (step->has_lease) {
            id = rsp__lease_find(c, &step->lease, L);
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

void rsp__bind_and_upload(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec,
                          rsp__work *w)
{
    /* The work room (2 ops per label) was reserved and the list frozen, so
     * the appends below cannot fail (a frozen list that would grow trips
     * RSP__ASSERT): their statuses are dropped on purpose. */
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
            b->width = 0;
            RSP__MUST_OK(rsp__work_buffer(w, id, b->capacity));
        } else if (pk->capacity) {
            c->bufs[id].capacity = pk->capacity;
            RSP__MUST_OK(rsp__work_buffer(w, id, pk->capacity));
        }
        c->bufs[id].owner = rec;
        lp->buffer = id;
        RSP__MUST_OK(rsp__work_upload(w, id, lp->slot_indices, lp->has_state, lp->length));
    }
}

/* --- addressing ---------------------------------------------------------- */

/* Lay a's label plans out back to back (c->label_order), every entry the
 * pad target and false, every generation 0; pos / gpos get where each
 * label's vectors and generations start, index_of[L] label L's position. */
static void lay_out(const rsp__core *c, rsp__addr *a, const uint32_t *lengths, uint32_t *index_of,
                    uint32_t *pos, uint32_t *gpos)
{
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
        pos[li] = off;
        gpos[li] = goff;
        off += lp->length;
        goff += lp->num_rows;
    }
}

/* A staged row's has_state (rsp__inherited_flag): out of line, so the
 * live plan's row loop keeps its registers. */
__attribute__((noinline)) static bool staged_flag(const rsp__req *r, const rsp_step *step,
                                                  const rsp_row *row)
{
    return rsp__inherited_flag(r, step->pre_forks, step->num_pre_forks, row->fork_group,
                               row->label);
}

bool rsp__build(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec, bool staged,
                const uint32_t *lengths)
{
    bool took = false;
    uint32_t pos[RSP_MAX_LABELS], gpos[RSP_MAX_LABELS];
    uint32_t index_of[RSP_MAX_LABELS];
    lay_out(c, a, lengths, index_of, pos, gpos);
    /* Locals, not fields: the stores below would make the compiler reload
     * every field through c on each row. */
    rsp__steprec *s = &c->steps[rec];
    rsp__valid_row *valid_rows = s->valid_rows;
    uint32_t num_valid_rows = s->num_valid_rows;
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
    /* An earlier in-flight step that writes a row's slot: the row reads that
     * write (docs/semantics.md 9.1), so it has state whatever the holding's
     * committed flag says. */
    uint64_t earlier = rsp__earlier_mask(c, rec);
    bool all_has = true; /* every addressed holding's own flag (plan_all_true) */
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        uint32_t li = index_of[row->label];
        uint32_t at = pos[li]++;
        uint32_t gat = gpos[li]++;
        /* Not !rsp__row_addresses(row): gcc 12 -O3 compiles the negated
         * form into a longer loop body. */
        if (step->capture || row->padding || row->span <= 0)
            continue;
        uint32_t rh = RSP__NONE, hh = RSP__NONE;
        uint32_t *rec_hint = i < num_valid_rows ? &valid_rows[i].rec : &rh;
        uint32_t *hold_hint = i < num_valid_rows ? &valid_rows[i].hold : &hh;
        rsp__req *r;
        const rsp__hold *h = rsp__hold_lookup(c, row->rid, row->label, rec_hint, hold_hint, &r);
        if (!h)
            continue;
        uint32_t slot = h->slot;
        a_slots[at] = (int32_t)slot;
        rsp__slot *sl = &slots[slot];
        a_has[at] = (inherit ? staged_flag(r, step, row) : h->has_state) || (sl->writes & earlier);
        all_has &= h->has_state;
        a_gens[gat] = h->generation;
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
        p->at = at;
        p->gat = gat;
        if (sl->zero_pending) {
            /* Reset while an earlier planned step's forward may still write
             * it: this forward runs after that one and rewrites the slot
             * from zeros (has_state false), so it supersedes the pending
             * zero; a rollback of this step puts the zero back. */
            rsp__zero_pending(c, sl, false);
            sl->took_zero |= bit;
            took = true;
        }
    }
    s->num_prows = num_prows;
    s->num_pinned = num_pinned;
    if (!staged)
        s->same.plan_all_true = all_has;
    return took;
}

bool rsp__same_addressing(const rsp__core *c, const rsp__addr *live, const rsp__addr *stage,
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
        if (b->leased && rsp__lease_find(c, &step->lease, x->label) != y->buffer)
            return false;
        if (memcmp(x->slot_indices, y->slot_indices, x->length * sizeof *x->slot_indices) ||
            memcmp(x->has_state, y->has_state, x->length * sizeof *x->has_state))
            return false;
        /* The per-token tensors (spec.h): a stage may drop a per-token row
         * the live plan keeps, with equal vectors. */
        if (x->spec_width != y->spec_width ||
            (x->spec_width > 1 && memcmp(x->spec_indices, y->spec_indices,
                                         (size_t)x->length * x->spec_width * sizeof(int32_t))))
            return false;
    }
    return true;
}

/* --- the stage ----------------------------------------------------------- */

void rsp__stage_drop(rsp__core *c, rsp__stage_end why, rsp__stage_change *out)
{
    RSP__ASSERT(c->stage_active && why != RSP__STAGE_KEPT);
    /* The stage's step has no live plan yet, so its eager buffers are the
     * stage's own; promoted, they now hold that live plan. */
    if (why != RSP__STAGE_PROMOTED)
        rsp__bufs_release(c, c->stage_rec);
    c->stage_active = false;
    if (out) {
        out->ended = why;
        out->step_id = c->stage_step;
    }
}
