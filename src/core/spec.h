/*
 * Per-token states for speculative decoding (docs/semantics.md 9.3,
 * docs/design.md "Per-token states"): the output slots a step record holds
 * for its per-token rows, their index tensor in a plan, and the accept by
 * relabel at commit. Above step records, below the operations (admit.c,
 * plan.c, commit.c call in at their phases).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_CORE_SPEC_H
#define RSP_CORE_SPEC_H

#include "step.h"

/* Output slots step's rows ask for (0 for a capture: its rows are
 * dummies). O(rows). */
uint64_t rsp__spec_slots_of(const rsp_step *step);

/* Admit, validate: no addressing row names a holding that an in-flight
 * step other than rec accepts per-token states into at its commit
 * (RSP_EORDER naming both, nothing changed); a re-admit of record rec in
 * flight keeps its output slots, and its per-token rows are the first
 * admit's (rid, label, span) in order, some perhaps dropped (RSP_EINVAL
 * naming the first that is not). O(rows) while such a step is in flight or the
 * record has per-token rows, else O(1). */
rsp_status rsp__spec_admit_check(const rsp__core *c, const rsp_step *step, uint32_t rec, bool fresh,
                                 rsp_error *err);

/* Admit, reserve: room in record s for step's per-token rows and output
 * slots (its pins are the caller's). RSP_ENOMEM: nothing changed. */
rsp_status rsp__spec_reserve(rsp__steprec *s, const rsp_step *step);

/* Admit, apply (fresh record, after the rows' and forks' holdings):
 * pop, pin and record the output slots of each per-token row, and mark
 * its holding's slot. Everything was reserved: cannot fail. O(rows +
 * output slots). */
void rsp__spec_apply(rsp__core *c, const rsp_step *step, uint32_t rec);

/* Plan, validate: the plan's per-token rows are admitted ones, in order,
 * some perhaps dropped (RSP_EINVAL naming the first that is not); a
 * dropped one accepts nothing at commit. O(rows). */
rsp_status rsp__spec_plan_check(const rsp__core *c, const rsp_step *step, uint32_t rec,
                                rsp_error *err);

/* Plan, count (after the vector lengths): per label (c->label_order,
 * lengths[li]) the index tensor's width and buffer in c->picks. Without a
 * lease: 1 + the largest per-token span, no buffer. Under a lease: the
 * key's tensor buffer's fixed width if it has one (a wider per-token row:
 * RSP_ECAPACITY "lease too small", nothing changed), else 1 + the largest
 * span its rows ask, capture rows included, and a buffer to create when
 * that is above 1. same: step's rows are record rec's (rsp__step_rows_same).
 * O(rows + labels x buffers); O(labels x buffers) when same and none of
 * the rows asks for per-token states. */
rsp_status rsp__spec_widths(rsp__core *c, const rsp_step *step, bool same, uint32_t rec,
                            const uint32_t *lengths, rsp_error *err);

/* Plan, reserve (after rsp__choose_buffers): ids from `next` on for the
 * tensor buffers the plan creates; returns how many. O(labels). */
uint32_t rsp__spec_number(rsp__core *c, uint32_t next);

/* Plan, reserve: int32 entries of the index tensors of the plan's labels
 * (c->label_order, lengths[li], the widths of rsp__spec_widths) beyond
 * their slot_indices, and room for them in a. RSP_ENOMEM: a's contents
 * kept. O(labels). */
rsp_status rsp__spec_plan_reserve(rsp__core *c, rsp__addr *a, const uint32_t *lengths,
                                  uint64_t *entries);

/* Plan, apply (after the vectors are built): each label's spec_width and
 * spec_indices in a (spec_buffer RSP__NONE until rsp__spec_bind); a live
 * plan records each per-token row's generation (the commit accepts only
 * into the holding it addressed). Cannot fail. O(rows + entries). */
void rsp__spec_fill(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec, bool live);

/* Plan, apply (after rsp__bind_and_upload): under a lease, bind each
 * label's tensor buffer to record rec, creating it, and upload the
 * tensor (indices only) behind the vectors. The records and work room
 * were reserved: cannot fail. O(labels). */
void rsp__spec_bind(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec, rsp__work *w);

/* Commit, apply (after the WAIT, before the rows' writes are recorded,
 * the takes and the post-forks): per per-token row with accepted count a >= 1 whose
 * holding is the one planned, output slot a becomes the holding's slot,
 * has_state true, a new generation; every slot let go (the old one, the
 * other output slots, all of them with a = 0) goes pending under the
 * record's pin, so rsp__step_unpin zeroes and frees it. O(output slots). */
void rsp__spec_commit(rsp__core *c, const rsp_step *step, uint32_t rec);
/* After the commit recorded its rows' writes: a row that accepted 0
 * tokens on the planned holding keeps the has_state it had (the forward
 * wrote only output slots). O(per-token rows). */
void rsp__spec_keep_flags(rsp__core *c, uint32_t rec);

/* Rollback, apply (after the WAIT, before the journal is undone): free
 * the output slots newest first, so the free stack ends as before the
 * admit. Work room was reserved. O(output slots). */
void rsp__spec_rollback(rsp__core *c, uint32_t rec, rsp__work *w);

/* The record's marks go (commit or rollback). O(per-token rows). */
void rsp__spec_end(rsp__core *c, uint32_t rec);

#endif
