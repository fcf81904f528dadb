/*
 * RCU plan publication and reclamation.
 * SPDX-License-Identifier: Apache-2.0
 *
 * liburcu is used through its library symbols: the urcu-memb flavour
 * (liburcu-memb) for default readers, the QSBR flavour (liburcu-qsbr) for
 * readers registered with rsp__reader_register_qsbr; every grace period
 * waits for both. _LGPL_SOURCE is never defined (the library is
 * Apache-2.0).
 * No call_rcu: each publisher has its own reclaimer thread, started with a
 * checked pthread_create (liburcu's call_rcu set-up aborts the process when
 * its malloc or pthread_create fails, and liburcu >= 0.14 joins its worker
 * itself, which made our join a double join).
 *
 * Synchronises-with pairs of this file (listed in docs/ordering.md):
 *
 *   P1/P2  publication. Owner P1: fills the plan, then rcu_assign_pointer
 *          (release store of the pointer). Reader P2: rcu_dereference
 *          (dependency-ordered load) inside a read section, then reads the
 *          plan. A reader sees either the old plan or the complete new one.
 *   G1/G2  reclamation. Reader G1: rcu_read_unlock ends the section (a
 *          QSBR reader: its quiescent state, going offline, unregistering).
 *          Reclaimer G2: the reclaimer thread (or the owner at the cap, or
 *          destroy) returns from grace_period (both flavours'
 *          synchronize_rcu) after a grace period, so
 *          after every section that could have seen the retired pointer
 *          has ended; only then is the publisher's reference dropped.
 *   R1/R2  retired batches. Owner R1: links a batch onto `pending` under
 *          `lock` and signals. Reclaimer R2: takes every pending batch
 *          under `lock`, then waits its grace period. The mutex carries the
 *          batch (and TSan sees it).
 *   M1/M2  recycled plan memory. Any thread M1: the drop that frees a plan
 *          pushes its memory on `recycled` (CAS, release) before its
 *          release decrement of `objects`. Owner M2: takes the whole stack
 *          (exchange with NULL, acquire) and reuses the memory for a later
 *          plan. The owner never pops one node (no ABA); destroy frees what
 *          is left after `objects` reached zero.
 *   X1     references. A ref is a relaxed increment (the caller holds a
 *          reference, or is in a read section that keeps the publisher's
 *          until after G1); every drop is an acq_rel decrement, so the drop
 *          that reaches zero frees after every other holder's last access.
 *   W1/W2  plan wait. Owner W1: stores live_step (release), then bumps
 *          wait_seq (seq_cst RMW), then loads waiters (seq_cst). Waiter W2:
 *          waiters += 1 (seq_cst RMW), snapshots wait_seq (seq_cst load),
 *          loads live_step (acquire), sleeps on wait_seq == snapshot.
 *          Store->load on both sides (seq_cst RMW, then seq_cst load):
 *          either the waiter's snapshot is the bumped one (and the acquire
 *          makes the step visible), or the owner sees the waiter; the futex
 *          compare catches a wake between check and sleep.
 *   W3     waiter exit. A waiter that counted itself (W2) leaves by
 *          decrementing `waiters` under `lock` and broadcasting `left` when
 *          it reaches zero; destroy, after closing, waits under `lock` until
 *          `waiters` is zero. The mutex orders every access of the waiter
 *          (and its caller's read of the pool) before destroy's free.
 *   Q1/Q2  per-step plans. Owner Q1: changes the step table (entries, the
 *          ring, the entry's plan pointer with rcu_assign_pointer) under
 *          `lock`, raising step_hw (release) before an entry past it is
 *          used; then W1 (bump wait_seq, wake). Waiter Q2: checks the table
 *          and the ring under `lock` after its W2 snapshot, so a change
 *          after its check moves wait_seq and wakes it. Reader (plan_get):
 *          load-acquire step_hw, then P2 per entry.
 *   X2     the count of callers' references (user_refs, striped): every
 *          rsp__plan_ref adds one (relaxed), every rsp__plan_unref takes
 *          one away (release) after its last access to the plan; the close
 *          that reads a sum of zero (acquire loads) sees every access
 *          before those.
 *   G3     a bounded grace period (rsp__publisher_grace_timed). The
 *          caller raises grace_want under `lock` and signals; the
 *          reclaimer takes it under `lock` (so its grace period starts
 *          after the ask), waits the grace period (G2), stores grace_done
 *          (release) and wakes; the caller loads it (acquire) and sleeps
 *          on the futex until it reaches its ask or the deadline.
 *   D1/D2  deferred frees (rsp__publisher_defer). Owner D1: links a batch
 *          onto `dpending` under `lock` (as R1). Reclaimer D2: takes it
 *          with the plans (R2), waits its grace period (G2), then runs
 *          each object's fn. At the cap the owner waits a grace period
 *          itself and runs its own batch.
 *
 * The atomics here are __atomic builtins (util/sync.h) and TSan sees them:
 * X1, W1/W2 and the objects count destroy waits on need no hand
 * annotation; R1/R2 and W3 go through a mutex. P1/P2 and G1/G2 go through
 * liburcu, which TSan cannot see, and are mirrored with hb.h.
 */
#include "publish.h"

#include <errno.h>
#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/hb.h"
#include "util/mem.h"
#include "util/time.h"

/* Inline rcu_dereference / rcu_assign_pointer (a few lines each; liburcu
 * offers this without _LGPL_SOURCE, which stays undefined). Not under TSan:
 * inlined, their volatile accesses would be instrumented and reported,
 * while the ordering they rely on (dependency order, liburcu's barriers) is
 * invisible to it; out of line they stay in the uninstrumented library and
 * the P1/P2 mirrors in hb.h carry the edge. */
#ifndef RSP__TSAN
#define URCU_INLINE_SMALL_FUNCTIONS
#endif
#include <urcu/urcu-memb.h>
#include <urcu/urcu-qsbr.h>
#include "util/error.h"
#include "util/sync.h"

/* Misuse that returns a status callers often drop (an unbalanced
 * rsp_read_end) is also printed in debug and sanitizer builds. */
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(RSP__TSAN)
#define RSP__REPORT_MISUSE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSP__REPORT_MISUSE 1
#endif
#endif
#ifndef RSP__REPORT_MISUSE
#define RSP__REPORT_MISUSE 0
#endif

/* rsp_plan.label_index of a label the plan does not address. */
#define NO_INDEX 0xffu
_Static_assert(RSP_MAX_LABELS < NO_INDEX, "label_index holds a labels[] entry in a byte");

typedef struct rsp__plan_label {
    /* The answer of rsp__plan_addressing, built once with the plan: a read
     * is one struct copy (its vectors point into the plan's allocation). */
    rsp_addressing addr;
    char name[RSP_NAME_MAX];
} rsp__plan_label;

/* Immutable after publication except `refs` and `next_retired`. */
struct rsp_plan {
    rsp_plan *next_retired; /* owner, then the reclaimer (R1/R2): retired batch link;
                               once freed, the recycled-stack link (M1/M2) */
    size_t alloc_bytes;     /* the allocation's size (at least the plan's) */
    uint32_t refs;          /* any thread, atomic (X1) */
    rsp__publisher *pub;    /* immutable: the publisher outlives its plans */
    uint64_t step_id;
    bool staged;
    rsp_event ready;
    uint64_t digest; /* rsp__plan_set_digest, before publication */
    uint32_t num_labels;
    uint32_t labels_known; /* labels interned when it was built (RSP_ENOLABEL) */
    uint32_t published;    /* owner only: PUB_LIVE | PUB_STEP, where it is published */
    /* labels[] entry of each label id, NO_INDEX when the plan does not
     * address it: a read finds its label with one load, not a scan. */
    uint8_t label_index[RSP_MAX_LABELS];
    rsp__plan_label labels[]; /* then generations, slot_indices, has_state */
};

/* Stripes of the callers' reference count (rsp__publisher.user_refs). */
#define REF_STRIPES 16u

struct rsp__publisher {
    rsp_plan *live;        /* owner writes (P1); readers rcu_dereference (P2) */
    rsp_plan *staged;      /* same */
    uint64_t live_step;    /* owner writes (W1, release); any thread reads */
    uint32_t has_live;     /* owner writes once 0 -> 1 before the first W1 */
    uint32_t wait_seq;     /* futex word: bumped on each live publish and close */
    uint32_t waiters;      /* any thread, atomic (W2) */
    uint32_t closed;       /* any thread, atomic: 0 -> 1 once */
    uint32_t retired;      /* owner increments, reclaimer decrements (atomic) */
    uint32_t retired_max;  /* owner only writes; tests read */
    uint32_t objects;      /* plans alive: any thread, atomic (X1) */
    uint32_t retired_cap;  /* immutable */
    uint32_t batch_cap;    /* immutable: plans per batch */
    rsp_plan *batch;       /* owner only: retired, not yet handed to the reclaimer */
    rsp_plan *batch_tail;  /* owner only: the batch's last link (its first plan) */
    uint32_t batch_len;    /* owner only */
    void *spare;           /* owner only: a plan's memory, reserved ahead */
    size_t spare_size;     /* (rsp__plan_reserve) */
    rsp_plan *recycled;    /* any thread pushes freed plans (M1); the owner takes all (M2) */
    rsp_plan *reuse;       /* owner only: freed plans taken from `recycled` */
    uint32_t labels_known; /* owner only: labels interned (rsp__publisher_set_labels) */

    /* Per-step plans (Q1/Q2). step_plan[i]: the live plan of the step in
     * entry i, owner writes (P1, under lock), readers rcu_dereference (P2).
     * step_hw: entries ever used (owner writes under lock, release; readers
     * scan that many). steps[] and the ring: under lock. */
    rsp_plan *step_plan[RSP__STEP_TABLE];
    uint32_t step_hw;
    struct {
        uint64_t step_id;
        bool used;
    } steps[RSP__STEP_TABLE];
    struct {
        uint64_t step_id;
        uint32_t end; /* rsp__step_end, or one of the END_* below */
    } ring[RSP__STEP_RING];
    uint32_t ring_len;  /* under lock: records held, <= RSP__STEP_RING */
    uint32_t ring_next; /* under lock: where the next record goes */

    /* The reclaimer hand-off (R1/R2) and the waiter exit (W3). */
    pthread_mutex_t lock;
    pthread_cond_t work;     /* reclaimer sleeps on it: pending or stop */
    pthread_cond_t left;     /* destroy sleeps on it: waiters == 0 */
    rsp_plan *pending;       /* under lock: batches for the reclaimer, one list */
    rsp__deferred *dpending; /* under lock: deferred frees for the reclaimer (D1/D2) */
    rsp__deferred *dbatch;   /* owner only: deferred, not yet handed over */
    uint32_t dbatch_len;     /* owner only */
    uint32_t deferred;       /* owner increments, whoever frees decrements (atomic gauge) */
    bool stop;               /* under lock: destroy asks the reclaimer to finish */
    pthread_t reclaimer;     /* immutable */
    /* Bounded grace periods (rsp__publisher_grace_timed, G3): grace_want
     * under lock (asks), grace_seen the reclaimer's under lock (taken),
     * grace_done a futex word the reclaimer stores after the grace period. */
    uint32_t grace_want, grace_seen;
    uint32_t grace_done;

    /* rsp__plan_ref references not yet dropped (X2), for a bounded close:
     * their sum over the stripes (wrapping). Each thread counts on its own
     * stripe (ref_stripe), a cache line apart, so that reader threads
     * taking references to one plan bounce its refs' line only, not a
     * second one: two threads' ref + unref of one plan cost about 13 ns
     * before the count, 42 with one shared counter, about 20 striped (a
     * loaded 2-core machine). Any thread, atomic. */
    struct {
        alignas(64) uint32_t n;
    } user_refs[REF_STRIPES];
};

/* TSan stand-in for the grace period (G1/G2): every read section releases
 * it at its end, every reclamation acquires it before freeing. */
static char rsp__grace_token;

/* The calling thread's reader state. A thread may be registered with
 * liburcu both as a reader and as an owner (tests do that): liburcu
 * asserts on a second registration, so registrations are counted. */
/* initial-exec: a fixed offset from the thread pointer instead of a
 * __tls_get_addr call per access (the general-dynamic default of -fPIC
 * code), which was a sixth of a read section's instructions. The variables
 * are a few bytes: a dlopen'ed librsp still fits in glibc's static TLS
 * surplus. */
#define RSP__TLS _Thread_local __attribute__((tls_model("initial-exec")))
/* 1 + the stripe of rsp__publisher.user_refs this thread counts its plan
 * references on, 0 until its first; stripes are dealt round robin. */
static RSP__TLS uint32_t rsp__ref_stripe;
static uint32_t rsp__ref_stripes_dealt;

/* The calling thread's stripe of p's reference count. */
static inline uint32_t *ref_count(rsp__publisher *p)
{
    uint32_t s = rsp__ref_stripe;
    if (__builtin_expect(s == 0, 0))
        s = rsp__ref_stripe =
            rsp__fetch_add_relaxed_u32(&rsp__ref_stripes_dealt, 1) % REF_STRIPES + 1;
    return &p->user_refs[s - 1].n;
}

/* What the calling thread is as a reader (tls_mode(), below). */
enum {
    MODE_NONE = 0,     /* not registered */
    MODE_MEMB,         /* a default reader (urcu-memb): sections lock and unlock */
    MODE_QSBR_ONLINE,  /* a QSBR reader, online: holds plans until it is quiescent */
    MODE_QSBR_OFFLINE, /* a QSBR reader, offline: may not read */
};
/* The mode (MODE_*) and the read-section nesting in one word, mode above
 * DEPTH_BITS: one thread-local load tells a fast path everything (a
 * default reader outside any section is exactly MEMB_IDLE, inside its
 * outermost one MEMB_IDLE + 1). Nesting deeper than DEPTH_MASK is refused
 * (RSP_EINVAL) rather than carried into the mode. A forked child's thread
 * starts over at 0 (rsp__reader_fork_child), so no fast path runs there. */
#define DEPTH_BITS 24
#define DEPTH_MASK ((1u << DEPTH_BITS) - 1)
#define MODE_WORD(m) ((uint32_t)(m) << DEPTH_BITS)
#define MEMB_IDLE MODE_WORD(MODE_MEMB)
static RSP__TLS uint32_t rsp__tls_reader;   /* MODE_WORD(mode) | depth */
static RSP__TLS uint32_t rsp__tls_rcu_regs; /* liburcu-memb registrations held */

static inline uint32_t tls_mode(void)
{
    return rsp__tls_reader >> DEPTH_BITS;
}

static inline uint32_t tls_depth(void)
{
    return rsp__tls_reader & DEPTH_MASK;
}

static inline void tls_set_mode(uint32_t mode)
{
    rsp__tls_reader = MODE_WORD(mode) | tls_depth();
}

static void rcu_register_ref(void)
{
    if (rsp__tls_rcu_regs++ == 0)
        urcu_memb_register_thread();
}

static void rcu_unregister_ref(void)
{
    if (--rsp__tls_rcu_regs == 0)
        urcu_memb_unregister_thread();
}

/* G2: wait until every read section of a default reader that began before
 * has ended, and every QSBR reader has been quiescent (or offline) since:
 * one grace period of each flavour. */
static void grace_period(void)
{
    urcu_memb_synchronize_rcu();
    urcu_qsbr_synchronize_rcu();
    rsp__hb_acquire(&rsp__grace_token);
}

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */
/* ------------------------------------------------------------------------ */

/* ASan: a recycled plan's memory past its two header words (the stack link
 * and the size) is poisoned until the owner reuses it, so a reader that
 * touches a reclaimed plan is still reported. */
#if defined(__SANITIZE_ADDRESS__)
#define RSP__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSP__ASAN 1
#endif
#endif
#ifdef RSP__ASAN
#include <sanitizer/asan_interface.h>
#define RECYCLED_HEAD (offsetof(rsp_plan, alloc_bytes) + sizeof(size_t))
static void recycled_poison(rsp_plan *plan, bool poison)
{
    char *body = (char *)plan + RECYCLED_HEAD;
    if (poison)
        ASAN_POISON_MEMORY_REGION(body, plan->alloc_bytes - RECYCLED_HEAD);
    else
        ASAN_UNPOISON_MEMORY_REGION(body, plan->alloc_bytes - RECYCLED_HEAD);
}
#else
static void recycled_poison(rsp_plan *plan, bool poison)
{
    (void)plan;
    (void)poison;
}
#endif

/* The last reference is gone: the memory goes on the publisher's recycled
 * stack (M1), where the owner takes it for a later plan instead of a
 * malloc (and this thread's free). */
static void plan_free(rsp_plan *plan)
{
    rsp__publisher *p = plan->pub;
    recycled_poison(plan, true);
    rsp_plan *head = __atomic_load_n(&p->recycled, __ATOMIC_RELAXED);
    do
        plan->next_retired = head;
    while (!__atomic_compare_exchange_n(&p->recycled, &head, plan, true, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
    /* Last access to the publisher: its destroy waits for zero. Release:
     * pairs with destroy's acquire load of `objects` before free(p). */
    rsp__fetch_add_release_u32(&p->objects, UINT32_MAX);
}

/* Owner (M2): a recycled plan's memory of at least `bytes`, or NULL. Takes
 * the whole recycled stack when the owner's own list is empty; a block too
 * small for this plan is freed (plans of one pool are of similar sizes, so
 * the list soon holds blocks of the largest). */
static void *recycled_take(rsp__publisher *p, size_t bytes, size_t *got)
{
    if (!p->reuse)
        p->reuse = __atomic_exchange_n(&p->recycled, NULL, __ATOMIC_ACQUIRE);
    while (p->reuse) {
        rsp_plan *plan = p->reuse;
        p->reuse = plan->next_retired;
        if (plan->alloc_bytes >= bytes) {
            recycled_poison(plan, false);
            *got = plan->alloc_bytes;
            return plan;
        }
        free(plan);
    }
    return NULL;
}

/* Free a list of recycled plans (destroy). */
static void recycled_free(rsp_plan *plan)
{
    while (plan) {
        rsp_plan *next = plan->next_retired;
        free(plan);
        plan = next;
    }
}

/* X1: drop one reference; the last one frees. X1: pairs with every other
 * holder's drop: acq_rel, so this holder's reads of the plan happen before
 * the free, and the free after every other holder's drop. */
static void plan_drop(rsp_plan *plan)
{
    if (rsp__fetch_add_acq_rel_u32(&plan->refs, UINT32_MAX) == 1)
        plan_free(plan);
}

/* Byte offsets of a plan's parts in its one allocation; returns its size. */
typedef struct plan_offsets {
    size_t gens, idx, flags;
} plan_offsets;

static size_t plan_layout(uint32_t num_labels, size_t gens, size_t entries, plan_offsets *o)
{
    o->gens = rsp__align_up(sizeof(rsp_plan) + (size_t)num_labels * sizeof(rsp__plan_label),
                            alignof(uint64_t));
    o->idx = rsp__align_up(o->gens + gens * sizeof(uint64_t), alignof(int32_t));
    o->flags = o->idx + entries * sizeof(int32_t);
    return o->flags + entries * sizeof(bool);
}

rsp_status rsp__plan_reserve(rsp__publisher *p, uint32_t num_labels, uint64_t rows,
                             uint64_t entries, rsp_error *err)
{
    if (rows > SIZE_MAX / 16 || entries > SIZE_MAX / 16)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for a plan of %llu entries",
                         (unsigned long long)entries);
    plan_offsets o;
    size_t bytes = plan_layout(num_labels, (size_t)rows, (size_t)entries, &o);
    if (p->spare_size >= bytes)
        return RSP_OK;
    free(p->spare);
    p->spare_size = 0;
    if ((p->spare = recycled_take(p, bytes, &p->spare_size)) != NULL)
        return RSP_OK;
    if (!(p->spare = malloc(bytes)))
        return rsp__fail(err, RSP_ENOMEM, "out of memory for a plan of %llu entries",
                         (unsigned long long)entries);
    p->spare_size = bytes;
    return RSP_OK;
}

/* Owner: the memory of a plan of `bytes`: the reserved memory when it fits
 * (the owner reserved it before the core changed anything), else a
 * recycled plan's, else a new allocation (NULL: out of memory). */
static unsigned char *plan_memory(rsp__publisher *p, size_t bytes, size_t *alloc_bytes)
{
    unsigned char *mem;
    if (p->spare && p->spare_size >= bytes) {
        mem = p->spare;
        *alloc_bytes = p->spare_size;
        p->spare = NULL;
        p->spare_size = 0;
        return mem;
    }
    if ((mem = recycled_take(p, bytes, alloc_bytes)) != NULL)
        return mem;
    *alloc_bytes = bytes;
    return malloc(bytes);
}

rsp_status rsp__plan_new(rsp__publisher *p, uint64_t step_id, bool staged, rsp_event ready,
                         const rsp__plan_label_src *labels, uint32_t num_labels, rsp_plan **out,
                         rsp_error *err)
{
    size_t gens = 0, idx = 0;
    for (uint32_t i = 0; i < num_labels; i++) {
        gens += labels[i].num_rows;
        idx += labels[i].length;
    }
    plan_offsets off;
    const size_t bytes = plan_layout(num_labels, gens, idx, &off);
    size_t alloc_bytes;
    unsigned char *mem = plan_memory(p, bytes, &alloc_bytes);
    if (!mem)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the plan of step %llu",
                         (unsigned long long)step_id);
    rsp_plan *plan = (rsp_plan *)mem;
    memset(plan, 0, sizeof *plan);
    plan->alloc_bytes = alloc_bytes;
    plan->refs = 1; /* the publisher's */
    plan->pub = p;
    plan->step_id = step_id;
    plan->staged = staged;
    plan->ready = ready;
    plan->digest = 0;
    plan->num_labels = num_labels;
    plan->labels_known = p->labels_known;
    memset(plan->label_index, NO_INDEX, sizeof plan->label_index);
    uint64_t *g = (uint64_t *)(mem + off.gens);
    int32_t *si = (int32_t *)(mem + off.idx);
    bool *hs = (bool *)(mem + off.flags);
    for (uint32_t i = 0; i < num_labels; i++) {
        const rsp__plan_label_src *s = &labels[i];
        rsp__plan_label *l = &plan->labels[i];
        /* The name, truncated (a bounded copy: snprintf was half of this
         * function's instructions). */
        const char *name = s->name ? s->name : "?";
        size_t n = strnlen(name, sizeof l->name - 1);
        memcpy(l->name, name, n);
        l->name[n] = '\0';
        if (s->num_rows)
            memcpy(g, s->generations, s->num_rows * sizeof *g);
        if (s->length) {
            memcpy(si, s->slot_indices, s->length * sizeof *si);
            memcpy(hs, s->has_state, s->length * sizeof *hs);
        }
        l->addr = (rsp_addressing){
            .label = s->label,
            .step_id = step_id,
            .staged = staged,
            .num_rows = s->num_rows,
            .length = s->length,
            .slot_indices = si,
            .has_state = hs,
            .generations = g,
            .device_slot_indices = s->device_slot_indices,
            .device_has_state = s->device_has_state,
            .ready = ready,
        };
        if (s->label < RSP_MAX_LABELS && plan->label_index[s->label] == NO_INDEX)
            plan->label_index[s->label] = (uint8_t)i;
        g += s->num_rows;
        si += s->length;
        hs += s->length;
    }
    /* Relaxed: destroy reads the count only after the owner stopped
     * (pthread_join orders this), and frees after the decrements (release). */
    rsp__fetch_add_relaxed_u32(&p->objects, 1);
    *out = plan;
    return RSP_OK;
}

void rsp__plan_discard(rsp_plan *plan)
{
    if (plan)
        plan_free(plan);
}

uint64_t rsp__plan_step_id(const rsp_plan *plan)
{
    return plan->step_id;
}

bool rsp__plan_is_staged(const rsp_plan *plan)
{
    return plan->staged;
}

void rsp__plan_set_digest(rsp_plan *plan, uint64_t digest)
{
    plan->digest = digest;
}

uint64_t rsp__plan_digest(const rsp_plan *plan)
{
    return plan->digest;
}

/* The refusals of rsp__plan_addressing, out of its fast path (which then
 * needs no stack frame). */
__attribute__((noinline, cold)) static rsp_status
addressing_refused(const rsp_plan *plan, rsp_label_id label, rsp_error *err)
{
    if (label >= plan->labels_known)
        return rsp__fail(err, RSP_ENOLABEL,
                         "label %u is not interned (the pool had %u labels when step %llu was "
                         "planned)",
                         label, plan->labels_known, (unsigned long long)plan->step_id);
    /* Name the labels that were planned, so the caller sees its mistake. */
    char list[RSP_ERROR_MAX];
    size_t n = 0;
    list[0] = '\0';
    for (uint32_t i = 0; i < plan->num_labels && n < sizeof list; i++) {
        int w = snprintf(list + n, sizeof list - n, "%s%s (%u)", i ? ", " : "",
                         plan->labels[i].name, plan->labels[i].addr.label);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    return rsp__fail(err, RSP_ENOPLAN, "label %u is not planned in %s step %llu; planned: %s",
                     label, plan->staged ? "staged" : "live", (unsigned long long)plan->step_id,
                     plan->num_labels ? list : "no label");
}

rsp_status rsp__plan_addressing(const rsp_plan *plan, rsp_label_id label, rsp_addressing *out,
                                rsp_error *err)
{
    const uint32_t i = label < RSP_MAX_LABELS ? plan->label_index[label] : NO_INDEX;
    if (__builtin_expect(i == NO_INDEX, 0))
        return addressing_refused(plan, label, err);
    *out = plan->labels[i].addr;
    return RSP_OK;
}

const rsp_plan *rsp__plan_ref(const rsp_plan *plan)
{
    /* X1: the caller is in a read section (the publisher's reference is
     * still there) or holds a reference, so refs > 0 here. Relaxed, as for
     * any increment made while holding a reference: the reclaimer's drop
     * comes after a grace period (G1/G2), so after this increment, and
     * every drop is acq_rel. */
    rsp__fetch_add_relaxed_u32(&((rsp_plan *)plan)->refs, 1);
    rsp__fetch_add_relaxed_u32(ref_count(plan->pub), 1); /* X2 */
    return plan;
}

void rsp__plan_unref(const rsp_plan *plan)
{
    /* X2 first: the drop may free the plan, and the publisher with it
     * only once objects is zero, which this plan keeps above zero. */
    rsp__fetch_add_release_u32(ref_count(plan->pub), UINT32_MAX);
    plan_drop((rsp_plan *)plan);
}

/* ------------------------------------------------------------------------ */
/* Publisher                                                                 */
/* ------------------------------------------------------------------------ */

/* Drop the publisher's reference to every plan of a retired list, after a
 * grace period (G2). Returns how many. */
static uint32_t drop_batch(rsp_plan *plan)
{
    uint32_t n = 0;
    while (plan) {
        rsp_plan *next = plan->next_retired;
        rsp__hb_acquire(plan); /* the owner's writes (TSan mirror of P1) */
        plan_drop(plan);
        plan = next;
        n++;
    }
    return n;
}

/* Run every deferred free of a list, after a grace period (G2, D2). */
static void run_deferred(rsp__publisher *p, rsp__deferred *d)
{
    uint32_t n = 0;
    while (d) {
        rsp__deferred *next = d->next;
        rsp__hb_acquire(d); /* D1 (TSan mirror of the owner's writes) */
        d->fn(d);
        d = next;
        n++;
    }
    rsp__fetch_add_relaxed_u32(&p->deferred, (uint32_t)-n); /* a gauge */
}

/* The reclaimer thread: takes every batch handed over so far (R2, D2),
 * waits one grace period for all of them (G2), frees them; sleeps when
 * there is nothing to do. Exits once destroy asked and nothing is pending. */
static void *reclaimer_main(void *arg)
{
    rsp__publisher *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->pending && !p->dpending && p->grace_want == p->grace_seen && !p->stop)
            pthread_cond_wait(&p->work, &p->lock);
        rsp_plan *list = p->pending;        /* R2 */
        rsp__deferred *dlist = p->dpending; /* D2 */
        const bool asked = p->grace_want != p->grace_seen;
        const uint32_t want = p->grace_want; /* G3: taken after the ask */
        p->pending = NULL;
        p->dpending = NULL;
        p->grace_seen = want;
        if (!list && !dlist && !asked)
            break; /* stop, and nothing left */
        pthread_mutex_unlock(&p->lock);
        grace_period(); /* G2: one grace period for every batch taken */
        uint32_t n = drop_batch(list);
        /* A gauge (the owner reads it for the cap): relaxed. */
        rsp__fetch_add_relaxed_u32(&p->retired, (uint32_t)-n);
        run_deferred(p, dlist);
        if (asked) { /* G3 */
            rsp__store_release_u32(&p->grace_done, want);
            rsp__futex_wake_all(&p->grace_done);
        }
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

rsp_status rsp__publisher_create(uint32_t retired_cap, rsp__publisher **out, rsp_error *err)
{
    /* Aligned for user_refs' cache lines; sizeof is a multiple of 64. */
    rsp__publisher *p = aligned_alloc(alignof(rsp__publisher), sizeof *p);
    if (p)
        memset(p, 0, sizeof *p);
    if (!p)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the plan publisher");
    p->retired_cap = retired_cap ? retired_cap : RSP__RETIRED_CAP_DEFAULT;
    p->batch_cap = p->retired_cap / 4 ? p->retired_cap / 4 : 1;
    p->labels_known = RSP_MAX_LABELS;
    int rc = pthread_mutex_init(&p->lock, NULL);
    if (rc != 0)
        goto fail_lock;
    rc = pthread_cond_init(&p->work, NULL);
    if (rc != 0)
        goto fail_work;
    rc = pthread_cond_init(&p->left, NULL);
    if (rc != 0)
        goto fail_left;
    /* Everything above is handed to the reclaimer through pthread_create. */
    rc = pthread_create(&p->reclaimer, NULL, reclaimer_main, p);
    if (rc != 0)
        goto fail_thread;
    *out = p;
    return RSP_OK;

fail_thread:
    pthread_cond_destroy(&p->left);
fail_left:
    pthread_cond_destroy(&p->work);
fail_work:
    pthread_mutex_destroy(&p->lock);
fail_lock:
    free(p);
    return rsp__fail(err, rc == EAGAIN || rc == ENOMEM ? RSP_ENOMEM : RSP_EINVAL,
                     "cannot start the plan reclaimer (%s)", strerror(rc));
}

/* Owner: whether the batch may go to the reclaimer: the reclaimer's share
 * (plans retired minus the batch) plus the batch must leave room for one
 * more batch under the cap, so that while the reclaimer lags (a long read
 * section) the owner still gathers a whole batch per grace period it waits
 * for (instead of one per plan). */
static bool batch_fits_reclaimer(const rsp__publisher *p)
{
    uint32_t in_flight = rsp__load_relaxed_u32(&p->retired) - p->batch_len;
    return in_flight + p->batch_len <= p->retired_cap - p->batch_cap;
}

/* Owner: hand the retired batch to the reclaimer (R1). A short critical
 * section (two pointer stores) and a futex wake if the reclaimer sleeps. */
static void batch_to_reclaimer(rsp__publisher *p)
{
    rsp_plan *head = p->batch, *tail = p->batch_tail;
    p->batch = NULL;
    p->batch_tail = NULL;
    p->batch_len = 0;
    pthread_mutex_lock(&p->lock);
    tail->next_retired = p->pending; /* R1 */
    p->pending = head;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
}

/* Owner: hand the deferred batch to the reclaimer (D1). */
static void dbatch_to_reclaimer(rsp__publisher *p)
{
    rsp__deferred *head = p->dbatch, *tail = head;
    while (tail->next)
        tail = tail->next;
    p->dbatch = NULL;
    p->dbatch_len = 0;
    pthread_mutex_lock(&p->lock);
    tail->next = p->dpending; /* D1 */
    p->dpending = head;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
}

void rsp__publisher_defer(rsp__publisher *p, rsp__deferred *d)
{
    rsp__hb_release(d); /* D1 (TSan mirror: the hand-off crosses liburcu) */
    d->next = p->dbatch;
    p->dbatch = d;
    p->dbatch_len++;
    uint32_t n = rsp__fetch_add_relaxed_u32(&p->deferred, 1) + 1; /* a gauge */
    if (p->dbatch_len < RSP__DEFER_BATCH)
        return;
    if (n <= RSP__DEFER_CAP) {
        dbatch_to_reclaimer(p);
        return;
    }
    /* The reclaimer lags (a long read section): bound what waits. */
    grace_period(); /* G2 */
    rsp__deferred *list = p->dbatch;
    p->dbatch = NULL;
    p->dbatch_len = 0;
    run_deferred(p, list);
}

uint32_t rsp__publisher_deferred(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32(&p->deferred);
}

void rsp__publisher_flush(rsp__publisher *p)
{
    if (p->dbatch)
        dbatch_to_reclaimer(p); /* small objects: no cap to keep room for */
    /* Past the room for the reclaimer the batch waits for the next retire
     * (which waits for a grace period): an idle owner must not block on a
     * reader's long read section. */
    if (p->batch && batch_fits_reclaimer(p))
        batch_to_reclaimer(p);
}

/*
 * Owner: drop the publisher's reference to a plan readers may still see.
 * Retired plans gather in a batch of batch_cap, handed to the reclaimer
 * whole while its share leaves room for a batch under the cap. Past that,
 * a full batch waits for one grace period here (synchronize_rcu) and is
 * freed at once: one grace period per batch_cap plans however far the
 * reclaimer lags, and `retired` (every plan not yet reclaimed, batch
 * included) never exceeds the cap.
 */
static void retire(rsp__publisher *p, rsp_plan *plan)
{
    if (!plan)
        return;
    rsp__hb_release(plan);
    plan->next_retired = p->batch;
    if (!p->batch)
        p->batch_tail = plan;
    p->batch = plan;
    p->batch_len++;
    uint32_t r = rsp__fetch_add_relaxed_u32(&p->retired, 1) + 1; /* a gauge */
    if (r > p->retired_max)
        rsp__store_relaxed_u32(&p->retired_max, r);
    if (p->batch_len < p->batch_cap)
        return;
    if (batch_fits_reclaimer(p)) {
        batch_to_reclaimer(p);
        return;
    }
    grace_period(); /* G2 */
    uint32_t n = drop_batch(p->batch);
    p->batch = NULL;
    p->batch_tail = NULL;
    p->batch_len = 0;
    rsp__fetch_add_relaxed_u32(&p->retired, (uint32_t)-n); /* a gauge */
}

static void step_publish(rsp__publisher *p, rsp_plan *plan);

/* Where a live plan is published: the live pointer and its step's entry.
 * One publisher reference covers both; it is retired once the plan has
 * left both (a retired plan is on one batch list: it is retired once). */
enum { PUB_LIVE = 1, PUB_STEP = 2 };

static void unpublish(rsp__publisher *p, rsp_plan *plan, uint32_t where)
{
    if (!plan)
        return;
    plan->published &= ~where;
    if (!plan->published)
        retire(p, plan);
}

void rsp__publish_live(rsp__publisher *p, rsp_plan *plan)
{
    rsp_plan *old = p->live; /* owner is the only writer: a plain read */
    rsp__hb_release(plan);   /* P1 (TSan mirror: liburcu is not instrumented) */
    plan->published = PUB_LIVE;
    /* P1: release store; pairs with rcu_dereference (P2) in readers. */
    rcu_assign_pointer(p->live, plan);
    /* W1: pairs with W2 in rsp__publisher_wait. */
    step_publish(p, plan); /* its step's entry (before W1: wait_step sees it) */
    rsp__store_release_u64(&p->live_step, plan->step_id);
    if (!rsp__load_relaxed_u32(&p->has_live))
        rsp__store_release_u32(&p->has_live, 1);
    /* W1: seq_cst RMW (a release too: a waiter whose snapshot reads it sees
     * live_step), then seq_cst load of `waiters` (store->load against W2). */
    rsp__fetch_add_seq_cst_u32(&p->wait_seq, 1);
    if (rsp__load_seq_cst_u32(&p->waiters) != 0)
        rsp__futex_wake_all(&p->wait_seq);
    unpublish(p, old, PUB_LIVE);
}

/* ------------------------------------------------------------------------ */
/* Per-step plans                                                            */
/* ------------------------------------------------------------------------ */

static const rsp_plan *read_pointer(rsp_plan *const *slot);

/* Ring records beyond rsp__step_end: which answer a waiter gets. */
enum { END_COMMITTED_NO_PLAN = 100, END_ROLLED_BACK_PLANNED };

/* Under lock: the table entry of step_id, or RSP__STEP_TABLE. */
static uint32_t step_entry(const rsp__publisher *p, uint64_t step_id)
{
    for (uint32_t i = 0; i < p->step_hw; i++)
        if (p->steps[i].used && p->steps[i].step_id == step_id)
            return i;
    return RSP__STEP_TABLE;
}

bool rsp__publisher_step_admitted(rsp__publisher *p, uint64_t step_id)
{
    bool ok = true;
    pthread_mutex_lock(&p->lock);
    if (step_entry(p, step_id) == RSP__STEP_TABLE) {
        uint32_t i = 0;
        while (i < RSP__STEP_TABLE && p->steps[i].used)
            i++;
        if (i == RSP__STEP_TABLE) {
            ok = false;
        } else {
            p->steps[i].step_id = step_id;
            p->steps[i].used = true;
            if (i >= p->step_hw) /* Q1: readers scan step_hw entries */
                rsp__store_release_u32(&p->step_hw, i + 1);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return ok;
}

/* Owner, from rsp__publish_live: the live plan also goes into its step's
 * entry, with a reference of its own (retired when the step ends). A plan
 * of a step the table does not hold (tests that drive the publisher alone)
 * is only the live plan. */
static void step_publish(rsp__publisher *p, rsp_plan *plan)
{
    pthread_mutex_lock(&p->lock);
    uint32_t i = step_entry(p, plan->step_id);
    rsp_plan *old = NULL;
    if (i != RSP__STEP_TABLE) {
        old = p->step_plan[i]; /* a step is planned once; kept for safety */
        plan->published |= PUB_STEP;
        rcu_assign_pointer(p->step_plan[i], plan); /* P1 (hb: rsp__publish_live) */
    }
    pthread_mutex_unlock(&p->lock);
    unpublish(p, old, PUB_STEP);
}

/* Wake the waiters of rsp__publisher_wait / _wait_step (W1). */
static void wake_waiters(rsp__publisher *p)
{
    rsp__fetch_add_seq_cst_u32(&p->wait_seq, 1);
    if (rsp__load_seq_cst_u32(&p->waiters) != 0)
        rsp__futex_wake_all(&p->wait_seq);
}

void rsp__publisher_step_finished(rsp__publisher *p, uint64_t step_id, rsp__step_end end)
{
    rsp_plan *old = NULL;
    pthread_mutex_lock(&p->lock);
    uint32_t i = step_entry(p, step_id);
    const bool in_flight = i != RSP__STEP_TABLE;
    /* A refused re-admit leaves its step in flight; a rollback of a step
     * not in flight does nothing (rsp_step_rollback). */
    const bool record = end == RSP__STEP_REFUSED ? !in_flight : in_flight;
    if (record) {
        uint32_t what = end;
        if (in_flight) {
            old = p->step_plan[i];
            rcu_assign_pointer(p->step_plan[i], NULL);
            p->steps[i].used = false;
            if (end == RSP__STEP_COMMITTED && !old)
                what = END_COMMITTED_NO_PLAN;
            else if (end == RSP__STEP_ROLLED_BACK && old)
                what = END_ROLLED_BACK_PLANNED;
        }
        p->ring[p->ring_next].step_id = step_id;
        p->ring[p->ring_next].end = what;
        p->ring_next = (p->ring_next + 1) % RSP__STEP_RING;
        if (p->ring_len < RSP__STEP_RING)
            p->ring_len++;
    }
    pthread_mutex_unlock(&p->lock);
    if (record)
        wake_waiters(p); /* W1: after the change, made under lock (Q1) */
    unpublish(p, old, PUB_STEP);
}

void rsp__publisher_set_labels(rsp__publisher *p, uint32_t num_labels)
{
    p->labels_known = num_labels;
}

const rsp_plan *rsp__publisher_step_plan(const rsp__publisher *p, uint64_t step_id)
{
    if (tls_depth() == 0)
        return NULL;
    /* Q2: acquire, pairs with the release of step_hw in step_admitted; an
     * entry past it is NULL. Then P2 per entry. */
    uint32_t n = rsp__load_acquire_u32((uint32_t *)&p->step_hw);
    for (uint32_t i = 0; i < n; i++) {
        const rsp_plan *plan = read_pointer(&p->step_plan[i]);
        if (plan && plan->step_id == step_id)
            return plan;
    }
    return NULL;
}

/* Under lock: whether step_id is decided: RSP_OK (its plan is published),
 * RSP_ENOPLAN (it ended without one readable), or RSP_EAGAIN (wait). */
static rsp_status step_answer(const rsp__publisher *p, uint64_t step_id, rsp_error *err)
{
    uint32_t i = step_entry(p, step_id);
    if (i != RSP__STEP_TABLE)
        return p->step_plan[i] ? RSP_OK : RSP_EAGAIN;
    const unsigned long long id = (unsigned long long)step_id;
    for (uint32_t k = 1; k <= p->ring_len; k++) { /* newest first */
        uint32_t r = (p->ring_next + RSP__STEP_RING - k) % RSP__STEP_RING;
        if (p->ring[r].step_id != step_id)
            continue;
        switch (p->ring[r].end) {
        case RSP__STEP_COMMITTED:
            return rsp__fail(err, RSP_ENOPLAN,
                             "step %llu was committed: its plan is gone (a step's plan is "
                             "readable only while the step is in flight)",
                             id);
        case END_COMMITTED_NO_PLAN:
            return rsp__fail(err, RSP_ENOPLAN,
                             "step %llu was committed without a live plan (a capture)", id);
        case RSP__STEP_ROLLED_BACK:
            return rsp__fail(err, RSP_ENOPLAN, "step %llu was rolled back before it was planned",
                             id);
        case END_ROLLED_BACK_PLANNED:
            return rsp__fail(err, RSP_ENOPLAN, "step %llu was rolled back: its plan is withdrawn",
                             id);
        default:
            return rsp__fail(err, RSP_ENOPLAN,
                             "step %llu was refused at admit (an error, or no room: ok false)", id);
        }
    }
    return RSP_EAGAIN;
}

static rsp_status step_check(rsp__publisher *p, uint64_t step_id, rsp_error *err)
{
    pthread_mutex_lock(&p->lock); /* Q2: pairs with the owner's unlock (Q1) */
    rsp_status st = step_answer(p, step_id, err);
    pthread_mutex_unlock(&p->lock);
    return st;
}

void rsp__publish_staged(rsp__publisher *p, rsp_plan *plan)
{
    rsp_plan *old = p->staged;
    if (old == plan)
        return;
    if (plan)
        rsp__hb_release(plan);           /* P1 (TSan mirror) */
    rcu_assign_pointer(p->staged, plan); /* P1 */
    retire(p, old);
}

void rsp__publisher_close(rsp__publisher *p)
{
    /* Relaxed: the release bump of wait_seq below publishes it to a waiter
     * whose (seq_cst, so acquire) snapshot reads the bump; a waiter with an
     * older snapshot is woken, or its futex compare fails. */
    rsp__store_relaxed_u32(&p->closed, 1);
    rsp__fetch_add_release_u32(&p->wait_seq, 1);
    rsp__futex_wake_all(&p->wait_seq);
}

static const rsp_plan *read_pointer(rsp_plan *const *slot)
{
    if (tls_depth() == 0)
        return NULL; /* outside a read section the pointer could be freed */
    /* P2: dependency-ordered load; pairs with rcu_assign_pointer (P1). */
    rsp_plan *plan = rcu_dereference(*(rsp_plan **)slot);
    if (plan)
        rsp__hb_acquire(plan); /* P2 (TSan mirror) */
    return plan;
}

const rsp_plan *rsp__publisher_live(const rsp__publisher *p)
{
    return read_pointer(&p->live);
}

const rsp_plan *rsp__publisher_staged(const rsp__publisher *p)
{
    return read_pointer(&p->staged);
}

rsp_status rsp__read_section_check(const char *what, rsp_error *err)
{
    if (__builtin_expect(tls_depth() != 0, 1))
        return RSP_OK;
    if (tls_mode() == MODE_NONE)
        return rsp__fail(err, RSP_ENOTREG,
                         "%s: the calling thread is not registered: call rsp_reader_register first",
                         what);
    return rsp__fail(err, RSP_EINVAL, "%s called outside a read section (rsp_read_begin)", what);
}

/* The refusals of rsp__live_addressing, out of its fast path. */
__attribute__((noinline, cold)) static rsp_status live_refused(rsp_error *err)
{
    if (rsp__forked()) /* a forked child's threads start outside any section */
        return rsp__fail_forked(err);
    if (tls_mode() == MODE_NONE)
        return rsp__fail(err, RSP_ENOTREG,
                         "rsp_live_addressing: the calling thread is not registered: call "
                         "rsp_reader_register first");
    if (tls_depth() == 0)
        return rsp__fail(err, RSP_EINVAL,
                         "rsp_live_addressing called outside a read section (rsp_read_begin)");
    return rsp__fail(err, RSP_ENOPLAN, "no live plan yet (no step was planned)");
}

rsp_status rsp__live_addressing(const rsp__publisher *p, rsp_label_id label, rsp_addressing *out,
                                rsp_error *err)
{
    const rsp_plan *plan = read_pointer(&p->live);
    if (__builtin_expect(!plan, 0))
        return live_refused(err);
    return rsp__plan_addressing(plan, label, out, err);
}

static bool step_reached(rsp__publisher *p, uint64_t step_id)
{
    /* W2: acquire; pairs with the release stores of W1. */
    return rsp__load_acquire_u32(&p->has_live) && rsp__load_acquire_u64(&p->live_step) >= step_id;
}

/* What a plan waiter waits for: RSP_EAGAIN while it should go on waiting,
 * else its answer. */
typedef rsp_status (*wait_check)(rsp__publisher *p, uint64_t step_id, rsp_error *err);

static rsp_status reached_check(rsp__publisher *p, uint64_t step_id, rsp_error *err)
{
    (void)err;
    return step_reached(p, step_id) ? RSP_OK : RSP_EAGAIN;
}

/* The one plan wait, for rsp__publisher_wait (a step >= step_id) and
 * rsp__publisher_wait_step (exactly step_id): announce the waiter (W2, under
 * `lock` for W3's sake: destroy reads the count under it), then sleep on
 * wait_seq until `check` answers, the pool closes or the deadline passes,
 * and leave (W3). */
static rsp_status wait_for(rsp__publisher *p, wait_check check, uint64_t step_id, bool exact,
                           uint64_t timeout_ns, rsp_error *err)
{
    rsp_status st = check(p, step_id, err);
    if (st != RSP_EAGAIN)
        return st;
    char which[48];
    snprintf(which, sizeof which, exact ? "step %llu" : "a step >= %llu",
             (unsigned long long)step_id);
    if (timeout_ns == 0)
        return rsp__fail(err, RSP_ETIMEDOUT, "%s has no live plan yet", which);
    const uint64_t deadline = rsp__deadline(timeout_ns);
    /* W2: pairs with W1 (seq_cst RMW here, seq_cst load of wait_seq below). */
    pthread_mutex_lock(&p->lock);
    rsp__fetch_add_seq_cst_u32(&p->waiters, 1);
    pthread_mutex_unlock(&p->lock);
    for (;;) {
        /* W2: seq_cst load after the seq_cst announce (store->load). */
        uint32_t seq = rsp__load_seq_cst_u32(&p->wait_seq);
        st = check(p, step_id, err);
        if (st != RSP_EAGAIN)
            break;
        if (rsp__load_relaxed_u32(&p->closed)) {
            st = rsp__fail(err, RSP_ESHUTDOWN, "the pool shut down before %s was planned", which);
            break;
        }
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel)) {
            st = rsp__fail(err, RSP_ETIMEDOUT, "%s had no live plan before the timeout", which);
            break;
        }
        rsp__futex_wait(&p->wait_seq, seq, rel);
    }
    /* W3: the last accesses to p. Destroy waits under `lock` for zero, so
     * it frees p only after this unlock. */
    pthread_mutex_lock(&p->lock);
    if (rsp__fetch_add_release_u32(&p->waiters, UINT32_MAX) == 1)
        pthread_cond_broadcast(&p->left);
    pthread_mutex_unlock(&p->lock);
    return st;
}

rsp_status rsp__publisher_wait(rsp__publisher *p, uint64_t step_id, uint64_t timeout_ns,
                               rsp_error *err)
{
    return wait_for(p, reached_check, step_id, false, timeout_ns, err);
}

rsp_status rsp__publisher_wait_step(rsp__publisher *p, uint64_t step_id, uint64_t timeout_ns,
                                    rsp_error *err)
{
    return wait_for(p, step_check, step_id, true, timeout_ns, err);
}

uint32_t rsp__publisher_retired(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32((uint32_t *)&p->retired);
}

uint32_t rsp__publisher_retired_max(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32((uint32_t *)&p->retired_max);
}

uint32_t rsp__publisher_objects(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32((uint32_t *)&p->objects);
}

uint32_t rsp__publisher_refs(const rsp__publisher *p)
{
    /* A ref and its unref may count on different stripes (threads): only
     * the sum means anything. */
    uint32_t n = 0;
    for (uint32_t i = 0; i < REF_STRIPES; i++)
        n += rsp__load_acquire_u32(&p->user_refs[i].n); /* X2 */
    return n;
}

uint32_t rsp__publisher_refs_wait(const rsp__publisher *p, uint64_t deadline)
{
    /* Polled: an unref that wakes a waiter would cost every unref a check
     * for one, and a close is rare. */
    uint32_t n;
    while ((n = rsp__publisher_refs(p)) != 0) {
        uint64_t now = rsp__now_ns();
        if (now >= deadline)
            break;
        uint64_t nap = deadline - now < 1000000u ? deadline - now : 1000000u;
        struct timespec ts = rsp__timespec_of(nap);
        nanosleep(&ts, NULL);
    }
    return n;
}

rsp_status rsp__publisher_grace_timed(rsp__publisher *p, uint64_t deadline)
{
    pthread_mutex_lock(&p->lock); /* G3 */
    const uint32_t want = ++p->grace_want;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (;;) {
        uint32_t done = rsp__load_acquire_u32(&p->grace_done); /* G3 */
        if ((int32_t)(done - want) >= 0)
            return RSP_OK;
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel))
            return RSP_ETIMEDOUT;
        rsp__futex_wait(&p->grace_done, done, rel);
    }
}

uint32_t rsp__publisher_waiters(const rsp__publisher *p)
{
    return rsp__load_relaxed_u32((uint32_t *)&p->waiters);
}

void rsp__publisher_destroy(rsp__publisher *p)
{
    if (!p)
        return;
    rsp__publisher_close(p);
    /* W3: waiters were woken with RSP_ESHUTDOWN; wait until they have left
     * (each decrements under the lock, the last one broadcasts). */
    pthread_mutex_lock(&p->lock);
    while (rsp__load_relaxed_u32(&p->waiters) != 0)
        pthread_cond_wait(&p->left, &p->lock);
    pthread_mutex_unlock(&p->lock);

    rsp_plan *live = p->live, *staged = p->staged;
    rsp_plan *steps[RSP__STEP_TABLE];
    for (uint32_t i = 0; i < RSP__STEP_TABLE; i++) {
        steps[i] = p->step_plan[i];
        rcu_assign_pointer(p->step_plan[i], NULL);
    }
    rcu_assign_pointer(p->live, NULL);
    rcu_assign_pointer(p->staged, NULL);
    grace_period(); /* G2: no section still sees either plan */
    /* The owner has stopped: its unflushed batch is ours now, and the grace
     * period above covers it. */
    uint32_t n = drop_batch(p->batch);
    p->batch = NULL;
    p->batch_tail = NULL;
    p->batch_len = 0;
    rsp__fetch_add_relaxed_u32(&p->retired, (uint32_t)-n); /* a gauge */
    rsp__deferred *dlist = p->dbatch;                      /* covered by the same grace period */
    p->dbatch = NULL;
    p->dbatch_len = 0;
    run_deferred(p, dlist);
    if (live)
        plan_drop(live);
    if (staged)
        plan_drop(staged);
    for (uint32_t i = 0; i < RSP__STEP_TABLE; i++)
        if (steps[i] && steps[i] != live) /* one reference covers both */
            plan_drop(steps[i]);
    /* The reclaimer frees what it was handed, then exits: joined here. */
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->reclaimer, NULL);
    /* Referenced plans wait for their readers' unref (polled every 1 ms). */
    while (rsp__load_acquire_u32(&p->objects) != 0) {
        struct timespec ms = rsp__timespec_of(1000000);
        nanosleep(&ms, NULL);
    }
    pthread_cond_destroy(&p->left);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->lock);
    free(p->spare);
    /* objects is zero: every plan's memory is on these lists (M1 came
     * before each release decrement that destroy's acquire load saw). */
    recycled_free(p->reuse);
    recycled_free(__atomic_exchange_n(&p->recycled, NULL, __ATOMIC_ACQUIRE));
    free(p);
}

/* ------------------------------------------------------------------------ */
/* Readers                                                                   */
/* ------------------------------------------------------------------------ */

/* A reader thread that exits without rsp_reader_unregister would stay in
 * liburcu's registry, and the next grace period would wait on a dead
 * thread: a key destructor unregisters it at thread exit instead. */
static pthread_key_t rsp__reader_key;
static pthread_once_t rsp__reader_key_once = PTHREAD_ONCE_INIT;
static int rsp__reader_key_rc;

static void reader_at_exit(void *unused)
{
    (void)unused;
    rsp__reader_unregister();
}

static void reader_key_create(void)
{
    rsp__reader_key_rc = pthread_key_create(&rsp__reader_key, reader_at_exit);
}

/* Both registrations: the key whose destructor unregisters at thread exit. */
static rsp_status reader_key_set(rsp_error *err)
{
    pthread_once(&rsp__reader_key_once, reader_key_create);
    if (rsp__reader_key_rc != 0 || pthread_setspecific(rsp__reader_key, &rsp__reader_key) != 0)
        return rsp__fail(err, RSP_ENOMEM, "cannot register the reader (no thread-specific key)");
    return RSP_OK;
}

rsp_status rsp__reader_register(rsp_error *err)
{
    if (tls_mode() == MODE_MEMB)
        return RSP_OK;
    if (tls_mode() != MODE_NONE)
        return rsp__fail(err, RSP_EINVAL,
                         "the calling thread is registered as a QSBR reader: "
                         "rsp_reader_unregister first");
    rsp_status st = reader_key_set(err);
    if (st != RSP_OK)
        return st;
    rcu_register_ref();
    tls_set_mode(MODE_MEMB);
    return RSP_OK;
}

rsp_status rsp__reader_register_qsbr(rsp_error *err)
{
    if (tls_mode() == MODE_QSBR_ONLINE || tls_mode() == MODE_QSBR_OFFLINE)
        return RSP_OK;
    if (tls_mode() != MODE_NONE)
        return rsp__fail(err, RSP_EINVAL,
                         "the calling thread is registered as a default reader: "
                         "rsp_reader_unregister first");
    rsp_status st = reader_key_set(err);
    if (st != RSP_OK)
        return st;
    urcu_qsbr_register_thread(); /* online */
    tls_set_mode(MODE_QSBR_ONLINE);
    return RSP_OK;
}

void rsp__reader_unregister(void)
{
    if (tls_mode() == MODE_NONE)
        return;
    /* Unregistering inside a section would let a grace period end under
     * the reader's feet: close the sections first. */
    while (tls_depth() > 0)
        rsp__read_end();
    if (tls_mode() == MODE_MEMB) {
        rcu_unregister_ref();
    } else {
        rsp__hb_release(&rsp__grace_token); /* G1 (TSan mirror) */
        urcu_qsbr_unregister_thread();      /* G1: offline first, if online */
    }
    tls_set_mode(MODE_NONE);
    pthread_setspecific(rsp__reader_key, NULL);
}

void rsp__reader_fork_child(void)
{
    rsp__tls_reader = 0;
}

bool rsp__reader_registered(void)
{
    return tls_mode() != MODE_NONE;
}

bool rsp__reader_is_qsbr(void)
{
    return tls_mode() == MODE_QSBR_ONLINE || tls_mode() == MODE_QSBR_OFFLINE;
}

bool rsp__in_read_section(void)
{
    /* An online QSBR reader holds what it read until it is quiescent: a
     * grace period waits for it as for a section. */
    const uint32_t s = rsp__tls_reader;
    return (s & DEPTH_MASK) != 0 || s == MODE_WORD(MODE_QSBR_ONLINE);
}

/* The cases of quiescent / offline / online that do nothing or refuse. */
__attribute__((cold)) static rsp_status qsbr_call_other(void)
{
    if (tls_mode() == MODE_NONE)
        return RSP_ENOTREG;
    if (tls_depth() != 0)
        return RSP_EINVAL; /* it would end the section's protection */
    return RSP_OK;         /* a default reader, or already offline: nothing to announce */
}

rsp_status rsp__reader_quiescent(void)
{
    /* The one case that announces: an online QSBR reader outside a section. */
    if (__builtin_expect(rsp__tls_reader != MODE_WORD(MODE_QSBR_ONLINE), 0))
        return qsbr_call_other();
    rsp__hb_release(&rsp__grace_token); /* G1 (TSan mirror) */
    urcu_qsbr_quiescent_state();        /* G1 */
    return RSP_OK;
}

rsp_status rsp__reader_offline(void)
{
    if (tls_mode() != MODE_QSBR_ONLINE || tls_depth() != 0)
        return qsbr_call_other();
    rsp__hb_release(&rsp__grace_token); /* G1 (TSan mirror) */
    urcu_qsbr_thread_offline();         /* G1 */
    tls_set_mode(MODE_QSBR_OFFLINE);
    return RSP_OK;
}

rsp_status rsp__reader_online(void)
{
    if (tls_mode() == MODE_NONE)
        return RSP_ENOTREG;
    if (tls_mode() == MODE_QSBR_OFFLINE) {
        urcu_qsbr_thread_online();
        tls_set_mode(MODE_QSBR_ONLINE);
    }
    return RSP_OK;
}

/* rsp__read_begin's cases past its fast path: a nested section, a QSBR
 * reader, and the refusals. */
__attribute__((noinline)) static rsp_status read_begin_other(uint32_t s)
{
    const uint32_t mode = s >> DEPTH_BITS;
    if (mode == MODE_MEMB || mode == MODE_QSBR_ONLINE) {
        /* Nested (liburcu sees the outermost section only), or a QSBR
         * reader (nothing to announce: quiescence ends protection). */
        if ((s & DEPTH_MASK) == DEPTH_MASK)
            return RSP_EINVAL;
        rsp__tls_reader = s + 1;
        return RSP_OK;
    }
    if (rsp__forked())
        return RSP_EFORKED;
    return mode == MODE_NONE ? RSP_ENOTREG : RSP_EINVAL; /* offline QSBR reader */
}

rsp_status rsp__read_begin_explain(rsp_status st, rsp_error *err)
{
    if (st == RSP_ENOTREG)
        return rsp__fail(err, st,
                         "rsp_read_begin: the calling thread is not registered: call "
                         "rsp_reader_register first");
    if (st != RSP_EINVAL)
        return st;
    /* The two refusals that share RSP_EINVAL: read_begin_other's. */
    if (tls_mode() == MODE_QSBR_OFFLINE)
        return rsp__fail(err, st,
                         "rsp_read_begin: the calling thread is an offline QSBR reader: call "
                         "rsp_reader_online first");
    return rsp__fail(err, st,
                     "rsp_read_begin: read sections nested %u deep on this thread, the most "
                     "there may be: end one first (an rsp_read_begin without its rsp_read_end?)",
                     (unsigned)DEPTH_MASK);
}

rsp_status rsp__read_begin(void)
{
    const uint32_t s = rsp__tls_reader;
    if (__builtin_expect(s == MEMB_IDLE, 1)) { /* the outermost section of a default reader */
        rsp__tls_reader = s + 1;
        urcu_memb_read_lock();
        return RSP_OK;
    }
    return read_begin_other(s);
}

/* An unbalanced rsp__read_end: ignored rather than corrupting the nesting
 * (ours and liburcu's), and said where a developer will see it. */
__attribute__((noinline, cold)) static rsp_status read_end_unbalanced(void)
{
#if RSP__REPORT_MISUSE
    fprintf(stderr, "rsp: rsp_read_end without an open read section on this thread "
                    "(ignored: RSP_EINVAL, the nesting count is unchanged)\n");
#endif
    return RSP_EINVAL;
}

/* rsp__read_end's cases past its fast path. */
__attribute__((noinline)) static rsp_status read_end_other(uint32_t s)
{
    if (__builtin_expect((s & DEPTH_MASK) == 0, 0))
        return rsp__forked() ? RSP_EFORKED : read_end_unbalanced();
    /* A nested section of a default reader, or a QSBR reader's: nothing
     * to tell liburcu. */
    rsp__tls_reader = s - 1;
    return RSP_OK;
}

rsp_status rsp__read_end(void)
{
    const uint32_t s = rsp__tls_reader;
    if (__builtin_expect(s == MEMB_IDLE + 1, 1)) { /* a default reader's outermost section */
        rsp__tls_reader = MEMB_IDLE;
        rsp__hb_release(&rsp__grace_token); /* G1 (TSan mirror) */
        urcu_memb_read_unlock();            /* G1 */
        return RSP_OK;
    }
    return read_end_other(s);
}
