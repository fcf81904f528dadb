/*
 * Allocation-failure injection: for every operation of the public API, fail
 * the N-th allocation (or thread creation) of the process during the call,
 * for every N until the call makes no more, and check the outcome.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Mechanism: inject.c interposes the allocator (every thread is counted
 * while armed: the caller's ticket, the owner, the host device, liburcu,
 * libc). The sweeps run in forked children, every N on a pool of its own:
 * one child runs N, N + 1, ... and writes one result per N. A crash, an
 * abort (liburcu dies on a failed call_rcu set-up) or a hang (a watchdog
 * alarm) ends the child: it is that N's failure, the Ns before it run again
 * (their leaks were not checked yet) and the sweep goes on after it. A leak
 * (LeakSanitizer runs at the child's exit) is pinned by running each N of
 * that child alone. create_first runs one child per N (the first create of
 * a process is what it sweeps). The parent never creates a pool, so every
 * child starts from a process where rsp and liburcu were never used (no
 * fork of their threads).
 *
 * For each operation a reference child first runs it with nothing failing
 * and records three snapshots: before the call, after it, and after a
 * follow-up (every step in flight finished, a fresh step with forks, a
 * remove and a reset). A snapshot is what the API lets us observe: the
 * stats (minus messages_handled and inbox_depth), every holding of every rid
 * the scenario uses (rsp_holding_get), the pool's storage (the host device's
 * blocks are host memory; held slots are painted with a per-holding pattern
 * after setup, standing in for forwards), and the live and staged plans'
 * addressing. Then, for N = 1, 2, ...:
 *
 *  - RSP_ENOMEM: nothing changed (snapshot == before); the call again,
 *    with allocations succeeding, gives the reference's "after".
 *  - RSP_OK although a fault point failed (an optional allocation, or one
 *    whose failure was absorbed): the state equals the reference's "after".
 *  - RSP_EDEVICE: the pool says it is broken (the message names it, a
 *    barrier answers RSP_EDEVICE); destroy still returns and frees all.
 *  - anything else, a crash, a hang or a leak: a failure of (op, N).
 *  - When the pool is usable, the follow-up runs and must give the
 *    reference's follow-up snapshot, with the slot invariants: free + held
 *    + pending + sink == max_slots, held == holdings, pending == 0 once
 *    every step is finished, and every free slot reads zero.
 *  - The sweep ends at the first N whose window saw fewer than N fault
 *    points (the call ran with nothing failing): it must match the
 *    reference.
 *
 * Pool creation and destruction are swept too: a failed create answers
 * RSP_ENOMEM with *out NULL and leaves no thread and (LSan) no memory
 * behind, and a create right after works. create_ckpt creates a pool with
 * checkpoint slots of both tiers (the readers' key index too) with mmap a
 * fault point as well (fault_mmap): every allocation and every mapping of
 * the call fails in turn, and a failure leaves no mapping behind either.
 *
 * Environment: RSP_FAULT_OPS=a,b (only these sweeps), RSP_FAULT_N=n (only
 * that N), RSP_FAULT_VERBOSE=1 (every child's output), RSP_FAULT_STRICT=0
 * (accept RSP_EDEVICE, a broken pool, as an outcome; by default it is a
 * failure: the host device reserves ahead), RSP_FAULT_NOFORK=1 (with RSP_FAULT_N
 * and one op: run that step in this process, for gdb or valgrind).
 * docs/testing.md "Fault injection".
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "inject.h"
#include "pool.h" /* rsp__device_read: wait for the device, from any thread */

/* forward_done of a commit whose forward (none runs here) is already done:
 * rsp_event_complete(). */
static const rsp_event forward_complete = {.kind = RSP_EVENT_COMPLETE};

/* ------------------------------------------------------------------------ */
/* Operations expected to fail today                                          */
/* ------------------------------------------------------------------------ */

/*
 * Sweeps that found a defect of "reserve first, then apply". Each stays in the suite (it
 * runs, and its failures are printed) but does not fail it; once its sweep
 * passes, the test fails until the entry is removed. The lead empties this
 * table as the fixes land.
 */
static const struct {
    const char *op;
    const char *defect;
} known_failing[] = {
    {NULL, NULL}, /* none left: keep the table for the next defect found */
};

/* ------------------------------------------------------------------------ */
/* The pool every scenario uses                                               */
/* ------------------------------------------------------------------------ */

#define MAX_SLOTS 256u
#define SLOT_FLOATS 4u
#define NUM_LABELS 7u   /* main, d1..d6: every scenario */
#define WIDE_LABELS 24u /* main, d1..d23: the "wide" scenarios */
#define SNAP_LABELS WIDE_LABELS
#define MAX_ROWS 80u
#define MAX_TRACKED 4u
#define SNAP_RIDS 96u
#define SNAP_ROWS 128u
#define WATCHDOG_S 30u

/* Rids: A..H are 1..8; the "many" scenarios use 100..179 as well. */
enum { A = 1, B, C, D, E, F, G, H };
#define MANY_FIRST 100u
#define MANY_COUNT 80u

static const char *label_name(uint32_t l)
{
    static char names[SNAP_LABELS][8];
    if (l >= SNAP_LABELS)
        return "?";
    if (!names[l][0])
        snprintf(names[l], sizeof names[l], l ? "d%u" : "main", l);
    return names[l];
}

static void pool_config(rsp_pool_config *cfg)
{
    static const rsp_block_config block = {
        .name = "s", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {SLOT_FLOATS}};
    rsp_pool_config_init(cfg);
    cfg->num_layers = 1;
    cfg->blocks = &block;
    cfg->num_blocks = 1;
    cfg->max_slots = MAX_SLOTS;
}

/* ------------------------------------------------------------------------ */
/* Findings (a child writes them to its stderr, which the parent captures)   */
/* ------------------------------------------------------------------------ */

static uint32_t num_findings;

__attribute__((format(printf, 1, 2))) static void finding(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  FINDING: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    num_findings++;
}

/* A call of a setup (or of the follow-up, on a pool that should work)
 * that must succeed; the child stops with status 3 otherwise. */
#define SETUP(expr)                                                                                \
    do {                                                                                           \
        rsp_status setup_st_ = (expr);                                                             \
        if (setup_st_ != RSP_OK) {                                                                 \
            fprintf(stderr, "  CALL FAILED: %s -> %s (%s:%d)\n", #expr, rsp_strerror(setup_st_),   \
                    __FILE__, __LINE__);                                                           \
            fflush(stderr);                                                                        \
            _exit(3);                                                                              \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Scenario context: the pool and the steps in flight                         */
/* ------------------------------------------------------------------------ */

typedef struct tracked {
    bool used, planned;
    rsp_step step;
    rsp_row rows[MAX_ROWS];
    rsp_fork pre[4], post[4];
} tracked;

typedef struct ctx {
    rsp_pool *pool;
    uint32_t num_labels; /* interned: main, d1, ... */
    bool many;           /* the rids 100..179 are part of the scenario */
    rsp_admit_outcome admit;
    tracked steps[MAX_TRACKED];
    rsp_host_fence *fence;
    /* block_device(): the device waits on `gate` until the armed call has
     * returned, so that call's device job is queued, not run inline (it is
     * then an allocation of its own). The storage is read just before. */
    rsp_host_fence *gate;
    bool blocked;
    float at_block[MAX_SLOTS * SLOT_FLOATS];
} ctx;

static tracked *decl(ctx *c, uint32_t k, uint64_t id)
{
    tracked *t = &c->steps[k];
    memset(t, 0, sizeof *t);
    t->step.step_id = id;
    t->step.rows = t->rows;
    t->step.pre_forks = t->pre;
    t->step.post_forks = t->post;
    return t;
}

static void row(tracked *t, rsp_rid rid, rsp_label_id label)
{
    t->rows[t->step.num_rows++] = (rsp_row){.rid = rid, .label = label, .span = 1};
}

static void pre(tracked *t, rsp_label_id from, rsp_label_id to)
{
    t->pre[t->step.num_pre_forks++] = (rsp_fork){from, to, 0};
}

static void post(tracked *t, rsp_label_id from, rsp_label_id to)
{
    t->post[t->step.num_post_forks++] = (rsp_fork){from, to, 0};
}

static void lease(tracked *t, uint32_t bucket_bs, uint32_t bucket_id, uint32_t lease_slot)
{
    t->step.has_lease = true;
    t->step.lease = (rsp_lease){bucket_bs, bucket_id, lease_slot};
}

static void admit_ok(ctx *c, tracked *t)
{
    rsp_admit_outcome o;
    SETUP(rsp_step_admit(c->pool, &t->step, &o, NULL));
    if (!o.ok) {
        fprintf(stderr, "  CALL FAILED: admit of step %llu found no room\n",
                (unsigned long long)t->step.step_id);
        _exit(3);
    }
    t->used = true;
}

static void plan_ok(ctx *c, tracked *t, bool preplan)
{
    t->step.preplan = preplan;
    SETUP(rsp_step_plan(c->pool, &t->step, NULL));
    t->step.preplan = false;
    t->planned |= !preplan;
}

static void commit_ok(ctx *c, tracked *t)
{
    SETUP(rsp_step_commit(c->pool, &t->step, &forward_complete, NULL));
    t->used = t->planned = false;
}

/* A step that gives rid the holdings of labels [0, n), committed. */
static void hold_labels(ctx *c, uint32_t k, uint64_t id, rsp_rid rid, uint32_t n)
{
    tracked *t = decl(c, k, id);
    for (uint32_t l = 0; l < n; l++)
        row(t, rid, l);
    admit_ok(c, t);
    plan_ok(c, t, false);
    commit_ok(c, t);
}

static void labels_intern(ctx *c)
{
    if (!c->num_labels)
        c->num_labels = NUM_LABELS;
    for (uint32_t l = 1; l < c->num_labels; l++) {
        rsp_label_id id;
        SETUP(rsp_label(c->pool, label_name(l), &id, NULL));
        if (id != l)
            _exit(3);
    }
}

static void pool_open(ctx *c, uint32_t num_labels)
{
    memset(c, 0, sizeof *c);
    c->num_labels = num_labels;
    rsp_pool_config cfg;
    pool_config(&cfg);
    SETUP(rsp_pool_create(&cfg, &c->pool, NULL));
    labels_intern(c);
}

/* ------------------------------------------------------------------------ */
/* Snapshots                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct label_snap {
    int32_t status;
    uint32_t num_rows, length;
    int32_t slot[SNAP_ROWS];
    uint8_t has[SNAP_ROWS];
    uint64_t gen[SNAP_ROWS];
} label_snap;

typedef struct plan_snap {
    uint8_t present;
    uint8_t staged;
    uint64_t step_id;
    label_snap label[SNAP_LABELS];
} plan_snap;

typedef struct hold_snap {
    int32_t status;
    int32_t index;
    uint8_t has_state;
    uint64_t generation;
} hold_snap;

typedef struct snapshot {
    int32_t stats_status;
    rsp_stats stats;
    rsp_admit_outcome admit;
    uint32_t num_rids, num_labels;
    rsp_rid rids[SNAP_RIDS];
    hold_snap hold[SNAP_RIDS][SNAP_LABELS];
    float storage[MAX_SLOTS * SLOT_FLOATS];
    plan_snap live, staged;
} snapshot;

static uint32_t scenario_rids(const ctx *c, rsp_rid *out)
{
    uint32_t n = 0;
    for (rsp_rid r = A; r <= H; r++)
        out[n++] = r;
    if (c->many)
        for (uint32_t i = 0; i < MANY_COUNT; i++)
            out[n++] = MANY_FIRST + i;
    return n;
}

/* Everything posted before has been handled, and every device job it
 * queued has run (the host device's blocks may be read directly then). */
static void device_sync(ctx *c)
{
    (void)rsp_barrier(c->pool, NULL); /* RSP_EDEVICE on a broken pool: fine */
    float tmp[SLOT_FLOATS];
    (void)rsp__device_read(c->pool->dev, 0, 0, 0, tmp, NULL);
}

static float *storage(ctx *c)
{
    rsp_block_view v;
    if (rsp_pool_block(c->pool, "s", 0, &v, NULL) != RSP_OK)
        _exit(3);
    return v.data;
}

static void holdings(ctx *c, snapshot *s)
{
    /* Pipelined: post every query, then collect the answers. */
    static rsp_ticket *tickets[SNAP_RIDS][SNAP_LABELS];
    for (uint32_t i = 0; i < s->num_rids; i++)
        for (uint32_t l = 0; l < s->num_labels; l++) {
            rsp_msg m = {.kind = RSP_MSG_HOLDING, .rid = s->rids[i], .label = l};
            SETUP(rsp_post(c->pool, &m, &tickets[i][l], RSP_WAIT_FOREVER, NULL));
        }
    for (uint32_t i = 0; i < s->num_rids; i++)
        for (uint32_t l = 0; l < s->num_labels; l++) {
            rsp_reply r;
            rsp_status st = rsp_wait(tickets[i][l], RSP_WAIT_FOREVER, &r);
            hold_snap *h = &s->hold[i][l];
            h->status = (int32_t)st;
            if (st == RSP_OK) {
                h->index = r.holding.index;
                h->has_state = r.holding.has_state;
                h->generation = r.holding.generation;
            }
        }
}

static void plan_of(const rsp_plan *plan, uint32_t num_labels, plan_snap *p)
{
    if (!plan)
        return;
    p->present = 1;
    p->staged = rsp_plan_is_staged(plan);
    p->step_id = rsp_plan_step_id(plan);
    for (uint32_t l = 0; l < num_labels; l++) {
        rsp_addressing a;
        label_snap *ls = &p->label[l];
        ls->status = (int32_t)rsp_plan_addressing(plan, l, &a, NULL);
        if (ls->status != RSP_OK)
            continue;
        ls->num_rows = a.num_rows;
        ls->length = a.length;
        for (uint32_t i = 0; i < a.length && i < SNAP_ROWS; i++) {
            ls->slot[i] = a.slot_indices[i];
            ls->has[i] = a.has_state[i];
        }
        for (uint32_t i = 0; i < a.num_rows && i < SNAP_ROWS; i++)
            ls->gen[i] = a.generations[i];
    }
}

static void snapshot_take(ctx *c, snapshot *s)
{
    memset(s, 0, sizeof *s);
    s->admit = c->admit;
    rsp_stats st;
    s->stats_status = (int32_t)rsp_stats_snapshot(c->pool, &st, NULL);
    if (s->stats_status == RSP_OK) {
        st.messages_handled = 0; /* every query is a message */
        st.inbox_depth = 0;
        s->stats = st;
    }
    s->num_rids = scenario_rids(c, s->rids);
    s->num_labels = c->num_labels;
    holdings(c, s);
    if (c->blocked) {
        memcpy(s->storage, c->at_block, sizeof s->storage); /* the device is held */
    } else {
        device_sync(c);
        memcpy(s->storage, storage(c), sizeof s->storage);
    }
    SETUP(rsp_read_begin());
    plan_of(rsp_plan_live(c->pool), c->num_labels, &s->live);
    plan_of(rsp_plan_staged(c->pool), c->num_labels, &s->staged);
    rsp_read_end();
}

/* Paint every held slot of the scenario's rids with a pattern of its own,
 * as a forward would have written it: a COPY or ZERO that should not have
 * happened (or should have) shows in the storage. After device_sync. */
static void paint(ctx *c)
{
    snapshot *s = malloc(sizeof *s);
    if (!s)
        _exit(3);
    snapshot_take(c, s);
    float *data = storage(c);
    for (uint32_t i = 0; i < s->num_rids; i++)
        for (uint32_t l = 0; l < s->num_labels; l++)
            if (s->hold[i][l].status == RSP_OK) {
                float *p = data + (size_t)s->hold[i][l].index * SLOT_FLOATS;
                p[0] = (float)s->rids[i] + 0.5f;
                p[1] = (float)l + 0.25f;
                p[2] = 7.0f;
                p[3] = (float)s->hold[i][l].index;
            }
    free(s);
}

/* Hold the device: a capture step committed behind an event that only
 * unblock_device() signals. The last step of a setup (after paint). */
static void block_device(ctx *c)
{
    device_sync(c);
    memcpy(c->at_block, storage(c), sizeof c->at_block);
    SETUP(rsp_host_fence_create(&c->gate, NULL));
    tracked *t = decl(c, MAX_TRACKED - 1, 900);
    t->step.capture = true;
    row(t, H, 0);
    admit_ok(c, t);
    rsp_event ev = rsp_event_host(c->gate, 1);
    SETUP(rsp_step_commit(c->pool, &t->step, &ev, NULL));
    t->used = false;
    c->blocked = true;
}

static void unblock_device(ctx *c)
{
    if (!c->blocked)
        return;
    rsp_host_fence_signal(c->gate, 1);
    c->blocked = false;
}

/* Print where two snapshots differ (at most a few lines each); returns the
 * number of differences. */
static uint32_t snapshot_diff(const char *what, const snapshot *want, const snapshot *got)
{
    uint32_t n = 0;
#define DIFF(cond, ...)                                                                            \
    do {                                                                                           \
        if (cond) {                                                                                \
            if (n < 24)                                                                            \
                fprintf(stderr, "    %s: ", what), fprintf(stderr, __VA_ARGS__),                   \
                    fprintf(stderr, "\n");                                                         \
            n++;                                                                                   \
        }                                                                                          \
    } while (0)
#define STAT(f)                                                                                    \
    DIFF(want->stats.f != got->stats.f, "stats." #f ": expected %llu, got %llu",                   \
         (unsigned long long)want->stats.f, (unsigned long long)got->stats.f)
    DIFF(want->stats_status != got->stats_status, "rsp_stats_snapshot: expected %s, got %s",
         rsp_strerror(want->stats_status), rsp_strerror(got->stats_status));
    STAT(free_slots);
    STAT(held_slots);
    STAT(pending_release);
    STAT(num_requests);
    STAT(num_holdings);
    STAT(admits_ok);
    STAT(admits_refused);
    STAT(rollbacks);
    STAT(plans);
    STAT(stages);
    STAT(promotions);
    STAT(commits);
    STAT(forks);
    STAT(bytes_zeroed);
    STAT(bytes_copied);
    STAT(generation);
#undef STAT
    DIFF(want->admit.ok != got->admit.ok || want->admit.free != got->admit.free ||
             want->admit.slots_short != got->admit.slots_short,
         "admit outcome: expected ok %d free %u short %u, got ok %d free %u short %u",
         want->admit.ok, want->admit.free, want->admit.slots_short, got->admit.ok, got->admit.free,
         got->admit.slots_short);
    for (uint32_t i = 0; i < want->num_rids && i < got->num_rids; i++)
        for (uint32_t l = 0; l < want->num_labels; l++) {
            const hold_snap *x = &want->hold[i][l], *y = &got->hold[i][l];
            DIFF(x->status != y->status || x->index != y->index || x->has_state != y->has_state ||
                     x->generation != y->generation,
                 "holding (rid %llu, %s): expected %s slot %d state %d gen %llu, got %s slot %d "
                 "state %d gen %llu",
                 (unsigned long long)want->rids[i], label_name(l),
                 x->status == RSP_OK ? "held" : "none", x->index, x->has_state,
                 (unsigned long long)x->generation, y->status == RSP_OK ? "held" : "none", y->index,
                 y->has_state, (unsigned long long)y->generation);
        }
    for (uint32_t s = 0; s < MAX_SLOTS; s++) {
        const float *x = want->storage + s * SLOT_FLOATS, *y = got->storage + s * SLOT_FLOATS;
        DIFF(memcmp(x, y, SLOT_FLOATS * sizeof *x) != 0,
             "slot %u bytes: expected {%g %g %g %g}, got {%g %g %g %g}", s, x[0], x[1], x[2], x[3],
             y[0], y[1], y[2], y[3]);
    }
    for (int k = 0; k < 2; k++) {
        const plan_snap *x = k ? &want->staged : &want->live, *y = k ? &got->staged : &got->live;
        const char *which = k ? "staged plan" : "live plan";
        DIFF(x->present != y->present || x->step_id != y->step_id || x->staged != y->staged,
             "%s: expected %s step %llu, got %s step %llu", which, x->present ? "" : "none",
             (unsigned long long)x->step_id, y->present ? "" : "none",
             (unsigned long long)y->step_id);
        for (uint32_t l = 0; l < want->num_labels; l++) {
            const label_snap *a = &x->label[l], *b = &y->label[l];
            DIFF(memcmp(a, b, sizeof *a) != 0,
                 "%s, label %s: addressing differs (status %s/%s, rows %u/%u, length %u/%u, first "
                 "slot %d/%d)",
                 which, label_name(l), rsp_strerror(a->status), rsp_strerror(b->status),
                 a->num_rows, b->num_rows, a->length, b->length, a->slot[0], b->slot[0]);
        }
    }
    if (n > 24)
        fprintf(stderr, "    %s: ... %u differences in all\n", what, n);
#undef DIFF
    return n;
}

/* Slot invariants once every step is finished (the follow-up does that). */
static void check_invariants(ctx *c, const snapshot *s)
{
    rsp_pool_info info;
    SETUP(rsp_pool_info_get(c->pool, &info, NULL));
    const rsp_stats *st = &s->stats;
    uint32_t sink = info.sink ? 1 : 0;
    if (s->stats_status != RSP_OK) {
        finding("invariants: rsp_stats_snapshot answered %s", rsp_strerror(s->stats_status));
        return;
    }
    if (st->free_slots + st->held_slots + st->pending_release + sink != info.max_slots)
        finding("invariants: free %u + held %u + pending %u + sink %u != max_slots %u",
                st->free_slots, st->held_slots, st->pending_release, sink, info.max_slots);
    if (st->held_slots != st->num_holdings)
        finding("invariants: held_slots %u != num_holdings %u", st->held_slots, st->num_holdings);
    if (st->pending_release != 0)
        finding("invariants: %u slots pending release with no step in flight", st->pending_release);
    static uint8_t held[MAX_SLOTS];
    memset(held, 0, sizeof held);
    uint32_t num_held = 0;
    for (uint32_t i = 0; i < s->num_rids; i++)
        for (uint32_t l = 0; l < s->num_labels; l++) {
            const hold_snap *h = &s->hold[i][l];
            if (h->status != RSP_OK)
                continue;
            if (h->index < (int32_t)sink || h->index >= (int32_t)MAX_SLOTS) {
                finding("invariants: (rid %llu, %s) holds slot %d, out of range",
                        (unsigned long long)s->rids[i], label_name(l), h->index);
                continue;
            }
            if (held[h->index]++)
                finding("invariants: slot %d is held twice", h->index);
            num_held++;
        }
    if (num_held != st->held_slots)
        finding("invariants: the rids hold %u slots, stats say %u held", num_held, st->held_slots);
    for (uint32_t slot = sink; slot < MAX_SLOTS; slot++) {
        if (held[slot])
            continue;
        const float *p = s->storage + slot * SLOT_FLOATS;
        if (p[0] != 0.0f || p[1] != 0.0f || p[2] != 0.0f || p[3] != 0.0f)
            finding("invariants: free slot %u does not read zero: {%g %g %g %g}", slot, p[0], p[1],
                    p[2], p[3]);
    }
}

/* ------------------------------------------------------------------------ */
/* The follow-up: finish every step, then a fresh step, a remove, a reset    */
/* ------------------------------------------------------------------------ */

static void follow_up(ctx *c)
{
    SETUP(rsp_step_unstage(c->pool, NULL));
    for (uint32_t k = 0; k < MAX_TRACKED; k++) {
        tracked *t = &c->steps[k];
        if (!t->used)
            continue;
        if (t->planned) {
            commit_ok(c, t);
        } else {
            SETUP(rsp_step_rollback(c->pool, t->step.step_id, NULL, NULL));
            t->used = false;
        }
    }
    tracked *t = decl(c, 0, 1000);
    row(t, A, 0);
    row(t, E, 0);
    row(t, B, 1);
    pre(t, 0, 2);
    post(t, 0, 3);
    admit_ok(c, t);
    plan_ok(c, t, false);
    commit_ok(c, t);
    SETUP(rsp_remove(c->pool, E, NULL));
    SETUP(rsp_reset(c->pool, A, false, NULL));
    device_sync(c);
}

/* ------------------------------------------------------------------------ */
/* Scenarios                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum scenario_kind { POOL_OP, CREATE, DESTROY } scenario_kind;

typedef struct scenario {
    const char *name;
    scenario_kind kind;
    bool many;       /* the rids 100..179 are part of it */
    uint32_t labels; /* labels interned (0: NUM_LABELS) */
    void (*setup)(ctx *);
    rsp_status (*op)(ctx *, rsp_error *); /* the armed call */
} scenario;

/* --- ingest: the rid table and the record array both grow ---------------- */

static void setup_ingest(ctx *c)
{
    for (uint32_t i = 0; i < 64; i++)
        SETUP(rsp_ingest(c->pool, MANY_FIRST + i, NULL));
}

static rsp_status op_ingest(ctx *c, rsp_error *e)
{
    return rsp_ingest(c->pool, MANY_FIRST + 64, e);
}

/* --- admit ------------------------------------------------------------------ */

static rsp_status op_admit_k(ctx *c, uint32_t k, rsp_error *e)
{
    rsp_status st = rsp_step_admit(c->pool, &c->steps[k].step, &c->admit, e);
    if (st == RSP_OK && c->admit.ok)
        c->steps[k].used = true;
    return st;
}

static rsp_status op_admit0(ctx *c, rsp_error *e)
{
    return op_admit_k(c, 0, e);
}

static rsp_status op_admit1(ctx *c, rsp_error *e)
{
    return op_admit_k(c, 1, e);
}

/* 72 rows: 2 known rids, 70 new ones (implicit ingest grows the rid table
 * twice and the record array once), with a pre- and a post-fork. */
static void setup_admit_ingest(ctx *c)
{
    SETUP(rsp_ingest(c->pool, A, NULL));
    hold_labels(c, 0, 1, B, 1);
    tracked *t = decl(c, 0, 2);
    row(t, A, 0);
    row(t, B, 0);
    for (uint32_t i = 0; i < 70; i++)
        row(t, MANY_FIRST + i, 0);
    pre(t, 0, 1);
    post(t, 0, 2);
    paint(c);
}

/* A and B hold 4 labels each (inline full); the step gives B a 5th by a
 * row, A a 5th and 6th by forks, and C 5 labels at once by rows. */
static void setup_admit_spill(ctx *c)
{
    hold_labels(c, 0, 1, A, 4);
    hold_labels(c, 0, 2, B, 4);
    paint(c);
    tracked *t = decl(c, 1, 3);
    row(t, A, 0);
    row(t, B, 4);
    for (uint32_t l = 0; l < 5; l++)
        row(t, C, l);
    pre(t, 0, 5);
    post(t, 0, 6);
}

/* --- plan ------------------------------------------------------------------- */

static rsp_status op_plan_k(ctx *c, uint32_t k, bool preplan, rsp_error *e)
{
    tracked *t = &c->steps[k];
    t->step.preplan = preplan;
    rsp_status st = rsp_step_plan(c->pool, &t->step, e);
    t->step.preplan = false;
    if (st == RSP_OK && !preplan)
        t->planned = true;
    return st;
}

static rsp_status op_plan1(ctx *c, rsp_error *e)
{
    return op_plan_k(c, 1, false, e);
}

static rsp_status op_preplan1(ctx *c, rsp_error *e)
{
    return op_plan_k(c, 1, true, e);
}

/* A first small step leaves an eager main buffer of 2 rows; step 2 has 71
 * rows on 2 labels (the buffer grows, a d1 buffer is created, the plan's
 * vectors grow) and forks: the pool's first COPYs. */
static void setup_plan_live(ctx *c)
{
    tracked *t = decl(c, 0, 1);
    row(t, A, 0);
    row(t, B, 0);
    admit_ok(c, t);
    plan_ok(c, t, false);
    commit_ok(c, t);
    t = decl(c, 1, 2);
    row(t, A, 0);
    row(t, B, 0);
    row(t, A, 1);
    for (uint32_t i = 0; i < 68; i++)
        row(t, MANY_FIRST + i, 0);
    pre(t, 0, 2);
    post(t, 0, 3);
    admit_ok(c, t);
    paint(c);
}

/* setup_plan_live with the device held: the plan's job is queued. */
static void setup_plan_busy(ctx *c)
{
    setup_plan_live(c);
    block_device(c);
}

/* Step 1 live and in flight; step 2 (70 rows, pre-forks deferred) staged. */
static void setup_plan_preplan(ctx *c)
{
    tracked *t = decl(c, 0, 1);
    row(t, A, 0);
    row(t, B, 0);
    row(t, A, 1);
    admit_ok(c, t);
    plan_ok(c, t, false);
    t = decl(c, 1, 2);
    row(t, A, 0);
    row(t, C, 0);
    row(t, C, 1);
    for (uint32_t i = 0; i < 67; i++)
        row(t, MANY_FIRST + i, 0);
    pre(t, 0, 2);
    admit_ok(c, t);
    paint(c);
}

/* A staged step with pre-forks goes live unchanged: its COPYs run now. */
static void setup_plan_promote(ctx *c)
{
    hold_labels(c, 0, 1, A, 2);
    tracked *t = decl(c, 1, 2);
    row(t, A, 0);
    row(t, B, 0);
    pre(t, 0, 1);
    post(t, 0, 2);
    admit_ok(c, t);
    plan_ok(c, t, true);
    paint(c);
}

/* Leased buffers created by the plan itself (no graph buffers built). */
static void setup_plan_leased(ctx *c)
{
    hold_labels(c, 0, 1, A, 2);
    tracked *t = decl(c, 1, 2);
    row(t, A, 0);
    row(t, B, 0);
    row(t, A, 1);
    pre(t, 0, 2);
    lease(t, 8, 0, 0);
    admit_ok(c, t);
    paint(c);
}

/* Graph buffers built first: the leased buffers take their length. */
static void setup_plan_leased_graph(ctx *c)
{
    SETUP(rsp_build_graph_buffers(c->pool, 48, 1024, NULL));
    setup_plan_leased(c);
}

/* A second step on the same lease: the buffers exist and are reused. */
static void setup_plan_leased_reuse(ctx *c)
{
    SETUP(rsp_build_graph_buffers(c->pool, 16, 1024, NULL));
    tracked *t = decl(c, 0, 1);
    row(t, A, 0);
    row(t, B, 0);
    lease(t, 16, 3, 1);
    admit_ok(c, t);
    plan_ok(c, t, false);
    commit_ok(c, t);
    t = decl(c, 1, 2);
    row(t, A, 0);
    row(t, B, 0);
    row(t, C, 0);
    pre(t, 0, 1);
    lease(t, 16, 3, 1);
    admit_ok(c, t);
    paint(c);
}

/* --- graph buffers ----------------------------------------------------------- */

static void setup_graph_buffers(ctx *c)
{
    hold_labels(c, 0, 1, A, 3);
    paint(c);
}

static rsp_status op_clear_preplan(ctx *c, rsp_error *e)
{
    return rsp_step_unstage(c->pool, e);
}

static rsp_status op_graph_buffers(ctx *c, rsp_error *e)
{
    return rsp_build_graph_buffers(c->pool, 64, 4096, e);
}

/* --- commit ------------------------------------------------------------------ */

static rsp_status op_commit_k(ctx *c, uint32_t k, const rsp_event *ev, rsp_error *e)
{
    tracked *t = &c->steps[k];
    rsp_status st = rsp_step_commit(c->pool, &t->step, ev, e);
    if (st == RSP_OK)
        t->used = t->planned = false;
    return st;
}

static rsp_status op_commit1(ctx *c, rsp_error *e)
{
    return op_commit_k(c, 1, &forward_complete, e);
}

/* Step 2 planned with two post-forks (the pool's first COPYs happen at its
 * commit); C was removed while step 2 addresses it (zeroed at the commit). */
static void setup_commit(ctx *c)
{
    hold_labels(c, 0, 1, A, 2);
    tracked *t = decl(c, 1, 2);
    row(t, A, 0);
    row(t, B, 0);
    row(t, C, 0);
    post(t, 0, 1);
    post(t, 0, 2);
    admit_ok(c, t);
    plan_ok(c, t, false);
    paint(c);
    SETUP(rsp_remove(c->pool, C, NULL));
}

/* The same, with a host fence as forward_done (signalled already). */
static void setup_commit_fence(ctx *c)
{
    setup_commit(c);
    SETUP(rsp_host_fence_create(&c->fence, NULL));
    rsp_host_fence_signal(c->fence, 1);
}

static rsp_status op_commit1_fence(ctx *c, rsp_error *e)
{
    rsp_event ev = rsp_event_host(c->fence, 1);
    return op_commit_k(c, 1, &ev, e);
}

/* setup_commit with the device held: the commit's job is queued. */
static void setup_commit_busy(ctx *c)
{
    setup_commit(c);
    block_device(c);
}

/* A capture step: admitted, committed, nothing recorded. */
static void setup_commit_capture(ctx *c)
{
    hold_labels(c, 0, 1, A, 2);
    tracked *t = decl(c, 1, 2);
    t->step.capture = true;
    row(t, A, 0);
    row(t, B, 0);
    admit_ok(c, t);
    paint(c);
}

/* Overlap: step 1 (A and B, a post-fork into label 1 of both) planned;
 * step 2 admitted again with other rows (A and B, then 40 new rids): the
 * re-admit keeps its admitted rows aside until it knows it fits, and its
 * fresh holdings join. */
static void setup_readmit(ctx *c)
{
    tracked *t = decl(c, 0, 1);
    row(t, A, 0);
    row(t, B, 0);
    post(t, 0, 1);
    admit_ok(c, t);
    plan_ok(c, t, false);
    t = decl(c, 1, 2);
    row(t, A, 0);
    admit_ok(c, t);
    row(t, B, 0);
    for (uint32_t i = 0; i < 40; i++)
        row(t, MANY_FIRST + i, 0);
    paint(c);
}

/* Overlap: steps 1 and 2 planned on the same rows (step 2's plan counts
 * step 1's writes); the commit of step 1, with step 2 in flight. */
static void setup_commit_overlap(ctx *c)
{
    hold_labels(c, 0, 1, A, 2);
    tracked *t = decl(c, 0, 2);
    row(t, A, 0);
    row(t, B, 0);
    row(t, C, 0);
    post(t, 1, 2);
    admit_ok(c, t);
    plan_ok(c, t, false);
    t = decl(c, 1, 3);
    row(t, A, 0);
    row(t, B, 0);
    row(t, C, 0);
    admit_ok(c, t);
    plan_ok(c, t, false);
    paint(c);
}

static rsp_status op_commit0(ctx *c, rsp_error *e)
{
    return op_commit_k(c, 0, &forward_complete, e);
}

/* --- rollback ---------------------------------------------------------------- */

static rsp_status op_rollback1(ctx *c, rsp_error *e)
{
    tracked *t = &c->steps[1];
    rsp_status st = rsp_step_rollback(c->pool, t->step.step_id, NULL, e);
    if (st == RSP_OK)
        t->used = t->planned = false;
    return st;
}

/* Step 2 planned: fresh holdings for D (journaled), a pre-fork COPY. */
static void setup_rollback(ctx *c)
{
    hold_labels(c, 0, 1, A, 2);
    tracked *t = decl(c, 1, 2);
    row(t, A, 0);
    row(t, D, 0);
    row(t, D, 1);
    pre(t, 0, 2);
    post(t, 0, 3);
    admit_ok(c, t);
    plan_ok(c, t, false);
    paint(c);
}

/* Step 2 planned with 40 fresh holdings (D and E, 20 labels each), the
 * device held: the rollback's 40 zeros go to a queued device job. */
static void setup_rollback_wide(ctx *c)
{
    hold_labels(c, 0, 1, A, 2);
    tracked *t = decl(c, 1, 2);
    row(t, A, 0);
    for (uint32_t l = 0; l < 20; l++) {
        row(t, D, l);
        row(t, E, l);
    }
    admit_ok(c, t);
    plan_ok(c, t, false);
    paint(c);
    block_device(c);
}

/* setup_rollback, with a host fence (signalled) as forward_done. */
static void setup_rollback_fence(ctx *c)
{
    setup_rollback(c);
    SETUP(rsp_host_fence_create(&c->fence, NULL));
    rsp_host_fence_signal(c->fence, 1);
}

static rsp_status op_rollback1_fence(ctx *c, rsp_error *e)
{
    tracked *t = &c->steps[1];
    rsp_event ev = rsp_event_host(c->fence, 1);
    rsp_status st = rsp_step_rollback(c->pool, t->step.step_id, &ev, e);
    if (st == RSP_OK)
        t->used = t->planned = false;
    return st;
}

/* --- reset and remove --------------------------------------------------------- */

/* A holds 6 labels (spilled); step 2 (planned) addresses A's main and d1. */
static void setup_reset(ctx *c)
{
    hold_labels(c, 0, 1, A, 6);
    hold_labels(c, 0, 2, B, 2);
    tracked *t = decl(c, 1, 3);
    row(t, A, 0);
    row(t, A, 1);
    row(t, B, 0);
    admit_ok(c, t);
    plan_ok(c, t, false);
    paint(c);
}

/* A holds 20 labels, the device is held: the reset's or remove's device
 * job is queued (allocated), not run inline. */
static void setup_reset_wide(ctx *c)
{
    hold_labels(c, 0, 1, A, 20);
    hold_labels(c, 0, 2, B, 2);
    tracked *t = decl(c, 1, 3);
    row(t, A, 0);
    row(t, B, 0);
    admit_ok(c, t);
    plan_ok(c, t, false);
    paint(c);
    block_device(c);
}

static rsp_status op_reset(ctx *c, rsp_error *e)
{
    return rsp_reset(c->pool, A, false, e);
}

static rsp_status op_reset_free(ctx *c, rsp_error *e)
{
    return rsp_reset(c->pool, A, true, e);
}

static rsp_status op_remove(ctx *c, rsp_error *e)
{
    return rsp_remove(c->pool, A, e);
}

/* --- label -------------------------------------------------------------------- */

static void setup_label(ctx *c)
{
    hold_labels(c, 0, 1, A, 2);
    paint(c);
}

static rsp_status op_label(ctx *c, rsp_error *e)
{
    rsp_label_id id;
    return rsp_label(c->pool, "d7", &id, e);
}

/* A call while a ticket of this thread is still out (a pipelined engine's
 * second post): the thread's spare ticket went to the first, so the
 * second's ticket is allocated, a fault point (RSP_ENOMEM, nothing
 * posted); the first is collected either way. */
static rsp_status op_label_behind_a_post(ctx *c, rsp_error *e)
{
    rsp_msg m = {.kind = RSP_MSG_BARRIER};
    rsp_ticket *t = NULL;
    rsp_status st = rsp_post(c->pool, &m, &t, RSP_WAIT_FOREVER, e);
    if (st != RSP_OK)
        return st;
    st = op_label(c, e);
    static rsp_reply r; /* large; not an allocation of the armed window */
    rsp_status w = rsp_wait(t, RSP_WAIT_FOREVER, &r);
    if (st == RSP_OK && w != RSP_OK) {
        *e = r.error;
        st = w;
    }
    return st;
}

/* --- import (docs/semantics.md 9.4) ------------------------------------------ */

/* The header of A's 6 holdings, exported from the same pool and closed,
 * and the import the op opened (reachable: LeakSanitizer does not count
 * it; the child ends with it open). */
#define IMPORT_RID H
static rsp_xfer_header import_header;
static rsp_import *import_open;

static void setup_import(ctx *c)
{
    hold_labels(c, 0, 1, A, 6);
    rsp_export_spec spec;
    rsp_export_spec_init(&spec);
    spec.rid = A;
    rsp_export *e = NULL;
    SETUP(rsp_export_open(c->pool, &spec, &e, NULL));
    import_header = *rsp_export_header(e);
    SETUP(rsp_export_close(e, NULL));
    paint(c);
}

/* A new rid with 6 labels: its record, a spill array, the slots. */
static rsp_status op_import_begin(ctx *c, rsp_error *e)
{
    return rsp_import_begin(c->pool, &import_header, IMPORT_RID, 0, &import_open, e);
}

static void setup_import_abort(ctx *c)
{
    setup_import(c);
    SETUP(rsp_import_begin(c->pool, &import_header, IMPORT_RID, 0, &import_open, NULL));
}

/* The abort's zeroes: work list room and the device's job. */
static rsp_status op_import_abort(ctx *c, rsp_error *e)
{
    (void)c;
    rsp_status st = rsp_import_abort(import_open, 0, e);
    if (st == RSP_OK)
        import_open = NULL;
    return st;
}

/* --- destroy: a pool with everything in it -------------------------------------- */

static void setup_destroy(ctx *c)
{
    SETUP(rsp_build_graph_buffers(c->pool, 8, 64, NULL));
    hold_labels(c, 0, 1, A, 5);
    tracked *t = decl(c, 0, 2);
    row(t, A, 0);
    row(t, B, 0);
    pre(t, 0, 1);
    post(t, 0, 2);
    lease(t, 8, 0, 0);
    admit_ok(c, t);
    plan_ok(c, t, false);
    t = decl(c, 1, 3);
    row(t, C, 0);
    row(t, D, 0);
    admit_ok(c, t);
    plan_ok(c, t, true);
    SETUP(rsp_remove(c->pool, B, NULL)); /* pending until step 2 ends */
    /* A plan referenced and dropped by a reader: retired plans wait in the
     * publisher's batch or in call_rcu when the destroy starts. */
    SETUP(rsp_read_begin());
    const rsp_plan *p = rsp_plan_ref(rsp_plan_live(c->pool));
    rsp_read_end();
    rsp_plan_unref(p);
}

/* --- the harness's self-test ------------------------------------------------- */

/* Three fault points (three blocks of its own: a synchronous call's
 * ticket is the thread's spare after the set-up's calls, no allocation)
 * and a barrier, no state change. */
static rsp_status op_selftest(ctx *c, rsp_error *e)
{
    for (int i = 0; i < 3; i++) {
        void *volatile b = malloc(64);
        if (!b) {
            e->status = RSP_ENOMEM;
            snprintf(e->message, sizeof e->message, "selftest: block %d", i);
            return RSP_ENOMEM;
        }
        free(b);
    }
    return rsp_barrier(c->pool, e);
}

/* After the call: N = 2 leaks a block, N = 3 aborts. */
static void selftest_plant(uint64_t n)
{
    static void *volatile keep;
    if (n == 2) {
        keep = malloc(100);
        if (keep) /* forget it: a leak */
            keep = NULL;
    }
    if (n == 3)
        abort();
}

static const scenario selftest = {"selftest", POOL_OP, false, 0, setup_label, op_selftest};

/* ------------------------------------------------------------------------ */

static const scenario scenarios[] = {
    {"create_first", CREATE, false, 0, NULL, NULL},
    {"create", CREATE, false, 0, NULL, NULL},
    {"create_ckpt", CREATE, false, 0, NULL, NULL},
    {"ingest", POOL_OP, true, 0, setup_ingest, op_ingest},
    {"label", POOL_OP, false, 0, setup_label, op_label},
    {"label_behind_a_post", POOL_OP, false, 0, setup_label, op_label_behind_a_post},
    {"admit_ingest_many", POOL_OP, true, 0, setup_admit_ingest, op_admit0},
    {"admit_spill", POOL_OP, false, 0, setup_admit_spill, op_admit1},
    {"plan_live", POOL_OP, true, 0, setup_plan_live, op_plan1},
    {"plan_busy", POOL_OP, true, 0, setup_plan_busy, op_plan1},
    {"plan_preplan", POOL_OP, true, 0, setup_plan_preplan, op_preplan1},
    {"clear_preplan", POOL_OP, false, 0, setup_plan_promote, op_clear_preplan},
    {"plan_promote", POOL_OP, false, 0, setup_plan_promote, op_plan1},
    {"plan_leased", POOL_OP, false, 0, setup_plan_leased, op_plan1},
    {"plan_leased_graph", POOL_OP, false, 0, setup_plan_leased_graph, op_plan1},
    {"plan_leased_reuse", POOL_OP, false, 0, setup_plan_leased_reuse, op_plan1},
    {"graph_buffers", POOL_OP, false, 0, setup_graph_buffers, op_graph_buffers},
    {"commit", POOL_OP, false, 0, setup_commit, op_commit1},
    {"commit_fence", POOL_OP, false, 0, setup_commit_fence, op_commit1_fence},
    {"commit_busy", POOL_OP, false, 0, setup_commit_busy, op_commit1},
    {"commit_capture", POOL_OP, false, 0, setup_commit_capture, op_commit1},
    {"readmit", POOL_OP, false, 0, setup_readmit, op_admit1},
    {"commit_overlap", POOL_OP, false, 0, setup_commit_overlap, op_commit0},
    {"rollback", POOL_OP, false, 0, setup_rollback, op_rollback1},
    {"rollback_fence", POOL_OP, false, 0, setup_rollback_fence, op_rollback1_fence},
    {"rollback_busy", POOL_OP, false, WIDE_LABELS, setup_rollback_wide, op_rollback1},
    {"reset", POOL_OP, false, 0, setup_reset, op_reset},
    {"reset_free", POOL_OP, false, 0, setup_reset, op_reset_free},
    {"remove", POOL_OP, false, 0, setup_reset, op_remove},
    {"reset_busy", POOL_OP, false, WIDE_LABELS, setup_reset_wide, op_reset},
    {"reset_free_busy", POOL_OP, false, WIDE_LABELS, setup_reset_wide, op_reset_free},
    {"remove_busy", POOL_OP, false, WIDE_LABELS, setup_reset_wide, op_remove},
    {"import_begin", POOL_OP, false, 0, setup_import, op_import_begin},
    {"import_abort", POOL_OP, false, 0, setup_import_abort, op_import_abort},
    {"destroy", DESTROY, false, 0, setup_destroy, NULL},
};
#define NUM_SCENARIOS (sizeof scenarios / sizeof scenarios[0])

/* ------------------------------------------------------------------------ */
/* One (operation, N): runs in a child                                        */
/* ------------------------------------------------------------------------ */

#define RESULT_MAGIC 0x46415554u

typedef struct step_result {
    uint32_t magic;
    uint8_t fired, on_caller, broke, recovered;
    char what[24];
    uint64_t size;
    uint64_t count; /* fault points seen in the armed window */
    int32_t status; /* of the armed call (CREATE: create; DESTROY: RSP_OK) */
    uint32_t findings;
    uint64_t text_begin, text_end; /* its part of the child's output */
} step_result;

/* The reference run of the current sweep: written by its child, read by
 * the parent, inherited by every later child through fork. */
typedef struct reference {
    step_result r;
    snapshot before, after, follow;
} reference;

static reference ref;
static bool have_ref;
/* The N being run (the harness's self-test plants its faults by it), and
 * the failing Ns of the last sweep (the self-test checks them). */
static uint64_t current_n;
static uint64_t failed_ns[64];
static uint32_t num_failed_ns;
static bool verbose;
/* RSP_EDEVICE (a broken pool) counts as a failure: everything the core and
 * the host device allocate is reserved before the core changes state
 * ("reserve first, then apply"), so an allocation failure is a
 * clean RSP_ENOMEM. RSP_FAULT_STRICT=0 accepts it (a device that reserves
 * nothing ahead, such as the CUDA device today, breaks the pool instead). */
static bool strict = true;

static int thread_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The names of the process's threads ("rsp-owner, ..."): says which one
 * was left running. */
static const char *thread_names(void)
{
    static char out[512];
    out[0] = '\0';
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return out;
    struct dirent *e;
    size_t len = 0;
    while ((e = readdir(d)) != NULL && len < sizeof out - 40) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], name[32] = "?";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(name, sizeof name, f))
                name[strcspn(name, "\n")] = '\0';
            fclose(f);
        }
        len += (size_t)snprintf(out + len, sizeof out - len, "%s%s", len ? ", " : "", name);
    }
    closedir(d);
    return out;
}

/* Joined threads leave /proc/self/task shortly after the join returns:
 * wait for the count to come back (a thread left running never does). */
static bool threads_back_to(int base)
{
    for (int i = 0; i < 1000; i++) {
        if (thread_count() <= base)
            return true;
        usleep(2000);
    }
    return false;
}

static void record_hit(step_result *res, uint64_t count)
{
    const fault_hit *hit = fault_last_hit();
    res->count = count;
    res->fired = hit->fired;
    res->on_caller = hit->on_arming_thread;
    res->size = hit->size;
    if (hit->what)
        snprintf(res->what, sizeof res->what, "%s", hit->what);
}

/* What a usable pool must still do: a step with forks, a remove, a reset;
 * then the slot invariants. */
static void quick_check(rsp_pool *pool)
{
    static ctx q;
    memset(&q, 0, sizeof q);
    q.pool = pool;
    labels_intern(&q);
    SETUP(rsp_reader_register(NULL));
    follow_up(&q);
    static snapshot s;
    snapshot_take(&q, &s);
    check_invariants(&q, &s);
    rsp_reader_unregister();
}

static void child_pool_op(const scenario *sc, uint64_t n, step_result *res, reference *out)
{
    static ctx cx;
    static snapshot before, after, again, follow;
    const bool cmp = have_ref && !out;
    const int base = thread_count();
    pool_open(&cx, sc->labels);
    cx.many = sc->many;
    SETUP(rsp_reader_register(NULL));
    sc->setup(&cx);
    if (!cx.blocked)
        device_sync(&cx);
    snapshot_take(&cx, &before);
    if (cmp && snapshot_diff("setup, against the reference run", &ref.before, &before))
        finding("the setup differs from the reference run's (the test is not deterministic)");

    rsp_error err;
    memset(&err, 0, sizeof err);
    fault_arm(n);
    rsp_status st = sc->op(&cx, &err);
    record_hit(res, fault_disarm());
    res->status = (int32_t)st;
    const fault_hit *hit = fault_last_hit();
    unblock_device(&cx);

    snapshot_take(&cx, &after);
    bool usable = true;
    if (!hit->fired) {
        if (st != RSP_OK) {
            finding("%s answered %s (%s) with no allocation failing", sc->name, rsp_strerror(st),
                    err.message);
            usable = false;
        } else if (cmp && snapshot_diff("after the call", &ref.after, &after)) {
            finding("with no allocation failing, the state differs from the reference run's");
        }
    } else if (st == RSP_OK) {
        if (cmp && snapshot_diff("after the call", &ref.after, &after))
            finding("answered RSP_OK although %s #%llu failed, but the state is not the "
                    "fault-free run's",
                    res->what, (unsigned long long)n);
    } else if (st == RSP_ENOMEM) {
        if (err.status != RSP_ENOMEM || err.message[0] == '\0')
            finding("RSP_ENOMEM without its message (err.status %s)", rsp_strerror(err.status));
        if (snapshot_diff("after RSP_ENOMEM, against before", &before, &after))
            finding("answered RSP_ENOMEM (%s) but the state changed", err.message);
        memset(&err, 0, sizeof err);
        rsp_status st2 = sc->op(&cx, &err);
        res->recovered = st2 == RSP_OK;
        if (st2 != RSP_OK) {
            finding("the call again, with allocations succeeding: %s (%s)", rsp_strerror(st2),
                    err.message);
            usable = st2 != RSP_EDEVICE;
        } else {
            snapshot_take(&cx, &again);
            if (cmp && snapshot_diff("the call again", &ref.after, &again))
                finding("the call again, with allocations succeeding, does not give the "
                        "fault-free run's state");
        }
    } else if (st == RSP_EDEVICE) {
        usable = false;
        res->broke = 1;
        if (strict)
            finding("RSP_EDEVICE, the pool broken (%s); RSP_FAULT_STRICT wants RSP_ENOMEM with "
                    "nothing changed",
                    err.message);
        if (!strstr(err.message, "broken"))
            finding("RSP_EDEVICE, but the message does not say the pool is broken: %s",
                    err.message);
        rsp_error e2;
        rsp_status b = rsp_barrier(cx.pool, &e2);
        if (b != RSP_EDEVICE)
            finding("the pool answered RSP_EDEVICE, then a barrier answered %s", rsp_strerror(b));
    } else {
        finding("%s answered %s (%s): out of memory must be RSP_ENOMEM, or RSP_EDEVICE with the "
                "pool broken",
                sc->name, rsp_strerror(st), err.message);
        usable = false;
    }
    if (usable) {
        follow_up(&cx);
        snapshot_take(&cx, &follow);
        check_invariants(&cx, &follow);
        if (cmp && snapshot_diff("after the follow-up", &ref.follow, &follow))
            finding("the follow-up does not give the fault-free run's state");
    }
    rsp_reader_unregister();
    rsp_pool_destroy(cx.pool);
    rsp_host_fence_destroy(cx.fence);
    rsp_host_fence_destroy(cx.gate);
    if (!threads_back_to(base))
        finding("%d threads still run after rsp_pool_destroy (%d before the pool): %s",
                thread_count(), base, thread_names());
    if (out) {
        out->before = before;
        out->after = after;
        out->follow = follow;
    }
}

/* create_ckpt's pool: checkpoint slots on both tiers, so the readers' key
 * index is made too, enough of them that its bucket array is a mapping
 * (rsp__lazy_calloc: 65,536 buckets, 512 KiB). After a create: an absent
 * key's lookup answers RSP_ENOKEY (the index is there and empty). */
#define CKPT_DEVICE 32768u
#define CKPT_HOST 8u

static void ckpt_lookup_check(rsp_pool *pool)
{
    SETUP(rsp_reader_register(NULL));
    rsp_read_begin();
    rsp_checkpoint_loc loc;
    rsp_status st = rsp_checkpoint_lookup(pool, 12345, &loc, NULL);
    rsp_read_end();
    rsp_reader_unregister();
    if (st != RSP_ENOKEY)
        finding("rsp_checkpoint_lookup of an absent key on a new pool answered %s",
                rsp_strerror(st));
}

static void child_create(const scenario *sc, uint64_t n, step_result *res)
{
    const bool ckpt = strcmp(sc->name, "create_ckpt") == 0;
    rsp_pool_config cfg;
    pool_config(&cfg);
    if (ckpt) {
        cfg.max_checkpoints = CKPT_DEVICE;
        cfg.max_host_checkpoints = CKPT_HOST;
    }
    if (strcmp(sc->name, "create") == 0 || ckpt) {
        /* A process that has had a pool before (liburcu initialised). */
        rsp_pool *warm = NULL;
        SETUP(rsp_pool_create(&cfg, &warm, NULL));
        rsp_pool_destroy(warm);
    }
    const int base = thread_count();
    rsp_pool *pool = (rsp_pool *)&cfg; /* must be overwritten */
    rsp_error err;
    memset(&err, 0, sizeof err);
    if (ckpt)
        fault_mmap(true); /* mmap a fault point; its bytes counted */
    const int64_t mapped = fault_mapped_bytes();
    fault_arm(n);
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    record_hit(res, fault_disarm());
    const int64_t left_mapped = fault_mapped_bytes() - mapped;
    res->status = (int32_t)st;
    if (st == RSP_OK) {
        fault_mmap(false);
        if (!pool) {
            finding("rsp_pool_create answered RSP_OK with *out NULL");
        } else {
            quick_check(pool);
            if (ckpt)
                ckpt_lookup_check(pool);
            rsp_pool_destroy(pool);
        }
    } else {
        fault_mmap(false);
        if (st != RSP_ENOMEM)
            finding("rsp_pool_create answered %s (%s): out of memory must be RSP_ENOMEM",
                    rsp_strerror(st), err.message);
        if (err.status != st || err.message[0] == '\0')
            finding("rsp_pool_create failed without its message");
        if (pool)
            finding("a failed rsp_pool_create left *out = %p", (void *)pool);
        if (left_mapped != 0)
            finding("a failed rsp_pool_create left %lld bytes mapped", (long long)left_mapped);
        if (!threads_back_to(base))
            finding("a failed rsp_pool_create left %d threads running (%d before): %s",
                    thread_count(), base, thread_names());
    }
    /* Allocations succeed again: a new pool works. */
    pool = NULL;
    st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK) {
        finding("the next rsp_pool_create answered %s (%s)", rsp_strerror(st), err.message);
    } else {
        quick_check(pool);
        if (ckpt)
            ckpt_lookup_check(pool);
        rsp_pool_destroy(pool);
    }
    if (!threads_back_to(base))
        finding("%d threads still run after every pool was destroyed (%d before): %s",
                thread_count(), base, thread_names());
}

static void child_destroy(const scenario *sc, uint64_t n, step_result *res)
{
    static ctx cx;
    const int base = thread_count();
    pool_open(&cx, sc->labels);
    SETUP(rsp_reader_register(NULL));
    sc->setup(&cx);
    device_sync(&cx);
    rsp_reader_unregister();
    fault_arm(n);
    rsp_pool_destroy(cx.pool);
    record_hit(res, fault_disarm());
    res->status = RSP_OK;
    if (!threads_back_to(base))
        finding("%d threads still run after rsp_pool_destroy (%d before): %s", thread_count(), base,
                thread_names());
    /* The process can still make and use a pool. */
    rsp_pool_config cfg;
    pool_config(&cfg);
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK) {
        finding("rsp_pool_create after the destroy answered %s (%s)", rsp_strerror(st),
                err.message);
    } else {
        quick_check(pool);
        rsp_pool_destroy(pool);
    }
}

static void *thread_body(void *arg)
{
    return arg;
}

/* The body of a child (or of this process with RSP_FAULT_NOFORK). */
static void run_step(const scenario *sc, uint64_t n, step_result *res, reference *out)
{
    memset(res, 0, sizeof *res);
    num_findings = 0;
    /* A sanitizer runtime may start a helper thread of its own with the
     * first thread of a process (TSan does, in a forked child): let that
     * happen before the threads are counted. */
    pthread_t warm;
    if (pthread_create(&warm, NULL, thread_body, NULL) == 0)
        pthread_join(warm, NULL);
    current_n = n;
    switch (sc->kind) {
    case POOL_OP: child_pool_op(sc, n, res, out); break;
    case CREATE: child_create(sc, n, res); break;
    case DESTROY: child_destroy(sc, n, res); break;
    }
    if (sc == &selftest)
        selftest_plant(n);
    if (num_findings && fault_last_hit()->fired)
        fault_print_hit(2);
    res->findings = num_findings;
    res->magic = RESULT_MAGIC;
}

/* ------------------------------------------------------------------------ */
/* The parent: one child per (operation, N)                                   */
/* ------------------------------------------------------------------------ */

/* Signal dispositions as the runtime set them (ASan's SEGV handler),
 * before cmocka installs its own: a child must die of a crash, not jump
 * back into cmocka's runner. */
static const int child_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static struct sigaction saved_actions[sizeof child_signals / sizeof child_signals[0]];

static void save_signals(void)
{
    for (size_t i = 0; i < sizeof child_signals / sizeof child_signals[0]; i++)
        sigaction(child_signals[i], NULL, &saved_actions[i]);
}

static void restore_signals(void)
{
    for (size_t i = 0; i < sizeof child_signals / sizeof child_signals[0]; i++)
        sigaction(child_signals[i], &saved_actions[i], NULL);
}

static char *read_all(int fd, size_t *len)
{
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < 0)
        size = 0;
    char *buf = malloc((size_t)size + 1);
    assert_non_null(buf);
    size_t got = 0;
    while (got < (size_t)size) {
        ssize_t r = pread(fd, buf + got, (size_t)size - got, (off_t)got);
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    *len = got;
    return buf;
}

typedef struct child_outcome {
    int wstatus;
    bool have_result;
    step_result res;
    char *text;
} child_outcome;

static void run_child(const scenario *sc, uint64_t n, bool reference_run, child_outcome *o)
{
    memset(o, 0, sizeof *o);
    int tfd = memfd_create("fault-text", 0);
    int bfd = memfd_create("fault-result", 0);
    assert_true(tfd >= 0 && bfd >= 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        restore_signals();
        dup2(tfd, 1);
        dup2(tfd, 2);
        fault_announce(true);
        alarm(WATCHDOG_S); /* a hang becomes SIGALRM, reported as one */
        static step_result res;
        static reference out;
        run_step(sc, n, &res, reference_run ? &out : NULL);
        if (reference_run) {
            out.r = res;
            (void)!write(bfd, &out, sizeof out);
        } else {
            (void)!write(bfd, &res, sizeof res);
        }
        fflush(stdout);
        fflush(stderr);
        exit(0); /* not _exit: LeakSanitizer checks at exit */
    }
    while (waitpid(pid, &o->wstatus, 0) < 0 && errno == EINTR)
        ;
    size_t len;
    char *bin = read_all(bfd, &len);
    if (reference_run && len == sizeof ref) {
        memcpy(&ref, bin, sizeof ref);
        o->res = ref.r;
        o->have_result = o->res.magic == RESULT_MAGIC;
    } else if (!reference_run && len == sizeof o->res) {
        memcpy(&o->res, bin, sizeof o->res);
        o->have_result = o->res.magic == RESULT_MAGIC;
    }
    free(bin);
    o->text = read_all(tfd, &len);
    close(tfd);
    close(bfd);
}

/* Offset of the child's output so far (stdout and stderr share one file). */
static uint64_t text_pos(void)
{
    fflush(stdout);
    off_t pos = lseek(2, 0, SEEK_CUR);
    return pos < 0 ? 0 : (uint64_t)pos;
}

/*
 * One child for N = first, first + 1, ... (each N on a pool of its own)
 * until a call sees no failure, or `last`. One result record per N; the
 * child stops at a crash, and LeakSanitizer checks the whole batch at its
 * exit (the parent then runs each N of a leaking batch alone). Returns the
 * records (malloc'd), their number, the child's wait status and output.
 */
static step_result *run_batch(const scenario *sc, uint64_t first, uint64_t last, uint32_t *num,
                              int *wstatus, char **text)
{
    int tfd = memfd_create("fault-text", 0);
    int bfd = memfd_create("fault-result", 0);
    assert_true(tfd >= 0 && bfd >= 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        restore_signals();
        dup2(tfd, 1);
        dup2(tfd, 2);
        fault_announce(true);
        static step_result res;
        for (uint64_t n = first, i = 0; n <= last; n++, i++) {
            alarm(WATCHDOG_S);
            uint64_t begin = text_pos();
            run_step(sc, n, &res, NULL);
            fflush(stderr);
            res.text_begin = begin;
            res.text_end = text_pos();
            (void)!pwrite(bfd, &res, sizeof res, (off_t)(i * sizeof res));
            if (!res.fired)
                break;
        }
        fflush(stdout);
        fflush(stderr);
        exit(0); /* not _exit: LeakSanitizer checks at exit */
    }
    while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR)
        ;
    size_t len;
    step_result *recs = (step_result *)read_all(bfd, &len);
    *num = (uint32_t)(len / sizeof *recs);
    *text = read_all(tfd, &len);
    close(tfd);
    close(bfd);
    return recs;
}

static bool child_passed(const child_outcome *o)
{
    return WIFEXITED(o->wstatus) && WEXITSTATUS(o->wstatus) == 0 && o->have_result &&
           o->res.findings == 0;
}

static const char *argv0 = "test_fault_alloc";

/* A child that died printed only the raw stack of its failed fault point
 * ("test_fault_alloc(+0x1234)[0x...]" lines, after "inject: "): symbolize
 * this executable's frames with addr2line (a forked child runs the same
 * file). */
static void symbolize_raw(const char *text)
{
    const char *at = strstr(text, "inject: fault point");
    if (!at)
        return;
    const char *base = strrchr(argv0, '/');
    base = base ? base + 1 : argv0;
    char cmd[2048];
    int len = snprintf(cmd, sizeof cmd, "addr2line -f -i -p -C -e /proc/%d/exe", (int)getpid());
    int frames = 0;
    const char *line = strchr(at, '\n');
    while (line && frames < 24 && len > 0 && (size_t)len < sizeof cmd - 24) {
        line++;
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        if (n == 0 || line[0] == ' ' || strncmp(line, "inject:", 7) == 0)
            break; /* the end of the raw stack */
        const char *off = strstr(line, "(+0x");
        const char *name = strstr(line, base);
        if (off && name && name < off && (size_t)(off - line) < n) {
            unsigned long v = strtoul(off + 2, NULL, 16);
            len += snprintf(cmd + len, sizeof cmd - (size_t)len, " %#lx", v ? v - 1 : v);
            frames++;
        }
        line = end;
    }
    if (frames == 0 || len <= 0 || (size_t)len >= sizeof cmd)
        return;
    printf("  the failed fault point, symbolized:\n");
    fflush(stdout);
    (void)!system(cmd);
}

static void describe_failure(const scenario *sc, uint64_t n, const child_outcome *o,
                             const char *argv0)
{
    char how[160];
    if (WIFSIGNALED(o->wstatus)) {
        int sig = WTERMSIG(o->wstatus);
        snprintf(how, sizeof how, "%s (signal %d, %s)",
                 sig == SIGALRM ? "hung: killed by the watchdog" : "died", sig, strsignal(sig));
    } else if (WEXITSTATUS(o->wstatus) == 3) {
        snprintf(how, sizeof how, "a call of the setup or the follow-up failed (CALL FAILED)");
    } else if (WEXITSTATUS(o->wstatus) != 0) {
        snprintf(how, sizeof how, "exit status %d (%s)", WEXITSTATUS(o->wstatus),
                 o->have_result ? "after the checks: a leak (LeakSanitizer) or a report at exit"
                                : "before the checks: a sanitizer report or an abort");
    } else {
        snprintf(how, sizeof how, "%u finding(s)", o->res.findings);
    }
    printf("[%s] N=%llu FAILED: %s", sc->name, (unsigned long long)n, how);
    if (o->have_result)
        printf("; injected: %s%s%s(%llu) on %s thread, the call answered %s",
               o->res.fired ? "" : "nothing", o->res.fired ? o->res.what : "",
               o->res.fired ? "" : " ", (unsigned long long)o->res.size,
               o->res.on_caller ? "the calling" : "another", rsp_strerror(o->res.status));
    printf("\n  reproduce: RSP_FAULT_OPS=%s RSP_FAULT_N=%llu %s\n", sc->name, (unsigned long long)n,
           argv0);
    /* The child's own account: its findings, the stack of the failed fault
     * point, a sanitizer's report. Long reports are cut. */
    size_t len = strlen(o->text);
    const size_t cap = 12000;
    printf("%.*s%s", (int)(len > cap ? cap : len), o->text, len > cap ? "\n  [... cut]\n" : "");
    if (!o->have_result)
        symbolize_raw(o->text);
    fflush(stdout);
}

static const char *known_defect(const char *op)
{
    for (size_t i = 0; i < sizeof known_failing / sizeof known_failing[0]; i++)
        if (known_failing[i].op && strcmp(known_failing[i].op, op) == 0)
            return known_failing[i].defect;
    return NULL;
}

typedef struct sweep_tally {
    uint32_t failed, ok, enomem, edevice, other_thread;
} sweep_tally;

/* Account one (op, N); returns whether the sweep is over (nothing failed). */
static bool tally(const scenario *sc, uint64_t n, const child_outcome *o, sweep_tally *t)
{
    if (!child_passed(o)) {
        describe_failure(sc, n, o, argv0);
        t->failed++;
        if (num_failed_ns < sizeof failed_ns / sizeof failed_ns[0])
            failed_ns[num_failed_ns++] = n;
    } else if (verbose) {
        printf("[%s] N=%llu ok: %s%s, answered %s\n%s", sc->name, (unsigned long long)n,
               o->res.fired ? "failed " : "nothing failed", o->res.fired ? o->res.what : "",
               rsp_strerror(o->res.status), o->text);
    }
    if (o->have_result && o->res.fired) {
        t->ok += o->res.status == RSP_OK;
        t->enomem += o->res.status == RSP_ENOMEM;
        t->edevice += o->res.status == RSP_EDEVICE;
        t->other_thread += !o->res.on_caller;
    }
    return o->have_result && !o->res.fired;
}

/* (op, N) in a child of its own. */
static bool one_alone(const scenario *sc, uint64_t n, sweep_tally *t)
{
    child_outcome o;
    run_child(sc, n, false, &o);
    bool done = tally(sc, n, &o, t);
    free(o.text);
    return done;
}

/* Sweep N = first .. last in batches; *next: the first N not swept yet.
 * Returns whether the sweep is over (a call saw no failure). */
static bool sweep_range(const scenario *sc, uint64_t first, uint64_t last, sweep_tally *t,
                        uint64_t *next)
{
    uint32_t k = 0;
    int wstatus = 0;
    char *text = NULL;
    step_result *recs = run_batch(sc, first, last, &k, &wstatus, &text);
    const bool clean = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    const bool finished = k > 0 && (!recs[k - 1].fired || first + k - 1 == last);
    bool done = false;
    if (clean) {
        for (uint32_t i = 0; i < k; i++) {
            child_outcome o = {.wstatus = 0, .have_result = true, .res = recs[i]};
            size_t b = recs[i].text_begin, e = recs[i].text_end;
            o.text = strndup(text + b, e > b ? e - b : 0);
            done |= tally(sc, first + i, &o, t);
            free(o.text);
        }
        *next = first + k;
    } else if (finished) {
        /* A leak or a sanitizer report at the batch's exit: find its N. */
        for (uint32_t i = 0; i < k && !done; i++)
            done = one_alone(sc, first + i, t);
        *next = first + k;
    } else {
        /* It died during N = first + k: the Ns before it again (their leaks
         * were never checked), then that one alone. */
        uint64_t died = first + k, after = first;
        if (k > 0)
            done = sweep_range(sc, first, died - 1, t, &after);
        if (!done)
            done = one_alone(sc, died, t);
        *next = died + 1;
    }
    free(recs);
    free(text);
    return done;
}

/* Sweep one operation; returns the number of failing (op, N). *bad: the
 * scenario itself is wrong (its fault-free run fails), whatever the table
 * of known failures says. */
static uint32_t sweep(const scenario *sc, bool *bad)
{
    *bad = false;
    num_failed_ns = 0;
    const char *only_n = getenv("RSP_FAULT_N");
    uint64_t first = 1, last = UINT64_MAX;
    if (only_n && *only_n)
        first = last = strtoull(only_n, NULL, 10);

    child_outcome o;
    have_ref = false;
    if (sc->kind == POOL_OP) {
        run_child(sc, 0, true, &o);
        if (!child_passed(&o)) {
            printf("[%s] the reference run (nothing failing) fails:\n", sc->name);
            describe_failure(sc, 0, &o, argv0);
            free(o.text);
            *bad = true;
            return 1;
        }
        have_ref = true;
        free(o.text);
    } else {
        run_child(sc, 0, false, &o);
        free(o.text);
    }
    const uint64_t points = o.have_result ? o.res.count : 0;

    if (getenv("RSP_FAULT_NOFORK") && first == last) {
        /* In this process, for a debugger: the reference came from a child. */
        step_result res;
        restore_signals();
        fault_announce(true);
        run_step(sc, first, &res, NULL);
        printf("[%s] N=%llu in-process: %u finding(s); injected: %s(%llu) of %llu fault points, "
               "answered %s\n",
               sc->name, (unsigned long long)first, res.findings, res.fired ? res.what : "nothing",
               (unsigned long long)res.size, (unsigned long long)res.count,
               rsp_strerror(res.status));
        return res.findings ? 1 : 0;
    }

    sweep_tally t = {0};
    uint64_t n = first;
    const uint64_t cap = 2 * points + 64;
    const uint64_t stop = last < cap ? last : cap;
    bool done = false;
    /* The first create of a process is what create_first sweeps: one
     * child per N there. Everywhere else one child runs N after N. */
    const bool one_per_child = strcmp(sc->name, "create_first") == 0 || first == last;
    while (!done && n <= stop) {
        if (one_per_child)
            done = one_alone(sc, n++, &t);
        else
            done = sweep_range(sc, n, stop, &t, &n);
    }
    uint32_t failed = t.failed;
    if (!done && last == UINT64_MAX) {
        printf("[%s] the sweep did not end by N=%llu (the fault-free call counts %llu)\n", sc->name,
               (unsigned long long)cap, (unsigned long long)points);
        failed++;
    }
    printf("[%s] %llu fault points without failures; swept N=%llu..%llu: RSP_ENOMEM %u, "
           "RSP_EDEVICE (broken) %u, RSP_OK %u, off the calling thread %u; %u failing\n",
           sc->name, (unsigned long long)points, (unsigned long long)first,
           (unsigned long long)(n - 1), t.enomem, t.edevice, t.ok, t.other_thread, failed);
    fflush(stdout);
    return failed;
}

static bool selected(const char *name)
{
    const char *ops = getenv("RSP_FAULT_OPS");
    if (!ops || !*ops)
        return true;
    size_t len = strlen(name);
    for (const char *p = ops; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, name, n) == 0)
            return true;
        p += n + (end ? 1 : 0);
    }
    return false;
}

static void run_sweep(void **state)
{
    const scenario *sc = *state;
    if (!selected(sc->name)) {
        skip();
        return;
    }
    bool bad;
    uint32_t failed = sweep(sc, &bad);
    if (bad)
        fail_msg("[%s] the scenario's fault-free run fails: see above", sc->name);
    const char *defect = known_defect(sc->name);
    if (defect) {
        if (failed) {
            printf("[%s] expected to fail (known_failing: %s): %u failing N, not counted\n",
                   sc->name, defect, failed);
            return;
        }
        print_error("[%s] is listed in known_failing (%s) but its sweep passes: remove it\n",
                    sc->name, defect);
        fail();
    }
    assert_int_equal(failed, 0);
}

/* The interposer sits in the allocation path (the executable's functions
 * win over libc's and libasan's) for every allocator entry point and for
 * thread creation, and counts without failing when armed with 0. */
static void interposer_fails_allocations_and_threads(void **state)
{
    (void)state;
    assert_true(fault_interposer_active());
    /* Through volatile pointers: the compiler may not fold them away. */
    void *(*volatile c)(size_t, size_t) = calloc;
    void *(*volatile r)(void *, size_t) = realloc;
    void *(*volatile aa)(size_t, size_t) = aligned_alloc;
    int (*volatile pm)(void **, size_t, size_t) = posix_memalign;
    void *(*volatile m)(size_t) = malloc;

    fault_arm(1);
    void *p = c(4, 8);
    assert_int_equal(fault_disarm(), 1);
    assert_null(p);
    assert_string_equal(fault_last_hit()->what, "calloc");

    void *q = m(8);
    assert_non_null(q);
    fault_arm(1);
    p = r(q, 4096);
    assert_int_equal(fault_disarm(), 1);
    assert_null(p); /* q is still valid */
    assert_string_equal(fault_last_hit()->what, "realloc");
    free(q);

    fault_arm(1);
    p = aa(64, 128);
    assert_int_equal(fault_disarm(), 1);
    assert_null(p);
    assert_string_equal(fault_last_hit()->what, "aligned_alloc");

    fault_arm(1);
    p = NULL;
    assert_int_equal(pm(&p, 64, 128), ENOMEM);
    assert_int_equal(fault_disarm(), 1);
    assert_string_equal(fault_last_hit()->what, "posix_memalign");

    fault_arm(1);
    pthread_t t;
    int rc = pthread_create(&t, NULL, thread_body, NULL);
    assert_int_equal(fault_disarm(), 1);
    assert_int_equal(rc, EAGAIN);
    assert_true(fault_last_hit()->fired);
    assert_string_equal(fault_last_hit()->what, "pthread_create");

    /* Counting without failing; the second of two fails with n = 2. */
    fault_arm(0);
    p = m(16);
    q = m(16);
    assert_true(fault_disarm() >= 2);
    assert_non_null(p);
    assert_non_null(q);
    free(p);
    free(q);
    fault_arm(2);
    p = m(16);
    q = m(16);
    fault_disarm();
    assert_non_null(p);
    assert_null(q);
    free(p);
}

extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

/* The harness itself: a crash and a leak planted in one N each are
 * reported as failures of exactly those Ns (the leak where LeakSanitizer
 * runs), and the sweep goes on past them. */
static void harness_reports_a_planted_crash_and_leak(void **state)
{
    (void)state;
    if (getenv("RSP_FAULT_OPS") && !selected("selftest")) {
        skip();
        return;
    }
    const char *asan = getenv("ASAN_OPTIONS");
    const bool lsan = __lsan_do_recoverable_leak_check && !(asan && strstr(asan, "detect_leaks=0"));
    printf("[selftest] the failures below are planted: N=3 aborts%s\n", lsan ? ", N=2 leaks" : "");
    bool bad;
    uint32_t failed = sweep(&selftest, &bad);
    assert_false(bad);
    assert_int_equal(failed, lsan ? 2 : 1);
    assert_int_equal(num_failed_ns, failed);
    if (lsan)
        assert_int_equal(failed_ns[0], 2);
    assert_int_equal(failed_ns[num_failed_ns - 1], 3);
}

int main(int argc, char **argv)
{
    (void)argc;
    argv0 = argv[0];
    verbose = getenv("RSP_FAULT_VERBOSE") != NULL;
    strict = !(getenv("RSP_FAULT_STRICT") && strcmp(getenv("RSP_FAULT_STRICT"), "0") == 0);
    save_signals();
    struct CMUnitTest tests[NUM_SCENARIOS + 2];
    tests[0] = (struct CMUnitTest)cmocka_unit_test(interposer_fails_allocations_and_threads);
    tests[1] = (struct CMUnitTest)cmocka_unit_test(harness_reports_a_planted_crash_and_leak);
    for (size_t i = 0; i < NUM_SCENARIOS; i++)
        tests[i + 2] = (struct CMUnitTest){
            .name = scenarios[i].name,
            .test_func = run_sweep,
            .initial_state = (void *)&scenarios[i],
        };
    return _cmocka_run_group_tests("fault_alloc", tests, NUM_SCENARIOS + 2, NULL, NULL);
}
