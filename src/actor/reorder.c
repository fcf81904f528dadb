/*
 * The actor's ordered delivery (actor.h, "Ordered delivery"): the reorder
 * heap and the gap timeout (O1). It reads a ticket's number, never its
 * payload: the transport knows no message kind.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "actor_impl.h"

#include <stdio.h>

/* The reorder heap: a binary min-heap of tickets by seq, [capacity]. */
static void heap_push(rsp__actor *a, rsp_ticket *t)
{
    RSP__ASSERT(a->num_held < a->capacity);
    uint32_t i = a->num_held++;
    while (i > 0 && a->held[(i - 1) / 2]->seq > t->seq) {
        a->held[i] = a->held[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    a->held[i] = t;
}

static rsp_ticket *heap_pop(rsp__actor *a)
{
    RSP__ASSERT(a->num_held > 0);
    rsp_ticket *top = a->held[0];
    rsp_ticket *t = a->held[--a->num_held];
    uint32_t i = 0, n = a->num_held;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && a->held[c + 1]->seq < a->held[c]->seq)
            c++;
        if (a->held[c]->seq >= t->seq)
            break;
        a->held[i] = a->held[c];
        i = c;
    }
    if (n)
        a->held[i] = t;
    return top;
}

/* Owner: answer every held ticket: RSP_ETIMEDOUT (the gap timed out) or
 * RSP_ESHUTDOWN (the owner stopped), naming the missing number. */
void rsp__reorder_refuse_held(rsp__actor *a, uint32_t *owed, rsp_status st)
{
    char why[RSP_ERROR_MAX];
    const unsigned long long next = rsp__load_relaxed_u64(&a->next_seq);
    if (st == RSP_ETIMEDOUT)
        snprintf(why, sizeof why,
                 "waiting for message %llu: it did not arrive within the reorder timeout "
                 "(%llu ms), so the pool is broken (ranks can no longer agree)",
                 next, (unsigned long long)(a->gap_ns / 1000000u));
    else
        snprintf(why, sizeof why, "the pool shut down while this message waited for message %llu",
                 next);
    while (a->num_held)
        rsp__actor_refuse(a, heap_pop(a), owed, st, why);
    a->gap_since = 0;
}

/* Owner: a ticket numbered next_seq was delivered; deliver the held ones
 * that follow it, refuse the held duplicates that come up, and publish the
 * new number (O1). */
static void release_held(rsp__actor *a, uint32_t *owed, bool *stopped)
{
    const uint64_t old = rsp__load_relaxed_u64(&a->next_seq); /* single writer */
    uint64_t next = old + 1;
    while (a->num_held && a->held[0]->seq <= next && !*stopped) {
        rsp_ticket *h = heap_pop(a);
        if (h->seq < next) {
            char why[RSP_ERROR_MAX];
            snprintf(why, sizeof why,
                     "msg->seq %llu is a duplicate: message %llu was already handled",
                     (unsigned long long)h->seq, (unsigned long long)h->seq);
            rsp__actor_refuse(a, h, owed, RSP_EORDER, why);
        } else {
            rsp__actor_deliver(a, h, owed, stopped);
            next++;
        }
    }
    /* O1: pairs with O2 in owner_waits_for: seq_cst RMW here, then the
     * seq_cst load of credit_waiters at the batch end (handle_batch). */
    rsp__fetch_add_seq_cst_u64(&a->next_seq, next - old);
    a->advanced = true;
    /* The gap of the new number starts now (if one is open). */
    a->gap_since = a->num_held ? rsp__now_ns() : 0;
}

/* Owner: a numbered ticket arrived (ordered, not given up). */
void rsp__reorder_arrive(rsp__actor *a, rsp_ticket *t, uint32_t *owed, bool *stopped)
{
    const uint64_t next = rsp__load_relaxed_u64(&a->next_seq); /* single writer */
    char why[RSP_ERROR_MAX];
    if (t->seq < next) {
        snprintf(why, sizeof why,
                 "msg->seq %llu was already handled (the pool waits for message %llu): a "
                 "duplicate or an old number",
                 (unsigned long long)t->seq, (unsigned long long)next);
        rsp__actor_refuse(a, t, owed, RSP_EORDER, why);
    } else if (t->seq > next) {
        if (a->num_held == a->capacity) { /* unreachable: credits bound it */
            snprintf(why, sizeof why, "msg->seq %llu: the reorder window is full",
                     (unsigned long long)t->seq);
            rsp__actor_refuse(a, t, owed, RSP_EFULL, why);
            return;
        }
        heap_push(a, t); /* keeps its credit until delivered */
        if (a->num_held == 1)
            a->gap_since = rsp__now_ns();
    } else {
        rsp__actor_deliver(a, t, owed, stopped);
        release_held(a, owed, stopped);
    }
}

/* Owner: the gap of next_seq stayed open for the timeout: tell the
 * handler's owner, answer every held ticket, stop ordering. */
void rsp__reorder_expire_gap(rsp__actor *a)
{
    if (a->cfg.on_gap)
        a->cfg.on_gap(a->cfg.ctx, rsp__load_relaxed_u64(&a->next_seq));
    a->order_off = true;
    uint32_t owed = 0;
    rsp__reorder_refuse_held(a, &owed, RSP_ETIMEDOUT);
    if (owed)
        wake_credit_waiters(a);
}
