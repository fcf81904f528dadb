/*
 * The actor's tickets: pooled fire-and-forget tickets, a thread's spare,
 * numbering and holds, waiting for an answer (T2), forgetting (T3/T4).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "actor_impl.h"

#include <stdlib.h>
#include <string.h>

#include <urcu/compiler.h>

#include "util/hb.h"

/* A waiter's learned spins are its thread's, not its actor's: a ticket may
 * be waited for while its pool is being destroyed (the waiter must not
 * touch the actor after the answer), and whether a client shares a core
 * with the owner is a property of the client thread. initial-exec: see
 * src/publish/publish_impl.h (a few bytes). */
static _Thread_local __attribute__((tls_model("initial-exec"))) uint64_t rsp__tls_wait_spin[2];

/* ck_stack's pop reads the link of an entry another thread may be popping
 * and reusing at the same time (the generation makes that pop fail and
 * retry): a benign race by design, in memory that stays allocated. TSan
 * cannot see ck_pr's ordering either, so the stack's own accesses are
 * hidden from it and each hand-over is stated with hb (push releases the
 * ticket, pop acquires it), with rsp__hb_ignore_begin/end around it. */

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
    RSP__TICKET_MARK_FREE(first);
    if (n == 1)
        return first;
    for (uint32_t i = 1; i < n; i++) {
        rsp_ticket *t = (rsp_ticket *)(base + i * RSP__POOLED_STRIDE);
        t->pool = a;
        RSP__TICKET_MARK_FREE(t);
        t->free_link.next =
            i + 1 < n ? &((rsp_ticket *)(base + (i + 1) * RSP__POOLED_STRIDE))->free_link : NULL;
        rsp__hb_release(t); /* to the next pooled_get, as rsp__ticket_release */
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
        RSP__ASSERT(t->pool == a && t->state == RSP__TICKET_FREE);
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
 * ticket with a step's declarations is past glibc's per-thread cache, so
 * each call would pay a full malloc and free). A second ticket while the spare is
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
    /* The key's value is NULL now: a later thread-exit destructor (of a key
     * made after this one) whose call keeps a spare must set it again, so
     * that this destructor runs once more and frees that spare too. */
    rsp__tls_spare_keyed = false;
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
    RSP__ASSERT(t->state == RSP__TICKET_FREE);
    rsp__tls_spare = NULL;
    return t;
}

/* Give a ticket's memory back: to its actor's free stack, to this
 * thread's spare, or to malloc. */
void rsp__ticket_release(rsp_ticket *t)
{
    /* Released once: by the last reference (T3), by the owner (a
     * fire-and-forget one), or unposted (refused, discarded). */
    RSP__ASSERT(t->state != RSP__TICKET_FREE);
    RSP__TICKET_MARK_FREE(t);
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

uint32_t rsp__ticket_pooled_free(rsp__actor *a)
{
    uint32_t n = 0;
    rsp__hb_ignore_begin();
    for (ck_stack_entry_t *e = CK_STACK_FIRST(&a->free_tickets); e; e = CK_STACK_NEXT(e))
        n++;
    rsp__hb_ignore_end();
    return n;
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
    t->call = false;
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

void rsp__ticket_discard(rsp_ticket *t)
{
    ticket_drop_hold(t);
    rsp__ticket_release(t);
}

/* spin_until's test for a ticket waiter (relaxed: T2 is the load-acquire
 * that follows it). */
static bool ticket_answered(void *t)
{
    return rsp__load_relaxed_u32(&((rsp_ticket *)t)->state) == RSP__TICKET_DONE;
}

rsp_status rsp__ticket_wait(rsp_ticket *t, uint64_t timeout_ns, rsp_reply *reply)
{
    RSP__ASSERT(t->kept);                          /* only a kept ticket has a waiter's reference */
    uint32_t s = rsp__load_acquire_u32(&t->state); /* T2: pairs with T1 */
    RSP__ASSERT(s <= RSP__TICKET_DONE);
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
    RSP__ASSERT(t->kept);
    ticket_unref(t); /* T3: the owner's drop (or this one, if answered) frees */
}
