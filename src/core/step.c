/*
 * The step: validation, admit, rollback, commit, forks (SEMANTICS 4.1, 4.2,
 * 4.5, 4.6). SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core_impl.h"
#include "util/error.h"

/* A label id that no interned label can have: marks rids in the pair set. */
#define RID_MARK UINT32_MAX

static bool addresses(const rsp_row *row)
{
    return !row->padding && row->span > 0;
}

/* NULL arrays, list lengths and the lease. */
static rsp_status validate_arrays(const rsp__core *c, const rsp_step *step, rsp_error *err)
{
    if (!step)
        return rsp__fail(err, RSP_EINVAL, "step is NULL");
    if (step->num_rows && !step->rows)
        return rsp__fail(err, RSP_EINVAL, "step %" PRIu64 ": rows is NULL with num_rows = %" PRIu32,
                         step->step_id, step->num_rows);
    if (step->num_pre_forks && !step->pre_forks)
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": pre_forks is NULL with num_pre_forks = %" PRIu32,
                         step->step_id, step->num_pre_forks);
    if (step->num_post_forks && !step->post_forks)
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": post_forks is NULL with num_post_forks = %" PRIu32,
                         step->step_id, step->num_post_forks);
    if (step->num_pre_forks > RSP__MAX_FORKS || step->num_post_forks > RSP__MAX_FORKS)
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": %" PRIu32 " pre_forks and %" PRIu32
                         " post_forks: at most %u each (one per pair of labels)",
                         step->step_id, step->num_pre_forks, step->num_post_forks, RSP__MAX_FORKS);
    if (step->has_lease && step->lease.bucket_bs == 0)
        return rsp__fail(err, RSP_EINVAL, "step %" PRIu64 ": lease.bucket_bs = 0", step->step_id);
    if (step->has_lease && step->lease.bucket_bs > rsp__core_max_rows(c))
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": lease.bucket_bs = %" PRIu32 ": at most %" PRIu32
                         " (max(8192, 2 x max_slots): past that a bucket is only padding)",
                         step->step_id, step->lease.bucket_bs, rsp__core_max_rows(c));
    return RSP_OK;
}

static rsp_status validate_forks(rsp__core *c, const rsp_step *step, rsp_error *err)
{
    for (int k = 0; k < 2; k++) {
        const rsp_fork *f = k ? step->post_forks : step->pre_forks;
        uint32_t n = k ? step->num_post_forks : step->num_pre_forks;
        const char *what = k ? "post_forks" : "pre_forks";
        for (uint32_t i = 0; i < n; i++) {
            if (f[i].from >= c->num_labels)
                return rsp__fail(err, RSP_ENOLABEL,
                                 "step %" PRIu64 ": %s[%" PRIu32 "].from = %" PRIu32
                                 " is not an interned label",
                                 step->step_id, what, i, f[i].from);
            if (f[i].to >= c->num_labels)
                return rsp__fail(err, RSP_ENOLABEL,
                                 "step %" PRIu64 ": %s[%" PRIu32 "].to = %" PRIu32
                                 " is not an interned label",
                                 step->step_id, what, i, f[i].to);
        }
    }
    return RSP_OK;
}

rsp_status rsp__step_validate(rsp__core *c, const rsp_step *step, rsp_error *err)
{
    rsp_status st = validate_arrays(c, step, err);
    if (st)
        return st;
    uint32_t rows_of[RSP_MAX_LABELS] = {0};
    for (uint32_t i = 0; i < step->num_rows; i++) {
        rsp_label_id L = step->rows[i].label;
        if (L >= c->num_labels)
            return rsp__fail(err, RSP_ENOLABEL,
                             "step %" PRIu64 ": rows[%" PRIu32 "].label = %" PRIu32
                             " is not an interned label (%" PRIu32 " labels)",
                             step->step_id, i, L, c->num_labels);
        if (++rows_of[L] > rsp__core_max_rows(c))
            return rsp__fail(
                err, RSP_EINVAL,
                "step %" PRIu64 ": label \"%s\" has more than %" PRIu32
                " rows (max(8192, 2 x max_slots): every row with state addresses its own slot)",
                step->step_id, c->label_names[L], rsp__core_max_rows(c));
    }
    st = validate_forks(c, step, err);
    if (st)
        return st;
    /* Few rows: a pairwise scan is cheaper than the hash set. */
    if (step->num_rows <= 8) {
        for (uint32_t i = 1; i < step->num_rows; i++) {
            const rsp_row *row = &step->rows[i];
            if (!addresses(row))
                continue;
            for (uint32_t first = 0; first < i; first++)
                if (addresses(&step->rows[first]) && step->rows[first].rid == row->rid &&
                    step->rows[first].label == row->label)
                    return rsp__fail(err, RSP_EDUPROW,
                                     "step %" PRIu64 ": rows[%" PRIu32 "] repeats (rid %" PRIu64
                                     ", label \"%s\") of rows[%" PRIu32 "] with span > 0",
                                     step->step_id, i, row->rid, c->label_names[row->label], first);
        }
        return RSP_OK;
    }
    if (rsp__set_reset(c, step->num_rows))
        return rsp__fail(err, RSP_ENOMEM, "out of memory checking step %" PRIu64, step->step_id);
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (!addresses(row) || rsp__set_insert(c, row->rid, row->label))
            continue;
        uint32_t first = 0;
        while (first < i && !(addresses(&step->rows[first]) && step->rows[first].rid == row->rid &&
                              step->rows[first].label == row->label))
            first++;
        return rsp__fail(err, RSP_EDUPROW,
                         "step %" PRIu64 ": rows[%" PRIu32 "] repeats (rid %" PRIu64
                         ", label \"%s\") of rows[%" PRIu32 "] with span > 0",
                         step->step_id, i, row->rid, c->label_names[row->label], first);
    }
    return RSP_OK;
}

/* rsp__arow starts like rsp_row, so (rid, label, span) compare as 16 bytes
 * (no padding inside them). */
_Static_assert(offsetof(rsp_row, rid) == offsetof(rsp__arow, rid) &&
                   offsetof(rsp_row, label) == offsetof(rsp__arow, label) &&
                   offsetof(rsp_row, span) == offsetof(rsp__arow, span) &&
                   offsetof(rsp_row, span) + sizeof(int32_t) == 16 && offsetof(rsp_row, label) == 8,
               "rsp__arow must start like rsp_row");

/* Are step's rows the ones last validated for record s? */
static bool same_rows(const rsp__steprec *s, const rsp_step *step)
{
    if (s->num_arows != step->num_rows)
        return false;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *a = &step->rows[i];
        const rsp__arow *b = &s->arows[i];
        if (memcmp(a, b, 16) != 0 || a->padding != b->padding)
            return false;
    }
    return true;
}

rsp_status rsp__step_revalidate(rsp__core *c, const rsp_step *step, bool *same, rsp_error *err)
{
    *same = false;
    if (step && (!step->num_rows || step->rows)) {
        uint32_t rec = rsp__step_find(c, step->step_id);
        if (rec != RSP__NONE && same_rows(&c->steps[rec], step)) {
            *same = true;
            /* Rows validated before stay valid: labels are never removed.
             * The other checks are O(forks) and run again. */
            rsp_status st = validate_arrays(c, step, err);
            return st ? st : validate_forks(c, step, err);
        }
    }
    return rsp__step_validate(c, step, err);
}

uint32_t rsp__step_find(const rsp__core *c, uint64_t step_id)
{
    for (uint32_t i = 0; i < c->max_inflight; i++)
        if (c->steps[i].used && c->steps[i].step_id == step_id)
            return i;
    return RSP__NONE;
}

static rsp_status rids_push(rsp__core *c, rsp_rid rid)
{
    if (c->num_rids == c->cap_rids) {
        uint32_t n = c->cap_rids ? c->cap_rids * 2 : 64;
        rsp_rid *p = realloc(c->rids, (size_t)n * sizeof *p);
        if (!p)
            return RSP_ENOMEM;
        c->rids = p;
        uint32_t *q = realloc(c->rid_recs, (size_t)n * sizeof *q);
        if (!q)
            return RSP_ENOMEM;
        c->rid_recs = q;
        c->cap_rids = n;
    }
    c->rid_recs[c->num_rids] = RSP__NONE;
    c->rids[c->num_rids++] = rid;
    return RSP_OK;
}

/* Forking rids in first-appearance order. Uses the pair set with RID_MARK,
 * so rids without a record yet (admit) are found too; the caller reset the
 * set (rows entries may share it: their labels are real ids). */
static rsp_status collect_rids_in_set(rsp__core *c, const rsp_step *step)
{
    c->num_rids = 0;
    if (step->capture || (step->num_pre_forks == 0 && step->num_post_forks == 0))
        return RSP_OK;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (row->padding || !rsp__set_insert(c, row->rid, RID_MARK))
            continue;
        if (rids_push(c, row->rid))
            return RSP_ENOMEM;
    }
    return RSP_OK;
}

rsp_status rsp__collect_rids(rsp__core *c, const rsp_step *step)
{
    if (rsp__set_reset(c, step->num_rows))
        return RSP_ENOMEM;
    return collect_rids_in_set(c, step);
}

rsp_status rsp__collect_rids_for(rsp__core *c, const rsp_step *step, uint32_t rec, bool same)
{
    const rsp__steprec *s = &c->steps[rec];
    if (same && s->frids_ok && !step->capture && (step->num_pre_forks || step->num_post_forks)) {
        /* c->rids held these once, so it has room for them. */
        if (s->num_frids) {
            memcpy(c->rids, s->frids, s->num_frids * sizeof *c->rids);
            memcpy(c->rid_recs, s->frecs, s->num_frids * sizeof *c->rid_recs);
        }
        c->num_rids = s->num_frids;
        return RSP_OK;
    }
    return rsp__collect_rids(c, step);
}

/* Keep c->rids (collected from s's rows, with forks) in record s. Without
 * room the record simply keeps none. */
static void keep_rids(rsp__core *c, rsp__steprec *s)
{
    s->frids_ok = false;
    if (c->num_rids > s->cap_frids) {
        uint32_t n = c->cap_rids; /* >= num_rids */
        rsp_rid *p = realloc(s->frids, (size_t)n * sizeof *p);
        if (!p)
            return;
        s->frids = p;
        uint32_t *q = realloc(s->frecs, (size_t)n * sizeof *q);
        if (!q)
            return;
        s->frecs = q;
        s->cap_frids = n;
    }
    if (c->num_rids) { /* memcpy of NULL is undefined even for 0 bytes */
        memcpy(s->frids, c->rids, c->num_rids * sizeof *s->frids);
        memcpy(s->frecs, c->rid_recs, c->num_rids * sizeof *s->frecs);
    }
    s->num_frids = c->num_rids;
    s->frids_ok = true;
}

void rsp__apply_forks(rsp__core *c, const rsp_fork *forks, uint32_t n, uint64_t avoid, rsp__work *w)
{
    for (uint32_t k = 0; k < c->num_rids; k++) {
        rsp__req *r = rsp__rid_req(c, k);
        if (!r)
            continue;
        for (uint32_t i = 0; i < n; i++) {
            rsp__hold *from = rsp__hold_find(r, forks[i].from);
            rsp__hold *to = rsp__hold_find(r, forks[i].to);
            if (!from || !to)
                continue; /* no source: nothing happens (SEMANTICS 4.6) */
            if ((c->slots[from->slot].pins | c->slots[to->slot].pins) & avoid)
                continue; /* another planned step's forward may write it */
            if (from != to) {
                /* The caller reserved room; chains split into ordered COPYs.
                 * A source reset during a step in flight logically reads
                 * zeros (its zero is deferred until that forward is done):
                 * copy zeros, not the bytes that zero will wipe. */
                if (c->slots[from->slot].zero_pending)
                    (void)rsp__work_zero(w, to->slot);
                else
                    (void)rsp__work_copy(w, from->slot, to->slot);
                to->has_state = from->has_state;
            }
            to->generation = rsp__next_generation(c);
        }
    }
}

/* --- admit ---------------------------------------------------------------- */

/* Set markers beside the real label ids (< RSP_MAX_LABELS) in the pair set:
 * a rid counted as new (no record yet), a rid counted for a spill array. */
#define NEW_RID_MARK (UINT32_MAX - 1)
#define SPILL_MARK (UINT32_MAX - 2)

/* What an admit needs before it may change anything (count phase). */
typedef struct admit_need {
    uint32_t slots;   /* fresh (rid, label) holdings */
    uint32_t free;    /* free slots now */
    bool short_found; /* the first pair that does not fit: */
    rsp_rid rid;
    rsp_label_id label;
    uint32_t new_rids; /* non-padding rids without a record (implicit ingest) */
    uint32_t spills;   /* requests whose holdings outgrow the inline ones */
    uint32_t labels;   /* distinct labels a rid of this step may gain */
} admit_need;

/* Count (rid, label) as a fresh holding, once; r: its record (NULL: new). */
static void need_pair(rsp__core *c, admit_need *n, const rsp__req *r, rsp_rid rid,
                      rsp_label_id label)
{
    if (!rsp__set_insert(c, rid, label))
        return;
    if (++n->slots == n->free + 1) {
        n->short_found = true;
        n->rid = rid;
        n->label = label;
    }
    /* Gaining up to n->labels more holdings may spill the inline array:
     * reserve one spare per such request (an upper bound; spares are kept). */
    if (!(r && r->heap) && (r ? r->num_holds : 0) + n->labels > RSP__INLINE_HOLDINGS &&
        rsp__set_insert(c, rid, SPILL_MARK))
        n->spills++;
}

/* Would (c->rids[k], label) take a fresh slot? */
static void need_fork(rsp__core *c, admit_need *n, uint32_t k, rsp_label_id label)
{
    rsp__req *r = rsp__rid_req(c, k);
    if (r && rsp__hold_find(r, label))
        return;
    need_pair(c, n, r, c->rids[k], label);
}

/* Distinct labels a request may gain in this step: rows' and forks' targets. */
static uint32_t step_labels(const rsp_step *step)
{
    uint64_t seen = 0; /* RSP_MAX_LABELS == 64 */
    for (uint32_t i = 0; i < step->num_rows; i++)
        if (addresses(&step->rows[i]))
            seen |= 1ull << step->rows[i].label;
    for (uint32_t i = 0; i < step->num_pre_forks; i++)
        seen |= 1ull << step->pre_forks[i].to;
    for (uint32_t i = 0; i < step->num_post_forks; i++)
        seen |= 1ull << step->post_forks[i].to;
    return (uint32_t)__builtin_popcountll(seen);
}
_Static_assert(RSP_MAX_LABELS <= 64, "step_labels keeps labels in a 64-bit mask");

/* Give r a fresh holding of label (room reserved), journaled. */
static rsp__hold *take_fresh(rsp__core *c, uint32_t rec, rsp__req *r, rsp_label_id label)
{
    rsp__hold *h = rsp__hold_assign(c, r, label);
    rsp__steprec *s = &c->steps[rec];
    RSP__ASSERT(s->num_journal < s->cap_journal);
    s->journal[s->num_journal].rid = r->rid;
    s->journal[s->num_journal].label = label;
    s->journal[s->num_journal].slot = h->slot;
    s->num_journal++;
    return h;
}

/* Allocate (rid, label) if missing (journaled) and pin its slot; the hints
 * are updated to where the holding is. The rid has a record (ingest). */
static inline void take_hinted(rsp__core *c, uint32_t rec, rsp_rid rid, rsp_label_id label,
                               uint32_t *rec_hint, uint32_t *hold_hint)
{
    rsp__req *r;
    rsp__hold *h = rsp__hold_lookup(c, rid, label, rec_hint, hold_hint, &r);
    if (!h) {
        RSP__ASSERT(r != NULL);
        h = take_fresh(c, rec, r, label);
        *hold_hint = r->num_holds - 1;
    }
    rsp__pin(c, rec, h->slot);
}

/* take() for a forking rid c->rids[k]; its record exists (implicit ingest). */
static void take_rid(rsp__core *c, uint32_t rec, uint32_t k, rsp_label_id label)
{
    rsp__req *r = rsp__rid_req(c, k);
    RSP__ASSERT(r != NULL);
    rsp__hold *h = rsp__hold_find(r, label);
    if (!h)
        h = take_fresh(c, rec, r, label);
    rsp__pin(c, rec, h->slot);
}

/* The record an admit of step would use: its own when in flight, else the
 * lowest free one (RSP__NONE: all busy). */
static uint32_t admit_record(const rsp__core *c, uint64_t step_id)
{
    uint32_t rec = rsp__step_find(c, step_id);
    for (uint32_t i = 0; i < c->max_inflight && rec == RSP__NONE; i++)
        if (!c->steps[i].used)
            rec = i;
    return rec;
}

/* Step order and a free record, for a step not in flight yet. */
static rsp_status admit_check_new(const rsp__core *c, const rsp_step *step, uint32_t rec,
                                  rsp_error *err)
{
    if (c->any_admitted && step->step_id < c->last_admitted)
        return rsp__fail(err, RSP_EORDER,
                         "admit: step id %" PRIu64 " goes backwards (last admitted %" PRIu64 ")",
                         step->step_id, c->last_admitted);
    if (c->any_committed && step->step_id <= c->last_committed)
        return rsp__fail(err, RSP_EORDER,
                         "admit: step id %" PRIu64 " was already used by a committed step "
                         "(last committed %" PRIu64 "); step ids increase",
                         step->step_id, c->last_committed);
    if (rec == RSP__NONE)
        return rsp__fail(err, RSP_ECAPACITY,
                         "admit: step %" PRIu64 ": %" PRIu32
                         " steps are already in flight (max_inflight_steps); commit or "
                         "roll one back first",
                         step->step_id, c->max_inflight);
    return RSP_OK;
}

/* Keep step's rows in record s as the rows last validated (plan and commit
 * get the same rows again and skip the checks); the previous rows' hints
 * stay where the rows are unchanged (checked on use). */
static rsp_status keep_arows(rsp__steprec *s, const rsp_step *step, bool same)
{
    if (same)
        return RSP_OK;
    if (rsp__steprec_reserve_arows(s, step->num_rows))
        return RSP_ENOMEM;
    for (uint32_t i = s->num_arows; i < step->num_rows; i++)
        s->arows[i].rec = s->arows[i].hold = RSP__NONE;
    s->num_arows = step->num_rows;
    s->frids_ok = false; /* they were the rids of other rows */
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        rsp__arow *a = &s->arows[i];
        a->rid = row->rid;
        a->label = row->label;
        a->span = row->span;
        a->padding = row->padding;
    }
    return RSP_OK;
}

/* Count phase: fresh holdings, new rids and spills of a non-capture step;
 * fills c->rids (forking rids). Changes nothing but scratch and hints. */
static rsp_status admit_count(rsp__core *c, const rsp_step *step, uint32_t rec, bool same,
                              admit_need *n)
{
    rsp__steprec *s = &c->steps[rec];
    uint32_t nforks = step->num_pre_forks + step->num_post_forks;
    /* Pairs in the set: rows, rid marks (forks, new rids, spills), and
     * (rid, to) per fork. */
    uint64_t set_n = (uint64_t)step->num_rows * (4u + nforks);
    if (set_n > UINT32_MAX / 4 || rsp__set_reset(c, (uint32_t)set_n))
        return RSP_ENOMEM;
    n->labels = step_labels(step);
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (row->padding)
            continue;
        rsp__req *r;
        if (addresses(row)) {
            if (rsp__hold_lookup(c, row->rid, row->label, &s->arows[i].rec, &s->arows[i].hold, &r))
                continue; /* held already: the steady decode step */
        } else {
            r = rsp__req_find(c, row->rid);
            s->arows[i].rec = r ? (uint32_t)(r - c->reqs) : RSP__NONE;
        }
        if (!r && rsp__set_insert(c, row->rid, NEW_RID_MARK))
            n->new_rids++;
        if (addresses(row))
            need_pair(c, n, r, row->rid, row->label);
    }
    if (nforks && same && s->frids_ok)
        (void)rsp__collect_rids_for(c, step, rec, true);
    else if (collect_rids_in_set(c, step))
        return RSP_ENOMEM;
    for (uint32_t k = 0; k < c->num_rids; k++) {
        for (uint32_t i = 0; i < step->num_pre_forks; i++)
            need_fork(c, n, k, step->pre_forks[i].to);
        for (uint32_t i = 0; i < step->num_post_forks; i++)
            need_fork(c, n, k, step->post_forks[i].to);
    }
    return RSP_OK;
}

/* Apply phase: the implicit ingest, then every fresh holding, journaled and
 * pinned. Everything was reserved: nothing here can fail. */
static void admit_apply(rsp__core *c, const rsp_step *step, uint32_t rec, bool ingest)
{
    rsp__steprec *s = &c->steps[rec];
    uint32_t nforks = step->num_pre_forks + step->num_post_forks;
    /* Every non-padding row's rid exists from here on. */
    for (uint32_t i = 0; i < step->num_rows && ingest; i++) {
        rsp__arow *a = &s->arows[i];
        if (step->rows[i].padding ||
            (a->rec < c->num_recs && c->reqs[a->rec].live && c->reqs[a->rec].rid == a->rid))
            continue; /* found in the count phase (records are only added here) */
        rsp__req *r = rsp__req_get(c, a->rid); /* reserved: cannot fail */
        RSP__ASSERT(r != NULL);
        a->rec = (uint32_t)(r - c->reqs);
    }
    for (uint32_t i = 0; i < step->num_rows; i++)
        if (addresses(&step->rows[i]))
            take_hinted(c, rec, step->rows[i].rid, step->rows[i].label, &s->arows[i].rec,
                        &s->arows[i].hold);
    for (uint32_t k = 0; k < c->num_rids; k++) {
        for (uint32_t i = 0; i < step->num_pre_forks; i++)
            take_rid(c, rec, k, step->pre_forks[i].to);
        for (uint32_t i = 0; i < step->num_post_forks; i++)
            take_rid(c, rec, k, step->post_forks[i].to);
    }
    if (nforks)
        keep_rids(c, s); /* with the records the takes found */
}

rsp_status rsp__core_admit(rsp__core *c, const rsp_step *step, rsp_admit_outcome *out, rsp__work *w,
                           rsp_error *err)
{
    if (!out || !w)
        return rsp__fail(err, RSP_EINVAL, "admit: out or work is NULL");
    /* 1. Validate. When the record last validated these very rows (a
     *    steady decode loop), only the O(forks) checks run again. */
    rsp_status st = validate_arrays(c, step, err);
    if (st)
        return st;
    uint32_t rec = admit_record(c, step->step_id);
    bool fresh_rec = rec == RSP__NONE || !c->steps[rec].used;
    bool same = rec != RSP__NONE && same_rows(&c->steps[rec], step);
    st = same ? validate_forks(c, step, err) : rsp__step_validate(c, step, err);
    if (st == RSP_OK && fresh_rec)
        st = admit_check_new(c, step, rec, err);
    if (st)
        return st;
    rsp__steprec *s = &c->steps[rec];
    if (keep_arows(s, step, same))
        return rsp__fail(err, RSP_ENOMEM, "out of memory admitting step %" PRIu64, step->step_id);

    /* 2. Count: a full pool changes nothing at all. Capture rows are
     *    dummies: they hold, ingest and fork nothing. */
    admit_need n = {.free = c->free_top};
    c->num_rids = 0;
    if (!step->capture && admit_count(c, step, rec, same, &n))
        return rsp__fail(err, RSP_ENOMEM, "out of memory admitting step %" PRIu64, step->step_id);
    memset(out, 0, sizeof *out);
    out->usable = c->layout.usable_slots;
    if (n.slots > c->free_top) {
        out->ok = false;
        out->rid = n.rid;
        out->label = n.label;
        out->slots_short = n.slots - c->free_top;
        out->free = c->free_top;
        return RSP_OK;
    }

    /* 3. Reserve everything the apply phase consumes. */
    uint32_t nforks = step->num_pre_forks + step->num_post_forks;
    uint64_t pins = (uint64_t)step->num_rows + (uint64_t)c->num_rids * nforks;
    if (pins > c->layout.max_slots)
        pins = c->layout.max_slots;
    if (rsp__steprec_reserve(s, n.slots, (uint32_t)pins) || rsp__req_reserve(c, n.new_rids) ||
        rsp__hold_reserve_spills(c, n.spills))
        return rsp__fail(err, RSP_ENOMEM, "out of memory admitting step %" PRIu64, step->step_id);

    /* 4. Apply: nothing below fails. */
    if (fresh_rec) {
        s->used = true;
        s->capture = step->capture;
        s->phase = RSP__PHASE_ADMITTED;
        s->step_id = step->step_id;
        s->num_journal = 0;
        s->num_pinned = 0;
        if (!c->any_admitted || step->step_id > c->last_admitted)
            c->last_admitted = step->step_id;
        c->any_admitted = true;
    }
    if (!step->capture)
        admit_apply(c, step, rec, n.new_rids != 0);
    out->ok = true;
    out->free = c->free_top;
    return RSP_OK;
}

/* --- end of a step: rollback and commit ---------------------------------- */

/* Drop rec's pins, in pin order (deterministic). A slot whose last pin this
 * was and that was removed (pending) is zeroed and pushed. A slot with a
 * pending zero is zeroed once no other planned step pins it (no forward
 * may write it any more; an admitted step's later plan then sees zeros).
 * A rollback gives back the pending zeros its live plan took over. The
 * caller emitted the WAIT on this step's forward first. */
static void unpin_all(rsp__core *c, uint32_t rec, bool rollback, rsp__work *w)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    uint64_t others = rsp__planned_mask(c) & ~bit;
    for (uint32_t i = 0; i < s->num_fslots; i++)
        c->slots[s->fslots[i]].fork_pins &= ~bit;
    for (uint32_t i = 0; i < s->num_pinned; i++) {
        rsp__slot *sl = &c->slots[s->pinned[i]];
        if (sl->took_zero & bit) {
            sl->took_zero &= ~bit;
            if (rollback && sl->state == RSP__SLOT_HELD)
                sl->zero_pending = true; /* its forward's write does not count */
        }
        if (!(sl->pins & bit))
            continue;
        sl->pins &= ~bit;
        if (!sl->pins && sl->state == RSP__SLOT_PENDING) {
            RSP__ASSERT(c->pending > 0);
            c->pending--;
            rsp__slot_release(c, s->pinned[i], w);
        } else if (sl->zero_pending && sl->state == RSP__SLOT_HELD && !(sl->pins & others)) {
            sl->zero_pending = false;
            (void)rsp__work_zero(w, s->pinned[i]);
        }
    }
}

/* The step of record rec has ended (commit or rollback): its buffers go
 * back, and so does a stage built for it (the stage must never outlive its
 * step: the record is reused by the next admit). */
static void steprec_free(rsp__core *c, uint32_t rec)
{
    if (c->stage_active && c->stage_rec == rec)
        rsp__stage_drop(c);
    rsp__bufs_release(c, rec);
    rsp__steprec *s = &c->steps[rec];
    s->used = false;
    s->num_journal = 0;
    s->num_pinned = 0;
    s->num_prows = 0;
    s->num_fslots = 0;
}

rsp_status rsp__core_rollback(rsp__core *c, uint64_t step_id, const rsp_event *forward_done,
                              rsp__work *w, rsp_error *err)
{
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "rollback: work is NULL");
    uint32_t rec = rsp__step_find(c, step_id);
    if (rec == RSP__NONE)
        return RSP_OK; /* unknown or finished: nothing to undo */
    rsp__steprec *s = &c->steps[rec];
    if (rsp__work_reserve(w, 3, s->num_journal + s->num_pinned, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory rolling back step %" PRIu64, step_id);
    rsp_status st = rsp__core_reserve_ext(
        c, &(rsp__ext_need){.ops = 3, .slots = s->num_journal + s->num_pinned}, err);
    if (st)
        return st;
    /* Nothing below fails. A forward may have written these slots: zero
     * only after it is done. */
    rsp__work_freeze(w);
    if (forward_done)
        (void)rsp__work_wait(w, forward_done);
    uint64_t bit = 1ull << rec;
    /* Reverse allocation order, so the free stack ends as before the admit. */
    for (uint32_t j = s->num_journal; j-- > 0;) {
        const rsp__jent *e = &s->journal[j];
        rsp__req *r = rsp__req_find(c, e->rid);
        rsp__hold *h = r ? rsp__req_holds(r) : NULL;
        uint32_t i = 0;
        while (r && i < r->num_holds && !(h[i].label == e->label && h[i].slot == e->slot))
            i++;
        if (!r || i == r->num_holds) {
            /* Removed (or reset with free) meanwhile: the slot went pending.
             * If this step is its last pin, release it here, at its journal
             * position, so the free stack still ends as before the admit. */
            rsp__slot *sl = &c->slots[e->slot];
            if (sl->state == RSP__SLOT_PENDING && sl->pins == bit) {
                sl->pins = 0;
                RSP__ASSERT(c->pending > 0);
                c->pending--;
                rsp__slot_release(c, e->slot, w);
            }
            continue;
        }
        c->slots[e->slot].pins &= ~bit;
        rsp__hold_drop(c, r, i, w);
    }
    unpin_all(c, rec, true, w);
    steprec_free(c, rec);
    rsp__work_thaw(w);
    return RSP_OK;
}

rsp_status rsp__core_commit(rsp__core *c, const rsp_step *step, const rsp_event *forward_done,
                            rsp__work *w, rsp_error *err)
{
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "commit: work is NULL");
    bool same;
    rsp_status st = rsp__step_revalidate(c, step, &same, err);
    if (st)
        return st;
    uint32_t rec = rsp__step_find(c, step->step_id);
    if (rec == RSP__NONE)
        return rsp__fail(err, RSP_EORDER,
                         "commit: step %" PRIu64 " is not in flight (never admitted, or already "
                         "committed or rolled back)",
                         step->step_id);
    rsp__steprec *s = &c->steps[rec];
    /* The admit's declaration decides whether this is a capture step. */
    if (!s->capture && s->phase != RSP__PHASE_PLANNED)
        return rsp__fail(err, RSP_EORDER, "commit: step %" PRIu64 " was admitted but not planned",
                         step->step_id);
    bool capture = s->capture;
    if (!capture && rsp__collect_rids_for(c, step, rec, same))
        return rsp__fail(err, RSP_ENOMEM, "out of memory committing step %" PRIu64, step->step_id);
    uint64_t pairs = capture ? 0 : (uint64_t)c->num_rids * step->num_post_forks;
    if (pairs > UINT32_MAX / 4 ||
        rsp__work_reserve(w, 3 + 2 * (uint32_t)pairs, 2 * s->num_pinned + (uint32_t)pairs,
                          (uint32_t)pairs) ||
        (pairs && rsp__work_reserve_marks(w, c->layout.max_slots)))
        return rsp__fail(err, RSP_ENOMEM, "out of memory committing step %" PRIu64, step->step_id);
    st = rsp__core_reserve_ext(c,
                               &(rsp__ext_need){.ops = 3 + 2 * (uint32_t)pairs,
                                                .slots = 2 * s->num_pinned + (uint32_t)pairs,
                                                .pairs = (uint32_t)pairs},
                               err);
    if (st)
        return st;

    /* Nothing below fails. Everything below runs after the forward on the
     * device. */
    rsp__work_freeze(w);
    if (!c->any_committed || step->step_id > c->last_committed)
        c->last_committed = step->step_id;
    c->any_committed = true;
    if (forward_done)
        (void)rsp__work_wait(w, forward_done);
    if (capture) {
        /* Graph warm-up: wrote only the pad target; nothing to record. */
        unpin_all(c, rec, false, w);
        steprec_free(c, rec);
        rsp__work_thaw(w);
        return RSP_OK;
    }
    uint64_t bit = 1ull << rec;
    /* has_state for the rows this step's live plan addressed, if the
     * holding is still the one addressed (same generation): a reset, a fork
     * into it or a new assignment since then means this forward's write is
     * not the request's state. A row planned after a reset started from
     * zeros and its write counts. */
    for (uint32_t i = 0; i < s->num_prows; i++) {
        rsp__prow *p = &s->prows[i];
        rsp__req *r;
        rsp__hold *h = rsp__hold_lookup(c, p->rid, p->label, &p->rec, &p->hold, &r);
        if (h && h->generation == p->generation)
            h->has_state = true;
    }
    /* Reset during the step (before any later plan took the slot over):
     * zero after the forward, before post-forks read it, unless another
     * planned step's forward may still write it. */
    uint64_t others = rsp__planned_mask(c) & ~bit;
    for (uint32_t i = 0; i < s->num_pinned; i++) {
        rsp__slot *sl = &c->slots[s->pinned[i]];
        if (sl->zero_pending && (sl->pins & bit) && !(sl->pins & others) &&
            sl->state == RSP__SLOT_HELD) {
            sl->zero_pending = false;
            (void)rsp__work_zero(w, s->pinned[i]);
        }
    }
    /* Post-forks on the slots the plan recorded were checked against every
     * other planned step (check_pipeline, both orders). A holding that
     * appeared or was re-created after the plan may sit on a slot another
     * planned step's forward writes: such a fork is skipped. */
    rsp__apply_forks(c, step->post_forks, step->num_post_forks, others, w);
    unpin_all(c, rec, false, w);
    steprec_free(c, rec);
    rsp__work_thaw(w);
    return RSP_OK;
}
