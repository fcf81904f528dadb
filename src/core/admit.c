/*
 * Admit (docs/semantics.md 4.1): validate, count, reserve, apply. A full pool
 * is an outcome counted before anything changes; only the apply phase changes
 * state, and it cannot fail. SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "fork.h"
#include "spec.h"
#include "util/error.h"
#include "util/mem.h"

/* --- 1. validate --------------------------------------------------------- */

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
static rsp_status check_new(const rsp__core *c, const rsp_step *step, uint32_t rec, rsp_error *err)
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

/* No non-padding row names a swapped-out rid (RSP_EORDER): its state is
 * in the host tier until swap_in. Looked for only while some request is
 * swapped out. O(rows) then. */
static rsp_status check_swapped(const rsp__core *c, const rsp_step *step, rsp_error *err)
{
    for (uint32_t i = 0; c->num_swapped && i < step->num_rows; i++) {
        const rsp__req *r = step->rows[i].padding ? NULL : rsp__req_find(c, step->rows[i].rid);
        if (r && r->swap)
            return rsp__fail(err, RSP_EORDER,
                             "admit: step %" PRIu64 ": rows[%" PRIu32 "]: rid %" PRIu64
                             " is swapped out; swap it in first",
                             step->step_id, i, step->rows[i].rid);
    }
    return RSP_OK;
}

/* The holding (rid, label) is exported or being imported: RSP_EPINNED
 * naming where the step names it. */
static rsp_status fail_xfer(const rsp__core *c, const rsp_step *step, rsp_rid rid,
                            rsp_label_id label, const char *where, uint32_t i, rsp_error *err)
{
    const rsp__req *r = rsp__req_find(c, rid);
    const rsp__hold *h = r ? rsp__hold_find_const(r, label) : NULL;
    if (!h || !rsp__xfer_held(c, h->slot))
        return RSP_OK;
    return rsp__fail(err, RSP_EPINNED,
                     "admit: step %" PRIu64 ": %s[%" PRIu32 "]: (rid %" PRIu64
                     ", label %s) is %s; no step may write it until %s",
                     step->step_id, where, i, rid, c->label_names[label],
                     c->slots[h->slot].importing ? "being imported" : "exported",
                     c->slots[h->slot].importing ? "its import commits" : "its exports are closed");
}

/* No row with span > 0 and no fork of its rid writes an exported holding
 * or one being imported. Looked for only while there is one (xfer_slots);
 * O(rows x forks) then. */
static rsp_status check_xfer(const rsp__core *c, const rsp_step *step, rsp_error *err)
{
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (row->padding)
            continue;
        rsp_status st = rsp__row_addresses(row)
                            ? fail_xfer(c, step, row->rid, row->label, "rows", i, err)
                            : RSP_OK;
        for (uint32_t f = 0; st == RSP_OK && f < step->num_pre_forks; f++)
            st = fail_xfer(c, step, row->rid, step->pre_forks[f].to, "pre_forks", f, err);
        for (uint32_t f = 0; st == RSP_OK && f < step->num_post_forks; f++)
            st = fail_xfer(c, step, row->rid, step->post_forks[f].to, "post_forks", f, err);
        if (st)
            return st;
    }
    return RSP_OK;
}

/* No row names a holding whose bytes an in-flight step's post-forks replace at
 * its commit (docs/semantics.md 9.1): what this step's forward would read or
 * write there is not the state the request will have. RSP_EORDER naming the
 * (rid, label) and the step, nothing changed. Looked for only while a step with
 * post-forks is in flight; O(rows) then. */
static rsp_status check_post_targets(const rsp__core *c, const rsp_step *step, uint32_t rec,
                                     rsp_error *err)
{
    const uint64_t others = c->post_mask & (rec == RSP__NONE ? ~0ull : ~(1ull << rec));
    return rsp__step_check_marks(c, step, others, RSP__MARK_POST, err);
}

/* The declaration, then the order of a new step. *rec: the record it uses;
 * *fresh: a record not in flight yet; *same: the rows are the record's
 * validated ones (a steady decode loop), so only the O(forks) checks run
 * again. */
static rsp_status admit_validate(rsp__core *c, const rsp_step *step, uint32_t *rec, bool *fresh,
                                 bool *same, rsp_error *err)
{
    *rec = RSP__NONE;
    *same = false;
    if (step && (!step->num_rows || step->rows)) { /* else validation says why */
        *rec = admit_record(c, step->step_id);
        *same = *rec != RSP__NONE && rsp__step_rows_same(c, *rec, step);
    }
    rsp_status st = rsp__step_validate(c, step, *same, err);
    if (st != RSP_OK)
        return st;
    *fresh = *rec == RSP__NONE || !c->steps[*rec].used;
    st = *fresh ? check_new(c, step, *rec, err) : RSP_OK;
    if (st == RSP_OK)
        st = check_swapped(c, step, err);
    if (st == RSP_OK && c->post_mask)
        st = check_post_targets(c, step, *rec, err);
    if (st == RSP_OK)
        st = rsp__spec_admit_check(c, step, *rec, *fresh, err);
    if (st == RSP_OK && c->xfer_slots)
        st = check_xfer(c, step, err);
    return st == RSP_OK && step->num_restores ? rsp__ck_check_restores(c, step, err) : st;
}

/* --- 2. count ------------------------------------------------------------ */

/* Set markers beside the real label ids (< RSP_MAX_LABELS) in the pair set:
 * a rid counted as new (no record yet), a rid counted for a spill array.
 * (fork.c marks forking rids with UINT32_MAX.) */
#define NEW_RID_MARK (UINT32_MAX - 1)
#define SPILL_MARK (UINT32_MAX - 2)

/* What an admit needs before it may change anything. */
typedef struct admit_need {
    uint32_t slots;   /* fresh (rid, label) holdings */
    uint32_t free;    /* free slots now */
    bool short_found; /* the first pair that does not fit: */
    rsp_rid rid;
    rsp_label_id label;
    uint32_t new_rids; /* non-padding rids without a record (implicit ingest) */
    uint32_t spills;   /* requests whose holdings outgrow the inline ones */
    uint32_t labels;   /* distinct labels a rid of this step may gain */
    uint32_t spec;     /* output slots of per-token rows (spec.h) */
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

/* Would the fork's target (c->rids[k], f->to) take a fresh slot? An
 * rsp__fork_each visitor (ctx: the admit_need). */
static bool need_fork(rsp__core *c, void *ctx, uint32_t k, const rsp_fork *f, uint32_t i, bool pre)
{
    (void)i;
    (void)pre;
    rsp__req *r = rsp__rid_req(c, k);
    if (!r || !rsp__hold_find(r, f->to))
        need_pair(c, ctx, r, c->rids[k], f->to);
    return true;
}

/* Distinct labels a request may gain in this step: rows' and forks' targets. */
static uint32_t step_labels(const rsp_step *step)
{
    uint64_t seen = 0; /* RSP_MAX_LABELS == 64 */
    for (uint32_t i = 0; i < step->num_rows; i++)
        if (rsp__row_addresses(&step->rows[i]))
            seen |= 1ull << step->rows[i].label;
    for (uint32_t i = 0; i < step->num_pre_forks; i++)
        seen |= 1ull << step->pre_forks[i].to;
    for (uint32_t i = 0; i < step->num_post_forks; i++)
        seen |= 1ull << step->post_forks[i].to;
    return (uint32_t)__builtin_popcountll(seen);
}
_Static_assert(RSP_MAX_LABELS <= 64, "step_labels keeps labels in a 64-bit mask");

/* The output slots of per-token rows, taken after the fresh holdings;
 * the first row that does not fit is the short one. Bounded by
 * RSP_SPEC_MAX_TOKENS per row, so the count fits. */
static void need_spec(const rsp_step *step, admit_need *n)
{
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (!rsp__row_per_token(row))
            continue;
        n->spec += (uint32_t)row->span;
        if (!n->short_found && n->slots + n->spec > n->free) {
            n->short_found = true;
            n->rid = row->rid;
            n->label = row->label;
        }
    }
}

/* Fresh holdings, new rids and spills of a non-capture step; fills c->rids
 * (forking rids). Changes nothing but scratch and hints. */
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
        if (rsp__row_addresses(row)) {
            if (rsp__hold_lookup(c, row->rid, row->label, &s->valid_rows[i].rec,
                                 &s->valid_rows[i].hold, &r))
                continue; /* held already: the steady decode step */
        } else {
            r = rsp__req_find(c, row->rid);
            s->valid_rows[i].rec = r ? (uint32_t)(r - c->reqs) : RSP__NONE;
        }
        if (!r && rsp__set_insert(c, row->rid, NEW_RID_MARK))
            n->new_rids++;
        if (rsp__row_addresses(row))
            need_pair(c, n, r, row->rid, row->label);
    }
    /* A grouped step collects its rids (and their groups) in this set
     * every time: the copy could fall back to a collect that resets the
     * set, forgetting the pairs counted above. */
    if (nforks && same && rsp__same_has(&c->same, &s->same, RSP__SAME_RIDS) &&
        !rsp__step_forks_grouped(step))
        RSP__MUST_OK(
            rsp__collect_rids_for(c, step, rec, true)); /* copies the kept rids: cannot fail */
    else if (rsp__collect_rids_in_set(c, step))
        return RSP_ENOMEM;
    RSP__MUST(rsp__fork_each(c, step, true, true, need_fork, n)); /* need_fork never stops it */
    if (!s->used)
        need_spec(step, n); /* a re-admit keeps the output slots it has */
    return RSP_OK;
}

/* --- 3. reserve ---------------------------------------------------------- */

/* Everything the apply phase consumes: the record's journal and pins,
 * request records and rid table room, spill arrays. RSP_ENOMEM: nothing a
 * caller can observe changed (what was reserved stays for the next call). */
static rsp_status admit_reserve(rsp__core *c, const rsp_step *step, rsp__steprec *s,
                                const admit_need *n)
{
    uint32_t nforks = step->num_pre_forks + step->num_post_forks;
    uint64_t pins = (uint64_t)step->num_rows + (uint64_t)c->num_rids * nforks + n->spec;
    if (pins > c->layout.max_slots)
        pins = c->layout.max_slots;
    uint64_t posts = (uint64_t)s->num_post_slots + (uint64_t)c->num_rids * step->num_post_forks;
    if (posts > c->layout.max_slots)
        posts = c->layout.max_slots;
    if (rsp__step_reserve(s, n->slots, (uint32_t)pins) || rsp__req_reserve(c, n->new_rids) ||
        (step->num_post_forks &&
         rsp__grow((void **)&s->post_slots, &s->cap_post_slots, posts, sizeof *s->post_slots)) ||
        rsp__hold_reserve_spills(c, n->spills) || rsp__ck_reserve_pins(s, step->num_restores) ||
        rsp__step_reserve_decl(s, step) || (n->spec && rsp__spec_reserve(s, step)))
        return RSP_ENOMEM;
    return RSP_OK;
}

/* --- 4. apply ------------------------------------------------------------ */

/* Allocate (rid, label) if missing (journaled) and pin its slot; the hints
 * are updated to where the holding is. The rid has a record (ingest). */
static inline void take_hinted(rsp__core *c, uint32_t rec, rsp_rid rid, rsp_label_id label,
                               uint32_t *rec_hint, uint32_t *hold_hint)
{
    rsp__req *r;
    rsp__hold *h = rsp__hold_lookup(c, rid, label, rec_hint, hold_hint, &r);
    if (!h) {
        RSP__ASSERT(r != NULL);
        h = rsp__step_take_fresh(c, rec, r, label);
        *hold_hint = r->num_holds - 1;
    }
    rsp__pin(c, rec, h->slot);
    c->slots[h->slot].writes |= 1ull << rec; /* a row with span > 0 */
}

/* Mark a post-fork's target slot for record rec: its bytes change at this
 * step's commit, so no later step may name it before then
 * (check_post_targets). Room in post_slots was reserved. */
static void mark_post(rsp__core *c, uint32_t rec, uint32_t slot)
{
    uint64_t bit = 1ull << rec;
    rsp__steprec *s = &c->steps[rec];
    c->post_mask |= bit;
    if (c->slots[slot].post_to & bit)
        return;
    c->slots[slot].post_to |= bit;
    RSP__ASSERT(s->num_post_slots < s->cap_post_slots);
    s->post_slots[s->num_post_slots++] = slot;
}

/* take_hinted for a fork's target (c->rids[k], f->to), marked when a
 * post-fork's; the rid's record exists (ingest). An rsp__fork_each visitor
 * (ctx: the record index). */
static bool take_fork(rsp__core *c, void *ctx, uint32_t k, const rsp_fork *f, uint32_t i, bool pre)
{
    (void)i;
    uint32_t rec = *(const uint32_t *)ctx;
    rsp__req *r = rsp__rid_req(c, k);
    RSP__ASSERT(r != NULL);
    rsp__hold *h = rsp__hold_find(r, f->to);
    if (!h)
        h = rsp__step_take_fresh(c, rec, r, f->to);
    rsp__pin(c, rec, h->slot);
    if (!pre)
        mark_post(c, rec, h->slot);
    return true;
}

/* Open record rec for a step not in flight yet. */
static void open_record(rsp__core *c, const rsp_step *step, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    s->used = true;
    c->steps_used++;
    s->capture = step->capture;
    s->phase = RSP__PHASE_ADMITTED;
    c->planned_bits &= ~(1ull << rec);
    s->step_id = step->step_id;
    s->num_journal = 0;
    s->num_pinned = 0;
    s->num_ckrecs = 0;
    s->plan_took = false;
    s->admit_seq = ++c->admit_clock;
    if (!c->any_admitted || step->step_id > c->last_admitted)
        c->last_admitted = step->step_id;
    c->any_admitted = true;
}

/* The implicit ingest, then every fresh holding, journaled and pinned, of a
 * non-capture step. Everything was reserved: nothing here can fail. */
static void admit_apply(rsp__core *c, const rsp_step *step, uint32_t rec, bool ingest)
{
    rsp__steprec *s = &c->steps[rec];
    uint32_t nforks = step->num_pre_forks + step->num_post_forks;
    /* Every non-padding row's rid exists from here on. */
    for (uint32_t i = 0; i < step->num_rows && ingest; i++) {
        rsp__valid_row *a = &s->valid_rows[i];
        if (step->rows[i].padding ||
            (a->rec < c->num_recs && c->reqs[a->rec].live && c->reqs[a->rec].rid == a->rid))
            continue; /* found in the count phase (records are only added here) */
        rsp__req *r = rsp__req_get(c, a->rid); /* reserved: cannot fail */
        RSP__ASSERT(r != NULL);
        a->rec = (uint32_t)(r - c->reqs);
    }
    for (uint32_t i = 0; i < step->num_rows; i++)
        if (rsp__row_addresses(&step->rows[i]))
            take_hinted(c, rec, step->rows[i].rid, step->rows[i].label, &s->valid_rows[i].rec,
                        &s->valid_rows[i].hold);
    s->same.row_pins = s->num_pinned; /* the rows' pins come first (admit_same) */
    RSP__MUST(rsp__fork_each(c, step, true, true, take_fork, &rec)); /* take_fork never stops it */
    if (nforks)
        rsp__keep_rids(c, s); /* with the records the takes found; never fails */
}

/* The same declaration (rows and step-wide forks) as this record's last
 * admit, whose pins same.h still holds (ADMIT: no holding appeared or went
 * since, nor a request; a fork or a reset moves generations and has_state,
 * which an admit does not read): every (rid, label) of the rows and fork
 * targets is held by the slot that admit pinned, every rid has its
 * record, nothing is fresh. So the admit is: open the record and pin
 * those slots again, in the same order (design.md "Same declaration"). */
static bool admit_is_same(rsp__core *c, const rsp_step *step, rsp__steprec *s, bool fresh,
                          bool same)
{
    return fresh && same && !step->capture && !step->num_restores && !step->num_checkpoints &&
           rsp__same_has(&c->same, &s->same, RSP__SAME_ADMIT) && rsp__fork_kept(c, s, step) &&
           !s->valid_spec_asks; /* output slots are new at every admit */
}

/* Keep what admit_is_same compares and admit_same repeats, after a fresh
 * admit of record s (plain or with step-wide forks) kept its declaration
 * (rsp__step_keep_decl: the forks compared are its dforks). */
static void admit_keep(rsp__core *c, const rsp_step *step, rsp__steprec *s, bool fresh)
{
    rsp__same *m = &s->same;
    /* What it kept was its last admit's (PAIRS: resolved for those forks). */
    rsp__same_drop(m, RSP__SAME_FORKS | RSP__SAME_ADMIT | RSP__SAME_PAIRS);
    if (!fresh || step->capture || rsp__step_forks_grouped(step))
        return;
    m->admit_pins = s->num_pinned;
    rsp__same_keep(&c->same, m, RSP__SAME_FORKS | RSP__SAME_ADMIT);
}

static void admit_same(rsp__core *c, const rsp_step *step, uint32_t rec, rsp_admit_outcome *out)
{
    open_record(c, step, rec);
    rsp__steprec *s = &c->steps[rec];
    const rsp__same *m = &s->same;
    RSP__ASSERT(m->admit_pins <= s->cap_pinned);
    if (rsp__same_adopt(&c->same, rec, m->admit_pins)) {
        c->fast.adopted++; /* its commit left exactly these pins set */
    } else {
        if (c->same.ghost != RSP__NONE)
            rsp__ghost_clear(c);
        uint64_t bit = 1ull << rec;
        rsp__slot *slots = c->slots;
        const uint32_t *pinned = s->pinned;
        for (uint32_t i = 0; i < m->admit_pins; i++)
            slots[pinned[i]].pins |= bit; /* distinct slots, none pinned by rec yet */
        for (uint32_t i = 0; i < m->row_pins; i++)
            slots[pinned[i]].writes |= bit; /* the rows' slots (admit_apply) */
    }
    /* The post-fork targets, marked again (their commit cleared them). */
    for (uint32_t i = 0; i < s->num_post_slots; i++)
        c->slots[s->post_slots[i]].post_to |= 1ull << rec;
    if (s->num_post_slots)
        c->post_mask |= 1ull << rec;
    s->num_pinned = m->admit_pins;
    /* The declaration kept by the last admit (its forks: the same),
     * without the takes and restores this path never has. */
    s->num_dtakes = s->num_drest = 0;
    c->num_rids = 0;
    c->fast.admits++;
    memset(out, 0, sizeof *out);
    out->usable = c->layout.usable_slots;
    out->ok = true;
    out->free = c->free_top;
}

/* The admitted rows of a record that a re-admit of other rows replaces
 * (rsp__step_keep_rows) before it knows whether it fits: a refused admit
 * changes nothing, and the commit names the rows admitted (docs/semantics.md
 * 9.2). Only a re-admit with other rows saves them. */
typedef struct saved_rows {
    bool on;
    rsp_row *rows;
    uint32_t n;
} saved_rows;

static rsp_status rows_save(const rsp__steprec *s, bool fresh, bool same, saved_rows *k)
{
    *k = (saved_rows){false, NULL, 0};
    if (fresh || same)
        return RSP_OK;
    k->on = true;
    k->n = s->num_valid_rows;
    if (!k->n)
        return RSP_OK; /* no rows to keep: put back as none */
    k->rows = malloc((size_t)k->n * sizeof *k->rows);
    if (!k->rows)
        return RSP_ENOMEM;
    memcpy(k->rows, s->raw, (size_t)k->n * sizeof *k->rows);
    return RSP_OK;
}

/* Put them back (the arrays have room for them: they held them). */
static void rows_restore(rsp__core *c, uint32_t rec, const saved_rows *k)
{
    rsp_step back = {.rows = k->rows, .num_rows = k->n};
    RSP__MUST_OK(rsp__step_keep_rows(c, rec, &back, false));
    rsp__same_drop(&c->steps[rec].same, RSP__SAME_RIDS);
}

/* Count, reserve, apply: the general path of an admit whose record holds
 * its rows (rsp__step_keep_rows). A full pool: out->ok false, nothing
 * changed. */
static rsp_status admit_general(rsp__core *c, const rsp_step *step, uint32_t rec, bool fresh,
                                bool same, rsp_admit_outcome *out, rsp_error *err)
{
    rsp__steprec *s = &c->steps[rec];
    /* A full pool changes nothing at all. Capture rows are dummies: they
     * hold, ingest and fork nothing. */
    admit_need n = {.free = c->free_top};
    c->num_rids = 0;
    if (!step->capture && admit_count(c, step, rec, same, &n))
        return rsp__fail(err, RSP_ENOMEM, "out of memory admitting step %" PRIu64, step->step_id);
    memset(out, 0, sizeof *out);
    out->usable = c->layout.usable_slots;
    if (n.slots + n.spec > c->free_top) {
        out->ok = false;
        out->rid = n.rid;
        out->label = n.label;
        out->slots_short = n.slots + n.spec - c->free_top;
        out->free = c->free_top;
        return RSP_OK;
    }

    if (admit_reserve(c, step, s, &n))
        return rsp__fail(err, RSP_ENOMEM, "out of memory admitting step %" PRIu64, step->step_id);

    /* Nothing below fails. */
    if (fresh) {
        open_record(c, step, rec);
        s->num_post_slots = 0; /* admit_same keeps the list: not in open_record */
    }
    if (!step->capture)
        admit_apply(c, step, rec, n.new_rids != 0);
    if (fresh && n.spec)
        rsp__spec_apply(c, step, rec); /* a re-admit keeps its output slots */
    if (step->num_restores)
        rsp__ck_pin_restores(c, step, rec); /* keys checked, pins reserved */
    rsp__step_keep_decl(s, step);
    admit_keep(c, step, s, fresh);
    out->ok = true;
    out->free = c->free_top;
    return RSP_OK;
}

rsp_status rsp__core_admit(rsp__core *c, const rsp_step *step, rsp_admit_outcome *out, rsp__work *w,
                           rsp_error *err)
{
    rsp__ckpt_report_begin(c); /* the ghost: below */
    if (!out || !w)
        return rsp__fail(err, RSP_EINVAL, "admit: out or work is NULL");
    uint32_t rec;
    bool fresh, same;
    rsp_status st = admit_validate(c, step, &rec, &fresh, &same, err);
    if (st != RSP_OK)
        return st;
    rsp__steprec *s = &c->steps[rec];
    if (admit_is_same(c, step, s, fresh, same)) {
        admit_same(c, step, rec, out);
        return RSP_OK;
    }
    if (c->same.ghost != RSP__NONE)
        rsp__ghost_clear(c); /* nothing adopts it: it goes as at any other call */
    saved_rows k;
    if (rows_save(s, fresh, same, &k) || rsp__step_keep_rows(c, rec, step, same)) {
        free(k.rows);
        return rsp__fail(err, RSP_ENOMEM, "out of memory admitting step %" PRIu64, step->step_id);
    }
    st = admit_general(c, step, rec, fresh, same, out, err);
    if (k.on && (st != RSP_OK || !out->ok))
        rows_restore(c, rec, &k);
    free(k.rows);
    return st;
}
