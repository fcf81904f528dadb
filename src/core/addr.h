/*
 * Addressing and buffers (docs/semantics.md 4.3, 4.4): the vectors a plan
 * builds, the addressing buffers they are uploaded to (eager rings, leased
 * keys), and the stage (at most one staged plan, core_impl.h). Above forks (a
 * stage's flags follow the deferred pre-forks), below the operations.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_CORE_ADDR_H
#define RSP_CORE_ADDR_H

#include "fork.h"

/* Room in a for `entries` vector entries and `gens` generations (replaces,
 * not appends). RSP_ENOMEM: a's contents are kept. */
rsp_status rsp__addr_reserve(rsp__addr *a, uint64_t entries, uint64_t gens);

/* The vector buffer of leased key (l, label), RSP__NONE if none (its index
 * tensor's buffer is spec.c's). O(buffers). */
uint32_t rsp__lease_find(const rsp__core *c, const rsp_lease *l, rsp_label_id label);

/* Room for `more` buffer records. RSP_ENOMEM: nothing changed. */
rsp_status rsp__bufs_reserve(rsp__core *c, uint32_t more);

/* Give back the buffers step record rec owns (its plan, live or staged).
 * O(buffers). */
void rsp__bufs_release(rsp__core *c, uint32_t rec);

/* Decide the buffer of each label of a plan (c->label_order, lengths),
 * before anything changes. A buffer owned by record `freed` counts as
 * free: its stage ends before the buffers are bound. Fills c->picks;
 * returns how many buffers it creates. O(labels x buffers). */
uint32_t rsp__choose_buffers(rsp__core *c, const rsp_step *step, const uint32_t *lengths,
                             uint32_t freed);

/* Fill a's vectors per docs/semantics.md 4.4 for the labels in c->label_order
 * and pin what they address for record rec; a live plan (not staged) records
 * its rows (prows) and takes pending zeros over (returns whether it took any).
 * The caller reserved a, the pins and the prows. Cannot fail. O(rows +
 * entries). */
bool rsp__build(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec, bool staged,
                const uint32_t *lengths);

/* Bind each label's chosen buffer (c->picks) to record rec, creating or
 * growing it, and upload a's vectors. The caller reserved the buffer
 * records and the work room and froze the list: cannot fail. O(labels). */
void rsp__bind_and_upload(rsp__core *c, rsp__addr *a, const rsp_step *step, uint32_t rec,
                          rsp__work *w);

/* Does the live addressing equal the stage's (labels, rows, lengths,
 * vectors, per-token tensors, and for a lease the buffer of its key)?
 * O(entries). */
bool rsp__same_addressing(const rsp__core *c, const rsp__addr *live, const rsp__addr *stage,
                          const rsp_step *step);

/* End the stage (there is one) for reason `why`; *out (may be NULL) gets
 * the report (core.h). Its buffers go back to the ring, except at a
 * promotion, where they now hold the live plan. O(buffers). */
void rsp__stage_drop(rsp__core *c, rsp__stage_end why, rsp__stage_change *out);

#endif
