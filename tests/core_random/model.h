/*
 * A reference model of the pool's bookkeeping, written from docs/semantics.md
 * alone, for the seeded random-sequence test of the core.
 * SPDX-License-Identifier: Apache-2.0
 *
 * It knows nothing of the core's data structures: it keeps its own requests
 * (holdings in label insertion order), its own LIFO free stack, step journals,
 * the slots each in-flight step addresses (pins), pending releases, and a
 * content tag per slot (0 = zeros, otherwise the seed of the pattern the
 * simulated forward wrote; forks copy tags). From that it predicts what the
 * core must answer: admit outcomes, slot ids, has_state, the addressing of
 * every plan, and which slots are free / held / pending.
 *
 * Where docs/semantics.md leaves a choice open, the model takes the one
 * docs/design.md or the core's headers state (checked against them, not
 * copied from code):
 *   - a step pins every slot its admit reserves or keeps and every slot its
 *     plans (live or staged) address; pins end at its commit or rollback;
 *   - a release deferred by pins happens when the last pinning step ends, in
 *     that step's pin order;
 *   - reset(free = false): has_state false and a new generation at once;
 *     the zero is deferred only while a planned (live, uncommitted) step
 *     pins the slot, and done when no planned step pins it any more (at
 *     a commit before post-forks, or a rollback); a live plan addressing
 *     such a slot takes the pending zero over (its forward rewrites the
 *     slot from zeros), a rollback of that plan gives it back;
 *   - commit sets has_state on the rows its live plan addressed whose
 *     holding's generation has not moved since that plan;
 *   - a live plan whose forks touch a slot of another planned step, or
 *     whose rows address a slot another planned step's post-forks touch,
 *     is refused (RSP_EORDER), nothing changed;
 *   - a commit's post-fork that touches a slot another planned step pins
 *     is skipped (only possible for holdings that appeared or were
 *     re-created after the plan; the plan checked the others);
 *   - a committed step id is never admitted again (RSP_EORDER);
 *   - a fork from a slot whose zero is deferred gives the target zeros;
 *   - rollback of a journal entry whose holding was removed during the step
 *     releases the pending slot at its journal position when this step is
 *     its last pin (the free stack ends as before the admit);
 *   - rollback of a fresh allocation that another in-flight step also pins
 *     leaves the slot pending instead of pushing it;
 *   - a capture step ingests nothing; a refused admit ingests nothing;
 *   - a take declared in a step is skipped (RSP_ENOREQ) when its holding
 *     is gone or its generation moved since the step's plan (a reset
 *     during the step: the forward's state is not there any more);
 *   - a plan's has_state counts the writes of in-flight steps admitted
 *     earlier; a later admit naming an in-flight post-fork target, and a
 *     rollback while a later step pins a held slot of the step, are
 *     refused (RSP_EORDER); a commit names its admitted declaration;
 *   - a per-token row's span output slots are popped after every fresh
 *     holding of the admit (rows, then forks), in row order; the commit
 *     relabels output slot a into the holding (when it is the planned
 *     one) and lets the others and the old slot go; a rollback frees the
 *     output slots newest first, before the journal; a later admit naming
 *     the holding is refused (RSP_EORDER) while the step is in flight.
 *
 * Requests are small indices (0 .. num_rids-1); the test maps them to rids.
 * Labels are the core's label ids (< RSPM_MAX_LABELS).
 *
 * Single-threaded test code. Every call is O(slots + rows * labels).
 */
#ifndef RSP_TESTS_CORE_RANDOM_MODEL_H
#define RSP_TESTS_CORE_RANDOM_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include <rsp/rsp.h>

#define RSPM_MAX_SLOTS 16
#define RSPM_MAX_RIDS 16
#define RSPM_MAX_LABELS 8
#define RSPM_MAX_STEPS 4
#define RSPM_MAX_ROWS 16
#define RSPM_MAX_FORKS 4
#define RSPM_MAX_KEYS 6     /* checkpoint keys 1 .. RSPM_MAX_KEYS - 1 */
#define RSPM_MAX_CK_DECLS 3 /* restores or takes per step */

/* Content tag of a slot whose bytes the model does not know (a pending slot
 * a forward may still write, the sink). Never compared. */
#define RSPM_UNKNOWN UINT64_MAX

typedef enum rspm_slot_state { RSPM_SINK = 0, RSPM_FREE, RSPM_HELD, RSPM_PENDING } rspm_slot_state;

typedef struct rspm_holding {
    uint32_t label;
    int32_t slot;
    bool has_state;
    bool gen_moved; /* the generation must have moved since the last check */
    uint64_t gen;   /* model-local generation: moves when the core's must */
} rspm_holding;

typedef struct rspm_request {
    bool exists;
    uint32_t num_holdings;
    rspm_holding h[RSPM_MAX_LABELS]; /* insertion order */
    /* Swapped out: no holdings; per holding it had, its label,
     * content tag and has_state, each in a host-tier slot. */
    bool swapped;
    uint32_t swap_n;
    uint32_t swap_label[RSPM_MAX_LABELS];
    uint64_t swap_content[RSPM_MAX_LABELS];
    bool swap_has[RSPM_MAX_LABELS];
} rspm_request;

typedef struct rspm_slot {
    rspm_slot_state state;
    uint64_t content;  /* tag: 0 zeros, RSPM_UNKNOWN, or a pattern seed */
    uint32_t pins;     /* in-flight steps that address this slot */
    bool zero_pending; /* reset(free=false) while a planned step pins it */
    bool written;      /* a forward wrote it since it was last zeroed */
} rspm_slot;

/* One row as the model sees it: request index instead of rid. */
typedef struct rspm_row {
    uint32_t ridx;
    uint32_t label;
    int32_t span;
    bool padding;
    uint16_t fork_group;  /* per-rid forks: one group per rid */
    bool skip_post_forks; /* read at commit only */
    bool per_token;       /* per-token states (span 1 .. RSPM_SPEC_MAX, no padding) */
    uint16_t accepted;    /* read at commit only, per-token rows */
} rspm_row;

/* A per-token row's output slots (docs/semantics.md 9.3). */
#define RSPM_SPEC_MAX 3
typedef struct rspm_spec {
    uint32_t row; /* index into the admitted declaration's rows */
    uint32_t ridx, label, span;
    int32_t out[RSPM_SPEC_MAX];
} rspm_spec;

/* A restore (tier unused) or a take declared in a step. */
typedef struct rspm_ckdecl {
    uint32_t ridx, label;
    uint64_t key;
    uint32_t tier;
} rspm_ckdecl;

typedef struct rspm_decl {
    uint64_t step_id;
    uint32_t num_restores, num_takes;
    rspm_ckdecl restores[RSPM_MAX_CK_DECLS], takes[RSPM_MAX_CK_DECLS];
    uint32_t num_rows;
    rspm_row rows[RSPM_MAX_ROWS];
    uint32_t num_pre, num_post;
    rsp_fork pre[RSPM_MAX_FORKS], post[RSPM_MAX_FORKS];
    bool capture;
} rspm_decl;

typedef struct rspm_journal_entry {
    uint32_t ridx, label;
    int32_t slot;
} rspm_journal_entry;

typedef struct rspm_step {
    bool used;
    uint64_t step_id;
    uint32_t num_journal;
    rspm_journal_entry journal[RSPM_MAX_ROWS * (1 + 2 * RSPM_MAX_FORKS)];
    uint32_t num_pins;
    int32_t pins[RSPM_MAX_SLOTS];  /* pin order */
    bool unpinned[RSPM_MAX_SLOTS]; /* rollback let go of it early */
    bool planned;                  /* live plan out, forward may run */
    uint32_t num_prows;            /* live plan rows with a holding */
    struct {
        uint32_t ridx, label;
        uint64_t gen;
    } prows[RSPM_MAX_ROWS];
    bool took[RSPM_MAX_SLOTS];  /* its plan took over the slot's pending zero */
    bool fslot[RSPM_MAX_SLOTS]; /* its post-forks read/write the slot at commit */
    /* docs/semantics.md 9.1. seq: admit order. writes: its rows (span > 0)
     * write the slot; a planned step loses it when the holding's generation
     * moves (its commit no longer counts the write). post_to: its post-forks
     * replace the slot's bytes at its commit. */
    uint64_t seq;
    bool writes[RSPM_MAX_SLOTS];
    bool post_to[RSPM_MAX_SLOTS];
    /* Per-token rows: their output slots, popped after the admit's fresh
     * holdings; spec_to: the holding's slot, which the commit may relabel
     * (a later admit naming it is refused until then). */
    uint32_t num_spec;
    rspm_spec spec[RSPM_MAX_ROWS];
    bool spec_to[RSPM_MAX_SLOTS];
} rspm_step;

/* Expected addressing of one label. */
typedef struct rspm_label_plan {
    uint32_t label;
    uint32_t num_rows;
    int32_t slot[RSPM_MAX_ROWS];
    bool has_state[RSPM_MAX_ROWS];
    uint32_t row_of[RSPM_MAX_ROWS]; /* index into decl rows */
} rspm_label_plan;

typedef struct rspm_plan {
    uint32_t num_labels;
    rspm_label_plan labels[RSPM_MAX_LABELS];
} rspm_plan;

typedef struct rspm_admit {
    bool ok;
    uint32_t ridx, label; /* failure: first (request, label) without a slot */
    uint32_t slots_short; /* fresh allocations needed minus free slots */
    uint32_t free;        /* free slots before the admit */
} rspm_admit;

/* How often the interesting paths ran (coverage of the random sequence). */
typedef struct rspm_cov {
    uint64_t pending;         /* releases deferred by a step in flight */
    uint64_t pending_freed;   /* ... and later released at the step's end */
    uint64_t zero_deferred;   /* reset(free = false) of a slot a planned step pins */
    uint64_t zero_taken;      /* ... whose zero a later live plan took over */
    uint64_t commit_stale;    /* commit row whose holding is not the planned one */
    uint64_t fork_copies;     /* fork copies between two slots */
    uint64_t fork_from_reset; /* ... from a slot whose reset zero is deferred */
    uint64_t rollback_frees;  /* journal entries released by rollback */
    uint64_t rollback_skips;  /* journal entries whose holding was gone */
    uint64_t overlap_flags;   /* plan rows with state only through an earlier step in flight */
} rspm_cov;

/* A checkpoint: its tier, the content tag of the state it
 * holds (like a slot's), the caller's pins and the steps restoring from it
 * (bit i: m->steps[i]). */
typedef struct rspm_ck {
    bool present;
    uint32_t tier;
    uint64_t content;
    uint32_t user_pins;
    uint32_t step_pins;
    /* The value policy: its last push (m->ck_seq), value and restores. */
    uint64_t seq, value;
    uint32_t restores;
} rspm_ck;

typedef struct rspm {
    /* Checkpoints: tier sizes and counts, demotion, the keys, and per tier
     * its keys in LRU order (least recently used first). Takes skipped by
     * the last commit: their keys and statuses in order. Evictions (and
     * demotions) of the last call. */
    uint32_t tier_size[2], tier_count[2];
    bool demote;
    /* The value policy (weight_byte: weight / slot_bytes), and the pushes
     * to a tier's most recent end so far. */
    bool value;
    double weight_byte;
    uint64_t ck_seq;
    uint64_t value_not_lru; /* victims of the value policy LRU would have kept */
    rspm_ck ck[RSPM_MAX_KEYS];
    uint64_t lru[2][RSPM_MAX_KEYS];
    uint32_t lru_n[2];
    uint32_t num_skips;
    uint64_t skip_key[RSPM_MAX_CK_DECLS];
    rsp_status skip_st[RSPM_MAX_CK_DECLS];
    uint32_t evictions;
    uint32_t swapped_slots; /* host-tier slots of swapped requests */
    uint32_t max_slots;
    bool sink;
    int32_t pad;
    uint32_t num_rids;
    rspm_request req[RSPM_MAX_RIDS];
    rspm_slot slot[RSPM_MAX_SLOTS];
    uint32_t num_free;
    int32_t free_stack[RSPM_MAX_SLOTS]; /* top = free_stack[num_free - 1] */
    rspm_step steps[RSPM_MAX_STEPS];
    uint64_t clock; /* admit order (rspm_step.seq) */
    uint64_t gen;
    rspm_cov cov;
} rspm;

void rspm_init(rspm *m, uint32_t max_slots, bool sink, uint32_t num_rids);

/* A live plan of d that must be refused (RSP_EORDER): the step id of the
 * planned, uncommitted step whose slots its forks would touch, or whose
 * post-fork slots its rows address; 0 when none (step ids start at 1). */
uint64_t rspm_plan_blocker(const rspm *m, const rspm_decl *d);

/* An admit of d that must be refused (RSP_EORDER, docs/semantics.md 9.1): the
 * step id of another in-flight step whose post-forks replace, or whose accept
 * of per-token states moves, a holding a row of d names, or whose accept moves
 * one a fork of d writes; 0 when none. */
uint64_t rspm_admit_blocker(const rspm *m, const rspm_decl *d);

/* A rollback of step_id that must be refused (RSP_EORDER, newest first): the
 * step id of a later-admitted step in flight that pins a held slot this
 * step pins; 0 when none (or the step is not in flight). */
uint64_t rspm_rollback_blocker(const rspm *m, uint64_t step_id);

/* The output slot of token t (1 .. span) of row i of in-flight step
 * step_id, -1 when row i asked for none. */
int32_t rspm_spec_out(const rspm *m, uint64_t step_id, uint32_t row, uint32_t t);

/* docs/semantics.md 3. */
void rspm_ingest(rspm *m, uint32_t ridx);
void rspm_reset(rspm *m, uint32_t ridx, bool free);
void rspm_remove(rspm *m, uint32_t ridx);
/* rsp_release: drop (ridx, label), its slot freed now or when the steps
 * that pin it end. Nothing held there: nothing happens. */
void rspm_release(rspm *m, uint32_t ridx, uint32_t label);

/* docs/semantics.md 4.1: predict the outcome; on success apply it and open an
 * in-flight record for the step. */
rspm_admit rspm_admit_step(rspm *m, const rspm_decl *d);
/* docs/semantics.md 4.2. Unknown / finished step: nothing. */
void rspm_rollback(rspm *m, uint64_t step_id);
/* docs/semantics.md 4.3/4.4: live plan (applies pre-forks) or stage (flags only). */
void rspm_plan_step(rspm *m, const rspm_decl *d, bool staged, rspm_plan *out);
/* docs/semantics.md 4.5. */
void rspm_commit(rspm *m, const rspm_decl *d);
/* The simulated forward wrote pattern `seed` into slot. */
void rspm_forward_write(rspm *m, int32_t slot, uint64_t seed);

/* Checkpoints (docs/design.md "Checkpoints"):
 *   - a take needs the holding (RSP_ENOREQ), a slot no planned step pins
 *     (RSP_EORDER), an unpinned key (RSP_EPINNED), and room: a free slot of
 *     the tier, counting the replaced key's, else its least recently used
 *     unpinned key is evicted (RSP_ECAPACITY without one); with demotion a
 *     device victim moves to the host tier (evicting there first, or
 *     dropped when the host tier has nothing to give);
 *   - a use (take, restore at a live plan, caller pin) makes a key the most
 *     recent of its tier; a demoted key enters the host tier as its most
 *     recent;
 *   - restores pin their keys from admit to the step's end; a live plan
 *     copies them in before its pre-forks (has_state true, new generation);
 *     a commit unpins them, then does its takes (after its writes, before
 *     its post-forks), skipping those that fail (the holding gone, its slot
 *     pinned by another planned step, the key pinned, no room).
 * rspm_ck_init once after rspm_init. */
void rspm_ck_init(rspm *m, uint32_t device, uint32_t host, bool demote);
/* The value policy from now on (rspm_ck_init first): a victim is the
 * unpinned key of its tier with the lowest (seq + weight_byte x f x
 * value, seq), f = 1 + floor(log2(restores)); a restore counts, a take
 * starts at value 0 and 0 restores, a demotion keeps both. */
void rspm_ck_value_policy(rspm *m, double weight_byte);
/* Set key's value: RSP_ENOKEY, else RSP_OK (not a use). */
rsp_status rspm_ck_value(rspm *m, uint64_t key, uint64_t value);
/* A take message of (ridx, label) under key (after_step valid): the
 * status the core must answer; applied when RSP_OK. */
rsp_status rspm_ck_take(rspm *m, uint64_t key, uint32_t ridx, uint32_t label, uint32_t tier);
rsp_status rspm_ck_drop(rspm *m, uint64_t key);
rsp_status rspm_ck_pin(rspm *m, uint64_t key, bool pin);
/* Swap: swap_out needs a host tier (RSP_ECAPACITY, checked
 * first), the request (RSP_ENOREQ), not swapped
 * out, no holding pinned or marked by a step in flight (RSP_EORDER), and
 * a host slot per holding, counting unpinned host checkpoints to evict
 * in LRU order (RSP_ECAPACITY); the slots are released in label order.
 * swap_in needs a swapped request (RSP_EORDER); too few free slots is the
 * admit outcome (*out, nothing changed); the holdings come back in label
 * order (fresh slots, new generations, their has_state and contents).
 * A swapped request's rows refuse an admit (RSP_EORDER); reset and remove
 * give its host slots back. */
rsp_status rspm_swap_out(rspm *m, uint32_t ridx);
rsp_status rspm_swap_in(rspm *m, uint32_t ridx, rspm_admit *out);
/* A non-padding row of d names a swapped-out request. */
bool rspm_swapped_row(const rspm *m, const rspm_decl *d);

/* Every restore of d names a present key (else the admit is RSP_ENOKEY). */
bool rspm_ck_restores_present(const rspm *m, const rspm_decl *d);

/* Queries. */
const rspm_holding *rspm_holding_get(const rspm *m, uint32_t ridx, uint32_t label);
uint32_t rspm_count(const rspm *m, rspm_slot_state st);
uint32_t rspm_num_requests(const rspm *m);
uint32_t rspm_num_holdings(const rspm *m);
bool rspm_step_open(const rspm *m, uint64_t step_id);
/* Clear every holding's gen_moved flag (after the test checked them). */
void rspm_clear_gen_moved(rspm *m);

#endif
