/*
 * libFuzzer target: the public API as a sequence of calls on one small host
 * pool, checked after every call against what the API lets a caller see.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Speed: creating a pool starts an owner and a device thread and sets up
 * liburcu (~30 ms), so one pool serves every input. After each input the
 * harness brings it back to a clean state (rolls back every step in flight,
 * clears the stage, removes every rid the input used, flushes the device,
 * checks that every slot reads zero) and recreates it only when that fails
 * or the input changed something that outlives it (a new label, a huge
 * graph batch, shutdown). Step ids and lease bucket ids keep growing across
 * inputs (a committed id cannot be reused), from global bases.
 * RSP_FUZZ_FRESH_POOL=1 recreates the pool for every input: slow, but a
 * finding then reproduces from its input alone.
 *
 * Checks after each call:
 *   - the stats add up: free + held + pending + sink == max_slots, held ==
 *     holdings, requests and holdings agree with the model;
 *   - an error changed nothing: stats gauges and the holdings (slot,
 *     has_state, generation) of every (rid, label) of the universe before
 *     and after are equal;
 *   - the holdings agree with a model of which (rid, label) hold a slot:
 *     the set of holders, distinct slots, a holder's slot never moves,
 *     has_state where the model is certain, generation unchanged where the
 *     model knows nothing moved it;
 *   - the live and staged plans readable are the steps the model expects;
 *   - statuses the model can predict (validation, order, capacity, leased
 *     buffer conflicts, admit ok iff enough free slots);
 *   - at a flush: every free slot reads zero (the harness writes a pattern
 *     into the slots a plan addresses, as a forward would).
 *
 * The defects this harness found are fixed; their reproducers are in
 * the seed corpus (tests/fuzz/corpus/fuzz_api/defect*), so the corpus
 * replay guards the fixes.
 */
#include <rsp/rsp.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Failure and input decoding                                                */
/* ------------------------------------------------------------------------ */

static const char *g_op = "init"; /* the call being checked, for messages */
static unsigned g_opno;

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz_api: op #%u (%s): ", g_opno, g_op);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail(__VA_ARGS__);                                                                     \
    } while (0)

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static uint8_t u8(input *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

static bool env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static bool g_fresh_pool, g_verbose;

/* ------------------------------------------------------------------------ */
/* The pool                                                                  */
/* ------------------------------------------------------------------------ */

#define MAX_SLOTS 12 /* with the sink: 11 usable */
#define MAX_INFLIGHT 3
#define INBOX 64
#define NUM_LAYERS 2
#define NRIDS 6
#define NLAB 6       /* labels the model follows (ids 0..NLAB-1) */
#define PRE_LABELS 4 /* interned at creation */

static const char *const g_label_names[NLAB] = {"main", "draft", "beam1", "beam2", "x4", "x5"};
static const rsp_rid g_rids[NRIDS] = {1, 2, 3, 0, 1ull << 40, UINT64_MAX};

static rsp_pool *g_pool;
/* Checkpoints: a small key universe, two tiers of a few slots. */
#define CK_DEV 3
#define CK_HOST 2
#define NKEYS 4
static const uint64_t g_keys[NKEYS] = {1, 2, 1ull << 40, UINT64_MAX};
static uint32_t g_kpins[NKEYS]; /* the caller's pins, as the model counts them */
static rsp_pool_info g_info;
static rsp_host_fence *g_fence; /* the harness's forward timeline */
static uint64_t g_fence_next;   /* last value handed out */
static rsp_event g_dev_fence;   /* the pool's own timeline, once a plan showed it */
static uint64_t g_last_admitted, g_last_committed;
static bool g_any_admitted, g_any_committed;
static uint32_t g_bucket_base; /* lease bucket ids of this input start here */
static uint32_t g_graph_max_bs;
static uint32_t g_num_labels;
static uint64_t g_live_id; /* step id of the newest live plan (0: none) */
static bool g_dirty;       /* recreate after this input */
static bool g_wrote;       /* a forward of this input wrote slots */
static unsigned g_inputs_on_pool;

static const rsp_block_config g_blocks[2] = {
    {.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {3}},
    {.name = "ssm", .dtype = RSP_DTYPE_I8, .ndim = 2, .shape = {2, 3}},
};

static void pool_destroy(void)
{
    if (g_pool)
        rsp_pool_destroy(g_pool);
    g_pool = NULL;
}

static void pool_create(void)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = NUM_LAYERS;
    cfg.blocks = g_blocks;
    cfg.num_blocks = 2;
    cfg.max_slots = MAX_SLOTS;
    cfg.sink = true;
    cfg.inbox_capacity = INBOX;
    cfg.max_inflight_steps = MAX_INFLIGHT;
    cfg.max_checkpoints = CK_DEV;
    cfg.max_host_checkpoints = CK_HOST;
    cfg.checkpoint_demote = true;
    rsp_error err;
    if (rsp_pool_create(&cfg, &g_pool, &err) != RSP_OK)
        fail("rsp_pool_create: %s", err.message);
    if (rsp_pool_info_get(g_pool, &g_info, &err) != RSP_OK)
        fail("rsp_pool_info_get: %s", err.message);
    for (uint32_t i = 1; i < PRE_LABELS; i++) {
        rsp_label_id id;
        if (rsp_label(g_pool, g_label_names[i], &id, &err) != RSP_OK || id != i)
            fail("rsp_label(%s) at creation", g_label_names[i]);
    }
    g_num_labels = PRE_LABELS;
    g_any_admitted = g_any_committed = false;
    g_last_admitted = g_last_committed = 0;
    g_graph_max_bs = 0;
    g_bucket_base = 0;
    g_live_id = 0;
    g_dev_fence = (rsp_event){0};
    g_inputs_on_pool = 0;
    memset(g_kpins, 0, sizeof g_kpins);
}

/* ------------------------------------------------------------------------ */
/* The model                                                                 */
/* ------------------------------------------------------------------------ */

enum { HS_FALSE = 0, HS_TRUE = 1, HS_UNKNOWN = 2 };

typedef struct mhold {
    bool held;
    uint64_t inst;  /* instance: a new one per assignment */
    uint32_t epoch; /* bumped on every generation move the model knows of */
    uint8_t hs;
    bool gen_free; /* the generation may have moved in a way the model cannot tell */
    bool seen;     /* slot and gen below were observed for this instance */
    int32_t slot;
    uint64_t gen;
} mhold;

static mhold H[NRIDS][NLAB];
static bool g_rid_exists[NRIDS];
static uint64_t g_inst;

#define MAX_ROWS 12 /* more than 8: the core's hash-set path for duplicates */
#define MAX_FORKS 3

typedef struct decl {
    uint32_t nrows;
    rsp_row rows[MAX_ROWS];
    int8_t rid_ix[MAX_ROWS]; /* index into g_rids */
    uint32_t npre, npost;
    rsp_fork pre[MAX_FORKS], post[MAX_FORKS];
    bool capture, preplan, has_lease;
    rsp_lease lease;
    uint8_t null_arrays; /* 1 rows, 2 pre_forks, 3 post_forks NULL with a count */
} decl;

#define MAX_STEPS 8
#define MAX_JOURNAL 1024

typedef struct mstep {
    bool used; /* in flight in the model */
    bool ever; /* an id was assigned */
    uint64_t id;
    bool planned;        /* live plan */
    uint32_t plan_npost; /* post-forks of the live plan's declaration (its fork marks) */
    bool capture;        /* the admit's declaration */
    decl d;              /* last declaration used with it */
    uint32_t njournal;
    struct {
        uint8_t ri, li;
        uint64_t inst;
    } journal[MAX_JOURNAL];
    uint32_t nprows;
    struct {
        uint8_t ri, li;
        uint64_t inst;
        uint32_t epoch;
    } prows[MAX_ROWS];
    /* docs/semantics.md 9.1/9.2: admit order; the holdings its admits pinned
     * (rows with span > 0, fork targets) and those its post-forks replace at
     * its commit; the declaration of its last successful admit. */
    uint64_t seq;
    uint32_t npins, nposts;
    /* docs/semantics.md 9.3: output slots its first admit took (held until
     * its end), and the holdings its per-token rows accept into. */
    uint32_t nout, nspecs;
    struct {
        uint8_t ri, li;
        uint64_t inst;
    } specs[MAX_ROWS];
    struct {
        uint8_t ri, li;
        uint64_t inst;
    } pins[MAX_ROWS * (1 + 2 * MAX_FORKS)], posts[MAX_ROWS * MAX_FORKS];
    decl ad;
    /* The first admit's declaration: a re-admit or plan is held to its
     * per-token rows and capture flag (docs/semantics.md 9.3), while ad
     * follows each successful re-admit. */
    decl first;
} mstep;

static mstep S[MAX_STEPS];
static uint64_t g_admit_clock;
static int g_stage = -1; /* entry whose stage is published */

/* Leased buffers of this input (bucket ids are fresh per input). */
typedef struct mbuf {
    uint32_t bucket, lslot, label, cap;
    uint32_t width; /* its per-token index tensor's, 0: none yet */
    int owner;      /* entry, -1 none */
} mbuf;
#define MAX_BUFS 32
static mbuf B[MAX_BUFS];
static uint32_t g_nbufs;

static uint32_t model_labels(void)
{
    return g_num_labels < NLAB ? g_num_labels : NLAB;
}

static void hold_new(int ri, uint32_t li)
{
    mhold *h = &H[ri][li];
    memset(h, 0, sizeof *h);
    h->held = true;
    h->inst = ++g_inst;
    h->hs = HS_FALSE;
}

static void hold_gen_moves(mhold *h)
{
    h->epoch++;
    h->gen_free = true; /* moves: the next observation takes the new value */
}

static void bufs_release(int e)
{
    for (uint32_t i = 0; i < g_nbufs; i++)
        if (B[i].owner == e)
            B[i].owner = -1;
}

static void stage_drop(void)
{
    if (g_stage >= 0)
        bufs_release(g_stage); /* the stage's step has no live plan yet */
    g_stage = -1;
}

static int planned_others(int e)
{
    int n = 0;
    for (int i = 0; i < MAX_STEPS; i++)
        if (i != e && S[i].used && S[i].planned)
            n++;
    return n;
}

static int steps_in_flight(void)
{
    int n = 0;
    for (int i = 0; i < MAX_STEPS; i++)
        n += S[i].used;
    return n;
}

static void model_remove_rid(int ri, bool forget)
{
    for (int li = 0; li < NLAB; li++)
        H[ri][li].held = false;
    if (forget)
        g_rid_exists[ri] = false;
}

static void model_reset_keep(int ri)
{
    for (int li = 0; li < NLAB; li++)
        if (H[ri][li].held) {
            H[ri][li].hs = HS_FALSE;
            hold_gen_moves(&H[ri][li]);
        }
}

/* Forking rids of d (non-padding rows, first appearance): indices into g_rids. */
static uint32_t forking_rids(const decl *d, int *out)
{
    uint32_t n = 0;
    if (d->capture || (d->npre == 0 && d->npost == 0))
        return 0;
    for (uint32_t i = 0; i < d->nrows; i++) {
        if (d->rows[i].padding)
            continue;
        int ri = d->rid_ix[i];
        bool dup = false;
        for (uint32_t k = 0; k < n; k++)
            dup |= out[k] == ri;
        if (!dup)
            out[n++] = ri;
    }
    return n;
}

static bool addresses(const rsp_row *r)
{
    return !r->padding && r->span > 0;
}

/* Per-rid forks (docs/semantics.md 8.2): a fork of group g > 0
 * applies to the rids whose (first non-padding) row carries g. */
static bool fork_applies(const decl *d, const rsp_fork *f, int ri)
{
    if (f->group == 0)
        return true;
    for (uint32_t i = 0; i < d->nrows; i++)
        if (!d->rows[i].padding && d->rid_ix[i] == ri)
            return d->rows[i].fork_group == f->group;
    return false;
}

/* A commit's skip_post_forks: any non-padding row of ri says so. */
static bool rid_skips(const decl *d, int ri)
{
    for (uint32_t i = 0; i < d->nrows; i++)
        if (!d->rows[i].padding && d->rid_ix[i] == ri && d->rows[i].skip_post_forks)
            return true;
    return false;
}

/* Apply forks f[0..n) for the forking rids of d. certain: no other planned
 * step may make the pool skip one (post-forks at commit skip a fork on a slot
 * another planned step's forward may write). */
static void model_forks(const decl *d, const rsp_fork *f, uint32_t n, bool certain, bool commit)
{
    int rids[MAX_ROWS];
    uint32_t nr = forking_rids(d, rids);
    for (uint32_t k = 0; k < nr; k++) {
        int ri = rids[k];
        if (!g_rid_exists[ri] || (commit && rid_skips(d, ri)))
            continue; /* skip_post_forks: a rejected draft */
        for (uint32_t i = 0; i < n; i++) {
            if (f[i].from >= NLAB || f[i].to >= NLAB || !fork_applies(d, &f[i], ri))
                continue;
            mhold *from = &H[ri][f[i].from], *to = &H[ri][f[i].to];
            if (!from->held || !to->held)
                continue;
            if (!certain) {
                to->hs = HS_UNKNOWN;
                to->epoch++;
                to->gen_free = true;
                continue;
            }
            if (from != to)
                to->hs = from->hs;
            hold_gen_moves(to);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Observation                                                               */
/* ------------------------------------------------------------------------ */

typedef struct snapshot {
    rsp_stats st;
    rsp_status hst[NRIDS][NLAB];
    rsp_holding h[NRIDS][NLAB];
    uint64_t live_id, staged_id;
} snapshot;

static snapshot g_prev;

/* Rids whose holdings the next check queries (bit per g_rids index); the
 * others keep their last observation. Every few calls, and at the end of an
 * input, every rid is queried. */
static uint32_t g_touch;
static bool g_force_query; /* the next check asks for the touched holdings */

/* Pipelined calls (an input bit per call): the call is posted, the holdings
 * queries of its touched rids right behind it, then the call's answer is
 * waited for: one hand-off to the owner instead of two. Otherwise the
 * synchronous wrappers. */
static bool g_pipe;
static int g_pipe_mode = -1; /* RSP_FUZZ_PIPE=0/1: never/always; unset: the input decides */
static rsp_ticket *g_pre[NRIDS][NLAB];
static uint32_t g_pre_mask;

/* With RSP_FUZZ_VERBOSE, d's rows and forks: a finding's replay shows
 * what each call declared. */
static void dump_decl(const decl *d)
{
    if (!g_verbose)
        return;
    for (uint32_t i = 0; i < d->nrows; i++)
        fprintf(stderr, "    row %u: rid %" PRIu64 " label %u span %d%s%s accepted %u group %u\n",
                i, d->rows[i].rid, d->rows[i].label, (int)d->rows[i].span,
                d->rows[i].padding ? " padding" : "",
                d->rows[i].per_token_states ? " per-token" : "", (unsigned)d->rows[i].accepted,
                (unsigned)d->rows[i].fork_group);
    for (uint32_t i = 0; i < d->npre + d->npost; i++) {
        const rsp_fork *f = i < d->npre ? &d->pre[i] : &d->post[i - d->npre];
        fprintf(stderr, "    %s fork: %u -> %u group %u\n", i < d->npre ? "pre" : "post", f->from,
                f->to, (unsigned)f->group);
    }
}

static void touch_decl(const decl *d)
{
    for (uint32_t i = 0; i < d->nrows; i++)
        g_touch |= 1u << d->rid_ix[i];
}

static bool asked(int ri)
{
    return g_rid_exists[ri] && ((g_touch | g_pre_mask) >> ri & 1);
}

static uint32_t model_labels(void);

static void prepost(void)
{
    rsp_error err;
    uint32_t nl = model_labels();
    for (int ri = 0; ri < NRIDS; ri++)
        for (uint32_t li = 0; li < nl && (g_touch >> ri & 1); li++) {
            rsp_msg m = {.kind = RSP_MSG_HOLDING, .rid = g_rids[ri], .label = li};
            if (rsp_post(g_pool, &m, &g_pre[ri][li], RSP_WAIT_FOREVER, &err) != RSP_OK)
                fail("post HOLDING: %s", err.message);
            g_pre_mask |= 1u << ri;
        }
}

/* Post m, the queries behind it, wait for m's answer. */
static rsp_status pipe_call(const rsp_msg *m, rsp_reply *r, rsp_error *err)
{
    rsp_ticket *t;
    memset(r, 0, sizeof *r);
    rsp_status st = rsp_post(g_pool, m, &t, RSP_WAIT_FOREVER, err);
    if (st != RSP_OK)
        return st;
    prepost();
    st = rsp_wait(t, RSP_WAIT_FOREVER, r);
    if (st != RSP_OK)
        *err = r->error;
    return st;
}

static rsp_status do_admit(const rsp_step *step, rsp_admit_outcome *out, rsp_error *err)
{
    if (!g_pipe)
        return rsp_step_admit(g_pool, step, out, err);
    rsp_msg m = {.kind = RSP_MSG_ADMIT, .step = *step};
    rsp_reply r;
    rsp_status st = pipe_call(&m, &r, err);
    *out = r.admit;
    return st;
}

static rsp_status do_plan(const rsp_step *step, rsp_error *err)
{
    if (!g_pipe)
        return rsp_step_plan(g_pool, step, err);
    rsp_msg m = {.kind = RSP_MSG_PLAN, .step = *step};
    rsp_reply r;
    rsp_status st = pipe_call(&m, &r, err);
    CHECK(st || (r.plan_step_id == step->step_id && r.plan_staged == step->preplan),
          "plan reply: step %" PRIu64 " staged %d", r.plan_step_id, r.plan_staged);
    return st;
}

static rsp_status do_commit(const rsp_step *step, const rsp_event *ev, rsp_error *err)
{
    if (!g_pipe)
        return rsp_step_commit(g_pool, step, ev, err);
    rsp_msg m = {.kind = RSP_MSG_COMMIT, .step = *step};
    if (ev)
        m.event = *ev;
    rsp_reply r;
    return pipe_call(&m, &r, err);
}

static rsp_status do_rollback(uint64_t id, const rsp_event *ev, rsp_error *err)
{
    if (!g_pipe)
        return rsp_step_rollback(g_pool, id, ev, err);
    rsp_msg m = {.kind = RSP_MSG_ROLLBACK, .step.step_id = id};
    if (ev)
        m.event = *ev;
    rsp_reply r;
    return pipe_call(&m, &r, err);
}

static rsp_status do_rid(rsp_msg_kind kind, rsp_rid rid, bool free_slots, rsp_error *err)
{
    if (!g_pipe)
        return kind == RSP_MSG_INGEST   ? rsp_ingest(g_pool, rid, err)
               : kind == RSP_MSG_REMOVE ? rsp_remove(g_pool, rid, err)
                                        : rsp_reset(g_pool, rid, free_slots, err);
    rsp_msg m = {.kind = kind, .rid = rid, .free = free_slots};
    rsp_reply r;
    return pipe_call(&m, &r, err);
}

static void observe(snapshot *s, bool full)
{
    rsp_error err;
    rsp_ticket *t[NRIDS * NLAB], *ts = NULL;
    uint32_t nl = model_labels();
    if (full)
        g_touch = ~0u;
    /* One batch: every query is posted, then every answer taken. Rids the
     * model says do not exist are not asked about: num_requests and
     * num_holdings (checked against the model) would count them. */
    for (int ri = 0; ri < NRIDS; ri++)
        for (uint32_t li = 0; li < nl; li++) {
            t[ri * NLAB + li] = g_pre[ri][li]; /* posted behind a pipelined call */
            g_pre[ri][li] = NULL;
            if (t[ri * NLAB + li] || !asked(ri))
                continue;
            rsp_msg m = {.kind = RSP_MSG_HOLDING, .rid = g_rids[ri], .label = li};
            if (rsp_post(g_pool, &m, &t[ri * NLAB + li], RSP_WAIT_FOREVER, &err) != RSP_OK)
                fail("post HOLDING: %s", err.message);
        }
    /* A snapshot by message on full checks; otherwise the lock-free
     * counters, exact here: every message this thread posted is answered
     * and the owner mirrors its gauges before it answers. */
    rsp_msg ms = {.kind = RSP_MSG_STATS};
    if (full && rsp_post(g_pool, &ms, &ts, RSP_WAIT_FOREVER, &err) != RSP_OK)
        fail("post STATS: %s", err.message);
    for (int ri = 0; ri < NRIDS; ri++)
        for (uint32_t li = 0; li < NLAB; li++) {
            if (!g_rid_exists[ri] || li >= nl) {
                memset(&s->h[ri][li], 0, sizeof s->h[ri][li]);
                s->hst[ri][li] = RSP_ENOREQ;
                if (li < nl && t[ri * NLAB + li]) {
                    /* Asked behind a call; the model says the rid is gone. */
                    rsp_status q = rsp_wait(t[ri * NLAB + li], RSP_WAIT_FOREVER, NULL);
                    CHECK(q == RSP_ENOREQ,
                          "holding of rid %" PRIu64 ", which the model says "
                          "does not exist: %s",
                          g_rids[ri], rsp_strerror(q));
                }
                continue;
            }
            if (!asked(ri)) {
                s->hst[ri][li] = g_prev.hst[ri][li];
                s->h[ri][li] = g_prev.h[ri][li];
                continue;
            }
            rsp_reply r;
            s->hst[ri][li] = rsp_wait(t[ri * NLAB + li], RSP_WAIT_FOREVER, &r);
            s->h[ri][li] = r.holding;
        }
    if (full) {
        rsp_reply rs;
        if (rsp_wait(ts, RSP_WAIT_FOREVER, &rs) != RSP_OK)
            fail("STATS: %s", rs.error.message);
        memset(&s->st, 0, sizeof s->st); /* the reply has 0.1's fields only */
        memcpy(&s->st, &rs.stats, sizeof rs.stats);
    } else if (rsp_stats_peek(g_pool, &s->st, &err) != RSP_OK) {
        fail("rsp_stats_peek: %s", err.message);
    }
    CHECK(rsp_read_begin() == RSP_OK, "rsp_read_begin");
    const rsp_plan *live = rsp_plan_live(g_pool), *staged = rsp_plan_staged(g_pool);
    s->live_id = live ? rsp_plan_step_id(live) : 0;
    s->staged_id = staged ? rsp_plan_step_id(staged) : 0;
    CHECK(!live || !rsp_plan_is_staged(live), "the live plan says it is staged");
    CHECK(!staged || rsp_plan_is_staged(staged), "the staged plan says it is live");
    rsp_read_end();
}

static bool same_gauges(const rsp_stats *a, const rsp_stats *b)
{
    return a->free_slots == b->free_slots && a->held_slots == b->held_slots &&
           a->pending_release == b->pending_release && a->num_requests == b->num_requests &&
           a->num_holdings == b->num_holdings && a->generation == b->generation &&
           a->plans == b->plans && a->stages == b->stages && a->commits == b->commits &&
           a->rollbacks == b->rollbacks && a->admits_ok == b->admits_ok;
}

/* Check the pool against the model after a call; `failed`: the call
 * returned an error, so nothing may have changed. */
static void check_full(bool failed, bool full)
{
    snapshot s;
    full |= g_opno % 8 == 0;
    /* After an error the lock-free counters say whether anything moved
     * (slot gauges, requests, holdings, the generation, which every
     * assignment, fork and reset moves); every 8th call asks everything. */
    if (failed && !full)
        g_touch = 0;
    /* Nor are holdings asked for after a call that moved nothing the
     * counters show (no slot, request or generation change): only a
     * commit changes a holding (has_state) without moving them. */
    rsp_stats now;
    if (!full && !g_force_query && rsp_stats_peek(g_pool, &now, NULL) == RSP_OK &&
        same_gauges(&g_prev.st, &now))
        g_touch = 0;
    g_force_query = false;
    observe(&s, full);
    const rsp_stats *st = &s.st;
    uint32_t sink = g_info.sink ? 1 : 0;
    CHECK(st->max_slots == MAX_SLOTS, "stats.max_slots %u", st->max_slots);
    CHECK(st->free_slots + st->held_slots + st->pending_release + sink == st->max_slots,
          "free %u + held %u + pending %u + sink %u != max_slots %u", st->free_slots,
          st->held_slots, st->pending_release, sink, st->max_slots);
    uint32_t outs = 0; /* per-token output slots of steps in flight */
    for (int e = 0; e < MAX_STEPS; e++)
        outs += S[e].used ? S[e].nout : 0;
    CHECK(st->held_slots == st->num_holdings + outs,
          "held_slots %u != num_holdings %u + output slots %u", st->held_slots, st->num_holdings,
          outs);
    uint32_t holders = 0, reqs = 0;
    bool used[MAX_SLOTS] = {0};
    for (int ri = 0; ri < NRIDS; ri++) {
        reqs += g_rid_exists[ri];
        for (int li = 0; li < NLAB; li++) {
            mhold *m = &H[ri][li];
            rsp_status hs = s.hst[ri][li];
            const rsp_holding *h = &s.h[ri][li];
            CHECK(hs == RSP_OK || hs == RSP_ENOREQ, "holding(rid %d, label %d): status %s", ri, li,
                  rsp_strerror(hs));
            CHECK((hs == RSP_OK) == m->held,
                  "holding(rid %" PRIu64 ", label %d): pool says %s, model says %s", g_rids[ri], li,
                  hs == RSP_OK ? "held" : "not held", m->held ? "held" : "not held");
            if (!m->held)
                continue;
            holders++;
            if (!asked(ri)) {
                if (m->seen)
                    used[m->slot] = true; /* as last seen */
                continue;
            }
            CHECK(h->index >= (int32_t)sink && h->index < MAX_SLOTS,
                  "holding(rid %d, label %d): slot %d out of range", ri, li, h->index);
            CHECK(!used[h->index], "slot %d held twice (second: rid %d label %d)", h->index, ri,
                  li);
            used[h->index] = true;
            if (m->hs != HS_UNKNOWN)
                CHECK(h->has_state == (m->hs == HS_TRUE),
                      "holding(rid %" PRIu64 ", label %d): has_state %d, model %d", g_rids[ri], li,
                      h->has_state, m->hs);
            if (m->seen) {
                CHECK(h->index == m->slot, "holding(rid %d, label %d) moved from slot %d to %d", ri,
                      li, m->slot, h->index);
                CHECK(m->gen_free || h->generation == m->gen,
                      "holding(rid %d, label %d): generation %" PRIu64 " -> %" PRIu64
                      " with no reset, fork or assignment",
                      ri, li, m->gen, h->generation);
                CHECK(h->generation >= m->gen, "generation went back");
            }
            m->seen = true;
            m->slot = h->index;
            m->gen = h->generation;
            m->gen_free = false;
        }
    }
    CHECK(st->num_holdings == holders, "num_holdings %u, model %u", st->num_holdings, holders);
    CHECK(st->num_requests == reqs, "num_requests %u, model %u", st->num_requests, reqs);
    uint64_t want_stage = g_stage >= 0 ? S[g_stage].id : 0;
    CHECK(s.staged_id == want_stage, "staged plan is step %" PRIu64 ", model %" PRIu64, s.staged_id,
          want_stage);
    CHECK(s.live_id == g_live_id, "live plan is step %" PRIu64 ", model %" PRIu64, s.live_id,
          g_live_id);
    g_touch = 0;
    g_pre_mask = 0;
    if (failed) {
        CHECK(same_gauges(&g_prev.st, st),
              "an error changed the stats (free %u->%u held %u->%u "
              "pending %u->%u gen %" PRIu64 "->%" PRIu64 ")",
              g_prev.st.free_slots, st->free_slots, g_prev.st.held_slots, st->held_slots,
              g_prev.st.pending_release, st->pending_release, g_prev.st.generation, st->generation);
        for (int ri = 0; ri < NRIDS; ri++)
            for (int li = 0; li < NLAB; li++) {
                CHECK(g_prev.hst[ri][li] == s.hst[ri][li], "an error changed a holder");
                if (s.hst[ri][li] == RSP_OK)
                    CHECK(g_prev.h[ri][li].index == s.h[ri][li].index &&
                              g_prev.h[ri][li].has_state == s.h[ri][li].has_state &&
                              g_prev.h[ri][li].generation == s.h[ri][li].generation,
                          "an error changed holding(rid %d, label %d)", ri, li);
            }
    }
    g_prev = s;
}

static void check(bool failed)
{
    check_full(failed, false);
}

/* ------------------------------------------------------------------------ */
/* Memory: the harness as the backend                                        */
/* ------------------------------------------------------------------------ */

static void slot_fill(int32_t slot, uint8_t v)
{
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t l = 0; l < NUM_LAYERS; l++) {
            rsp_block_view view;
            if (rsp_pool_block(g_pool, g_blocks[b].name, l, &view, NULL) != RSP_OK)
                fail("rsp_pool_block(%s, %u)", g_blocks[b].name, l);
            size_t row = (size_t)view.strides[0] * rsp_dtype_size(view.dtype);
            memset((char *)view.data + (size_t)slot * row, v, row);
        }
}

static bool slot_zero(int32_t slot)
{
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t l = 0; l < NUM_LAYERS; l++) {
            rsp_block_view view;
            if (rsp_pool_block(g_pool, g_blocks[b].name, l, &view, NULL) != RSP_OK)
                fail("rsp_pool_block(%s, %u)", g_blocks[b].name, l);
            size_t row = (size_t)view.strides[0] * rsp_dtype_size(view.dtype);
            const unsigned char *p = (const unsigned char *)view.data + (size_t)slot * row;
            for (size_t i = 0; i < row; i++)
                if (p[i])
                    return false;
        }
    return true;
}

/* The forward of the step whose live plan was just published: wait for its
 * addressing, then write v into every slot it addresses (as kernels would),
 * before the step's forward_done is signalled. */
static void forward(uint64_t step_id, uint8_t v)
{
    rsp_event ready[NLAB + 4];
    int32_t slots[64];
    uint32_t nready = 0, nslots = 0;
    CHECK(rsp_read_begin() == RSP_OK, "rsp_read_begin");
    const rsp_plan *plan = rsp_plan_live(g_pool);
    CHECK(plan && rsp_plan_step_id(plan) == step_id, "live plan is not step %" PRIu64, step_id);
    for (uint32_t li = 0; li < g_num_labels && li < NLAB + 4; li++) {
        rsp_addressing a;
        if (rsp_plan_addressing(plan, li, &a, NULL) != RSP_OK)
            continue;
        CHECK(a.length >= a.num_rows && a.step_id == step_id && !a.staged, "addressing fields");
        ready[nready++] = a.ready;
        if (a.ready.handle)
            g_dev_fence = a.ready;
        for (uint32_t i = 0; i < a.length; i++) {
            int32_t s = a.slot_indices[i];
            CHECK(s == g_info.pad_index || (s >= 0 && s < MAX_SLOTS), "slot index %d", s);
            if (i >= a.num_rows)
                CHECK(s == g_info.pad_index && !a.has_state[i],
                      "entry %u past num_rows %u is not the pad target", i, a.num_rows);
            if (s != g_info.pad_index && nslots < 64)
                slots[nslots++] = s;
        }
    }
    rsp_read_end();
    /* The device runs its work in order: this plan's upload comes after the
     * WAITs of earlier commits, whose forwards (ours) are done by now. */
    rsp_host_fence_signal(g_fence, g_fence_next);
    for (uint32_t i = 0; i < nready; i++)
        CHECK(rsp_event_wait(g_pool, &ready[i], RSP_WAIT_FOREVER, NULL) == RSP_OK,
              "waiting for a plan's ready event");
    for (uint32_t i = 0; i < nslots; i++)
        slot_fill(slots[i], v ? v : 1);
    g_wrote |= nslots != 0;
}

/* ------------------------------------------------------------------------ */
/* Steps                                                                     */
/* ------------------------------------------------------------------------ */

static uint64_t g_step_base;

static int32_t pick_span(uint8_t b)
{
    switch (b % 8) {
    case 0: return 0;
    case 1: return -1;
    case 2: return INT32_MIN;
    default: return (int32_t)(b % 8) - 2;
    }
}

static uint32_t pick_label(uint8_t b)
{
    switch (b % 16) {
    case 12: return g_num_labels; /* the first unknown id */
    case 13: return RSP_MAX_LABELS;
    case 14: return UINT32_MAX;
    case 15: return g_num_labels < NLAB ? g_num_labels : 0;
    default: return (b % 16) % (g_num_labels < 5 ? g_num_labels : 5);
    }
}

static void decode_decl(input *in, decl *d)
{
    memset(d, 0, sizeof *d);
    uint8_t f = u8(in);
    d->nrows = f & 7;
    if (d->nrows == 7)
        d->nrows = 7 + u8(in) % (MAX_ROWS - 6); /* 7..12 */
    d->npre = ((f >> 3) & 3) % 3;
    d->npost = (f >> 5) % 3;
    uint8_t g = u8(in);
    d->capture = (g & 7) == 7;
    d->preplan = g & 8;
    d->has_lease = g & 16;
    d->null_arrays = (g >> 5) == 7 ? 1 + u8(in) % 3 : 0;
    for (uint32_t i = 0; i < d->nrows; i++) {
        uint8_t a = u8(in), b = u8(in);
        d->rid_ix[i] = (int8_t)(a % NRIDS);
        d->rows[i].rid = g_rids[d->rid_ix[i]];
        d->rows[i].label = pick_label(b);
        d->rows[i].span = pick_span(a >> 3);
        d->rows[i].padding = (b & 0x30) == 0x30;
        d->rows[i].fork_group = (b >> 6) & 1; /* read only with grouped forks */
        d->rows[i].skip_post_forks = b >> 7;  /* read only at commit */
        /* Without forks skip_post_forks means nothing: the bit asks for
         * per-token states there instead (a verify step), so the inputs
         * that had forks decode as before. */
        if ((b >> 7) && !d->npre && !d->npost) {
            d->rows[i].skip_post_forks = false;
            d->rows[i].per_token_states = 1;
        }
    }
    for (uint32_t i = 0; i < d->npre; i++) {
        uint8_t a = u8(in);
        d->pre[i].from = pick_label(a & 15);
        d->pre[i].to = pick_label(a >> 4);
    }
    for (uint32_t i = 0; i < d->npost; i++) {
        uint8_t a = u8(in);
        d->post[i].from = pick_label(a & 15);
        d->post[i].to = pick_label(a >> 4);
    }
    /* Per-rid forks: f >> 5 == 7 (one post-fork, like 1 and 4) gives each
     * fork a group from its labels (0, 1 or 2: group 2 has no rid), with
     * no byte of its own, so every other declaration decodes as before. */
    for (uint32_t i = 0; (f >> 5) == 7 && i < d->npre + d->npost; i++) {
        rsp_fork *x = i < d->npre ? &d->pre[i] : &d->post[i - d->npre];
        x->group = (x->from ^ x->to) % 3;
    }
    if (d->has_lease) {
        uint8_t a = u8(in);
        static const uint32_t bs[4] = {1, 4, 8, 0};
        d->lease.bucket_bs = bs[a & 3];
        d->lease.bucket_id = g_bucket_base + ((a >> 2) & 1);
        d->lease.lease_slot = (a >> 3) & 1;
    }
}

static void to_step(const decl *d, uint64_t id, rsp_step *s)
{
    memset(s, 0, sizeof *s);
    s->step_id = id;
    s->rows = d->null_arrays == 1 ? NULL : d->rows;
    s->num_rows = d->nrows + (d->null_arrays == 1);
    s->pre_forks = d->null_arrays == 2 ? NULL : d->pre;
    s->num_pre_forks = d->npre + (d->null_arrays == 2);
    s->post_forks = d->null_arrays == 3 ? NULL : d->post;
    s->num_post_forks = d->npost + (d->null_arrays == 3);
    s->capture = d->capture;
    s->preplan = d->preplan;
    s->has_lease = d->has_lease;
    s->lease = d->lease;
}

/* The validation status d must get from rsp_post (NULL arrays, labels). */
static rsp_status decl_invalid_post(const decl *d)
{
    /* core/check.c's order, shared by rsp_post and the core: every array
     * first (a NULL array with a count), then the labels of the rows, then
     * those of the forks. */
    if (d->null_arrays >= 1 && d->null_arrays <= 3)
        return RSP_EINVAL;
    for (uint32_t i = 0; i < d->nrows; i++)
        if (d->rows[i].label >= g_num_labels)
            return RSP_ENOLABEL;
    for (uint32_t i = 0; i < d->nrows; i++)
        if (d->rows[i].per_token_states &&
            (d->rows[i].padding || d->rows[i].span < 1 || d->rows[i].span > RSP_SPEC_MAX_TOKENS))
            return RSP_EINVAL; /* a per-token row is no padding, 1 <= span <= 64 */
    for (int k = 0; k < 2; k++) {
        const rsp_fork *f = k ? d->post : d->pre;
        for (uint32_t i = 0; i < (k ? d->npost : d->npre); i++)
            if (f[i].from >= g_num_labels || f[i].to >= g_num_labels)
                return RSP_ENOLABEL;
    }
    return RSP_OK;
}

/* ... and then from the core (the lease, duplicate rows; docs/semantics.md 4). */
static rsp_status decl_invalid_core(const decl *d)
{
    if (d->has_lease && d->lease.bucket_bs == 0)
        return RSP_EINVAL;
    for (uint32_t i = 0; i < d->nrows; i++)
        for (uint32_t j = 0; j < i; j++)
            if (addresses(&d->rows[i]) && addresses(&d->rows[j]) &&
                d->rows[i].rid == d->rows[j].rid && d->rows[i].label == d->rows[j].label)
                return RSP_EDUPROW;
    bool grouped = false;
    for (uint32_t i = 0; i < d->npre + d->npost; i++)
        grouped |= (i < d->npre ? d->pre[i].group : d->post[i - d->npre].group) != 0;
    for (uint32_t i = 0; grouped && i < d->nrows; i++)
        for (uint32_t j = 0; j < i; j++)
            if (!d->rows[i].padding && !d->rows[j].padding && d->rows[i].rid == d->rows[j].rid &&
                d->rows[i].fork_group != d->rows[j].fork_group)
                return RSP_EINVAL; /* one fork_group per rid */
    return RSP_OK;
}

static rsp_status decl_invalid(const decl *d)
{
    rsp_status st = decl_invalid_post(d);
    return st ? st : decl_invalid_core(d);
}

static void expect_status(rsp_status got, rsp_status want, const rsp_error *err)
{
    if (g_verbose)
        fprintf(stderr, "  %s -> %s%s%s\n", g_op, rsp_strerror(got), got ? ": " : "",
                got ? err->message : "");
    CHECK(got == want, "status %s, expected %s (%s)", rsp_strerror(got), rsp_strerror(want),
          got ? err->message : "");
}

/* Slots d's admit needs that are not held (docs/semantics.md 4.1). */
static bool spec_asks(const rsp_row *r)
{
    return r->per_token_states == 1 && addresses(r);
}

/* The output slots d's per-token rows take at a first admit. */
static uint32_t spec_outs(const decl *d)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->nrows && !d->capture; i++)
        n += spec_asks(&d->rows[i]) ? (uint32_t)d->rows[i].span : 0;
    return n;
}

/* Are d's per-token rows those of the first admit a, in order, some perhaps
 * dropped (a plan or a re-admit may name fewer rows)? */
static bool spec_reserved(const decl *d, const decl *a)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < d->nrows && !d->capture && !a->capture; i++) {
        if (!spec_asks(&d->rows[i]))
            continue;
        bool found = false;
        while (k < a->nrows && !found) {
            const rsp_row *x = &a->rows[k++];
            if (spec_asks(x) && x->rid == d->rows[i].rid && x->label == d->rows[i].label) {
                if (x->span != d->rows[i].span)
                    return false;
                found = true;
            }
        }
        if (!found)
            return false;
    }
    return true;
}

static uint32_t admit_needs(const decl *d, bool fresh)
{
    bool need[NRIDS][NLAB] = {{false}};
    uint32_t n = fresh ? spec_outs(d) : 0;
    if (d->capture)
        return 0;
    for (uint32_t i = 0; i < d->nrows; i++) {
        int ri = d->rid_ix[i];
        uint32_t li = d->rows[i].label;
        if (!addresses(&d->rows[i]) || H[ri][li].held || need[ri][li])
            continue;
        need[ri][li] = true;
        n++;
    }
    int rids[MAX_ROWS];
    uint32_t nr = forking_rids(d, rids);
    for (uint32_t k = 0; k < nr; k++)
        for (uint32_t i = 0; i < d->npre + d->npost; i++) {
            const rsp_fork *f = i < d->npre ? &d->pre[i] : &d->post[i - d->npre];
            uint32_t li = f->to;
            if (!fork_applies(d, f, rids[k]) || H[rids[k]][li].held || need[rids[k]][li])
                continue;
            need[rids[k]][li] = true;
            n++;
        }
    return n;
}

/* Add (ri, li)'s current holding to a pin or post list (once). */
#define LIST_ADD(list, n, r, l)                                                                    \
    do {                                                                                           \
        bool dup_ = false;                                                                         \
        for (uint32_t q_ = 0; q_ < (n); q_++)                                                      \
            dup_ |=                                                                                \
                (list)[q_].ri == (r) && (list)[q_].li == (l) && (list)[q_].inst == H[r][l].inst;   \
        if (!dup_ && (n) < sizeof(list) / sizeof((list)[0])) {                                     \
            (list)[n].ri = (uint8_t)(r);                                                           \
            (list)[n].li = (uint8_t)(l);                                                           \
            (list)[(n)++].inst = H[r][l].inst;                                                     \
        }                                                                                          \
    } while (0)

/* What an admit of d (allocations done) pins for step s, and the
 * post-forks' targets it marks. */
static void model_pins(mstep *s, const decl *d)
{
    for (uint32_t i = 0; i < d->nrows; i++) {
        int ri = d->rid_ix[i];
        uint32_t li = d->rows[i].label;
        if (addresses(&d->rows[i]) && H[ri][li].held)
            LIST_ADD(s->pins, s->npins, ri, li);
    }
    int rids[MAX_ROWS];
    uint32_t nr = forking_rids(d, rids);
    for (uint32_t k = 0; k < nr; k++)
        for (uint32_t i = 0; i < d->npre + d->npost; i++) {
            const rsp_fork *f = i < d->npre ? &d->pre[i] : &d->post[i - d->npre];
            int ri = rids[k];
            if (f->to >= NLAB || !fork_applies(d, f, ri) || !H[ri][f->to].held)
                continue;
            LIST_ADD(s->pins, s->npins, ri, f->to);
            if (i >= d->npre)
                LIST_ADD(s->posts, s->nposts, ri, f->to);
        }
}

/* The in-flight entry other than self whose post-fork targets (specs
 * false) or per-token rows (specs true) name holding (ri, li) as it is
 * now, -1 if none. */
static int holding_taken_by(int self, bool specs, int ri, uint32_t li)
{
    const uint64_t inst = H[ri][li].inst;
    for (int e = 0; e < MAX_STEPS; e++) {
        const uint32_t n = specs ? S[e].nspecs : S[e].nposts;
        for (uint32_t k = 0; e != self && S[e].used && k < n; k++)
            if (specs
                    ? S[e].specs[k].ri == ri && S[e].specs[k].li == li && S[e].specs[k].inst == inst
                    : S[e].posts[k].ri == ri && S[e].posts[k].li == li &&
                          S[e].posts[k].inst == inst)
                return e;
    }
    return -1;
}

/* The step whose post-forks replace, or whose accept of per-token states
 * moves, a holding a row of d names, or whose accept moves one a fork of d
 * writes (the admit is refused RSP_EORDER until its commit), -1 if none.
 * self: the entry of d's step when it is in flight. */
static int post_blocker(const decl *d, int self)
{
    for (uint32_t i = 0; i < d->nrows && !d->capture; i++) {
        int ri = d->rid_ix[i];
        uint32_t li = d->rows[i].label;
        if (!addresses(&d->rows[i]) || li >= NLAB || !H[ri][li].held)
            continue;
        int e = holding_taken_by(self, false, ri, li);
        if (e < 0)
            e = holding_taken_by(self, true, ri, li); /* it accepts at its commit */
        if (e >= 0)
            return e;
    }
    /* Nor may a fork write such a holding: the accept replaces its slot. */
    int rids[MAX_ROWS];
    uint32_t nr = forking_rids(d, rids);
    for (uint32_t k = 0; k < nr; k++)
        for (uint32_t i = 0; i < d->npre + d->npost; i++) {
            const rsp_fork *f = i < d->npre ? &d->pre[i] : &d->post[i - d->npre];
            int e = f->to < NLAB && fork_applies(d, f, rids[k]) && H[rids[k]][f->to].held
                        ? holding_taken_by(self, true, rids[k], f->to)
                        : -1;
            if (e >= 0)
                return e;
        }
    return -1;
}

/* A rollback of entry e is refused (newest first) while a step admitted
 * later and in flight pins a holding, still held, that e pins. */
static bool rollback_blocked(int e)
{
    const mstep *x = &S[e];
    for (uint32_t k = 0; k < x->npins; k++) {
        const mhold *h = &H[x->pins[k].ri][x->pins[k].li];
        if (!h->held || h->inst != x->pins[k].inst)
            continue;
        for (int y = 0; y < MAX_STEPS; y++) {
            if (y == e || !S[y].used || S[y].capture || S[y].seq < x->seq)
                continue;
            for (uint32_t j = 0; j < S[y].npins; j++)
                if (S[y].pins[j].ri == x->pins[k].ri && S[y].pins[j].li == x->pins[k].li &&
                    S[y].pins[j].inst == x->pins[k].inst)
                    return true;
        }
    }
    return false;
}

/* Does a commit's declaration differ from the admitted one
 * (docs/semantics.md 9.2)? skip_post_forks is the commit's own. */
static bool decl_differs(const decl *a, const decl *b)
{
    bool groups = false;
    for (uint32_t i = 0; i < a->npre; i++)
        groups |= a->pre[i].group != 0;
    for (uint32_t i = 0; i < a->npost; i++)
        groups |= a->post[i].group != 0;
    if (a->nrows != b->nrows || a->npre != b->npre || a->npost != b->npost)
        return true;
    for (uint32_t i = 0; i < a->nrows; i++) {
        const rsp_row *x = &a->rows[i], *y = &b->rows[i];
        if (x->rid != y->rid || x->label != y->label || x->span != y->span ||
            x->padding != y->padding || x->per_token_states != y->per_token_states ||
            (groups && x->fork_group != y->fork_group))
            return true;
    }
    for (uint32_t i = 0; i < a->npre + a->npost; i++) {
        const rsp_fork *x = i < a->npre ? &a->pre[i] : &a->post[i - a->npre];
        const rsp_fork *y = i < a->npre ? &b->pre[i] : &b->post[i - a->npre];
        if (x->from != y->from || x->to != y->to || x->group != y->group)
            return true;
    }
    return false;
}

static void model_admit(int e, const decl *d)
{
    mstep *s = &S[e];
    if (d->capture)
        return; /* reserves nothing, ingests nothing */
    for (uint32_t i = 0; i < d->nrows; i++)
        if (!d->rows[i].padding)
            g_rid_exists[d->rid_ix[i]] = true; /* implicit ingest */
    for (uint32_t i = 0; i < d->nrows; i++) {
        int ri = d->rid_ix[i];
        uint32_t li = d->rows[i].label;
        if (!addresses(&d->rows[i]) || H[ri][li].held)
            continue;
        hold_new(ri, li);
        CHECK(s->njournal < MAX_JOURNAL, "model journal full");
        s->journal[s->njournal].ri = (uint8_t)ri;
        s->journal[s->njournal].li = (uint8_t)li;
        s->journal[s->njournal++].inst = H[ri][li].inst;
    }
    int rids[MAX_ROWS];
    uint32_t nr = forking_rids(d, rids);
    for (uint32_t k = 0; k < nr; k++)
        for (uint32_t i = 0; i < d->npre + d->npost; i++) {
            const rsp_fork *f = i < d->npre ? &d->pre[i] : &d->post[i - d->npre];
            uint32_t li = f->to;
            int ri = rids[k];
            if (!fork_applies(d, f, ri) || H[ri][li].held)
                continue;
            hold_new(ri, li);
            CHECK(s->njournal < MAX_JOURNAL, "model journal full");
            s->journal[s->njournal].ri = (uint8_t)ri;
            s->journal[s->njournal].li = (uint8_t)li;
            s->journal[s->njournal++].inst = H[ri][li].inst;
        }
    model_pins(s, d);
}

/* A first admit's output slots and the holdings its per-token rows
 * accept into (after model_admit assigned them). */
static void model_spec(mstep *s, const decl *d)
{
    s->nout = spec_outs(d);
    s->nspecs = 0;
    for (uint32_t i = 0; i < d->nrows && !d->capture; i++) {
        int ri = d->rid_ix[i];
        uint32_t li = d->rows[i].label;
        if (!spec_asks(&d->rows[i]) || li >= NLAB)
            continue;
        s->specs[s->nspecs].ri = (uint8_t)ri;
        s->specs[s->nspecs].li = (uint8_t)li;
        s->specs[s->nspecs++].inst = H[ri][li].inst;
    }
}

/* The holdings d's per-token rows accept into at commit: has_state and
 * the slot are the accept's (the accepted count and whether the holding
 * is still the planned one decide), so the model stops knowing them. */
static void model_accept(const decl *d)
{
    for (uint32_t i = 0; i < d->nrows && !d->capture; i++) {
        int ri = d->rid_ix[i];
        uint32_t li = d->rows[i].label;
        if (!spec_asks(&d->rows[i]) || li >= NLAB || !H[ri][li].held)
            continue;
        H[ri][li].hs = HS_UNKNOWN;
        H[ri][li].seen = false; /* output slot a may be its slot now */
        hold_gen_moves(&H[ri][li]);
    }
}

static int entry_of(uint64_t id)
{
    for (int i = 0; i < MAX_STEPS; i++)
        if (S[i].used && S[i].id == id)
            return i;
    return -1;
}

static void op_admit(input *in, int e, bool fresh_decl, uint8_t idsel)
{
    mstep *s = &S[e];
    decl d;
    if (fresh_decl || !s->ever)
        decode_decl(in, &d);
    else
        d = s->d;
    uint64_t id;
    if (!s->ever || (!s->used && idsel % 4 == 0)) {
        /* A new id: above everything admitted so far (or, rarely, below). */
        if (idsel % 16 == 15 && g_any_admitted && g_last_admitted > 0) {
            id = g_last_admitted - 1; /* goes back: RSP_EORDER unless in flight */
        } else {
            id = ++g_step_base;
        }
    } else {
        id = s->id;
    }
    rsp_step step;
    to_step(&d, id, &step);
    touch_decl(&d);
    if (g_verbose)
        fprintf(stderr,
                "  admit entry %d step %" PRIu64 ": %u rows, capture %d preplan %d lease %d\n", e,
                id, d.nrows, d.capture, d.preplan, d.has_lease);
    dump_decl(&d);
    int ee = entry_of(id); /* a backwards id may name another entry's step */
    bool in_flight = ee >= 0;
    rsp_status want = decl_invalid(&d);
    if (want == RSP_OK && !in_flight) {
        if ((g_any_admitted && id < g_last_admitted) || (g_any_committed && id <= g_last_committed))
            want = RSP_EORDER;
        else if (steps_in_flight() >= MAX_INFLIGHT)
            want = RSP_ECAPACITY;
    }
    if (want == RSP_OK && post_blocker(&d, ee) >= 0)
        want = RSP_EORDER; /* a row names an in-flight post-fork target */
    if (want == RSP_OK && in_flight && !spec_reserved(&d, &S[ee].first))
        want = RSP_EINVAL; /* a re-admit asks for output slots its first admit did not take */
    uint32_t needs = want == RSP_OK ? admit_needs(&d, !in_flight) : 0;
    if (S[in_flight ? ee : e].njournal + needs > MAX_JOURNAL)
        return; /* the model's journal is full */
    uint32_t free_before = g_prev.st.free_slots;
    rsp_admit_outcome out;
    rsp_error err;
    g_op = "admit";
    rsp_status st = do_admit(&step, &out, &err);
    expect_status(st, want, &err);
    if (st == RSP_OK) {
        CHECK(out.ok == (needs <= free_before), "admit ok %d, needs %u, free %u", out.ok, needs,
              free_before);
        CHECK(out.usable == g_info.usable_slots, "outcome.usable %u", out.usable);
        if (!out.ok) {
            CHECK(out.slots_short == needs - free_before && out.free == free_before,
                  "outcome short %u free %u, model %u %u", out.slots_short, out.free,
                  needs - free_before, free_before);
        } else {
            if (!in_flight) {
                /* Not the entry's in-flight step: this entry now names id. */
                memset(s, 0, sizeof *s);
                s->used = s->ever = true;
                s->id = id;
                s->capture = d.capture;
                s->seq = ++g_admit_clock;
                if (id > g_last_admitted || !g_any_admitted)
                    g_last_admitted = id;
                g_any_admitted = true;
            }
            model_admit(in_flight ? ee : e, &d);
            if (!in_flight) {
                model_spec(s, &d);
                s->first = d;
            }
            S[in_flight ? ee : e].ad = d;
        }
    }
    if (!s->ever) {
        s->ever = true;
        s->id = id;
    }
    s->d = d;
    check(st != RSP_OK || !out.ok);
}

static mbuf *buf_find(uint32_t bucket, uint32_t lslot, uint32_t label)
{
    for (uint32_t i = 0; i < g_nbufs; i++)
        if (B[i].bucket == bucket && B[i].lslot == lslot && B[i].label == label)
            return &B[i];
    return NULL;
}

/* 1 + the largest per-token span of label's rows, capture rows included:
 * under a lease they fix the key's index tensor width. */
static uint32_t spec_width_of(const decl *d, uint32_t label)
{
    uint32_t w = 1;
    for (uint32_t i = 0; i < d->nrows; i++)
        if (d->rows[i].label == label && spec_asks(&d->rows[i]) && 1u + d->rows[i].span > w)
            w = 1u + (uint32_t)d->rows[i].span;
    return w;
}

/* Labels with rows of d, first appearance; counts in rows[]. */
static uint32_t plan_labels(const decl *d, uint32_t *labels, uint32_t *rows)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < d->nrows; i++) {
        uint32_t k = 0;
        while (k < n && labels[k] != d->rows[i].label)
            k++;
        if (k == n) {
            labels[n] = d->rows[i].label;
            rows[n++] = 0;
        }
        rows[k]++;
    }
    return n;
}

static void op_plan(input *in, int e, uint8_t how)
{
    mstep *s = &S[e];
    if (!s->ever)
        return;
    decl d = s->d;
    if (how & 1)
        d.preplan = !d.preplan;
    if ((how & 6) == 6)
        decode_decl(in, &d); /* a declaration that differs from the admitted one */
    else if ((how & 6) == 2 && d.nrows)
        d.rows[0].span = d.rows[0].span > 0 ? 0 : 1;
    rsp_step step;
    to_step(&d, s->id, &step);
    if (g_verbose)
        fprintf(stderr,
                "  plan entry %d step %" PRIu64 ": %u rows, capture %d preplan %d lease %d\n", e,
                s->id, d.nrows, d.capture, d.preplan, d.has_lease);
    dump_decl(&d);
    int ee = entry_of(s->id);
    if (ee >= 0 && ee != e) {
        e = ee; /* the step in flight under this id is another entry's */
        s = &S[e];
    }
    touch_decl(&d);
    touch_decl(&s->d);
    rsp_status want = decl_invalid(&d);
    bool may_eorder = false, may_enomem = false;
    bool take_stage = false;
    if (want == RSP_OK) {
        if (ee < 0 || S[ee].planned)
            want = RSP_EORDER;
        else if (d.preplan && g_stage >= 0)
            want = RSP_ESTAGED;
        else if (!spec_reserved(&d, &S[ee].first))
            want = RSP_EINVAL; /* per-token rows its admit did not reserve */
    }
    uint32_t labels[MAX_ROWS], rows[MAX_ROWS], nl = 0;
    if (want == RSP_OK) {
        nl = plan_labels(&d, labels, rows);
        if (d.has_lease)
            for (uint32_t k = 0; k < nl && want == RSP_OK; k++) {
                mbuf *b = buf_find(d.lease.bucket_id, d.lease.lease_slot, labels[k]);
                if (!b) {
                    if (g_graph_max_bs > (1u << 20))
                        may_enomem = true;
                    continue;
                }
                if (rows[k] > b->cap)
                    want = RSP_ECAPACITY;
                else if (b->width && spec_width_of(&d, labels[k]) > b->width)
                    want = RSP_ECAPACITY; /* the lease's index tensor is too narrow */
                else if (b->owner >= 0 && b->owner != e) {
                    if (!d.preplan && g_stage >= 0 && g_stage == b->owner)
                        take_stage = true;
                    else
                        want = RSP_ECAPACITY;
                }
            }
    }
    if (want == RSP_OK && !d.preplan && !d.capture) {
        /* check_pipeline: forks of this step against another planned one,
         * or rows on slots another planned step's post-forks touch. */
        bool others_post = false;
        for (int i = 0; i < MAX_STEPS; i++)
            if (i != e && S[i].used && S[i].planned && S[i].plan_npost)
                others_post = true;
        may_eorder = planned_others(e) && (d.npre || d.npost || others_post);
    }
    rsp_error err;
    g_op = d.preplan ? "plan (preplan)" : "plan";
    rsp_status st = do_plan(&step, &err);
    if (!((may_eorder && st == RSP_EORDER) || (may_enomem && st == RSP_ENOMEM)))
        expect_status(st, want, &err);
    if (st == RSP_OK) {
        if (take_stage)
            stage_drop();
        /* A plan (staged or live) pins every slot it addresses. */
        for (uint32_t i = 0; i < d.nrows && !d.capture; i++) {
            int ri = d.rid_ix[i];
            uint32_t li = d.rows[i].label;
            if (addresses(&d.rows[i]) && H[ri][li].held)
                LIST_ADD(s->pins, s->npins, ri, li);
        }
        if (d.preplan) {
            g_stage = e;
        } else {
            if (g_stage == e)
                stage_drop();
            model_forks(&d, d.pre, d.npre, true, false);
            s->planned = true;
            s->plan_npost = d.capture ? 0 : d.npost;
            g_live_id = s->id;
            s->nprows = 0;
            for (uint32_t i = 0; i < d.nrows && !d.capture; i++) {
                int ri = d.rid_ix[i];
                uint32_t li = d.rows[i].label;
                if (!addresses(&d.rows[i]) || !H[ri][li].held)
                    continue;
                s->prows[s->nprows].ri = (uint8_t)ri;
                s->prows[s->nprows].li = (uint8_t)li;
                s->prows[s->nprows].inst = H[ri][li].inst;
                s->prows[s->nprows++].epoch = H[ri][li].epoch;
            }
        }
        if (d.has_lease)
            for (uint32_t k = 0; k < nl; k++) {
                mbuf *b = buf_find(d.lease.bucket_id, d.lease.lease_slot, labels[k]);
                if (!b) {
                    CHECK(g_nbufs < MAX_BUFS, "model buffers full");
                    b = &B[g_nbufs++];
                    b->bucket = d.lease.bucket_id;
                    b->lslot = d.lease.lease_slot;
                    b->label = labels[k];
                    uint32_t len = rows[k];
                    if (d.lease.bucket_bs > len)
                        len = d.lease.bucket_bs;
                    if (g_graph_max_bs > len)
                        len = g_graph_max_bs;
                    b->cap = len;
                    b->width = 0;
                }
                if (!b->width && spec_width_of(&d, labels[k]) > 1)
                    b->width = spec_width_of(&d, labels[k]);
                b->owner = e;
            }
        s->d = d;
    }
    check(st != RSP_OK);
    if (st == RSP_OK && !d.preplan && (how & 8))
        forward(s->id, (uint8_t)(how | 1));
}

/* forward_done for a commit or rollback: returns the status the pool must
 * give for the event alone (RSP_OK or RSP_EINVAL). */
static rsp_status pick_event(uint8_t b, rsp_event *ev, bool *use)
{
    *use = true;
    memset(ev, 0, sizeof *ev);
    switch (b % 6) {
    case 0: *use = false; return RSP_OK;
    case 1: *ev = rsp_event_complete(); return RSP_OK; /* "the forward is done" */
    case 2:                                            /* already signalled */
        *ev = rsp_event_host(g_fence, rsp_host_fence_value(g_fence));
        return RSP_OK;
    case 3: /* signalled later (op SIGNAL, or the end of the input) */
    case 4: *ev = rsp_event_host(g_fence, ++g_fence_next); return RSP_OK;
    default:
        if (!g_dev_fence.handle) {
            *use = false;
            return RSP_OK;
        }
        /* The pool's own timeline far ahead: it would never complete. */
        *ev = g_dev_fence;
        ev->value = UINT64_MAX / 2;
        return RSP_EINVAL;
    }
}

/* Whether a commit of step needs a forward_done (rsp_step_commit): a row
 * wrote (span > 0, not padding) and it is no capture. */
static bool step_wrote(const rsp_step *step)
{
    if (step->capture)
        return false;
    for (uint32_t i = 0; i < step->num_rows; i++)
        if (step->rows[i].span > 0 && !step->rows[i].padding)
            return true;
    return false;
}

static void op_commit(input *in, int e, uint8_t how)
{
    mstep *s = &S[e];
    if (!s->ever)
        return;
    decl d = s->d;
    if ((how & 0x30) == 0x30)
        decode_decl(in, &d);
    /* Accepted counts: 0 .. span, now and then one past it (RSP_EINVAL). */
    bool bad_accept = false;
    for (uint32_t i = 0; i < d.nrows; i++)
        if (d.rows[i].per_token_states == 1 && d.rows[i].span >= 0) {
            d.rows[i].accepted = (uint16_t)((how + 7u * i) % ((uint32_t)d.rows[i].span + 2));
            bad_accept |= d.rows[i].accepted > d.rows[i].span;
        }
    rsp_step step;
    to_step(&d, s->id, &step);
    rsp_event ev;
    bool use;
    rsp_status want_ev = pick_event(how >> 1, &ev, &use);
    int ee = entry_of(s->id);
    if (ee >= 0 && ee != e) {
        e = ee;
        s = &S[e];
    }
    touch_decl(&d);
    touch_decl(&s->d);
    for (uint32_t i = 0; i < s->nprows; i++)
        g_touch |= 1u << s->prows[i].ri;
    /* rsp_post validates, then the owner checks the event, then the core. */
    rsp_status want = decl_invalid_post(&d);
    if (want == RSP_OK && bad_accept)
        want = RSP_EINVAL; /* an accepted count past its row's span */
    if (want == RSP_OK && !use && step_wrote(&step))
        want = RSP_EINVAL; /* rsp_post: a commit that wrote names its forward_done */
    if (want == RSP_OK)
        want = want_ev;
    if (want == RSP_OK)
        want = decl_invalid_core(&d);
    if (want == RSP_OK && (ee < 0 || (!S[ee].capture && !S[ee].planned)))
        want = RSP_EORDER;
    if (want == RSP_OK && decl_differs(&d, &S[ee].ad))
        want = RSP_EINVAL; /* a commit names what was admitted */
    if (g_verbose)
        fprintf(stderr, "  commit: %u rows (admitted %u), %u/%u forks (admitted %u/%u)\n", d.nrows,
                S[ee < 0 ? e : ee].ad.nrows, d.npre, d.npost, S[ee < 0 ? e : ee].ad.npre,
                S[ee < 0 ? e : ee].ad.npost);
    dump_decl(&d);
    rsp_error err;
    g_op = "commit";
    g_force_query = true; /* has_state moves without a counter */
    rsp_status st = do_commit(&step, use ? &ev : NULL, &err);
    expect_status(st, want, &err);
    if (st == RSP_OK) {
        if (!g_any_committed || s->id > g_last_committed)
            g_last_committed = s->id;
        g_any_committed = true;
        if (!s->capture) {
            for (uint32_t i = 0; i < s->nprows; i++) {
                mhold *h = &H[s->prows[i].ri][s->prows[i].li];
                if (h->held && h->inst == s->prows[i].inst && h->epoch == s->prows[i].epoch)
                    h->hs = HS_TRUE; /* the forward wrote the holding it addressed */
            }
            model_accept(&d);
            model_forks(&d, d.post, d.npost, planned_others(e) == 0, true);
        }
        if (g_stage == e)
            stage_drop(); /* the commit must drop its stage */
        bufs_release(e);
        s->used = false;
        s->planned = false;
        s->nout = s->nspecs = 0;
    }
    check(st != RSP_OK);
}

static void op_rollback(int e, uint8_t how)
{
    mstep *s = &S[e];
    uint64_t id = s->ever && (how & 0x80) == 0 ? s->id : g_step_base + 1000 + (how & 7);
    rsp_event ev;
    bool use;
    rsp_status want = pick_event(how >> 3, &ev, &use);
    int ee = entry_of(id);
    if (want == RSP_OK && ee >= 0 && rollback_blocked(ee))
        want = RSP_EORDER; /* newest first */
    rsp_error err;
    g_op = "rollback";
    rsp_status st = do_rollback(id, use ? &ev : NULL, &err);
    expect_status(st, want, &err);
    if (ee >= 0) {
        touch_decl(&S[ee].d);
        for (uint32_t j = 0; j < S[ee].njournal; j++)
            g_touch |= 1u << S[ee].journal[j].ri;
    }
    if (st == RSP_OK && ee >= 0) {
        mstep *x = &S[ee];
        /* Reverse allocation order; a journal entry whose holding is gone
         * (or was re-created since) is skipped. */
        for (uint32_t j = x->njournal; j-- > 0;) {
            mhold *h = &H[x->journal[j].ri][x->journal[j].li];
            if (h->held && h->inst == x->journal[j].inst)
                h->held = false;
        }
        if (g_stage == ee)
            stage_drop();
        bufs_release(ee);
        x->used = false;
        x->planned = false;
        x->nout = x->nspecs = 0;
    }
    check(st != RSP_OK);
}

static void op_rid(uint8_t kind, uint8_t b)
{
    int ri = b % NRIDS;
    rsp_rid rid = g_rids[ri];
    rsp_error err;
    rsp_status st;
    g_touch |= 1u << ri;
    switch (kind) {
    case 0:
        g_op = "ingest";
        st = do_rid(RSP_MSG_INGEST, rid, false, &err);
        expect_status(st, RSP_OK, &err);
        g_rid_exists[ri] = true;
        break;
    case 1:
        g_op = "remove";
        st = do_rid(RSP_MSG_REMOVE, rid, false, &err);
        expect_status(st, RSP_OK, &err);
        model_remove_rid(ri, true);
        break;
    default:
        g_op = (b & 0x80) ? "reset(free)" : "reset(keep)";
        st = do_rid(RSP_MSG_RESET, rid, b & 0x80, &err);
        expect_status(st, RSP_OK, &err);
        if (b & 0x80)
            model_remove_rid(ri, false);
        else
            model_reset_keep(ri);
        break;
    }
    check(false);
}

/* The vector forms: INGEST, REMOVE or RESET naming a list of the
 * universe's rids (rsp_ingest_many ..., or the message with msg.rids):
 * each rid as the single form, in list order; a rid listed twice refuses
 * the whole list (RSP_EINVAL) and nothing changes. */
static void op_rid_list(input *in, uint8_t a, uint8_t b)
{
    uint32_t n = 1 + b % (NRIDS + 1);
    rsp_rid rids[NRIDS + 1];
    int ix[NRIDS + 1];
    bool seen[NRIDS] = {false}, dup = false;
    for (uint32_t i = 0; i < n; i++) {
        ix[i] = u8(in) % NRIDS;
        dup |= seen[ix[i]];
        seen[ix[i]] = true;
        rids[i] = g_rids[ix[i]];
        g_touch |= 1u << ix[i];
    }
    const int kind = (a >> 3) % 3;
    const bool free_slots = a & 0x80;
    static const rsp_msg_kind kinds[3] = {RSP_MSG_INGEST, RSP_MSG_REMOVE, RSP_MSG_RESET};
    g_op = kind == 0 ? "ingest_many" : kind == 1 ? "remove_many" : "reset_many";
    rsp_error err;
    rsp_status st;
    if (g_pipe) {
        rsp_msg m = {.kind = kinds[kind], .rids = rids, .num_rids = n, .free = free_slots};
        rsp_reply r;
        st = pipe_call(&m, &r, &err);
    } else {
        st = kind == 0   ? rsp_ingest_many(g_pool, rids, n, &err)
             : kind == 1 ? rsp_remove_many(g_pool, rids, n, &err)
                         : rsp_reset_many(g_pool, rids, n, free_slots, &err);
    }
    expect_status(st, dup ? RSP_EINVAL : RSP_OK, &err);
    for (uint32_t i = 0; i < n && !dup; i++) {
        if (kind == 0)
            g_rid_exists[ix[i]] = true;
        else if (kind == 1)
            model_remove_rid(ix[i], true);
        else if (free_slots)
            model_remove_rid(ix[i], false);
        else
            model_reset_keep(ix[i]);
    }
    check(dup);
}

/* rsp_release of (rid, label): the holding goes (its slot now or at the
 * end of the steps that pin it); nothing held: nothing happens; a label
 * not interned: RSP_ENOLABEL at rsp_post. */
static void op_release(uint8_t b)
{
    int ri = b % NRIDS;
    uint32_t li = pick_label((uint8_t)(b / NRIDS));
    rsp_error err;
    g_op = "release";
    g_touch |= 1u << ri;
    rsp_msg m = {.kind = RSP_MSG_RELEASE, .rid = g_rids[ri], .label = li};
    rsp_reply r;
    rsp_status st = g_pipe ? pipe_call(&m, &r, &err) : rsp_release(g_pool, g_rids[ri], li, &err);
    expect_status(st, li < g_num_labels ? RSP_OK : RSP_ENOLABEL, &err);
    if (st == RSP_OK && li < NLAB)
        H[ri][li].held = false;
    check(st != RSP_OK);
}

static void op_clear_preplan(void)
{
    rsp_error err;
    g_op = "clear_preplan";
    expect_status(rsp_step_unstage(g_pool, &err), RSP_OK, &err);
    stage_drop();
    check(false);
}

static const char g_long31[] = "abcdefghijklmnopqrstuvwxyz01234";
static const char g_long32[] = "abcdefghijklmnopqrstuvwxyz012345";
static const char *g_extra_names[NLAB]; /* names interned by inputs, by id */

static void op_label(uint8_t b)
{
    const char *name;
    switch (b % 8) {
    case 4: name = "x4"; break;
    case 5: name = g_long31; break;
    case 6: name = ""; break;
    case 7: name = g_long32; break;
    default: name = g_label_names[b % 4]; break;
    }
    rsp_label_id want_id = UINT32_MAX;
    rsp_status want = RSP_OK;
    if (!*name || strlen(name) >= RSP_NAME_MAX) {
        want = RSP_EINVAL;
    } else {
        for (uint32_t i = 0; i < g_num_labels && i < NLAB; i++)
            if (strcmp(i < PRE_LABELS ? g_label_names[i] : g_extra_names[i], name) == 0)
                want_id = i;
        if (want_id == UINT32_MAX) {
            if (g_num_labels >= NLAB)
                return; /* the model follows NLAB labels */
            want_id = g_num_labels;
        }
    }
    rsp_label_id id = 12345;
    rsp_error err;
    g_op = "label";
    rsp_status st = rsp_label(g_pool, name, &id, &err);
    expect_status(st, want, &err);
    if (st == RSP_OK) {
        CHECK(id == want_id, "label \"%s\" -> %u, expected %u", name, id, want_id);
        if (id == g_num_labels) {
            g_extra_names[id] = name;
            g_num_labels++;
            g_dirty = true; /* outlives the input */
        }
    }
    check(st != RSP_OK);
}

static void op_graph(uint8_t b, uint8_t c)
{
    static const uint32_t bs[8] = {0, 1, 3, 8, 17, 64, UINT32_MAX, 1u << 28};
    uint32_t max_bs = bs[b % 8];
    rsp_error err;
    g_op = "build_graph_buffers";
    rsp_status st = rsp_build_graph_buffers(g_pool, max_bs, c, &err);
    if (max_bs == 0)
        expect_status(st, RSP_EINVAL, &err);
    else
        CHECK(st == RSP_OK || (max_bs > 1024 && st == RSP_EINVAL), "build_graph_buffers(%u): %s",
              max_bs, st ? err.message : "OK");
    if (st == RSP_OK && max_bs > g_graph_max_bs) {
        g_graph_max_bs = max_bs;
        if (max_bs > 1024)
            g_dirty = true; /* every later leased buffer would be huge */
    }
    check(st != RSP_OK);
}

static void op_signal(uint8_t b)
{
    uint64_t v = rsp_host_fence_value(g_fence);
    uint64_t to = b & 1 ? g_fence_next : v + (b >> 1) % 3;
    if (to > g_fence_next)
        to = g_fence_next;
    rsp_host_fence_signal(g_fence, to);
}

/* Raw messages with bad fields, answered (ticket) or fire-and-forget. The
 * model changes only for what the message does when it is good. */
static void op_raw(uint8_t b, uint8_t c)
{
    bool ff = c & 1, poll = c & 2;
    uint64_t timeout = c & 4 ? 0 : RSP_WAIT_FOREVER;
    rsp_msg m;
    memset(&m, 0, sizeof m);
    rsp_row rows[3] = {{.rid = 1, .span = 1}, {.rid = 1, .span = 2}, {.rid = 2}};
    rsp_status want_post = RSP_OK, want = RSP_OK;
    bool clears_stage = false;
    const rsp_msg *mp = &m;
    rsp_pool *pool = g_pool;
    switch (b % 20) {
    case 0:
        m.kind = RSP_MSG_KIND_COUNT_;
        want_post = RSP_EINVAL;
        break;
    case 1:
        m.kind = (rsp_msg_kind)-1;
        want_post = RSP_EINVAL;
        break;
    case 2:
        mp = NULL;
        want_post = RSP_EINVAL;
        break;
    case 3:
        pool = NULL;
        m.kind = RSP_MSG_BARRIER;
        want_post = RSP_EINVAL;
        break;
    case 4:
        m.kind = RSP_MSG_LABEL;
        want_post = RSP_EINVAL;
        break; /* NULL name */
    case 5:
        m.kind = RSP_MSG_HOLDING;
        m.label = g_num_labels + c;
        want_post = RSP_ENOLABEL;
        break;
    case 6:
        m.kind = RSP_MSG_ADMIT;
        m.step.num_rows = 3; /* rows NULL */
        m.step.step_id = g_step_base + 1;
        want_post = RSP_EINVAL;
        break;
    case 7:
        m.kind = RSP_MSG_BUILD_GRAPH_BUFFERS;
        want_post = RSP_EINVAL;
        break;
    case 8:
        m.kind = RSP_MSG_COMMIT;
        m.step.step_id = g_step_base + 500;
        want = RSP_EORDER;
        break;
    case 9:
        m.kind = RSP_MSG_PLAN;
        m.step.step_id = g_step_base + 500;
        want = RSP_EORDER;
        break;
    case 10:
        m.kind = RSP_MSG_ROLLBACK;
        m.step.step_id = g_step_base + 500;
        break;
    case 11: m.kind = RSP_MSG_STATS; break;
    case 12: m.kind = RSP_MSG_BARRIER; break;
    case 13:
        m.kind = RSP_MSG_CLEAR_PREPLAN;
        clears_stage = true;
        break;
    case 14:
        m.kind = RSP_MSG_HOLDING;
        m.rid = g_rids[c % NRIDS];
        m.label = c % g_num_labels;
        /* The model tracks labels < NLAB; rows never name the others. */
        want = m.label < NLAB && H[c % NRIDS][m.label].held ? RSP_OK : RSP_ENOREQ;
        break;
    case 15:
        m.kind = RSP_MSG_ADMIT;
        m.step.step_id = g_step_base + 1;
        m.step.rows = rows;
        m.step.num_rows = 1;
        m.step.has_lease = true; /* bucket_bs 0 */
        want = RSP_EINVAL;
        break;
    case 16:
        m.kind = RSP_MSG_ADMIT;
        m.step.step_id = g_step_base + 1;
        m.step.rows = rows;
        m.step.num_rows = 2; /* (1, main) twice with span > 0 */
        want = RSP_EDUPROW;
        break;
    case 17:
        m.kind = RSP_MSG_ADMIT;
        m.step.rows = rows;
        m.step.num_rows = 1;
        m.step.post_forks = NULL;
        m.step.num_post_forks = 2;
        want_post = RSP_EINVAL;
        break;
    case 18:
        m.kind = RSP_MSG_LABEL;
        m.label_name = g_long32;
        want_post = RSP_EINVAL;
        break;
    default:
        g_op = "rsp_wait(NULL)";
        CHECK(rsp_wait(NULL, RSP_WAIT_POLL, NULL) == RSP_EINVAL, "rsp_wait(NULL)");
        return;
    }
    rsp_error err;
    rsp_ticket *t = (rsp_ticket *)&err; /* must be set to NULL on refusal */
    g_op = ff ? "rsp_post (fire and forget)" : "rsp_post";
    rsp_status st = rsp_post(pool, mp, ff ? NULL : &t, timeout, &err);
    if (st == RSP_EFULL && timeout == 0) {
        CHECK(ff || t == NULL, "refused post left a ticket");
        check(true);
        return;
    }
    expect_status(st, want_post, &err);
    if (st != RSP_OK) {
        CHECK(ff || t == NULL, "refused post left a ticket");
        check(true);
        return;
    }
    if (!ff) {
        rsp_reply r;
        if (poll) {
            rsp_status p = rsp_wait(t, RSP_WAIT_POLL, &r);
            if (p == RSP_EAGAIN)
                p = rsp_wait(t, RSP_WAIT_FOREVER, &r);
            st = p;
        } else {
            st = rsp_wait(t, RSP_WAIT_FOREVER, &r);
        }
        expect_status(st, want, &r.error);
        CHECK(r.error.status == st, "reply.error.status %d != %d", r.error.status, st);
    } else {
        g_op = "barrier";
        expect_status(rsp_barrier(g_pool, &err), RSP_OK, &err);
    }
    if (clears_stage)
        stage_drop();
    check(want != RSP_OK);
}

/* Intern labels until every id is taken (RSP_ECAPACITY). Outlives the
 * input: the pool is recreated after it. */
static void op_label_flood(void)
{
    static char names[RSP_MAX_LABELS][8];
    rsp_error err;
    g_op = "label flood";
    while (g_num_labels < RSP_MAX_LABELS) {
        char *name = names[g_num_labels];
        snprintf(name, sizeof names[0], "f%u", g_num_labels); /* new: ids are unique */
        rsp_label_id id;
        expect_status(rsp_label(g_pool, name, &id, &err), RSP_OK, &err);
        CHECK(id == g_num_labels, "label %s -> %u, expected %u", name, id, g_num_labels);
        if (id < NLAB)
            g_extra_names[id] = name;
        g_num_labels++;
    }
    rsp_label_id id;
    expect_status(rsp_label(g_pool, "one too many", &id, &err), RSP_ECAPACITY, &err);
    g_dirty = true;
    check(true);
}

/* Many requests outside the model's universe (the rid table grows and
 * deletes with collisions), all removed again before the check. */
static void op_many_rids(uint8_t n, uint8_t step)
{
    rsp_error err;
    uint32_t count = 16 + n % 112;
    rsp_rid base = 1000 + (rsp_rid)step * 977;
    g_op = "many rids";
    for (uint32_t i = 0; i < count; i++) {
        rsp_msg m = {.kind = RSP_MSG_INGEST, .rid = base + (rsp_rid)i * (1 + step % 7) * 64};
        expect_status(rsp_post(g_pool, &m, NULL, RSP_WAIT_FOREVER, &err), RSP_OK, &err);
    }
    rsp_stats st;
    expect_status(rsp_stats_snapshot(g_pool, &st, &err), RSP_OK, &err);
    CHECK(st.num_requests == g_prev.st.num_requests + count, "num_requests %u after %u ingests",
          st.num_requests, count);
    /* Every other one first: deletions in the middle of probe runs. */
    for (uint32_t i = 0; i < count; i++) {
        uint32_t k = i < (count + 1) / 2 ? 2 * i : 2 * (i - (count + 1) / 2) + 1;
        rsp_msg m = {.kind = RSP_MSG_REMOVE, .rid = base + (rsp_rid)k * (1 + step % 7) * 64};
        expect_status(rsp_post(g_pool, &m, NULL, RSP_WAIT_FOREVER, &err), RSP_OK, &err);
    }
    expect_status(rsp_barrier(g_pool, &err), RSP_OK, &err);
    check_full(false, true);
}

/* A few fire-and-forget posts, then one barrier: the batched path. */
static void op_batch(input *in, uint8_t n)
{
    n = 1 + n % 8;
    rsp_error err;
    for (uint8_t i = 0; i < n; i++) {
        uint8_t b = u8(in);
        int ri = (b >> 2) % NRIDS;
        rsp_msg m;
        memset(&m, 0, sizeof m);
        m.rid = g_rids[ri];
        g_touch |= 1u << ri;
        switch (b & 3) {
        case 0: m.kind = RSP_MSG_INGEST; break;
        case 1: m.kind = RSP_MSG_REMOVE; break;
        case 2:
            m.kind = RSP_MSG_RESET;
            m.free = b & 0x80;
            break;
        default: m.kind = RSP_MSG_CLEAR_PREPLAN; break;
        }
        g_op = "rsp_post (batch)";
        rsp_status st = rsp_post(g_pool, &m, NULL, b & 0x40 ? 0 : RSP_WAIT_FOREVER, &err);
        if (st == RSP_EFULL && (b & 0x40))
            continue;
        expect_status(st, RSP_OK, &err);
        switch (m.kind) {
        case RSP_MSG_INGEST: g_rid_exists[ri] = true; break;
        case RSP_MSG_REMOVE: model_remove_rid(ri, true); break;
        case RSP_MSG_RESET:
            if (m.free)
                model_remove_rid(ri, false);
            else if (g_rid_exists[ri])
                model_reset_keep(ri);
            break;
        default: stage_drop(); break;
        }
    }
    g_op = "barrier";
    expect_status(rsp_barrier(g_pool, &err), RSP_OK, &err);
    check(false);
}

/* Everything the device was given has run: admit and plan a step of one
 * padding row and wait for its plan's ready event (the device runs its work
 * in FIFO order), then roll it back. Signals the harness's fence first (the
 * device waits for every forward_done it was given). False when no step
 * record is free. */
static bool flush(void)
{
    rsp_host_fence_signal(g_fence, g_fence_next);
    if (steps_in_flight() >= MAX_INFLIGHT)
        return false;
    rsp_row pad = {.rid = 77, .label = RSP_LABEL_MAIN, .span = 1, .padding = true};
    rsp_step step = {.step_id = ++g_step_base, .rows = &pad, .num_rows = 1};
    rsp_admit_outcome out;
    rsp_error err;
    g_op = "flush admit";
    expect_status(rsp_step_admit(g_pool, &step, &out, &err), RSP_OK, &err);
    CHECK(out.ok, "a padding-only step was refused");
    g_last_admitted = step.step_id;
    g_any_admitted = true;
    g_op = "flush plan";
    rsp_status st = rsp_step_plan(g_pool, &step, &err);
    expect_status(st, RSP_OK, &err);
    g_live_id = step.step_id;
    forward(step.step_id, 0);
    g_op = "flush rollback";
    expect_status(rsp_step_rollback(g_pool, step.step_id, NULL, &err), RSP_OK, &err);
    return true;
}

/* Every slot that is neither held nor the sink reads zero. */
static void op_check_memory(void)
{
    if (!flush())
        return;
    check_full(false, true); /* every holding: the held slots */
    if (g_prev.st.pending_release)
        return; /* released during a step in flight: zeroed at its end */
    bool held[MAX_SLOTS] = {0};
    for (int ri = 0; ri < NRIDS; ri++)
        for (int li = 0; li < NLAB; li++)
            if (g_prev.hst[ri][li] == RSP_OK)
                held[g_prev.h[ri][li].index] = true;
    g_op = "memory check";
    for (int32_t s = g_info.sink ? 1 : 0; s < MAX_SLOTS; s++)
        CHECK(held[s] || slot_zero(s), "free slot %d does not read zero", s);
}

/* Rollback with a forward_done the host pool cannot wait on: a heap block labelled as a host fence
 * (its tag does not match), a handle of kind NONE, a CUDA event, an unknown kind. RSP_EINVAL, and
 * nothing changes. */
static void op_stray_event(int e, uint8_t how)
{
    mstep *s = &S[e];
    if (!s->ever || !s->used)
        return;
    static const rsp_event_kind kinds[4] = {RSP_EVENT_HOST_FENCE, RSP_EVENT_NONE, RSP_EVENT_CUDA,
                                            RSP_EVENT_KIND_COUNT_};
    uint64_t *junk = calloc(4, sizeof *junk);
    CHECK(junk, "calloc");
    rsp_event ev = {.kind = kinds[how % 4], .handle = junk, .value = 1};
    rsp_error err;
    g_op = "rollback with a stray event";
    rsp_status st = rsp_step_rollback(g_pool, s->id, &ev, &err);
    CHECK(st == RSP_EINVAL, "a forward_done of kind %d that is no fence: %s", (int)ev.kind,
          rsp_strerror(st));
    free(junk);
    check(true);
}

/* Commit with a fence the caller destroys right after posting (rsp.h: queued
 * work keeps it alive). */
static void op_fence_drop(int e)
{
    mstep *s = &S[e];
    if (!s->ever || !s->used || !(s->planned || s->capture))
        return;
    rsp_host_fence *f;
    rsp_error err;
    CHECK(rsp_host_fence_create(&f, &err) == RSP_OK, "rsp_host_fence_create");
    rsp_host_fence_signal(f, 1);
    rsp_step step;
    to_step(&s->d, s->id, &step);
    touch_decl(&s->d);
    for (uint32_t j = 0; j < s->njournal; j++)
        g_touch |= 1u << s->journal[j].ri;
    rsp_msg m = {.kind = RSP_MSG_ROLLBACK, .step = step, .event = rsp_event_host(f, 1)};
    rsp_ticket *t;
    g_op = "rollback, fence dropped after the post";
    expect_status(rsp_post(g_pool, &m, &t, RSP_WAIT_FOREVER, &err), RSP_OK, &err);
    rsp_host_fence_destroy(f);
    rsp_reply r;
    bool blocked = rollback_blocked(e);
    expect_status(rsp_wait(t, RSP_WAIT_FOREVER, &r), blocked ? RSP_EORDER : RSP_OK, &r.error);
    if (blocked) { /* newest first: refused, nothing changed */
        check(true);
        return;
    }
    for (uint32_t j = s->njournal; j-- > 0;) {
        mhold *h = &H[s->journal[j].ri][s->journal[j].li];
        if (h->held && h->inst == s->journal[j].inst)
            h->held = false;
    }
    if (g_stage == e)
        stage_drop();
    bufs_release(e);
    s->used = s->planned = false;
    check(false);
}

/* ------------------------------------------------------------------------ */
/* One input                                                                 */
/* ------------------------------------------------------------------------ */

static bool g_shut; /* the input shut the pool down */

static void op_shutdown(void)
{
    rsp_msg m = {.kind = RSP_MSG_SHUTDOWN};
    rsp_ticket *t;
    rsp_error err;
    g_op = "shutdown";
    expect_status(rsp_post(g_pool, &m, &t, RSP_WAIT_FOREVER, &err), RSP_OK, &err);
    rsp_reply r;
    expect_status(rsp_wait(t, RSP_WAIT_FOREVER, &r), RSP_OK, &r.error);
    rsp_status st = rsp_ingest(g_pool, 1, &err);
    CHECK(st == RSP_ESHUTDOWN, "ingest after shutdown: %s", rsp_strerror(st));
    g_shut = true;
}

static void model_clear(void)
{
    memset(H, 0, sizeof H);
    memset(g_rid_exists, 0, sizeof g_rid_exists);
    memset(S, 0, sizeof S);
    g_stage = -1;
    g_nbufs = 0;
}

/* ------------------------------------------------------------------------ */
/* Checkpoints                                                               */
/* ------------------------------------------------------------------------ */

/* What the pool says about every key of the universe: the owner's answer
 * (query) and the readers' index (lookup) must agree; slots are distinct
 * and in their tier's range; a key the model pinned is there with its pins;
 * the tier gauges count them. */
typedef struct ckview {
    rsp_status st[NKEYS];
    rsp_checkpoint_info info[NKEYS];
} ckview;

static void ck_observe(ckview *v)
{
    rsp_error err;
    uint32_t per_tier[2] = {0, 0};
    bool used[CK_DEV + CK_HOST] = {0};
    for (int k = 0; k < NKEYS; k++) {
        v->st[k] = rsp_checkpoint_query(g_pool, g_keys[k], &v->info[k], &err);
        CHECK(v->st[k] == RSP_OK || v->st[k] == RSP_ENOKEY, "query(key %d): %s", k,
              rsp_strerror(v->st[k]));
        CHECK(rsp_read_begin() == RSP_OK, "rsp_read_begin");
        rsp_checkpoint_loc loc;
        rsp_status ls = rsp_checkpoint_lookup(g_pool, g_keys[k], &loc, NULL);
        rsp_read_end();
        CHECK(ls == v->st[k], "key %d: lookup %s, query %s", k, rsp_strerror(ls),
              rsp_strerror(v->st[k]));
        if (v->st[k] != RSP_OK) {
            CHECK(g_kpins[k] == 0, "key %d pinned %u times but gone", k, g_kpins[k]);
            continue;
        }
        const rsp_checkpoint_info *i = &v->info[k];
        CHECK(loc.tier == i->tier && loc.slot == i->slot, "key %d: lookup (%d, %d), query (%d, %d)",
              k, loc.tier, loc.slot, i->tier, i->slot);
        int32_t lo = MAX_SLOTS + (i->tier == RSP_TIER_HOST ? CK_DEV : 0);
        int32_t hi = lo + (i->tier == RSP_TIER_HOST ? CK_HOST : CK_DEV);
        CHECK(i->slot >= lo && i->slot < hi, "key %d: slot %d not in its tier", k, i->slot);
        CHECK(!used[i->slot - MAX_SLOTS], "slot %d stores two keys", i->slot);
        used[i->slot - MAX_SLOTS] = true;
        CHECK(i->user_pins == g_kpins[k], "key %d: %u pins, model %u", k, i->user_pins, g_kpins[k]);
        CHECK(i->pins == 0, "key %d: pinned by a step, but no step restores", k);
        per_tier[i->tier]++;
    }
    rsp_stats st;
    CHECK(rsp_stats_snapshot(g_pool, &st, &err) == RSP_OK, "stats");
    CHECK(st.checkpoints_device == per_tier[0] && st.checkpoints_host == per_tier[1],
          "checkpoint gauges %u/%u, keys %u/%u", st.checkpoints_device, st.checkpoints_host,
          per_tier[0], per_tier[1]);
}

static bool ck_same(const ckview *a, const ckview *b)
{
    for (int k = 0; k < NKEYS; k++)
        if (a->st[k] != b->st[k] || (a->st[k] == RSP_OK && (a->info[k].slot != b->info[k].slot ||
                                                            a->info[k].tier != b->info[k].tier)))
            return false;
    return true;
}

/* One checkpoint call on key k: take (from rid ri's holding of label li,
 * into tier), drop, pin, unpin. Statuses the model can predict are
 * checked; an error changes neither the keys nor the holdings. */
static void op_ckpt(uint8_t a, uint8_t b)
{
    const int what = ((a % 8) - 3) * 2 + ((a >> 3) & 1); /* 0 .. 5 */
    const int k = b & 3;
    int ri = (b >> 2) % NRIDS;
    uint32_t li = (uint32_t)(b >> 5) % (g_num_labels + 1); /* the last: not interned */
    /* A good take, most of the time: the first holding the model knows of
     * from (ri, li) on. */
    for (int n = 0; what == 0 && (a >> 5) & 1 && n < NRIDS * NLAB; n++) {
        int at = (ri * NLAB + (int)li % NLAB + n) % (NRIDS * NLAB);
        if (H[at / NLAB][at % NLAB].held) {
            ri = at / NLAB;
            li = (uint32_t)(at % NLAB);
            break;
        }
    }
    const rsp_tier tier = (a >> 4) & 1 ? RSP_TIER_HOST : RSP_TIER_DEVICE;
    ckview before, after;
    ck_observe(&before);
    rsp_error err;
    rsp_status st;
    const bool present = before.st[k] == RSP_OK;
    switch (what) {
    case 0:
    case 1: {
        g_op = "rsp_checkpoint_take";
        st = rsp_checkpoint_take(g_pool, g_keys[k], g_rids[ri], li,
                                 what ? (rsp_tier)(a >> 5) : tier, 0, &err);
        if (what && (a >> 5) >= RSP_TIER_COUNT_) {
            expect_status(st, RSP_EINVAL, &err);
            break;
        }
        if (li >= g_num_labels) {
            expect_status(st, RSP_ENOLABEL, &err);
            break;
        }
        const bool held = li < NLAB && H[ri][li].held;
        if (!held)
            expect_status(st, RSP_ENOREQ, &err);
        else if (present && g_kpins[k])
            CHECK(st == RSP_EPINNED || (st == RSP_EORDER && steps_in_flight() > 0),
                  "take of a pinned key: %s", rsp_strerror(st));
        else
            CHECK(st == RSP_OK ||
                      (st == RSP_ECAPACITY &&
                       (g_kpins[0] || g_kpins[1] || g_kpins[2] || g_kpins[3])) ||
                      (st == RSP_EORDER && steps_in_flight() > 0),
                  "take: %s (%s)", rsp_strerror(st), err.message);
        if (st == RSP_OK) {
            ck_observe(&after);
            CHECK(after.st[k] == RSP_OK, "key %d not there after its take", k);
        }
        break;
    }
    case 2:
        g_op = "rsp_checkpoint_drop";
        st = rsp_checkpoint_drop(g_pool, g_keys[k], &err);
        expect_status(st, !present ? RSP_ENOKEY : g_kpins[k] ? RSP_EPINNED : RSP_OK, &err);
        break;
    case 3:
    case 5:
        g_op = "rsp_checkpoint_pin";
        st = rsp_checkpoint_pin(g_pool, g_keys[k], &err);
        expect_status(st, present ? RSP_OK : RSP_ENOKEY, &err);
        g_kpins[k] += st == RSP_OK;
        break;
    default:
        g_op = "rsp_checkpoint_unpin";
        st = rsp_checkpoint_unpin(g_pool, g_keys[k], &err);
        expect_status(st, !present ? RSP_ENOKEY : g_kpins[k] ? RSP_OK : RSP_EINVAL, &err);
        g_kpins[k] -= st == RSP_OK;
        break;
    }
    ck_observe(&after);
    if (st != RSP_OK)
        CHECK(ck_same(&before, &after), "a failed %s changed the checkpoints", g_op);
    if (what == 2 && st == RSP_OK)
        CHECK(after.st[k] == RSP_ENOKEY, "key %d there after its drop", k);
    check(st != RSP_OK);
}

/* Every key unpinned and dropped (cleanup: no step is in flight). */
static void ck_clear(void)
{
    rsp_error err;
    g_op = "checkpoint cleanup";
    for (int k = 0; k < NKEYS; k++) {
        for (; g_kpins[k]; g_kpins[k]--)
            expect_status(rsp_checkpoint_unpin(g_pool, g_keys[k], &err), RSP_OK, &err);
        rsp_status st = rsp_checkpoint_drop(g_pool, g_keys[k], &err);
        CHECK(st == RSP_OK || st == RSP_ENOKEY, "drop at cleanup: %s", rsp_strerror(st));
    }
    ckview v;
    ck_observe(&v);
}

/* Back to a clean pool: every step rolled back, no stage, no request; every
 * slot but the sink reads zero. */
static void cleanup(void)
{
    rsp_error err;
    rsp_host_fence_signal(g_fence, g_fence_next);
    /* Fire-and-forget, then one barrier: a failure shows in the stats below. */
    g_op = "cleanup";
    /* Newest first: a rollback behind a later step in flight is refused. */
    bool done[MAX_STEPS] = {false};
    for (;;) {
        int last = -1;
        for (int e = 0; e < MAX_STEPS; e++)
            if (S[e].used && !done[e] && (last < 0 || S[e].seq > S[last].seq))
                last = e;
        if (last < 0)
            break;
        done[last] = true;
        rsp_msg m = {.kind = RSP_MSG_ROLLBACK, .step.step_id = S[last].id};
        expect_status(rsp_post(g_pool, &m, NULL, RSP_WAIT_FOREVER, &err), RSP_OK, &err);
    }
    rsp_msg clear = {.kind = RSP_MSG_CLEAR_PREPLAN};
    expect_status(rsp_post(g_pool, &clear, NULL, RSP_WAIT_FOREVER, &err), RSP_OK, &err);
    for (int ri = 0; ri < NRIDS; ri++)
        if (g_rid_exists[ri]) {
            rsp_msg m = {.kind = RSP_MSG_REMOVE, .rid = g_rids[ri]};
            expect_status(rsp_post(g_pool, &m, NULL, RSP_WAIT_FOREVER, &err), RSP_OK, &err);
        }
    /* Memory only the harness's forwards write: without one this input
     * left every byte as the last check found it (zero). */
    for (int e = 0; e < MAX_STEPS; e++)
        S[e].used = false, S[e].nout = S[e].nspecs = 0;
    ck_clear();
    if (g_wrote)
        CHECK(flush(), "flush after cleanup");
    model_clear();
    check_full(false, true);
    const rsp_stats *st = &g_prev.st;
    CHECK(st->free_slots == g_info.usable_slots && st->held_slots == 0 &&
              st->pending_release == 0 && st->num_requests == 0,
          "not clean after cleanup: free %u held %u pending %u requests %u", st->free_slots,
          st->held_slots, st->pending_release, st->num_requests);
    g_op = "memory check after cleanup";
    for (int32_t s = g_info.sink ? 1 : 0; s < MAX_SLOTS && g_wrote; s++)
        CHECK(slot_zero(s), "slot %d does not read zero after cleanup", s);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    g_fresh_pool = env_on("RSP_FUZZ_FRESH_POOL");
    g_verbose = env_on("RSP_FUZZ_VERBOSE");
    if (getenv("RSP_FUZZ_PIPE"))
        g_pipe_mode = env_on("RSP_FUZZ_PIPE");
    rsp_error err;
    if (rsp_reader_register(&err) != RSP_OK)
        fail("rsp_reader_register: %s", err.message);
    if (rsp_host_fence_create(&g_fence, &err) != RSP_OK)
        fail("rsp_host_fence_create: %s", err.message);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return -1; /* longer inputs add nothing but time */
    if (g_fresh_pool || ++g_inputs_on_pool > 256)
        pool_destroy();
    input in = {data, size};
    g_opno = 0;
    g_dirty = g_shut = g_wrote = false;
    g_bucket_base += 2;
    model_clear();
    if (!g_pool) {
        pool_create();
        g_op = "start";
        check_full(false, true); /* later inputs start from the last cleanup's */
    }
    while (in.n && !g_shut && g_opno < 200) {
        g_opno++;
        uint8_t op = u8(&in), a = u8(&in), b = u8(&in);
        g_pipe = g_pipe_mode < 0 ? (op & 0x80) != 0 : g_pipe_mode;
        int e = a % 4 == 3 ? a % MAX_STEPS : a % 4;
        if (g_verbose)
            fprintf(stderr, "op %u: %u %u %u\n", g_opno, op % 24, a, b);
        switch (op % 24) {
        case 0:
        case 1: op_admit(&in, e, b & 1, b >> 1); break;
        case 2: op_admit(&in, e, false, b); break;
        case 3:
        case 4: op_plan(&in, e, b); break;
        case 5:
        case 6: op_commit(&in, e, b); break;
        case 7: op_rollback(e, b); break;
        case 8: op_rid(0, b); break;
        case 9: op_rid(1, b); break;
        case 10: op_rid(2, b); break;
        case 11: op_clear_preplan(); break;
        case 12: op_label(b); break;
        case 13: op_graph(a, b); break;
        case 14:
        case 15: op_raw(a, b); break;
        case 16: op_batch(&in, b); break;
        case 17: op_signal(b); break;
        case 18: op_check_memory(); break;
        case 19: op_stray_event(e, b); break;
        case 20: op_fence_drop(e); break;
        case 21:
            if (a == 0xA5 && b == 0x5A)
                op_shutdown();
            else if (a == 0x5A && b == 0xA5)
                op_label_flood();
            else if (a % 8 == 0)
                op_many_rids(a >> 3, b);
            else if (a % 8 == 1)
                op_release(b);
            else if (a % 8 == 2)
                op_rid_list(&in, a, b);
            else if (a % 8 <= 5)
                op_ckpt(a, b);
            break;
        default: op_plan(&in, e, b | 8); break; /* plan and run its forward */
        }
    }
    if (g_shut) {
        rsp_host_fence_signal(g_fence, g_fence_next);
        pool_destroy();
        model_clear();
        memset(g_kpins, 0, sizeof g_kpins);
        return 0;
    }
    cleanup();
    if (g_dirty)
        pool_destroy();
    return 0;
}
