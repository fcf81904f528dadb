/*
 * Step records (step.h): find, reserve, pins, journal, validated rows,
 * unpin and free. SPDX-License-Identifier: Apache-2.0
 */
#include "step.h"

#include <inttypes.h>
#include <string.h>

#include "util/error.h"
#include "util/mem.h"

uint32_t rsp__step_find(const rsp__core *c, uint64_t step_id)
{
    for (uint32_t i = 0; i < c->max_inflight; i++)
        if (c->steps[i].used && c->steps[i].step_id == step_id)
            return i;
    return RSP__NONE;
}

/* --- validated rows ------------------------------------------------------ */

static rsp_status duplicate_row(const rsp__core *c, const rsp_step *step, uint32_t i,
                                uint32_t first, rsp_error *err)
{
    const rsp_row *row = &step->rows[i];
    return rsp__fail(err, RSP_EDUPROW,
                     "step %" PRIu64 ": rows[%" PRIu32 "] repeats (rid %" PRIu64
                     ", label \"%s\") of rows[%" PRIu32 "] with span > 0",
                     step->step_id, i, row->rid, c->label_names[row->label], first);
}

/* No (rid, label) addressed twice (span > 0). Labels were checked. */
static rsp_status check_duplicates(rsp__core *c, const rsp_step *step, rsp_error *err)
{
    /* Few rows: a pairwise scan is cheaper than the hash set. */
    if (step->num_rows <= 8) {
        for (uint32_t i = 1; i < step->num_rows; i++) {
            const rsp_row *row = &step->rows[i];
            if (!rsp__row_addresses(row))
                continue;
            for (uint32_t first = 0; first < i; first++)
                if (rsp__row_addresses(&step->rows[first]) && step->rows[first].rid == row->rid &&
                    step->rows[first].label == row->label)
                    return duplicate_row(c, step, i, first, err);
        }
        return RSP_OK;
    }
    if (rsp__set_reset(c, step->num_rows))
        return rsp__fail(err, RSP_ENOMEM, "out of memory checking step %" PRIu64, step->step_id);
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (!rsp__row_addresses(row) || rsp__set_insert(c, row->rid, row->label))
            continue;
        uint32_t first = 0;
        while (first < i &&
               !(rsp__row_addresses(&step->rows[first]) && step->rows[first].rid == row->rid &&
                 step->rows[first].label == row->label))
            first++;
        return duplicate_row(c, step, i, first, err);
    }
    return RSP_OK;
}

/* Set marks for the group check, beside the real label ids: a rid seen,
 * and (rid, group) seen (fork.c and admit.c use UINT32_MAX - 2 and up). */
#define GROUP_RID_MARK 0x80000000u
#define GROUP_MARK(g) (0x40000000u | (uint32_t)(g))

/* The first earlier non-padding row of rows[i]'s rid. */
static uint32_t first_row_of(const rsp_step *step, uint32_t i)
{
    uint32_t first = 0;
    while (first < i && (step->rows[first].padding || step->rows[first].rid != step->rows[i].rid))
        first++;
    return first;
}

/* Every non-padding row of one rid carries one fork_group (check.h), in a
 * step where a fork has a group (else groups are not read). Not covered
 * by "same rows" (rsp__valid_row keeps no group), so it runs on every call of
 * such a step. O(rows). */
static rsp_status check_groups(rsp__core *c, const rsp_step *step, rsp_error *err)
{
    if (!rsp__forks_grouped(step->pre_forks, step->num_pre_forks) &&
        !rsp__forks_grouped(step->post_forks, step->num_post_forks))
        return RSP_OK; /* the step-wide form */
    if (rsp__set_reset(c, 2 * step->num_rows))
        return rsp__fail(err, RSP_ENOMEM, "out of memory checking step %" PRIu64, step->step_id);
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (row->padding)
            continue;
        bool new_rid = rsp__set_insert(c, row->rid, GROUP_RID_MARK);
        /* A rid seen before, but never with this group: another one. */
        if (rsp__set_insert(c, row->rid, GROUP_MARK(row->fork_group)) && !new_rid)
            return rsp__fail_fork_group(step, i, first_row_of(step, i), err);
    }
    return RSP_OK;
}

/* Set marks for the checkpoint rules: a restored (rid, label) and a
 * taken key (as the rid) beside the rows' real labels. */
#define RESTORE_MARK(l) (0x20000000u | (uint32_t)(l))
#define KEY_MARK 0x10000000u

/* The earlier restore of restores[i]'s (rid, label), the earlier take of
 * checkpoints[i]'s key (the message's "first"). */
static uint32_t first_entry(const rsp_step *step, bool restore, uint32_t i)
{
    uint32_t j = 0;
    if (restore)
        while (j < i && (step->restores[j].rid != step->restores[i].rid ||
                         step->restores[j].label != step->restores[i].label))
            j++;
    else
        while (j < i && step->checkpoints[j].key != step->checkpoints[i].key)
            j++;
    return j;
}

/* Each restore and each checkpoint names a row with span > 0, no (rid,
 * label) restored twice, no key taken twice (check.h's messages); a take
 * into a tier without slots is refused. For a step that declares any
 * (the caller asks): O(rows + entries). */
static rsp_status check_ckpt_rows(rsp__core *c, const rsp_step *step, rsp_error *err)
{
    uint32_t nr = step->num_restores, nc = step->num_checkpoints;
    uint32_t max_rows = rsp__core_max_rows(c);
    if (nr > max_rows || nc > max_rows) /* each names a row: the set's size is bounded */
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": %" PRIu32 " checkpoints and %" PRIu32
                         " restores: at most %" PRIu32 " each (each names a row of the step)",
                         step->step_id, nc, nr, max_rows);
    if (rsp__set_reset(c, step->num_rows + nr + nc))
        return rsp__fail(err, RSP_ENOMEM, "out of memory checking step %" PRIu64, step->step_id);
    for (uint32_t i = 0; i < step->num_rows; i++)
        if (rsp__row_addresses(&step->rows[i]))
            rsp__set_add(c, step->rows[i].rid, step->rows[i].label);
    for (uint32_t i = 0; i < nr; i++) {
        const rsp_restore *r = &step->restores[i];
        if (rsp__set_insert(c, r->rid, r->label))
            return rsp__fail_ckpt_row(step, true, i, err);
        if (!rsp__set_insert(c, r->rid, RESTORE_MARK(r->label)))
            return rsp__fail_ckpt_dup(step, true, i, first_entry(step, true, i), err);
    }
    for (uint32_t i = 0; i < nc; i++) {
        const rsp_checkpoint_decl *d = &step->checkpoints[i];
        if (rsp__set_insert(c, d->rid, d->label))
            return rsp__fail_ckpt_row(step, false, i, err);
        if (!rsp__set_insert(c, d->key, KEY_MARK))
            return rsp__fail_ckpt_dup(step, false, i, first_entry(step, false, i), err);
        if (!c->tiers[d->tier].size)
            return rsp__fail(err, RSP_EINVAL,
                             "step %" PRIu64 ": checkpoints[%" PRIu32 "]: the %s tier has no "
                             "slots (%s = 0)",
                             step->step_id, i, d->tier == RSP_TIER_DEVICE ? "device" : "host",
                             d->tier == RSP_TIER_DEVICE ? "max_checkpoints"
                                                        : "max_host_checkpoints");
    }
    return RSP_OK;
}

/* The checks of rsp__step_validate, in their order. */
static rsp_status validate(rsp__core *c, const rsp_step *step, bool same, rsp_error *err)
{
    uint32_t max_rows = rsp__core_max_rows(c);
    rsp_status st = rsp__check_arrays(step, err);
    if (st == RSP_OK)
        st = rsp__check_limits(step, max_rows, err);
    if (st == RSP_OK && !same)
        st = rsp__check_rows(step, c->num_labels, max_rows, c->label_names, err);
    if (st == RSP_OK && !same)
        st = rsp__check_spec_rows(step, NULL, err);
    if (st == RSP_OK)
        st = rsp__check_forks(step, c->num_labels, err);
    if (st == RSP_OK && (step->num_checkpoints || step->num_restores))
        st = rsp__check_ckpt_decls(step, c->num_labels, err);
    if (st == RSP_OK && !same)
        st = check_duplicates(c, step, err);
    if (st == RSP_OK)
        st = check_groups(c, step, err);
    if (st == RSP_OK && (step->num_checkpoints || step->num_restores))
        st = check_ckpt_rows(c, step, err);
    return st;
}

rsp_status rsp__step_validate(rsp__core *c, const rsp_step *step, bool same, rsp_error *err)
{
    if (rsp__same_step_known(&c->same, step))
        return RSP_OK; /* validated, and unchanged since (rsp__core_rows_fixed) */
    rsp_status st = validate(c, step, same, err);
    if (st == RSP_OK)
        rsp__same_step_validated(&c->same, step);
    return st;
}

rsp_status rsp__step_revalidate(rsp__core *c, const rsp_step *step, uint32_t *rec, bool *same,
                                rsp_error *err)
{
    *rec = RSP__NONE;
    *same = false;
    if (step && (!step->num_rows || step->rows)) { /* else validation says why */
        *rec = rsp__step_find(c, step->step_id);
        *same = *rec != RSP__NONE && rsp__step_rows_same(c, *rec, step);
    }
    return rsp__step_validate(c, step, *same, err);
}

rsp_status rsp__step_keep_rows(rsp__core *c, uint32_t rec, const rsp_step *step, bool same)
{
    if (same)
        return RSP_OK;
    rsp__steprec *s = &c->steps[rec];
    if (rsp__grow((void **)&s->valid_rows, &s->cap_valid_rows, step->num_rows,
                  sizeof *s->valid_rows) ||
        rsp__grow((void **)&s->raw, &s->cap_raw, step->num_rows, sizeof *s->raw))
        return RSP_ENOMEM;
    rsp__same_rows_changed(&c->same, &s->same); /* its caches were of other rows */
    bool raw = true;
    uint32_t asks = 0;
    for (uint32_t i = s->num_valid_rows; i < step->num_rows; i++)
        s->valid_rows[i].rec = s->valid_rows[i].hold = RSP__NONE;
    s->num_valid_rows = step->num_rows;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        rsp__valid_row *a = &s->valid_rows[i];
        a->rid = row->rid;
        a->label = row->label;
        a->span = row->span;
        a->padding = row->padding;
        a->skip_post_forks = false;
        a->per_token_states = row->per_token_states;
        asks += rsp__row_per_token(row);
        raw &= !row->skip_post_forks; /* such rows are never "the same" */
    }
    s->valid_spec_asks = asks;
    if (step->num_rows)
        memcpy(s->raw, step->rows, (size_t)step->num_rows * sizeof *s->raw);
    if (raw) {
        rsp__same_keep(&c->same, &s->same, RSP__SAME_RAW);
        rsp__same_rows_found(&c->same, step->rows, step->num_rows, rec); /* the record's now */
    }
    return RSP_OK;
}

/* --- the admitted declaration -------------------------------------------- */

rsp_status rsp__step_reserve_decl(rsp__steprec *s, const rsp_step *step)
{
    uint64_t forks = (uint64_t)step->num_pre_forks + step->num_post_forks;
    if ((forks && rsp__grow((void **)&s->dforks, &s->cap_dforks, forks, sizeof *s->dforks)) ||
        (step->num_checkpoints && rsp__grow((void **)&s->dtakes, &s->cap_dtakes,
                                            step->num_checkpoints, sizeof *s->dtakes)) ||
        (step->num_restores &&
         rsp__grow((void **)&s->drest, &s->cap_drest, step->num_restores, sizeof *s->drest)))
        return RSP_ENOMEM;
    return RSP_OK;
}

static bool any_group(const rsp_step *step);

void rsp__step_keep_decl(rsp__steprec *s, const rsp_step *step)
{
    s->num_dpre = step->num_pre_forks;
    s->num_dpost = step->num_post_forks;
    s->num_dtakes = step->num_checkpoints;
    s->num_drest = step->num_restores;
    if (s->num_dpre)
        memcpy(s->dforks, step->pre_forks, s->num_dpre * sizeof *s->dforks);
    if (s->num_dpost)
        memcpy(s->dforks + s->num_dpre, step->post_forks, s->num_dpost * sizeof *s->dforks);
    if (s->num_dtakes)
        memcpy(s->dtakes, step->checkpoints, s->num_dtakes * sizeof *s->dtakes);
    if (s->num_drest)
        memcpy(s->drest, step->restores, s->num_drest * sizeof *s->drest);
    /* Rows the same as the record's were not copied (fork_group is not
     * part of "the same"): a grouped step's groups are. */
    if (any_group(step))
        for (uint32_t i = 0; i < step->num_rows && i < s->num_valid_rows; i++)
            s->raw[i].fork_group = step->rows[i].fork_group;
}

/* The first field in which row a differs from the admitted row b, NULL if
 * none. */
static const char *row_differs(const rsp_row *a, const rsp_row *b, bool groups)
{
    if (a->rid != b->rid)
        return "rid";
    if (a->label != b->label)
        return "label";
    if (a->span != b->span)
        return "span";
    if (a->padding != b->padding)
        return "padding";
    if (a->per_token_states != b->per_token_states)
        return "per_token_states";
    return groups && a->fork_group != b->fork_group ? "fork_group" : NULL;
}

/* Does a fork of step have a group (the rows' fork_group then matter)? */
static bool any_group(const rsp_step *step)
{
    bool groups = false;
    for (uint32_t i = 0; i < step->num_pre_forks; i++)
        groups |= step->pre_forks[i].group != 0;
    for (uint32_t i = 0; i < step->num_post_forks; i++)
        groups |= step->post_forks[i].group != 0;
    return groups;
}

static const char *fork_differs(const rsp_fork *a, const rsp_fork *b)
{
    if (a->from != b->from)
        return "from";
    if (a->to != b->to)
        return "to";
    return a->group != b->group ? "group" : NULL;
}

#define COMMIT_DIFF(...) rsp__fail(err, RSP_EINVAL, __VA_ARGS__)

/* The forks of one list against the admitted ones. */
static rsp_status forks_match(const rsp_step *step, const rsp_fork *got, uint32_t n,
                              const rsp_fork *want, uint32_t nwant, const char *list,
                              rsp_error *err)
{
    if (n != nwant)
        return COMMIT_DIFF("commit: step %" PRIu64 ": %" PRIu32 " %s, its admit had %" PRIu32
                           "; a commit names what was admitted",
                           step->step_id, n, list, nwant);
    for (uint32_t i = 0; i < n; i++) {
        const char *f = fork_differs(&got[i], &want[i]);
        if (f)
            return COMMIT_DIFF("commit: step %" PRIu64 ": %s[%" PRIu32
                               "].%s differs from its admit; a commit names what was admitted",
                               step->step_id, list, i, f);
    }
    return RSP_OK;
}

/* The takes and restores against the admitted ones. */
static rsp_status decls_match(const rsp__steprec *s, const rsp_step *step, rsp_error *err)
{
    if (step->num_checkpoints != s->num_dtakes || step->num_restores != s->num_drest)
        return COMMIT_DIFF("commit: step %" PRIu64 ": %" PRIu32 " checkpoints and %" PRIu32
                           " restores, its admit had %" PRIu32 " and %" PRIu32
                           "; a commit names what was admitted",
                           step->step_id, step->num_checkpoints, step->num_restores, s->num_dtakes,
                           s->num_drest);
    for (uint32_t i = 0; i < s->num_dtakes; i++) {
        const rsp_checkpoint_decl *a = &step->checkpoints[i], *b = &s->dtakes[i];
        if (a->rid != b->rid || a->label != b->label || a->tier != b->tier || a->key != b->key)
            return COMMIT_DIFF("commit: step %" PRIu64 ": checkpoints[%" PRIu32
                               "] differs from its admit; a commit names what was admitted",
                               step->step_id, i);
    }
    for (uint32_t i = 0; i < s->num_drest; i++) {
        const rsp_restore *a = &step->restores[i], *b = &s->drest[i];
        if (a->rid != b->rid || a->label != b->label || a->key != b->key)
            return COMMIT_DIFF("commit: step %" PRIu64 ": restores[%" PRIu32
                               "] differs from its admit; a commit names what was admitted",
                               step->step_id, i);
    }
    return RSP_OK;
}

rsp_status rsp__step_check_commit(const rsp__core *c, uint32_t rec, const rsp_step *step, bool same,
                                  rsp_error *err)
{
    const rsp__steprec *s = &c->steps[rec];
    bool groups = any_group(step); /* only grouped forks read the rows' fork_group */
    if (!same && step->num_rows != s->num_valid_rows)
        return COMMIT_DIFF("commit: step %" PRIu64 ": %" PRIu32 " rows, its admit had %" PRIu32
                           "; a commit names what was admitted",
                           step->step_id, step->num_rows, s->num_valid_rows);
    /* same: rid, label, span and padding are equal (the fork group only
     * matters to grouped forks). */
    for (uint32_t i = 0; (!same || groups) && i < step->num_rows; i++) {
        const char *f = row_differs(&step->rows[i], &s->raw[i], groups);
        if (f)
            return COMMIT_DIFF("commit: step %" PRIu64 ": rows[%" PRIu32
                               "].%s differs from its admit (rid %" PRIu64
                               "); a commit names what was admitted",
                               step->step_id, i, f, s->raw[i].rid);
    }
    rsp_status st = forks_match(step, step->pre_forks, step->num_pre_forks, s->dforks, s->num_dpre,
                                "pre_forks", err);
    if (st == RSP_OK)
        st = forks_match(step, step->post_forks, step->num_post_forks,
                         s->num_dpost ? s->dforks + s->num_dpre : NULL, s->num_dpost, "post_forks",
                         err);
    if (st == RSP_OK && (step->num_checkpoints | step->num_restores | s->num_dtakes | s->num_drest))
        st = decls_match(s, step, err);
    return st;
}

/* --- reserve, take, pin -------------------------------------------------- */

rsp_status rsp__step_reserve(rsp__steprec *s, uint32_t journal, uint32_t pins)
{
    if (rsp__grow((void **)&s->journal, &s->cap_journal, (uint64_t)s->num_journal + journal,
                  sizeof *s->journal) ||
        rsp__grow((void **)&s->pinned, &s->cap_pinned, (uint64_t)s->num_pinned + pins,
                  sizeof *s->pinned))
        return RSP_ENOMEM;
    return RSP_OK;
}

rsp_status rsp__step_reserve_plan(rsp__steprec *s, uint32_t rows, uint32_t fslots)
{
    if (rsp__grow((void **)&s->prows, &s->cap_prows, rows, sizeof *s->prows) ||
        rsp__grow((void **)&s->fslots, &s->cap_fslots, fslots, sizeof *s->fslots))
        return RSP_ENOMEM;
    return RSP_OK;
}

rsp__hold *rsp__step_take_fresh(rsp__core *c, uint32_t rec, rsp__req *r, rsp_label_id label)
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

/* --- the end of a step --------------------------------------------------- */

/* Drop rec's pins, in pin order (deterministic). A slot whose last pin this
 * was and that was removed (pending) is zeroed and pushed. A slot with a
 * pending zero is zeroed once no other planned step pins it (no forward
 * may write it any more; an admitted step's later plan then sees zeros).
 * A rollback gives back the pending zeros its live plan took over. The
 * caller emitted the WAIT on this step's forward first, reserved a ZERO
 * per pinned slot and froze the list: the appends cannot fail. */
void rsp__step_unpin(rsp__core *c, uint32_t rec, bool rollback, rsp__work *w)
{
    rsp__steprec *s = &c->steps[rec];
    uint64_t bit = 1ull << rec;
    if (!s->plan_took && !c->pending && !c->zero_pendings) {
        /* No slot is pending release or has a pending zero anywhere, and
         * this step's plan took no zero over (no took_zero bit of rec):
         * only the marks and pins go. The usual steady step. */
        rsp__slot *slots = c->slots;
        const uint32_t *pinned = s->pinned;
        for (uint32_t i = 0; i < s->num_fslots; i++)
            slots[s->fslots[i]].fork_pins &= ~bit;
        for (uint32_t i = 0; i < s->num_post_slots; i++)
            slots[s->post_slots[i]].post_to &= ~bit;
        if (!rollback && rsp__same_may_linger(&c->same, &s->same, s->num_pinned)) {
            /* The pins (and the rows' writes bits) a same-declaration
             * admit of rec would set again: they linger (c->same.ghost)
             * until the next core call, which adopts or clears them. */
            RSP__ASSERT(c->same.ghost == RSP__NONE); /* cleared at this call's start */
            rsp__same_linger(&c->same, rec, s->num_pinned);
            c->fast.ghosts++;
            return;
        }
        for (uint32_t i = 0; i < s->num_pinned; i++) {
            slots[pinned[i]].pins &= ~bit;
            slots[pinned[i]].writes &= ~bit;
        }
        return;
    }
    uint64_t others = rsp__planned_mask(c) & ~bit;
    RSP__ASSERT(c->same.ghost == RSP__NONE); /* `!sl->pins` below reads every record's */
    for (uint32_t i = 0; i < s->num_fslots; i++)
        c->slots[s->fslots[i]].fork_pins &= ~bit;
    for (uint32_t i = 0; i < s->num_post_slots; i++)
        c->slots[s->post_slots[i]].post_to &= ~bit;
    for (uint32_t i = 0; i < s->num_pinned; i++) {
        rsp__slot *sl = &c->slots[s->pinned[i]];
        if (sl->took_zero & bit) {
            sl->took_zero &= ~bit;
            if (rollback && sl->state == RSP__SLOT_HELD) {
                rsp__zero_pending(c, sl, true); /* its forward's write does not count */
                rsp__holdings_changed(c);       /* a later plan takes the zero over */
            }
        }
        sl->writes &= ~bit;
        if (!(sl->pins & bit))
            continue;
        sl->pins &= ~bit;
        if (!sl->pins && sl->state == RSP__SLOT_PENDING) {
            RSP__ASSERT(c->pending > 0);
            c->pending--;
            rsp__slot_release(c, s->pinned[i], w);
        } else if (sl->zero_pending && sl->state == RSP__SLOT_HELD && !(sl->pins & others)) {
            rsp__zero_pending(c, sl, false);
            RSP__MUST_OK(rsp__work_zero(w, s->pinned[i]));
        }
    }
}

void rsp__step_free(rsp__core *c, uint32_t rec)
{
    rsp__steprec *s = &c->steps[rec];
    if (s->used)
        c->steps_used--;
    s->used = false;
    c->post_mask &= ~(1ull << rec);
    c->planned_bits &= ~(1ull << rec);
    s->num_journal = 0;
    s->num_pinned = 0;
    s->num_prows = 0;
    s->num_fslots = 0;
    RSP__ASSERT(s->num_ckrecs == 0); /* unpinned at its commit or rollback */
}

rsp_status rsp__step_check_marks(const rsp__core *c, const rsp_step *step, uint64_t others,
                                 rsp__mark mark, rsp_error *err)
{
    for (uint32_t i = 0; others && !step->capture && i < step->num_rows; i++) {
        const rsp_row *row = &step->rows[i];
        if (!rsp__row_addresses(row))
            continue;
        const rsp__req *r = rsp__req_find(c, row->rid);
        const rsp__hold *h = r ? rsp__hold_find_const(r, row->label) : NULL;
        const rsp__slot *s = h ? &c->slots[h->slot] : NULL;
        uint64_t m = s ? (mark == RSP__MARK_POST ? s->post_to : s->spec_to) & others : 0;
        if (!m)
            continue;
        const uint64_t by = c->steps[__builtin_ctzll(m)].step_id;
        return rsp__fail(err, RSP_EORDER,
                         "admit: step %" PRIu64 ": rows[%" PRIu32 "]: (rid %" PRIu64
                         ", label %s) %s step %" PRIu64 " in flight; commit step %" PRIu64 " first",
                         step->step_id, i, row->rid, c->label_names[row->label],
                         mark == RSP__MARK_POST
                             ? "is a post-fork target of"
                             : "takes per-token states accepted at the commit of",
                         by, by);
    }
    return RSP_OK;
}
