/*
 * Core-private helpers of the work list (work.h): error-path truncation and
 * up-front reservation. SPDX-License-Identifier: Apache-2.0
 *
 * Single caller (the core), like work.h.
 */
#ifndef RSP_CORE_WORK_IMPL_H
#define RSP_CORE_WORK_IMPL_H

#include "work.h"

/* Where the list stood on entry to a core call. Appending only ever adds ops
 * or grows the last op (merging), so the counts plus a copy of the last op
 * are enough to put the list back exactly. */
typedef struct rsp__work_mark {
    uint32_t num_ops, num_slots, num_pairs;
    rsp__op last;
} rsp__work_mark;

/* Record the current end of the list. O(1). */
void rsp__work_mark_take(const rsp__work *w, rsp__work_mark *m);
/* Put the list back to the mark (error paths). O(1). */
void rsp__work_mark_restore(rsp__work *w, const rsp__work_mark *m);

/* Make room for `ops` more ops, `slots` more zero slots and `pairs` more copy
 * pairs, so the appends that follow cannot fail. RSP_ENOMEM on failure (the
 * list is unchanged). Amortised O(1); no allocation once warm. */
rsp_status rsp__work_reserve(rsp__work *w, uint32_t ops, uint32_t slots, uint32_t pairs);
/* Make room in the COPY conflict marks for slot ids below num_slots, so
 * rsp__work_copy cannot fail on them. RSP_ENOMEM on failure (nothing
 * changed). O(num_slots) once, then O(1). */
rsp_status rsp__work_reserve_marks(rsp__work *w, uint32_t num_slots);

/* rsp__work_copy, with its usual case inline: the pair joins the last
 * op, a COPY with room in the list and the marks, conflicting with none of
 * its pairs (what rsp__work_copy does then, without a call). */
static inline rsp_status rsp__work_copy_in(rsp__work *w, uint32_t src, uint32_t dst)
{
    rsp__op *last = w->num_ops ? &w->ops[w->num_ops - 1] : NULL;
    if (src == dst || !last || last->kind != RSP__OP_COPY ||
        last->first + last->count != w->num_pairs || w->num_pairs >= w->cap_pairs ||
        src >= w->cap_marks || dst >= w->cap_marks || w->write_mark[dst] == last->stamp ||
        w->read_mark[dst] == last->stamp || w->write_mark[src] == last->stamp)
        return rsp__work_copy(w, src, dst);
    w->pairs[w->num_pairs].src = src;
    w->pairs[w->num_pairs].dst = dst;
    w->num_pairs++;
    last->count++;
    w->read_mark[src] = last->stamp;
    w->write_mark[dst] = last->stamp;
    return RSP_OK;
}

/* Between rsp__work_freeze and rsp__work_thaw every append must fit what
 * was reserved: the core freezes the list when it starts changing state,
 * after which nothing may fail. Debug and sanitizer builds assert it. */
static inline void rsp__work_freeze(rsp__work *w)
{
    w->frozen = true;
}
static inline void rsp__work_thaw(rsp__work *w)
{
    w->frozen = false;
}

#endif
