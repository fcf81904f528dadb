/*
 * The actor: inbox (wfcqueue + credits), owner thread, tickets, wake-up.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Synchronises-with pairs of this file (listed in docs/ordering.md):
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
 *
 * Every atomic here is an __atomic builtin (util/sync.h), which TSan sees:
 * only the edges through liburcu's queue (I1) and Concurrency Kit's
 * ck_stack (the pooled tickets) are told to it by hand (hb.h).
 */
#include "actor.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/sysinfo.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ck_stack.h>
#include <urcu/compiler.h>
#include <urcu/wfcqueue.h>

#include "spin.h"
#include "util/hb.h"
#include "util/mem.h"
#include "util/time.h"
#include "util/error.h"
#include "util/sync.h"

#define RSP__ACTOR_DEFAULT_CAPACITY 4096u
#define RSP__CACHELINE 64
/* The owner's per-message path (handle_one, ticket_answer, finish,
 * return_credit, deliver) is inlined into its batch loop: as calls they
 * cost ~35 instructions a message (callgrind, bench/profile.sh ingest-rsp). */
#define RSP__HOT static inline __attribute__((always_inline))
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

/* A waiter's learned spins are its thread's, not its actor's: a ticket may
 * be waited for while its pool is being destroyed (the waiter must not
 * touch the actor after the answer), and whether a client shares a core
 * with the owner is a property of the client thread. initial-exec: see
 * src/publish/publish.c (a few bytes). */
static _Thread_local __attribute__((tls_model("initial-exec"))) uint64_t rsp__tls_wait_spin[2];
/* Credit waiters are woken once a quarter of the inbox is free again (and
 * always when the owner's batch ends), not per message: every wake lets the
 * producers preempt the owner (woken sleepers get the CPU first), and with
 * 8 producers on 2 cores a wake per 32 messages cost ~1 us a message in
 * context switches. See wake_threshold. */

/* Fire-and-forget tickets whose payload fits this (a pool message's
 * header and a few dozen rows) come from a per-actor free stack: the owner
 * frees them, and a block malloc'd on one thread and freed on another skips
 * glibc's per-thread cache on both sides (~360 instructions a message
 * measured). */
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
 * backlog) otherwise paid a malloc each, ~170 instructions a message
 * (callgrind, bench/profile.sh ingest-rsp). The first chunk holds
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
};

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
    uint32_t sleeping;          /* futex word: 1 = owner announced sleep (F1/F2) */
    uint64_t handled;           /* owner writes, any thread reads (relaxed) */
    bool unsettled;             /* owner: handled a message since cfg.settle */
    uint64_t unwaited_failures; /* owner writes, any thread reads (relaxed) */
    uint64_t sleeps;            /* owner writes, any thread reads (relaxed) */
    bool woke_waiter;           /* owner only: an answer since the last idle woke a waiter */
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
    pthread_t thread;
    rsp_ticket *stop_ticket; /* the closer that wins S2 takes it (or frees it) */
};

/* ------------------------------------------------------------------------ */
/* Tickets                                                                   */
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
static bool spin_until(bool (*ready)(void *), void *arg, uint64_t budget_ns)
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
static bool spin_pure(bool (*ready)(void *), void *arg, uint64_t budget_ns)
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
static int32_t this_cpu(void)
{
    int c = sched_getcpu();
    return c < 0 ? -1 : c;
}

/* The learned spin of one kind of wait: its budget now (0 when the partner
 * runs on our CPU: a spin would only hold it off, or when backing off). */
static uint64_t learned_budget(const uint64_t *word, uint64_t cap_ns, bool shared_cpu)
{
    if (shared_cpu || cap_ns < 2)
        return 0;
    /* Relaxed: a heuristic; a stale or lost update costs a worse guess. */
    return rsp__spin_budget(rsp__spin_unpack(rsp__load_relaxed_u64(word)), cap_ns);
}

/* After a wait of waited_ns (budget_ns from learned_budget, seen whether
 * its spin saw the event): update the kind's state. */
static void learn_wait(uint64_t *word, uint64_t budget_ns, bool seen, uint64_t waited_ns,
                       uint64_t cap_ns)
{
    if (cap_ns < 2)
        return;
    rsp__spin s = rsp__spin_unpack(rsp__load_relaxed_u64(word));
    rsp__spin n = rsp__spin_learn(s, budget_ns, seen, waited_ns, cap_ns);
    if (rsp__spin_pack(n) != rsp__spin_pack(s))
        rsp__store_relaxed_u64(word, rsp__spin_pack(n));
}

/* ck_stack's pop reads the link of an entry another thread may be popping
 * and reusing at the same time (the generation makes that pop fail and
 * retry): a benign race by design, in memory that stays allocated. TSan
 * cannot see ck_pr's ordering either, so the stack's own accesses are
 * hidden from it and each hand-over is stated with hb (push releases the
 * ticket, pop acquires it), with rsp__hb_ignore_begin/end around it. */

static void ticket_release(rsp_ticket *t);

/* Push the chain first..last (linked by their next) onto the free stack at
 * once: ck_stack_push_upmc (= _mpmc) with a chain for its one entry. */
static void push_chain(ck_stack_t *st, ck_stack_entry_t *first, ck_stack_entry_t *last)
{
    ck_stack_entry_t *head = ck_pr_load_ptr(&st->head);
    last->next = head;
    ck_pr_fence_store();
    while (!ck_pr_cas_ptr_value(&st->head, head, first, &head)) {
        last->next = head;
        ck_pr_fence_store();
    }
}

/* Make a chunk of pooled tickets: return the first, push the others onto
 * the free stack (one CAS for all). NULL when out of memory. Any thread;
 * posters that make chunks at once take turns (a burst's start only). */
__attribute__((noinline)) static rsp_ticket *chunk_new(rsp__actor *a)
{
    pthread_mutex_lock(&a->chunk_lock);
    const uint32_t bound = a->capacity + RSP__POOL_SLACK;
    const uint32_t made = rsp__load_relaxed_u32(&a->pooled);
    if (made >= bound) { /* another poster made the last chunk meanwhile */
        pthread_mutex_unlock(&a->chunk_lock);
        return NULL;
    }
    const uint32_t n = a->chunk_next < bound - made ? a->chunk_next : bound - made;
    ticket_chunk *c = aligned_alloc(RSP__CACHELINE, RSP__CHUNK_HEADER + n * RSP__POOLED_STRIDE);
    if (c) {
        c->next = a->chunks;
        a->chunks = c;
        a->chunk_next = 2 * n > RSP__TICKET_CHUNK_MAX ? RSP__TICKET_CHUNK_MAX : 2 * n;
        rsp__fetch_add_relaxed_u32(&a->pooled, n); /* a bound, orders nothing */
    }
    pthread_mutex_unlock(&a->chunk_lock);
    if (!c)
        return NULL;
    unsigned char *base = (unsigned char *)c + RSP__CHUNK_HEADER;
    rsp_ticket *first = (rsp_ticket *)base;
    first->pool = a;
    if (n == 1)
        return first;
    for (uint32_t i = 1; i < n; i++) {
        rsp_ticket *t = (rsp_ticket *)(base + i * RSP__POOLED_STRIDE);
        t->pool = a;
        t->free_link.next =
            i + 1 < n ? &((rsp_ticket *)(base + (i + 1) * RSP__POOLED_STRIDE))->free_link : NULL;
        rsp__hb_release(t); /* to the next pooled_get, as ticket_release */
    }
    rsp__hb_ignore_begin();
    push_chain(&a->free_tickets, &((rsp_ticket *)(base + RSP__POOLED_STRIDE))->free_link,
               &((rsp_ticket *)(base + (n - 1) * RSP__POOLED_STRIDE))->free_link);
    rsp__hb_ignore_end();
    return first;
}

/* A pooled ticket from a's free stack, or a new one while a has created
 * fewer than capacity + RSP__POOL_SLACK; NULL otherwise (or out of memory).
 * Any thread. */
static rsp_ticket *pooled_get(rsp__actor *a)
{
    rsp__hb_ignore_begin();
    ck_stack_entry_t *e = ck_stack_pop_mpmc(&a->free_tickets);
    rsp__hb_ignore_end();
    if (e) {
        rsp_ticket *t = caa_container_of(e, rsp_ticket, free_link);
        rsp__hb_acquire(t); /* the previous user's accesses, before its push */
        return t;
    }
    /* Relaxed-ish bound: a chunk or so past the limit under a race is fine. */
    if (rsp__load_relaxed_u32(&a->pooled) >= a->capacity + RSP__POOL_SLACK)
        return NULL;
    return chunk_new(a);
}

/* A thread's spare ticket: the last malloc'd ticket it gave back, kept for
 * its next one that fits. A synchronous call's ticket (kept: its waiter
 * frees it, and it may outlive the pool, so it is not pooled) is then
 * reused by the same thread's next call instead of a malloc and a free (a
 * ticket with a step's declarations is past glibc's per-thread cache:
 * ~350 instructions a call measured). A second ticket while the spare is
 * out is malloc'd at its size as before. Freed at thread exit (a pthread
 * key's destructor); initial-exec as rsp__tls_wait_spin. */
static _Thread_local __attribute__((tls_model("initial-exec"))) rsp_ticket *rsp__tls_spare;
static pthread_key_t rsp__spare_key;
static pthread_once_t rsp__spare_once = PTHREAD_ONCE_INIT;
static int rsp__spare_key_rc = -1;
static _Thread_local __attribute__((tls_model("initial-exec"))) bool rsp__tls_spare_keyed;

static void spare_at_exit(void *unused)
{
    (void)unused;
    free(rsp__tls_spare);
    rsp__tls_spare = NULL;
}

static void spare_key_create(void)
{
    rsp__spare_key_rc = pthread_key_create(&rsp__spare_key, spare_at_exit);
}

/* Keep t as this thread's spare (true), or leave it to the caller to free:
 * a spare is kept already, or no destructor could free it at exit. */
static bool spare_keep(rsp_ticket *t)
{
    if (rsp__tls_spare)
        return false;
    if (!rsp__tls_spare_keyed) {
        pthread_once(&rsp__spare_once, spare_key_create);
        /* Any non-NULL value: the destructor runs, and frees the TLS spare. */
        if (rsp__spare_key_rc != 0 || pthread_setspecific(rsp__spare_key, &rsp__tls_spare) != 0)
            return false;
        rsp__tls_spare_keyed = true;
    }
    rsp__tls_spare = t;
    return true;
}

/* This thread's spare if its payload holds size bytes, or NULL. */
static rsp_ticket *spare_take(size_t size)
{
    rsp_ticket *t = rsp__tls_spare;
    if (!t || t->cap < size)
        return NULL;
    rsp__tls_spare = NULL;
    return t;
}

/* Give a ticket's memory back: to its actor's free stack, to this
 * thread's spare, or to malloc. */
static void ticket_release(rsp_ticket *t)
{
    rsp__actor *a = t->pool;
    if (!a) {
        if (!spare_keep(t))
            free(t);
        return;
    }
    rsp__hb_release(t); /* to the next pooled_get */
    rsp__hb_ignore_begin();
    ck_stack_push_mpmc(&a->free_tickets, &t->free_link);
    rsp__hb_ignore_end();
}

rsp_ticket *rsp__ticket_new(size_t size, void **payload)
{
    return rsp__actor_ticket_new(NULL, size, payload);
}

rsp_ticket *rsp__actor_ticket_new(rsp__actor *a, size_t size, void **payload)
{
    rsp_ticket *t = !a                                  ? spare_take(size)
                    : size <= RSP__POOLED_PAYLOAD_BYTES ? pooled_get(a)
                                                        : NULL;
    if (!t) {
        t = malloc(RSP__PAYLOAD_OFFSET + size);
        if (!t)
            return NULL;
        t->pool = NULL;
        t->cap = size;
    }
    /* The header, field by field (not a memset up to some field, which
     * would silently depend on the field order): the reply is zeroed by the
     * owner before its handler runs (handle_one), `pool` was set above,
     * `free_link` is written by the push that recycles the ticket, and the
     * poster writes the payload. */
    cds_wfcq_node_init(&t->node);
    t->state = RSP__TICKET_PENDING;
    t->refs = 0;
    t->kept = false;
    t->spin = false;
    t->last = false;
    t->stop_only = false;
    t->credited = false;
    t->shared_cpu = false;
    t->cpu = -1;
    t->seq = 0;
    t->hold_drop = NULL;
    t->hold = NULL;
    t->size = size;
    *payload = (unsigned char *)t + RSP__PAYLOAD_OFFSET;
    return t;
}

void rsp__ticket_set_seq(rsp_ticket *t, uint64_t seq)
{
    t->seq = seq;
}

void rsp__ticket_hold(rsp_ticket *t, void (*drop)(void *), void *obj)
{
    t->hold_drop = drop;
    t->hold = obj;
}

/* Drop the reference the message holds, if any, once. Whoever ends the
 * message's life: the owner after its handler (or its RSP_ESHUTDOWN
 * answer), or the poster whose post was refused. */
static void ticket_drop_hold(rsp_ticket *t)
{
    if (t->hold_drop) {
        void (*drop)(void *) = t->hold_drop;
        t->hold_drop = NULL;
        drop(t->hold);
        t->hold = NULL;
    }
}

void rsp__ticket_discard(rsp_ticket *t)
{
    ticket_drop_hold(t);
    ticket_release(t);
}

/* T3: drop one reference; the last holder frees. T3: pairs with the other
 * side's drop: acq_rel, so this side's accesses (the waiter's reads of the
 * reply, the owner's swap and wake) happen before the other side's free,
 * and the free after the other side's drop. */
static void ticket_unref(rsp_ticket *t)
{
    if (rsp__fetch_add_acq_rel_u32(&t->refs, UINT32_MAX) == 1)
        ticket_release(t);
}

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
        ticket_release(t);
        return false;
    }
    /* T1: pairs with T2 in rsp__ticket_wait. Release: the reply writes
     * above are visible to whoever reads DONE with T2. The old value tells
     * us whether to wake; the waiter's PENDING -> SLEEPING CAS is on this
     * same word, so atomicity alone decides which came first (no other
     * order needed). */
    uint32_t old = rsp__swap_release_u32(&t->state, RSP__TICKET_DONE);
    if (old == RSP__TICKET_SLEEPING)
        rsp__futex_wake_all(&t->state); /* our reference keeps t alive here */
    ticket_unref(t);
    return old == RSP__TICKET_SLEEPING;
}

/* spin_until's test for a ticket waiter (relaxed: T2 is the load-acquire
 * that follows it). */
static bool ticket_answered(void *t)
{
    return rsp__load_relaxed_u32(&((rsp_ticket *)t)->state) == RSP__TICKET_DONE;
}

rsp_status rsp__ticket_wait(rsp_ticket *t, uint64_t timeout_ns, rsp_reply *reply)
{
    uint32_t s = rsp__load_acquire_u32(&t->state); /* T2: pairs with T1 */
    if (s != RSP__TICKET_DONE) {
        if (timeout_ns == 0)
            return RSP_EAGAIN;
        /* An answer seen while spinning spares the owner a wake syscall and
         * us the wake-up. Spin with PAUSE for as long as this thread's
         * answers of this kind usually take (learned), unless the owner last
         * ran on our CPU or such spins kept failing (spin.h); then as
         * before: spin yielding if the owner was awake when we posted, and
         * sleep at once if our post woke it (it may be queued on this very
         * core). Bounded by the caller's timeout too. */
        const uint64_t deadline = rsp__deadline(timeout_ns);
        const uint64_t start = rsp__now_ns();
        uint64_t *word = &rsp__tls_wait_spin[t->spin ? RSP__WAIT_CLIENT : RSP__WAIT_CLIENT_WOKE];
        const uint64_t cap = timeout_ns < RSP__WAIT_SPIN_NS ? timeout_ns : RSP__WAIT_SPIN_NS;
        const uint64_t budget = learned_budget(word, cap, t->shared_cpu);
        const bool seen = budget && spin_pure(ticket_answered, t, budget);
        if (!budget)
            spin_until(ticket_answered, t, t->spin ? cap : RSP__WAIT_SPIN_WOKE_NS);
        s = rsp__load_acquire_u32(&t->state); /* T2 */
        while (s != RSP__TICKET_DONE) {
            struct timespec ts;
            const struct timespec *rel;
            if (!rsp__time_left(deadline, &ts, &rel))
                return RSP_ETIMEDOUT; /* state may stay SLEEPING: a spare wake, harmless */
            /* Announce the sleep. If the CAS fails the owner answered
             * meanwhile and the futex wait below returns at once. Relaxed:
             * one word with T1's swap (atomicity orders them); the reply is
             * read only after the acquire load of DONE (T2). */
            if (s == RSP__TICKET_PENDING)
                rsp__cas_relaxed_u32(&t->state, RSP__TICKET_PENDING, RSP__TICKET_SLEEPING);
            rsp__futex_wait(&t->state, RSP__TICKET_SLEEPING, rel);
            s = rsp__load_acquire_u32(&t->state); /* T2 */
        }
        /* The full cap, not the caller's timeout: a short timeout says
         * nothing about how long answers take. */
        learn_wait(word, budget, seen, rsp__now_ns() - start, RSP__WAIT_SPIN_NS);
    }
    rsp_status st = t->reply.error.status;
    if (reply)
        *reply = t->reply;
    ticket_unref(t);
    return st;
}

void rsp__ticket_forget(rsp_ticket *t)
{
    ticket_unref(t); /* T3: the owner's drop (or this one, if answered) frees */
}

/* ------------------------------------------------------------------------ */
/* Inbox                                                                     */
/* ------------------------------------------------------------------------ */

/* O2: an ordered post whose number is the one the owner waits for may go
 * without a credit (the credits may all be held by tickets waiting for
 * it). Seq_cst load, after the announce (C1) on the waiting path: pairs
 * with O1 in release_held (seq_cst RMW of next_seq, then seq_cst load of
 * credit_waiters): either we see the new number or the owner sees us
 * waiting and moves the epoch. */
static bool owner_waits_for(rsp__actor *a, uint64_t seq)
{
    return seq != 0 && a->held && seq == rsp__load_seq_cst_u64(&a->next_seq);
}

/* Take one credit, waiting up to timeout_ns; *credited says whether one
 * was taken (false: O2's pass, or a failure). */
__attribute__((noinline)) static rsp_status
take_credit_slow(rsp__actor *a, uint64_t seq, uint64_t timeout_ns, bool *credited, rsp_error *err)
{
    *credited = false;
    bool waiting = false;
    uint64_t deadline = 0;
    rsp_status st = RSP_OK;
    for (;;) {
        /* Snapshot the epoch before looking at credits: a give-back after
         * this load changes the epoch, so the futex wait below returns. */
        uint32_t epoch = rsp__load_acquire_u32(&a->credit_epoch); /* C2 */
        /* C1: the re-check after the announce below; seq_cst, pairs with
         * C2's seq_cst increment (store->load on both sides). */
        uint32_t c = rsp__load_seq_cst_u32(&a->credits);
        while (c > 0) {
            /* Relaxed: a credit carries no data (the message goes through
             * I1), only a count. */
            if (rsp__cas_relaxed_u32(&a->credits, c, c - 1)) {
                *credited = true;
                goto out;
            }
            c = rsp__load_relaxed_u32(&a->credits);
        }
        if (owner_waits_for(a, seq))
            goto out; /* O2 */
        if (rsp__load_relaxed_u32(&a->closed)) {
            st = rsp__fail(err, RSP_ESHUTDOWN, "the pool is shutting down: post refused");
            goto out;
        }
        if (timeout_ns == 0) {
            st = rsp__fail(err, RSP_EFULL, "inbox full (%u messages queued)", a->capacity);
            goto out;
        }
        if (!waiting) {
            /* C1: pairs with C2. Announce (seq_cst), then re-check credits
             * above (seq_cst load). */
            rsp__fetch_add_seq_cst_u32(&a->credit_waiters, 1);
            waiting = true;
            deadline = rsp__deadline(timeout_ns);
            continue;
        }
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel)) {
            st = rsp__fail(err, RSP_ETIMEDOUT, "inbox full (%u messages queued) until the timeout",
                           a->capacity);
            goto out;
        }
        rsp__futex_wait(&a->credit_epoch, epoch, rel);
    }
out:
    if (waiting) /* relaxed: a stale count only costs the owner a spare wake */
        rsp__fetch_add_relaxed_u32(&a->credit_waiters, UINT32_MAX);
    return st;
}

/* Take one credit (above), its usual case inline: a credit is free now.
 * The same C1 loads as the slow path's first round; the slow path starts
 * over (its epoch snapshot first) when none is. */
static inline rsp_status take_credit(rsp__actor *a, uint64_t seq, uint64_t timeout_ns,
                                     bool *credited, rsp_error *err)
{
    uint32_t c = rsp__load_seq_cst_u32(&a->credits); /* C1 (see take_credit_slow) */
    if (c > 0 && rsp__cas_relaxed_u32(&a->credits, c, c - 1)) {
        *credited = true;
        return RSP_OK;
    }
    return take_credit_slow(a, seq, timeout_ns, credited, err);
}

/* Owner: return the credit of one dequeued message. Returns whether a
 * producer waits for credit (the caller owes it a wake-up: wake_credit_waiters,
 * deferred by at most wake_threshold messages or the batch end, which
 * delays a waiter a little but never loses it: it sleeps on the epoch, and
 * the epoch moves at the deferred wake). */
static bool give_credit(rsp__actor *a)
{
    /* C2: pairs with C1: seq_cst RMW, then seq_cst load (store->load). */
    rsp__fetch_add_seq_cst_u32(&a->credits, 1);
    return rsp__load_seq_cst_u32(&a->credit_waiters) != 0;
}

/* Owner: wake the producers waiting for credit (C2's second half). */
static void wake_credit_waiters(rsp__actor *a)
{
    /* C2: release, pairs with the waiter's acquire snapshot of the epoch:
     * a waiter that sees the new epoch sees the credits given back. */
    rsp__fetch_add_release_u32(&a->credit_epoch, 1);
    rsp__futex_wake_all(&a->credit_epoch);
}

/* Returns whether the owner had announced sleep (and was woken). */
RSP__HOT bool enqueue_and_wake(rsp__actor *a, rsp_ticket *t)
{
    rsp__hb_release(t); /* I1 (TSan mirror: liburcu is not instrumented) */
    /* I1: cds_wfcq_enqueue issues a full barrier before linking the node,
     * so the ticket's contents are visible to the owner that dequeues it. */
    cds_wfcq_enqueue(&a->head, &a->tail, &t->node);
    /* F2: pairs with F1 in owner_idle. Orders the enqueue's stores (tail,
     * link) before the load of `sleeping`: either the owner's re-check
     * sees our node, or we see its announcement and wake it. */
    rsp__fence_full();
    if (rsp__load_relaxed_u32(&a->sleeping) == 1) {
        /* Relaxed: `sleeping` carries no data (the fences above order the
         * protocol; the futex compares the word). */
        if (rsp__cas_relaxed_u32(&a->sleeping, 1, 0))
            rsp__futex_wake(&a->sleeping, 1);
        return true;
    }
    return false;
}

static void leave_posting(rsp__actor *a)
{
    /* S1 end: the closer waits for this count to reach zero. Seq_cst RMW
     * (also a release: our enqueue happens before the closer's) then a
     * seq_cst load of `closed`: store->load against S2's CAS then load of
     * `posting`, so either we see closed and wake it, or it sees zero. */
    if (rsp__fetch_add_seq_cst_u32(&a->posting, UINT32_MAX) == 1 &&
        rsp__load_seq_cst_u32(&a->closed))
        rsp__futex_wake_all(&a->posting);
}

rsp_status rsp__actor_post(rsp__actor *a, rsp_ticket *t, bool keep, uint64_t timeout_ns,
                           rsp_error *err)
{
    /* S1: pairs with S2 in rsp__actor_close: seq_cst RMW, seq_cst load
     * (store->load on both sides). */
    rsp__fetch_add_seq_cst_u32(&a->posting, 1);
    rsp_status st;
    if (rsp__load_seq_cst_u32(&a->closed)) {
        st = rsp__fail(err, RSP_ESHUTDOWN, "the pool is shutting down: post refused");
    } else {
        st = take_credit(a, t->seq, timeout_ns, &t->credited, err);
        if (st == RSP_OK) {
            t->kept = keep;
            t->refs = keep ? 2u : 1u;
            t->state = RSP__TICKET_PENDING;
            t->spin = false;
            if (keep) {
                /* For the owner's spin after answering (partner_cpu) and
                 * ours while waiting (shared_cpu). */
                t->cpu = this_cpu();
                t->shared_cpu = t->cpu >= 0 && t->cpu == (int32_t)rsp__load_relaxed_u32(
                                                             (const uint32_t *)&a->owner_cpu_now);
            }
            /* From here the owner may answer, and (not kept) free t. */
            const bool woke = enqueue_and_wake(a, t);
            if (keep)
                t->spin = !woke; /* read by our own rsp__ticket_wait only */
        }
    }
    leave_posting(a);
    if (st != RSP_OK) {
        ticket_drop_hold(t); /* refused: the owner will never see it */
        ticket_release(t);
    }
    return st;
}

rsp_status rsp__actor_close(rsp__actor *a, rsp_ticket *t, bool keep, rsp_error *err)
{
    /* S2: pairs with S1 (seq_cst CAS, then seq_cst loads of `posting`
     * below). Only the first closer gets past this. */
    if (!rsp__cas_seq_cst_u32(&a->closed, 0, 1)) {
        if (t) {
            ticket_drop_hold(t);
            ticket_release(t);
        }
        return rsp__fail(err, RSP_ESHUTDOWN, "the pool is already shutting down");
    }
    /* Producers waiting for credit re-check `closed` when the epoch moves.
     * Release: a waiter whose acquire snapshot sees this epoch sees closed. */
    rsp__fetch_add_release_u32(&a->credit_epoch, 1);
    rsp__futex_wake_all(&a->credit_epoch);

    /* Wait until every post that passed S1 has enqueued (or given up). */
    uint32_t n;
    while ((n = rsp__load_seq_cst_u32(&a->posting)) != 0) /* S2 */
        rsp__futex_wait(&a->posting, n, NULL);

    if (!t) {
        t = a->stop_ticket;
        keep = false;
    } else {
        free(a->stop_ticket);
    }
    a->stop_ticket = NULL;
    t->kept = keep;
    t->last = true;
    t->credited = false;
    t->seq = 0; /* the last message is never held */
    t->refs = keep ? 2u : 1u;
    t->state = RSP__TICKET_PENDING;
    t->spin = false; /* the owner stops after this: nothing worth spinning for */
    /* The last message takes no credit: it must get in even when full. */
    enqueue_and_wake(a, t);
    return RSP_OK;
}

bool rsp__actor_closed(const rsp__actor *a)
{
    return rsp__load_relaxed_u32((uint32_t *)&a->closed) != 0;
}

uint32_t rsp__actor_depth(const rsp__actor *a)
{
    /* Relaxed: a gauge, stale by nature. */
    uint32_t c = rsp__load_relaxed_u32((uint32_t *)&a->credits);
    return c > a->capacity ? 0 : a->capacity - c;
}

uint64_t rsp__actor_handled(const rsp__actor *a)
{
    return rsp__load_relaxed_u64((uint64_t *)&a->handled);
}

uint64_t rsp__actor_unwaited_failures(const rsp__actor *a)
{
    return rsp__load_relaxed_u64((uint64_t *)&a->unwaited_failures);
}

uint64_t rsp__actor_sleeps(const rsp__actor *a)
{
    return rsp__load_relaxed_u64((uint64_t *)&a->sleeps);
}

bool rsp__actor_asleep(const rsp__actor *a)
{
    return rsp__load_relaxed_u32((uint32_t *)&a->sleeping) == 1;
}

/* ------------------------------------------------------------------------ */
/* Owner thread                                                              */
/* ------------------------------------------------------------------------ */

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

static void owner_wait(rsp__actor *a, int kind, uint64_t *budget_out, bool *seen);

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
    const uint64_t start = rsp__now_ns();
    uint64_t budget = 0;
    bool seen = false;
    owner_wait(a, kind, &budget, &seen);
    learn_wait(&a->owner_spin[kind], budget, seen, rsp__now_ns() - start, a->spin_ns);
    note_owner_cpu(a);
}

/* Spin for as long as the next message usually takes (learned, spin.h)
 * unless the last waiter we answered runs on our CPU or such spins kept
 * failing; then as before: spin yielding unless a waiter was just woken.
 * Then F1: announce sleep, full fence, re-check, sleep. *budget and *seen:
 * the learned spin's budget (0: none) and whether it saw a message. */
static void owner_wait(rsp__actor *a, int kind, uint64_t *budget_out, bool *seen)
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
    uint64_t budget = a->spin_ns;
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

    /* Relaxed: the fence below orders it. */
    rsp__store_relaxed_u32(&a->sleeping, 1);
    /* F1: pairs with F2 in enqueue_and_wake. Orders the store of
     * `sleeping` before the emptiness re-check (store->load: only a full
     * fence does that, the re-check being liburcu's loads). */
    rsp__fence_full();
    if (!cds_wfcq_empty(&a->head, &a->tail)) {
        rsp__store_relaxed_u32(&a->sleeping, 0);
        return;
    }
    /* Single writer (the owner): a relaxed read-modify-write is exact. */
    rsp__store_relaxed_u64(&a->sleeps, rsp__load_relaxed_u64(&a->sleeps) + 1);
    /* The futex compares: a producer that cleared `sleeping` before we got
     * here makes this return at once. */
    while (rsp__load_relaxed_u32(&a->sleeping) == 1) {
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel)) {
            /* The gap timed out: awake again (a poster's CAS 1 -> 0 that
             * races with this only costs a spare wake). */
            rsp__store_relaxed_u32(&a->sleeping, 0);
            return;
        }
        rsp__futex_wait(&a->sleeping, 1, rel);
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

/* Owner: answer t with st and why, without the handler. */
static void refuse(rsp__actor *a, rsp_ticket *t, uint32_t *owed, rsp_status st, const char *why)
{
    return_credit(a, t, owed);
    memset(&t->reply, 0, sizeof t->reply);
    rsp__fail(&t->reply.error, st, "%s", why);
    finish(a, t);
}

/* The reorder heap: a binary min-heap of tickets by seq, [capacity]. */
static void heap_push(rsp__actor *a, rsp_ticket *t)
{
    uint32_t i = a->num_held++;
    while (i > 0 && a->held[(i - 1) / 2]->seq > t->seq) {
        a->held[i] = a->held[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    a->held[i] = t;
}

static rsp_ticket *heap_pop(rsp__actor *a)
{
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
static void refuse_held(rsp__actor *a, uint32_t *owed, rsp_status st)
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
        refuse(a, heap_pop(a), owed, st, why);
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
            refuse(a, h, owed, RSP_EORDER, why);
        } else {
            deliver(a, h, owed, stopped);
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
static void arrive_ordered(rsp__actor *a, rsp_ticket *t, uint32_t *owed, bool *stopped)
{
    const uint64_t next = rsp__load_relaxed_u64(&a->next_seq); /* single writer */
    char why[RSP_ERROR_MAX];
    if (t->seq < next) {
        snprintf(why, sizeof why,
                 "msg->seq %llu was already handled (the pool waits for message %llu): a "
                 "duplicate or an old number",
                 (unsigned long long)t->seq, (unsigned long long)next);
        refuse(a, t, owed, RSP_EORDER, why);
    } else if (t->seq > next) {
        if (a->num_held == a->capacity) { /* unreachable: credits bound it */
            snprintf(why, sizeof why, "msg->seq %llu: the reorder window is full",
                     (unsigned long long)t->seq);
            refuse(a, t, owed, RSP_EFULL, why);
            return;
        }
        heap_push(a, t); /* keeps its credit until delivered */
        if (a->num_held == 1)
            a->gap_since = rsp__now_ns();
    } else {
        deliver(a, t, owed, stopped);
        release_held(a, owed, stopped);
    }
}

/* Owner: the gap of next_seq stayed open for the timeout: tell the
 * handler's owner, answer every held ticket, stop ordering. */
static void expire_gap(rsp__actor *a)
{
    if (a->cfg.on_gap)
        a->cfg.on_gap(a->cfg.ctx, rsp__load_relaxed_u64(&a->next_seq));
    a->order_off = true;
    uint32_t owed = 0;
    refuse_held(a, &owed, RSP_ETIMEDOUT);
    if (owed)
        wake_credit_waiters(a);
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
            arrive_ordered(a, t, &owed, &stopped);
        } else {
            deliver(a, t, &owed, &stopped);
        }
        if (stopped && a->num_held)
            refuse_held(a, &owed, RSP_ESHUTDOWN);
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
static bool drain(rsp__actor *a, bool *stopped)
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

static void *owner_main(void *arg)
{
    rsp__actor *a = arg;
    note_owner_cpu(a);
    if (a->cfg.on_start)
        a->cfg.on_start(a->cfg.ctx);
    bool stopped = false;
    while (!stopped) {
        if (!drain(a, &stopped))
            owner_idle(a);
        if (a->num_held && rsp__now_ns() - a->gap_since >= a->gap_ns)
            expire_gap(a);
    }
    if (a->cfg.on_stop)
        a->cfg.on_stop(a->cfg.ctx);
    return NULL;
}

rsp_status rsp__actor_check_cpu(int cpu, rsp_error *err)
{
    if (cpu < 0 || cpu >= CPU_SETSIZE)
        return rsp__fail(err, RSP_EINVAL,
                         "owner_cpu %d is not a CPU number (0..%d, or -1: not pinned)", cpu,
                         CPU_SETSIZE - 1);
    const int n = get_nprocs_conf();
    if (cpu >= n)
        return rsp__fail(err, RSP_EINVAL, "owner_cpu %d is not a CPU of this machine (%d CPUs)",
                         cpu, n);
    return RSP_OK;
}

int rsp__actor_pinned_cpu(const rsp__actor *a)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (pthread_getaffinity_np(a->thread, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1)
        return -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set))
            return c;
    return -1;
}

/* pthread_create the owner, pinned to cfg->cpu when cfg->pin (set in its
 * attributes, so it never runs elsewhere). Returns pthread_create's code. */
static int start_owner(rsp__actor *a, const rsp__actor_config *cfg)
{
    if (!cfg->pin)
        return pthread_create(&a->thread, NULL, owner_main, a);
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc != 0)
        return rc;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cfg->cpu, &set);
    rc = pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    if (rc == 0)
        rc = pthread_create(&a->thread, &attr, owner_main, a);
    pthread_attr_destroy(&attr);
    return rc;
}

rsp_status rsp__actor_create(const rsp__actor_config *cfg, rsp__actor **out, rsp_error *err)
{
    if (!cfg || !cfg->handle || !out)
        return rsp__fail(err, RSP_EINVAL, "actor config: handler and out are required");
    if (cfg->pin) {
        rsp_status st = rsp__actor_check_cpu(cfg->cpu, err);
        if (st != RSP_OK)
            return st;
    }
    size_t size = rsp__align_up(sizeof(rsp__actor), RSP__CACHELINE);
    rsp__actor *a = aligned_alloc(RSP__CACHELINE, size);
    if (!a)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the inbox");
    memset(a, 0, size);
    pthread_mutex_init(&a->chunk_lock, NULL); /* cannot fail: default attributes */
    a->chunk_next = RSP__TICKET_CHUNK;
    a->cfg = *cfg;
    a->capacity = cfg->capacity ? cfg->capacity : RSP__ACTOR_DEFAULT_CAPACITY;
    a->credits = a->capacity;
    a->wake_threshold = a->capacity / 4 ? a->capacity / 4 : 1;
    a->spin_ns = cfg->spin_max ? cfg->spin_max : RSP__OWNER_SPIN_NS;
    a->partner_cpu = -1;
    a->owner_cpu_now = -1;
    __cds_wfcq_init(&a->head, &a->tail);
    if (cfg->ordered) {
        /* The reorder heap: held tickets keep their credits, so capacity
         * entries are enough (actor.h, "Ordered delivery"). */
        a->held = calloc(a->capacity, sizeof *a->held);
        if (!a->held) {
            free(a);
            return rsp__fail(err, RSP_ENOMEM, "out of memory for the reorder window");
        }
        a->next_seq = 1;
        a->gap_ns = cfg->reorder_timeout_ns ? cfg->reorder_timeout_ns : RSP__REORDER_TIMEOUT_NS;
    }

    /* Allocated now so that destroy can always close the inbox. */
    void *none;
    a->stop_ticket = rsp__ticket_new(0, &none);
    if (!a->stop_ticket) {
        free(a->held);
        free(a);
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the inbox");
    }
    a->stop_ticket->stop_only = true;
    int rc = start_owner(a, cfg);
    if (rc != 0) {
        free(a->stop_ticket);
        free(a->held);
        free(a);
        if (cfg->pin && rc == EINVAL) /* outside the cpuset this process may use */
            return rsp__fail(err, RSP_EINVAL,
                             "owner_cpu %d is not a CPU this process may run on (pthread_create: "
                             "%s)",
                             cfg->cpu, strerror(rc));
        return rsp__fail(err, rc == EAGAIN ? RSP_ENOMEM : RSP_EINVAL,
                         "cannot start the owner thread (pthread_create: %s)", strerror(rc));
    }
    *out = a;
    return RSP_OK;
}

void rsp__actor_destroy(rsp__actor *a)
{
    if (!a)
        return;
    rsp__actor_close(a, NULL, false, NULL); /* RSP_ESHUTDOWN if already closed: fine */
    pthread_join(a->thread, NULL);

    /* Unreachable by S1/S2, but a message left here would hang its waiter:
     * answer whatever is left. No producer is mid-enqueue any more (the
     * close waited for them), so the splice cannot block for long. */
    bool stopped = true;
    while (drain(a, &stopped))
        ;
    /* Every pooled ticket is back on the stack now: fire-and-forget
     * tickets are released by the owner once answered, and all are. They
     * live in the chunks. */
    while (a->chunks) {
        ticket_chunk *c = a->chunks;
        a->chunks = c->next;
        free(c);
    }
    pthread_mutex_destroy(&a->chunk_lock);
    free(a->stop_ticket);
    free(a->held);
    free(a);
}
