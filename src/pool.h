/*
 * Internal: struct rsp_pool, its creation and destruction (pool.c), the
 * owner-side handler that turns one message into core calls, device work, a
 * published plan and a reply (pool_handler.c), and its counters (pool_counters.c).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Layering: api.c (validation, public entry points; encodes each message,
 * msg.h) -> actor/ (moves the encoded bytes, knows none of what follows) ->
 * pool_handler.c (decodes, dispatches) -> core/ (state machine), device/ (work),
 * publish/ (plans).
 */
#ifndef RSP_POOL_H
#define RSP_POOL_H

#include <pthread.h>

#include <rsp/rsp.h>

#include "actor/actor.h"
#include "core/core.h"
#include "device/device.h"
#include "pool_metrics.h"
#include "pool_record.h"
#include "publish/keys.h"
#include "publish/publish.h"
#include "util/sync.h"

/* Counters and gauges readable without a message (rsp_stats_peek): the
 * fields of RSP_STATS_FIELDS (rsp_stats.h) whose source is CORE (copied
 * from the core's gauges of the same name by rsp__pool_mirror_gauges) or
 * OWNER (moved by the owner as it handles messages), with rsp_stats's
 * names and widths. LAYOUT and ACTOR fields are read where they live
 * (rsp__pool_read_counters). Every field: the owner thread writes (single
 * writer, relaxed stores), any thread reads (relaxed loads). Each is exact
 * on its own; the set is not a snapshot (RSP_MSG_STATS gives one). */
#define RSP__CTR_FIELD_LAYOUT(bits, name)
#define RSP__CTR_FIELD_ACTOR(bits, name)
#define RSP__CTR_FIELD_CORE(bits, name) uint##bits##_t name;
#define RSP__CTR_FIELD_OWNER(bits, name) uint##bits##_t name;
#define RSP__CTR_FIELD(bits, name, kind, source, help) RSP__CTR_FIELD_##source(bits, name)
typedef struct rsp__pool_counters {
    RSP_STATS_FIELDS(RSP__CTR_FIELD)
    uint32_t steps_in_flight; /* CORE, mirrored like the list's; not in rsp_stats */
} rsp__pool_counters;
#undef RSP__CTR_FIELD
#undef RSP__CTR_FIELD_OWNER
#undef RSP__CTR_FIELD_CORE
#undef RSP__CTR_FIELD_ACTOR
#undef RSP__CTR_FIELD_LAYOUT

/* One forward_done wait given to the device: the step of the commit or
 * rollback that named it, and the device's done event of the work list
 * holding the WAIT (it completes once the WAIT, and all before it, ran). */
typedef struct rsp__fwd_wait {
    uint64_t step_id;
    rsp_event done;
    uint64_t queued_ns; /* device lag's start: lat.t0 of the commit, 0 while off */
} rsp__fwd_wait;

/*
 * The pool's storage (its device: slot memory, addressing buffers), kept
 * apart from the pool so that a DLPack export (export.c) can outlive
 * rsp_pool_close. A count of holders: the pool (one, from create to
 * close) and each live export. Whoever drops the last runs
 * rsp__device_destroy, on its own thread.
 */
typedef struct rsp__storage {
    uint32_t refs; /* acq_rel decrement (the last one frees), relaxed increment */
    rsp__device *dev;
} rsp__storage;

struct rsp_pool {
    /* Immutable after create: any thread. */
    const rsp__layout *layout; /* the core's, immutable */
    rsp_device_kind device_kind;
    int owner_cpu; /* immutable: rsp_pool_config.owner_cpu (-1: not pinned) */
    rsp__actor *actor;
    rsp__publisher *pub;
    /* The readers' checkpoint key index (NULL: a pool without checkpoint
     * slots). The pointer is immutable; the owner is its only writer,
     * rsp_checkpoint_lookup reads it from any registered reader. */
    rsp__keys *keys;
    rsp__device *dev;      /* block bases and event_wait: any thread; the rest: owner */
    rsp__storage *storage; /* dev's holders (exports outlive the pool) */
    int cuda_ordinal;      /* rsp_pool_config.cuda_ordinal (DLPack's device id) */
    bool ordered;          /* rsp_pool_config.ordered: rsp_post checks and numbers messages */
    uint32_t rank;         /* rsp_pool_config.rank (the metrics' label) */

    /* Owner thread only (after create hands them over through
     * pthread_create in rsp__actor_create), or the caller holding the
     * owner's role (rsp__actor_post_call): one at a time. */
    rsp__core *core;
    rsp__work work;
    /* The published staged plan is the core's stage: the handler publishes
     * it when a plan reports staged, and unpublishes it when a call reports
     * the stage ended (rsp__stage_change); no copy is kept here. */
    /* Sticky: device work failed after the core had changed (out of memory
     * in a submit or a plan). The core and the device disagree from then
     * on, so every later message is refused with RSP_EDEVICE and why. */
    bool broken;
    char broken_why[RSP_ERROR_MAX];
    rsp__plan_label_src srcs[RSP_MAX_LABELS];
    rsp_msg_kind handling;    /* the kind of the message being handled (failure reports) */
    rsp__record *rec;         /* rsp_pool_config.record_path's recording, or NULL */
    struct rsp__guard *guard; /* guard mode's baselines (pool_guard.c); NULL: guard off */
    uint32_t lent_idles;      /* lent calls that gave the role back (rsp__pool_lent_idle) */

    /* Immutable after create: the caller's error callback (or NULL). */
    void (*on_error)(void *ctx, const rsp_failure *failure);
    void *on_error_ctx;
    /* Immutable after create: the caller's eviction callback (or NULL). */
    void (*on_checkpoint_evict)(void *ctx, const rsp_checkpoint_event *event);
    void *on_checkpoint_evict_ctx;

    /* Forward-done waits the device has not run yet, in submit order
     * (FW1/FW2): the owner appends and prunes, rsp_pool_close_timed reads;
     * both under fwd_lock. Entries [fwd_head, fwd_len) of fwd[fwd_cap]. */
    pthread_mutex_t fwd_lock;
    bool fwd_lock_ready; /* create initialised it (destroy of a partial pool) */
    rsp__fwd_wait *fwd;
    uint32_t fwd_head, fwd_len, fwd_cap;

    /* Owner only: the gauges as last mirrored into ctr (mirror_gauges
     * stores only when they moved: readers of ctr keep their lines). */
    rsp__core_gauges mirrored;
    bool mirrored_ok;

    /* Any thread, atomic. */
    uint32_t num_labels; /* L1: owner store-release after interning; rsp_post load-acquire */
    rsp__pool_counters ctr;
    rsp__latency lat;          /* the owner's histograms (pool_metrics.h says who touches what) */
    rsp__label_metrics labels; /* holdings per label (pool_metrics.h, likewise) */
    /* Tests: fail this many of the next device submits as out of memory
     * (the only failure left after the core changed). Relaxed atomic. */
    uint32_t inject_submit_failures;
};

/*
 * Build a pool from cfg (not NULL; the face checked the rest of the call):
 * core, device, publisher, then the actor, whose owner thread starts last
 * and takes over the owner-only fields. On failure nothing is left (every
 * part made so far is destroyed) and err says why. Any thread.
 */
rsp_status rsp__pool_create(const rsp_pool_config *cfg, rsp_pool **out, rsp_error *err);

/* The owner's latency histograms (pool_metrics.c), around each message
 * rsp__pool_handle handles: start returns 0 while they are off (one
 * relaxed load), else the clock; count files the time since t0 (t0 != 0)
 * under kind. Owner, or the thread in its role. */
uint64_t rsp__latency_start(rsp_pool *p);
/* A message kind's name ("step", "checkpoint_query"; "?" for none). Pure. */
const char *rsp__pool_kind_name(rsp_msg_kind k);
void rsp__latency_count(rsp_pool *p, rsp_msg_kind kind, uint64_t t0);
/* A PLAN's or STEP's post stamp (pool_metrics.c): the clock while the
 * histograms are on, else 0 (one relaxed load, no clock). The poster's
 * thread, in rsp_post. */
uint64_t rsp__latency_stamp(const rsp_pool *p, const rsp_msg *m);
/* rsp__msg_decode of a message about to be handled, and the owner's side
 * of its stamp: t0 (rsp__latency_start's) is kept in lat.t0 (where a
 * commit's device lag starts); with t0 not 0, the stamp is kept,
 * with the count of plans published so far, for rsp__latency_count,
 * which files the time from it to the end of handling under post-to-plan
 * if a plan (live or staged) was published in between. Owner. O(1). */
const rsp_msg *rsp__latency_decode(rsp_pool *p, void *wire, size_t size, uint64_t t0);
/* Device lag: file the time from queued_ns (the clock when the owner took
 * up the commit that queued the work; 0: nothing to file) to now (a
 * clock read of an earlier call, or 0 to take one), which it returns for
 * the next done event the same look finds. Owner. O(1). */
uint64_t rsp__latency_lag_done(rsp_pool *p, uint64_t queued_ns, uint64_t now);
/* Copy the core's holdings per label, and the names of labels interned
 * since the last call, into pool->labels (LM1). Owner, from
 * rsp__pool_mirror_gauges. O(labels). */
void rsp__metrics_mirror_labels(rsp_pool *p);

/*
 * Tear a pool down: close the inbox and handle what is queued (joins the
 * owner), release plan waiters and wait for readers' references (joins the
 * reclaimer), wait for the device, free everything. Also unwinds a pool
 * that rsp__pool_create built only in part (every part may be NULL). One
 * thread, after every other stopped posting; never the owner.
 */
void rsp__pool_destroy(rsp_pool *pool);

/* One more holder of the pool's storage (an export being made). Any thread
 * while the pool is open. O(1), a relaxed increment: the caller's own
 * reference (the open pool's) keeps the count above zero. */
rsp__storage *rsp__pool_storage_hold(rsp_pool *pool);
/* One holder less; the last one waits for the device's work and frees
 * it (rsp__device_destroy). Any thread but the pool's own (owner, device
 * worker). O(1), or the device's destruction for the last. */
void rsp__storage_release(rsp__storage *s);

/* The actor's callbacks (owner thread). ctx is the rsp_pool; payload is a
 * message's wire form (msg.h). */
void rsp__pool_handle(void *ctx, void *payload, size_t size, rsp_reply *reply);
/* Submit the pool's work list (p->work) to the device, counting what it
 * zeroes and copies; done (optional) completes once it ran. Owner. */
rsp_status rsp__pool_submit(rsp_pool *p, rsp_event *done, rsp_error *err);
/* After every core call that can store, move or drop a checkpoint (and
 * its submit): the counters, the readers' key index, the eviction
 * callback, skipped takes, from the core's report. Owner. */
void rsp__pool_ckpt_account(rsp_pool *p);
/* Before a core call that may take checkpoints (takes: at most one key
 * each): the key index's nodes, so that rsp__pool_ckpt_account cannot fail
 * after the change. RSP_ENOMEM with nothing changed. Owner. */
rsp_status rsp__pool_keys_reserve(rsp_pool *p, uint32_t takes, rsp_error *e);
/* Single writer (the owner): a relaxed load + store is an exact increment,
 * and readers see each value whole (relaxed atomic loads). */
static inline void rsp__pool_bump(uint64_t *c, uint64_t d)
{
    if (d)
        rsp__store_relaxed_u64(c, rsp__load_relaxed_u64(c) + d);
}
void rsp__pool_owner_idle(void *ctx);
/* The actor's lent_idle: a synchronous call run in the owner's role gives
 * it back. Hands the retired plans to the reclaimer once every
 * RSP__LENT_FLUSH_EVERY such calls, not each time (that woke the reclaimer
 * every steady step). The caller's thread, holding the role. */
void rsp__pool_lent_idle(void *ctx);
/* The actor's on_failure (set when the caller gave on_error): a message
 * nobody reads the answer of failed; tells on_error which, and the step it
 * is about. Owner thread. O(1). */
void rsp__pool_report_failure(void *ctx, const void *payload, size_t size, const rsp_reply *r);

/* The core's reserve hook (core.h, rsp__ext_need): reserves the device's
 * job memory and buffers (rsp__device_reserve) and, for a plan, the plan
 * object (rsp__plan_reserve), so nothing after the core's change can fail
 * for want of host memory. ctx is the rsp_pool. Owner thread, inside a core
 * call. */
rsp_status rsp__pool_reserve(void *ctx, const rsp__ext_need *need, rsp_error *err);

/* Refresh the gauges mirrored from the core (the actor's settle: before
 * each answer a waiter reads and at each batch end, not per message);
 * stores nothing when none moved since the last refresh. Owner thread (or
 * the creating thread before the owner starts). O(1). */
void rsp__pool_mirror_gauges(rsp_pool *pool);

/* Tests only: make the next n device submits of the owner fail with
 * RSP_ENOMEM, as an allocation in the device would. Any thread; a message
 * posted after the call sees it. O(1). */
void rsp__pool_inject_submit_failures(rsp_pool *pool, uint32_t n);

/*
 * rsp_pool_close_timed's wait: the forward_done waits recorded so far, if
 * the last completes within timeout_ns (the device is FIFO, so all have)
 * RSP_OK; else RSP_ETIMEDOUT with *out naming the steps whose wait has not
 * run. Any thread but the owner; the pool is left as it is. O(waits).
 */
rsp_status rsp__pool_forward_waits(rsp_pool *pool, uint64_t timeout_ns, rsp_close_report *out,
                                   rsp_error *err);

/*
 * Guard mode (pool_guard.c; docs/design.md "Guard mode and the state
 * dump"). Owner thread only, and only when pool->guard is set:
 *   _create: the guard of a pool of this layout (its baselines: 8 bytes a
 *     slot, block and layer), RSP_ENOMEM; _destroy: NULL is a no-op (any
 *     thread, after the owner).
 *   _plan: after step_id's live plan was published, note the slots in
 *     flight steps address (their baselines no longer hold). O(max_slots).
 *   _commit: before step_id's commit changes anything, wait for
 *     forward_done (NULL: none) and check; reports through on_error and
 *     the counts (rsp_stats' guard_checks, guard_violations in
 *     pool->ctr), changes nothing else, cannot fail.
 */
typedef struct rsp__guard rsp__guard;
rsp_status rsp__guard_create(const rsp__layout *lay, rsp__guard **out, rsp_error *err);
void rsp__guard_destroy(rsp__guard *g);
void rsp__guard_plan(rsp_pool *pool, uint64_t step_id);
void rsp__guard_commit(rsp_pool *pool, uint64_t step_id, const rsp_event *forward_done);

/* RSP_MSG_DUMP's arguments: rsp_pool_dump's, on its stack while it waits
 * for the answer; the message's `key` carries their address, so the dump
 * needs no field of rsp_msg or rsp_reply (whose sizes an older program
 * compiled in, docs/abi.md). The owner writes buf and needed. */
typedef struct rsp__dump_args {
    char *buf;     /* NULL with size 0: the size only */
    size_t size;   /* bytes of buf */
    size_t needed; /* out: bytes the text needs, its NUL included */
} rsp__dump_args;

/* RSP_MSG_DUMP's handler (pool_dump.c): the state as JSON into the
 * caller's buffer (rsp__dump_args). Owner thread. */
rsp_status rsp__pool_on_dump(rsp_pool *pool, const rsp_msg *m, rsp_reply *r, bool *changed);

/* Fill *out from the counters: any thread, relaxed (not a snapshot). */
void rsp__pool_read_counters(const rsp_pool *pool, rsp_stats *out);

#endif
