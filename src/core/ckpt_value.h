/*
 * The value policy of the checkpoint tiers (docs/design.md, "The value
 * policy"): per tier a binary min-heap of its unpinned records keyed by
 * (score, seq), score = seq + weight x f x value / slot_bytes, f = 1 +
 * floor(log2(restores)) (1 before the second restore: a frequency count
 * in GreedyDual-Size-Frequency's spirit, logged so that a once-popular
 * prefix cannot stay for good). seq only grows (a push to a list head),
 * so a score is fixed between a record's uses: recency ages with no
 * re-sort. Under weight 0 the key is seq alone, the list's order: the
 * victims of LRU. Used by ckpt.c only, and only when c->ck_value. Every
 * function runs on the core's caller, cannot fail and allocates nothing
 * (the heaps are sized at create: one entry a record).
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_CORE_CKPT_VALUE_H
#define RSP_CORE_CKPT_VALUE_H

#include "core_impl.h"

/* Record i's place follows its state: in its tier's heap iff `in` (the
 * caller's rule: used and unpinned), at the key of its current seq,
 * value and restores. ckpt.c calls it after a take, a use (a restore
 * counted first), a pin or unpin, a value and a free. The heaps are
 * allocated with the tiers (core.c). O(log n). */
void rsp__ckv_sync(rsp__core *c, uint32_t i, bool in);

/* The unpinned record of tier t with the lowest (score, seq), RSP__NONE
 * when every record is pinned or none is stored. O(1). */
static inline uint32_t rsp__ckv_victim(const rsp__core *c, rsp_tier t)
{
    const rsp__tier *tr = &c->tiers[t];
    return tr->heap_n ? tr->heap[0] : RSP__NONE;
}

#endif
