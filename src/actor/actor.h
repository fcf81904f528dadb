/*
 * The actor: a bounded multi-producer inbox, one owner thread that drains it,
 * and the tickets through which callers get answers.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The actor is a transport: it moves opaque payloads and answers tickets.
 * A ticket carries a payload of N bytes that its poster wrote (allocated
 * with the ticket, in one block) and the reply; what the bytes mean is the
 * business of the poster and the handler (for a pool: src/msg.h, the wire
 * form of an rsp_msg, written by api.c and read by pool.c). The owner
 * thread calls the handler given at creation once per message, in inbox
 * order, and answers the message's ticket with the reply the handler
 * filled in. Messages posted by one thread are handled in the order posted
 * (the inbox is FIFO and a thread's enqueues are sequential). The one
 * thing the transport itself knows about a message is whether it is the
 * last (rsp__actor_close): the owner stops after it.
 *
 * Synchronisation table (which operation needs outside synchronisation
 * against which):
 *
 *   operation                      | may run concurrently with
 *   -------------------------------+---------------------------------------
 *   rsp__actor_post                | everything except _destroy
 *   rsp__actor_close               | everything except _destroy (idempotent)
 *   rsp__ticket_wait / _forget     | everything; one caller per ticket, once
 *   rsp__actor_depth / _handled    | everything except _destroy
 *   rsp__actor_post_call           | everything except _destroy
 *   rsp__actor_destroy             | nothing (after every poster stopped)
 *   handler and the other callbacks| one holder of the owner's role at a
 *                                  | time: the owner thread, or a caller
 *                                  | in rsp__actor_post_call
 *
 * Inbox: liburcu's wfcqueue (wait-free enqueue). The owner is its only
 * consumer and drains it with the non-blocking splice, never a *_blocking
 * call (those sleep 10 ms when a producer is preempted mid-enqueue). It is
 * bounded by credits: a post takes one credit or fails with RSP_EFULL (or
 * waits up to its timeout); the owner gives the credit back when it takes
 * the message out of the queue.
 *
 * Wake-up: a futex word and the announce / full fence / re-check protocol of
 * liburcu's call_rcu thread (pairs F1/F2 in owner.c and inbox.c, docs/ordering.md).
 * Before sleeping, the owner and ticket waiters spin for as long as their
 * kind of wait usually takes, learned (spin.h), unless the partner shares
 * their CPU or such spins kept failing.
 */
#ifndef RSP_ACTOR_ACTOR_H
#define RSP_ACTOR_ACTOR_H

#include <rsp/rsp.h>

typedef struct rsp__actor rsp__actor;

/*
 * The owner's per-message callback. payload: the size bytes its poster
 * wrote, aligned for any object; the handler may read and rewrite them (the
 * ticket is the actor's, nobody else touches it until the answer) but not
 * keep a pointer into them past its return. reply arrives zeroed (for a
 * message nobody waits for, only reply->error's status and message: nobody
 * reads the rest) and the handler sets reply->error (status RSP_OK on
 * success) and whatever else the message answers. Owner thread only.
 * The last message (rsp__actor_close) is passed to the handler too; the
 * owner stops right after answering it.
 */
typedef void (*rsp__actor_handler)(void *ctx, void *payload, size_t size, rsp_reply *reply);

typedef struct rsp__actor_config {
    uint32_t capacity;            /* messages queued at most; 0 = 4096 */
    uint32_t spin_max;            /* owner's idle spin before it sleeps, in ns;
                                   * 0 = 50 us. Tests set 1 to make the owner
                                   * sleep at once. */
    rsp__actor_handler handle;    /* required */
    void *ctx;                    /* passed to every callback */
    void (*on_start)(void *ctx);  /* optional: first thing on the owner thread */
    void (*on_stop)(void *ctx);   /* optional: last thing on the owner thread */
    void (*on_idle)(void *ctx);   /* optional: the owner found its inbox empty
                                   * after its spin and is about to sleep */
    void (*lent_idle)(void *ctx); /* optional: a lent call is about to give
                                   * the role back (rsp__actor_post_call) */
    /* Pin the owner thread to CPU `cpu` (checked first with
     * rsp__actor_check_cpu; a failure to pin is RSP_EINVAL, nothing made). */
    bool pin;
    int cpu;
    /* Let rsp__actor_post_call run a call on its caller's thread while
     * the owner sleeps (see there). Ignored when ordered. */
    bool inline_calls;
    /* Ordered delivery (see "Ordered delivery" below). */
    bool ordered;
    uint64_t reorder_timeout_ns; /* longest wait for a missing number; 0 = 1 s */
    /* Ordered: the number `missing` has not arrived within the timeout.
     * Called on the owner thread before the waiting messages are answered
     * RSP_ETIMEDOUT; from then on the actor delivers every message as it
     * arrives (the handler is expected to refuse them: the pool breaks).
     * Optional. */
    void (*on_gap)(void *ctx, uint64_t missing);
    /* optional: a message nobody will read the answer of (fire-and-forget,
     * or a ticket forgotten before its answer) failed; called on the owner
     * thread with its payload and reply, after the handler, before the
     * ticket is released. Counted in rsp__actor_unwaited_failures. */
    void (*on_failure)(void *ctx, const void *payload, size_t size, const rsp_reply *reply);
    /* optional: publish what the handler defers per message (the pool: the
     * gauges it mirrors for lock-free readers). Called on the owner thread
     * once some message was handled since the last call: before the answer
     * of a kept ticket (so its waiter sees the effects of everything handled
     * before it) and at the end of each batch (so a stream of
     * fire-and-forget messages pays it once a batch, not once a message). */
    void (*settle)(void *ctx);
} rsp__actor_config;

/*
 * Ordered delivery (cfg.ordered). A ticket may carry a number
 * (rsp__ticket_set_seq; 0 = none). The owner delivers numbered tickets to
 * the handler in number order, starting at 1, whatever order they arrive
 * in: an early one waits in a reorder heap of `capacity` entries (made at
 * create) and keeps its credit until delivered, so the inbox capacity
 * bounds the queued and waiting tickets together; a post whose number is
 * the one the owner waits for takes no credit when none is free (else it
 * could wait for a credit held by the tickets waiting for it). A number
 * already delivered is answered RSP_EORDER at once (a duplicate of a
 * waiting one when its number comes up), without the handler. Unnumbered
 * tickets are delivered on arrival. A gap that stays open for the timeout
 * (counted from the first ticket that waits for it): on_gap, then every
 * waiting ticket is answered RSP_ETIMEDOUT ("waiting for message N"), and
 * ordering ends. When the last message is delivered, the tickets still
 * waiting are answered RSP_ESHUTDOWN. Unordered actors ignore numbers, and
 * an ordered one whose tickets arrive in order holds nothing.
 */

/* Whether cpu may be a CPU to pin the owner thread to: between 0 and
 * CPU_SETSIZE and below the machine's configured CPUs; otherwise RSP_EINVAL
 * naming it. (A CPU outside the cpuset of the process passes this and is
 * refused by rsp__actor_create, also RSP_EINVAL naming it.) Any thread. */
rsp_status rsp__actor_check_cpu(int cpu, rsp_error *err);

/* The CPU the owner thread is allowed to run on when it is allowed exactly
 * one, else -1 (for tests of pinning). Any thread; a syscall. */
int rsp__actor_pinned_cpu(const rsp__actor *a);

/* Allocate the inbox and start the owner thread. Nothing is left allocated
 * on failure (RSP_ENOMEM). Any thread. */
rsp_status rsp__actor_create(const rsp__actor_config *cfg, rsp__actor **out, rsp_error *err);

/*
 * A new ticket with room for a payload of size bytes, in the same block;
 * *payload receives where it starts (aligned for any object). The caller
 * writes the payload before posting the ticket. Returns NULL when out of
 * memory. Any thread. Cost: none when the calling thread's spare ticket
 * (the last one it gave back) holds size bytes, else one allocation.
 */
rsp_ticket *rsp__ticket_new(size_t size, void **payload);

/*
 * Like rsp__ticket_new, for a message that will be posted to a WITHOUT
 * keeping the ticket (fire-and-forget): a small one is taken from a's pool
 * of recycled tickets, which the owner refills when it releases them (no
 * malloc/free per message). a NULL: same as rsp__ticket_new. Such a ticket
 * must not be kept (it returns to a's pool, and a's destroy frees the pool).
 * Any thread. Cost: a double-width CAS, or one allocation.
 */
rsp_ticket *rsp__actor_ticket_new(rsp__actor *a, size_t size, void **payload);

/*
 * Let t's message hold a reference to obj (e.g. a host fence the message
 * names): drop(obj) runs exactly once, on the owner thread right after the
 * handler returned for it (or after its RSP_ESHUTDOWN answer), before the
 * answer is published; or on the posting thread when the post is refused
 * (RSP_EFULL, RSP_ETIMEDOUT, RSP_ESHUTDOWN); or in rsp__ticket_discard.
 * Call before posting t. The poster's thread; O(1).
 */
void rsp__ticket_hold(rsp_ticket *t, void (*drop)(void *), void *obj);

/* Number t for ordered delivery (an ordered actor; 0 = unnumbered). Call
 * before posting t. The poster's thread; O(1). */
void rsp__ticket_set_seq(rsp_ticket *t, uint64_t seq);

/* Free a ticket that was never posted (dropping what it holds). */
void rsp__ticket_discard(rsp_ticket *t);

/*
 * Queue t (from rsp__ticket_new, payload written). keep: the caller keeps a
 * reference and will pass t to rsp__ticket_wait once; otherwise the reply
 * is dropped. timeout_ns bounds the wait for credit when the inbox is full
 * (0: fail at once with RSP_EFULL; UINT64_MAX: forever). On failure t is
 * freed and err says why (RSP_EFULL, RSP_ETIMEDOUT, RSP_ESHUTDOWN).
 * Any thread, concurrently. Cost: a credit CAS, one wait-free enqueue, a
 * full fence, and a futex wake only if the owner sleeps.
 */
rsp_status rsp__actor_post(rsp__actor *a, rsp_ticket *t, bool keep, uint64_t timeout_ns,
                           rsp_error *err);

/*
 * rsp__actor_post(a, t, keep = true, ...) for a caller that waits for the
 * answer at once (rsp__ticket_wait next, as for any kept ticket). When the
 * actor lends the owner's role (cfg.inline_calls, not ordered), t is
 * unnumbered, the inbox is open and the owner sleeps, the caller takes the
 * role (K1) and does the owner's work on its own thread: first whatever
 * the inbox holds (so a thread's earlier posts are handled before this
 * call), then t; it gives the role back (K2) and wakes the owner only if
 * messages arrived meanwhile. t is answered when this returns. The
 * handler, settle, on_failure and lent_idle then run on the caller's
 * thread (never on_start, on_stop, on_gap or on_idle: what an idle owner
 * does waits for its next idle, or lent_idle does it); the owner thread
 * stays asleep.
 * Otherwise, and when the owner is awake, it posts t; an owner whose last
 * answer was such a call's parks at once instead of spinning, so that the
 * caller's next call (usually microseconds later) takes the role rather
 * than a round trip to a spinning owner. A close waits for
 * a caller holding the role (S1), so the last message is never handled
 * on a caller's thread.
 * Any thread, concurrently. Cost: a load when the owner is awake (then
 * rsp__actor_post's); else an RMW, a CAS, the handler, a release store,
 * a full fence and a futex wake if the inbox filled meanwhile.
 */
rsp_status rsp__actor_post_call(rsp__actor *a, rsp_ticket *t, uint64_t timeout_ns, rsp_error *err);

/*
 * Stop accepting posts (later posts: RSP_ESHUTDOWN) and queue a last
 * message behind everything already posted; the owner handles all of it,
 * then stops. t: the last message (kept as by _post; it takes no credit, so
 * it gets in even when the inbox is full), or NULL for the actor's own stop
 * marker, which stops the owner without reaching the handler. Returns
 * RSP_ESHUTDOWN (t freed) if the actor was already closed. Waits for posts
 * in progress to finish enqueuing, which is what guarantees nothing is
 * queued behind the last message.
 * Any thread.
 */
rsp_status rsp__actor_close(rsp__actor *a, rsp_ticket *t, bool keep, rsp_error *err);

/* Whether close has begun. Any thread, O(1). */
bool rsp__actor_closed(const rsp__actor *a);

/*
 * Wait for a ticket's answer: timeout_ns 0 polls (RSP_EAGAIN), UINT64_MAX
 * waits forever, otherwise RSP_ETIMEDOUT when it expires; in those cases the
 * ticket stays valid. On an answer, copies the reply (if reply != NULL),
 * consumes the ticket and returns the reply's status.
 * The thread holding the ticket; cost: a PAUSE spin for about twice as long
 * as this thread's answers usually take (learned, at most 50 us; none when
 * the owner last ran on this CPU or such spins kept failing: then a spin
 * of up to 50 us yielding the CPU after 0.5 us, or none if the post woke
 * the owner), then a futex wait.
 */
rsp_status rsp__ticket_wait(rsp_ticket *t, uint64_t timeout_ns, rsp_reply *reply);

/*
 * Give up a kept ticket without waiting (instead of rsp__ticket_wait): the
 * caller's reference is dropped; the ticket is freed now if answered, else
 * by the owner once it answers. A failure answered after the forget is
 * counted (rsp__actor_unwaited_failures) and reported (on_failure) like a
 * fire-and-forget one. The thread holding the ticket, once; O(1).
 */
void rsp__ticket_forget(rsp_ticket *t);

/* Messages queued and not yet taken by the owner (capacity minus free
 * credits; a credit returns when the owner dequeues its message, before
 * the answer). Any thread, O(1), relaxed. */
uint32_t rsp__actor_depth(const rsp__actor *a);
/* Messages handled so far; messages nobody read the answer of
 * (fire-and-forget, or forgotten before the answer) whose status was not
 * RSP_OK. Any thread, O(1), relaxed. */
uint64_t rsp__actor_handled(const rsp__actor *a);
uint64_t rsp__actor_unwaited_failures(const rsp__actor *a);
/* Times the owner went to sleep on its futex; whether it has announced
 * sleep now (a caller may hold its role meanwhile); calls a caller ran in
 * the owner's role (rsp__actor_post_call). For tests of the wake-up
 * protocol. Any thread, relaxed. */
uint64_t rsp__actor_sleeps(const rsp__actor *a);
bool rsp__actor_asleep(const rsp__actor *a);
uint64_t rsp__actor_lent_calls(const rsp__actor *a);

/*
 * Close (if not yet), join the owner, answer anything left with
 * RSP_ESHUTDOWN, free. Call from one thread after every poster stopped.
 * Not from the owner thread. NULL is a no-op.
 */
void rsp__actor_destroy(rsp__actor *a);

#endif
