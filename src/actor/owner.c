/*
 * The actor's owner thread: drain the inbox, deliver, answer (T1), sleep
 * and wake (F1), its learned spins.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "actor_impl.h"

#include <string.h>
#include <time.h>

#include <urcu/compiler.h>

#include "util/error.h"
#include "util/hb.h"

/* Owner: publish the reply and wake the waiter. Returns whether the waiter
 * slept (and was woken). */
RSP__HOT bool ticket_answer(rsp__actor *a, rsp_ticket *t)
{
    /* Nobody will read this answer: a fire-and-forget message, or a kept
     * ticket whose waiter gave it up (rsp__ticket_forget) before now: its
     * reference is gone, only ours is left (T4: acquire, pairs with the
     * forget's acq_rel drop). A forget racing with this answer may miss
     * it: its caller dropped the status itself. */
    const bool unread = !t->kept || rsp__load_acquire_u32(&t->refs) == 1;
    /* Answered once: the owner's reference is still here, and a kept
     * ticket's waiter may hold the other. */
    RSP__ASSERT(t->kept ? rsp__load_relaxed_u32(&t->refs) - 1u < 2u : t->refs == 1u);
    if (unread && t->reply.error.status != RSP_OK) {
        /* Single writer (the owner): a relaxed read-modify-write is exact. */
        rsp__store_relaxed_u64(&a->unwaited_failures,
                               rsp__load_relaxed_u64(&a->unwaited_failures) + 1);
        if (a->cfg.on_failure)
            a->cfg.on_failure(a->cfg.ctx, (unsigned char *)t + RSP__PAYLOAD_OFFSET, t->size,
                              &t->reply);
    }
    if (!t->kept) {
        /* Fire-and-forget: the owner holds the only reference since the
         * post (the poster does not touch t after its enqueue) and nobody
         * waits on the state: no swap, no reference RMW. */
        RSP__ASSERT(t->state == RSP__TICKET_PENDING);
        rsp__ticket_release(t);
        return false;
    }
    /* T1: pairs with T2 in rsp__ticket_wait. Release: the reply writes
     * above are visible to whoever reads DONE with T2. The old value tells
     * us whether to wake; the waiter's PENDING -> SLEEPING CAS is on this
     * same word, so atomicity alone decides which came first (no other
     * order needed). */
    uint32_t old = rsp__swap_release_u32(&t->state, RSP__TICKET_DONE);
    RSP__ASSERT(old == RSP__TICKET_PENDING || old == RSP__TICKET_SLEEPING);
    if (old == RSP__TICKET_SLEEPING)
        rsp__futex_wake_all(&t->state); /* our reference keeps t alive here */
    ticket_unref(t);
    return old == RSP__TICKET_SLEEPING;
}

/* A producer is between its tail exchange and its link store: give it the
 * CPU, harder the longer it takes (it may have been preempted). */
static void backoff(unsigned *tries)
{
    unsigned n = (*tries)++;
    if (n < 64) {
        rsp__cpu_relax();
    } else if (n < 256) {
        sched_yield();
    } else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

/* spin_until's test for the owner. */
static bool inbox_nonempty(void *a)
{
    return !cds_wfcq_empty(&((rsp__actor *)a)->head, &((rsp__actor *)a)->tail);
}

/* The owner's role given up, by the owner before it sleeps or by a caller
 * whose lent call is done; the one place the token goes back to PARKED.
 * Returns true when a message was queued meanwhile and the role went to
 * the owner again (AWAKE): the owner then does not sleep, and a caller
 * wakes it.
 *   K2: release, pairs with K1 (a caller's CAS in lend, inbox.c) and K3
 *       (the owner's acquire): this holder's owner-state writes happen
 *       before the next holder's.
 *   F1: pairs with F2 in enqueue_and_wake. Orders the store of `sleeping`
 *       before the emptiness re-check (store->load: only a full fence does
 *       that, the re-check being liburcu's loads): either a poster's load
 *       sees PARKED and wakes the owner, or this re-check sees its message.
 *   K3: the CAS to AWAKE is acq_rel (a caller may have taken the role
 *       meanwhile: then it fails, and that caller re-checks on its way out). */
static bool give_up_role(rsp__actor *a)
{
    rsp__store_release_u32(&a->sleeping, RSP__OWNER_PARKED);
    rsp__fence_full();
    return !cds_wfcq_empty(&a->head, &a->tail) &&
           rsp__cas_acq_rel_u32(&a->sleeping, RSP__OWNER_PARKED, RSP__OWNER_AWAKE);
}

static void owner_wait(rsp__actor *a, int kind, bool spin_ok, uint64_t *budget_out, bool *seen);

/* Owner: note the CPU it runs on, for the posters' shared-core check. */
static void note_owner_cpu(rsp__actor *a)
{
    const int32_t c = this_cpu();
    if (c != (int32_t)rsp__load_relaxed_u32((uint32_t *)&a->owner_cpu_now))
        rsp__store_relaxed_u32((uint32_t *)&a->owner_cpu_now, (uint32_t)c); /* a hint */
}

/* The owner's wait for its next message, then learning how long it took. */
static void owner_idle(rsp__actor *a)
{
    const int kind = a->woke_waiter ? RSP__WAIT_OWNER_WOKE : RSP__WAIT_OWNER;
    /* The last answer was a synchronous call's that could not take the
     * role (we were awake): park at once, so that its caller's next call,
     * which usually follows within microseconds, runs in the role instead
     * of waiting for a spinning owner's answer. Nothing learned: no spin. */
    const bool park = a->park_now;
    a->park_now = false;
    const uint64_t start = rsp__now_ns();
    uint64_t budget = 0;
    bool seen = false;
    owner_wait(a, kind, !park, &budget, &seen);
    if (!park)
        learn_wait(&a->owner_spin[kind], budget, seen, rsp__now_ns() - start, a->spin_ns);
    note_owner_cpu(a);
}

/* Spin for as long as the next message usually takes (learned, spin.h)
 * unless the last waiter we answered runs on our CPU or such spins kept
 * failing; then as before: spin yielding unless a waiter was just woken.
 * Then F1: announce sleep, full fence, re-check, sleep. *budget and *seen:
 * the learned spin's budget (0: none) and whether it saw a message.
 * !spin_ok: no spin at all. */
static void owner_wait(rsp__actor *a, int kind, bool spin_ok, uint64_t *budget_out, bool *seen)
{
    /* In the fallback, no spin if an answer woke its waiter: that thread is
     * likely queued on this core (wake-affine), and our spin would hold it
     * off. */
    const bool spin = !a->woke_waiter;
    a->woke_waiter = false;
    /* Ordered, with a gap open: wake up when it times out. */
    uint64_t deadline = RSP__NO_DEADLINE;
    if (a->num_held && a->gap_ns < RSP__NO_DEADLINE - a->gap_since) /* else: never */
        deadline = a->gap_since + a->gap_ns;
    uint64_t budget = spin_ok ? a->spin_ns : 0;
    if (deadline != RSP__NO_DEADLINE) {
        uint64_t now = rsp__now_ns();
        if (now >= deadline)
            return;
        if (deadline - now < budget)
            budget = deadline - now;
    }
    const bool shared = a->partner_cpu >= 0 && a->partner_cpu == this_cpu();
    const uint64_t learned = learned_budget(&a->owner_spin[kind], budget, shared);
    *budget_out = learned;
    if (learned) {
        if ((*seen = spin_pure(inbox_nonempty, a, learned)))
            return;
    } else if (spin && spin_until(inbox_nonempty, a, budget)) {
        return;
    }
    if (a->cfg.on_idle)
        a->cfg.on_idle(a->cfg.ctx);

    /* A caller may take the role once it is given up: then wait for it
     * like a sleep (the loop below). */
    if (give_up_role(a))
        return;
    /* Single writer (the owner): a relaxed read-modify-write is exact. */
    rsp__store_relaxed_u64(&a->sleeps, rsp__load_relaxed_u64(&a->sleeps) + 1);
    /* The futex compares: a producer that woke us before we got here
     * makes this return at once. A caller holding the role (LENT) gives
     * it back as PARKED and wakes us only if a message came meanwhile. */
    for (;;) {
        /* K3: pairs with K2 (the last holder's release store of PARKED;
         * the poster's or caller's CAS to AWAKE is acq_rel, so the chain
         * holds without release sequences). */
        const uint32_t s = rsp__load_acquire_u32(&a->sleeping);
        if (s == RSP__OWNER_AWAKE)
            return;
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel)) {
            /* The gap timed out (ordered: never lent, so PARKED): awake
             * again. A poster's CAS that wins the race wakes us as well. */
            RSP__ASSERT(s == RSP__OWNER_PARKED);
            if (rsp__cas_acq_rel_u32(&a->sleeping, RSP__OWNER_PARKED, RSP__OWNER_AWAKE))
                return;
            continue;
        }
        rsp__futex_wait(&a->sleeping, s, rel);
    }
}

RSP__HOT void handle_one(rsp__actor *a, rsp_ticket *t)
{
    if (t->kept) {
        memset(&t->reply, 0, sizeof t->reply);
    } else {
        /* Nobody reads the reply of a fire-and-forget message but its
         * status (unwaited_failures): zeroing the other 450 bytes cost 9%
         * of a message, and the cache lines travel back to the next poster
         * of this recycled ticket. */
        t->reply.error.status = RSP_OK;
        t->reply.error.message[0] = '\0';
    }
    if (t->stop_only)
        return; /* the actor's own stop marker: nothing to hand over */
    a->cfg.handle(a->cfg.ctx, (unsigned char *)t + RSP__PAYLOAD_OFFSET, t->size, &t->reply);
    a->unsettled = true;
    /* Single writer (the owner): a relaxed read-modify-write is exact. */
    rsp__store_relaxed_u64(&a->handled, rsp__load_relaxed_u64(&a->handled) + 1);
}

/* Owner: cfg.settle, once per run of handled messages (before a kept
 * answer, at a batch end). */
static void settle(rsp__actor *a)
{
    if (a->unsettled) {
        a->unsettled = false;
        if (a->cfg.settle)
            a->cfg.settle(a->cfg.ctx);
    }
}

/* Owner: what ends a message's life: the held reference goes before the
 * answer (H1), so a caller that saw the answer sees it gone. */
RSP__HOT void finish(rsp__actor *a, rsp_ticket *t)
{
    a->park_now = t->call && a->lend; /* the last answer's, see owner_idle */
    if (t->kept) {
        a->partner_cpu = t->cpu;
        settle(a); /* its waiter sees everything handled before its answer */
    }
    ticket_drop_hold(t);
    if (ticket_answer(a, t))
        a->woke_waiter = true;
}

/* Owner: the message has left the inbox (and the reorder heap): its
 * credit goes back before it is answered, so a caller that saw the answer
 * sees the credit. The last message (queued by close) and an ordered
 * post that passed without one (O2) took none. */
RSP__HOT void return_credit(rsp__actor *a, rsp_ticket *t, uint32_t *owed)
{
    if (t->credited && give_credit(a) && ++*owed >= a->wake_threshold) {
        wake_credit_waiters(a);
        *owed = 0;
    }
}

/* Owner: hand t to the handler (refused once the owner stopped: unreachable
 * by S1/S2, answered anyway so that no waiter can hang), then answer it. */
RSP__HOT void deliver(rsp__actor *a, rsp_ticket *t, uint32_t *owed, bool *stopped)
{
    return_credit(a, t, owed);
    if (*stopped) {
        memset(&t->reply, 0, sizeof t->reply);
        rsp__fail(&t->reply.error, RSP_ESHUTDOWN, "the pool shut down before this message");
    } else {
        handle_one(a, t);
        *stopped = t->last;
    }
    finish(a, t);
}

/* deliver, out of line, for ordered delivery (reorder.c): the unordered
 * loop (handle_batch) keeps it inlined. */
void rsp__actor_deliver(rsp__actor *a, rsp_ticket *t, uint32_t *owed, bool *stopped)
{
    deliver(a, t, owed, stopped);
}

/* Owner: answer t with st and why, without the handler. */
void rsp__actor_refuse(rsp__actor *a, rsp_ticket *t, uint32_t *owed, rsp_status st, const char *why)
{
    return_credit(a, t, owed);
    memset(&t->reply, 0, sizeof t->reply);
    rsp__fail(&t->reply.error, st, "%s", why);
    finish(a, t);
}

/* Handle everything in the local queue. Returns true once the last
 * message (the one close queued) was handled. */
static bool handle_batch(rsp__actor *a, struct __cds_wfcq_head *lh, struct cds_wfcq_tail *lt,
                         bool stopped)
{
    unsigned tries = 0;
    uint32_t owed = 0; /* credits given back since the last wake of their waiters */
    for (;;) {
        struct cds_wfcq_node *node = __cds_wfcq_dequeue_nonblocking(lh, lt);
        if (node == NULL)
            break;
        if (node == CDS_WFCQ_WOULDBLOCK) {
            backoff(&tries);
            continue;
        }
        tries = 0;
        rsp_ticket *t = caa_container_of(node, rsp_ticket, node);
        rsp__hb_acquire(t); /* I1 (TSan mirror) */
        if (t->seq && a->held && !a->order_off && !stopped) {
            rsp__reorder_arrive(a, t, &owed, &stopped);
        } else {
            deliver(a, t, &owed, &stopped);
        }
        if (stopped && a->num_held)
            rsp__reorder_refuse_held(a, &owed, RSP_ESHUTDOWN);
    }
    settle(a);
    /* O1: after the seq_cst RMW of next_seq, a seq_cst load: a poster that
     * waits for credit may hold the number the owner now waits for. */
    if (owed || (a->advanced && rsp__load_seq_cst_u32(&a->credit_waiters) != 0))
        wake_credit_waiters(a);
    a->advanced = false;
    return stopped;
}

/* Splice the shared inbox into a local queue and handle it; returns false
 * when the inbox was empty. */
bool rsp__actor_drain(rsp__actor *a, bool *stopped)
{
    struct __cds_wfcq_head lh;
    struct cds_wfcq_tail lt;
    __cds_wfcq_init(&lh, &lt);
    unsigned tries = 0;
    enum cds_wfcq_ret r;
    while ((r = __cds_wfcq_splice_nonblocking(&lh, &lt, &a->head, &a->tail)) ==
           CDS_WFCQ_RET_WOULDBLOCK)
        backoff(&tries);
    if (r == CDS_WFCQ_RET_SRC_EMPTY)
        return false;
    *stopped = handle_batch(a, &lh, &lt, *stopped);
    return true;
}

/* The caller's half of a lent role (K1 taken in lend, inbox.c). */
void rsp__actor_run_lent(rsp__actor *a, rsp_ticket *t)
{
    /* FIFO with this thread's earlier posts: they are in the inbox (the
     * owner sleeps, so it took nothing since), handled first. The last
     * message is never there: close waits for us (S1). */
    bool stopped = false;
    rsp__actor_drain(a, &stopped);
    RSP__ASSERT(!stopped);
    /* t never entered the inbox: only its waiter's reference, and no
     * credit taken. */
    t->kept = true;
    t->refs = 1;
    t->credited = false;
    handle_one(a, t);
    settle(a); /* the caller sees the gauges of everything it handled */
    ticket_drop_hold(t);
    /* Single writer (the role holder): a relaxed read-modify-write is exact. */
    rsp__store_relaxed_u64(&a->lent_calls, rsp__load_relaxed_u64(&a->lent_calls) + 1);
    /* Read by this thread's own rsp__ticket_wait: no order needed. */
    rsp__store_relaxed_u32(&t->state, RSP__TICKET_DONE);
    /* The role goes back to sleep: the idle work a lent call owes (the
     * owner's on_idle would wait for its next wake-up). */
    if (a->cfg.lent_idle)
        a->cfg.lent_idle(a->cfg.ctx);

    /* Posters that saw LENT did not wake the owner: if one queued a
     * message meanwhile, the role is the owner's again, and it is woken. */
    if (give_up_role(a))
        rsp__futex_wake(&a->sleeping, 1);
}

void *rsp__actor_owner_main(void *arg)
{
    rsp__actor *a = arg;
    note_owner_cpu(a);
    if (a->cfg.on_start)
        a->cfg.on_start(a->cfg.ctx);
    bool stopped = false;
    while (!stopped) {
        if (!rsp__actor_drain(a, &stopped))
            owner_idle(a);
        if (a->num_held && rsp__now_ns() - a->gap_since >= a->gap_ns)
            rsp__reorder_expire_gap(a);
    }
    if (a->cfg.on_stop)
        a->cfg.on_stop(a->cfg.ctx);
    return NULL;
}
