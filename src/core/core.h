/*
 * The pool's core: a deterministic state machine (docs/semantics.md, all of
 * it). SPDX-License-Identifier: Apache-2.0
 *
 * No threads, no clocks, no device calls: each call takes one operation,
 * updates the state, and appends the device work it needs to `work` (see
 * work.h). The caller (the owner thread, or a test) submits that work to a
 * device before the next call. Not thread-safe: one caller at a time.
 * No allocation per step after warm-up (arrays grow by doubling).
 *
 * Every call validates first and changes nothing when it returns an error.
 * On error the work list is left as it was on entry.
 */
#ifndef RSP_CORE_CORE_H
#define RSP_CORE_CORE_H

#include <rsp/rsp.h>

#include "layout.h"
#include "work.h"

typedef struct rsp__core rsp__core;

/* Validate cfg, build the layout, set up the free stack, intern "main".
 * Allocates host bookkeeping only (the device allocates storage). */
rsp_status rsp__core_create(const rsp_pool_config *cfg, rsp__core **out, rsp_error *err);
void rsp__core_destroy(rsp__core *core);

const rsp__layout *rsp__core_layout(const rsp__core *core);

/*
 * What one core call needs outside the core once it starts changing state:
 * room in the device for the work it appends and, for a plan, the
 * published plan object and the storage of the addressing buffers it
 * creates or grows. The core computes it in its reserve phase and passes it
 * to the reserve hook (if one is set) before its first change; when the
 * hook fails, the call fails with the hook's status and nothing changed.
 * So the owner can reserve the device's job memory and the plan object
 * ahead too, and nothing after the core's change can fail for want of
 * memory (docs/design.md, "Validate, count, reserve, apply").
 */
typedef struct rsp__ext_need {
    uint32_t ops, slots, pairs; /* work list entries this call appends, at most */
    uint64_t upload_entries;    /* sum of its UPLOAD counts, at most */
    uint32_t num_buffers;       /* BUFFER ops: buffer_id[i] gets buffer_cap[i], */
    const uint32_t *buffer_id;  /*   i < num_buffers (NULL when none): arrays, */
    const uint32_t *buffer_cap; /*   not inline, so a need is cheap to clear */
    bool plan;                  /* a plan is built: */
    uint32_t plan_labels;       /*   its labels, */
    uint64_t plan_rows;         /*   rows (generations) and */
    uint64_t plan_entries;      /*   vector entries (sum of lengths) */
    uint64_t plan_spec;         /*   per-token index entries past them (spec.h) */
} rsp__ext_need;
/* The hook reads need (and its arrays) during the call only. */
typedef rsp_status (*rsp__reserve_hook)(void *ctx, const rsp__ext_need *need, rsp_error *err);
/* Set (or clear, with NULL) the reserve hook. It runs on the core's caller,
 * inside reset, remove, rollback, commit and plan, and must not call the
 * core. O(1). */
void rsp__core_set_reserve_hook(rsp__core *core, rsp__reserve_hook hook, void *ctx);

/* Intern a label name (idempotent). RSP_EINVAL for an empty or too long name,
 * RSP_ECAPACITY past RSP_MAX_LABELS. */
rsp_status rsp__core_label(rsp__core *core, const char *name, rsp_label_id *out, rsp_error *err);
uint32_t rsp__core_num_labels(const rsp__core *core);
/* Name of an interned label, NULL if unknown. */
const char *rsp__core_label_name(const rsp__core *core, rsp_label_id id);
/* The holdings of each label, indexed by label id: rsp__core_num_labels
 * entries, the core's own array (valid while the core is; it moves with
 * every holding made or dropped). Owner. O(1). */
const uint32_t *rsp__core_label_holdings(const rsp__core *core);

/* docs/semantics.md 3. */
rsp_status rsp__core_ingest(rsp__core *core, rsp_rid rid, rsp_error *err);
rsp_status rsp__core_reset(rsp__core *core, rsp_rid rid, bool free, rsp__work *work,
                           rsp_error *err);
rsp_status rsp__core_remove(rsp__core *core, rsp_rid rid, rsp__work *work, rsp_error *err);
/* docs/semantics.md 8.2: drop rid's holding of label and release its
 * slot (zeroed, pushed; pending while an in-flight step pins
 * it, freed at that step's end like a removed request's). Unknown rid or no
 * holding there: RSP_OK, nothing happens. RSP_ENOLABEL: label not interned.
 * O(holdings). */
rsp_status rsp__core_release(rsp__core *core, rsp_rid rid, rsp_label_id label, rsp__work *work,
                             rsp_error *err);

/* Vector messages (docs/semantics.md 3.1): ingest, reset (with free) or
 * remove each of rids[0 .. n) in list order, as the single call would, as
 * one operation. All or nothing: a rid listed twice
 * (RSP_EINVAL naming it and both indices) or too little memory for the
 * whole list (RSP_ENOMEM; the reserve hook is asked once, for the list)
 * fails with nothing changed. O(n + the listed rids' holdings). */
typedef enum rsp__lifecycle_op {
    RSP__LC_INGEST = 0,
    RSP__LC_RESET,
    RSP__LC_REMOVE,
} rsp__lifecycle_op;
rsp_status rsp__core_lifecycle_many(rsp__core *core, rsp__lifecycle_op op, const rsp_rid *rids,
                                    uint32_t n, bool free, rsp__work *work, rsp_error *err);
/* Whether step_id is in flight (admitted, not yet committed or rolled
 * back). O(max_inflight). */
bool rsp__core_step_in_flight(const rsp__core *core, uint64_t step_id);

/* docs/semantics.md 4.1. Pool full: RSP_OK with out->ok = false, pool unchanged
 * (counted before anything is allocated; no implicit ingest either).
 * Errors: an invalid step (RSP_EINVAL, RSP_ENOLABEL, RSP_EDUPROW; one rid's
 * rows in two fork groups when a fork has a group), a new step
 * id below the last admitted or not above the last committed (RSP_EORDER;
 * a rolled-back id may be admitted again), every step record busy
 * (RSP_ECAPACITY). An id in flight is a re-admit. O(rows + rids * forks). */
rsp_status rsp__core_admit(rsp__core *core, const rsp_step *step, rsp_admit_outcome *out,
                           rsp__work *work, rsp_error *err);

/*
 * The stage (at most one staged plan) has one owner, the core, and every
 * call that ends it says so in its result, so a caller that mirrors it
 * (the pool's published staged plan) follows the report and keeps no copy.
 * Only plan, commit, rollback and clear_preplan end a stage; ingest,
 * reset, remove, admit and build_graph_buffers never touch it. A plan with
 * preplan creates one (rsp__plan_out.staged).
 */
typedef enum rsp__stage_end {
    RSP__STAGE_KEPT = 0,   /* the call ended no stage */
    RSP__STAGE_PROMOTED,   /* its step's live plan matched: its buffers went live */
    RSP__STAGE_REPLACED,   /* its step's live plan differed: dropped, uploaded anew */
    RSP__STAGE_TAKEN,      /* another step's live plan took its leased buffer */
    RSP__STAGE_STEP_ENDED, /* its step was committed (capture too) or rolled back */
    RSP__STAGE_CLEARED,    /* clear_preplan */
} rsp__stage_end;
typedef struct rsp__stage_change {
    rsp__stage_end ended; /* what became of the stage that existed before the call */
    uint64_t step_id;     /* that stage's step (ended != RSP__STAGE_KEPT) */
} rsp__stage_change;

/* docs/semantics.md 4.2. forward_done may be NULL (no forward ran). Unknown or
 * already finished step: RSP_OK, nothing happens. *stage (may be NULL)
 * gets what became of the stage (RSP__STAGE_KEPT on an error). */
rsp_status rsp__core_rollback(rsp__core *core, uint64_t step_id, const rsp_event *forward_done,
                              rsp__work *work, rsp__stage_change *stage, rsp_error *err);

/* One label's addressing as the core built it. Pointers are the core's
 * scratch, valid until the next call that builds a plan. */
typedef struct rsp__label_plan {
    rsp_label_id label;
    uint32_t num_rows;
    uint32_t length;
    uint32_t buffer;             /* addressing buffer id (see work.h BUFFER) */
    const int32_t *slot_indices; /* [length] */
    const bool *has_state;       /* [length] */
    const uint64_t *generations; /* [num_rows] */
    uint32_t spec_width;         /* 1 + the largest per-token span, or a leased
                                  * key's fixed width (spec.h) */
    const int32_t *spec_indices; /* [length * spec_width] */
    uint32_t spec_buffer;        /* a leased key's index tensor buffer, UINT32_MAX: none */
    bool spec_outputs;           /* some row's output slots are in it (else the vector
                                  * and pads: a plain step under a tensor's lease) */
} rsp__label_plan;

typedef struct rsp__plan_out {
    uint64_t step_id;
    bool staged;             /* built as a stage (preplan) */
    bool promoted;           /* a stage went live unchanged (its buffers reused) */
    rsp__stage_change stage; /* the stage that existed before: promoted,
                              * replaced, taken, or kept */
    uint32_t num_labels;     /* labels with rows, first-appearance order */
    const rsp__label_plan *labels;
    /* mix(step id, every label's id, slot ids and has_state in order, the
     * free stack hash after the plan, the pool-wide generation): equal on
     * cores that handled the same messages in the same order (rsp.h,
     * rsp_plan_digest). */
    uint64_t digest;
} rsp__plan_out;

/* docs/semantics.md 4.3 / 4.4 / 4.6 (pre-forks). Errors: invalid step; not in
 * flight or already planned (RSP_EORDER); a live plan whose forks touch a slot
 * of another planned, uncommitted step, or whose rows address a slot that
 * step's post-forks touch (RSP_EORDER, "commit step N first", nothing changed);
 * a stage while one exists (RSP_ESTAGED); more rows than a leased buffer, or a
 * leased buffer holding another in-flight step's plan (RSP_ECAPACITY; a live
 * plan takes it from another step's stage, which is dropped). See
 * docs/design.md "The core". out->stage: what became of the stage that existed
 * (PROMOTED or REPLACED by its own step's live plan, TAKEN by another's, else
 * KEPT). O(rows + labels + rids * forks + buffers). */
rsp_status rsp__core_plan(rsp__core *core, const rsp_step *step, rsp__plan_out *out,
                          rsp__work *work, rsp_error *err);
/* Drop the stage, if any; *stage (may be NULL) says whose (CLEARED) or
 * that there was none (KEPT). Never fails. O(buffers). */
rsp_status rsp__core_clear_preplan(rsp__core *core, rsp__stage_change *stage, rsp_error *err);
/* Whether a stage exists now, and its step (*step_id, when not NULL).
 * Tests and invariant checks: a caller that mirrors the stage follows the
 * reports above instead. O(1). */
bool rsp__core_stage(const rsp__core *core, uint64_t *step_id);

/* docs/semantics.md 4.5 / 4.6 (post-forks). forward_done may be NULL. Errors:
 * invalid step; not in flight, or admitted but not planned (capture: admit is
 * enough) (RSP_EORDER). *stage (may be NULL): STEP_ENDED when the step had a
 * stage (a preplanned step committed without a live plan, e.g. a capture), else
 * KEPT. O(rows + pinned slots + rids * forks). */
rsp_status rsp__core_commit(rsp__core *core, const rsp_step *step, const rsp_event *forward_done,
                            rsp__work *work, rsp__stage_change *stage, rsp_error *err);

/* docs/semantics.md 4.4 build_graph_buffers. RSP_EINVAL unless 1 <= max_bs <=
 * max(8192, 2 x max_slots) (check.h: rsp__max_rows). */
rsp_status rsp__core_build_graph_buffers(rsp__core *core, uint32_t max_bs, uint32_t max_seq_len,
                                         rsp__work *work, rsp_error *err);

/* Queries. RSP_ENOREQ for an unknown rid; RSP_ENOLABEL for an unknown label;
 * RSP_ENOREQ too when the rid exists but holds nothing under that label. */
rsp_status rsp__core_holding(const rsp__core *core, rsp_rid rid, rsp_label_id label,
                             rsp_holding *out, rsp_error *err);
bool rsp__core_has_request(const rsp__core *core, rsp_rid rid);

/* Slot accounting for invariant checks: every slot is exactly one of sink,
 * free, held, pending release. Free is 0, so the zeroed slot array a
 * creation allocates needs no pass over it. */
typedef enum rsp__slot_state {
    RSP__SLOT_FREE = 0,
    RSP__SLOT_SINK,
    RSP__SLOT_HELD,
    RSP__SLOT_PENDING,
} rsp__slot_state;
rsp__slot_state rsp__core_slot_state(const rsp__core *core, uint32_t slot);

/* The free stack's running hash: the sum over its entries of
 * (slot + 1) * P^depth mod 2^64 (depth 0 at the bottom), kept in O(1) per
 * push and pop. Equal on two cores whose free stacks are equal. O(1). */
uint64_t rsp__core_free_hash(const rsp__core *core);
/* Its P (odd, so no depth's weight is zero mod 2^64) and P's inverse
 * mod 2^64 (a pop steps the top's weight down by it). */
#define RSP__FREE_HASH_P 0x100000001b3ull
#define RSP__FREE_HASH_PINV 0xce965057aff6957bull

/* Copy the free stack into out[0 .. cap), the slot the next allocation takes
 * first; returns the number of free slots (may exceed cap). Tests and
 * invariant checks. O(free). */
uint32_t rsp__core_free_order(const rsp__core *core, uint32_t *out, uint32_t cap);

/* Fill the slot and generation fields of *out (the counters of the actor
 * layer are left alone). O(1). */
void rsp__core_stats(const rsp__core *core, rsp_stats *out);

/* The gauges the pool mirrors when its owner settles: exactly the fields
 * rsp_stats' list (rsp/rsp_stats.h) gives the source CORE, with their
 * names and widths, in the list's order, so a field listed there is a
 * field here. */
#define RSP__CORE_GAUGE_CORE(bits, name) uint##bits##_t name;
#define RSP__CORE_GAUGE_OWNER(bits, name)
#define RSP__CORE_GAUGE_LAYOUT(bits, name)
#define RSP__CORE_GAUGE_ACTOR(bits, name)
#define RSP__CORE_GAUGE(bits, name, kind, source, help) RSP__CORE_GAUGE_##source(bits, name)
typedef struct rsp__core_gauges {
    RSP_STATS_FIELDS(RSP__CORE_GAUGE)
    /* Beyond rsp_stats (which rsp_reply embeds, so it cannot grow):
     * exposed by rsp_metrics_text only. */
    uint32_t steps_in_flight; /* step records in use */
    uint32_t num_labels;      /* labels interned */
    uint64_t holding_moves;   /* holdings made plus dropped, ever */
} rsp__core_gauges;
/* What rsp__core_stats fills, without the constants and without a whole
 * rsp_stats to clear; the padding is zeroed, so two results compare with
 * memcmp. O(1). */
void rsp__core_gauges_get(const rsp__core *core, rsp__core_gauges *out);

/* Whether the last core call's checkpoint report (rsp__core_ckpt_report)
 * is empty for certain: no call since its start could have written it.
 * Lets the pool skip accounting on the many calls that never touch a
 * checkpoint. O(1). */
bool rsp__core_ckpt_report_clean(const rsp__core *core);

/* The same-declaration path (docs/design.md "The core"): a step whose rows
 * equal its record's last ones while no holding changed skips resolution
 * at admit, copies its plan's vectors from the record's last plan, and
 * skips commit's per-row work. It gives exactly what the general path
 * gives; on by default. Off: the general path only (tests run both side
 * by side). Owner thread, O(1). */
void rsp__core_set_fast(rsp__core *core, bool on);
/* On: the caller promises that row arrays it passes stay unchanged until
 * it turns this off (the owner, around one message whose calls share
 * rows, e.g. RSP_MSG_STEP's commit, admit and plan): rows at an address
 * already found the same as a record's are not compared again. Off: that
 * is forgotten. Owner thread, O(1). */
void rsp__core_rows_fixed(rsp__core *core, bool on);
/* How often each operation took the same-declaration path (tests: a test
 * of the path asserts it was taken). */
typedef struct rsp__fast_counts {
    uint64_t admits, plans, commits;
    uint64_t fork_pairs; /* plans and commits that found their forks resolved */
    uint64_t ghosts;     /* commits that left their pins set (lazy unpin) */
    uint64_t adopted;    /* admits that took such pins over instead of setting them */
} rsp__fast_counts;
rsp__fast_counts rsp__core_fast_counts(const rsp__core *core);

/*
 * Checkpoints (docs/design.md "Checkpoints and the host tier",
 * docs/checkpoints.md). Slot ids past max_slots are checkpoint slots
 * (layout.h, rsp__layout_space); the work list's COPY pairs name them.
 *
 * Every call that can store, move or drop a checkpoint (checkpoint,
 * checkpoint_drop, commit with declared takes, swap_out, swap_in, and any
 * take that evicts) leaves what it did to the key set in the report below,
 * which the caller reads right after the call (pool.c: counters, the
 * readers' key index, on_checkpoint_evict). A call that fails leaves an
 * empty report.
 */
typedef struct rsp__ckpt_change {
    uint64_t key;
    bool present;  /* stored now under key (taken, replaced, demoted) / gone */
    rsp_tier tier; /* present: where */
    uint32_t slot; /* present: its slot id */
} rsp__ckpt_change;
typedef struct rsp__ckpt_skip {
    uint64_t key;
    uint64_t step_id;
    rsp_status status; /* why a take declared in a step was not done */
} rsp__ckpt_skip;
typedef struct rsp__ckpt_report {
    const rsp__ckpt_change *changes; /* in order; a key may appear more than once */
    uint32_t num_changes;
    const rsp_checkpoint_event *evictions; /* evicted for room (demoted or dropped) */
    uint32_t num_evictions;
    const rsp__ckpt_skip *skips; /* commit: declared takes not done */
    uint32_t num_skips;
    uint32_t taken, restored, dropped; /* counts for rsp_stats */
    uint32_t restored_host;            /* of restored, from the host tier */
    uint64_t value_restored;           /* the restored checkpoints' values, summed */
    uint64_t bytes_restored;
} rsp__ckpt_report;
/* The report of the last core call (core scratch, valid until the next
 * call). O(1). */
const rsp__ckpt_report *rsp__core_ckpt_report(const rsp__core *core);

/* Take a checkpoint of rid's holding of label under key, into tier, as the
 * device queue has the slot now (after_step 0) or after step after_step's
 * forward (a committed step). Errors (nothing changed): RSP_ENOLABEL;
 * RSP_ENOREQ (no such holding); RSP_EORDER (after_step in flight or not
 * yet admitted; the slot pinned by a planned step); RSP_EPINNED (key
 * exists and is pinned); RSP_EINVAL (a tier of size 0); RSP_ECAPACITY (the
 * tier is full of pinned checkpoints); RSP_ENOMEM. O(1) + evictions. */
rsp_status rsp__core_checkpoint(rsp__core *core, uint64_t key, rsp_rid rid, rsp_label_id label,
                                rsp_tier tier, uint64_t after_step, rsp__work *work,
                                rsp_error *err);
/* Drop key (RSP_ENOKEY, RSP_EPINNED). O(1). */
rsp_status rsp__core_checkpoint_drop(rsp__core *core, uint64_t key, rsp_error *err);
/* Caller pin (pin) or unpin (!pin) of key: RSP_ENOKEY; RSP_EINVAL
 * unpinning a checkpoint the caller has not pinned. O(1). */
rsp_status rsp__core_checkpoint_pin(rsp__core *core, uint64_t key, bool pin, rsp_error *err);
/* Set key's value (RSP_ENOKEY): not a use; under the value policy a new
 * score. O(log checkpoints of its tier). */
rsp_status rsp__core_checkpoint_value(rsp__core *core, uint64_t key, uint64_t value,
                                      rsp_error *err);
/* RSP_ENOKEY. O(1). */
rsp_status rsp__core_checkpoint_query(const rsp__core *core, uint64_t key, rsp_checkpoint_info *out,
                                      rsp_error *err);
/* Move every holding of rid to host-tier slots and release its request
 * slots (zeroed): RSP_ENOREQ, RSP_EORDER (a holding pinned by a step in
 * flight, or already swapped out), RSP_ECAPACITY (host tier too full,
 * counting evictable checkpoints), RSP_ENOMEM. O(holdings) + evictions. */
rsp_status rsp__core_swap_out(rsp__core *core, rsp_rid rid, rsp__work *work, rsp_error *err);
/* Bring a swapped-out rid back: out->ok = false (pool full, as admit's
 * outcome) changes nothing; RSP_ENOREQ, RSP_EORDER (not swapped out),
 * RSP_ENOMEM. O(holdings). */
rsp_status rsp__core_swap_in(rsp__core *core, rsp_rid rid, rsp_admit_outcome *out, rsp__work *work,
                             rsp_error *err);

/* --- Guard mode and the state dump (guard.c, dump.c) --------------------- */

/* What one request slot is, for guard mode (pool_guard.c decides from it
 * which slots to checksum). */
typedef struct rsp__guard_slot {
    uint8_t state;       /* rsp__slot_state */
    bool pinned;         /* a step in flight (or a committed step's lingering
                          * pins, same.h) addresses it */
    bool others;         /* pinned by a step other than the one asked about */
    bool zero_pending;   /* a zero waits for a planned step's end */
    rsp_label_id label;  /* HELD: the holder */
    rsp_rid rid;         /* HELD */
    uint64_t generation; /* HELD: the holding's */
} rsp__guard_slot;
/* Fill out[0 .. max_slots) (the caller's array); `others` leaves out the
 * pins of step step_id (none if it is not in flight). Owner. O(max_slots
 * + holdings); no allocation. */
void rsp__core_guard_slots(const rsp__core *core, uint64_t step_id, rsp__guard_slot *out);

/* Append the core's state as JSON object members (no braces) to w: labels,
 * slot counts, requests and their holdings (slot, has_state, generation),
 * the free stack (top first), pending slots, checkpoints per tier (most
 * recently used first), steps in flight and what they pin, the stage.
 * Reads only. Owner. O(records + holdings + released slots + checkpoints
 * + pins). */
struct rsp__jw;
void rsp__core_dump(const rsp__core *core, struct rsp__jw *w);

#endif
