/*
 * Forks (fork.h): forking rids, applying forks, the pipeline check and the
 * post-fork marks. SPDX-License-Identifier: Apache-2.0
 */
#include "fork.h"

#include <inttypes.h>
#include <string.h>

#include "util/error.h"
#include "util/mem.h"

/* A label id that no interned label can have: marks rids in the pair set. */
#define RID_MARK UINT32_MAX

/* --- forking rids -------------------------------------------------------- */

/* Append rid (no record hint yet). rids and rid_recs grow together; each
 * keeps its own capacity, so a failure between the two leaves both valid. */
static rsp_status rids_push(rsp__core *c, rsp_rid rid)
{
    uint64_t need = (uint64_t)c->num_rids + 1;
    if (rsp__grow((void **)&c->rids, &c->cap_rids, need, sizeof *c->rids) ||
        rsp__grow((void **)&c->rid_recs, &c->cap_rid_recs, need, sizeof *c->rid_recs))
        return RSP_ENOMEM;
    c->rid_recs[c->num_rids] = RSP__NONE;
    c->rids[c->num_rids++] = rid;
    return RSP_OK;
}

/* Fill c->rids from step's rows; with `grouped`, c->rid_groups too (room
 * for every row was made). Inline in both callers, so the step-wide loop
 * carries no group code. */
static inline rsp_status collect_rows(rsp__core *c, const rsp_step *step, bool grouped)
{
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (row->padding || !rsp__set_insert(c, row->rid, RID_MARK))
            continue;
        if (rids_push(c, row->rid))
            return RSP_ENOMEM;
        if (grouped)
            c->rid_groups[c->num_rids - 1] = row->fork_group;
    }
    return RSP_OK;
}

bool rsp__step_forks_grouped(const rsp_step *step)
{
    return rsp__forks_grouped(step->pre_forks, step->num_pre_forks) ||
           rsp__forks_grouped(step->post_forks, step->num_post_forks);
}

rsp_status rsp__collect_rids_in_set(rsp__core *c, const rsp_step *step)
{
    c->num_rids = 0;
    c->rids_rec = RSP__NONE;
    c->fpairs = NULL;
    if (step->capture || (step->num_pre_forks == 0 && step->num_post_forks == 0))
        return RSP_OK;
    if (!rsp__step_forks_grouped(step))
        return collect_rows(c, step, false);
    if (rsp__grow((void **)&c->rid_groups, &c->cap_rid_groups, step->num_rows,
                  sizeof *c->rid_groups))
        return RSP_ENOMEM;
    return collect_rows(c, step, true);
}

rsp_status rsp__collect_rids(rsp__core *c, const rsp_step *step)
{
    c->num_rids = 0;
    c->rids_rec = RSP__NONE;
    c->fpairs = NULL;
    if (step->capture || (step->num_pre_forks == 0 && step->num_post_forks == 0))
        return RSP_OK; /* no forking rids: the set is not needed */
    if (rsp__set_reset(c, step->num_rows))
        return RSP_ENOMEM;
    return rsp__collect_rids_in_set(c, step);
}

rsp_status rsp__collect_rids_for(rsp__core *c, const rsp_step *step, uint32_t rec, bool same)
{
    rsp__steprec *s = &c->steps[rec];
    /* The kept rids carry no groups ("same rows" does not compare them):
     * a grouped step collects its rids and groups every time. */
    if (same && rsp__same_has(&c->same, &s->same, RSP__SAME_RIDS) && !step->capture &&
        (step->num_pre_forks || step->num_post_forks) && !rsp__step_forks_grouped(step)) {
        /* c->rids held these once, so it has room for them. */
        const rsp__same *m = &s->same;
        if (m->num_fork_rids) {
            memcpy(c->rids, m->fork_rids, m->num_fork_rids * sizeof *c->rids);
            memcpy(c->rid_recs, m->fork_rid_recs, m->num_fork_rids * sizeof *c->rid_recs);
        }
        c->num_rids = m->num_fork_rids;
        c->rids_rec = rec;
        c->fpairs = NULL;
        return RSP_OK;
    }
    return rsp__collect_rids(c, step);
}

/* Index of r's holding of label, RSP__NONE if none. */
static uint32_t hold_index(const rsp__req *r, rsp_label_id label)
{
    const rsp__hold *h = r ? rsp__hold_find_const(r, label) : NULL;
    return h ? (uint32_t)(h - rsp__req_holds((rsp__req *)r)) : RSP__NONE;
}

/* Are step's forks the step-wide ones record s's plain admit kept (its
 * declaration's dforks, while same.h keeps FORKS)? */
bool rsp__fork_kept(rsp__core *c, rsp__steprec *s, const rsp_step *step)
{
    uint32_t npre = step->num_pre_forks, npost = step->num_post_forks;
    return rsp__same_has(&c->same, &s->same, RSP__SAME_FORKS) && npre == s->num_dpre &&
           npost == s->num_dpost &&
           (!npre || !memcmp(step->pre_forks, s->dforks, npre * sizeof *s->dforks)) &&
           (!npost || !memcmp(step->post_forks, s->dforks + npre, npost * sizeof *s->dforks));
}

void rsp__fork_pairs_prepare(rsp__core *c, const rsp_step *step, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    rsp__same *m = &s->same;
    uint32_t nf = step->num_pre_forks + step->num_post_forks;
    c->fpairs = NULL;
    if (c->same.off || (RSP_SAME_DROP & RSP__SAME_PAIRS) || !nf || c->rids_rec != rec ||
        !rsp__fork_kept(c, s, step))
        return;
    if (!rsp__same_has(&c->same, m, RSP__SAME_PAIRS)) {
        uint64_t n = (uint64_t)c->num_rids * nf;
        if (rsp__grow((void **)&m->fpairs, &m->cap_fpairs, n, sizeof *m->fpairs) ||
            rsp__grow((void **)&m->fork_pair_recs, &m->cap_fork_pair_recs, c->num_rids,
                      sizeof *m->fork_pair_recs))
            return; /* found per rid and fork instead */
        for (uint32_t k = 0; k < c->num_rids; k++) {
            const rsp__req *r = rsp__rid_req(c, k);
            m->fork_pair_recs[k] = r ? (uint32_t)(r - c->reqs) : RSP__NONE;
            for (uint32_t i = 0; i < nf; i++) {
                const rsp_fork *f = &s->dforks[i];
                m->fpairs[k * nf + i] = (rsp__fpair){hold_index(r, f->from), hold_index(r, f->to)};
            }
        }
        m->fp_marks = RSP__NONE;
        rsp__same_keep(&c->same, m, RSP__SAME_PAIRS);
    }
    c->fpairs = m->fpairs;
    c->fork_pair_recs = m->fork_pair_recs;
    c->fast.fork_pairs++;
}

void rsp__keep_rids(rsp__core *c, rsp__steprec *s)
{
    rsp__same *m = &s->same;
    rsp__same_drop(m, RSP__SAME_RIDS);
    if (rsp__grow((void **)&m->fork_rids, &m->cap_fork_rids, c->num_rids, sizeof *m->fork_rids) ||
        rsp__grow((void **)&m->fork_rid_recs, &m->cap_fork_rid_recs, c->num_rids,
                  sizeof *m->fork_rid_recs))
        return;
    if (c->num_rids) { /* memcpy of NULL is undefined even for 0 bytes */
        memcpy(m->fork_rids, c->rids, c->num_rids * sizeof *m->fork_rids);
        memcpy(m->fork_rid_recs, c->rid_recs, c->num_rids * sizeof *m->fork_rid_recs);
    }
    m->num_fork_rids = c->num_rids;
    rsp__same_keep(&c->same, m, RSP__SAME_RIDS);
}

rsp_status rsp__collect_skips(rsp__core *c, const rsp_step *step, bool *any)
{
    *any = false;
    uint32_t i = 0;
    while (i < step->num_rows && !step->rows[i].skip_post_forks)
        i++;
    if (i == step->num_rows || !c->num_rids)
        return RSP_OK;
    if (rsp__grow((void **)&c->rid_skip, &c->cap_rid_skip, c->num_rids, sizeof *c->rid_skip) ||
        rsp__set_reset(c, step->num_rows + c->num_rids))
        return RSP_ENOMEM;
    for (; i < step->num_rows; i++)
        if (step->rows[i].skip_post_forks && !step->rows[i].padding)
            rsp__set_add(c, step->rows[i].rid, RID_MARK);
    /* A rid a row marked is in the set already: the insert says no. */
    for (uint32_t k = 0; k < c->num_rids; k++)
        c->rid_skip[k] = !rsp__set_insert(c, c->rids[k], RID_MARK);
    *any = true;
    return RSP_OK;
}

/* --- applying forks ------------------------------------------------------ */

/* Fork from -> to, two holdings of one request; *gen: the pool-wide
 * generation (the caller's local copy of c->generation, stored back with
 * the epoch once: rsp__next_generation per fork, without a store each). */
__attribute__((always_inline)) static inline void fork_one(rsp__core *c, const rsp__hold *from,
                                                           rsp__hold *to, uint64_t avoid,
                                                           uint64_t *gen, rsp__work *w)
{
    if (avoid && ((c->slots[from->slot].pins | c->slots[to->slot].pins) & avoid))
        return; /* another planned step's forward may write it */
    if (from != to) {
        /* Reserved and frozen (fork.h), so the append cannot fail;
         * chains split into ordered COPYs. A source reset during a
         * step in flight logically reads zeros (its zero is
         * deferred until that forward is done): copy zeros, not
         * the bytes that zero will wipe. */
        if (c->zero_pendings && c->slots[from->slot].zero_pending)
            RSP__MUST_OK(rsp__work_zero(w, to->slot));
        else
            RSP__MUST_OK(rsp__work_copy_in(w, from->slot, to->slot));
        to->has_state = from->has_state;
    }
    to->generation = ++*gen;
    rsp__writes_forget(c, &c->slots[to->slot]);
}

/* Store back a generation counted locally (fork_one): each fork moved
 * the generation and the epoch by one. */
static inline void forks_done(rsp__core *c, uint64_t gen)
{
    rsp__same_holdings_changed_n(&c->same, gen - c->generation);
    c->generation = gen;
}

/* rsp__apply_forks through the resolved forks (c->fpairs): forks
 * [off, off + n) of each rid's stride. */
static void apply_pairs(rsp__core *c, uint32_t n, uint32_t off, uint32_t stride, uint64_t avoid,
                        rsp__work *w)
{
    uint32_t nrids = c->num_rids;
    const uint32_t *fork_pair_recs = c->fork_pair_recs;
    const rsp__fpair *fpairs = c->fpairs;
    uint64_t gen = c->generation;
    for (uint32_t k = 0; k < nrids; k++) {
        if (fork_pair_recs[k] == RSP__NONE)
            continue;
        rsp__hold *h = rsp__req_holds(&c->reqs[fork_pair_recs[k]]);
        const rsp__fpair *p = fpairs + (size_t)k * stride + off;
        for (uint32_t i = 0; i < n; i++)
            if (p[i].from != RSP__NONE && p[i].to != RSP__NONE)
                fork_one(c, &h[p[i].from], &h[p[i].to], avoid, &gen, w);
    }
    forks_done(c, gen);
}

/* What rsp__apply_forks' visitor needs: the steps whose pins a fork
 * avoids, whether rids may skip, the generation counted locally. */
typedef struct apply_ctx {
    uint64_t avoid;
    bool skips;
    uint64_t gen;
    rsp__work *w;
} apply_ctx;

/* One fork of one rid (an rsp__fork_each visitor). */
static bool apply_one(rsp__core *c, void *ctx, uint32_t k, const rsp_fork *f, uint32_t i, bool pre)
{
    (void)i;
    (void)pre;
    apply_ctx *a = ctx;
    if (a->skips && c->rid_skip[k])
        return true; /* its draft was rejected: no post-forks */
    rsp__req *r = rsp__rid_req(c, k);
    rsp__hold *from = r ? rsp__hold_find(r, f->from) : NULL;
    rsp__hold *to = from ? rsp__hold_find(r, f->to) : NULL;
    if (to) /* else no source: nothing happens (docs/semantics.md 4.6) */
        fork_one(c, from, to, a->avoid, &a->gen, a->w);
    return true;
}

void rsp__apply_forks(rsp__core *c, const rsp_step *step, bool post, uint64_t avoid, bool skips,
                      rsp__work *w)
{
    if (c->fpairs && !skips) { /* resolved: step-wide forks */
        apply_pairs(c, post ? step->num_post_forks : step->num_pre_forks,
                    post ? step->num_pre_forks : 0, step->num_pre_forks + step->num_post_forks,
                    avoid, w);
        return;
    }
    apply_ctx a = {avoid, skips, c->generation, w};
    RSP__MUST(rsp__fork_each(c, step, !post, post, apply_one, &a)); /* apply_one never stops it */
    forks_done(c, a.gen);
}

/* --- pipelined steps ----------------------------------------------------- */

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

/* Step id of the lowest record in mask (not 0). */
static uint64_t first_step(const rsp__core *c, uint64_t mask)
{
    return c->steps[__builtin_ctzll(mask)].step_id;
}

/* What check_fork needs, and its answer. */
typedef struct check_ctx {
    const rsp_step *step;
    uint64_t others;
    rsp_error *err;
    rsp_status st;
} check_ctx;

/* A fork of step (a pre-fork now, a post-fork at its commit) must not read
 * or write a slot another planned step in `others` pins or will touch with
 * its post-forks (an rsp__fork_each visitor; stops at the first). */
static bool check_fork(rsp__core *c, void *ctx, uint32_t k, const rsp_fork *f, uint32_t i, bool pre)
{
    check_ctx *x = ctx;
    const rsp_step *step = x->step;
    uint32_t from = rid_slot_of(c, k, f->from);
    uint32_t to = rid_slot_of(c, k, f->to);
    if (from == RSP__NONE || to == RSP__NONE)
        return true; /* nothing happens (docs/semantics.md 4.6) */
    for (int e = 0; e < 2; e++) {
        uint32_t slot = e ? to : from;
        uint64_t busy = (c->slots[slot].pins | c->slots[slot].fork_pins) & x->others;
        if (!busy)
            continue;
        uint64_t n = first_step(c, busy);
        x->st =
            rsp__fail(x->err, RSP_EORDER,
                      "plan: step %" PRIu64 ": %s[%" PRIu32 "] (rid %" PRIu64
                      ", \"%s\" -> \"%s\") %s slot %" PRIu32 ", which step %" PRIu64
                      " (planned, not committed) may still write; commit step %" PRIu64 " first",
                      step->step_id, pre ? "pre_forks" : "post_forks",
                      pre ? i : i - step->num_pre_forks, c->rids[k], c->label_names[f->from],
                      c->label_names[f->to], e ? "writes" : "reads", slot, n, n);
        return false;
    }
    return true;
}

/* docs/semantics.md 5.1, pipelined steps: a live plan's forks (pre-forks now,
 * post-forks at its commit) must not read or write a slot that another
 * planned, uncommitted step's forward or post-forks may touch, and its rows
 * must not address a slot another planned step's post-forks will touch:
 * neither is ordered after that step's forward (its forward_done is only
 * known at its commit). Refused with RSP_EORDER, nothing changed; the
 * caller commits that step and plans again. */
rsp_status rsp__pipeline_check(rsp__core *c, const rsp_step *step, uint32_t rec, rsp_error *err)
{
    uint64_t others = rsp__planned_mask(c) & ~(1ull << rec);
    if (!others || step->capture)
        return RSP_OK;
    check_ctx x = {step, others, err, RSP_OK};
    if (!rsp__fork_each(c, step, true, true, check_fork, &x))
        return x.st;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (!rsp__row_addresses(row))
            continue;
        uint32_t slot = slot_of(c, row->rid, row->label);
        if (slot == RSP__NONE || !(c->slots[slot].fork_pins & others))
            continue;
        uint64_t n = first_step(c, c->slots[slot].fork_pins & others);
        return rsp__fail(
            err, RSP_EORDER,
            "plan: step %" PRIu64 ": rows[%" PRIu32 "] (rid %" PRIu64
            ", \"%s\") addresses slot %" PRIu32 ", which the post-forks of step %" PRIu64
            " (planned, not committed) will touch at its commit; commit step %" PRIu64 " first",
            step->step_id, i, row->rid, c->label_names[row->label], slot, n, n);
    }
    return RSP_OK;
}

/* Mark slot for record s (bit) once. On locals: the stores through the
 * slot array would otherwise reload every field per pair. */
static inline void mark_slot(rsp__slot *slots, uint32_t slot, uint64_t bit, uint32_t *fslots,
                             uint32_t *n)
{
    if (slots[slot].fork_pins & bit)
        return;
    slots[slot].fork_pins |= bit;
    fslots[(*n)++] = slot;
}

/* A post-fork's source and target get record s's fork_pins bit (an
 * rsp__fork_each visitor; ctx: the record). */
static bool mark_fork(rsp__core *c, void *ctx, uint32_t k, const rsp_fork *f, uint32_t i, bool pre)
{
    (void)i;
    (void)pre;
    rsp__steprec *s = ctx;
    uint64_t bit = 1ull << (s - c->steps);
    uint32_t from = rid_slot_of(c, k, f->from);
    uint32_t to = rid_slot_of(c, k, f->to);
    if (from == RSP__NONE || to == RSP__NONE)
        return true;
    RSP__ASSERT(s->num_fslots + 2 <= s->cap_fslots);
    mark_slot(c->slots, from, bit, s->fslots, &s->num_fslots);
    mark_slot(c->slots, to, bit, s->fslots, &s->num_fslots);
    return true;
}

/* rsp__mark_post_forks through the resolved forks (c->fpairs). The slots
 * are the ones the last marks of these resolved forks had, if known
 * (same.fp_marks): no slot carries rec's bit now (a step's marks go at its
 * end, a released slot loses all), so setting the bits again gives the
 * same list. */
static uint32_t mark_pairs(rsp__core *c, const rsp_step *step, rsp__steprec *s, uint64_t bit)
{
    rsp__slot *slots = c->slots;
    uint32_t *fslots = s->fslots;
    uint32_t known = s->same.fp_marks;
    if (known != RSP__NONE) {
        RSP__ASSERT(known <= s->cap_fslots);
        for (uint32_t j = 0; j < known; j++)
            slots[fslots[j]].fork_pins |= bit;
        return known;
    }
    uint32_t npre = step->num_pre_forks, npost = step->num_post_forks, nf = npre + npost;
    uint32_t n = 0, nrids = c->num_rids;
    const uint32_t *fork_pair_recs = c->fork_pair_recs;
    const rsp__fpair *fpairs = c->fpairs;
    for (uint32_t k = 0; k < nrids; k++) {
        if (fork_pair_recs[k] == RSP__NONE)
            continue;
        const rsp__hold *h = rsp__req_holds(&c->reqs[fork_pair_recs[k]]);
        const rsp__fpair *p = &fpairs[(size_t)k * nf + npre];
        for (uint32_t i = 0; i < npost; i++) {
            if (p[i].from == RSP__NONE || p[i].to == RSP__NONE)
                continue;
            RSP__ASSERT(n + 2 <= s->cap_fslots);
            mark_slot(slots, h[p[i].from].slot, bit, fslots, &n);
            mark_slot(slots, h[p[i].to].slot, bit, fslots, &n);
        }
    }
    return n;
}

void rsp__mark_post_forks(rsp__core *c, const rsp_step *step, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    s->num_fslots = 0;
    if (step->capture)
        return;
    if (c->fpairs) { /* resolved: step-wide forks */
        s->num_fslots = s->same.fp_marks = mark_pairs(c, step, s, bit);
        return;
    }
    s->same.fp_marks = RSP__NONE;                                  /* fslots are written below */
    RSP__MUST(rsp__fork_each(c, step, false, true, mark_fork, s)); /* mark_fork never stops it */
}
