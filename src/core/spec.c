/*
 * Per-token states (spec.h): output slots held by a step record, their
 * index tensor, and the accept by relabel at commit.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "spec.h"

#include <inttypes.h>

#include "check.h"
#include "util/error.h"
#include "util/mem.h"

uint64_t rsp__spec_slots_of(const rsp_step *step)
{
    uint64_t n = 0;
    for (uint32_t i = 0; !step->capture && i < step->num_rows; i++)
        if (rsp__row_per_token(&step->rows[i]))
            n += (uint64_t)step->rows[i].span;
    return n;
}

/* The index of the next record row at or after *k that is row's (rid,
 * label) with its span, RSP__NONE if none (*k moves past it): a plan's or
 * re-admit's per-token rows are the first admit's in their order, some
 * perhaps dropped (a plan may name fewer rows than its admit). */
static uint32_t spec_match(const rsp__steprec *s, const rsp_row *row, uint32_t *k)
{
    while (*k < s->num_spec_rows) {
        const rsp__spec_row *sr = &s->spec_rows[(*k)++];
        if (sr->rid == row->rid && sr->label == row->label)
            return sr->span == (uint32_t)row->span ? *k - 1 : RSP__NONE;
    }
    return RSP__NONE;
}

/* The first per-token row of step that is not one of the record's, in
 * order: step->num_rows when there is none. */
static uint32_t first_unreserved(const rsp__steprec *s, const rsp_step *step)
{
    uint32_t k = 0;
    for (uint32_t i = 0; !s->capture && !step->capture && i < step->num_rows; i++)
        if (rsp__row_per_token(&step->rows[i]) && spec_match(s, &step->rows[i], &k) == RSP__NONE)
            return i;
    return step->num_rows;
}

/* 9.1: no fork of step writes a holding another in-flight step (in
 * others) accepts into. A fork's post_to mark would sit on the holding's
 * slot, which the accept replaces: a later row could then name the holding
 * before the fork's copy lands. A fork of group g applies to the rids whose
 * rows carry g (validated: one group per rid). O(rows x forks). */
static rsp_status check_fork_targets(const rsp__core *c, const rsp_step *step, uint64_t others,
                                     rsp_error *err)
{
    const uint32_t npre = step->num_pre_forks, n = npre + step->num_post_forks;
    for (uint32_t i = 0; n && !step->capture && i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        const rsp__req *r = row->padding ? NULL : rsp__req_find(c, row->rid);
        for (uint32_t j = 0; r && j < n; j++) {
            const rsp_fork *f = j < npre ? &step->pre_forks[j] : &step->post_forks[j - npre];
            const rsp__hold *h =
                rsp__fork_applies(f, row->fork_group) ? rsp__hold_find_const(r, f->to) : NULL;
            const uint64_t m = h ? c->slots[h->slot].spec_to & others : 0;
            if (!m)
                continue;
            const uint64_t by = c->steps[__builtin_ctzll(m)].step_id;
            return rsp__fail(err, RSP_EORDER,
                             "admit: step %" PRIu64 ": %s[%" PRIu32 "]: (rid %" PRIu64
                             ", label %s) takes per-token states accepted at the commit of "
                             "step %" PRIu64 " in flight; commit step %" PRIu64 " first",
                             step->step_id, j < npre ? "pre_forks" : "post_forks",
                             j < npre ? j : j - npre, row->rid, c->label_names[f->to], by, by);
        }
    }
    return RSP_OK;
}

/* 9.1: no row names and no fork writes a holding another in-flight step
 * accepts into. */
static rsp_status check_targets(const rsp__core *c, const rsp_step *step, uint32_t rec,
                                rsp_error *err)
{
    const uint64_t others = c->spec_mask & (rec == RSP__NONE ? ~0ull : ~(1ull << rec));
    rsp_status st = rsp__step_check_marks(c, step, others, RSP__MARK_SPEC, err);
    return st ? st : check_fork_targets(c, step, others, err);
}

rsp_status rsp__spec_admit_check(const rsp__core *c, const rsp_step *step, uint32_t rec, bool fresh,
                                 rsp_error *err)
{
    rsp_status st = c->spec_mask ? check_targets(c, step, rec, err) : RSP_OK;
    if (st != RSP_OK || fresh || rec == RSP__NONE)
        return st;
    uint32_t bad = first_unreserved(&c->steps[rec], step);
    if (bad == step->num_rows)
        return RSP_OK;
    return rsp__fail(err, RSP_EINVAL,
                     "admit: step %" PRIu64 " is in flight and its re-admit's rows[%" PRIu32
                     "] (rid %" PRIu64 ", span %" PRId32
                     ") asks for per-token states its first admit did not reserve; a re-admit "
                     "keeps or drops per-token rows, in order: roll the step back first",
                     step->step_id, bad, step->rows[bad].rid, step->rows[bad].span);
}

rsp_status rsp__spec_reserve(rsp__steprec *s, const rsp_step *step)
{
    uint32_t rows = 0;
    for (uint32_t i = 0; !step->capture && i < step->num_rows; i++)
        rows += rsp__row_per_token(&step->rows[i]);
    uint64_t slots = rsp__spec_slots_of(step);
    if (!rows)
        return RSP_OK;
    if (rsp__grow((void **)&s->spec_rows, &s->cap_spec_rows, rows, sizeof *s->spec_rows) ||
        rsp__grow((void **)&s->spec_slots, &s->cap_spec_slots, slots, sizeof *s->spec_slots))
        return RSP_ENOMEM;
    return RSP_OK;
}

void rsp__spec_apply(rsp__core *c, const rsp_step *step, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    s->num_spec_rows = s->num_spec_slots = 0;
    for (uint32_t i = 0; !step->capture && i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (!rsp__row_per_token(row))
            continue;
        rsp__req *r = rsp__req_find(c, row->rid);
        rsp__hold *h = r ? rsp__hold_find(r, row->label) : NULL;
        RSP__ASSERT(h != NULL); /* admit_apply took it */
        RSP__ASSERT(s->num_spec_rows < s->cap_spec_rows);
        rsp__spec_row *sr = &s->spec_rows[s->num_spec_rows++];
        *sr = (rsp__spec_row){.rid = row->rid,
                              .label = row->label,
                              .span = (uint32_t)row->span,
                              .first = s->num_spec_slots,
                              .hold_slot = h->slot};
        c->slots[h->slot].spec_to |= 1ull << rec;
        for (int32_t t = 0; t < row->span; t++) {
            uint32_t slot = rsp__slot_take(c);
            RSP__ASSERT(s->num_spec_slots < s->cap_spec_slots);
            s->spec_slots[s->num_spec_slots++] = slot;
            rsp__pin(c, rec, slot);
        }
    }
    if (s->num_spec_rows)
        c->spec_mask |= 1ull << rec;
}

rsp_status rsp__spec_plan_check(const rsp__core *c, const rsp_step *step, uint32_t rec,
                                rsp_error *err)
{
    uint32_t bad = first_unreserved(&c->steps[rec], step);
    if (bad == step->num_rows)
        return RSP_OK;
    return rsp__fail(err, RSP_EINVAL,
                     "plan: step %" PRIu64 ": rows[%" PRIu32 "] (rid %" PRIu64
                     ") asks for per-token states its admit did not reserve (span %" PRId32
                     "); a plan's per-token rows are its admit's, in order",
                     step->step_id, bad, step->rows[bad].rid, step->rows[bad].span);
}

/* Per label (c->label_order index) 1 + the largest per-token span. A
 * capture's rows count only when `dummies`: they reserve nothing, but
 * under a lease they declare the width its graph is captured with. Rows
 * that are their record's (same) and ask for none are not read again: a
 * plain decode step pays nothing for per-token states. */
static void label_widths(const rsp__core *c, const rsp_step *step, bool same, uint32_t rec,
                         bool dummies, uint32_t *width)
{
    uint32_t index_of[RSP_MAX_LABELS];
    for (uint32_t li = 0; li < c->num_plan_labels; li++) {
        index_of[c->label_order[li]] = li;
        width[li] = 1;
    }
    if (same && !c->steps[rec].valid_spec_asks)
        return;
    for (uint32_t i = 0; (dummies || !step->capture) && i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        uint32_t li = index_of[row->label];
        if (rsp__row_per_token(row) && 1u + (uint32_t)row->span > width[li])
            width[li] = 1u + (uint32_t)row->span;
    }
}

/* The index tensor buffer of leased key (l, label), RSP__NONE if none. */
static uint32_t tensor_find(const rsp__core *c, const rsp_lease *l, rsp_label_id label)
{
    for (uint32_t i = 0; i < c->num_bufs; i++) {
        const rsp__buf *b = &c->bufs[i];
        if (b->width && b->label == label && b->bucket_id == l->bucket_id &&
            b->lease_slot == l->lease_slot)
            return i;
    }
    return RSP__NONE;
}

/* The refusal of a per-token row wider than its leased key's tensor. */
static rsp_status too_narrow(const rsp__core *c, const rsp_step *step, rsp_label_id L,
                             uint32_t want, uint32_t width, rsp_error *err)
{
    return rsp__fail(err, RSP_ECAPACITY,
                     "plan: step %" PRIu64
                     ": label \"%s\" asks for an index tensor of width %" PRIu32
                     " but its lease (bucket %" PRIu32 ", lease slot %" PRIu32
                     ") is too small: its tensor has width %" PRIu32
                     ", fixed by the key's first per-token plan (capture the bucket with the "
                     "widest span, or use another lease slot)",
                     step->step_id, c->label_names[L], want, step->lease.bucket_id,
                     step->lease.lease_slot, width);
}

rsp_status rsp__spec_widths(rsp__core *c, const rsp_step *step, bool same, uint32_t rec,
                            const uint32_t *lengths, rsp_error *err)
{
    uint32_t want[RSP_MAX_LABELS];
    label_widths(c, step, same, rec, step->has_lease, want);
    for (uint32_t li = 0; li < c->num_plan_labels; li++) {
        rsp__buf_pick *pk = &c->picks[li];
        rsp_label_id L = c->label_order[li];
        pk->spec_width = want[li];
        pk->spec_id = RSP__NONE;
        pk->spec_create = false;
        uint32_t id = step->has_lease ? tensor_find(c, &step->lease, L) : RSP__NONE;
        if (id != RSP__NONE && want[li] > c->bufs[id].width)
            return too_narrow(c, step, L, want[li], c->bufs[id].width, err);
        if (id != RSP__NONE) {
            pk->spec_width = c->bufs[id].width; /* the graph's stride, whatever the rows ask */
            pk->spec_id = id;
        } else if (step->has_lease && want[li] > 1) {
            if ((uint64_t)lengths[li] * want[li] > UINT32_MAX)
                return rsp__fail(err, RSP_ECAPACITY,
                                 "plan: step %" PRIu64 ": label \"%s\": an index tensor of %" PRIu32
                                 " x %" PRIu32 " entries is more than a buffer holds",
                                 step->step_id, c->label_names[L], lengths[li], want[li]);
            pk->spec_create = true;
        }
    }
    return RSP_OK;
}

uint32_t rsp__spec_number(rsp__core *c, uint32_t next)
{
    uint32_t n = 0;
    for (uint32_t li = 0; li < c->num_plan_labels; li++)
        if (c->picks[li].spec_create)
            c->picks[li].spec_id = next + n++;
    return n;
}

rsp_status rsp__spec_plan_reserve(rsp__core *c, rsp__addr *a, const uint32_t *lengths,
                                  uint64_t *entries)
{
    uint64_t n = 0;
    for (uint32_t li = 0; li < c->num_plan_labels; li++) {
        uint32_t width = c->picks[li].spec_width;
        n += width > 1 ? (uint64_t)lengths[li] * width : 0;
    }
    *entries = n;
    if (n && rsp__grow((void **)&a->spec, &a->cap_spec, n, sizeof *a->spec))
        return RSP_ENOMEM;
    return RSP_OK;
}

/* The generation of the holding a per-token row addresses now (the
 * vectors were just built from it). */
static void note_generation(rsp__core *c, rsp__spec_row *sr)
{
    rsp__req *r = rsp__req_find(c, sr->rid);
    const rsp__hold *h = r ? rsp__hold_find(r, sr->label) : NULL;
    sr->planned = h != NULL;
    sr->plan_gen = h ? h->generation : 0;
}

void rsp__spec_fill(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec, bool live)
{
    rsp__steprec *s = &c->steps[rec];
    uint32_t width[RSP_MAX_LABELS], pos[RSP_MAX_LABELS], index_of[RSP_MAX_LABELS];
    for (uint32_t li = 0; li < a->num_labels; li++)
        width[li] = c->picks[li].spec_width;
    int32_t *at = a->spec;
    int32_t pad = c->layout.pad_index;
    for (uint32_t li = 0; li < a->num_labels; li++) {
        rsp__label_plan *lp = &a->labels[li];
        RSP__ASSERT(lp->label == c->label_order[li]);
        index_of[lp->label] = li;
        pos[li] = 0;
        lp->spec_width = width[li];
        lp->spec_buffer = RSP__NONE; /* rsp__spec_bind's */
        lp->spec_outputs = false;
        if (width[li] == 1) {
            lp->spec_indices = lp->slot_indices; /* column 0 alone: the vector itself */
            continue;
        }
        lp->spec_indices = at;
        for (uint32_t e = 0; e < lp->length; e++) {
            at[(size_t)e * width[li]] = lp->slot_indices[e];
            for (uint32_t t = 1; t < width[li]; t++)
                at[(size_t)e * width[li] + t] = pad;
        }
        at += (size_t)lp->length * width[li];
    }
    for (uint32_t k = 0; live && k < s->num_spec_rows; k++)
        s->spec_rows[k].planned = false; /* a row the plan dropped accepts nothing */
    uint32_t k = 0;
    /* Without reserved per-token rows every row is plain (the plan's
     * check refused any other), and the loop below would write nothing. */
    for (uint32_t i = 0; s->num_spec_rows && !step->capture && i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        uint32_t li = index_of[row->label];
        uint32_t e = pos[li]++;
        uint32_t m = rsp__row_per_token(row) ? spec_match(s, row, &k) : RSP__NONE;
        rsp__spec_row *sr = m == RSP__NONE ? NULL : &s->spec_rows[m];
        if (!sr)
            continue; /* rsp__spec_plan_check: only a plain row */
        a->labels[li].spec_outputs = true;
        int32_t *out = (int32_t *)a->labels[li].spec_indices + (size_t)e * width[li];
        for (uint32_t t = 0; t < sr->span; t++)
            out[1 + t] = (int32_t)s->spec_slots[sr->first + t];
        if (live)
            note_generation(c, sr);
    }
}

void rsp__spec_bind(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec, rsp__work *w)
{
    /* The room (2 ops per label, the buffer records) was reserved and the
     * list frozen: the appends cannot fail, their statuses are dropped. */
    for (uint32_t li = 0; li < a->num_labels; li++) {
        const rsp__buf_pick *pk = &c->picks[li];
        rsp__label_plan *lp = &a->labels[li];
        uint32_t id = pk->spec_id;
        if (id == RSP__NONE)
            continue;
        if (pk->spec_create) {
            RSP__ASSERT(id == c->num_bufs && c->num_bufs < c->cap_bufs);
            c->num_bufs++;
            c->bufs[id] = (rsp__buf){.leased = true,
                                     .label = lp->label,
                                     .bucket_id = step->lease.bucket_id,
                                     .lease_slot = step->lease.lease_slot,
                                     .capacity = lp->length,
                                     .width = pk->spec_width};
            RSP__MUST_OK(rsp__work_buffer(w, id, lp->length * pk->spec_width));
        }
        /* Bound with the key's vector buffer at every plan of the key, so
         * both always hold the same step's plan. */
        RSP__ASSERT(c->bufs[id].capacity == lp->length && c->bufs[lp->buffer].owner == rec);
        c->bufs[id].owner = rec;
        lp->spec_buffer = id;
        RSP__MUST_OK(rsp__work_upload(w, id, lp->spec_indices, NULL, lp->length * pk->spec_width));
    }
}

/* Let slot go at this step's end: pending under the record's pin, so
 * rsp__step_unpin zeroes and frees it after the WAIT. */
static void let_go(rsp__core *c, uint32_t slot)
{
    rsp__slot *sl = &c->slots[slot];
    RSP__ASSERT(sl->state == RSP__SLOT_HELD && sl->pins != 0 && c->held > 0);
    sl->state = RSP__SLOT_PENDING;
    c->held--;
    c->pending++;
}

/* The live plan row of (rid, label) in s at or after *pc, NULL if none.
 * Plan rows and per-token rows are both in declaration order, so a
 * commit's accepts walk the plan rows once (*pc moves past the match). */
static rsp__prow *find_prow(rsp__steprec *s, rsp_rid rid, rsp_label_id label, uint32_t *pc)
{
    for (uint32_t i = *pc; i < s->num_prows; i++)
        if (s->prows[i].rid == rid && s->prows[i].label == label) {
            *pc = i + 1;
            return &s->prows[i];
        }
    return NULL;
}

/* Accept a >= 1 tokens of sr into h: output slot a is the holding's
 * slot. The live plan row follows the new generation, so the takes and
 * the write record of this commit see the holding as this step's. */
static void accept(rsp__core *c, rsp__steprec *s, rsp__spec_row *sr, rsp__hold *h, uint32_t a,
                   uint32_t *pc)
{
    uint32_t old = h->slot;
    h->slot = s->spec_slots[sr->first + a - 1];
    h->has_state = true;
    h->generation = rsp__next_generation(c);
    rsp__prow *p = find_prow(s, sr->rid, sr->label, pc);
    if (p)
        p->generation = h->generation;
    let_go(c, old);
    for (uint32_t t = 0; t < sr->span; t++)
        if (t != a - 1)
            let_go(c, s->spec_slots[sr->first + t]);
}

void rsp__spec_commit(rsp__core *c, const rsp_step *step, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    uint32_t k = 0, pc = 0;
    for (uint32_t j = 0; j < s->num_spec_rows; j++)
        s->spec_rows[j].kept = s->spec_rows[j].done = false;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        uint32_t m = rsp__row_per_token(row) ? spec_match(s, row, &k) : RSP__NONE;
        rsp__spec_row *sr = m == RSP__NONE ? NULL : &s->spec_rows[m];
        if (!sr)
            continue;
        rsp__req *r = rsp__req_find(c, sr->rid);
        rsp__hold *h = r ? rsp__hold_find(r, sr->label) : NULL;
        bool mine = h && sr->planned && h->generation == sr->plan_gen;
        uint32_t a = row->accepted;
        sr->done = true;
        sr->kept = mine && a == 0;
        sr->kept_has = mine && h->has_state;
        if (mine && a >= 1)
            accept(c, s, sr, h, a, &pc);
        else
            for (uint32_t t = 0; t < sr->span; t++)
                let_go(c, s->spec_slots[sr->first + t]);
    }
    /* Rows a re-admit dropped: nothing of theirs is accepted. */
    for (uint32_t j = 0; j < s->num_spec_rows; j++)
        for (uint32_t t = 0; !s->spec_rows[j].done && t < s->spec_rows[j].span; t++)
            let_go(c, s->spec_slots[s->spec_rows[j].first + t]);
}

void rsp__spec_keep_flags(rsp__core *c, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    for (uint32_t k = 0; k < s->num_spec_rows; k++) {
        rsp__spec_row *sr = &s->spec_rows[k];
        rsp__req *r = sr->kept ? rsp__req_find(c, sr->rid) : NULL;
        rsp__hold *h = r ? rsp__hold_find(r, sr->label) : NULL;
        if (h)
            h->has_state = sr->kept_has; /* the forward wrote only output slots */
    }
}

void rsp__spec_rollback(rsp__core *c, uint32_t rec, rsp__work *w)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    for (uint32_t j = s->num_spec_slots; j-- > 0;) {
        uint32_t slot = s->spec_slots[j];
        rsp__slot *sl = &c->slots[slot];
        RSP__ASSERT(sl->state == RSP__SLOT_HELD && sl->pins == bit && c->held > 0);
        sl->pins = 0;
        sl->writes = 0;
        c->held--;
        rsp__slot_release(c, slot, w);
    }
    s->num_spec_slots = 0;
}

void rsp__spec_end(rsp__core *c, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    for (uint32_t k = 0; k < s->num_spec_rows; k++)
        c->slots[s->spec_rows[k].hold_slot].spec_to &= ~bit;
    s->num_spec_rows = s->num_spec_slots = 0;
    c->spec_mask &= ~bit;
}
