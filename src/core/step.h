/*
 * Step records (core_impl.h rsp__steprec): finding and reserving them,
 * pins, the journal of fresh holdings, the rows last validated for a
 * record, and ending a record. Above core.c (requests, holdings, slots),
 * below forks, addressing and the operations.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_CORE_STEP_H
#define RSP_CORE_STEP_H

#include <stddef.h>
#include <string.h>

#include "core_impl.h"

/* Step record index of step_id, RSP__NONE if none is in flight.
 * O(max_inflight). */
uint32_t rsp__step_find(const rsp__core *c, uint64_t step_id);

/* What a later step may not name while an in-flight step is to replace a
 * holding's bytes at its commit (docs/semantics.md 9.1): a post-fork
 * target (rsp__slot.post_to) or a holding that accepts per-token states
 * (rsp__slot.spec_to). */
typedef enum rsp__mark { RSP__MARK_POST, RSP__MARK_SPEC } rsp__mark;

/* The first row of step naming a holding whose slot carries a `mark` of a
 * record in `others` (record bits; the caller leaves its own out):
 * RSP_EORDER naming the row, the holding and the step to commit first;
 * nothing changed. O(rows) when others is not 0. */
rsp_status rsp__step_check_marks(const rsp__core *c, const rsp_step *step, uint64_t others,
                                 rsp__mark mark, rsp_error *err);

/* rsp__valid_row starts like rsp_row, so (rid, label, span) compare as 16 bytes
 * (no padding inside them). */
_Static_assert(offsetof(rsp_row, rid) == offsetof(rsp__valid_row, rid) &&
                   offsetof(rsp_row, label) == offsetof(rsp__valid_row, label) &&
                   offsetof(rsp_row, span) == offsetof(rsp__valid_row, span) &&
                   offsetof(rsp_row, span) + sizeof(int32_t) == 16 && offsetof(rsp_row, label) == 8,
               "rsp__valid_row must start like rsp_row");

/* padding and skip_post_forks compare as the 2 bytes after them. */
_Static_assert(offsetof(rsp_row, padding) == 16 && offsetof(rsp_row, skip_post_forks) == 17 &&
                   offsetof(rsp__valid_row, padding) == 16 &&
                   offsetof(rsp__valid_row, skip_post_forks) == 17,
               "rsp__valid_row keeps padding and skip_post_forks where rsp_row has them");

/* Are step's rows the ones last validated for record s (rsp__step_keep_rows)?
 * Compared field by field, no hashing. A row that says skip_post_forks is
 * never the same (the record's rows keep false there): so a commit whose
 * rows are the same knows no rid skips its post-forks without looking, at
 * no cost per row, and one whose rows say skip validates them again.
 * fork_group is not compared (a grouped step collects and checks its
 * groups on every call: fork.h). Inline: every admit, plan and commit of
 * a steady step runs it over all rows. O(rows). */
static inline bool rsp__step_same_rows(rsp__core *c, rsp__steprec *s, const rsp_step *step)
{
    if (s->num_valid_rows != step->num_rows)
        return false;
    if (!step->num_rows)
        return true;
    /* One block first (the steady step: the caller passes the same array
     * again); rows equal as bytes are equal field by field. */
    if (rsp__same_has(&c->same, &s->same, RSP__SAME_RAW) &&
        memcmp(step->rows, s->raw, (size_t)step->num_rows * sizeof *s->raw) == 0)
        return true;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *a = &step->rows[i];
        const rsp__valid_row *b = &s->valid_rows[i];
        if (memcmp(a, b, 18) != 0 || a->per_token_states != b->per_token_states)
            return false;
    }
    return true;
}

/* rsp__step_same_rows of record rec, remembered for the address of the
 * rows while the caller keeps them fixed (rsp__core_rows_fixed): the
 * commit, admit and plan of one RSP_MSG_STEP compare them once. O(rows),
 * O(1) remembered. */
static inline bool rsp__step_rows_same(rsp__core *c, uint32_t rec, const rsp_step *step)
{
    if (rsp__same_rows_known(&c->same, step->rows, step->num_rows, rec))
        return true;
    if (!rsp__step_same_rows(c, &c->steps[rec], step))
        return false;
    rsp__same_rows_found(&c->same, step->rows, step->num_rows, rec);
    return true;
}

/* Validate a declaration (check.h, then duplicate rows, then the rows the
 * checkpoint declarations name: each a row with span > 0, no (rid, label)
 * restored twice, no key taken twice, no take into a tier without slots;
 * O(rows) only for a step that declares any). same: its rows
 * are the ones last validated for its record (rsp__step_same_rows), so
 * the row checks are skipped (labels are never removed: rows valid once
 * stay valid) and only the O(forks) checks run again, in the same order,
 * so every error is the one a full validation gives. O(rows + forks),
 * O(forks) when same; O(1) for the declaration at the address validated
 * last while the caller keeps its arrays fixed (rsp__core_rows_fixed: the
 * plan of one RSP_MSG_STEP validates what its admit did). */
rsp_status rsp__step_validate(rsp__core *c, const rsp_step *step, bool same, rsp_error *err);

/* Validate a step that may be in flight (plan, commit): *rec gets its
 * record (RSP__NONE: not in flight) and *same whether its rows are the
 * record's validated ones, then rsp__step_validate. */
rsp_status rsp__step_revalidate(rsp__core *c, const rsp_step *step, uint32_t *rec, bool *same,
                                rsp_error *err);

/* Keep step's rows in record s as the rows last validated (plan and commit
 * get the same rows again and skip the checks); the previous rows' hints
 * stay where the rows are unchanged (checked on use), and the kept forking
 * rids go unless same. RSP_ENOMEM: nothing changed. */
rsp_status rsp__step_keep_rows(rsp__core *c, uint32_t rec, const rsp_step *step, bool same);

/* Room in s for the forks, takes and restores of step's declaration
 * (rsp__step_keep_decl). RSP_ENOMEM: nothing changed. O(1). */
rsp_status rsp__step_reserve_decl(rsp__steprec *s, const rsp_step *step);
/* Keep them, as the admitted declaration a commit is checked against (its
 * rows are the record's raw rows). Room was reserved. O(forks + decls). */
void rsp__step_keep_decl(rsp__steprec *s, const rsp_step *step);
/* A commit names what its step admitted (docs/semantics.md 9.2): the same rows
 * (rid, label, span, padding, fork group; skip_post_forks is the commit's
 * own choice), forks, checkpoint takes and restores. RSP_EINVAL naming
 * the first difference. same: the rows are the record's
 * (rsp__step_rows_same). O(forks + decls), O(rows) unless same. */
rsp_status rsp__step_check_commit(const rsp__core *c, uint32_t rec, const rsp_step *step, bool same,
                                  rsp_error *err);

/* Room for `journal` more fresh holdings and `pins` more pins in s. */
rsp_status rsp__step_reserve(rsp__steprec *s, uint32_t journal, uint32_t pins);
/* Room for a live plan's rows and post-fork slots (replaces, not appends). */
rsp_status rsp__step_reserve_plan(rsp__steprec *s, uint32_t rows, uint32_t fslots);

/* Pin `slot` for step record rec (idempotent). The caller reserved room in
 * the record's pin list (rsp__step_reserve). O(1). */
static inline void rsp__pin(rsp__core *c, uint32_t rec, uint32_t slot)
{
    uint64_t bit = 1ull << rec;
    if (c->slots[slot].pins & bit)
        return;
    c->slots[slot].pins |= bit;
    rsp__steprec *s = &c->steps[rec];
    RSP__ASSERT(s->num_pinned < s->cap_pinned);
    s->pinned[s->num_pinned++] = slot;
}

/* Give r a fresh holding of label for record rec, journaled (rollback
 * undoes it). The caller reserved the slot, the journal entry and any
 * spill array: cannot fail. O(1). */
rsp__hold *rsp__step_take_fresh(rsp__core *c, uint32_t rec, rsp__req *r, rsp_label_id label);

/* Drop rec's pins, in pin order (deterministic); the caller emitted the
 * WAIT on the step's forward first and reserved the work room. See
 * step.c. O(pinned). */
void rsp__step_unpin(rsp__core *c, uint32_t rec, bool rollback, rsp__work *w);

/* Mark record rec free. Its buffers and a stage built for it are the
 * caller's to give back first (addr.h). O(1). */
void rsp__step_free(rsp__core *c, uint32_t rec);

#endif
