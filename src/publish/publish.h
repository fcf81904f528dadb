/*
 * Plan publication: immutable plan objects, published with RCU (liburcu:
 * urcu-memb and QSBR readers, every grace period waits for both), reclaimed after a grace period by
 * the publisher's own reclaimer thread, kept alive past a read section by reference counts.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Knows nothing of slots or devices: the owner hands it finished vectors
 * and device pointers; it copies the host vectors into one allocation.
 *
 * Synchronisation table:
 *
 *   operation                          | thread
 *   -----------------------------------+-------------------------------------
 *   rsp__publisher_create / _destroy   | one thread, after the owner stopped
 *   rsp__plan_new, rsp__publish_*      | the owner thread only (one writer)
 *   rsp__publisher_close               | any thread
 *   rsp__publisher_live / _staged      | registered reader, inside a section
 *   rsp__plan_* accessors, ref/unref   | any thread holding the plan
 *   rsp__publisher_wait                | any thread
 *   rsp__publisher_defer               | the owner thread only
 *   rsp__reader_*, rsp__read_*         | the calling thread (thread-local)
 *
 * Lifetime of a plan: one reference belongs to the publisher while the plan
 * is published (live or staged); replacing it retires that reference through
 * the reclaimer (after a grace period, so no read section can still see it);
 * each rsp__plan_ref adds one. The last drop frees the plan.
 */
#ifndef RSP_PUBLISH_PUBLISH_H
#define RSP_PUBLISH_PUBLISH_H

#include <rsp/rsp.h>

typedef struct rsp__publisher rsp__publisher;

/* Retired plans not yet reclaimed at most, per pool (the owner's batch
 * included), before the owner waits for a grace period itself
 * (synchronize_rcu): the reclaimer lags a grace period behind, longer while
 * a reader stays in a section. Retired plans go to the reclaimer in batches
 * of a quarter of the cap: one grace period (a membarrier that stops every
 * thread of the process) per 64 steps. It was 64 (a batch of 16): one step
 * in sixteen then saw the owner sleep and pay a wake-up, which halved a
 * step loop's throughput (docs/performance.md, "Plans and the retired
 * cap"). The cost: up to 256 plans' vectors held until their grace
 * period (a 256-row one-label plan is ~4 KiB). */
#define RSP__RETIRED_CAP_DEFAULT 256u

/* Create the publisher and start its reclaimer thread (a checked
 * pthread_create: on failure RSP_ENOMEM / RSP_EINVAL with nothing left
 * allocated and nothing handed to liburcu). retired_cap 0 =
 * RSP__RETIRED_CAP_DEFAULT. Any thread. */
rsp_status rsp__publisher_create(uint32_t retired_cap, rsp__publisher **out, rsp_error *err);

/*
 * Stop plan waiters (they return RSP_ESHUTDOWN) and wait until every one has
 * left rsp__publisher_wait (W3), unpublish, wait a grace period, stop and
 * join the reclaimer (it frees what it was handed), wait until every plan is
 * freed (readers' references: this blocks while a reader holds one), then
 * free. Call after the owner thread stopped, from a thread outside any read
 * section, once no other thread calls into this publisher except to drop
 * references or to wait in rsp__publisher_wait (a wait that began before).
 * NULL is a no-op.
 */
void rsp__publisher_destroy(rsp__publisher *p);

/* One label's addressing, as the owner built it. Host vectors are copied. */
typedef struct rsp__plan_label_src {
    rsp_label_id label;
    const char *name; /* copied (truncated to RSP_NAME_MAX - 1) */
    uint32_t num_rows;
    uint32_t length;             /* >= num_rows */
    const int32_t *slot_indices; /* [length] */
    const bool *has_state;       /* [length] */
    const uint64_t *generations; /* [num_rows] */
    void *device_slot_indices;   /* not owned */
    void *device_has_state;      /* not owned */
    uint32_t spec_width;         /* per-token indices (core/spec.h): 1: the vector */
    const int32_t *spec_indices; /* [length * spec_width] */
    void *device_spec_indices;   /* a leased key's tensor buffer, not owned; NULL: none */
    bool host_device;            /* the device reads host memory: the copy is its own */
} rsp__plan_label_src;

/* Allocate now the memory of a plan of num_labels labels, `rows` rows
 * (generations) and `entries` vector entries (sum of lengths), so that the
 * rsp__plan_new that follows the core's change takes it and cannot fail.
 * The owner calls it from the core's reserve hook. RSP_ENOMEM: nothing
 * changed. Owner thread only. One allocation when the reserved memory is
 * too small or was taken, none otherwise. */
rsp_status rsp__plan_reserve(rsp__publisher *p, uint32_t num_labels, uint64_t rows,
                             uint64_t entries, uint64_t spec_entries, rsp_error *err);
/* Build an unpublished plan (one allocation). Owner thread.
 * RSP_ENOMEM if the allocation fails. Cost: the copy of the vectors. */
rsp_status rsp__plan_new(rsp__publisher *p, uint64_t step_id, bool staged, rsp_event ready,
                         const rsp__plan_label_src *labels, uint32_t num_labels, rsp_plan **out,
                         rsp_error *err);

/* Free a plan that was never published. Owner thread. */
void rsp__plan_discard(rsp_plan *plan);

/*
 * Publish plan as the live plan (replacing and retiring the previous one)
 * and wake rsp__publisher_wait callers whose step it reaches. Owner thread.
 * Cost: a release store, a hand-off to the reclaimer once per batch of
 * retired plans (a mutex and a futex wake if it sleeps; past the retired
 * cap, a synchronize_rcu instead), a futex wake only if someone waits.
 */
void rsp__publish_live(rsp__publisher *p, rsp_plan *plan);

/* Hand the plans retired so far to the reclaimer now (they are otherwise
 * handed over in batches). The owner calls it before it goes idle, so
 * retired plans do not wait for the next publication to be reclaimed. Owner
 * thread. Cost: one hand-off when a batch is pending. */
void rsp__publisher_flush(rsp__publisher *p);

/* Publish plan as the staged plan, or unpublish the stage (plan NULL).
 * Owner thread. */
void rsp__publish_staged(rsp__publisher *p, rsp_plan *plan);

/*
 * Per-step plans. The publisher keeps a table of the steps in
 * flight (admitted, not finished; at most RSP__STEP_TABLE), each with its
 * live plan once published (an RCU pointer: rsp__publisher_step_plan), and
 * a ring of the last RSP__STEP_RING finished steps with how they ended, so
 * that rsp__publisher_wait_step answers a waiter that comes late.
 */
#define RSP__STEP_TABLE 64u
#define RSP__STEP_RING 64u

/* How a step left the table (or was kept out of it). */
typedef enum rsp__step_end {
    RSP__STEP_COMMITTED = 1, /* committed; recorded as "without a plan" when it had none */
    RSP__STEP_ROLLED_BACK,   /* rolled back (a step not in flight: nothing happens) */
    RSP__STEP_REFUSED,       /* admit refused it (ignored for a step in flight: a re-admit) */
} rsp__step_end;

/* Owner: step_id was admitted (ok). A step already in the table stays as it
 * is. Returns false when the table is full (the core's max_inflight_steps
 * is at most RSP__STEP_TABLE, so the pool never sees it). Cost: O(in-flight)
 * under the publisher's mutex. */
bool rsp__publisher_step_admitted(rsp__publisher *p, uint64_t step_id);
/* Owner: step_id ended (see rsp__step_end): its entry is cleared (its plan,
 * if any, retired like a replaced live plan), the ring records the end, and
 * rsp__publisher_wait_step callers are woken. Cost: O(in-flight) under the
 * mutex, a futex wake only if someone waits. */
void rsp__publisher_step_finished(rsp__publisher *p, uint64_t step_id, rsp__step_end end);
/* Owner: the labels interned so far (plans record it: rsp__plan_addressing
 * tells an uninterned label, RSP_ENOLABEL, from one the step did not plan). */
void rsp__publisher_set_labels(rsp__publisher *p, uint32_t num_labels);

/* The live plan of step_id while the step is in flight, else NULL (also
 * outside a read section). Registered reader inside a section. O(in-flight):
 * one dependent load per table entry. */
const rsp_plan *rsp__publisher_step_plan(const rsp__publisher *p, uint64_t step_id);

/* Block until step_id's live plan is published (RSP_OK); RSP_ENOPLAN naming
 * why when the step finished without one readable (rolled back, refused,
 * committed: from the ring); RSP_ETIMEDOUT; RSP_ESHUTDOWN (closed, as
 * rsp__publisher_wait, W3 included). A step neither in flight nor in the
 * ring (not admitted yet, or finished more than RSP__STEP_RING steps ago)
 * is waited for. Any thread; no registration. Cost: a mutex and
 * O(in-flight + ring) per check, a futex wait between checks. */
rsp_status rsp__publisher_wait_step(rsp__publisher *p, uint64_t step_id, uint64_t timeout_ns,
                                    rsp_error *err);

/*
 * Deferred frees (the readers' key index, keys.h): an object a reader may
 * still see is handed over with its rsp__deferred embedded, and fn(d) runs
 * once a grace period of both reader flavours has passed (on the reclaimer
 * thread, or in destroy), like a retired plan. fn must not block or call
 * into the publisher. Owner thread only (the one writer). Cost: a list push;
 * every RSP__DEFER_BATCH a hand-off to the reclaimer (a mutex, a futex wake
 * if it sleeps); past RSP__DEFER_CAP objects not yet freed the owner waits
 * for a grace period itself and runs its batch (as retire at the plan cap),
 * so a reader that stays in a section long bounds the memory held.
 */
typedef struct rsp__deferred {
    struct rsp__deferred *next; /* owner, then the reclaimer (D1/D2) */
    void (*fn)(struct rsp__deferred *d);
} rsp__deferred;
#define RSP__DEFER_BATCH 32u
#define RSP__DEFER_CAP 4096u
void rsp__publisher_defer(rsp__publisher *p, rsp__deferred *d);
/* Objects deferred and not yet freed (a gauge, for tests). Any thread. */
uint32_t rsp__publisher_deferred(const rsp__publisher *p);

/* The refusal of a reader call made outside a read section: RSP_ENOTREG
 * (thread not registered) or RSP_EINVAL (no open section), with a message
 * naming `what`; RSP_OK inside a section. Calling thread, O(1). */
rsp_status rsp__read_section_check(const char *what, rsp_error *err);

/* Wake plan waiters for good: they return RSP_ESHUTDOWN. Any thread. */
void rsp__publisher_close(rsp__publisher *p);

/* The live / staged plan or NULL. Registered reader inside a read section
 * (otherwise NULL). O(1). */
const rsp_plan *rsp__publisher_live(const rsp__publisher *p);
const rsp_plan *rsp__publisher_staged(const rsp__publisher *p);

/* The live plan's addressing of label (rsp__plan_addressing of
 * rsp__publisher_live) in one call: RSP_ENOTREG (thread not registered),
 * RSP_EINVAL (outside a read section), RSP_ENOPLAN (no live plan, or the
 * label not planned), RSP_ENOLABEL, each with a message. Registered reader
 * inside a read section. O(1): one load of the label's index. */
rsp_status rsp__live_addressing(const rsp__publisher *p, rsp_label_id label, rsp_addressing *out,
                                rsp_error *err);

/* Block until a live plan with step id >= step_id is published;
 * RSP_ETIMEDOUT, RSP_ESHUTDOWN (closed, or destroy began: destroy waits for
 * the waiter to leave, W3). Any thread; no registration needed. Cost: two
 * loads when the step is there, else a mutex on entry and exit around a
 * futex wait. */
rsp_status rsp__publisher_wait(rsp__publisher *p, uint64_t step_id, uint64_t timeout_ns,
                               rsp_error *err);
/* Threads counted inside rsp__publisher_wait's blocking path. For tests.
 * Any thread, relaxed. */
uint32_t rsp__publisher_waiters(const rsp__publisher *p);

/* Plans retired and not yet reclaimed; the most there ever were at once.
 * For tests of the cap. Any thread, relaxed. */
uint32_t rsp__publisher_retired(const rsp__publisher *p);
uint32_t rsp__publisher_retired_max(const rsp__publisher *p);
/* Plan objects alive (published, retired, or referenced). Any thread. */
uint32_t rsp__publisher_objects(const rsp__publisher *p);

/* rsp__plan_ref references of this publisher's plans not yet dropped with
 * rsp__plan_unref (what destroy waits for besides the publisher's own).
 * Any thread; an acquire load (X2). */
uint32_t rsp__publisher_refs(const rsp__publisher *p);
/* Wait until that count is zero or the absolute deadline (util/time.h)
 * passes, polling every millisecond; returns the count (0: none held).
 * Any thread. */
uint32_t rsp__publisher_refs_wait(const rsp__publisher *p, uint64_t deadline);
/* Wait, until the absolute deadline at most, for a grace period of both
 * reader flavours that starts after the call (the reclaimer runs it):
 * RSP_OK, or RSP_ETIMEDOUT while a read section (or an online QSBR reader
 * that is not quiescent) holds it back; the reclaimer's grace period then
 * goes on and ends when the section does, and the publisher is unchanged.
 * For a bounded close, which must not block in destroy's grace period.
 * Any thread outside a read section, not after destroy began. Cost: a
 * mutex, a futex wait, the reclaimer's grace period (a membarrier). */
rsp_status rsp__publisher_grace_timed(rsp__publisher *p, uint64_t deadline);

/* Plan accessors. Any thread holding the plan (read section or ref). */
uint64_t rsp__plan_step_id(const rsp_plan *plan);
bool rsp__plan_is_staged(const rsp_plan *plan);
/* The plan's digest (rsp_plan_digest): set by the owner between
 * rsp__plan_new and the publication (P1 carries it), read by any holder. */
void rsp__plan_set_digest(rsp_plan *plan, uint64_t digest);
uint64_t rsp__plan_digest(const rsp_plan *plan);
/* O(1): one load of the label's index in the plan, one struct copy. */
/* The per-token indices of label in plan (rsp.h rsp_plan_spec_indices);
 * refusals as rsp__plan_addressing. Any reader holding the plan, O(1). */
rsp_status rsp__plan_spec_indices(const rsp_plan *plan, rsp_label_id label, rsp_spec_indices *out,
                                  rsp_error *err);
rsp_status rsp__plan_addressing(const rsp_plan *plan, rsp_label_id label, rsp_addressing *out,
                                rsp_error *err);
/* Take a reference (inside a read section, or while holding one). */
const rsp_plan *rsp__plan_ref(const rsp_plan *plan);
void rsp__plan_unref(const rsp_plan *plan);

/* Reader registration and read sections of the calling thread. A thread is
 * a default (urcu-memb) reader or a QSBR reader, not both: registering as
 * the other kind is RSP_EINVAL (nothing changed); the same kind again is
 * RSP_OK. */
rsp_status rsp__reader_register(rsp_error *err);
rsp_status rsp__reader_register_qsbr(rsp_error *err);
void rsp__reader_unregister(void);
bool rsp__reader_registered(void);
bool rsp__reader_is_qsbr(void);
/* QSBR readers: announce a quiescent state (every plan read before may be
 * reclaimed), go offline (quiescent until online again; may not read) and
 * online. RSP_ENOTREG (not registered), RSP_EINVAL inside a read section
 * (nothing changed); RSP_OK and nothing done for a default reader, and for
 * quiescent/offline on an offline reader. Calling thread. Cost: one
 * out-of-line liburcu-qsbr call (quiescent: a load, a store, a fence). */
rsp_status rsp__reader_quiescent(void);
rsp_status rsp__reader_offline(void);
rsp_status rsp__reader_online(void);
/* Whether the calling thread is inside a read section (of any pool: the
 * grace periods are global), or is an online QSBR reader (a grace period
 * waits for its quiescent state as for a section's end). The API refuses
 * every wait on the owner there: an owner at the retired cap waits for that
 * very section to end. Calling thread, O(1) (thread-local loads). */
bool rsp__in_read_section(void);

/* The forking thread of a child forked after rsp was used (api.c's atfork
 * handler): its reader state starts over (not registered, no section), so
 * no fast path of the read side runs in the child and each refusal says
 * RSP_EFORKED (rsp__forked, checked on the slow paths only). */
void rsp__reader_fork_child(void);

/* api.c: whether this process is such a child, and its refusal (any
 * thread; a relaxed load). */
bool rsp__forked(void);
rsp_status rsp__fail_forked(rsp_error *err);
/* RSP_ENOTREG when the thread is not registered, RSP_EINVAL when it is an
 * offline QSBR reader. Nestable. A default reader's outermost section is
 * liburcu-memb's read lock; a QSBR reader's costs a thread-local increment. */
rsp_status rsp__read_begin(void);
/* rsp__read_begin's refusal st, with the message of its cause in err (not
 * registered, an offline QSBR reader, or the nesting limit: read from the
 * thread's state, unchanged since the refusal); st is returned as given.
 * Calling thread, right after the refusal; O(1) plus the message. */
rsp_status rsp__read_begin_explain(rsp_status st, rsp_error *err);
/* RSP_EINVAL (nothing changed; printed in debug and sanitizer builds) when
 * the thread has no open section. */
rsp_status rsp__read_end(void);

#endif
