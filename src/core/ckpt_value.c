/*
 * The value policy's heaps (ckpt_value.h). SPDX-License-Identifier:
 * Apache-2.0
 */
#include "ckpt_value.h"

/* Whether record a goes before record b: lower score, then lower seq (the
 * list's order, which breaks every tie: seqs are distinct). */
static bool before(const rsp__core *c, uint32_t a, uint32_t b)
{
    const rsp__ckrec *x = &c->ck[a], *y = &c->ck[b];
    return x->score < y->score || (x->score == y->score && x->seq < y->seq);
}

static void place(rsp__core *c, rsp__tier *t, uint32_t pos, uint32_t rec)
{
    t->heap[pos] = rec;
    c->ck[rec].hpos = pos;
}

/* Move the entry at pos up or down until the heap order holds. */
static void fix(rsp__core *c, rsp__tier *t, uint32_t pos)
{
    uint32_t rec = t->heap[pos];
    while (pos > 0 && before(c, rec, t->heap[(pos - 1) / 2])) {
        place(c, t, pos, t->heap[(pos - 1) / 2]);
        pos = (pos - 1) / 2;
    }
    for (;;) {
        uint32_t l = 2 * pos + 1, m = pos;
        uint32_t best = rec;
        if (l < t->heap_n && before(c, t->heap[l], best))
            m = l, best = t->heap[l];
        if (l + 1 < t->heap_n && before(c, t->heap[l + 1], best))
            m = l + 1, best = t->heap[l + 1];
        if (m == pos)
            break;
        place(c, t, pos, best);
        pos = m;
    }
    place(c, t, pos, rec);
}

/* Record k's score: its seq plus its value per byte in uses, times f = 1
 * + floor(log2(restores)): the first restore, its own request's
 * continuation, adds nothing; each doubling after it one value more. */
static double score(const rsp__core *c, const rsp__ckrec *k)
{
    double f = k->restores ? (double)(32 - __builtin_clz(k->restores)) : 1.0;
    return (double)k->seq + c->ck_weight_byte * f * (double)k->value;
}

void rsp__ckv_sync(rsp__core *c, uint32_t i, bool want)
{
    rsp__ckrec *k = &c->ck[i];
    rsp__tier *t = &c->tiers[k->tier];
    k->score = score(c, k);
    if (k->hpos == RSP__NONE && want) {
        RSP__ASSERT(t->heap_n < t->size);
        place(c, t, t->heap_n++, i);
        fix(c, t, k->hpos);
    } else if (k->hpos != RSP__NONE && !want) {
        uint32_t pos = k->hpos, last = t->heap[--t->heap_n];
        k->hpos = RSP__NONE;
        if (last != i) {
            place(c, t, pos, last);
            fix(c, t, pos);
        }
    } else if (k->hpos != RSP__NONE) {
        fix(c, t, k->hpos);
    }
}
