/*
 * The same-declaration caches (docs/design.md "Same declaration"): what a
 * steady decode step reuses from its record's last admit, plan and commit
 * instead of resolving its rows again. This module owns every cache of that
 * path: their state, the one validity check and every invalidation. The
 * modules that use a cache (step, fork, admit, plan, commit) ask here
 * whether it holds and tell here what changed; none reads an epoch.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Below core_impl.h (which hangs rsp__same_pool off the core and rsp__same
 * off each step record): it knows neither, only its own structs.
 *
 * Two counters stand for everything a cache may depend on in the holdings:
 *   epoch       moves with every change of a holding but a commit's
 *               has_state (assignment, release, reset, a fork into it,
 *               removal of a request, a zero made pending): equal epochs
 *               mean the same holdings, slots and generations, and has_state
 *               only went false -> true (rsp__same_holdings_changed)
 *   hold_epoch  moves only when which slot a (rid, label) holds can change:
 *               a holding or a request came or went
 *               (rsp__same_holders_changed; it moves epoch too)
 *
 * Per step record (rsp__same), each cache a bit of `have`; rsp__same_valid
 * is the one check: the bits it returns hold now. The "resolved" ones
 * (RSP__SAME_RESOLVED) name holdings by index, so they hold while
 * hold_epoch stays at the record's stamp; rsp__same_valid drops them all
 * when it moved.
 *
 *   cached (bit)        what it is                    depends on / dropped by
 *   RAW      raw rows   rows compare as one memcmp    rows (none says skip)
 *   RIDS     fork_rids  the rows' forking rids        rows
 *   FORKS    (dforks)   the record's admitted forks   rows; an admit that
 *                       are a plain admit's, step-    is not one (capture,
 *                       wide                          groups, a re-admit)
 *   ADMIT    pins       the slots that admit pinned   FORKS; hold_epoch;
 *                       (rows first: row_pins)        a lost writes bit
 *                                                     (rsp__same_writes_lost)
 *   PAIRS    fpairs     the kept forks resolved to    FORKS; hold_epoch; an
 *                       holding indices, fp_marks     admit
 *   PLAN     pc_*       the last live plan's vectors  rows; hold_epoch; a
 *                       (prows: each row's exact      plan without it
 *                       holding)                      (restores, takes, OOM)
 *   VHASH    pc_vhash   those vectors' digest hash    PLAN; a has_state that
 *                                                     changed in them
 * and two epoch stamps, checked with their question:
 *   pc_epoch    PLAN's vectors are exact (COPY) while epoch == pc_epoch and
 *               every row had has_state; else DERIVE reads flags and
 *               generations again through prows (rsp__same_plan_how)
 *   plan_epoch  a commit sets has_state through the plan's prows hints
 *               while epoch == plan_epoch (rsp__same_commit_exact)
 *
 * Per core (rsp__same_pool), cleared by the core's own events:
 *   ghost       a committed record's pins left set (lazy unpin), for the
 *               next call only: its same-declaration admit adopts them,
 *               every other call clears them (rsp__op_begin)
 *   memo_rows   rows at an address found the same as record memo_rec's,
 *   memo_step   and the declaration validated last: valid while the owner
 *               keeps its arrays fixed (rsp__core_rows_fixed), forgotten
 *               when it stops or a record's rows change
 *
 * `off` (rsp__core_set_fast(false)) turns off every use of ADMIT, PAIRS,
 * PLAN, the commit through hints and the ghost: the general path only, which
 * tests/core_random runs beside the fast one and compares.
 *
 * What each buys, measured end to end: a 256-row steady step's time
 * without the cache over its time with it (rsp-bench --only step, builds
 * with and without it (RSP_SAME_DROP below) in alternating rounds, AMD
 * EPYC, 2 vCPUs, 6 Dec 2026; the core in the caller's thread, in brackets
 * the pool's one-trip step; table and method in docs/performance.md "The
 * same-declaration caches"):
 *   ADMIT   one label 8.5x, fork 1.8x (1.56x, 1.48x); PLAN and the lazy
 *           unpin need it, so this counts them too
 *   FORKS   one label 4.8x, fork 1.7x (ADMIT and PAIRS need it)
 *   PLAN    one label 5.2x, fork 1.1x (1.26x, 1.04x)
 *   commit through the plan's hints: one label 2.3x (1.09x)
 *   ghost   one label 1.75x
 *   RAW     one label 1.7x
 *   VHASH   one label 1.4x
 *   RIDS    fork 1.47x (1.24x)
 *   PAIRS   fork 1.23x (1.10x)
 *   rows memo (one step message's rows and declaration, checked once for
 *           its commit, admit and plan): the one-trip step 1.04-1.14x,
 *           measured once the caller runs the step in the owner's role
 *           (with a hand-off to the owner thread in every step it hid in
 *           the wake-ups: 0.98-1.005x)
 *
 * Single-threaded like the core: the owner thread is the only caller.
 */
#ifndef RSP_CORE_SAME_H
#define RSP_CORE_SAME_H

#include <stdbool.h>
#include <stdint.h>

#include <rsp/rsp.h>

enum {
    RSP__SAME_RAW = 1u << 0,
    RSP__SAME_RIDS = 1u << 1,
    RSP__SAME_FORKS = 1u << 2,
    RSP__SAME_ADMIT = 1u << 3,
    RSP__SAME_PAIRS = 1u << 4,
    RSP__SAME_PLAN = 1u << 5,
    RSP__SAME_VHASH = 1u << 6,
    /* Name holdings by index: valid while hold_epoch stays. */
    RSP__SAME_RESOLVED = RSP__SAME_ADMIT | RSP__SAME_PAIRS | RSP__SAME_PLAN | RSP__SAME_VHASH,
    /* Off with the path (rsp__core_set_fast(false)). */
    RSP__SAME_FAST = RSP__SAME_ADMIT | RSP__SAME_PAIRS | RSP__SAME_PLAN | RSP__SAME_VHASH,
};

/* Caches left out at build time, for measuring what each buys (a bit mask
 * of the RSP__SAME_* bits, and RSP__SAME_DROP_* below for the ones that are
 * no bit); 0 in every shipped build. */
#ifndef RSP_SAME_DROP
#define RSP_SAME_DROP 0
#endif
#define RSP__SAME_DROP_COMMIT (1u << 8) /* the commit through hints */
#define RSP__SAME_DROP_GHOST (1u << 9)  /* the lazy unpin */
#define RSP__SAME_DROP_MEMO (1u << 10)  /* the rows and step memos */

/* A plan's label as the plan cache keeps it. */
typedef struct rsp__same_label {
    rsp_label_id label;
    uint32_t num_rows, length;
} rsp__same_label;

/* A forking rid's fork (pre ++ post index): the indices of its source
 * and target holdings in the rid's record, RSP__NONE when not held. */
typedef struct rsp__fpair {
    uint32_t from, to;
} rsp__fpair;

/* One step record's caches (table above). Arrays grow by doubling and are
 * kept. */
typedef struct rsp__same {
    uint32_t have;  /* RSP__SAME_* bits kept (rsp__same_valid: which hold) */
    uint64_t stamp; /* hold_epoch the RESOLVED bits were kept at */
    /* RIDS: the forking rids of the rows (first appearance) with record
     * hints, kept by an admit with forks. */
    rsp_rid *fork_rids;
    uint32_t *fork_rid_recs;
    uint32_t num_fork_rids, cap_fork_rids, cap_fork_rid_recs;
    /* ADMIT: the record's pinned[0 .. admit_pins) (the list outlives the
     * step), its rows' slots first, [0 .. row_pins) (writes bits). */
    uint32_t admit_pins, row_pins;
    /* PAIRS: per fork_rids[k] its record (fork_pair_recs) and per fork of
     * the record's dforks its holdings (fpairs, k-major); fp_marks: the record's
     * fslots[0 .. fp_marks) are their post-fork marks (RSP__NONE-like
     * UINT32_MAX: not known). */
    rsp__fpair *fpairs;
    uint32_t *fork_pair_recs;
    uint32_t cap_fpairs, cap_fork_pair_recs;
    uint32_t fp_marks;
    /* The last live plan: its epoch and whether every row it addressed
     * had has_state (from the holdings' own flags). */
    uint64_t plan_epoch;
    bool plan_all_true;
    /* PLAN: its vectors, its rows in the record's prows[0 .. pc_num_prows). */
    bool pc_all_true;
    uint64_t pc_epoch;
    uint64_t pc_vhash; /* VHASH */
    uint32_t pc_num_labels, pc_num_prows;
    uint32_t pc_total, pc_rows;
    int32_t *pc_slots;
    bool *pc_has;
    uint64_t *pc_gens;
    uint32_t cap_pc_slots, cap_pc_has, cap_pc_gens;
    rsp__same_label pc_labels[RSP_MAX_LABELS];
} rsp__same;

/* The core's part (table above). */
typedef struct rsp__same_pool {
    uint64_t epoch, hold_epoch;
    bool off;
    uint32_t ghost; /* record index, UINT32_MAX: none */
    uint32_t ghost_pins;
    bool rows_fixed;
    const rsp_row *memo_rows; /* NULL: none */
    uint32_t memo_n, memo_rec;
    const rsp_step *memo_step; /* NULL: none */
} rsp__same_pool;

/* --- events: every invalidation ------------------------------------------ */

/* A holding changed (see epoch above). O(1). */
static inline void rsp__same_holdings_changed(rsp__same_pool *g)
{
    g->epoch++;
}
/* n holdings changed, counted by a caller's loop (forks). O(1). */
static inline void rsp__same_holdings_changed_n(rsp__same_pool *g, uint64_t n)
{
    g->epoch += n;
}
/* A holding or a request came or went. O(1). */
static inline void rsp__same_holders_changed(rsp__same_pool *g)
{
    g->epoch++;
    g->hold_epoch++;
}
/* Record m's rows changed: everything it kept was for the old ones. */
static inline void rsp__same_rows_changed(rsp__same_pool *g, rsp__same *m)
{
    m->have = 0;
    g->memo_rows = NULL; /* it may have been this record's */
}
/* A planned record lost a writes bit (rsp__writes_forget): its lingering
 * pins would be adopted without it, so its next admit takes the general
 * path. */
static inline void rsp__same_writes_lost(rsp__same *m)
{
    m->have &= ~(uint32_t)RSP__SAME_ADMIT;
}
/* Drop what bits name (an operation that keeps them again later). */
static inline void rsp__same_drop(rsp__same *m, uint32_t bits)
{
    m->have &= ~bits;
}

/* --- the validity check -------------------------------------------------- */

/* Bring m's stamp to hold_epoch, dropping its RESOLVED caches when the
 * epoch moved since they were kept. O(1). */
static inline void rsp__same_restamp(const rsp__same_pool *g, rsp__same *m)
{
    if (m->stamp != g->hold_epoch) {
        m->have &= ~(uint32_t)RSP__SAME_RESOLVED;
        m->stamp = g->hold_epoch;
    }
}
/* The caches of m that hold now: a RESOLVED one only while hold_epoch
 * stays at m's stamp (rsp__same_restamp), a FAST one only while the path
 * is on. O(1). */
static inline uint32_t rsp__same_valid(const rsp__same_pool *g, rsp__same *m)
{
    rsp__same_restamp(g, m);
    uint32_t have = m->have & ~(uint32_t)RSP_SAME_DROP;
    return g->off ? have & ~(uint32_t)RSP__SAME_FAST : have;
}
static inline bool rsp__same_has(const rsp__same_pool *g, rsp__same *m, uint32_t bits)
{
    return (rsp__same_valid(g, m) & bits) == bits;
}
/* Keep bits, valid from now (the caller filled what they name). O(1). */
static inline void rsp__same_keep(const rsp__same_pool *g, rsp__same *m, uint32_t bits)
{
    rsp__same_restamp(g, m);
    m->have |= bits;
}

/* --- the questions with an epoch ----------------------------------------- */

/* A live plan's record keeps these, for the commit and the plan cache. */
static inline void rsp__same_planned(const rsp__same_pool *g, rsp__same *m)
{
    m->plan_epoch = g->epoch;
}
/* May a commit set has_state through its plan's prows hints (no holding
 * changed since the plan)? */
static inline bool rsp__same_commit_exact(const rsp__same_pool *g, const rsp__same *m)
{
    return !g->off && !(RSP_SAME_DROP & RSP__SAME_DROP_COMMIT) && m->plan_epoch == g->epoch;
}

/* How a live plan may use the plan cache (PLAN and ADMIT hold, and the
 * labels, rows and lengths matched): COPY the vectors, DERIVE them (flags
 * and generations read again), or not at all. */
enum { RSP__SAME_NO, RSP__SAME_COPY, RSP__SAME_DERIVE };
static inline int rsp__same_plan_how(const rsp__same_pool *g, const rsp__same *m,
                                     bool zero_pendings)
{
    if (m->pc_epoch == g->epoch && m->pc_all_true)
        return RSP__SAME_COPY;
    return zero_pendings ? RSP__SAME_NO : RSP__SAME_DERIVE;
}
/* The plan cache was (re)filled or derived now. */
static inline void rsp__same_plan_kept(const rsp__same_pool *g, rsp__same *m, bool all_true)
{
    m->pc_epoch = g->epoch;
    m->pc_all_true = all_true;
}

/* --- the lazy unpin ------------------------------------------------------ */

/* May a commit of record rec leave its num_pinned pins set for the next
 * call (its admit kept them: ADMIT, and no pin was added since)? */
static inline bool rsp__same_may_linger(const rsp__same_pool *g, rsp__same *m, uint32_t num_pinned)
{
    return !(RSP_SAME_DROP & RSP__SAME_DROP_GHOST) && rsp__same_has(g, m, RSP__SAME_ADMIT) &&
           num_pinned == m->admit_pins;
}
static inline void rsp__same_linger(rsp__same_pool *g, uint32_t rec, uint32_t pins)
{
    g->ghost = rec;
    g->ghost_pins = pins;
}
/* Does record rec's admit adopt the lingering pins (its own, as many as it
 * pins)? Then there is none any more. */
static inline bool rsp__same_adopt(rsp__same_pool *g, uint32_t rec, uint32_t pins)
{
    if (g->ghost != rec || g->ghost_pins != pins)
        return false;
    g->ghost = UINT32_MAX;
    return true;
}

/* --- rows at a fixed address --------------------------------------------- */

static inline void rsp__same_fix_rows(rsp__same_pool *g, bool on)
{
    g->rows_fixed = on && !(RSP_SAME_DROP & RSP__SAME_DROP_MEMO);
    g->memo_rows = NULL;
    g->memo_step = NULL;
}
/* Were these rows (address, count) found the same as record rec's? */
static inline bool rsp__same_rows_known(const rsp__same_pool *g, const rsp_row *rows, uint32_t n,
                                        uint32_t rec)
{
    return g->memo_rows && rows == g->memo_rows && n == g->memo_n && rec == g->memo_rec;
}
/* They were, now: remembered while the rows stay fixed. */
static inline void rsp__same_rows_found(rsp__same_pool *g, const rsp_row *rows, uint32_t n,
                                        uint32_t rec)
{
    if (!g->rows_fixed)
        return;
    g->memo_rows = rows;
    g->memo_n = n;
    g->memo_rec = rec;
}
/* Was the declaration at this address validated in full last? */
static inline bool rsp__same_step_known(const rsp__same_pool *g, const rsp_step *step)
{
    return step && step == g->memo_step;
}
static inline void rsp__same_step_validated(rsp__same_pool *g, const rsp_step *step)
{
    if (g->rows_fixed)
        g->memo_step = step;
}

/* Free m's arrays. */
void rsp__same_free(rsp__same *m);

#endif
