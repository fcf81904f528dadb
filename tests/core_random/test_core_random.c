/*
 * Seeded random-sequence test of the core (item 6), plus directed
 * regressions for what it found.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Drives rsp__core_* directly with a random mix of ingest, remove, reset
 * (free true/false), admit, rollback (before or after a forward ran), plan
 * (live), stage, promotion (sometimes with a changed declaration),
 * clear_preplan, commit, build_graph_buffers and simulated forwards, on
 * small pools (6-10 slots, sink on and off) so that "pool full" is common,
 * with pre/post forks (chains, swaps, from == to), padding rows, zero- and
 * negative-span rows, capture steps, three labels, graph leases, and up to
 * two steps in flight (the next one admitted, staged, or planned live behind
 * a live one). Device work is executed on heap storage by the core suite's
 * executor (tests/core/exec.c); the simulated forward writes a pattern
 * derived from (rid, label, step) into every planned row's slot.
 *
 * After EVERY operation the core is compared with the reference model
 * (model.c, written from docs/semantics.md and docs/design.md only):
 *   - free + held + pending + sink = max_slots, slot by slot (slot_state) and
 *     in rsp__core_stats; the whole free stack in pop order;
 *   - every (rid, label): holding slot and has_state as predicted, no slot
 *     held twice, generations move exactly when they must; request count;
 *   - every slot's bytes: free slots zero, held slots the exact pattern the
 *     model's content tag says (forks are exact copies), has_state false
 *     reads zeros unless a forward wrote the slot since;
 *   - plans: addressing per label (docs/semantics.md 4.4), tail padding,
 *     uploaded buffers equal the host vectors, leased lengths and no moves,
 *     row generations, whether a promotion keeps the stage; buffers of the
 *     other in-flight step untouched;
 *   - admit outcomes (ok, or which (rid, label) failed, slots short, free);
 *   - device work per operation: no ZERO of a slot an in-flight step
 *     addresses on remove/reset, WAIT before any ZERO/COPY once a forward
 *     ran, staging never copies or zeroes, the sink is never touched;
 *   - bad input (unknown labels, duplicate rows, steps out of order, a
 *     second stage, too many steps in flight) returns its status and leaves
 *     everything unchanged.
 *
 * A failure prints the seed, the operation number, the last operations, the
 * model's state and the environment line that reproduces it alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/core.h"
#include "core/exec.h"
#include "core_random/model.h"

/* ------------------------------------------------------------------------ */
/* Parameters                                                                */
/* ------------------------------------------------------------------------ */

/* Operations per run; 4 runs: 220,000 in the plain and ASan builds. The core
 * is single-threaded, so ThreadSanitizer (5-10x slower here) adds nothing to
 * this test: it runs a quarter of the sequence there. */
#if defined(__SANITIZE_THREAD__)
#define RSP__RANDOM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RSP__RANDOM_TSAN 1
#endif
#endif
#ifndef RSP_RANDOM_OPS
#ifdef RSP__RANDOM_TSAN
#define RSP_RANDOM_OPS 14000
#else
#define RSP_RANDOM_OPS 55000
#endif
#endif

#define NUM_RIDS 8
#define NUM_LABELS 3
#define RID_BASE 1000u
#define BAD_LABEL 40u
#define QMAX 3 /* steps in flight at most (2 in the max_inflight_steps = 2 run) */

typedef struct run_cfg {
    uint64_t seed;
    uint32_t max_slots;
    bool sink;
    uint32_t graph_max_bs; /* build_graph_buffers at start; 0 = never */
    uint32_t max_inflight; /* 0 = the default (4) */
} run_cfg;

/* ------------------------------------------------------------------------ */
/* Test state                                                                */
/* ------------------------------------------------------------------------ */

enum phase { PH_NONE = 0, PH_ADMITTED, PH_STAGED, PH_PLANNED };

typedef struct dstep {
    enum phase phase;
    bool forward_ran;
    rspm_decl d;
    /* d.num_rows at its admit: a plan may drop rows (op_plan), its commit
     * names what was admitted (docs/semantics.md 9.2). */
    uint32_t admitted_rows;
    bool has_lease;
    rsp_lease lease;
    /* The stage as the model built it, to predict whether promotion keeps it
     * (docs/design.md: equal to a fresh live plan -> promoted). */
    bool stage_valid;
    rspm_plan stage;
    /* The addressing buffers of its current plan (live or staged) and what
     * they must keep holding while the step is in flight. */
    uint32_t nbuf;
    struct {
        uint32_t id, length;
        int32_t slot[RSPM_MAX_ROWS];
        bool hs[RSPM_MAX_ROWS];
    } buf[RSPM_MAX_LABELS];
    /* The addressing of the live plan, kept for the simulated forward. */
    uint32_t num_labels;
    uint32_t label[RSPM_MAX_LABELS];
    uint32_t num_rows[RSPM_MAX_LABELS];
    int32_t slot[RSPM_MAX_LABELS][RSPM_MAX_ROWS];
    uint32_t row_of[RSPM_MAX_LABELS][RSPM_MAX_ROWS];
} dstep;

/* A leased buffer key (bucket_id, lease_slot, label): its length once
 * created, and the in-flight plan it holds (docs/design.md: one at a time; a
 * live plan takes it from another step's stage, anything else is refused). */
typedef struct lease_len {
    bool known;
    uint32_t length;
    uint64_t holder; /* step id, 0 = none */
    bool holder_staged;
    uint32_t width; /* its per-token index tensor's, fixed at creation; 0: none yet */
} lease_len;

typedef struct T {
    run_cfg cfg;
    uint64_t rng;
    uint64_t op;
    rsp__core *core;
    rsp__work work;
    /* The twin: the same core with the same-declaration path off
     * (rsp__core_set_fast), given every operation t->core is given; every
     * status, message, outcome, plan and work list must be equal. */
    rsp__core *slow;
    rsp__work swork;
    /* The last admitted declaration, which a steady step repeats. */
    bool have_prev;
    dstep prev;
    uint64_t count_steady;
    uint32_t streak; /* step operations left in a streak */
    rsp_test_store *store;
    rsp_test_store *ref; /* scratch: checksum of a pattern */
    rspm m;
    uint32_t labels[NUM_LABELS];
    uint64_t next_id;
    uint32_t graph_max; /* largest build_graph_buffers max_bs so far */
    dstep q[QMAX];      /* steps in flight, oldest first (only q[0] commits) */
    uint32_t nq;
    /* The retry path: the next admit is this declaration again (same id),
     * after a refusal or after rolling back the last admitted step. */
    bool retry;
    dstep retry_decl;
    uint64_t last_admitted_id;
    uint64_t last_gen[NUM_RIDS][RSPM_MAX_LABELS];
    lease_len lease[2][2][RSPM_MAX_LABELS]; /* [bucket_id][lease_slot][label] */
    char log[16][160];
    uint32_t log_n;
    uint64_t count_admit_full, count_admit_ok, count_promoted, count_stage, count_pending;
    uint64_t count_two_live; /* plans made live while the older step was live */
    uint64_t count_three;    /* operations done with three steps in flight */
    uint64_t count_lease_refused, count_lease_taken, count_retry, count_readmit;
    uint64_t count_spec_forwards, count_accepts; /* per-token rows written, accepted */
    uint64_t count_pipeline_refused;
    uint64_t last_committed_id; /* 0: none yet */
    /* Checkpoints: in every mode (every store holds checkpoint
     * slots), the device runs included. */
    uint64_t count_ck_ops, count_ck_restores, count_ck_takes, count_ck_skips, count_ck_enokey;
    uint64_t count_ck_demoted, count_swaps_out, count_swaps_in, count_swap_refused;
    uint64_t count_ck_values; /* values set (the value policy's runs) */
    uint64_t count_post_refused, count_rollback_refused, count_commit_mismatch;
} T;

static uint32_t rid_of(uint32_t ridx)
{
    return RID_BASE + ridx;
}

/* ------------------------------------------------------------------------ */
/* Failure reporting                                                         */
/* ------------------------------------------------------------------------ */

static void note(T *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(T *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->log[t->log_n % 16], sizeof t->log[0], fmt, ap);
    va_end(ap);
    t->log_n++;
}

static void die(T *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void die(T *t, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_message("core_random FAILED: seed=%llu max_slots=%u sink=%d op=%llu\n  %s\n"
                  "  last operations (oldest first):\n",
                  (unsigned long long)t->cfg.seed, t->cfg.max_slots, (int)t->cfg.sink,
                  (unsigned long long)t->op, msg);
    print_message("  reproduce: RSP_RANDOM_SEED=%#llx RSP_RANDOM_SLOTS=%u RSP_RANDOM_SINK=%d "
                  "RSP_RANDOM_GRAPH=%u RSP_RANDOM_INFLIGHT=%u RSP_RANDOM_OPS=%llu "
                  "test_core_random\n",
                  (unsigned long long)t->cfg.seed, t->cfg.max_slots, (int)t->cfg.sink,
                  t->cfg.graph_max_bs, t->cfg.max_inflight, (unsigned long long)t->op + 1);
    uint32_t first = t->log_n > 16 ? t->log_n - 16 : 0;
    for (uint32_t i = first; i < t->log_n; i++)
        print_message("    %s\n", t->log[i % 16]);
    print_message("  model: free stack (top last):");
    for (uint32_t i = 0; i < t->m.num_free; i++)
        print_message(" %d", t->m.free_stack[i]);
    print_message("\n");
    for (uint32_t r = 0; r < NUM_RIDS; r++) {
        if (!t->m.req[r].exists)
            continue;
        print_message("  model rid %u:", rid_of(r));
        for (uint32_t i = 0; i < t->m.req[r].num_holdings; i++)
            print_message(" [label %u slot %d hs %d]", t->m.req[r].h[i].label,
                          t->m.req[r].h[i].slot, t->m.req[r].h[i].has_state);
        print_message("\n");
    }
    for (uint32_t s = 0; s < t->cfg.max_slots; s++)
        print_message("  model slot %u: state %d pins %u zero_pending %d written %d content %llx\n",
                      s, t->m.slot[s].state, t->m.slot[s].pins, t->m.slot[s].zero_pending,
                      t->m.slot[s].written, (unsigned long long)t->m.slot[s].content);
    for (uint32_t i = 0; i < RSPM_MAX_STEPS; i++)
        if (t->m.steps[i].used) {
            print_message("  model step %llu pins:", (unsigned long long)t->m.steps[i].step_id);
            for (uint32_t k = 0; k < t->m.steps[i].num_pins; k++)
                print_message(" %d%s", t->m.steps[i].pins[k], t->m.steps[i].unpinned[k] ? "x" : "");
            print_message("\n");
        }
    fail_msg("seed=%llu op=%llu: %s", (unsigned long long)t->cfg.seed, (unsigned long long)t->op,
             msg);
}

#define CHECK(t, cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond))                                                                               \
            die((t), __VA_ARGS__);                                                                 \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

static uint64_t rnd(T *t)
{
    /* splitmix64: tiny, seedable, the same sequence on every platform. */
    uint64_t z = (t->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t below(T *t, uint32_t n)
{
    return (uint32_t)(rnd(t) % n);
}

/* The pattern a forward of `step` writes for (rid, label): never 0. */
static uint64_t pattern_seed(uint32_t ridx, uint32_t label, uint64_t step)
{
    uint64_t x = (step << 16) ^ ((uint64_t)ridx << 8) ^ label ^ 0x5bd1e995ull;
    x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    return x ? (x == RSPM_UNKNOWN ? 1 : x) : 1;
}

/* Submit the work of the last core call to the simulated device. */
static void apply_work(T *t, const char *what)
{
    CHECK(t, rsp_test_store_apply(t->store, &t->work), "%s: malformed work: %s", what,
          rsp_test_store_error(t->store));
    rsp__work_clear(&t->work);
    rsp__work_clear(&t->swork);
}

/* What a work list may contain, per operation (docs/semantics.md 4.3, 5). */
enum {
    W_NO_ZERO = 1u << 0,       /* no ZERO at all (admit, stage, live plan) */
    W_NO_COPY = 1u << 1,       /* no COPY at all (stage, reset, remove, admit, rollback) */
    W_WAIT_FIRST = 1u << 2,    /* a forward ran: WAIT before any ZERO or COPY */
    W_UNPINNED_ZERO = 1u << 3, /* zero only slots no planned step's forward may write */
};

/* Check the work of the last core call before it is applied. `before` is the
 * model as it was before the call (for pins). */
static void check_work(T *t, const char *what, unsigned rules, const rspm *before)
{
    const rsp__work *w = &t->work;
    bool waited = false;
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if (op->kind == RSP__OP_WAIT)
            waited = true;
        if (op->kind != RSP__OP_ZERO && op->kind != RSP__OP_COPY)
            continue;
        CHECK(t, !(rules & W_NO_ZERO) || op->kind != RSP__OP_ZERO, "%s: emitted a ZERO", what);
        CHECK(t, !(rules & W_NO_COPY) || op->kind != RSP__OP_COPY, "%s: emitted a COPY", what);
        CHECK(t, !(rules & W_WAIT_FIRST) || waited, "%s: %s before waiting for the forward", what,
              op->kind == RSP__OP_ZERO ? "ZERO" : "COPY");
        for (uint32_t k = 0; k < op->count; k++) {
            uint32_t a =
                op->kind == RSP__OP_ZERO ? w->slots[op->first + k] : w->pairs[op->first + k].src;
            uint32_t b = op->kind == RSP__OP_ZERO ? a : w->pairs[op->first + k].dst;
            CHECK(t, !(t->cfg.sink && (a == 0 || b == 0)), "%s: device work touches the sink",
                  what);
            if (op->kind == RSP__OP_ZERO && (rules & W_UNPINNED_ZERO) && a < RSPM_MAX_SLOTS)
                for (uint32_t j = 0; j < RSPM_MAX_STEPS; j++) {
                    const rspm_step *u = &before->steps[j];
                    for (uint32_t p = 0; u->used && u->planned && p < u->num_pins; p++)
                        CHECK(t, u->unpinned[p] || u->pins[p] != (int32_t)a,
                              "%s: zeroes slot %u while planned step %llu may write it", what, a,
                              (unsigned long long)u->step_id);
                }
        }
    }
}

static void to_step(const T *t, const dstep *s, bool preplan, rsp_row *rows, rsp_fork *pre,
                    rsp_fork *post, rsp_restore *res, rsp_checkpoint_decl *cks, rsp_step *out)
{
    (void)t;
    memset(out, 0, sizeof *out);
    out->step_id = s->d.step_id;
    for (uint32_t i = 0; i < s->d.num_rows; i++)
        rows[i] = (rsp_row){.rid = rid_of(s->d.rows[i].ridx),
                            .label = s->d.rows[i].label,
                            .span = s->d.rows[i].span,
                            .padding = s->d.rows[i].padding,
                            .fork_group = s->d.rows[i].fork_group,
                            .skip_post_forks = s->d.rows[i].skip_post_forks,
                            .per_token_states = s->d.rows[i].per_token,
                            .accepted = s->d.rows[i].accepted};
    memcpy(pre, s->d.pre, s->d.num_pre * sizeof *pre);
    memcpy(post, s->d.post, s->d.num_post * sizeof *post);
    out->rows = rows;
    out->num_rows = s->d.num_rows;
    out->pre_forks = pre;
    out->num_pre_forks = s->d.num_pre;
    out->post_forks = post;
    out->num_post_forks = s->d.num_post;
    out->capture = s->d.capture;
    out->preplan = preplan;
    out->has_lease = s->has_lease;
    out->lease = s->lease;
    for (uint32_t i = 0; i < s->d.num_restores; i++)
        res[i] = (rsp_restore){.rid = rid_of(s->d.restores[i].ridx),
                               .label = s->d.restores[i].label,
                               .key = s->d.restores[i].key};
    for (uint32_t i = 0; i < s->d.num_takes; i++)
        cks[i] = (rsp_checkpoint_decl){.rid = rid_of(s->d.takes[i].ridx),
                                       .label = s->d.takes[i].label,
                                       .tier = (rsp_tier)s->d.takes[i].tier,
                                       .key = s->d.takes[i].key};
    out->restores = s->d.num_restores ? res : NULL;
    out->num_restores = s->d.num_restores;
    out->checkpoints = s->d.num_takes ? cks : NULL;
    out->num_checkpoints = s->d.num_takes;
}

#define STEP_VARS(t, s, preplan)                                                                   \
    rsp_row rows_[RSPM_MAX_ROWS];                                                                  \
    rsp_fork pre_[RSPM_MAX_FORKS], post_[RSPM_MAX_FORKS];                                          \
    rsp_restore res_[RSPM_MAX_CK_DECLS];                                                           \
    rsp_checkpoint_decl cks_[RSPM_MAX_CK_DECLS];                                                   \
    rsp_step st_;                                                                                  \
    to_step((t), (s), (preplan), rows_, pre_, post_, res_, cks_, &st_)

/* ------------------------------------------------------------------------ */
/* The invariant check, after every operation                                */
/* ------------------------------------------------------------------------ */

static uint64_t expected_checksum(T *t, uint64_t content)
{
    if (content == 0)
        return rsp_test_store_zero_checksum(t->store);
    rsp_test_store_fill_pattern(t->ref, 0, content);
    return rsp_test_store_checksum(t->ref, 0);
}

static rsp__slot_state model_state(rspm_slot_state s)
{
    switch (s) {
    case RSPM_SINK: return RSP__SLOT_SINK;
    case RSPM_FREE: return RSP__SLOT_FREE;
    case RSPM_HELD: return RSP__SLOT_HELD;
    default: return RSP__SLOT_PENDING;
    }
}

static const char *state_name(rsp__slot_state s)
{
    static const char *n[] = {"free", "sink", "held", "pending"};
    return (unsigned)s < 4 ? n[s] : "?";
}

/* ------------------------------------------------------------------------ */
/* The twin: the same-declaration path against the general path             */
/* ------------------------------------------------------------------------ */

/* The work lists of the two cores are equal op by op (uploads by content). */
static void twin_work(T *t, const char *what)
{
    const rsp__work *a = &t->work, *b = &t->swork;
    CHECK(t,
          a->num_ops == b->num_ops && a->num_slots == b->num_slots && a->num_pairs == b->num_pairs,
          "%s: twin work differs: %u/%u/%u ops/slots/pairs, general path %u/%u/%u", what,
          a->num_ops, a->num_slots, a->num_pairs, b->num_ops, b->num_slots, b->num_pairs);
    CHECK(t, !a->num_slots || !memcmp(a->slots, b->slots, a->num_slots * sizeof *a->slots),
          "%s: twin ZERO slots differ", what);
    CHECK(t, !a->num_pairs || !memcmp(a->pairs, b->pairs, a->num_pairs * sizeof *a->pairs),
          "%s: twin COPY pairs differ", what);
    for (uint32_t i = 0; i < a->num_ops; i++) {
        const rsp__op *x = &a->ops[i], *y = &b->ops[i];
        CHECK(t,
              x->kind == y->kind && x->first == y->first && x->count == y->count &&
                  x->buffer == y->buffer && x->capacity == y->capacity &&
                  x->event.handle == y->event.handle && x->event.value == y->event.value,
              "%s: twin op %u differs (kind %d/%d)", what, i, (int)x->kind, (int)y->kind);
        if (x->kind == RSP__OP_UPLOAD)
            CHECK(
                t,
                !memcmp(x->slot_indices, y->slot_indices, x->count * sizeof(int32_t)) &&
                    !x->has_state == !y->has_state && /* NULL: an index tensor's */
                    (!x->has_state || !memcmp(x->has_state, y->has_state, x->count * sizeof(bool))),
                "%s: twin upload %u differs", what, i);
    }
}

/* The checkpoint reports of the two cores are equal (core.h). */
static void twin_report(T *t, const char *what)
{
    const rsp__ckpt_report *a = rsp__core_ckpt_report(t->core);
    const rsp__ckpt_report *b = rsp__core_ckpt_report(t->slow);
    CHECK(t,
          a->num_changes == b->num_changes && a->num_evictions == b->num_evictions &&
              a->num_skips == b->num_skips && a->taken == b->taken && a->restored == b->restored &&
              a->dropped == b->dropped,
          "%s: twin checkpoint reports differ", what);
    for (uint32_t i = 0; i < a->num_changes; i++)
        CHECK(t,
              a->changes[i].key == b->changes[i].key &&
                  a->changes[i].present == b->changes[i].present &&
                  (!a->changes[i].present || (a->changes[i].tier == b->changes[i].tier &&
                                              a->changes[i].slot == b->changes[i].slot)),
              "%s: twin checkpoint change %u differs", what, i);
    for (uint32_t i = 0; i < a->num_evictions; i++)
        CHECK(t,
              a->evictions[i].key == b->evictions[i].key &&
                  a->evictions[i].tier == b->evictions[i].tier &&
                  a->evictions[i].demoted == b->evictions[i].demoted,
              "%s: twin eviction %u differs", what, i);
    for (uint32_t i = 0; i < a->num_skips; i++)
        CHECK(t, a->skips[i].key == b->skips[i].key && a->skips[i].status == b->skips[i].status,
              "%s: twin skip %u differs", what, i);
}

/* Statuses and messages equal, then the work. */
static void twin_status(T *t, const char *what, rsp_status a, rsp_status b, const rsp_error *ea,
                        const rsp_error *eb, rsp_error *err)
{
    CHECK(t, a == b && (a == RSP_OK || strcmp(ea->message, eb->message) == 0),
          "%s: status %d '%s', general path %d '%s'", what, (int)a, a ? ea->message : "", (int)b,
          b ? eb->message : "");
    twin_work(t, what);
    twin_report(t, what);
    if (err)
        *err = *ea;
}

static rsp_status tw_admit(T *t, const rsp_step *st, rsp_admit_outcome *out, rsp__work *w,
                           rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_admit_outcome ob;
    memset(&ob, 0, sizeof ob);
    uint64_t fast = rsp__core_fast_counts(t->core).admits;
    rsp_status a = rsp__core_admit(t->core, st, out, w, &ea);
    rsp_status b = rsp__core_admit(t->slow, st, &ob, &t->swork, &eb);
    twin_status(t, "admit", a, b, &ea, &eb, err);
    CHECK(t,
          a != RSP_OK || (out->ok == ob.ok && out->rid == ob.rid && out->label == ob.label &&
                          out->slots_short == ob.slots_short && out->usable == ob.usable &&
                          out->free == ob.free),
          "admit: twin outcome differs");
    if (rsp__core_fast_counts(t->core).admits != fast)
        note(t, "(admit took the same-declaration path)");
    return a;
}

static rsp_status tw_plan(T *t, const rsp_step *st, rsp__plan_out *out, rsp__work *w,
                          rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp__plan_out ob;
    memset(&ob, 0, sizeof ob);
    uint64_t fast = rsp__core_fast_counts(t->core).plans;
    rsp_status a = rsp__core_plan(t->core, st, out, w, &ea);
    rsp_status b = rsp__core_plan(t->slow, st, &ob, &t->swork, &eb);
    twin_status(t, "plan", a, b, &ea, &eb, err);
    if (rsp__core_fast_counts(t->core).plans != fast)
        note(t, "(plan took the same-declaration path)");
    if (a != RSP_OK)
        return a;
    CHECK(t,
          out->step_id == ob.step_id && out->staged == ob.staged && out->promoted == ob.promoted &&
              out->stage.ended == ob.stage.ended && out->stage.step_id == ob.stage.step_id &&
              out->num_labels == ob.num_labels && out->digest == ob.digest,
          "plan: twin plan differs (digest %llx, general path %llx)",
          (unsigned long long)out->digest, (unsigned long long)ob.digest);
    for (uint32_t li = 0; li < out->num_labels; li++) {
        const rsp__label_plan *x = &out->labels[li], *y = &ob.labels[li];
        CHECK(t,
              x->label == y->label && x->num_rows == y->num_rows && x->length == y->length &&
                  x->buffer == y->buffer &&
                  !memcmp(x->slot_indices, y->slot_indices, x->length * sizeof(int32_t)) &&
                  !memcmp(x->has_state, y->has_state, x->length * sizeof(bool)) &&
                  !memcmp(x->generations, y->generations, x->num_rows * sizeof(uint64_t)),
              "plan: twin vectors of label %u differ", x->label);
    }
    return a;
}

static rsp_status tw_commit(T *t, const rsp_step *st, const rsp_event *ev, rsp__work *w,
                            rsp__stage_change *stage, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp__stage_change sa, sb;
    rsp_status a = rsp__core_commit(t->core, st, ev, w, &sa, &ea);
    rsp_status b = rsp__core_commit(t->slow, st, ev, &t->swork, &sb, &eb);
    twin_status(t, "commit", a, b, &ea, &eb, err);
    CHECK(t, sa.ended == sb.ended && sa.step_id == sb.step_id, "commit: twin stage differs");
    if (stage)
        *stage = sa;
    return a;
}

static rsp_status tw_rollback(T *t, uint64_t id, const rsp_event *ev, rsp__work *w,
                              rsp__stage_change *stage, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp__stage_change sa, sb;
    rsp_status a = rsp__core_rollback(t->core, id, ev, w, &sa, &ea);
    rsp_status b = rsp__core_rollback(t->slow, id, ev, &t->swork, &sb, &eb);
    twin_status(t, "rollback", a, b, &ea, &eb, err);
    CHECK(t, sa.ended == sb.ended && sa.step_id == sb.step_id, "rollback: twin stage differs");
    if (stage)
        *stage = sa;
    return a;
}

static rsp_status tw_clear_preplan(T *t, rsp__stage_change *stage, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp__stage_change sa, sb;
    rsp_status a = rsp__core_clear_preplan(t->core, &sa, &ea);
    rsp_status b = rsp__core_clear_preplan(t->slow, &sb, &eb);
    twin_status(t, "clear_preplan", a, b, &ea, &eb, err);
    CHECK(t, sa.ended == sb.ended && sa.step_id == sb.step_id, "clear_preplan: twin differs");
    if (stage)
        *stage = sa;
    return a;
}

static rsp_status tw_ingest(T *t, rsp_rid rid, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_ingest(t->core, rid, &ea);
    rsp_status b = rsp__core_ingest(t->slow, rid, &eb);
    twin_status(t, "ingest", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_reset(T *t, rsp_rid rid, bool free, rsp__work *w, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_reset(t->core, rid, free, w, &ea);
    rsp_status b = rsp__core_reset(t->slow, rid, free, &t->swork, &eb);
    twin_status(t, "reset", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_remove(T *t, rsp_rid rid, rsp__work *w, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_remove(t->core, rid, w, &ea);
    rsp_status b = rsp__core_remove(t->slow, rid, &t->swork, &eb);
    twin_status(t, "remove", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_release(T *t, rsp_rid rid, rsp_label_id label, rsp__work *w, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_release(t->core, rid, label, w, &ea);
    rsp_status b = rsp__core_release(t->slow, rid, label, &t->swork, &eb);
    twin_status(t, "release", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_build_graph_buffers(T *t, uint32_t max_bs, uint32_t seq, rsp__work *w,
                                         rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_build_graph_buffers(t->core, max_bs, seq, w, &ea);
    rsp_status b = rsp__core_build_graph_buffers(t->slow, max_bs, seq, &t->swork, &eb);
    twin_status(t, "build_graph_buffers", a, b, &ea, &eb, err);
    return a;
}

/* The rest of the two cores' state: stats, free stack, slot states,
 * holdings. */
static rsp_status tw_checkpoint(T *t, uint64_t key, rsp_rid rid, rsp_label_id label, rsp_tier tier,
                                uint64_t after, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_checkpoint(t->core, key, rid, label, tier, after, &t->work, &ea);
    rsp_status b = rsp__core_checkpoint(t->slow, key, rid, label, tier, after, &t->swork, &eb);
    twin_status(t, "checkpoint", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_ck_drop(T *t, uint64_t key, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_checkpoint_drop(t->core, key, &ea);
    rsp_status b = rsp__core_checkpoint_drop(t->slow, key, &eb);
    twin_status(t, "checkpoint_drop", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_ck_pin(T *t, uint64_t key, bool pin, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_checkpoint_pin(t->core, key, pin, &ea);
    rsp_status b = rsp__core_checkpoint_pin(t->slow, key, pin, &eb);
    twin_status(t, "checkpoint_pin", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_ck_value(T *t, uint64_t key, uint64_t value, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_checkpoint_value(t->core, key, value, &ea);
    rsp_status b = rsp__core_checkpoint_value(t->slow, key, value, &eb);
    twin_status(t, "checkpoint_value", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_swap_out(T *t, rsp_rid rid, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_status a = rsp__core_swap_out(t->core, rid, &t->work, &ea);
    rsp_status b = rsp__core_swap_out(t->slow, rid, &t->swork, &eb);
    twin_status(t, "swap_out", a, b, &ea, &eb, err);
    return a;
}

static rsp_status tw_swap_in(T *t, rsp_rid rid, rsp_admit_outcome *out, rsp_error *err)
{
    rsp_error ea = {0}, eb = {0};
    rsp_admit_outcome ob;
    memset(&ob, 0, sizeof ob);
    rsp_status a = rsp__core_swap_in(t->core, rid, out, &t->work, &ea);
    rsp_status b = rsp__core_swap_in(t->slow, rid, &ob, &t->swork, &eb);
    twin_status(t, "swap_in", a, b, &ea, &eb, err);
    CHECK(t, a != RSP_OK || !memcmp(out, &ob, sizeof ob), "swap_in: twin outcome differs");
    return a;
}

/* Every key as the model says, in both cores; its bytes as the state it
 * saved (every checkpoint, after every operation). */
static void check_checkpoints(T *t, const char *what)
{
    for (uint64_t k = 1; k < RSPM_MAX_KEYS; k++) {
        const rspm_ck *mk = &t->m.ck[k];
        rsp_checkpoint_info a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        rsp_status x = rsp__core_checkpoint_query(t->core, k, &a, NULL);
        rsp_status y = rsp__core_checkpoint_query(t->slow, k, &b, NULL);
        CHECK(t, x == y && !memcmp(&a, &b, sizeof a), "%s: twin checkpoint %llu differs", what,
              (unsigned long long)k);
        CHECK(t, (x == RSP_OK) == mk->present, "%s: checkpoint %llu present=%d, model %d", what,
              (unsigned long long)k, x == RSP_OK, mk->present);
        if (!mk->present)
            continue;
        CHECK(t,
              a.tier == (rsp_tier)mk->tier && a.user_pins == mk->user_pins &&
                  a.pins == (uint32_t)__builtin_popcount(mk->step_pins),
              "%s: checkpoint %llu tier %d pins %u user %u, model tier %u pins %d user %u", what,
              (unsigned long long)k, (int)a.tier, a.pins, a.user_pins, mk->tier,
              __builtin_popcount(mk->step_pins), mk->user_pins);
        if (mk->content != RSPM_UNKNOWN)
            CHECK(t,
                  rsp_test_store_checksum(t->store, (uint32_t)a.slot) ==
                      expected_checksum(t, mk->content),
                  "%s: checkpoint %llu (slot %d) does not hold the state it saved (tag %llx)", what,
                  (unsigned long long)k, a.slot, (unsigned long long)mk->content);
    }
    rsp_stats st;
    memset(&st, 0, sizeof st);
    rsp__core_stats(t->core, &st);
    CHECK(t,
          st.checkpoints_device == t->m.tier_count[0] && st.checkpoints_host == t->m.tier_count[1],
          "%s: %u + %u checkpoints, model %u + %u", what, st.checkpoints_device,
          st.checkpoints_host, t->m.tier_count[0], t->m.tier_count[1]);
}

static void twin_state(T *t, const char *what)
{
    rsp_stats a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    rsp__core_stats(t->core, &a);
    rsp__core_stats(t->slow, &b);
    CHECK(t, !memcmp(&a, &b, sizeof a), "%s: twin stats differ", what);
    uint32_t fa[RSPM_MAX_SLOTS], fb[RSPM_MAX_SLOTS];
    uint32_t na = rsp__core_free_order(t->core, fa, RSPM_MAX_SLOTS);
    uint32_t nb = rsp__core_free_order(t->slow, fb, RSPM_MAX_SLOTS);
    CHECK(t, na == nb && !memcmp(fa, fb, (na < RSPM_MAX_SLOTS ? na : RSPM_MAX_SLOTS) * sizeof *fa),
          "%s: twin free stacks differ", what);
    for (uint32_t s = 0; s < t->cfg.max_slots; s++)
        CHECK(t, rsp__core_slot_state(t->core, s) == rsp__core_slot_state(t->slow, s),
              "%s: twin slot %u state differs", what, s);
    for (uint32_t r = 0; r < NUM_RIDS; r++)
        for (uint32_t l = 0; l < NUM_LABELS; l++) {
            rsp_holding ha, hb;
            memset(&ha, 0, sizeof ha);
            memset(&hb, 0, sizeof hb);
            rsp_status x = rsp__core_holding(t->core, rid_of(r), t->labels[l], &ha, NULL);
            rsp_status y = rsp__core_holding(t->slow, rid_of(r), t->labels[l], &hb, NULL);
            CHECK(t,
                  x == y && ha.index == hb.index && ha.has_state == hb.has_state &&
                      ha.generation == hb.generation,
                  "%s: twin holding (rid %u, label %u) differs", what, rid_of(r), l);
        }
}

static void check_all(T *t, const char *what)
{
    twin_state(t, what);
    check_checkpoints(t, what);
    const rspm *m = &t->m;
    uint32_t max = t->cfg.max_slots;

    /* The core's stage is the step the model holds staged, if any (issue
     * 8, item 1: it must not outlive its step). */
    const dstep *staged = NULL;
    for (uint32_t k = 0; k < t->nq; k++)
        if (t->q[k].phase == PH_STAGED)
            staged = &t->q[k];
    uint64_t stage_step = 0;
    bool has_stage = rsp__core_stage(t->core, &stage_step);
    CHECK(t, has_stage == (staged != NULL) && (!staged || stage_step == staged->d.step_id),
          "%s: the core's stage is %s step %llu, the model's %s step %llu", what,
          has_stage ? "of" : "not there;", (unsigned long long)stage_step,
          staged ? "of" : "not there;", staged ? (unsigned long long)staged->d.step_id : 0ull);

    /* Slot accounting, slot by slot and in the counters. */
    uint32_t n[4] = {0};
    for (uint32_t s = 0; s < max; s++) {
        rsp__slot_state got = rsp__core_slot_state(t->core, s);
        CHECK(t, (unsigned)got < 4, "%s: slot %u has state %d", what, s, (int)got);
        n[(unsigned)got & 3u]++;
        CHECK(t, got == model_state(m->slot[s].state), "%s: slot %u is %s, model says %s", what, s,
              state_name(got), state_name(model_state(m->slot[s].state)));
    }
    CHECK(t, n[RSP__SLOT_SINK] == (t->cfg.sink ? 1u : 0u), "%s: %u sink slots", what,
          n[RSP__SLOT_SINK]);
    rsp_stats st;
    memset(&st, 0, sizeof st);
    rsp__core_stats(t->core, &st);
    CHECK(t, st.max_slots == max && st.usable_slots == max - (t->cfg.sink ? 1u : 0u),
          "%s: stats max %u usable %u", what, st.max_slots, st.usable_slots);
    CHECK(t, st.free_slots + st.held_slots + st.pending_release + (t->cfg.sink ? 1u : 0u) == max,
          "%s: free %u + held %u + pending %u + sink != max_slots %u", what, st.free_slots,
          st.held_slots, st.pending_release, max);
    CHECK(t,
          st.free_slots == n[RSP__SLOT_FREE] && st.held_slots == n[RSP__SLOT_HELD] &&
              st.pending_release == n[RSP__SLOT_PENDING],
          "%s: stats free/held/pending %u/%u/%u, slot states say %u/%u/%u", what, st.free_slots,
          st.held_slots, st.pending_release, n[RSP__SLOT_FREE], n[RSP__SLOT_HELD],
          n[RSP__SLOT_PENDING]);
    /* The free stack, in the order the next allocations will take it. */
    uint32_t order[RSPM_MAX_SLOTS];
    uint32_t nf = rsp__core_free_order(t->core, order, RSPM_MAX_SLOTS);
    CHECK(t, nf == m->num_free, "%s: %u free slots, model %u", what, nf, m->num_free);
    for (uint32_t i = 0; i < nf; i++)
        CHECK(t, (int32_t)order[i] == m->free_stack[m->num_free - 1 - i],
              "%s: free stack position %u (from the top) is slot %u, model slot %d", what, i,
              order[i], m->free_stack[m->num_free - 1 - i]);

    /* Every holding of every (rid, label): no slot twice, as the model says. */
    uint32_t held_by[RSPM_MAX_SLOTS] = {0};
    uint32_t per_label[NUM_LABELS] = {0};
    for (uint32_t r = 0; r < NUM_RIDS; r++) {
        bool exists = rsp__core_has_request(t->core, rid_of(r));
        CHECK(t, exists == m->req[r].exists, "%s: rid %u exists=%d, model %d", what, rid_of(r),
              exists, m->req[r].exists);
        for (uint32_t li = 0; li < NUM_LABELS; li++) {
            uint32_t label = t->labels[li];
            rsp_holding h;
            memset(&h, 0, sizeof h);
            rsp_status rc = rsp__core_holding(t->core, rid_of(r), label, &h, NULL);
            const rspm_holding *mh = rspm_holding_get(m, r, label);
            if (!mh) {
                CHECK(t, rc == RSP_ENOREQ,
                      "%s: (rid %u, label %u) held slot %d (rc %d), model: none", what, rid_of(r),
                      label, h.index, (int)rc);
                t->last_gen[r][label] = 0;
                continue;
            }
            CHECK(t, rc == RSP_OK, "%s: (rid %u, label %u) rc %d, model holds slot %d", what,
                  rid_of(r), label, (int)rc, mh->slot);
            CHECK(t, h.index == mh->slot && h.has_state == mh->has_state,
                  "%s: (rid %u, label %u) slot %d has_state %d, model slot %d has_state %d", what,
                  rid_of(r), label, h.index, h.has_state, mh->slot, mh->has_state);
            CHECK(t, h.index >= 0 && (uint32_t)h.index < max, "%s: slot %d out of range", what,
                  h.index);
            CHECK(t, held_by[h.index]++ == 0, "%s: slot %d held twice", what, h.index);
            per_label[li]++;
            CHECK(t, rsp__core_slot_state(t->core, (uint32_t)h.index) == RSP__SLOT_HELD,
                  "%s: slot %d held but not in state held", what, h.index);
            uint64_t last = t->last_gen[r][label];
            if (mh->gen_moved)
                CHECK(t, h.generation > last,
                      "%s: (rid %u, label %u) generation %llu did not move from %llu", what,
                      rid_of(r), label, (unsigned long long)h.generation, (unsigned long long)last);
            else
                CHECK(t, h.generation == last,
                      "%s: (rid %u, label %u) generation moved %llu -> %llu", what, rid_of(r),
                      label, (unsigned long long)last, (unsigned long long)h.generation);
            CHECK(t, h.generation <= st.generation, "%s: generation %llu above the counter %llu",
                  what, (unsigned long long)h.generation, (unsigned long long)st.generation);
            t->last_gen[r][label] = h.generation;
        }
    }
    rspm_clear_gen_moved(&t->m);
    CHECK(t, st.num_requests == rspm_num_requests(m), "%s: %u requests, model %u", what,
          st.num_requests, rspm_num_requests(m));
    CHECK(t, st.num_holdings == rspm_num_holdings(m), "%s: %u holdings, model %u", what,
          st.num_holdings, rspm_num_holdings(m));
    /* The metrics' holdings per label: the core's counts are the walk's. */
    const uint32_t *by_label = rsp__core_label_holdings(t->core);
    for (uint32_t li = 0; li < NUM_LABELS; li++)
        CHECK(t, by_label[t->labels[li]] == per_label[li], "%s: label %u: %u holdings, walk %u",
              what, t->labels[li], by_label[t->labels[li]], per_label[li]);

    /* Bytes: free slots zero; held slots exactly what the model says. */
    for (uint32_t s = 0; s < max; s++) {
        const rspm_slot *ms = &m->slot[s];
        if (ms->state == RSPM_FREE) {
            CHECK(t, rsp_test_store_slot_is_zero(t->store, s), "%s: free slot %u is not zero", what,
                  s);
        } else if (ms->state == RSPM_HELD && ms->content != RSPM_UNKNOWN) {
            uint64_t want = expected_checksum(t, ms->content);
            CHECK(t, rsp_test_store_checksum(t->store, s) == want,
                  "%s: held slot %u does not hold %s (content tag %llx)", what, s,
                  ms->content ? "its expected pattern" : "zeros", (unsigned long long)ms->content);
        }
    }
    /* has_state false reads zeros unless written since (the model's tag). */
    for (uint32_t r = 0; r < NUM_RIDS; r++)
        for (uint32_t i = 0; i < m->req[r].num_holdings && m->req[r].exists; i++) {
            const rspm_holding *h = &m->req[r].h[i];
            const rspm_slot *ms = &m->slot[h->slot];
            if (!h->has_state && !ms->zero_pending && !ms->written)
                CHECK(t, rsp_test_store_slot_is_zero(t->store, (uint32_t)h->slot),
                      "%s: (rid %u, label %u) slot %d has_state false, nothing wrote it, but "
                      "it is not zero",
                      what, rid_of(r), h->label, h->slot);
        }
}

/* ------------------------------------------------------------------------ */
/* Declarations                                                              */
/* ------------------------------------------------------------------------ */

static uint32_t pick_label(T *t)
{
    uint32_t x = below(t, 10);
    return t->labels[x < 6 ? 0 : x < 8 ? 1 : 2];
}

/* A steady step: the rows and lease of the last admitted declaration
 * again, not a capture, half the time without forks (the same-declaration
 * path), else with the same forks (their groups dropped: the resolved
 * forks of a steady fork step). */
static bool gen_steady(T *t, dstep *s)
{
    if (!t->have_prev || below(t, 100) >= 45)
        return false;
    *s = t->prev;
    s->d.step_id = t->next_id++;
    s->d.capture = false;
    if (below(t, 2))
        s->d.num_pre = s->d.num_post = 0;
    for (uint32_t i = 0; i < s->d.num_pre; i++)
        s->d.pre[i].group = 0;
    for (uint32_t i = 0; i < s->d.num_post; i++)
        s->d.post[i].group = 0;
    for (uint32_t i = 0; i < s->d.num_rows; i++)
        s->d.rows[i].skip_post_forks = false;
    s->phase = PH_NONE;
    s->forward_ran = false;
    s->stage_valid = false;
    s->nbuf = 0;
    t->count_steady++;
    return true;
}

/* A checkpoint key: mostly one that is stored (a restore of a missing
 * key is RSP_ENOKEY), else any. */
static uint64_t pick_key(T *t)
{
    uint64_t k = 1 + below(t, RSPM_MAX_KEYS - 1);
    for (uint32_t i = 0; i < RSPM_MAX_KEYS && below(t, 100) < 85 && !t->m.ck[k].present; i++)
        k = 1 + k % (RSPM_MAX_KEYS - 1);
    return k;
}

/* Restores and takes on rows with span > 0 (one per row: such rows name
 * distinct (rid, label)), takes under distinct keys. */
static void gen_ck_decls(T *t, rspm_decl *d)
{
    for (uint32_t i = 0; i < d->num_rows; i++) {
        const rspm_row *r = &d->rows[i];
        uint32_t x = below(t, 100);
        if (r->padding || r->span <= 0)
            continue;
        if (x < 30 && d->num_restores < RSPM_MAX_CK_DECLS) {
            d->restores[d->num_restores++] =
                (rspm_ckdecl){.ridx = r->ridx, .label = r->label, .key = pick_key(t)};
        } else if (x < 55 && d->num_takes < RSPM_MAX_CK_DECLS) {
            uint64_t k = 1 + below(t, RSPM_MAX_KEYS - 1);
            bool dup = false;
            for (uint32_t j = 0; j < d->num_takes; j++)
                dup |= d->takes[j].key == k;
            if (!dup)
                d->takes[d->num_takes++] = (rspm_ckdecl){
                    .ridx = r->ridx, .label = r->label, .key = k, .tier = below(t, 2)};
        }
    }
}

static void gen_decl(T *t, dstep *s)
{
    if (gen_steady(t, s))
        return;
    memset(s, 0, sizeof *s);
    rspm_decl *d = &s->d;
    d->step_id = t->next_id++;
    d->capture = below(t, 100) < 3;
    s->has_lease = below(t, 100) < 12;
    if (s->has_lease) {
        s->lease.bucket_bs = below(t, 2) ? 8 : 4;
        s->lease.bucket_id = below(t, 2);
        s->lease.lease_slot = below(t, 2);
    }
    uint32_t nrows = 1 + below(t, 6);
    if (below(t, 10) == 0)
        nrows += below(t, 4);
    if (s->has_lease && nrows > s->lease.bucket_bs)
        nrows = s->lease.bucket_bs;
    bool overflow = s->has_lease && below(t, 100) < 8;
    if (overflow)
        nrows = s->lease.bucket_bs + 1 + below(t, 2);
    if (nrows > RSPM_MAX_ROWS)
        nrows = RSPM_MAX_ROWS;
    d->num_rows = nrows;
    for (uint32_t i = 0; i < nrows; i++) {
        rspm_row *r = &d->rows[i];
        r->ridx = below(t, NUM_RIDS);
        r->label = overflow ? t->labels[0] : pick_label(t);
        r->padding = below(t, 100) < 10;
        uint32_t x = below(t, 100);
        r->span = x < 15 ? 0 : x < 18 ? -1 : (int32_t)(1 + below(t, 16));
        /* Keep the step valid: one row with span > 0 per (rid, label). */
        for (uint32_t j = 0; j < i && r->span > 0; j++)
            if (d->rows[j].span > 0 && d->rows[j].ridx == r->ridx && d->rows[j].label == r->label)
                r->span = 0;
    }
    if (below(t, 100) < 30) {
        d->num_pre = below(t, 3);
        d->num_post = below(t, 3);
        if (d->num_pre + d->num_post == 0)
            d->num_pre = 1;
        for (uint32_t i = 0; i < d->num_pre; i++)
            d->pre[i] = (rsp_fork){pick_label(t), pick_label(t), 0};
        for (uint32_t i = 0; i < d->num_post; i++)
            d->post[i] = (rsp_fork){pick_label(t), pick_label(t), 0};
        /* Per-rid forks: a group per rid (0 or 1), forks of group 0, 1 or
         * 2 (no rid has 2); a rejected draft at commit. */
        if (below(t, 100) < 40) {
            uint16_t group_of[NUM_RIDS];
            for (uint32_t r = 0; r < NUM_RIDS; r++)
                group_of[r] = (uint16_t)below(t, 2);
            for (uint32_t i = 0; i < nrows; i++)
                d->rows[i].fork_group = group_of[d->rows[i].ridx];
            for (uint32_t i = 0; i < d->num_pre; i++)
                d->pre[i].group = below(t, 3);
            for (uint32_t i = 0; i < d->num_post; i++)
                d->post[i].group = below(t, 3);
        }
        for (uint32_t i = 0; i < nrows; i++)
            d->rows[i].skip_post_forks = below(t, 100) < 15;
    }
    /* Per-token states on some rows of a verify step (docs/semantics.md 9.3). */
    bool verify = below(t, 100) < 25;
    for (uint32_t i = 0; i < nrows && verify; i++) {
        rspm_row *r = &d->rows[i];
        if (r->padding || r->span <= 0 || below(t, 2))
            continue;
        r->per_token = true;
        r->span = 1 + (int32_t)below(t, RSPM_SPEC_MAX);
    }
    if (!d->capture && below(t, 100) < 30)
        gen_ck_decls(t, d);
    s->phase = PH_NONE;
}

/* ------------------------------------------------------------------------ */
/* Plans                                                                     */
/* ------------------------------------------------------------------------ */

/* Rows of the label with the most rows (leased buffer capacity check). */
static uint32_t lease_expected(T *t, const dstep *s, uint32_t label, uint32_t rows, bool *overflow)
{
    lease_len *ll = &t->lease[s->lease.bucket_id][s->lease.lease_slot][label];
    *overflow = false;
    if (ll->known) {
        *overflow = rows > ll->length;
        return ll->length;
    }
    uint32_t len = t->graph_max;
    if (s->lease.bucket_bs > len)
        len = s->lease.bucket_bs;
    if (rows > len)
        len = rows;
    return len;
}

/* 1 + the largest per-token span of a label's rows; a capture's rows
 * count only under a lease (they fix the key's tensor width). */
static uint32_t asked_width(const dstep *s, const rspm_label_plan *wl)
{
    uint32_t w = 1;
    for (uint32_t i = 0; i < wl->num_rows && (!s->d.capture || s->has_lease); i++) {
        const rspm_row *r = &s->d.rows[wl->row_of[i]];
        if (r->per_token && !r->padding && r->span > 0 && 1u + (uint32_t)r->span > w)
            w = 1u + (uint32_t)r->span;
    }
    return w;
}

/* Under a lease, the tensor buffer holds the host tensor and never moves. */
static void check_spec_buffer(T *t, const rsp__label_plan *lp, const char *what)
{
    CHECK(t, lp->spec_width > 1 && lp->spec_buffer != UINT32_MAX,
          "%s: leased label %u has no index tensor buffer", what, lp->label);
    const int32_t *dev = rsp_test_store_buffer_slots(t->store, lp->spec_buffer);
    size_t n = (size_t)lp->length * lp->spec_width;
    CHECK(t,
          rsp_test_store_buffer_capacity(t->store, lp->spec_buffer) >= n &&
              memcmp(dev, lp->spec_indices, n * sizeof *dev) == 0,
          "%s: tensor buffer %u does not hold label %u's index tensor", what, lp->spec_buffer,
          lp->label);
    CHECK(t, rsp_test_store_buffer_moves(t->store, lp->spec_buffer) == 0,
          "%s: tensor buffer %u moved", what, lp->spec_buffer);
}

/* The per-token index tensor of one label: column 0 the vector, then the
 * model's output slots of each per-token row, the pad index elsewhere;
 * width 1 + the largest per-token span, under a lease the key's width
 * fixed by its first per-token plan (with its own buffer). */
static void check_spec_indices(T *t, const dstep *s, const rsp__label_plan *lp,
                               const rspm_label_plan *wl, const char *what)
{
    uint32_t w = asked_width(s, wl);
    if (s->has_lease) {
        lease_len *ll = &t->lease[s->lease.bucket_id][s->lease.lease_slot][lp->label];
        if (!ll->width && w > 1)
            ll->width = w;
        w = ll->width ? ll->width : 1;
        if (w > 1)
            check_spec_buffer(t, lp, what);
    }
    CHECK(t, lp->spec_width == w, "%s: label %u spec width %u, model %u", what, lp->label,
          lp->spec_width, w);
    for (uint32_t i = 0; i < lp->length && lp->spec_width == w; i++) {
        const int32_t *e = lp->spec_indices + (size_t)i * w;
        CHECK(t, e[0] == lp->slot_indices[i], "%s: label %u spec row %u column 0 is %d, not %d",
              what, lp->label, i, e[0], lp->slot_indices[i]);
        for (uint32_t k = 1; k < w; k++) {
            int32_t o = i < lp->num_rows && !s->d.capture
                            ? rspm_spec_out(&t->m, s->d.step_id, wl->row_of[i], k)
                            : -1;
            CHECK(t, e[k] == (o < 0 ? t->m.pad : o),
                  "%s: label %u spec row %u column %u is %d, model %d", what, lp->label, i, k, e[k],
                  o < 0 ? t->m.pad : o);
        }
    }
}

static void check_plan(T *t, dstep *s, bool staged, const rsp__plan_out *out, const rspm_plan *want,
                       const char *what)
{
    int32_t pad = t->m.pad;
    CHECK(t, out->step_id == s->d.step_id && out->staged == staged,
          "%s: plan step %llu staged %d, want %llu %d", what, (unsigned long long)out->step_id,
          out->staged, (unsigned long long)s->d.step_id, staged);
    CHECK(t, out->num_labels == want->num_labels, "%s: %u labels planned, model %u", what,
          out->num_labels, want->num_labels);
    uint32_t used[RSPM_MAX_SLOTS] = {0};
    for (uint32_t j = 0; j < want->num_labels; j++) {
        const rsp__label_plan *lp = &out->labels[j];
        const rspm_label_plan *wl = &want->labels[j];
        CHECK(t, lp->label == wl->label, "%s: label #%u is %u, model %u", what, j, lp->label,
              wl->label);
        CHECK(t, lp->num_rows == wl->num_rows, "%s: label %u has %u rows, model %u", what,
              lp->label, lp->num_rows, wl->num_rows);
        CHECK(t, lp->length >= lp->num_rows, "%s: label %u length %u < rows %u", what, lp->label,
              lp->length, lp->num_rows);
        if (s->has_lease) {
            bool over;
            uint32_t len = lease_expected(t, s, lp->label, lp->num_rows, &over);
            CHECK(t, !over, "%s: leased plan with %u rows > buffer %u accepted", what, lp->num_rows,
                  len);
            CHECK(t, lp->length == len, "%s: leased label %u length %u, want %u", what, lp->label,
                  lp->length, len);
            lease_len *ll = &t->lease[s->lease.bucket_id][s->lease.lease_slot][lp->label];
            ll->known = true;
            ll->length = len;
        }
        for (uint32_t i = 0; i < lp->length; i++) {
            int32_t slot = lp->slot_indices[i];
            bool hs = lp->has_state[i];
            if (i < lp->num_rows) {
                CHECK(t, slot == wl->slot[i] && hs == wl->has_state[i],
                      "%s: label %u row %u (rid %u) -> slot %d has_state %d, model slot %d "
                      "has_state %d",
                      what, lp->label, i, rid_of(s->d.rows[wl->row_of[i]].ridx), slot, hs,
                      wl->slot[i], wl->has_state[i]);
            } else {
                CHECK(t, slot == pad && !hs, "%s: label %u tail entry %u is slot %d has_state %d",
                      what, lp->label, i, slot, hs);
            }
            if (slot != pad) {
                CHECK(t, slot >= 0 && (uint32_t)slot < t->cfg.max_slots, "%s: slot %d out of range",
                      what, slot);
                CHECK(t, used[slot]++ == 0, "%s: slot %d addressed twice in one plan", what, slot);
            }
        }
        /* What the device buffer holds after the upload equals the host copy. */
        CHECK(t, rsp_test_store_buffer_capacity(t->store, lp->buffer) >= lp->length,
              "%s: buffer %u capacity %u < length %u", what, lp->buffer,
              rsp_test_store_buffer_capacity(t->store, lp->buffer), lp->length);
        const int32_t *dev = rsp_test_store_buffer_slots(t->store, lp->buffer);
        const bool *dhs = rsp_test_store_buffer_has_state(t->store, lp->buffer);
        CHECK(t,
              memcmp(dev, lp->slot_indices, lp->length * sizeof *dev) == 0 &&
                  memcmp(dhs, lp->has_state, lp->length * sizeof *dhs) == 0,
              "%s: buffer %u does not hold label %u's addressing", what, lp->buffer, lp->label);
        if (s->has_lease)
            CHECK(t, rsp_test_store_buffer_moves(t->store, lp->buffer) == 0,
                  "%s: leased buffer %u moved", what, lp->buffer);
        check_spec_indices(t, s, lp, wl, what);
        /* Row generations of a live plan are the holdings' generations. */
        if (!staged)
            for (uint32_t i = 0; i < lp->num_rows; i++) {
                if (wl->slot[i] == pad)
                    continue;
                rsp_holding h;
                const rspm_row *row = &s->d.rows[wl->row_of[i]];
                CHECK(t,
                      rsp__core_holding(t->core, rid_of(row->ridx), row->label, &h, NULL) == RSP_OK,
                      "%s: planned row without holding", what);
                CHECK(t, lp->generations[i] == h.generation,
                      "%s: label %u row %u generation %llu, holding has %llu", what, lp->label, i,
                      (unsigned long long)lp->generations[i], (unsigned long long)h.generation);
            }
    }
    s->nbuf = out->num_labels;
    for (uint32_t j = 0; j < out->num_labels; j++) {
        const rsp__label_plan *lp = &out->labels[j];
        CHECK(t, lp->length <= RSPM_MAX_ROWS, "%s: length %u", what, lp->length);
        s->buf[j].id = lp->buffer;
        s->buf[j].length = lp->length;
        memcpy(s->buf[j].slot, lp->slot_indices, lp->length * sizeof(int32_t));
        memcpy(s->buf[j].hs, lp->has_state, lp->length * sizeof(bool));
    }
    if (!staged) {
        s->num_labels = want->num_labels;
        for (uint32_t j = 0; j < want->num_labels; j++) {
            s->label[j] = want->labels[j].label;
            s->num_rows[j] = want->labels[j].num_rows;
            memcpy(s->slot[j], want->labels[j].slot, sizeof s->slot[j]);
            memcpy(s->row_of[j], want->labels[j].row_of, sizeof s->row_of[j]);
        }
    }
}

/* A plan never overwrites the buffers another in-flight step reads
 * (docs/semantics.md 4.4: "do not overwrite the buffer a still-running step
 * reads"; 4.3: staged and live plans are separate). */
static void check_buffers_kept(T *t, const dstep *except, const char *what)
{
    for (uint32_t k = 0; k < t->nq; k++) {
        const dstep *s = &t->q[k];
        if (s == except || (s->phase != PH_PLANNED && s->phase != PH_STAGED))
            continue;
        for (uint32_t j = 0; j < s->nbuf; j++) {
            const int32_t *dev = rsp_test_store_buffer_slots(t->store, s->buf[j].id);
            const bool *dhs = rsp_test_store_buffer_has_state(t->store, s->buf[j].id);
            CHECK(t,
                  dev && memcmp(dev, s->buf[j].slot, s->buf[j].length * sizeof *dev) == 0 &&
                      memcmp(dhs, s->buf[j].hs, s->buf[j].length * sizeof *dhs) == 0,
                  "%s: buffer %u of in-flight step %llu (%s) was overwritten", what, s->buf[j].id,
                  (unsigned long long)s->d.step_id, s->phase == PH_STAGED ? "staged" : "live");
        }
    }
}

static dstep *find_step(T *t, uint64_t id)
{
    for (uint32_t k = 0; k < t->nq; k++)
        if (t->q[k].d.step_id == id)
            return &t->q[k];
    return NULL;
}

/* Step `id` no longer holds any leased buffer (it ended, or its stage went). */
static void lease_release(T *t, uint64_t id)
{
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t l = 0; l < 2; l++)
            for (uint32_t k = 0; k < RSPM_MAX_LABELS; k++)
                if (t->lease[b][l][k].holder == id)
                    t->lease[b][l][k].holder = 0;
}

/* Would planning s share a leased buffer with another in-flight step's plan?
 * A live plan takes a key from another step's stage (*drop: that stage goes);
 * any other sharing is refused (returns true). */
static bool lease_conflict(T *t, const dstep *s, bool staged, const rspm_plan *want, dstep **drop)
{
    bool refuse = false;
    *drop = NULL;
    if (!s->has_lease)
        return false;
    for (uint32_t j = 0; j < want->num_labels; j++) {
        lease_len *ll = &t->lease[s->lease.bucket_id][s->lease.lease_slot][want->labels[j].label];
        if (!ll->holder || ll->holder == s->d.step_id)
            continue;
        dstep *h = find_step(t, ll->holder);
        CHECK(t, h != NULL, "test bookkeeping: lease held by finished step %llu",
              (unsigned long long)ll->holder);
        if (!staged && ll->holder_staged && h->phase == PH_STAGED)
            *drop = h;
        else
            refuse = true;
    }
    return refuse;
}

/* Would a plan of s with a lease exceed a known leased buffer? */
static bool lease_overflows(T *t, const dstep *s, const rspm_plan *want)
{
    if (!s->has_lease)
        return false;
    for (uint32_t j = 0; j < want->num_labels; j++) {
        bool over;
        lease_expected(t, s, want->labels[j].label, want->labels[j].num_rows, &over);
        const lease_len *ll =
            &t->lease[s->lease.bucket_id][s->lease.lease_slot][want->labels[j].label];
        if (over || (ll->width && asked_width(s, &want->labels[j]) > ll->width))
            return true; /* more rows than its buffer, or rows wider than its tensor */
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */
/* ------------------------------------------------------------------------ */

static void expect_err(T *t, rsp_status rc, rsp_status want, const char *what)
{
    CHECK(t, rc == want, "%s: status %d (%s), want %d (%s)", what, (int)rc, rsp_strerror(rc),
          (int)want, rsp_strerror(want));
    CHECK(t, rsp__work_empty(&t->work), "%s: error left device work behind", what);
}

static void op_ingest(T *t)
{
    uint32_t r = below(t, NUM_RIDS);
    note(t, "ingest rid %u", rid_of(r));
    CHECK(t, tw_ingest(t, rid_of(r), NULL) == RSP_OK, "ingest failed");
    rspm_ingest(&t->m, r);
    apply_work(t, "ingest");
    check_all(t, "ingest");
}

static void op_remove(T *t)
{
    uint32_t r = below(t, NUM_RIDS);
    note(t, "remove rid %u", rid_of(r));
    CHECK(t, tw_remove(t, rid_of(r), &t->work, NULL) == RSP_OK, "remove failed");
    check_work(t, "remove", W_NO_COPY | W_UNPINNED_ZERO, &t->m);
    rspm_remove(&t->m, r);
    apply_work(t, "remove");
    check_all(t, "remove");
}

static void op_release(T *t)
{
    uint32_t r = below(t, NUM_RIDS);
    uint32_t label = pick_label(t);
    note(t, "release rid %u label %u", rid_of(r), label);
    CHECK(t, tw_release(t, rid_of(r), label, &t->work, NULL) == RSP_OK, "release failed");
    check_work(t, "release", W_NO_COPY | W_UNPINNED_ZERO, &t->m);
    rspm_release(&t->m, r, label);
    apply_work(t, "release");
    check_all(t, "release");
}

static void op_reset(T *t)
{
    uint32_t r = below(t, NUM_RIDS);
    bool fr = below(t, 2);
    note(t, "reset rid %u free=%d", rid_of(r), fr);
    CHECK(t, tw_reset(t, rid_of(r), fr, &t->work, NULL) == RSP_OK, "reset failed");
    check_work(t, "reset", W_NO_COPY | W_UNPINNED_ZERO, &t->m);
    rspm_reset(&t->m, r, fr);
    apply_work(t, "reset");
    check_all(t, "reset");
}

/* Admit a fresh declaration as the newest step in flight. */
static void op_admit(T *t)
{
    dstep *s = &t->q[t->nq];
    bool retry = t->retry;
    t->retry = false;
    if (retry) {
        *s = t->retry_decl;
        t->count_retry++;
    } else {
        gen_decl(t, s);
    }
    /* Half the time, steps in flight together lease different graph slots
     * (what an engine does); otherwise they may collide, and the plan that
     * would share a leased buffer must be refused or take it from a stage. */
    bool spread = !retry && below(t, 2);
    for (uint32_t tries = 0; spread && s->has_lease && tries < 4; tries++) {
        bool clash = false;
        for (uint32_t k = 0; k < t->nq; k++)
            clash |= t->q[k].has_lease && t->q[k].lease.bucket_id == s->lease.bucket_id &&
                     t->q[k].lease.lease_slot == s->lease.lease_slot;
        if (!clash)
            break;
        s->lease.lease_slot ^= 1u;
        if (tries == 1)
            s->lease.bucket_id ^= 1u;
    }
    bool preplan = below(t, 2);
    STEP_VARS(t, s, preplan);
    {
        char rb[120];
        size_t o = 0;
        for (uint32_t i = 0; i < s->d.num_rows && o < sizeof rb - 16; i++)
            o += (size_t)snprintf(rb + o, sizeof rb - o, " %u/%u/%d%s",
                                  rid_of(s->d.rows[i].ridx) % 100, s->d.rows[i].label,
                                  s->d.rows[i].span, s->d.rows[i].padding ? "p" : "");
        note(t, "admit step %llu%s forks %u/%u capture %d lease %d rows%s",
             (unsigned long long)s->d.step_id, retry ? " (retry)" : "", s->d.num_pre, s->d.num_post,
             s->d.capture, s->has_lease, rb);
    }
    rsp_admit_outcome out;
    memset(&out, 0, sizeof out);
    bool keys = rspm_ck_restores_present(&t->m, &s->d);
    bool swapped = rspm_swapped_row(&t->m, &s->d);
    rsp_status rc = tw_admit(t, &st_, &out, &t->work, NULL);
    if (swapped) {
        /* A row names a swapped-out rid: refused, nothing changed. */
        expect_err(t, rc, RSP_EORDER, "admit naming a swapped rid");
        t->count_swap_refused++;
        s->phase = PH_NONE;
        check_all(t, "admit (swapped rid)");
        return;
    }
    if (rspm_admit_blocker(&t->m, &s->d)) {
        /* A row names another in-flight step's post-fork target: refused
         * until that step's commit, nothing changed. */
        expect_err(t, rc, RSP_EORDER, "admit naming a post-fork target in flight");
        t->count_post_refused++;
        s->phase = PH_NONE;
        check_all(t, "admit (post-fork target)");
        return;
    }
    if (!keys) {
        /* A restore of a key not stored: refused, nothing changed. */
        expect_err(t, rc, RSP_ENOKEY, "admit restoring a missing key");
        t->count_ck_enokey++;
        s->phase = PH_NONE;
        check_all(t, "admit (missing key)");
        return;
    }
    CHECK(t, rc == RSP_OK, "admit step %llu: status %d", (unsigned long long)s->d.step_id, (int)rc);
    check_work(t, "admit", W_NO_ZERO | W_NO_COPY, &t->m);
    rspm_admit want = rspm_admit_step(&t->m, &s->d);
    apply_work(t, "admit");
    CHECK(t, out.ok == want.ok, "admit step %llu: ok=%d, model ok=%d",
          (unsigned long long)s->d.step_id, out.ok, want.ok);
    if (!want.ok) {
        t->count_admit_full++;
        CHECK(t, out.rid == rid_of(want.ridx) && out.label == want.label,
              "admit failure names (rid %llu, label %u), model (rid %u, label %u)",
              (unsigned long long)out.rid, out.label, rid_of(want.ridx), want.label);
        CHECK(t,
              out.slots_short == want.slots_short && out.free == want.free &&
                  out.usable == t->cfg.max_slots - (t->cfg.sink ? 1u : 0u),
              "admit failure short/free/usable %u/%u/%u, model %u/%u/%u", out.slots_short, out.free,
              out.usable, want.slots_short, want.free, t->cfg.max_slots - (t->cfg.sink ? 1u : 0u));
        /* A refused admit leaves the pool exactly as before: no implicit
         * ingest either (the full check below compares requests). */
        check_all(t, "admit (full)");
        /* The caller still calls rollback: a no-op. */
        if (below(t, 2)) {
            note(t, "rollback refused step %llu", (unsigned long long)s->d.step_id);
            CHECK(t, tw_rollback(t, s->d.step_id, NULL, &t->work, NULL, NULL) == RSP_OK,
                  "rollback of a refused step failed");
            apply_work(t, "rollback refused");
            check_all(t, "rollback refused");
        }
        s->phase = PH_NONE;
        /* The retry path: the same declaration, same id, next time. */
        if (below(t, 4) == 0) {
            t->retry = true;
            t->retry_decl = *s;
        }
        /* Like a scheduler, often preempt someone to make room. */
        if (below(t, 10) < 6) {
            uint32_t r = below(t, NUM_RIDS);
            for (uint32_t k = 0; k < NUM_RIDS && t->m.req[r].num_holdings == 0; k++)
                r = (r + 1) % NUM_RIDS;
            bool rm = below(t, 2);
            note(t, "preempt: %s rid %u", rm ? "remove" : "reset(free) of", rid_of(r));
            CHECK(t,
                  (rm ? tw_remove(t, rid_of(r), &t->work, NULL)
                      : tw_reset(t, rid_of(r), true, &t->work, NULL)) == RSP_OK,
                  "preempt failed");
            check_work(t, "preempt", W_NO_COPY | W_UNPINNED_ZERO, &t->m);
            if (rm)
                rspm_remove(&t->m, r);
            else
                rspm_reset(&t->m, r, true);
            apply_work(t, "preempt");
            check_all(t, "preempt");
        }
        return;
    }
    t->count_admit_ok++;
    t->have_prev = true;
    t->prev = *s;
    t->nq++;
    t->last_admitted_id = s->d.step_id;
    s->phase = PH_ADMITTED;
    s->admitted_rows = s->d.num_rows;
    check_all(t, "admit");
    if (below(t, 20) == 0) {
        /* Admitting the same step again allocates nothing new. */
        note(t, "admit step %llu again", (unsigned long long)s->d.step_id);
        rc = tw_admit(t, &st_, &out, &t->work, NULL);
        CHECK(t, rc == RSP_OK && out.ok, "second admit: status %d ok %d", (int)rc, out.ok);
        rspm_admit_step(&t->m, &s->d);
        apply_work(t, "admit again");
        check_all(t, "admit again");
    }
}

static void op_plan(T *t, dstep *s, bool staged)
{
    bool promoting = !staged && s->phase == PH_STAGED;
    if (!staged && s->phase == PH_STAGED && s->d.num_rows > 1 && !s->d.num_restores &&
        !s->d.num_takes && below(t, 12) == 0) {
        s->stage_valid = false;
        /* The declaration changed since the stage: the stage must be
         * dropped and a live plan built (dropping a row keeps what admit
         * reserved a superset of what is addressed). */
        s->d.num_rows--;
        note(t, "(declaration of step %llu loses its last row)", (unsigned long long)s->d.step_id);
    }
    STEP_VARS(t, s, staged);
    note(t, "%s step %llu",
         staged                  ? "stage"
         : s->phase == PH_STAGED ? "promote"
                                 : "plan",
         (unsigned long long)s->d.step_id);
    rspm_plan want;
    rspm copy = t->m;
    rspm_plan_step(&copy, &s->d, staged, &want);
    rsp__plan_out out;
    memset(&out, 0, sizeof out);
    rsp_status rc = tw_plan(t, &st_, &out, &t->work, NULL);
    dstep *drop = NULL;
    bool shared = lease_conflict(t, s, staged, &want, &drop);
    if (lease_overflows(t, s, &want) || shared) {
        expect_err(t, rc, RSP_ECAPACITY,
                   shared ? "plan sharing a leased buffer" : "plan over a leased buffer");
        t->count_lease_refused++;
        check_all(t, "plan (refused)");
        return;
    }
    uint64_t blocker = staged ? 0 : rspm_plan_blocker(&t->m, &s->d);
    if (blocker) {
        /* Its forks would touch a slot of a planned, uncommitted step (or
         * its rows a slot that step's post-forks touch): refused. */
        expect_err(t, rc, RSP_EORDER, "plan against a planned step's slots");
        t->count_pipeline_refused++;
        check_all(t, "plan (refused: commit the earlier step first)");
        return;
    }
    CHECK(t, rc == RSP_OK, "plan step %llu: status %d (%s)", (unsigned long long)s->d.step_id,
          (int)rc, rsp_strerror(rc));
    check_work(t, staged ? "stage" : "plan", staged ? W_NO_ZERO | W_NO_COPY : 0u, &t->m);
    t->m = copy;
    if (drop) {
        /* Its stage lost a leased buffer to this live plan: it is gone. */
        note(t, "(stage of step %llu dropped: its leased buffer went live)",
             (unsigned long long)drop->d.step_id);
        drop->phase = PH_ADMITTED;
        drop->stage_valid = false;
        drop->nbuf = 0;
        lease_release(t, drop->d.step_id);
        t->count_lease_taken++;
    }
    lease_release(t, s->d.step_id);
    for (uint32_t j = 0; s->has_lease && j < want.num_labels; j++) {
        lease_len *ll = &t->lease[s->lease.bucket_id][s->lease.lease_slot][want.labels[j].label];
        ll->holder = s->d.step_id;
        ll->holder_staged = staged;
    }
    apply_work(t, staged ? "stage" : "plan");
    if (promoting) {
        bool same = s->stage_valid && s->stage.num_labels == want.num_labels;
        for (uint32_t j = 0; same && j < want.num_labels; j++) {
            const rspm_label_plan *x = &s->stage.labels[j], *y = &want.labels[j];
            same = x->label == y->label && x->num_rows == y->num_rows &&
                   memcmp(x->slot, y->slot, x->num_rows * sizeof x->slot[0]) == 0 &&
                   memcmp(x->has_state, y->has_state, x->num_rows * sizeof x->has_state[0]) == 0;
        }
        CHECK(t, out.promoted == same,
              "promote step %llu: promoted=%d, but the stage %s the fresh live plan",
              (unsigned long long)s->d.step_id, out.promoted, same ? "equals" : "differs from");
        t->count_promoted += out.promoted;
    } else {
        CHECK(t, !out.promoted, "%s step %llu: promoted without a stage", staged ? "stage" : "plan",
              (unsigned long long)s->d.step_id);
    }
    if (staged) {
        s->stage = want;
        s->stage_valid = true;
    }
    if (staged)
        t->count_stage++;
    check_plan(t, s, staged, &out, &want, staged ? "stage" : "plan");
    t->count_ck_restores += rsp__core_ckpt_report(t->core)->restored;
    if (!staged && s != &t->q[0])
        t->count_two_live++;
    s->phase = staged ? PH_STAGED : PH_PLANNED;
    s->forward_ran = false;
    check_buffers_kept(t, s, staged ? "stage" : "plan");
    check_all(t, staged ? "stage" : "plan");
}

/* The backend's forward: write every planned row's slot in place. Padding
 * rows write the sink (a real kernel does), nothing at all without one. */
static void op_forward(T *t, dstep *s)
{
    note(t, "forward step %llu", (unsigned long long)s->d.step_id);
    for (uint32_t j = 0; j < s->num_labels; j++)
        for (uint32_t i = 0; i < s->num_rows[j]; i++) {
            int32_t slot = s->slot[j][i];
            if (slot < 0)
                continue;
            const rspm_row *row = &s->d.rows[s->row_of[j][i]];
            uint64_t seed = pattern_seed(row->ridx, row->label, s->d.step_id);
            if (row->per_token && !s->d.capture) {
                /* A verify kernel: the state after token k into output k. */
                for (uint32_t k = 1; k <= (uint32_t)row->span; k++) {
                    int32_t o = rspm_spec_out(&t->m, s->d.step_id, s->row_of[j][i], k);
                    rsp_test_store_fill_pattern(t->store, (uint32_t)o, seed + 7919 * k);
                    rspm_forward_write(&t->m, o, seed + 7919 * k);
                }
                t->count_spec_forwards++;
                continue;
            }
            rsp_test_store_fill_pattern(t->store, (uint32_t)slot, seed);
            rspm_forward_write(&t->m, slot, seed);
        }
    s->forward_ran = true;
    check_all(t, "forward");
}

static void step_done(T *t, dstep *s)
{
    lease_release(t, s->d.step_id);
    uint32_t i = (uint32_t)(s - t->q);
    memmove(&t->q[i], &t->q[i + 1], (t->nq - i - 1) * sizeof t->q[0]);
    t->nq--;
    t->q[t->nq].phase = PH_NONE;
}

/* A commit that names other rows or forks than its admit: RSP_EINVAL
 * naming the difference, nothing changed (docs/semantics.md 9.2). */
static void commit_mismatch(T *t, dstep *s)
{
    dstep bad = *s;
    uint32_t how = below(t, 4);
    if (how == 0 && bad.d.num_rows > 1) {
        bad.d.num_rows--;
    } else if (how == 1 && bad.d.num_rows) {
        bad.d.rows[below(t, bad.d.num_rows)].span += 1;
    } else if (how == 2 && bad.d.num_rows) {
        rspm_row *r = &bad.d.rows[below(t, bad.d.num_rows)];
        r->ridx = (r->ridx + 1) % NUM_RIDS;
    } else if (bad.d.num_post < RSPM_MAX_FORKS) {
        bad.d.post[bad.d.num_post++] = (rsp_fork){.from = 0, .to = 1};
    } else {
        return;
    }
    STEP_VARS(t, &bad, false);
    note(t, "commit step %llu with another declaration (%u)", (unsigned long long)s->d.step_id,
         how);
    rsp_error err = {0};
    rsp_status rc = tw_commit(t, &st_, NULL, &t->work, NULL, &err);
    /* The changed declaration may be invalid in itself (a duplicate row,
     * a fork of an unknown label): validation answers first. */
    CHECK(t, rc == RSP_EINVAL || rc == RSP_EDUPROW || rc == RSP_ENOLABEL,
          "commit of another declaration: status %d (%s)", (int)rc, err.message);
    CHECK(t, rsp__work_empty(&t->work), "commit of another declaration left work behind");
    /* Counted when the check of the admitted declaration answered (not
     * the validation of the changed one). */
    t->count_commit_mismatch += rc == RSP_EINVAL && strstr(err.message, "its admit") != NULL;
    check_all(t, "commit (mismatch)");
}

static void op_commit(T *t, dstep *s)
{
    s->d.num_rows = s->admitted_rows;
    for (uint32_t i = 0; i < s->d.num_rows; i++)
        if (s->d.rows[i].per_token) {
            s->d.rows[i].accepted = (uint16_t)below(t, (uint32_t)s->d.rows[i].span + 1);
            t->count_accepts += s->d.rows[i].accepted > 0;
        }
    if (below(t, 16) == 0)
        commit_mismatch(t, s);
    STEP_VARS(t, s, false);
    rsp_event ev = {.handle = NULL, .value = s->d.step_id};
    note(t, "commit step %llu (forward %s)", (unsigned long long)s->d.step_id,
         s->forward_ran ? "ran" : "did not run");
    rsp_error err = {0};
    rsp_status rc = tw_commit(t, &st_, s->forward_ran ? &ev : NULL, &t->work, NULL, &err);
    CHECK(t, rc == RSP_OK, "commit step %llu: status %d (%s): %s", (unsigned long long)s->d.step_id,
          (int)rc, rsp_strerror(rc), err.message);
    check_work(t, "commit", s->forward_ran ? W_WAIT_FIRST : 0u, &t->m);
    rspm_commit(&t->m, &s->d);
    t->last_committed_id = s->d.step_id;
    const rsp__ckpt_report *r = rsp__core_ckpt_report(t->core);
    if (s->d.num_takes) {
        CHECK(t, r->num_skips == t->m.num_skips && r->num_evictions == t->m.evictions,
              "commit step %llu: %u takes skipped, %u evictions; model %u, %u",
              (unsigned long long)s->d.step_id, r->num_skips, r->num_evictions, t->m.num_skips,
              t->m.evictions);
        for (uint32_t i = 0; i < r->num_skips; i++)
            CHECK(t, r->skips[i].key == t->m.skip_key[i] && r->skips[i].status == t->m.skip_st[i],
                  "commit step %llu: skip %u is key %llu status %d, model key %llu status %d",
                  (unsigned long long)s->d.step_id, i, (unsigned long long)r->skips[i].key,
                  (int)r->skips[i].status, (unsigned long long)t->m.skip_key[i],
                  (int)t->m.skip_st[i]);
    }
    t->count_ck_takes += r->taken;
    for (uint32_t i = 0; i < r->num_evictions; i++)
        t->count_ck_demoted += r->evictions[i].demoted;
    t->count_ck_skips += r->num_skips;
    apply_work(t, "commit");
    step_done(t, s);
    check_all(t, "commit");
}

static void op_rollback(T *t, dstep *s)
{
    rsp_event ev = {.handle = NULL, .value = s->d.step_id};
    note(t, "rollback step %llu (phase %d, forward %s)", (unsigned long long)s->d.step_id, s->phase,
         s->forward_ran && s->phase == PH_PLANNED ? "ran" : "did not run");
    bool ran = s->phase == PH_PLANNED && s->forward_ran;
    rsp_status rc = tw_rollback(t, s->d.step_id, ran ? &ev : NULL, &t->work, NULL, NULL);
    uint64_t later = rspm_rollback_blocker(&t->m, s->d.step_id);
    if (later) {
        /* Newest first: a later step in flight names a slot this one
         * writes or allocates. Refused, nothing changed, still in flight. */
        expect_err(t, rc, RSP_EORDER, "rollback behind a later step");
        t->count_rollback_refused++;
        check_all(t, "rollback (refused)");
        return;
    }
    CHECK(t, rc == RSP_OK, "rollback step %llu: status %d", (unsigned long long)s->d.step_id,
          (int)rc);
    check_work(t, "rollback", W_NO_COPY | (ran ? W_WAIT_FIRST : 0u), &t->m);
    rspm_rollback(&t->m, s->d.step_id);
    apply_work(t, "rollback");
    if (s->d.step_id == t->last_admitted_id && below(t, 10) < 3) {
        /* Retry it: a retried admit gets the same slot ids (the model
         * predicts them from the restored free stack). */
        t->retry = true;
        t->retry_decl = *s;
        t->retry_decl.phase = PH_NONE;
        t->retry_decl.forward_ran = false;
        t->retry_decl.stage_valid = false;
        t->retry_decl.nbuf = 0;
    }
    step_done(t, s);
    check_all(t, "rollback");
}

static void op_clear_preplan(T *t, dstep *s)
{
    note(t, "clear_preplan (stage of step %llu)", (unsigned long long)s->d.step_id);
    CHECK(t, tw_clear_preplan(t, NULL, NULL) == RSP_OK, "clear_preplan failed");
    s->phase = PH_ADMITTED;
    s->stage_valid = false;
    s->nbuf = 0;
    lease_release(t, s->d.step_id);
    check_all(t, "clear_preplan");
}

/* Bad input: a status, nothing changed (the full check proves it). */
static void op_invalid(T *t)
{
    uint32_t x = below(t, 10);
    dstep s;
    uint64_t saved_next = t->next_id;
    gen_decl(t, &s);
    t->next_id = saved_next; /* the id is not consumed */
    rsp_admit_outcome out;
    rsp__plan_out pout;
    switch (x) {
    case 0: {
        s.d.rows[0].label = BAD_LABEL;
        STEP_VARS(t, &s, false);
        note(t, "admit with an unknown label");
        expect_err(t, tw_admit(t, &st_, &out, &t->work, NULL), RSP_ENOLABEL, "admit unknown label");
        break;
    }
    case 1: {
        if (s.d.num_rows >= RSPM_MAX_ROWS)
            s.d.num_rows--;
        s.d.rows[s.d.num_rows] = s.d.rows[0];
        s.d.rows[s.d.num_rows].span = 3;
        s.d.rows[s.d.num_rows].padding = false;
        s.d.rows[0].span = 5;
        s.d.rows[0].padding = false;
        s.d.num_rows++;
        s.d.capture = false;
        STEP_VARS(t, &s, false);
        note(t, "admit with a duplicate row");
        expect_err(t, tw_admit(t, &st_, &out, &t->work, NULL), RSP_EDUPROW, "admit duplicate row");
        break;
    }
    case 2: {
        s.d.num_pre = 1;
        s.d.pre[0] = (rsp_fork){RSP_LABEL_MAIN, BAD_LABEL, 0};
        s.d.capture = false;
        STEP_VARS(t, &s, false);
        note(t, "admit with a fork to an unknown label");
        expect_err(t, tw_admit(t, &st_, &out, &t->work, NULL), RSP_ENOLABEL,
                   "admit fork unknown label");
        break;
    }
    case 3: {
        s.d.step_id = t->next_id + 1000; /* never admitted */
        STEP_VARS(t, &s, false);
        note(t, "plan of a step never admitted");
        expect_err(t, tw_plan(t, &st_, &pout, &t->work, NULL), RSP_EORDER, "plan not admitted");
        break;
    }
    case 4: {
        /* clear_preplan with nothing staged is safe and changes nothing. */
        for (uint32_t k = 0; k < t->nq; k++)
            if (t->q[k].phase == PH_STAGED)
                return;
        note(t, "clear_preplan with nothing staged");
        CHECK(t, tw_clear_preplan(t, NULL, NULL) == RSP_OK, "clear_preplan failed");
        break;
    }
    case 5: {
        /* A second stage while one exists: RSP_ESTAGED. */
        dstep *staged = NULL, *other = NULL;
        for (uint32_t k = 0; k < t->nq; k++) {
            if (t->q[k].phase == PH_STAGED)
                staged = &t->q[k];
            else if (t->q[k].phase == PH_ADMITTED)
                other = &t->q[k];
        }
        if (!staged || !other)
            return;
        STEP_VARS(t, other, true);
        note(t, "stage step %llu while step %llu is staged", (unsigned long long)other->d.step_id,
             (unsigned long long)staged->d.step_id);
        expect_err(t, tw_plan(t, &st_, &pout, &t->work, NULL), RSP_ESTAGED, "second stage");
        break;
    }
    case 6: {
        /* A step id that goes backwards. */
        if (t->count_admit_ok == 0)
            return;
        /* Or the id of the last committed step: never a new step again. */
        s.d.step_id = t->last_committed_id && below(t, 2) ? t->last_committed_id : 0;
        STEP_VARS(t, &s, false);
        note(t, "admit of step %llu (goes backwards or was committed)",
             (unsigned long long)s.d.step_id);
        expect_err(t, tw_admit(t, &st_, &out, &t->work, NULL), RSP_EORDER, "admit backwards");
        break;
    }
    case 8: {
        /* Another capturing runner: keeps the largest max_bs; only leased
         * buffers created later are longer, existing ones never move. */
        uint32_t bs = 2 + below(t, 9);
        note(t, "build_graph_buffers max_bs %u", bs);
        CHECK(t, tw_build_graph_buffers(t, bs, 32, &t->work, NULL) == RSP_OK,
              "build_graph_buffers failed");
        check_work(t, "build_graph_buffers", W_NO_ZERO | W_NO_COPY, &t->m);
        apply_work(t, "build_graph_buffers");
        if (bs > t->graph_max)
            t->graph_max = bs;
        break;
    }
    case 7: {
        /* More steps in flight than max_inflight_steps: RSP_ECAPACITY. */
        if (t->cfg.max_inflight != 2 || t->nq != 2)
            return;
        STEP_VARS(t, &s, false);
        note(t, "admit a third step in flight (max 2)");
        expect_err(t, tw_admit(t, &st_, &out, &t->work, NULL), RSP_ECAPACITY,
                   "admit past max_inflight_steps");
        break;
    }
    default: {
        if (t->nq > 0 && t->q[0].phase == PH_ADMITTED && !t->q[0].d.capture) {
            STEP_VARS(t, &t->q[0], false);
            note(t, "commit of step %llu, admitted but not planned",
                 (unsigned long long)t->q[0].d.step_id);
            expect_err(t, tw_commit(t, &st_, NULL, &t->work, NULL, NULL), RSP_EORDER,
                       "commit not planned");
        } else {
            /* Rollback of a step that is finished or unknown: no-op. */
            uint64_t id = t->next_id > 3 ? t->next_id - 1 - below(t, 3) : 0;
            if (rspm_step_open(&t->m, id))
                return;
            note(t, "rollback of finished or unknown step %llu", (unsigned long long)id);
            CHECK(t, tw_rollback(t, id, NULL, &t->work, NULL, NULL) == RSP_OK,
                  "rollback of finished step failed");
            apply_work(t, "rollback finished");
        }
        break;
    }
    }
    check_all(t, "bad input");
}

/* Admit an in-flight step again (docs/design.md: a re-admit allocates only
 * what is missing, e.g. after one of its requests was removed). */
static void op_readmit(T *t, dstep *s)
{
    STEP_VARS(t, s, false);
    note(t, "admit step %llu again", (unsigned long long)s->d.step_id);
    rsp_admit_outcome out;
    memset(&out, 0, sizeof out);
    bool swapped = rspm_swapped_row(&t->m, &s->d);
    rsp_status rc = tw_admit(t, &st_, &out, &t->work, NULL);
    if (swapped) {
        /* A rid of a span-0 row was swapped out since (nothing pinned it). */
        expect_err(t, rc, RSP_EORDER, "re-admit naming a swapped rid");
        check_all(t, "re-admit (swapped)");
        return;
    }
    if (rspm_admit_blocker(&t->m, &s->d)) {
        expect_err(t, rc, RSP_EORDER, "re-admit naming a post-fork target in flight");
        t->count_post_refused++;
        check_all(t, "re-admit (post-fork target)");
        return;
    }
    CHECK(t, rc == RSP_OK, "re-admit step %llu: status %d", (unsigned long long)s->d.step_id,
          (int)rc);
    check_work(t, "re-admit", W_NO_ZERO | W_NO_COPY, &t->m);
    rspm_admit want = rspm_admit_step(&t->m, &s->d);
    apply_work(t, "re-admit");
    CHECK(t, out.ok == want.ok, "re-admit step %llu: ok=%d, model ok=%d",
          (unsigned long long)s->d.step_id, out.ok, want.ok);
    if (!want.ok)
        CHECK(t,
              out.rid == rid_of(want.ridx) && out.label == want.label &&
                  out.slots_short == want.slots_short && out.free == want.free,
              "re-admit failure (rid %llu, label %u, short %u, free %u), model (rid %u, label "
              "%u, short %u, free %u)",
              (unsigned long long)out.rid, out.label, out.slots_short, out.free, rid_of(want.ridx),
              want.label, want.slots_short, want.free);
    t->count_readmit++;
    s->admitted_rows = s->d.num_rows; /* the declaration its commit must name */
    check_all(t, "re-admit");
}

/* swap_out of a random rid, or swap_in of one (a swapped one, mostly),
 * against the model. */
static void op_swap(T *t, bool out)
{
    uint32_t ridx = below(t, NUM_RIDS);
    if (!out && below(t, 10) < 9)
        for (uint32_t k = 0; k < NUM_RIDS && !t->m.req[ridx].swapped; k++)
            ridx = (ridx + 1) % NUM_RIDS;
    note(t, "swap_%s rid %u", out ? "out" : "in", rid_of(ridx));
    rsp_status rc, want;
    rspm_admit mo;
    rsp_admit_outcome o;
    memset(&o, 0, sizeof o);
    if (out) {
        rc = tw_swap_out(t, rid_of(ridx), NULL);
        want = rspm_swap_out(&t->m, ridx);
        if (rc == RSP_OK)
            CHECK(t, rsp__core_ckpt_report(t->core)->num_evictions == t->m.evictions,
                  "swap_out: %u evictions, model %u", rsp__core_ckpt_report(t->core)->num_evictions,
                  t->m.evictions);
    } else {
        rc = tw_swap_in(t, rid_of(ridx), &o, NULL);
        want = rspm_swap_in(&t->m, ridx, &mo);
        CHECK(t,
              rc != RSP_OK ||
                  (o.ok == mo.ok && (o.ok || (o.rid == rid_of(mo.ridx) && o.label == mo.label &&
                                              o.slots_short == mo.slots_short))),
              "swap_in: ok %d (rid %llu label %u short %u), model ok %d (rid %u label %u short %u)",
              o.ok, (unsigned long long)o.rid, o.label, o.slots_short, mo.ok, rid_of(mo.ridx),
              mo.label, mo.slots_short);
    }
    if (want != RSP_OK)
        expect_err(t, rc, want, out ? "swap_out" : "swap_in");
    else
        CHECK(t, rc == RSP_OK, "swap: status %d (%s)", (int)rc, rsp_strerror(rc));
    t->count_swaps_out += out && rc == RSP_OK;
    t->count_swaps_in += !out && rc == RSP_OK && o.ok;
    check_work(t, out ? "swap_out" : "swap_in", out ? W_UNPINNED_ZERO : W_NO_ZERO, &t->m);
    apply_work(t, out ? "swap_out" : "swap_in");
    check_all(t, out ? "swap_out" : "swap_in");
}

/* A checkpoint message: take (after now, the last committed step, or a
 * step in flight: RSP_EORDER), value (the value policy: half of the
 * takes' share; 0-8 units of slot_bytes / weight, so scores compete with
 * a few pushes), drop, pin or unpin, against the model. */
static void op_ckpt(T *t)
{
    uint64_t key = 1 + below(t, RSPM_MAX_KEYS - 1);
    uint32_t x = below(t, 100);
    rsp_status rc, want;
    t->count_ck_ops++;
    if (t->m.value && x < 30) {
        uint64_t value = below(t, 9) * rsp__core_layout(t->core)->slot_bytes;
        note(t, "checkpoint_value %llu = %llu", (unsigned long long)key, (unsigned long long)value);
        rc = tw_ck_value(t, key, value, NULL);
        want = rspm_ck_value(&t->m, key, value);
        t->count_ck_values += rc == RSP_OK;
    } else if (x < 60) {
        uint32_t ridx = below(t, NUM_RIDS), label = pick_label(t), tier = below(t, 2);
        uint32_t y = below(t, 10);
        uint64_t after = y < 3 ? t->last_committed_id : 0;
        bool in_flight = y == 3 && t->nq;
        if (in_flight)
            after = t->q[below(t, t->nq)].d.step_id;
        note(t, "checkpoint %llu of (rid %u, label %u) into tier %u after %llu",
             (unsigned long long)key, rid_of(ridx), label, tier, (unsigned long long)after);
        rc = tw_checkpoint(t, key, rid_of(ridx), label, (rsp_tier)tier, after, NULL);
        if (!rspm_holding_get(&t->m, ridx, label))
            want = RSP_ENOREQ;
        else if (in_flight)
            want = RSP_EORDER;
        else
            want = rspm_ck_take(&t->m, key, ridx, label, tier);
        if (rc == RSP_OK)
            CHECK(t, rsp__core_ckpt_report(t->core)->num_evictions == t->m.evictions,
                  "checkpoint: %u evictions, model %u",
                  rsp__core_ckpt_report(t->core)->num_evictions, t->m.evictions);
    } else if (x >= 84) {
        op_swap(t, x < 89);
        return;
    } else if (x < 72) {
        note(t, "checkpoint_drop %llu", (unsigned long long)key);
        rc = tw_ck_drop(t, key, NULL);
        want = rspm_ck_drop(&t->m, key);
    } else {
        bool pin = x < 77; /* fewer pins than unpins: pins do not pile up */
        note(t, "checkpoint_%s %llu", pin ? "pin" : "unpin", (unsigned long long)key);
        rc = tw_ck_pin(t, key, pin, NULL);
        want = rspm_ck_pin(&t->m, key, pin);
    }
    for (uint32_t i = 0; rc == RSP_OK && i < rsp__core_ckpt_report(t->core)->num_evictions; i++)
        t->count_ck_demoted += rsp__core_ckpt_report(t->core)->evictions[i].demoted;
    if (want != RSP_OK)
        expect_err(t, rc, want, "checkpoint op");
    else
        CHECK(t, rc == RSP_OK, "checkpoint op: status %d (%s)", (int)rc, rsp_strerror(rc));
    check_work(t, "checkpoint op", W_NO_ZERO, &t->m);
    apply_work(t, "checkpoint op");
    check_all(t, "checkpoint op");
}

static uint32_t qmax(const T *t)
{
    return t->cfg.max_inflight == 2 ? 2u : QMAX;
}

/* One step operation, chosen among those valid for the pipeline state:
 * steps are planned live in step order (a later one may be staged at any
 * time), forwards run in step order, only the oldest commits, any rolls back. */
static void op_step(T *t)
{
    if (t->nq == 0 || (t->nq < qmax(t) && below(t, 100) < 20)) {
        op_admit(t);
        return;
    }
    bool stage_exists = false;
    for (uint32_t k = 0; k < t->nq; k++)
        stage_exists |= t->q[k].phase == PH_STAGED;
    /* The oldest most often: it is the one that commits. */
    uint32_t i = below(t, 100) < 65 ? 0 : below(t, t->nq);
    dstep *s = &t->q[i];
    if (s->phase == PH_ADMITTED && below(t, 100) < 4) {
        op_readmit(t, s);
        return;
    }
    bool earlier_live = true, earlier_fwd = true;
    for (uint32_t k = 0; k < i; k++) {
        earlier_live &= t->q[k].phase == PH_PLANNED;
        earlier_fwd &= t->q[k].forward_ran;
    }
    uint32_t y = below(t, 100);
    /* A capture step may commit without a plan, staged or not (graph
     * warm-up); its commit takes its stage with it. */
    if (s->d.capture && i == 0 && s->phase != PH_PLANNED && y < 15) {
        op_commit(t, s);
        return;
    }
    switch (s->phase) {
    case PH_ADMITTED:
        if (y < 55 && earlier_live)
            op_plan(t, s, false);
        else if (y < 80 && !stage_exists)
            op_plan(t, s, true);
        else if (y < 92)
            op_rollback(t, s);
        break;
    case PH_STAGED:
        if (y < 65 && earlier_live)
            op_plan(t, s, false);
        else if (y < 82)
            op_clear_preplan(t, s);
        else
            op_rollback(t, s);
        break;
    case PH_PLANNED:
        if (!s->forward_ran && earlier_fwd && y < 55)
            op_forward(t, s);
        else if (i == 0 && y < 90)
            op_commit(t, s);
        else if (y >= 90)
            op_rollback(t, s);
        break;
    default: break;
    }
}

/* ------------------------------------------------------------------------ */
/* A run                                                                     */
/* ------------------------------------------------------------------------ */

static void run(const run_cfg *cfg, uint64_t ops)
{
    T *t = calloc(1, sizeof *t);
    assert_non_null(t);
    t->cfg = *cfg;
    t->rng = cfg->seed;
    t->next_id = 1;

    rsp_block_config blocks[2];
    memset(blocks, 0, sizeof blocks);
    blocks[0].name = "conv";
    blocks[0].dtype = RSP_DTYPE_F32;
    blocks[0].ndim = 1;
    blocks[0].shape[0] = 3;
    blocks[1].name = "ssm";
    blocks[1].dtype = RSP_DTYPE_BF16;
    blocks[1].ndim = 2;
    blocks[1].shape[0] = 2;
    blocks[1].shape[1] = 3;
    rsp_pool_config pc;
    rsp_pool_config_init(&pc);
    pc.num_layers = 2;
    pc.blocks = blocks;
    pc.num_blocks = 2;
    pc.max_slots = cfg->max_slots;
    pc.sink = cfg->sink;
    pc.max_inflight_steps = cfg->max_inflight;
    pc.max_checkpoints = 2;
    pc.max_host_checkpoints = 2;
    pc.checkpoint_demote = cfg->seed & 1;
    /* Seed bit 1: the value policy, weight 1 or (with demotion) 4. */
    if (cfg->seed & 2) {
        pc.checkpoint_policy = RSP_CHECKPOINT_VALUE;
        pc.checkpoint_value_weight = cfg->seed & 1 ? 4.0 : 1.0;
    }
    rsp_error err;
    rsp_status rc = rsp__core_create(&pc, &t->core, &err);
    if (rc != RSP_OK)
        fail_msg("core_create: %s", err.message);
    rsp__work_init(&t->work);
    rc = rsp__core_create(&pc, &t->slow, &err);
    if (rc != RSP_OK)
        fail_msg("core_create (twin): %s", err.message);
    rsp__core_set_fast(t->slow, false);
    rsp__work_init(&t->swork);
    t->store = rsp_test_store_new(rsp__core_layout(t->core));
    t->ref = rsp_test_store_new(rsp__core_layout(t->core));
    rspm_init(&t->m, cfg->max_slots, cfg->sink, NUM_RIDS);
    rspm_ck_init(&t->m, pc.max_checkpoints, pc.max_host_checkpoints, pc.checkpoint_demote);
    if (pc.checkpoint_policy == RSP_CHECKPOINT_VALUE)
        rspm_ck_value_policy(&t->m, pc.checkpoint_value_weight /
                                        (double)rsp__core_layout(t->core)->slot_bytes);
    static const char *names[NUM_LABELS] = {"main", "draft", "beam1"};
    for (uint32_t i = 0; i < NUM_LABELS; i++) {
        rc = rsp__core_label(t->core, names[i], &t->labels[i], NULL);
        assert_int_equal(rc, RSP_OK);
        rsp_label_id twin;
        assert_int_equal(rsp__core_label(t->slow, names[i], &twin, NULL), RSP_OK);
        assert_int_equal(twin, t->labels[i]);
        assert_true(t->labels[i] < RSPM_MAX_LABELS);
    }
    assert_int_equal(t->labels[0], RSP_LABEL_MAIN);
    t->graph_max = cfg->graph_max_bs;
    if (cfg->graph_max_bs) {
        rc = tw_build_graph_buffers(t, cfg->graph_max_bs, 16, &t->work, NULL);
        assert_int_equal(rc, RSP_OK);
        apply_work(t, "build_graph_buffers");
    }
    check_all(t, "create");

    for (t->op = 0; t->op < ops; t->op++) {
        uint32_t x = below(t, 100);
        /* Streaks of step operations only (a decode loop that nothing
         * interrupts): steady declarations then take the same-declaration
         * path step after step. */
        if (t->streak == 0 && x < 2)
            t->streak = 10 + below(t, 30);
        if (t->streak) {
            t->streak--;
            op_step(t);
        } else if (x < 3)
            op_ingest(t);
        else if (x < 9)
            op_remove(t);
        else if (x < 13)
            op_reset(t);
        else if (x < 15)
            op_release(t);
        else if (x < 17)
            op_invalid(t);
        else if (x < 21)
            op_ckpt(t);
        else
            op_step(t);
        t->count_pending += rspm_count(&t->m, RSPM_PENDING) > 0;
        t->count_three += t->nq == 3;
    }
    /* Drain: finish every step, remove every request: all slots free. */
    if (t->nq > 0 && t->q[0].phase == PH_PLANNED)
        op_commit(t, &t->q[0]);
    while (t->nq > 0)
        op_rollback(t, &t->q[t->nq - 1]);
    for (uint32_t r = 0; r < NUM_RIDS; r++) {
        CHECK(t, tw_remove(t, rid_of(r), &t->work, NULL) == RSP_OK, "final remove");
        rspm_remove(&t->m, r);
        apply_work(t, "final remove");
    }
    check_all(t, "drain");
    rsp_stats st;
    rsp__core_stats(t->core, &st);
    CHECK(t, st.free_slots == st.usable_slots, "after the drain %u of %u slots are free",
          st.free_slots, st.usable_slots);
    print_message(
        "seed %llu max_slots %u sink %d: %llu ops, %llu admits ok, %llu full, "
        "%llu stages, %llu promoted, %llu live behind a live step, %llu ops with pending "
        "releases, %llu with three steps in flight, leased plans refused %llu, stages losing "
        "their lease %llu, retried admits %llu, re-admits %llu, plans refused behind a "
        "planned step %llu\n",
        (unsigned long long)cfg->seed, cfg->max_slots, cfg->sink, (unsigned long long)ops,
        (unsigned long long)t->count_admit_ok, (unsigned long long)t->count_admit_full,
        (unsigned long long)t->count_stage, (unsigned long long)t->count_promoted,
        (unsigned long long)t->count_two_live, (unsigned long long)t->count_pending,
        (unsigned long long)t->count_three, (unsigned long long)t->count_lease_refused,
        (unsigned long long)t->count_lease_taken, (unsigned long long)t->count_retry,
        (unsigned long long)t->count_readmit, (unsigned long long)t->count_pipeline_refused);
    print_message("  per-token rows written %llu, accepted (a >= 1) %llu\n",
                  (unsigned long long)t->count_spec_forwards, (unsigned long long)t->count_accepts);
    const rspm_cov *cv = &t->m.cov;
    print_message(
        "  pending %llu (freed at step end %llu), deferred zeroes %llu (taken over by a "
        "later plan %llu), stale commit rows %llu, fork copies %llu (%llu from a reset slot), "
        "rollback frees %llu skips %llu\n",
        (unsigned long long)cv->pending, (unsigned long long)cv->pending_freed,
        (unsigned long long)cv->zero_deferred, (unsigned long long)cv->zero_taken,
        (unsigned long long)cv->commit_stale, (unsigned long long)cv->fork_copies,
        (unsigned long long)cv->fork_from_reset, (unsigned long long)cv->rollback_frees,
        (unsigned long long)cv->rollback_skips);
    print_message("  checkpoints: %llu messages, %llu taken in steps (%llu skipped), %llu "
                  "restored, %llu admits refused for a missing key, %llu demoted; swaps %llu "
                  "out, %llu in, %llu admits refused for a swapped rid\n",
                  (unsigned long long)t->count_ck_ops, (unsigned long long)t->count_ck_takes,
                  (unsigned long long)t->count_ck_skips, (unsigned long long)t->count_ck_restores,
                  (unsigned long long)t->count_ck_enokey, (unsigned long long)t->count_ck_demoted,
                  (unsigned long long)t->count_swaps_out, (unsigned long long)t->count_swaps_in,
                  (unsigned long long)t->count_swap_refused);
    print_message("  overlap: %llu plan rows with state through an earlier step in flight, "
                  "%llu admits refused on a post-fork target, %llu rollbacks refused behind a "
                  "later step; %llu commits of another declaration refused\n",
                  (unsigned long long)t->m.cov.overlap_flags,
                  (unsigned long long)t->count_post_refused,
                  (unsigned long long)t->count_rollback_refused,
                  (unsigned long long)t->count_commit_mismatch);
    CHECK(t,
          ops < 10000 || (t->m.cov.overlap_flags && t->count_post_refused &&
                          t->count_rollback_refused && t->count_commit_mismatch),
          "overlap paths too rare");
    CHECK(t,
          ops < 10000 || (t->count_ck_takes && t->count_ck_skips && t->count_ck_restores &&
                          t->count_ck_enokey),
          "checkpoint paths too rare");
    if (t->m.value)
        print_message("  value policy: %llu values set, %llu victims LRU would have kept\n",
                      (unsigned long long)t->count_ck_values,
                      (unsigned long long)t->m.value_not_lru);
    CHECK(t, ops < 10000 || !t->m.value || (t->count_ck_values && t->m.value_not_lru),
          "value policy paths too rare");
    /* "Pool full" must be common, or the test does not test much. */
    CHECK(t, ops < 10000 || t->count_admit_full * 20 > t->count_admit_ok,
          "pool full too rare: %llu of %llu", (unsigned long long)t->count_admit_full,
          (unsigned long long)t->count_admit_ok);
    /* The same-declaration path must be taken often, or the twin compares
     * the general path with itself. */
    rsp__fast_counts fc = rsp__core_fast_counts(t->core), fs = rsp__core_fast_counts(t->slow);
    print_message("  same-declaration path: %llu admits, %llu plans, %llu commits, %llu with "
                  "resolved forks (%llu steady declarations); %llu lazy unpins, %llu adopted\n",
                  (unsigned long long)fc.admits, (unsigned long long)fc.plans,
                  (unsigned long long)fc.commits, (unsigned long long)fc.fork_pairs,
                  (unsigned long long)t->count_steady, (unsigned long long)fc.ghosts,
                  (unsigned long long)fc.adopted);
    CHECK(t, fs.admits + fs.plans + fs.commits + fs.fork_pairs + fs.ghosts + fs.adopted == 0,
          "the twin took the same-declaration path");
    /* Lazy unpins must both be adopted and be cleared by other calls. */
    CHECK(t, ops < 10000 || (fc.adopted * 100 > t->count_admit_ok && fc.ghosts > fc.adopted * 2),
          "lazy unpin too rare: %llu lazy unpins, %llu adopted of %llu admits",
          (unsigned long long)fc.ghosts, (unsigned long long)fc.adopted,
          (unsigned long long)t->count_admit_ok);
    CHECK(t,
          ops < 10000 ||
              (fc.admits * 20 > t->count_admit_ok && fc.plans * 50 > t->count_admit_ok &&
               fc.commits * 10 > t->count_admit_ok && fc.fork_pairs * 50 > t->count_admit_ok),
          "same-declaration path too rare: %llu admits, %llu plans, %llu commits of %llu admits",
          (unsigned long long)fc.admits, (unsigned long long)fc.plans,
          (unsigned long long)fc.commits, (unsigned long long)t->count_admit_ok);
    rsp_test_store_free(t->ref);
    rsp_test_store_free(t->store);
    rsp__work_fini(&t->work);
    rsp__work_fini(&t->swork);
    rsp__core_destroy(t->slow);
    rsp__core_destroy(t->core);
    free(t);
}

static uint64_t ops_per_run(void)
{
    const char *e = getenv("RSP_RANDOM_OPS");
    if (e && *e)
        return strtoull(e, NULL, 10);
    return RSP_RANDOM_OPS;
}

/* The fixed runs; a seed from the environment runs that seed alone. */
static void fixed_run(const run_cfg *c)
{
    const char *only = getenv("RSP_RANDOM_SEED");
    if (only && *only)
        skip();
    run(c, ops_per_run());
}

static void random_sink_on_8_slots(void **state)
{
    (void)state;
    run_cfg c = {.seed = 0x5eed0001, .max_slots = 8, .sink = true, .graph_max_bs = 0};
    fixed_run(&c);
}

static void random_sink_on_10_slots_graph_buffers(void **state)
{
    (void)state;
    run_cfg c = {.seed = 0x5eed0002, .max_slots = 10, .sink = true, .graph_max_bs = 6};
    fixed_run(&c);
}

static void random_sink_off_6_slots_two_in_flight(void **state)
{
    (void)state;
    run_cfg c = {
        .seed = 0x5eed0003, .max_slots = 6, .sink = false, .graph_max_bs = 0, .max_inflight = 2};
    fixed_run(&c);
}

static void random_sink_off_9_slots_graph_buffers(void **state)
{
    (void)state;
    run_cfg c = {.seed = 0x5eed0004, .max_slots = 9, .sink = false, .graph_max_bs = 5};
    fixed_run(&c);
}

/* A seed from the environment reproduces one run (RSP_RANDOM_SEED, with
 * RSP_RANDOM_SLOTS, RSP_RANDOM_SINK, RSP_RANDOM_GRAPH, RSP_RANDOM_INFLIGHT,
 * RSP_RANDOM_OPS); die() prints the exact line.. */
static void random_seed_from_env(void **state)
{
    (void)state;
    const char *e = getenv("RSP_RANDOM_SEED");
    if (!e || !*e)
        skip();
    const char *sl = getenv("RSP_RANDOM_SLOTS");
    const char *sk = getenv("RSP_RANDOM_SINK");
    run_cfg c = {.seed = strtoull(e, NULL, 0),
                 .max_slots = sl ? (uint32_t)strtoul(sl, NULL, 10) : 8,
                 .sink = sk ? atoi(sk) != 0 : true,
                 .graph_max_bs = 0};
    const char *g = getenv("RSP_RANDOM_GRAPH");
    if (g)
        c.graph_max_bs = (uint32_t)strtoul(g, NULL, 10);
    const char *f = getenv("RSP_RANDOM_INFLIGHT");
    if (f)
        c.max_inflight = (uint32_t)strtoul(f, NULL, 10);
    run(&c, ops_per_run());
}

/* ------------------------------------------------------------------------ */
/* Directed regressions: sequences the random runs found or pointed at       */
/* ------------------------------------------------------------------------ */

typedef struct mini {
    rsp__core *core;
    rsp__work work;
    /* The twin: the same core with the same-declaration path off
     * (rsp__core_set_fast), given every operation t->core is given; every
     * status, message, outcome, plan and work list must be equal. */
    rsp__core *slow;
    rsp__work swork;
    /* The last admitted declaration, which a steady step repeats. */
    bool have_prev;
    dstep prev;
    uint64_t count_steady;
    uint32_t streak; /* step operations left in a streak */
    rsp_test_store *store;
    rsp_label_id draft;
} mini;

static void mini_new(mini *x)
{
    static rsp_block_config blk = {.name = "s", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};
    rsp_pool_config pc;
    rsp_pool_config_init(&pc);
    pc.num_layers = 2;
    pc.blocks = &blk;
    pc.num_blocks = 1;
    pc.max_slots = 8;
    assert_int_equal(rsp__core_create(&pc, &x->core, NULL), RSP_OK);
    rsp__work_init(&x->work);
    x->store = rsp_test_store_new(rsp__core_layout(x->core));
    assert_int_equal(rsp__core_label(x->core, "draft", &x->draft, NULL), RSP_OK);
}

static void mini_free(mini *x)
{
    rsp_test_store_free(x->store);
    rsp__work_fini(&x->work);
    rsp__core_destroy(x->core);
}

static void mini_apply(mini *x)
{
    assert_true(rsp_test_store_apply(x->store, &x->work));
    rsp__work_clear(&x->work);
}

static void mini_admit(mini *x, const rsp_step *st)
{
    rsp_admit_outcome out;
    assert_int_equal(rsp__core_admit(x->core, st, &out, &x->work, NULL), RSP_OK);
    assert_true(out.ok);
    mini_apply(x);
}

static void mini_plan(mini *x, const rsp_step *st)
{
    rsp__plan_out out;
    assert_int_equal(rsp__core_plan(x->core, st, &out, &x->work, NULL), RSP_OK);
    mini_apply(x);
}

static void mini_commit(mini *x, const rsp_step *st)
{
    rsp_event ev = {.handle = NULL, .value = st->step_id};
    assert_int_equal(rsp__core_commit(x->core, st, &ev, &x->work, NULL, NULL), RSP_OK);
    mini_apply(x);
}

static rsp_holding mini_hold(mini *x, rsp_rid rid, rsp_label_id label)
{
    rsp_holding h;
    assert_int_equal(rsp__core_holding(x->core, rid, label, &h, NULL), RSP_OK);
    return h;
}

/*
 * reset(free = false) while two steps are admitted (none planned) zeroes the
 * slot at once: no forward may write it. Step 2, planned after the reset,
 * starts from zeros and its write is the request's state (has_state true at
 * its commit); step 3's pre-fork then copies those bytes with the flag. A
 * target never has has_state = false with stale bytes (docs/semantics.md 2).
 */
static void reset_during_two_steps_then_fork_target_reads_zeros(void **state)
{
    (void)state;
    mini x;
    mini_new(&x);
    const rsp_rid R = 7;
    rsp_row main_row = {.rid = R, .label = RSP_LABEL_MAIN, .span = 4};
    rsp_step s1 = {.step_id = 1, .rows = &main_row, .num_rows = 1};
    mini_admit(&x, &s1);
    mini_plan(&x, &s1);
    rsp_holding m = mini_hold(&x, R, RSP_LABEL_MAIN);
    rsp_test_store_fill_pattern(x.store, (uint32_t)m.index, 77); /* step 1's forward */
    mini_commit(&x, &s1);
    assert_true(mini_hold(&x, R, RSP_LABEL_MAIN).has_state);

    rsp_step s2 = {.step_id = 2, .rows = &main_row, .num_rows = 1};
    mini_admit(&x, &s2);
    assert_int_equal(rsp__core_reset(x.core, R, false, &x.work, NULL), RSP_OK);
    mini_apply(&x);
    assert_true(rsp_test_store_slot_is_zero(x.store, (uint32_t)m.index));
    rsp_fork f = {.from = RSP_LABEL_MAIN, .to = x.draft};
    rsp_step s3 = {
        .step_id = 3, .rows = &main_row, .num_rows = 1, .pre_forks = &f, .num_pre_forks = 1};
    mini_admit(&x, &s3); /* draft taken fresh, after the reset */
    mini_plan(&x, &s2);
    assert_false(mini_hold(&x, R, RSP_LABEL_MAIN).has_state);
    rsp_test_store_fill_pattern(x.store, (uint32_t)m.index, 78); /* step 2's forward */
    mini_commit(&x, &s2);
    assert_true(mini_hold(&x, R, RSP_LABEL_MAIN).has_state);
    mini_plan(&x, &s3); /* pre-fork main -> draft */
    rsp_holding d = mini_hold(&x, R, x.draft);
    assert_true(d.has_state);
    if (rsp_test_store_checksum(x.store, (uint32_t)d.index) !=
        rsp_test_store_checksum(x.store, (uint32_t)m.index))
        fail_msg("draft (slot %d) is not a copy of main (slot %d) after the pre-fork", d.index,
                 m.index);
    mini_commit(&x, &s3);
    d = mini_hold(&x, R, x.draft);
    if (!d.has_state && !rsp_test_store_slot_is_zero(x.store, (uint32_t)d.index))
        fail_msg("after step 3's commit draft (slot %d) has has_state = false and is not zero",
                 d.index);
    mini_free(&x);
}

/* Host vectors of a buffer equal to what a plan published? */
static bool buffer_holds(mini *x, const rsp__label_plan *lp, const int32_t *slots, const bool *hs)
{
    const int32_t *dev = rsp_test_store_buffer_slots(x->store, lp->buffer);
    const bool *dhs = rsp_test_store_buffer_has_state(x->store, lp->buffer);
    return dev && rsp_test_store_buffer_capacity(x->store, lp->buffer) >= lp->length &&
           memcmp(dev, slots, lp->length * sizeof *dev) == 0 &&
           memcmp(dhs, hs, lp->length * sizeof *dhs) == 0;
}

/*
 * Two in-flight steps on one graph lease slot (same bucket, lease slot, label).
 * Live step 1 is running; staging step 2 must not overwrite the leased buffer
 * step 1's graph reads (docs/semantics.md 4.3: staged and live plans are
 * separate): docs/design.md refuses it with RSP_ECAPACITY.
 */
static void stage_on_the_lease_slot_of_a_live_step_keeps_its_buffer(void **state)
{
    (void)state;
    mini x;
    mini_new(&x);
    rsp_lease lease = {.bucket_bs = 4, .bucket_id = 0, .lease_slot = 0};
    rsp_row ra = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 4};
    rsp_row rb[2] = {{.rid = 2, .label = RSP_LABEL_MAIN, .span = 4},
                     {.rid = 3, .label = RSP_LABEL_MAIN, .span = 4}};
    rsp_step a = {.step_id = 1, .rows = &ra, .num_rows = 1, .has_lease = true, .lease = lease};
    rsp_step b = {.step_id = 2, .rows = rb, .num_rows = 2, .has_lease = true, .lease = lease};
    mini_admit(&x, &a);
    mini_admit(&x, &b);
    rsp__plan_out out;
    assert_int_equal(rsp__core_plan(x.core, &a, &out, &x.work, NULL), RSP_OK);
    mini_apply(&x);
    rsp__label_plan la = out.labels[0];
    int32_t a_slots[8];
    bool a_hs[8];
    assert_true(la.length <= 8);
    memcpy(a_slots, la.slot_indices, la.length * sizeof *a_slots);
    memcpy(a_hs, la.has_state, la.length * sizeof *a_hs);
    b.preplan = true;
    rsp_status rc = rsp__core_plan(x.core, &b, &out, &x.work, NULL);
    if (rc == RSP_OK) {
        mini_apply(&x);
        if (!buffer_holds(&x, &la, a_slots, a_hs))
            fail_msg("staging step 2 on lease (0, 0) overwrote buffer %u, which live step 1 "
                     "reads",
                     la.buffer);
    }
    assert_int_equal(rc, RSP_ECAPACITY);
    assert_true(rsp__work_empty(&x.work)); /* refused: nothing changed */
    assert_true(buffer_holds(&x, &la, a_slots, a_hs));
    mini_free(&x);
}

/*
 * The other order: step 2 staged on a lease slot, then step 1 planned live on
 * the same lease slot, committed, and step 2 planned. docs/design.md: the
 * live plan takes the leased buffer and drops step 2's stage, so step 2's
 * plan is a fresh live plan (not a promotion) and its buffer holds step 2's
 * addressing, whatever was uploaded in between.
 */
static void promotion_after_a_live_plan_on_its_lease_slot_holds_its_addressing(void **state)
{
    (void)state;
    mini x;
    mini_new(&x);
    rsp_lease lease = {.bucket_bs = 4, .bucket_id = 0, .lease_slot = 0};
    rsp_row ra = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 4};
    rsp_row rb[2] = {{.rid = 2, .label = RSP_LABEL_MAIN, .span = 4},
                     {.rid = 3, .label = RSP_LABEL_MAIN, .span = 4}};
    rsp_step a = {.step_id = 1, .rows = &ra, .num_rows = 1, .has_lease = true, .lease = lease};
    rsp_step b = {.step_id = 2, .rows = rb, .num_rows = 2, .has_lease = true, .lease = lease};
    mini_admit(&x, &a);
    mini_admit(&x, &b);
    rsp__plan_out out;
    b.preplan = true;
    assert_int_equal(rsp__core_plan(x.core, &b, &out, &x.work, NULL), RSP_OK);
    mini_apply(&x);
    assert_int_equal(rsp__core_plan(x.core, &a, &out, &x.work, NULL), RSP_OK);
    mini_apply(&x);
    mini_commit(&x, &a);
    b.preplan = false;
    assert_int_equal(rsp__core_plan(x.core, &b, &out, &x.work, NULL), RSP_OK);
    mini_apply(&x);
    const rsp__label_plan *lb = &out.labels[0];
    if (!buffer_holds(&x, lb, lb->slot_indices, lb->has_state))
        fail_msg("step 2 %s: buffer %u does not hold its addressing (slot %d, %d; the buffer "
                 "has %d, %d)",
                 out.promoted ? "promoted" : "planned", lb->buffer, lb->slot_indices[0],
                 lb->slot_indices[1], rsp_test_store_buffer_slots(x.store, lb->buffer)[0],
                 rsp_test_store_buffer_slots(x.store, lb->buffer)[1]);
    assert_false(out.promoted); /* its stage was dropped */
    mini_free(&x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_sink_on_8_slots),
        cmocka_unit_test(random_sink_on_10_slots_graph_buffers),
        cmocka_unit_test(random_sink_off_6_slots_two_in_flight),
        cmocka_unit_test(random_sink_off_9_slots_graph_buffers),
        cmocka_unit_test(random_seed_from_env),
        cmocka_unit_test(reset_during_two_steps_then_fork_target_reads_zeros),
        cmocka_unit_test(stage_on_the_lease_slot_of_a_live_step_keeps_its_buffer),
        cmocka_unit_test(promotion_after_a_live_plan_on_its_lease_slot_holds_its_addressing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
