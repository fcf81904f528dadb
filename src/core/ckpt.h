/*
 * Checkpoints (docs/design.md "Checkpoints and the host tier"): the
 * records, the tiers' free stacks and LRU lists, the key table, taking,
 * evicting and demoting, and what a step does with them (restores pinned
 * at admit and copied in at its live plan, takes marked at the plan and
 * done at commit). Above core.c (requests, holdings, slots), below step
 * records and everything above. SPDX-License-Identifier: Apache-2.0
 *
 * Checkpoint record i stands for slot id max_slots + i (core_impl.h
 * rsp__ckrec). Every function here runs on the core's caller (the owner
 * thread, or a test), like core.h. Orders come from the LRU lists and
 * the declarations, never from the key table (core_impl.h).
 */
#ifndef RSP_CORE_CKPT_H
#define RSP_CORE_CKPT_H

#include "core_impl.h"

/* The record of key, RSP__NONE when no checkpoint is stored under it.
 * O(1) expected. */
static inline uint32_t rsp__ck_find(const rsp__core *c, uint64_t key)
{
    _Static_assert(RSP__MAP_EMPTY == RSP__NONE, "the key table's empty value is RSP__NONE");
    return rsp__map_get(&c->keys, key);
}

/* Pinned: a step in flight restores from it, or the caller pinned it. */
static inline bool rsp__ck_pinned(const rsp__ckrec *k)
{
    return k->step_pins || k->user_pins;
}

/* What one take will do, decided before anything changes
 * (rsp__ck_take_check) and done by rsp__ck_take_apply. */
typedef struct rsp__take {
    uint32_t replace;     /* the key's record now (freed first); RSP__NONE */
    uint32_t victim;      /* the tier's record evicted for room; RSP__NONE */
    bool demote;          /* the victim moves to the host tier instead */
    uint32_t host_victim; /* demote: the host record evicted for it; RSP__NONE */
} rsp__take;

/* Can key be taken into tier now? RSP_EPINNED (the key exists and is
 * pinned), RSP_ECAPACITY (no free slot and every checkpoint of the tier
 * pinned); *t says how. Changes nothing. O(1), plus O(pinned records of
 * the tier) when it has to look for a victim. */
rsp_status rsp__ck_take_check(const rsp__core *c, uint64_t key, rsp_tier tier, rsp__take *t,
                              rsp_error *err);

/* Do the take *t (rsp__ck_take_check said OK just before): free the
 * replaced record, evict (or demote) the victim, pop a slot of tier and
 * copy request slot src into it (no planned step pins src, so its zero is
 * not pending), record the key, fill the report. The caller reserved 2
 * ops, 2 pairs and the COPY marks of every id in a frozen list, and the
 * report's room (rsp__ck_report_reserve: 4 changes, 2 evictions). Cannot
 * fail. O(1). */
void rsp__ck_take_apply(rsp__core *c, uint64_t key, rsp_tier tier, const rsp__take *t, uint32_t src,
                        rsp__work *w);

/* Slots tier t can give now: free ones plus unpinned checkpoints it may
 * evict. O(records of t). */
uint32_t rsp__ck_room(const rsp__core *c, rsp_tier t);
/* A slot of tier t for other use (a swapped request's state): a free one,
 * else the least recently used unpinned checkpoint's, evicted (reported,
 * never demoted). The caller checked rsp__ck_room and reserved the report
 * (1 change, 1 eviction per call). Cannot fail. */
uint32_t rsp__ck_slot_for(rsp__core *c, rsp_tier t);

/* Store key on slot, a slot of tier that rsp__ck_slot_for gave and
 * whose bytes are the checkpoint's: an unpinned checkpoint under key is
 * freed first (a drop, as a take's replacement), and key becomes the
 * tier's most recent use. The caller checked that key is not pinned and
 * reserved the report (2 changes). Cannot fail. O(1). */
void rsp__ck_store(rsp__core *c, uint64_t key, rsp_tier tier, uint32_t slot);

/* Room in the report for that many more changes, evictions and skips.
 * RSP_ENOMEM: the report is as it was. */
rsp_status rsp__ck_report_reserve(rsp__core *c, uint64_t changes, uint64_t evictions,
                                  uint64_t skips);

/* --- steps --------------------------------------------------------------- */

/* Every restore of step names a stored key (RSP_ENOKEY naming it and the
 * entry). O(restores). */
rsp_status rsp__ck_check_restores(const rsp__core *c, const rsp_step *step, rsp_error *err);
/* Room in record s for pins of n more checkpoint records. */
rsp_status rsp__ck_reserve_pins(rsp__steprec *s, uint32_t n);
/* Pin each restore's record for step record rec (once per record: a
 * re-admit or a plan pins nothing twice). Keys were checked, the pins
 * reserved: cannot fail. O(restores). */
void rsp__ck_pin_restores(rsp__core *c, const rsp_step *step, uint32_t rec);
/* Drop every checkpoint pin of record rec (commit, rollback). O(its pins). */
void rsp__ck_unpin_step(rsp__core *c, uint32_t rec);

/* A live plan of record rec: refuse (RSP_EORDER, "commit step N first",
 * nothing changed) a restore into a slot, or a take from a slot, that
 * another planned, uncommitted step pins (its forward may be writing it).
 * Keys checked (RSP_ENOKEY). Only for a step that declares restores or
 * takes (the caller asks). O(restores + checkpoints + max_inflight). */
rsp_status rsp__ck_plan_check(rsp__core *c, const rsp_step *step, uint32_t rec, rsp_error *err);
/* The live plan's restores, before its pre-forks: copy each checkpoint
 * into its row's slot (has_state true, a new generation), pinned for rec,
 * touched. The caller reserved a COPY op and a pair per restore, the
 * marks, the record's pins, and froze the list. O(restores). */
void rsp__ck_apply_restores(rsp__core *c, const rsp_step *step, uint32_t rec, rsp__work *w);
/* Mark the sources of rec's declared takes in fork_pins (after
 * rsp__mark_post_forks; the caller reserved the fslots): a later live plan
 * addressing them is refused until rec commits. O(checkpoints). */
void rsp__ck_mark_takes(rsp__core *c, const rsp_step *step, uint32_t rec);
/* At rec's commit, after the WAIT and its writes, before its post-forks:
 * each declared take, or a skip in the report (its holding gone, or not
 * the one rec's plan addressed any more, i.e. reset, forked into or
 * re-created during the step, so the forward's state is not there:
 * RSP_ENOREQ; its slot pinned by another planned step in `others`:
 * RSP_EORDER; the key pinned: RSP_EPINNED; no room: RSP_ECAPACITY). The
 * caller reserved per take what rsp__ck_take_apply needs and a skip.
 * Cannot fail. O(checkpoints x rows). */
void rsp__ck_commit_takes(rsp__core *c, const rsp_step *step, uint32_t rec, uint64_t others,
                          rsp__work *w);

#endif
