/* The device work list (work.h). SPDX-License-Identifier: Apache-2.0 */
#include "work.h"

#include <stdlib.h>
#include <string.h>

#include "util/assert.h"
#include "util/mem.h"
#include "work_impl.h"

void rsp__work_init(rsp__work *w)
{
    memset(w, 0, sizeof *w);
}

void rsp__work_fini(rsp__work *w)
{
    free(w->ops);
    free(w->slots);
    free(w->pairs);
    free(w->read_mark);
    free(w->write_mark);
    memset(w, 0, sizeof *w);
}

void rsp__work_clear(rsp__work *w)
{
    w->num_ops = 0;
    w->num_slots = 0;
    w->num_pairs = 0;
}

bool rsp__work_empty(const rsp__work *w)
{
    return w->num_ops == 0;
}

/* rsp__grow() for an append: a frozen list must already have the room. */
static rsp_status room(const rsp__work *w, void **arr, uint32_t *cap, uint64_t need, size_t size)
{
    RSP__ASSERT(!w->frozen || need <= *cap);
    return rsp__grow(arr, cap, need, size);
}

rsp_status rsp__work_reserve(rsp__work *w, uint32_t ops, uint32_t slots, uint32_t pairs)
{
    if (rsp__grow((void **)&w->ops, &w->cap_ops, (uint64_t)w->num_ops + ops, sizeof *w->ops) ||
        rsp__grow((void **)&w->slots, &w->cap_slots, (uint64_t)w->num_slots + slots,
                  sizeof *w->slots) ||
        rsp__grow((void **)&w->pairs, &w->cap_pairs, (uint64_t)w->num_pairs + pairs,
                  sizeof *w->pairs))
        return RSP_ENOMEM;
    return RSP_OK;
}

/* Start a new COPY stamp for op and mark its pairs with it. O(pairs in op). */
static void copy_restamp(rsp__work *w, rsp__op *op)
{
    op->stamp = ++w->next_stamp;
    for (uint32_t i = 0; i < op->count; i++) {
        const rsp__copy *p = &w->pairs[op->first + i];
        w->read_mark[p->src] = op->stamp;
        w->write_mark[p->dst] = op->stamp;
    }
}

void rsp__work_mark_take(const rsp__work *w, rsp__work_mark *m)
{
    m->num_ops = w->num_ops;
    m->num_slots = w->num_slots;
    m->num_pairs = w->num_pairs;
    if (w->num_ops)
        m->last = w->ops[w->num_ops - 1];
    else
        memset(&m->last, 0, sizeof m->last);
}

void rsp__work_mark_restore(rsp__work *w, const rsp__work_mark *m)
{
    w->num_ops = m->num_ops;
    w->num_slots = m->num_slots;
    w->num_pairs = m->num_pairs;
    if (m->num_ops) {
        w->ops[m->num_ops - 1] = m->last;
        /* Marks of the dropped ops may have overwritten this op's: re-mark
         * it under a fresh stamp so a later pair cannot join it wrongly. */
        if (m->last.kind == RSP__OP_COPY)
            copy_restamp(w, &w->ops[m->num_ops - 1]);
    }
}

static rsp__op *push_op(rsp__work *w, rsp__op_kind kind)
{
    if (room(w, (void **)&w->ops, &w->cap_ops, (uint64_t)w->num_ops + 1, sizeof *w->ops))
        return NULL;
    rsp__op *op = &w->ops[w->num_ops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    return op;
}

rsp_status rsp__work_wait(rsp__work *w, const rsp_event *event)
{
    rsp__op *op = push_op(w, RSP__OP_WAIT);
    if (!op)
        return RSP_ENOMEM;
    op->event = *event;
    return RSP_OK;
}

rsp_status rsp__work_zero(rsp__work *w, uint32_t slot)
{
    if (room(w, (void **)&w->slots, &w->cap_slots, (uint64_t)w->num_slots + 1, sizeof *w->slots))
        return RSP_ENOMEM;
    rsp__op *last = w->num_ops ? &w->ops[w->num_ops - 1] : NULL;
    /* Merge into the previous ZERO: zeroing is idempotent and unordered
     * within one op, so one batched launch does them all. */
    if (!last || last->kind != RSP__OP_ZERO || last->first + last->count != w->num_slots) {
        last = push_op(w, RSP__OP_ZERO);
        if (!last)
            return RSP_ENOMEM;
        last->first = w->num_slots;
    }
    w->slots[w->num_slots++] = slot;
    last->count++;
    return RSP_OK;
}

/* Can (src -> dst) join `op` without changing the result of running its pairs
 * as one unordered batch? Not if dst is read or written by another pair, or
 * src is written by another pair. O(1): every pair of op carries op's stamp
 * in the marks of its slots. */
static bool copy_fits(const rsp__work *w, const rsp__op *op, uint32_t src, uint32_t dst)
{
    return w->write_mark[dst] != op->stamp && w->read_mark[dst] != op->stamp &&
           w->write_mark[src] != op->stamp;
}

/* Room in the marks for slot ids up to max_slot; new entries hold stamp 0,
 * which no op has. */
static rsp_status marks_reserve(rsp__work *w, uint32_t max_slot)
{
    if (max_slot < w->cap_marks)
        return RSP_OK;
    RSP__ASSERT(!w->frozen);
    uint32_t old = w->cap_marks;
    uint32_t cap = old;
    if (rsp__grow((void **)&w->read_mark, &cap, (uint64_t)max_slot + 1, sizeof *w->read_mark))
        return RSP_ENOMEM;
    cap = old;
    if (rsp__grow((void **)&w->write_mark, &cap, (uint64_t)max_slot + 1, sizeof *w->write_mark))
        return RSP_ENOMEM;
    memset(w->read_mark + old, 0, (size_t)(cap - old) * sizeof *w->read_mark);
    memset(w->write_mark + old, 0, (size_t)(cap - old) * sizeof *w->write_mark);
    w->cap_marks = cap;
    return RSP_OK;
}

rsp_status rsp__work_reserve_marks(rsp__work *w, uint32_t num_slots)
{
    return num_slots ? marks_reserve(w, num_slots - 1) : RSP_OK;
}

rsp_status rsp__work_copy(rsp__work *w, uint32_t src, uint32_t dst)
{
    if (src == dst)
        return RSP_OK; /* copying a slot onto itself changes nothing */
    uint32_t hi = src > dst ? src : dst;
    /* The room is there (a reserved list, or a steady one): no calls. */
    if ((w->num_pairs >= w->cap_pairs || hi >= w->cap_marks) &&
        (room(w, (void **)&w->pairs, &w->cap_pairs, (uint64_t)w->num_pairs + 1, sizeof *w->pairs) ||
         marks_reserve(w, hi)))
        return RSP_ENOMEM;
    rsp__op *last = w->num_ops ? &w->ops[w->num_ops - 1] : NULL;
    /* A chain (a->b, b->c) must see b's new contents: start a new COPY op,
     * which the device runs after the previous one. */
    if (!last || last->kind != RSP__OP_COPY || last->first + last->count != w->num_pairs ||
        !copy_fits(w, last, src, dst)) {
        last = push_op(w, RSP__OP_COPY);
        if (!last)
            return RSP_ENOMEM;
        last->first = w->num_pairs;
        last->stamp = ++w->next_stamp;
    }
    w->pairs[w->num_pairs].src = src;
    w->pairs[w->num_pairs].dst = dst;
    w->num_pairs++;
    last->count++;
    w->read_mark[src] = last->stamp;
    w->write_mark[dst] = last->stamp;
    return RSP_OK;
}

rsp_status rsp__work_buffer(rsp__work *w, uint32_t buffer, uint32_t capacity)
{
    rsp__op *op = push_op(w, RSP__OP_BUFFER);
    if (!op)
        return RSP_ENOMEM;
    op->buffer = buffer;
    op->capacity = capacity;
    return RSP_OK;
}

rsp_status rsp__work_upload(rsp__work *w, uint32_t buffer, const int32_t *slot_indices,
                            const bool *has_state, uint32_t count)
{
    rsp__op *op = push_op(w, RSP__OP_UPLOAD);
    if (!op)
        return RSP_ENOMEM;
    op->buffer = buffer;
    op->count = count;
    op->slot_indices = slot_indices;
    op->has_state = has_state;
    return RSP_OK;
}
