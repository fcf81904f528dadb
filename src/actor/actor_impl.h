/*
 * The actor's private state: the structs its files share, the helpers both
 * sides of a wait use, and the functions one file calls in another.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The files of src/actor/, one job each:
 *
 *   actor.c    create (pinning), destroy
 *   ticket.c   tickets: the pooled ones, the spare, waiting, forgetting
 *   inbox.c    the inbox and its credits, posting, close
 *   owner.c    the owner loop: drain, deliver, answer, its learned spins
 *   reorder.c  ordered delivery: the reorder heap (numbers, no message kind)
 *
 * Synchronises-with pairs of the actor (listed in docs/ordering.md):
 *
 *   I1  message hand-off. Producer: writes the ticket (payload included), then
 *       cds_wfcq_enqueue (full barrier before the enqueue). Owner: splice
 *       and dequeue read the link with a dependency. liburcu guarantees
 *       "content written into the node before enqueue is consistent".
 *   F1/F2  lost wake-up. Owner F1: store sleeping = 1, full fence, re-check
 *       the queue. Producer F2: enqueue, full fence, load sleeping. Either
 *       the owner's re-check sees the node, or the producer sees the
 *       announcement and wakes it (both fences are store->load orderings;
 *       without either one the two loads can both miss).
 *   C1/C2  credit wake-up. Waiter C1: waiters += 1 (seq_cst RMW), snapshot
 *       the epoch (acquire), re-check credits (seq_cst load). Owner C2:
 *       credits += 1 (seq_cst RMW), load waiters (seq_cst); if any, bump the
 *       epoch (release) and wake, at once or deferred to a quarter of the
 *       capacity later or the end of the batch. Same store->load shape as
 *       F1/F2, made with seq_cst RMW + seq_cst load on both sides; the futex
 *       compares the epoch, so a wake between check and sleep is not lost,
 *       and a deferred one only late.
 *   S1/S2  close. Poster S1: posting += 1 (seq_cst RMW), load closed
 *       (seq_cst). Closer S2: CAS closed 0 -> 1 (seq_cst), then wait for
 *       posting == 0 (seq_cst loads; the poster's decrement is seq_cst, so
 *       also release). Either the poster sees closed, or the closer sees
 *       the poster and waits for its enqueue: nothing is ever queued behind
 *       the last message (close).
 *   T1/T2  answer. Owner T1: writes the reply, then swaps state to DONE
 *       (release RMW). Waiter T2: load-acquire state == DONE, then reads the
 *       reply.
 *   T3  ticket free: each side drops its reference with an acq_rel RMW; the
 *       last one frees, after the other side's last access (its release
 *       half orders this side's reads of the reply before the drop, its
 *       acquire half orders the free after the other side's drop).
 *   T4  forget (rsp__ticket_forget): the waiter's T3 drop without a wait.
 *       Owner, before T1: load-acquire refs == 1 (only its own left) means
 *       the answer is unread: counted and reported like a fire-and-forget
 *       failure. A forget after that load is not seen: its caller dropped
 *       the answer itself.
 *   H1  held reference (rsp__ticket_hold): set by the poster before I1,
 *       dropped by the owner after the handler and before T1 (or by the
 *       poster itself when the post is refused).
 *   K1/K2/K3  the owner's role lent to a caller (rsp__actor_post_call).
 *       The word `sleeping` is also the token of the owner's role: AWAKE
 *       (the owner thread holds it), PARKED (nobody: the owner sleeps),
 *       LENT (a caller holds it and runs the handler). Whoever gives the
 *       role up stores PARKED with release (K2: the owner before it
 *       sleeps, a caller when its call is done); whoever takes it reads
 *       that store with acquire (K1: a caller's CAS PARKED -> LENT; K3: the
 *       owner's load of AWAKE after its sleep, written by a poster's or a
 *       caller's acq_rel CAS PARKED -> AWAKE). So every owner-only field
 *       (the handler's state included) is written by one holder at a time,
 *       each after the previous holder's last access.
 *
 * Every atomic here is an __atomic builtin (util/sync.h), which TSan sees:
 * only the edges through liburcu's queue (I1) and Concurrency Kit's
 * ck_stack (the pooled tickets) are told to it by hand (hb.h).
 */
#ifndef RSP_ACTOR_ACTOR_IMPL_H
#define RSP_ACTOR_ACTOR_IMPL_H

#include "actor.h"

#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stddef.h>

#include <ck_stack.h>
#include <urcu/wfcqueue.h>

#include "spin.h"
#include "util/assert.h"
#include "util/mem.h"
#include "util/sync.h"
#include "util/time.h"

#define RSP__ACTOR_DEFAULT_CAPACITY 4096u
#define RSP__CACHELINE 64
/* The owner's per-message path (handle_one, ticket_answer, finish,
 * return_credit, deliver) is inlined into its batch loop: as calls they
 * add a visible share to a small message's cost (bench/profile.sh
 * ingest-rsp). */
#define RSP__HOT static inline __attribute__((always_inline))
/* The owner's role (the word `sleeping`, K1-K3): the owner thread runs;
 * it announced sleep and nobody holds the role; a caller holds it
 * (rsp__actor_post_call). "Owner only" fields below are the holder's. */
enum {
    RSP__OWNER_AWAKE = 0,
    RSP__OWNER_PARKED = 1,
    RSP__OWNER_LENT = 2,
};

/* Ordered delivery: the default longest wait for a missing number. */
#define RSP__REORDER_TIMEOUT_NS 1000000000ull

/* Spins are bounded by time, not by PAUSE count: a PAUSE costs 10-150 cycles
 * depending on the CPU, and the thing worth waiting for (a futex wake-up,
 * 5-10 us on a VM) is measured in time.
 *
 * Each wait first asks its learned spin (spin.h, kinds below): a pure PAUSE
 * spin of about twice the usual wait, then sleep. When that says no (the
 * partner last ran on our CPU, or such spins kept failing: a shared core),
 * the fixed rules below apply, the ones tuned for a shared core.
 *
 * Owner, after its inbox ran dry: the next message of a step or of a
 * back-to-back caller usually follows within microseconds, and a sleeping
 * owner costs the poster a futex wake (syscall) plus the wake-up latency. */
#define RSP__OWNER_SPIN_NS 50000u
/* Ticket waiter: the owner answers a message in microseconds (a 256-row
 * step message in ~20 us on a slow machine); sleeping costs the owner a
 * wake syscall and the waiter the wake-up latency. */
#define RSP__WAIT_SPIN_NS 50000u
/* Pure PAUSE spin before a spinner starts yielding (see spin_until). */
#define RSP__PURE_SPIN_NS 500u
/* Ticket waiter whose post had to wake the owner, in the fallback: no spin.
 * The woken owner is usually queued on the waiter's own core (wake-affine
 * placement), so a spin only delays it: measured here, a 10 us spin made
 * the owner start 10 us later; sleeping at once matches a bare futex
 * ping-pong. */
#define RSP__WAIT_SPIN_WOKE_NS 0u

/* The kinds of wait whose spin is learned (spin.h), one state each:
 * the owner's idle wait after an answer that did not wake its waiter, and
 * after one that did; a ticket waiter whose post found the owner awake,
 * and one whose post woke it. The "woke" kinds are where the partner most
 * often shares our core (wake-affine placement), so they learn apart. */
enum {
    RSP__WAIT_OWNER = 0,
    RSP__WAIT_OWNER_WOKE = 1,
    RSP__WAIT_CLIENT = 0,
    RSP__WAIT_CLIENT_WOKE = 1,
};

/* Credit waiters are woken once a quarter of the inbox is free again (and
 * always when the owner's batch ends), not per message: every wake lets the
 * producers preempt the owner (woken sleepers get the CPU first), and with
 * 8 producers on 2 cores a wake per 32 messages cost ~1 us a message in
 * context switches. See wake_threshold. */

/* Fire-and-forget tickets whose payload fits this (a pool message's
 * header and a few dozen rows) come from a per-actor free stack: the owner
 * frees them, and a block malloc'd on one thread and freed on another skips
 * glibc's per-thread cache on both sides (dearer than the message's own
 * handling). */
#define RSP__POOLED_PAYLOAD_BYTES 1152u
/* Where a ticket's payload starts: aligned for any object, so the poster
 * and the handler may lay out whatever they like in it. */
#define RSP__PAYLOAD_OFFSET rsp__align_up(sizeof(rsp_ticket), alignof(max_align_t))
#define RSP__POOLED_TICKET_BYTES (RSP__PAYLOAD_OFFSET + RSP__POOLED_PAYLOAD_BYTES)
/* Pooled tickets an actor creates at most, beyond its capacity (in flight
 * at once: queued, being handled, or between pop and post). */
#define RSP__POOL_SLACK 256u
/* Pooled tickets are made a chunk at a time, in one block: a burst of posts
 * that outruns the owner (the first 4096 messages of a pool, or any
 * backlog) otherwise paid a malloc each (bench/profile.sh ingest-rsp
 * shows it). The first chunk holds
 * RSP__TICKET_CHUNK tickets, each later one twice the last, up to
 * RSP__TICKET_CHUNK_MAX (a long burst pays one malloc per 256 tickets;
 * a pool that never bursts keeps 32), and none past the pool's bound.
 * Each ticket of a chunk starts on its own cache line
 * (RSP__POOLED_STRIDE): posters and the owner write neighbouring tickets
 * at the same time. */
#define RSP__TICKET_CHUNK 32u
#define RSP__TICKET_CHUNK_MAX 256u
#define RSP__POOLED_STRIDE rsp__align_up(RSP__POOLED_TICKET_BYTES, RSP__CACHELINE)

/* A block of pooled tickets: this header, then its tickets. Freed by
 * destroy only. */
typedef struct ticket_chunk {
    alignas(RSP__CACHELINE) struct ticket_chunk *next;
} ticket_chunk;
#define RSP__CHUNK_HEADER rsp__align_up(sizeof(ticket_chunk), RSP__CACHELINE)

enum {
    RSP__TICKET_PENDING = 0,  /* not answered, nobody sleeping */
    RSP__TICKET_SLEEPING = 1, /* not answered, the waiter sleeps (or is about to) */
    RSP__TICKET_DONE = 2,     /* answered: reply is complete (T1) */
    RSP__TICKET_FREE = 3,     /* debug builds: released (free stack, spare) */
};

/* Debug builds mark a released ticket FREE, so that RSP__ASSERT catches a
 * ticket released twice or taken from the pool while still in use. Other
 * builds write nothing. */
#ifdef RSP_DEBUG_ASSERTS
#define RSP__TICKET_MARK_FREE(t) ((t)->state = RSP__TICKET_FREE)
#else
#define RSP__TICKET_MARK_FREE(t) ((void)(t))
#endif

struct rsp_ticket {
    struct cds_wfcq_node node; /* inbox link: liburcu's, then owner only */
    uint32_t state;            /* any thread, atomic: RSP__TICKET_* (T1/T2) */
    uint32_t refs;             /* any thread, atomic: owner + kept waiter (T3) */
    bool kept;                 /* immutable after post: a waiter will collect */
    bool spin;                 /* poster only: the owner was awake when posted */
    bool last;                 /* immutable after post: the inbox closed behind it */
    bool stop_only;            /* immutable: the actor's own stop marker (no handler) */
    bool credited;             /* immutable after post: it took a credit (else O2) */
    bool shared_cpu;           /* poster only: the owner last ran on the poster's CPU */
    bool call;                 /* immutable after post: rsp__actor_post_call's, waited at once */
    int32_t cpu;               /* immutable after post: the poster's CPU (kept), or -1 */
    uint64_t seq;              /* immutable after post: ordered delivery number, 0 = none */
    /* A reference the message holds (rsp__ticket_hold): the poster sets it
     * before the post; dropped once by whoever ends the message's life
     * (the owner after handling it, or a refused post), then NULL. */
    void (*hold_drop)(void *);
    void *hold;
    rsp__actor *pool;           /* immutable: the actor whose free stack owns it, or NULL */
    size_t cap;                 /* malloc'd ones: the payload bytes the block holds */
    ck_stack_entry_t free_link; /* free stack link, while on it */
    size_t size;                /* immutable after post: payload bytes */
    rsp_reply reply;            /* owner writes before T1; waiter reads after T2 */
    /* followed, at RSP__PAYLOAD_OFFSET, by the payload: the poster writes it
     * before the post, the handler reads (and may rewrite) it after I1 */
};

struct rsp__actor {
    /* Producers' side: every poster writes these. */
    alignas(RSP__CACHELINE) struct cds_wfcq_tail tail; /* liburcu's, wait-free enqueue */
    alignas(RSP__CACHELINE) uint32_t credits;          /* any thread, atomic: free inbox places */
    uint32_t credit_waiters;                           /* any thread, atomic (C1/C2) */
    uint32_t credit_epoch;                             /* futex word, bumped on give-back/close */
    uint32_t posting; /* any thread, atomic: posts in progress (S1) */
    uint32_t closed;  /* any thread, atomic: 0 -> 1 once (S2) */

    /* Owner's side. */
    alignas(RSP__CACHELINE) struct __cds_wfcq_head head; /* dequeue side: owner only */
    uint32_t sleeping;          /* futex word and the role's token: RSP__OWNER_* (F1/F2, K1-K3) */
    uint64_t handled;           /* owner writes, any thread reads (relaxed) */
    bool unsettled;             /* owner: handled a message since cfg.settle */
    uint64_t unwaited_failures; /* owner writes, any thread reads (relaxed) */
    uint64_t sleeps;            /* owner writes, any thread reads (relaxed) */
    uint64_t lent_calls;        /* role holder writes, any thread reads (relaxed) */
    bool woke_waiter;           /* owner only: an answer since the last idle woke a waiter */
    bool park_now;              /* owner only: the last answer was a posted call's (owner_idle) */
    int32_t partner_cpu;        /* owner only: the CPU of the last kept ticket's poster, or -1 */
    uint64_t owner_spin[2];     /* owner only: rsp__spin words, RSP__WAIT_OWNER(_WOKE) */

    /* Where the owner last ran: owner writes on change, kept posts read. */
    alignas(RSP__CACHELINE) int32_t owner_cpu_now; /* relaxed; -1 unknown */

    /* Ordered delivery (owner only, but next_seq: see O1/O2). */
    alignas(RSP__CACHELINE) uint64_t next_seq; /* the number the owner waits for;
                                                * owner RMW (seq_cst), posters load */
    rsp_ticket **held;                         /* [capacity]: min-heap by seq of early tickets */
    uint32_t num_held;
    bool advanced;      /* next_seq moved in this batch: credit waiters re-check */
    bool order_off;     /* a gap timed out: deliver on arrival from now on */
    uint64_t gap_since; /* when the first ticket waiting for next_seq arrived */
    uint64_t gap_ns;    /* immutable: the reorder timeout */

    /* Recycled fire-and-forget tickets: any thread pops (ABA-safe pop with
     * a generation, double-width CAS), whoever drops the last reference
     * pushes. Tickets on it are freed only by destroy. */
    alignas(RSP__CACHELINE) ck_stack_t free_tickets;
    uint32_t pooled;            /* any thread, atomic: pooled tickets created so far */
    pthread_mutex_t chunk_lock; /* guards chunks, chunk_next (taken to make a chunk only) */
    ticket_chunk *chunks;       /* every chunk made, for destroy */
    uint32_t chunk_next;        /* tickets of the next chunk (RSP__TICKET_CHUNK, doubling) */

    /* Immutable after create. */
    alignas(RSP__CACHELINE) uint32_t capacity;
    uint64_t spin_ns;        /* owner's idle spin before it sleeps */
    uint32_t wake_threshold; /* credits given back before waiters are woken */
    rsp__actor_config cfg;
    bool lend; /* calls may take the owner's role (cfg.inline_calls, not ordered) */
    pthread_t thread;
    rsp_ticket *stop_ticket; /* the closer that wins S2 takes it (or frees it) */
};

/* ------------------------------------------------------------------------ */
/* Spins: both sides of a wait (ticket.c's waiter, owner.c's idle owner)     */
/* ------------------------------------------------------------------------ */

/*
 * Spin until ready(arg) or budget_ns passed; returns whether ready(arg) was
 * seen true. PAUSE for the first RSP__PURE_SPIN_NS, then PAUSE and
 * sched_yield: the thread we wait for may be queued on our own core (the
 * scheduler places a woken thread on its waker's core), and a pure spin
 * would hold it off for the whole budget; measured here, two threads that
 * ended up on one core each spun their full 50 us per message. A yield
 * with nothing else runnable costs a cheap syscall. The clock is read
 * every 16 rounds (a vDSO call).
 */
static inline bool spin_until(bool (*ready)(void *), void *arg, uint64_t budget_ns)
{
    if (budget_ns < 2)
        return ready(arg);
    const uint64_t start = rsp__now_ns();
    bool yield = false;
    for (unsigned i = 1;; i++) {
        if (ready(arg))
            return true;
        if ((i & 15u) == 0 || yield) {
            const uint64_t spent = rsp__now_ns() - start;
            if (spent >= budget_ns)
                return false;
            yield = spent >= RSP__PURE_SPIN_NS;
        }
        if (yield)
            sched_yield();
        else
            rsp__cpu_relax();
    }
}

/* Spin with PAUSE only until ready(arg) or budget_ns passed; returns
 * whether ready(arg) was seen true. For a partner on another core (the
 * learned budget says the event usually comes within it), where a yield
 * would only add a syscall to the latency. The clock is read every 16
 * rounds. */
static inline bool spin_pure(bool (*ready)(void *), void *arg, uint64_t budget_ns)
{
    const uint64_t start = rsp__now_ns();
    for (unsigned i = 1;; i++) {
        if (ready(arg))
            return true;
        if ((i & 15u) == 0 && rsp__now_ns() - start >= budget_ns)
            return ready(arg);
        rsp__cpu_relax();
    }
}

/* The calling thread's CPU, or -1 (glibc reads it from rseq: a few
 * instructions). */
static inline int32_t this_cpu(void)
{
    int c = sched_getcpu();
    return c < 0 ? -1 : c;
}

/* The learned spin of one kind of wait: its budget now (0 when the partner
 * runs on our CPU: a spin would only hold it off, or when backing off). */
static inline uint64_t learned_budget(const uint64_t *word, uint64_t cap_ns, bool shared_cpu)
{
    if (shared_cpu || cap_ns < 2)
        return 0;
    /* Relaxed: a heuristic; a stale or lost update costs a worse guess. */
    return rsp__spin_budget(rsp__spin_unpack(rsp__load_relaxed_u64(word)), cap_ns);
}

/* After a wait of waited_ns (budget_ns from learned_budget, seen whether
 * its spin saw the event): update the kind's state. */
static inline void learn_wait(uint64_t *word, uint64_t budget_ns, bool seen, uint64_t waited_ns,
                              uint64_t cap_ns)
{
    if (cap_ns < 2)
        return;
    rsp__spin s = rsp__spin_unpack(rsp__load_relaxed_u64(word));
    rsp__spin n = rsp__spin_learn(s, budget_ns, seen, waited_ns, cap_ns);
    if (rsp__spin_pack(n) != rsp__spin_pack(s))
        rsp__store_relaxed_u64(word, rsp__spin_pack(n));
}

/* ------------------------------------------------------------------------ */
/* Tickets: what every file does to one                                      */
/* ------------------------------------------------------------------------ */

/* ticket.c: give a ticket's memory back (its actor's free stack, this
 * thread's spare, or malloc). */
void rsp__ticket_release(rsp_ticket *t);
/* ticket.c: pooled tickets on a's free stack now (destroy's check that
 * every one came back). While nobody pops or pushes. */
uint32_t rsp__ticket_pooled_free(rsp__actor *a);

/* Drop the reference the message holds, if any, once. Whoever ends the
 * message's life: the owner after its handler (or its RSP_ESHUTDOWN
 * answer), or the poster whose post was refused. */
static inline void ticket_drop_hold(rsp_ticket *t)
{
    if (t->hold_drop) {
        void (*drop)(void *) = t->hold_drop;
        t->hold_drop = NULL;
        drop(t->hold);
        t->hold = NULL;
    }
}

/* T3: drop one reference; the last holder frees. T3: pairs with the other
 * side's drop: acq_rel, so this side's accesses (the waiter's reads of the
 * reply, the owner's swap and wake) happen before the other side's free,
 * and the free after the other side's drop. */
static inline void ticket_unref(rsp_ticket *t)
{
    const uint32_t refs = rsp__fetch_add_acq_rel_u32(&t->refs, UINT32_MAX);
    RSP__ASSERT(refs == 1 || refs == 2); /* the owner's and one kept waiter's */
    if (refs == 1)
        rsp__ticket_release(t);
}

/* ------------------------------------------------------------------------ */
/* Credits: the owner's half (inbox.c has the posters')                      */
/* ------------------------------------------------------------------------ */

/* Owner: return the credit of one dequeued message. Returns whether a
 * producer waits for credit (the caller owes it a wake-up: wake_credit_waiters,
 * deferred by at most wake_threshold messages or the batch end, which
 * delays a waiter a little but never loses it: it sleeps on the epoch, and
 * the epoch moves at the deferred wake). */
static inline bool give_credit(rsp__actor *a)
{
    /* C2: pairs with C1: seq_cst RMW, then seq_cst load (store->load). */
    const uint32_t credits = rsp__fetch_add_seq_cst_u32(&a->credits, 1);
    RSP__ASSERT(credits < a->capacity); /* one back per one taken */
    (void)credits;
    return rsp__load_seq_cst_u32(&a->credit_waiters) != 0;
}

/* Owner: wake the producers waiting for credit (C2's second half). */
static inline void wake_credit_waiters(rsp__actor *a)
{
    /* C2: release, pairs with the waiter's acquire snapshot of the epoch:
     * a waiter that sees the new epoch sees the credits given back. */
    rsp__fetch_add_release_u32(&a->credit_epoch, 1);
    rsp__futex_wake_all(&a->credit_epoch);
}

/* ------------------------------------------------------------------------ */
/* Between the owner loop (owner.c) and ordered delivery (reorder.c)         */
/* ------------------------------------------------------------------------ */

/* owner.c: hand t to the handler (or refuse it once stopped), then answer
 * it; answer t with st and why, without the handler. Owner thread. */
void rsp__actor_deliver(rsp__actor *a, rsp_ticket *t, uint32_t *owed, bool *stopped);
void rsp__actor_refuse(rsp__actor *a, rsp_ticket *t, uint32_t *owed, rsp_status st,
                       const char *why);
/* owner.c: a caller that took the owner's role (K1) runs the owner's
 * work: what the inbox holds, then t (answered DONE on return); then
 * gives the role back (K2) and wakes the owner if messages arrived
 * meanwhile. The caller's thread. */
void rsp__actor_run_lent(rsp__actor *a, rsp_ticket *t);
/* owner.c: the owner thread's body; drain the inbox once (destroy drains
 * what is left). */
void *rsp__actor_owner_main(void *arg);
bool rsp__actor_drain(rsp__actor *a, bool *stopped);

/* reorder.c: a numbered ticket arrived; answer every held ticket with st;
 * the gap of next_seq timed out. Owner thread. */
void rsp__reorder_arrive(rsp__actor *a, rsp_ticket *t, uint32_t *owed, bool *stopped);
void rsp__reorder_refuse_held(rsp__actor *a, uint32_t *owed, rsp_status st);
void rsp__reorder_expire_gap(rsp__actor *a);

#endif
