/*
 * The core's private state: every struct its modules share, and the
 * functions of core.c (requests, holdings, slots, the scratch set).
 * SPDX-License-Identifier: Apache-2.0
 *
 * The modules of src/core/, lowest first; each includes only the headers
 * below it, so none calls one above it (scripts/check_house.py):
 *
 *   check.h   the rules of a step declaration, pure (also used by api.c)
 *   map.h     the u64 -> u32 hash map (rid table, checkpoint key table)
 *   same.h    the same-declaration caches: their state, validity, invalidation
 *   core_impl.h, core.c   this state; creation, labels, requests and
 *             holdings, the free stack and slots, ingest / reset / remove,
 *             queries
 *   ckpt.h    checkpoints: records, tiers, LRU, take / evict / demote,
 *             restores and takes of a step, the checkpoint operations
 *   step.h    step records: find, reserve, pins, journal, validated rows
 *   fork.h    forking rids, applying forks, pipeline checks, post-fork marks
 *   addr.h    addressing (build), buffers and leases, the stage
 *   admit.c, plan.c, commit.c, swap.c   the operations on top (core.h),
 *             each in phases: validate, count, reserve, apply
 *
 * Single-threaded like core.h: the owner thread (or a test) is the only
 * caller. Arrays grow by doubling (rsp__grow) and are kept, so steady state
 * allocates nothing. Nothing on an allocation or release path iterates a
 * hash table: orders come from arrays (free stack, labels in insertion
 * order, journals, pin lists), so every rank of a tensor-parallel group
 * does the same thing.
 */
#ifndef RSP_CORE_CORE_IMPL_H
#define RSP_CORE_CORE_IMPL_H

#include <inttypes.h>

#include "check.h"
#include "core.h"
#include "map.h"
#include "same.h"
#include "util/assert.h"
#include "util/error.h"
#include "work_impl.h"

/* At most 64 steps in flight: a slot's pins are one bit per step record. */
#define RSP__MAX_INFLIGHT 64u
#define RSP__DEFAULT_INFLIGHT 4u
/* Messages an inbox may queue at most (pool config inbox_capacity). */
#define RSP__MAX_INBOX (1u << 20)
/* Holdings stored inside the request record before spilling to the heap. */
#define RSP__INLINE_HOLDINGS 4u
#define RSP__NONE UINT32_MAX

/* A request's holding of one label. */
typedef struct rsp__hold {
    rsp_label_id label;
    uint32_t slot;
    bool has_state;
    uint64_t generation;
} rsp__hold;

/* A request record; records live in one array and are found through the rid
 * table. `heap` (when not NULL) replaces `inl` once a request holds more than
 * RSP__INLINE_HOLDINGS labels; holdings are kept in label insertion order. */
typedef struct rsp__req {
    rsp_rid rid;
    bool live;
    uint32_t num_holds, cap_holds;
    rsp__hold *heap;
    rsp__hold inl[RSP__INLINE_HOLDINGS];
    /* 1 + its swap record's index (c->swaps) while swapped out (swap.c),
     * 0 otherwise. Beside it, unused padding: it keeps the record at 144
     * bytes (9 x 16), whose index the compiler forms in fewer instructions
     * than 136's, on every hinted lookup of every row of every admit, plan
     * and commit. */
    uint32_t swap;
    uint32_t pad;
    uint32_t next_free; /* free list of records */
} rsp__req;

/* A checkpoint record (ckpt.h). Record i stands for checkpoint slot id
 * max_slots + i (device tier first, then host tier: layout.h), so records
 * and checkpoint slot ids map one to one; `used` when a keyed checkpoint
 * lives there (a host-tier slot may hold a swapped request's state
 * instead: then its record is unused). */
typedef struct rsp__ckrec {
    uint64_t key;
    uint64_t last_use;   /* c->ck_clock at its last take, restore (plan) or pin */
    uint64_t step_pins;  /* bit r: step record r restores from it (pins: popcount) */
    uint32_t user_pins;  /* the caller's pin count */
    uint32_t prev, next; /* its tier's LRU list (record indices; RSP__NONE ends) */
    uint8_t tier;        /* rsp_tier */
    bool used;
    /* The value policy (ckpt_value.h): seq is c->ck_seq when it last
     * entered its list's head (so seq order is list order), value the
     * caller's, restores the live plans' copies from it since its take
     * (saturating; kept by a demotion), score = seq + weight x f x value /
     * bytes with f from restores, hpos its place in its tier's heap
     * (RSP__NONE: not there, i.e. pinned, unused or LRU). */
    uint32_t hpos;
    uint32_t restores;
    uint64_t seq;
    uint64_t value;
    double score;
} rsp__ckrec;

/* One checkpoint tier: its slot ids [first, first + size), a free stack
 * of them (LIFO; a fresh tier pops first, first + 1, ...), its LRU list of
 * keyed records (head: most recently used) and their count. */
typedef struct rsp__tier {
    uint32_t *free;
    uint32_t free_top, size, first;
    uint32_t head, tail;
    uint32_t count;
    uint32_t *heap; /* value policy: unpinned records, a min-heap by (score, seq) */
    uint32_t heap_n;
} rsp__tier;

/* A swapped-out request's state (swap.c): per holding it had, in label
 * insertion order, the label, the host-tier slot holding its bytes and
 * its has_state. */
typedef struct rsp__swap {
    uint32_t n;
    uint32_t next_free; /* free list of swap records */
    rsp_label_id label[RSP_MAX_LABELS];
    uint32_t slot[RSP_MAX_LABELS];
    bool has_state[RSP_MAX_LABELS];
} rsp__swap;

typedef struct rsp__slot {
    uint8_t state;     /* rsp__slot_state */
    bool zero_pending; /* reset(free = false) while a planned step's forward
                        * may write it: zero once no planned step pins it */
    /* Open exports of this slot's holding (xfer.c): while > 0 no step may
     * write it and it may not be released (RSP_EPINNED). In the padding
     * before pins: the record does not grow. */
    uint16_t xpins;
    /* Reserved by an import's begin and not committed yet (xfer.c):
     * nothing may address, release or reset it. */
    bool importing;
    uint64_t pins;      /* bit r: step record r addresses this slot */
    uint64_t took_zero; /* bit r: step r's live plan took over the pending
                         * zero (its forward rewrites the slot from zeros);
                         * a rollback of r puts it back */
    uint64_t fork_pins; /* bit r: planned step r's post-forks read or write
                         * this slot at its commit */
    /* bit r: step record r's rows write this slot (a row with span > 0),
     * set at its admit with its pin. A later step's plan reads it for
     * has_state (an earlier in-flight step will write the slot); a
     * generation move clears the bits of planned steps, whose commits no
     * longer count their writes (rsp__writes_forget). Cleared with the
     * pin. */
    uint64_t writes;
    /* bit r: step record r's post-forks write this slot at its commit
     * (set at its admit): a later admit naming it is refused until then. */
    uint64_t post_to;
    /* bit r: step record r accepts per-token states into the holding on
     * this slot at its commit (spec.h); a later admit naming it is
     * refused until then, as for post_to. */
    uint64_t spec_to;
} rsp__slot;

/* A row with per-token states of a step record (spec.h): its holding, its
 * span and where its output slots start in the record's spec_slots; the
 * holding's slot when admitted (its spec_to bit). */
typedef struct rsp__spec_row {
    rsp_rid rid;
    rsp_label_id label;
    uint32_t span;
    uint32_t first;
    uint32_t hold_slot;
    uint64_t plan_gen; /* the holding's generation its live plan addressed */
    bool planned;      /* a live plan addressed it (plan_gen is set) */
    bool kept;         /* commit: accepted 0 on the planned holding, whose */
    bool kept_has;     /*   has_state before the commit comes back (spec.c) */
    bool done;         /* commit: its row was found in the commit's rows */
} rsp__spec_row;

typedef struct rsp__journal_entry {
    rsp_rid rid;
    rsp_label_id label;
    uint32_t slot;
} rsp__journal_entry;

/* A row of a live plan: the holding's generation when it was addressed.
 * Commit sets has_state only if the generation is still the same (nothing
 * reset, forked into or reassigned it since: this forward's write counts). */
typedef struct rsp__prow {
    rsp_rid rid;
    rsp_label_id label;
    uint64_t generation;
    uint32_t rec, hold; /* lookup hints (see rsp__hold_lookup) */
    uint32_t at, gat;   /* its entry in the plan's vectors and generations */
} rsp__prow;

/* A row of the declaration as last validated for a step record, with where
 * its (rid, label) was found at admit. Plan and commit compare the rows
 * they get against it: equal rows were validated already (labels are never
 * removed), so the duplicate-row check is skipped. The hints are only
 * hints: a removal or reassignment in between is caught on use. */
typedef struct rsp__valid_row {
    rsp_rid rid;
    rsp_label_id label;
    int32_t span;
    bool padding;
    bool skip_post_forks;     /* always false: a row that says skip is never "the
                               * same" (step.h), so a commit whose rows are the
                               * same needs no look for skips */
    uint8_t per_token_states; /* compared apart (step.h rsp__step_same_rows) */
    uint32_t rec, hold;       /* lookup hints (see rsp__hold_lookup) */
} rsp__valid_row;

typedef enum rsp__phase {
    RSP__PHASE_ADMITTED = 0,
    RSP__PHASE_PLANNED, /* a live plan was built (or promoted) */
    RSP__PHASE_ENDING,  /* its commit recorded the writes: its post-forks run; a
                         * generation they move is not one its own commit reads */
} rsp__phase;

typedef struct rsp__steprec {
    bool used;
    bool capture;
    uint8_t phase;
    uint64_t step_id;
    /* c->admit_clock when the step was first admitted: steps are ordered
     * by admit (earlier in-flight steps: smaller admit_seq). */
    uint64_t admit_seq;
    rsp__journal_entry *journal; /* fresh allocations, in allocation order */
    uint32_t num_journal, cap_journal;
    uint32_t *pinned; /* slots this step addresses, in pin order */
    uint32_t num_pinned, cap_pinned;
    rsp__prow *prows; /* live plan rows with a holding, declaration order */
    uint32_t num_prows, cap_prows;
    uint32_t *fslots; /* slots whose fork_pins bit this step set (post-forks,
                       * then the sources of its declared takes) */
    uint32_t num_fslots, cap_fslots;
    uint32_t *ckrecs; /* checkpoint records it pinned (restores), pin order */
    uint32_t num_ckrecs, cap_ckrecs;
    rsp__valid_row *valid_rows; /* the rows last validated for this record */
    /* The rest of the last admit's declaration (its rows are raw), which
     * the commit must name again (docs/semantics.md 9.2): its forks (pre, then
     * post), checkpoint takes and restores. */
    rsp_fork *dforks;
    uint32_t num_dpre, num_dpost, cap_dforks;
    rsp_checkpoint_decl *dtakes;
    uint32_t num_dtakes, cap_dtakes;
    rsp_restore *drest;
    uint32_t num_drest, cap_drest;
    uint32_t num_valid_rows, cap_valid_rows;
    /* How many of valid_rows ask for per-token states (rsp__row_per_token):
     * a step whose rows are the same as the record's (rsp__step_rows_same)
     * knows without reading them again that none does. */
    uint32_t valid_spec_asks;
    /* The same rows as declared (padding bytes too): the rows a commit
     * names again, and a steady step's rows compare with them as one block
     * (rsp__step_same_rows) while same.h keeps RAW. */
    rsp_row *raw;
    uint32_t cap_raw;
    /* The slots whose post_to bit this record set (its post-fork targets);
     * kept past the step like pinned, for a same-declaration admit to mark
     * again. */
    uint32_t *post_slots;
    uint32_t num_post_slots, cap_post_slots;
    bool plan_took; /* its live plan took a pending zero over */
    /* Its per-token rows and their output slots, back to back (spec.h);
     * held by the record, pinned by it, from admit to commit or rollback. */
    rsp__spec_row *spec_rows;
    uint32_t num_spec_rows, cap_spec_rows;
    uint32_t *spec_slots;
    uint32_t num_spec_slots, cap_spec_slots;
    rsp__same same; /* the same-declaration caches (same.h) */
} rsp__steprec;

/* An addressing buffer (device vectors live in the device, keyed by id). */
typedef struct rsp__buf {
    bool leased;
    rsp_label_id label;
    uint32_t bucket_id, lease_slot; /* leased only */
    uint32_t capacity;
    uint32_t owner; /* step record whose plan (live or staged) it holds while
                     * that step is in flight; RSP__NONE when free */
    uint32_t width; /* 0: a vector buffer; else a leased key's per-token index
                     * tensor, capacity rows of width entries (spec.h) */
} rsp__buf;

/* (rid, label) scratch set: entries are live when stamp == set_epoch, so it
 * is emptied in O(1). */
typedef struct rsp__pair_entry {
    rsp_rid rid;
    rsp_label_id label;
    uint32_t stamp;
} rsp__pair_entry;

/* The buffer a plan binds for one label, chosen in its reserve phase. */
typedef struct rsp__buf_pick {
    uint32_t id;
    bool create;       /* a new buffer (id == num_bufs at bind) */
    uint32_t capacity; /* its capacity when created or grown; 0: as it is */
    /* The per-token index tensor (spec.h), picked in the plan's count
     * phase: its width (1: the vector alone) and, under a lease, its
     * buffer (RSP__NONE: none) and whether the plan creates it. */
    uint32_t spec_width;
    uint32_t spec_id;
    bool spec_create;
} rsp__buf_pick;

/* A built addressing: label plans plus the arrays they point into. */
typedef struct rsp__addr {
    uint32_t num_labels;
    rsp__label_plan labels[RSP_MAX_LABELS];
    int32_t *slots; /* all labels' vectors back to back */
    bool *has_state;
    uint64_t *gens;
    uint32_t cap_slots, cap_has_state, cap_gens;
    int32_t *spec; /* all labels' per-token indices back to back (spec.h) */
    uint32_t cap_spec;
} rsp__addr;

struct rsp__core {
    rsp__layout layout;
    uint32_t max_inflight;

    char label_names[RSP_MAX_LABELS][RSP_NAME_MAX];
    uint32_t num_labels;

    rsp__slot *slots; /* [max_slots]; zeroed: a fresh slot reads FREE */
    /* The free stack (pops from the top), free_top entries: at the bottom
     * the slots never handed out, [fresh, max_slots) in descending order
     * (fresh on top of them), implicit; above them free_stack[0 ..
     * num_pushed), the released slots, in push order. Creation writes
     * neither part, so it costs the same for any max_slots; the order of
     * the stack is the one an explicit push of every slot in descending
     * order would give. */
    uint32_t *free_stack; /* [max_slots]; touched as far as slots are released */
    uint32_t free_top;    /* (max_slots - fresh) + num_pushed */
    uint32_t num_pushed;
    uint32_t fresh;
    /* The free stack's running hash (plan digests): the sum over the stack
     * of (slot + 1) * P^depth mod 2^64, kept in O(1) per push and pop;
     * free_pow = P^free_top, the weight of the next push. */
    uint64_t free_hash;
    uint64_t free_pow;
    uint32_t held, pending;
    uint32_t zero_pendings; /* slots with zero_pending set (rsp__zero_pending) */
    uint64_t generation;

    rsp__req *reqs;
    uint32_t num_recs, cap_recs, free_rec;
    uint32_t num_free_recs; /* length of the free_rec list */
    rsp__map table;         /* rid -> record index (map.h) */
    uint32_t num_requests, num_holdings;
    /* num_holdings by label, and holdings made plus dropped (the pool's
     * metrics mirror the first when the second moved). */
    uint32_t label_holdings[RSP_MAX_LABELS];
    uint64_t holding_moves;
    /* Spill arrays (RSP_MAX_LABELS holdings each) allocated ahead by an
     * admit's reserve phase (rsp__hold_reserve_spills), so a request that
     * outgrows its inline holdings during the apply phase cannot fail. */
    rsp__hold **spare_heaps;
    uint32_t num_spare_heaps, cap_spare_heaps;

    rsp__steprec *steps; /* [max_inflight] */
    uint32_t steps_used; /* records with used set: the steps_in_flight gauge */
    uint64_t last_admitted;
    bool any_admitted;
    uint64_t admit_clock; /* moves at every fresh admit (rsp__steprec.admit_seq) */
    /* bit r: record r is in flight, not a capture, in RSP__PHASE_PLANNED
     * (rsp__planned_mask; set by its live plan, cleared once its commit has
     * recorded its writes, or when the record ends). */
    uint64_t planned_bits;
    uint64_t post_mask;      /* bit r: step record r set post_to marks */
    uint64_t spec_mask;      /* bit r: step record r set spec_to marks (spec.h) */
    uint64_t last_committed; /* highest committed id: never admitted again */
    bool any_committed;

    /* Stage: at most one. */
    bool stage_active;
    uint64_t stage_step;
    uint32_t stage_rec;
    rsp__addr stage;

    /* Live plan scratch, and the output view of the last plan. */
    rsp__addr live;
    rsp__plan_out out;

    rsp__buf *bufs;
    uint32_t num_bufs, cap_bufs;
    uint32_t graph_max_bs;

    /* Per-call scratch. */
    rsp__pair_entry *set;
    uint32_t set_size, set_epoch;
    rsp_rid *rids; /* forking rids, first-appearance order (fork.h) */
    uint32_t num_rids, cap_rids;
    uint32_t *rid_recs; /* record hints of rids (see rsp__rid_req) */
    uint32_t cap_rid_recs;
    /* Fork group of each rid (its rows' fork_group), filled only when a
     * fork of the step has a group; whether a commit skips each rid's
     * post-forks, filled only when a row says so (fork.h). */
    /* c->rids came from this record's fork_rids (RSP__NONE: collected), and
     * that record's resolved forks when usable for this call (NULL: find
     * them per rid and fork). */
    uint32_t rids_rec;
    const rsp__fpair *fpairs;
    const uint32_t *fork_pair_recs;
    uint16_t *rid_groups;
    uint32_t cap_rid_groups;
    bool *rid_skip;
    uint32_t cap_rid_skip;
    uint32_t label_rows[RSP_MAX_LABELS];
    uint32_t label_order[RSP_MAX_LABELS];
    uint32_t num_plan_labels;
    rsp__buf_pick picks[RSP_MAX_LABELS]; /* per label_order entry */

    rsp__same_pool same; /* the same-declaration caches' core part (same.h) */
    rsp__fast_counts fast;

    rsp__reserve_hook reserve_hook; /* see core.h; NULL: none */
    void *reserve_ctx;

    /* Checkpoints (ckpt.h) and swapped requests (swap.c). ck: one record
     * per checkpoint slot; keys: key -> record, sized at create for every
     * record (never grows); ck_clock: the use clock. */
    rsp__ckrec *ck;
    rsp__tier tiers[RSP_TIER_COUNT_];
    rsp__map keys;
    uint64_t ck_clock;
    bool ck_demote;        /* config checkpoint_demote */
    bool ck_value;         /* config checkpoint_policy == RSP_CHECKPOINT_VALUE */
    uint64_t ck_seq;       /* pushes to a list head (rsp__ckrec.seq) */
    double ck_weight_byte; /* checkpoint_value_weight / slot_bytes */
    rsp__swap *swaps;
    uint32_t num_swap_recs, cap_swaps, free_swap;
    uint32_t num_swapped;   /* requests swapped out */
    uint32_t swapped_slots; /* host-tier slots they hold */
    /* The last call's checkpoint report (core.h), and its arrays;
     * rep_dirty: something may have been written to it since it was
     * last emptied. */
    rsp__ckpt_report rep;
    bool rep_dirty;
    rsp__ckpt_change *rep_changes;
    rsp_checkpoint_event *rep_evictions;
    rsp__ckpt_skip *rep_skips;
    uint32_t cap_rep_changes, cap_rep_evictions, cap_rep_skips;

    /* Slots with xpins > 0 or importing (xfer.c): while 0, admit, release,
     * reset, remove and swap-out skip their looks for them. */
    uint32_t xfer_slots;
};

/* Whether slot is exported or being imported (xfer.c): a step may not
 * write it, nobody may free it. O(1). */
static inline bool rsp__xfer_held(const rsp__core *c, uint32_t slot)
{
    return c->slots[slot].xpins || c->slots[slot].importing;
}

/* r holds a slot that is exported or being imported: the refusal of a
 * release (label: that one) or reset/remove/swap (label RSP__NONE: any),
 * RSP_EPINNED naming it; RSP_OK otherwise. Refused rather than deferred:
 * the engine learns the transfer's outcome at the export's close, and
 * may export the same holdings again after a failed transfer. O(1) while
 * nothing is exported, else O(holdings). */
static inline rsp_status rsp__xfer_check_req(const rsp__core *c, const rsp__req *r, uint32_t label,
                                             const char *what, rsp_error *err)
{
    const rsp__hold *h = c->xfer_slots ? (r->heap ? r->heap : r->inl) : NULL;
    for (uint32_t i = 0; h && i < r->num_holds; i++) {
        if ((label != RSP__NONE && h[i].label != label) || !rsp__xfer_held(c, h[i].slot))
            continue;
        return rsp__fail(
            err, RSP_EPINNED, "%s: rid %" PRIu64 " \"%s\" (slot %" PRIu32 ") is %s; %s first", what,
            r->rid, c->label_names[h[i].label], h[i].slot,
            c->slots[h[i].slot].importing ? "being imported" : "exported",
            c->slots[h[i].slot].importing ? "commit or abort the import" : "close its exports");
    }
    return RSP_OK;
}

/* Every core call that changes state starts with an empty checkpoint
 * report (core.h rsp__core_ckpt_report); a failed call leaves it so.
 * Only a call that may write it marks it (rep_dirty: ckpt.c), so the
 * usual call clears nothing. */
static inline void rsp__ckpt_report_begin(rsp__core *c)
{
    if (!c->rep_dirty)
        return;
    c->rep_dirty = false;
    c->rep = (rsp__ckpt_report){
        .changes = c->rep_changes, .evictions = c->rep_evictions, .skips = c->rep_skips};
}

/* Clear the lingering pins of c->same.ghost (core.c). O(its pins). */
void rsp__ghost_clear(rsp__core *c);

/* What every core call that reads or changes state does first: the
 * checkpoint report emptied, and a committed record's lingering pins
 * cleared (only admit may adopt them: it calls rsp__ckpt_report_begin and
 * decides itself). O(1) without a ghost. */
static inline void rsp__op_begin(rsp__core *c)
{
    rsp__ckpt_report_begin(c);
    if (c->same.ghost != RSP__NONE)
        rsp__ghost_clear(c);
}

/* Push / pop a checkpoint slot id of tier t (the caller checked there is
 * room / one). Here, not in ckpt.h: a reset or remove (core.c) gives a
 * swapped request's host slots back. O(1). */
static inline void rsp__tier_push(rsp__core *c, rsp_tier t, uint32_t slot)
{
    RSP__ASSERT(c->tiers[t].free_top < c->tiers[t].size);
    c->tiers[t].free[c->tiers[t].free_top++] = slot;
}
static inline uint32_t rsp__tier_pop(rsp__core *c, rsp_tier t)
{
    RSP__ASSERT(c->tiers[t].free_top > 0);
    return c->tiers[t].free[--c->tiers[t].free_top];
}

/* Hand need to the reserve hook (core.h): the last fallible step of a call
 * that emits work, right before its first change. */
static inline rsp_status rsp__core_reserve_ext(rsp__core *c, const rsp__ext_need *need,
                                               rsp_error *err)
{
    return c->reserve_hook ? c->reserve_hook(c->reserve_ctx, need, err) : RSP_OK;
}

/* Rows of one label, bucket_bs and max_bs at most (check.h). */
static inline uint32_t rsp__core_max_rows(const rsp__core *c)
{
    return rsp__max_rows(c->layout.max_slots);
}

/* Step records whose live plan is out and not yet committed or rolled back
 * (their forwards may be running), as a bit mask. O(max_inflight). Here,
 * not in step.h: a reset (core.c) asks it too. */
static inline uint64_t rsp__planned_mask(const rsp__core *c)
{
#ifdef RSP_DEBUG_ASSERTS
    uint64_t m = 0;
    for (uint32_t i = 0; i < c->max_inflight; i++)
        if (c->steps[i].used && !c->steps[i].capture && c->steps[i].phase == RSP__PHASE_PLANNED)
            m |= 1ull << i;
    RSP__ASSERT(m == c->planned_bits);
#endif
    return c->planned_bits;
}

/* The in-flight, non-capture step records admitted before (earlier) or
 * after (later) record rec. O(max_inflight). */
static inline uint64_t rsp__earlier_mask(const rsp__core *c, uint32_t rec)
{
    uint64_t m = 0, seq = c->steps[rec].admit_seq;
    for (uint32_t i = 0; i < c->max_inflight; i++)
        if (c->steps[i].used && !c->steps[i].capture && c->steps[i].admit_seq < seq)
            m |= 1ull << i;
    return m;
}
static inline uint64_t rsp__later_mask(const rsp__core *c, uint32_t rec)
{
    uint64_t m = 0, seq = c->steps[rec].admit_seq;
    for (uint32_t i = 0; i < c->max_inflight; i++)
        if (c->steps[i].used && !c->steps[i].capture && c->steps[i].admit_seq > seq)
            m |= 1ull << i;
    return m;
}

/* The holding on sl moved its generation (reset, fork into it, restore):
 * a planned step's commit will not count its write any more (its plan saw
 * the old generation), so its writes bit goes; an admitted step's plan
 * will see the new generation, and its bit stays. A record that lost a
 * bit no longer has the marks a same-declaration admit would repeat (its
 * lingering pins would be adopted without it): its next admit takes the
 * general path. */
static inline void rsp__writes_forget(rsp__core *c, rsp__slot *sl)
{
    uint64_t m = sl->writes ? sl->writes & rsp__planned_mask(c) : 0;
    sl->writes &= ~m;
    for (; m; m &= m - 1)
        rsp__same_writes_lost(&c->steps[__builtin_ctzll(m)].same);
}

/* --- core.c: requests, holdings, slots ----------------------------------- */

rsp__req *rsp__req_find(const rsp__core *c, rsp_rid rid);
/* Find or create; NULL only on ENOMEM (nothing changed). May move the
 * record array. Cannot fail after rsp__req_reserve(c, n) for the next n
 * new rids. */
rsp__req *rsp__req_get(rsp__core *c, rsp_rid rid);
/* Make room for n new request records (record array and rid table), so
 * the next n rsp__req_get of new rids cannot fail. RSP_ENOMEM: nothing
 * changed. May move the record array. Amortised O(1), O(requests) when the
 * table grows. */
rsp_status rsp__req_reserve(rsp__core *c, uint32_t n);
/* r's holdings, in label insertion order. Inline: on every row's path. */
static inline rsp__hold *rsp__req_holds(rsp__req *r)
{
    return r->heap ? r->heap : r->inl;
}
/* r's holding of label, NULL if none. O(holdings). */
static inline rsp__hold *rsp__hold_find(rsp__req *r, rsp_label_id label)
{
    rsp__hold *h = rsp__req_holds(r);
    for (uint32_t i = 0; i < r->num_holds; i++)
        if (h[i].label == label)
            return &h[i];
    return NULL;
}
static inline const rsp__hold *rsp__hold_find_const(const rsp__req *r, rsp_label_id label)
{
    return rsp__hold_find((rsp__req *)r, label);
}
/* Holding of (rid, label), NULL when there is none; *out_r gets the request
 * record (NULL when the rid has none). *rec and *hold are hints: record and
 * holding index where the pair was found before. They are checked (a live
 * record of this rid, a holding of this label: both unique) and used when
 * right, which costs a few compares instead of a hash probe and a scan;
 * otherwise the pair is looked up and the hints are updated. O(1) with good
 * hints, else a probe plus O(holdings). */
rsp__hold *rsp__hold_lookup_slow(rsp__core *c, rsp_rid rid, rsp_label_id label, uint32_t *rec,
                                 uint32_t *hold, rsp__req **out_r);
static inline rsp__hold *rsp__hold_lookup(rsp__core *c, rsp_rid rid, rsp_label_id label,
                                          uint32_t *rec, uint32_t *hold, rsp__req **out_r)
{
    /* A rid has at most one live record, and a label at most one holding in
     * it: a live record of this rid is the one the table would find. */
    uint32_t ri = *rec, hi = *hold;
    if (ri < c->num_recs) {
        rsp__req *r = &c->reqs[ri];
        if (r->live && r->rid == rid && hi < r->num_holds) {
            rsp__hold *h = (r->heap ? r->heap : r->inl) + hi;
            if (h->label == label) {
                *out_r = r;
                return h;
            }
        }
    }
    return rsp__hold_lookup_slow(c, rid, label, rec, hold, out_r);
}
/* Pop a free slot and give it to (r, label); the caller checked there is one
 * and that r holds nothing under label. When r's inline holdings are full,
 * it takes a spare spill array: the caller reserved one
 * (rsp__hold_reserve_spills). Cannot fail. O(1). */
rsp__hold *rsp__hold_assign(rsp__core *c, rsp__req *r, rsp_label_id label);
/* Have at least n spare spill arrays. RSP_ENOMEM: the spares that were
 * allocated stay (a later reserve uses them), nothing else changed. */
rsp_status rsp__hold_reserve_spills(rsp__core *c, uint32_t n);
/* Drop r's holding at position i (order of the others kept) and release its
 * slot: pinned -> pending, otherwise zero (into w) and push. */
void rsp__hold_drop(rsp__core *c, rsp__req *r, uint32_t i, rsp__work *w);
/* Pop a free slot for a step record's own use (spec.h output slots):
 * HELD, no holding. The caller checked there is one. O(1). */
uint32_t rsp__slot_take(rsp__core *c);
/* Release a slot that is no longer held by anyone: zero and push. */
void rsp__slot_release(rsp__core *c, uint32_t slot, rsp__work *w);
/* A holding changed (same.h: the caches that depend on it). */
static inline void rsp__holdings_changed(rsp__core *c)
{
    rsp__same_holdings_changed(&c->same);
}
/* The next pool-wide generation (a holding's generation moves). Inline:
 * every fork of every rid takes one. */
static inline uint64_t rsp__next_generation(rsp__core *c)
{
    rsp__holdings_changed(c);
    return ++c->generation;
}
/* Set or clear a slot's zero_pending, keeping c->zero_pendings (while it
 * is 0, commit and unpin skip their looks for pending zeros). */
static inline void rsp__zero_pending(rsp__core *c, rsp__slot *sl, bool on)
{
    c->zero_pendings += (uint32_t)on - (uint32_t)sl->zero_pending;
    sl->zero_pending = on;
}
/* A holding appeared or went, or a request did (same.h). */
static inline void rsp__holders_changed(rsp__core *c)
{
    rsp__same_holders_changed(&c->same);
}

/* r (swapped out) gives its host-tier slots back to the host tier's free
 * stack (a checkpoint slot is written whole before it is read: no
 * zeroing), in reverse order, and is no longer swapped out: swap_in, and
 * a reset or remove of a swapped request. O(its labels). */
void rsp__swap_forget(rsp__core *c, rsp__req *r);

/* (rid, label) scratch set. Reset before use with room for n entries. */
rsp_status rsp__set_reset(rsp__core *c, uint32_t n);
/* Insert; returns false when it was already there. Never fails: the
 * reset made room. O(1) expected. */
bool rsp__set_insert(rsp__core *c, rsp_rid rid, rsp_label_id label);
/* The same where the answer does not matter (marking members). */
void rsp__set_add(rsp__core *c, rsp_rid rid, rsp_label_id label);

#endif
