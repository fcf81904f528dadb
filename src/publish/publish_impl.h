/*
 * Plan publication's private state: the plan and publisher structs, the
 * reader's thread-local word, and the functions one file calls in another.
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
 * The files of src/publish/ (keys.c, the key index, is a room of its own),
 * one job each:
 *
 *   publish.c  the publisher: create, destroy
 *   plans.c    plans: memory, build, addressing, references (X1, X2),
 *              publication of the live and staged plan (P1) and its reads
 *   reclaim.c  the reclaimer: grace periods, retired-plan batches (R1/R2),
 *              deferred frees (D1/D2), bounded grace periods (G3)
 *   steps.c    the step table (Q1/Q2) and the plan waits (W1/W2, W3)
 *   readers.c  reader registration and read sections (G1)
 *
 * Synchronises-with pairs of these files (listed in docs/ordering.md):
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

#ifndef RSP_PUBLISH_PUBLISH_IMPL_H
#define RSP_PUBLISH_PUBLISH_IMPL_H

#include "publish.h"

#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>

#include "util/assert.h"
#include "util/hb.h"

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

/* rsp_plan.label_index of a label the plan does not address. */
#define NO_INDEX 0xffu
_Static_assert(RSP_MAX_LABELS < NO_INDEX, "label_index holds a labels[] entry in a byte");

typedef struct rsp__plan_label {
    /* The answer of rsp__plan_addressing, built once with the plan: a read
     * is one struct copy (its vectors point into the plan's allocation). */
    rsp_addressing addr;
    rsp_spec_indices spec; /* the same for rsp__plan_spec_indices */
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
    rsp__plan_label labels[]; /* then generations, slot_indices, has_state, spec */
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
extern char rsp__grace_token; /* reclaim.c */

/* initial-exec: a fixed offset from the thread pointer instead of a
 * __tls_get_addr call per access (the general-dynamic default of -fPIC
 * code), which would be a good part of a read section's cost. The variables
 * are a few bytes: a dlopen'ed librsp still fits in glibc's static TLS
 * surplus. */
#define RSP__TLS _Thread_local __attribute__((tls_model("initial-exec")))

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
extern RSP__TLS uint32_t rsp__tls_reader; /* readers.c: MODE_WORD(mode) | depth */

/* plans.c: the last reference is gone: recycle the plan's memory (M1). */
void rsp__plan_free(rsp_plan *plan);
/* plans.c: free a list of recycled plans (destroy). */
void rsp__plan_recycled_free(rsp_plan *plan);
/* plans.c: take plan off `where` (PUB_LIVE, PUB_STEP); retired once it is
 * published nowhere. Owner. */
void rsp__unpublish(rsp__publisher *p, rsp_plan *plan, uint32_t where);

/* reclaim.c: the reclaimer thread's body; drop the publisher's reference
 * to every plan of a retired list after a grace period (returns how many);
 * run a list's deferred frees after one; retire a plan (owner). */
void *rsp__reclaimer_main(void *arg);
uint32_t rsp__drop_batch(rsp_plan *plan);
void rsp__run_deferred(rsp__publisher *p, rsp__deferred *d);
void rsp__publisher_retire(rsp__publisher *p, rsp_plan *plan);

/* steps.c: from rsp__publish_live: the live plan into its step's entry. */
void rsp__step_publish(rsp__publisher *p, rsp_plan *plan);

static inline uint32_t tls_mode(void)
{
    return rsp__tls_reader >> DEPTH_BITS;
}

static inline uint32_t tls_depth(void)
{
    return rsp__tls_reader & DEPTH_MASK;
}

/* G2: wait until every read section of a default reader that began before
 * has ended, and every QSBR reader has been quiescent (or offline) since:
 * one grace period of each flavour. */
static inline void grace_period(void)
{
    urcu_memb_synchronize_rcu();
    urcu_qsbr_synchronize_rcu();
    rsp__hb_acquire(&rsp__grace_token);
}

/* X1: drop one reference; the last one frees. X1: pairs with every other
 * holder's drop: acq_rel, so this holder's reads of the plan happen before
 * the free, and the free after every other holder's drop. */
static inline void plan_drop(rsp_plan *plan)
{
    const uint32_t refs = rsp__fetch_add_acq_rel_u32(&plan->refs, UINT32_MAX);
    RSP__ASSERT(refs != 0); /* dropped more often than taken */
    if (refs == 1)
        rsp__plan_free(plan);
}

/* Where a live plan is published: the live pointer and its step's entry.
 * One publisher reference covers both; it is retired once the plan has
 * left both (a retired plan is on one batch list: it is retired once). */
enum { PUB_LIVE = 1, PUB_STEP = 2 };

static inline const rsp_plan *read_pointer(rsp_plan *const *slot)
{
    if (tls_depth() == 0)
        return NULL; /* outside a read section the pointer could be freed */
    /* P2: dependency-ordered load; pairs with rcu_assign_pointer (P1). */
    rsp_plan *plan = rcu_dereference(*(rsp_plan **)slot);
    if (plan)
        rsp__hb_acquire(plan); /* P2 (TSan mirror) */
    return plan;
}

#endif
