/*
 * The end of a step: commit (docs/semantics.md 4.5, post-forks 4.6) and
 * rollback (4.2). Each validates, reserves, then applies; the apply phase runs
 * after the WAIT on the step's forward and cannot fail.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>

#include "addr.h"
#include "ckpt.h"
#include "spec.h"
#include "util/error.h"

/* Record rec's step has ended: a stage built for it ends too (it must never
 * outlive its step: the record is reused by the next admit), its buffers
 * go back, the record is free. */
static void end_step(rsp__core *c, uint32_t rec, rsp__stage_change *stage)
{
    if (c->stage_active && c->stage_rec == rec)
        rsp__stage_drop(c, RSP__STAGE_STEP_ENDED, stage);
    rsp__bufs_release(c, rec);
    rsp__step_free(c, rec);
}

/* --- rollback ------------------------------------------------------------ */

/* Undo record rec's journal in reverse allocation order, so the free stack
 * ends as before the admit. Work room was reserved and the list frozen. */
static void undo_journal(rsp__core *c, uint32_t rec, rsp__work *w)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    for (uint32_t j = s->num_journal; j-- > 0;) {
        const rsp__journal_entry *e = &s->journal[j];
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
            RSP__ASSERT(c->same.ghost == RSP__NONE);
            if (sl->state == RSP__SLOT_PENDING && sl->pins == bit) {
                sl->pins = 0;
                sl->writes = sl->post_to = 0;
                RSP__ASSERT(c->pending > 0);
                c->pending--;
                rsp__slot_release(c, e->slot, w);
            }
            continue;
        }
        c->slots[e->slot].pins &= ~bit;
        c->slots[e->slot].writes &= ~bit;
        c->slots[e->slot].post_to &= ~bit;
        rsp__hold_drop(c, r, i, w);
    }
}

/* Newest first (docs/semantics.md 9.1): every slot record rec pins is one it
 * writes or allocates (its rows, its fork targets), so a later in-flight
 * step that pins one of them read or will read what rec's forward wrote,
 * or holds a slot rec's journal would give back. RSP_EORDER naming that
 * step, nothing changed. O(pinned) while a later step is in flight. */
static rsp_status rollback_order(const rsp__core *c, uint32_t rec, rsp_error *err)
{
    const rsp__steprec *s = &c->steps[rec];
    uint64_t later = rsp__later_mask(c, rec);
    for (uint32_t i = 0; later && i < s->num_pinned; i++) {
        const rsp__slot *sl = &c->slots[s->pinned[i]];
        uint64_t m = sl->state == RSP__SLOT_HELD ? sl->pins & later : 0; /* pending: no state */
        if (m)
            return rsp__fail(err, RSP_EORDER,
                             "rollback: step %" PRIu64 ": step %" PRIu64
                             " (admitted later, in flight) names slot %" PRIu32
                             " that this step writes or allocates; roll back step %" PRIu64
                             " first (newest first)",
                             s->step_id, c->steps[__builtin_ctzll(m)].step_id, s->pinned[i],
                             c->steps[__builtin_ctzll(m)].step_id);
    }
    return RSP_OK;
}

rsp_status rsp__core_rollback(rsp__core *c, uint64_t step_id, const rsp_event *forward_done,
                              rsp__work *w, rsp__stage_change *stage, rsp_error *err)
{
    rsp__op_begin(c);
    if (stage)
        *stage = (rsp__stage_change){RSP__STAGE_KEPT, 0};
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "rollback: work is NULL");
    uint32_t rec = rsp__step_find(c, step_id);
    if (rec == RSP__NONE)
        return RSP_OK; /* unknown or finished: nothing to undo */
    rsp__steprec *s = &c->steps[rec];
    rsp_status st = rollback_order(c, rec, err);
    if (st)
        return st;
    /* Three ops (the WAIT, the journal's ZERO, the unpinning's ZERO:
     * consecutive zeros merge) and a slot per journaled or pinned slot. */
    if (rsp__work_reserve(w, 3, s->num_journal + s->num_pinned, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory rolling back step %" PRIu64, step_id);
    st = rsp__core_reserve_ext(
        c, &(rsp__ext_need){.ops = 3, .slots = s->num_journal + s->num_pinned}, err);
    if (st)
        return st;
    /* Nothing below fails: the appends take the room reserved above, in a
     * frozen list. A forward may have written these slots: zero only after
     * it is done. */
    rsp__work_freeze(w);
    if (forward_done)
        RSP__MUST_OK(rsp__work_wait(w, forward_done));
    rsp__spec_rollback(c, rec, w); /* popped after the journal's holdings */
    undo_journal(c, rec, w);
    rsp__spec_end(c, rec);
    rsp__ck_unpin_step(c, rec); /* its restores' pins: every count as before the admit */
    rsp__step_unpin(c, rec, true, w);
    end_step(c, rec, stage);
    rsp__work_thaw(w);
    return RSP_OK;
}

/* --- commit -------------------------------------------------------------- */

/* The step is in flight and planned (a capture step: admitted is enough);
 * *rec: its record, *same: see rsp__step_revalidate. */
static rsp_status commit_validate(rsp__core *c, const rsp_step *step, uint32_t *rec, bool *same,
                                  rsp_error *err)
{
    rsp_status st = rsp__step_revalidate(c, step, rec, same, err);
    if (st)
        return st;
    if (*rec == RSP__NONE)
        return rsp__fail(err, RSP_EORDER,
                         "commit: step %" PRIu64 " is not in flight (never admitted, or already "
                         "committed or rolled back)",
                         step->step_id);
    /* The admit's declaration decides whether this is a capture step. */
    const rsp__steprec *s = &c->steps[*rec];
    if (!s->capture && s->phase != RSP__PHASE_PLANNED)
        return rsp__fail(err, RSP_EORDER, "commit: step %" PRIu64 " was admitted but not planned",
                         step->step_id);
    st = rsp__step_check_commit(c, *rec, step, *same, err);
    return st == RSP_OK && s->num_spec_rows ? rsp__check_accepted(step, err) : st;
}

/* Count the work (a WAIT; up to two ZEROs per pinned slot; a COPY or ZERO
 * per forking rid and post-fork) and reserve it, here and through the
 * hook. Fills c->rids. */
static rsp_status commit_reserve(rsp__core *c, const rsp_step *step, uint32_t rec, bool same,
                                 bool *skips, rsp__work *w, rsp_error *err)
{
    const rsp__steprec *s = &c->steps[rec];
    bool capture = s->capture;
    *skips = false;
    /* Rows the same as the record's say no skip (step.h): no look. */
    if (!capture && (rsp__collect_rids_for(c, step, rec, same) ||
                     (step->num_post_forks && !same && rsp__collect_skips(c, step, skips))))
        return rsp__fail(err, RSP_ENOMEM, "out of memory committing step %" PRIu64, step->step_id);
    if (!capture)
        rsp__fork_pairs_prepare(c, step, rec);
    uint64_t pairs = capture ? 0 : (uint64_t)c->num_rids * step->num_post_forks;
    /* Each declared take: up to 2 ops and 2 pairs (a demotion's COPY, the
     * take's); 4 changes, 2 evictions, a skip. */
    uint32_t takes = capture ? 0 : step->num_checkpoints;
    uint32_t ops = 3 + 2 * (uint32_t)pairs + 2 * takes;
    uint32_t slots = 2 * s->num_pinned + (uint32_t)pairs;
    uint32_t npairs = (uint32_t)pairs + 2 * takes;
    if (pairs > UINT32_MAX / 4 || rsp__work_reserve(w, ops, slots, npairs) ||
        (npairs && rsp__work_reserve_marks(w, takes ? c->layout.num_ids : c->layout.max_slots)) ||
        (takes && rsp__ck_report_reserve(c, 4ull * takes, 2ull * takes, takes)))
        return rsp__fail(err, RSP_ENOMEM, "out of memory committing step %" PRIu64, step->step_id);
    return rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = ops, .slots = slots, .pairs = npairs},
                                 err);
}

/* The forward of record rec's live plan is done (the WAIT is out): record
 * its writes and zero what was reset during the step. Cannot fail. */
static void commit_writes(rsp__core *c, uint32_t rec, uint64_t others, rsp__work *w)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    if (rsp__same_commit_exact(&c->same, &s->same)) {
        /* No holding changed since the plan: every row it addressed still
         * has the holding and generation it saw, and the hints in prows
         * are exact. Every such row had has_state already
         * (plan_all_true), or gets it through its hints. */
        for (uint32_t i = 0; i < s->num_prows && !s->same.plan_all_true; i++)
            rsp__req_holds(&c->reqs[s->prows[i].rec])[s->prows[i].hold].has_state = true;
        c->fast.commits++;
    } else {
        /* has_state for the rows this step's live plan addressed, if the
         * holding is still the one addressed (same generation): a reset,
         * a fork into it or a new assignment since then means this
         * forward's write is not the request's state. A row planned after
         * a reset started from zeros and its write counts. */
        for (uint32_t i = 0; i < s->num_prows; i++) {
            rsp__prow *p = &s->prows[i];
            rsp__req *r;
            rsp__hold *h = rsp__hold_lookup(c, p->rid, p->label, &p->rec, &p->hold, &r);
            if (h && h->generation == p->generation)
                h->has_state = true;
        }
    }
    /* Reset during the step (before any later plan took the slot over):
     * zero after the forward, before post-forks read it, unless another
     * planned step's forward may still write it. The ZERO was reserved
     * (commit_reserve) in a frozen list: it cannot fail. None anywhere
     * (c->zero_pendings): nothing to look for. */
    for (uint32_t i = 0; i < s->num_pinned && c->zero_pendings; i++) {
        rsp__slot *sl = &c->slots[s->pinned[i]];
        if (sl->zero_pending && (sl->pins & bit) && !(sl->pins & others) &&
            sl->state == RSP__SLOT_HELD) {
            rsp__zero_pending(c, sl, false);
            RSP__MUST_OK(rsp__work_zero(w, s->pinned[i]));
        }
    }
}

rsp_status rsp__core_commit(rsp__core *c, const rsp_step *step, const rsp_event *forward_done,
                            rsp__work *w, rsp__stage_change *stage, rsp_error *err)
{
    rsp__op_begin(c);
    if (stage)
        *stage = (rsp__stage_change){RSP__STAGE_KEPT, 0};
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "commit: work is NULL");
    uint32_t rec;
    bool same, skips;
    rsp_status st = commit_validate(c, step, &rec, &same, err);
    if (st == RSP_OK)
        st = commit_reserve(c, step, rec, same, &skips, w, err);
    if (st)
        return st;

    /* Nothing below fails: every append takes room reserved above, in a
     * frozen list. Everything below runs after the forward on the device. */
    rsp__work_freeze(w);
    if (!c->any_committed || step->step_id > c->last_committed)
        c->last_committed = step->step_id;
    c->any_committed = true;
    if (forward_done)
        RSP__MUST_OK(rsp__work_wait(w, forward_done));
    /* A capture step (graph warm-up) wrote only the pad target: nothing to
     * record, no forks, no restores or takes (check.h). */
    if (!c->steps[rec].capture) {
        uint64_t others = rsp__planned_mask(c) & ~(1ull << rec);
        bool spec = c->steps[rec].num_spec_rows != 0;
        if (spec)
            rsp__spec_commit(c, step, rec); /* the accepted slots, before anything reads them */
        commit_writes(c, rec, others, w);
        if (spec) {
            rsp__spec_keep_flags(c, rec);
            rsp__spec_end(c, rec);
        }
        /* Its restores were queued at its plan: their pins go, so a take
         * below may replace a key this step restored from. Then its takes,
         * the state the forward left, before the post-forks. */
        if (c->steps[rec].num_ckrecs)
            rsp__ck_unpin_step(c, rec);
        if (step->num_checkpoints)
            rsp__ck_commit_takes(c, step, rec, others, w);
        c->steps[rec].phase = RSP__PHASE_ENDING;
        c->planned_bits &= ~(1ull << rec);
        /* Post-forks on the slots the plan recorded were checked against
         * every other planned step (rsp__pipeline_check, both orders). A
         * holding that appeared or was re-created after the plan may sit
         * on a slot another planned step's forward writes: such a fork is
         * skipped. A rid whose rows say skip_post_forks (a rejected
         * draft) gets none: its rows' writes above still count. */
        rsp__apply_forks(c, step, true, others, skips, w);
    }
    rsp__step_unpin(c, rec, false, w);
    end_step(c, rec, stage);
    rsp__work_thaw(w);
    return RSP_OK;
}
