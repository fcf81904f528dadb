/*
 * prefix_trace: a prefix cache driven by workload traces, LRU against the
 * value policy (docs/checkpoints.md, "Value"). An engine's radix tree in
 * miniature drives a real pool through the public API: a request extends a
 * node of the tree by a segment of tokens; the engine restores from the
 * deepest cached node on its path, takes a checkpoint at a branch point it
 * passes (a shared prompt, a node another request forked from) and at the
 * end of the request (the last token of a turn), and sets each take's
 * value to its prefix length (the tokens a restore saves). A toy forward
 * writes bytes known from the node; every restored state is checked byte
 * for byte after the plan's ready. Evictions come back through
 * on_checkpoint_evict and prune the tree.
 *
 * Workloads, generated from a seed: multi-turn chat (sessions whose context
 * grows turn by turn, each back after a think time, many interleaved),
 * shared prompts (a few long system prompts, many short questions, some
 * with a follow-up), agentic (long tool-use trajectories that fork from and
 * revisit earlier points). Each at three sizes of the checkpoint store
 * (half device tier, half host tier, with demotion), small, medium and
 * large against the workload's working set. One JSON row per (workload,
 * tier, policy): token_hit_rate, the tokens restored and the requests'
 * median time; the value row's baseline is the LRU row of its point.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define PT_NONE UINT32_MAX
#define PT_MAX_SESS 64
#define PT_MAX_PATH 64
#define PT_BLOCK_BYTES 16 /* BENCH_TINY: f32[4] a block, a layer */
/* The value policy's weight: a token a restore saves is worth this many
 * uses of the clock (pushes), times the slot's bytes (the score divides
 * by them). One weight for every workload, as an engine would set it. */
#define PT_USES_PER_TOKEN 0.02

typedef enum pt_workload { PT_CHAT = 0, PT_SHARED, PT_AGENT, PT_WORKLOADS } pt_workload;
static const char *const pt_workload_names[PT_WORKLOADS] = {"multi_turn", "shared_prompts",
                                                            "agentic"};
/* Checkpoint capacity (device + host) at the small, medium and large tier,
 * per workload; the working set is in the comment of each generator. */
static const uint32_t pt_tiers[PT_WORKLOADS][3] = {{16, 48, 128}, {6, 16, 48}, {12, 32, 96}};
static const char *const pt_tier_names[3] = {"small", "medium", "large"};

typedef struct pt_node {
    uint32_t parent, len, children;
    bool cached, branch;
} pt_node;

typedef struct pt_sess {
    uint64_t ready_at;
    uint32_t left; /* requests left */
    uint32_t path[PT_MAX_PATH], depth;
} pt_sess;

typedef struct pt_run {
    rsp_pool *pool;
    pt_node *nodes;
    uint32_t num_nodes, cap_nodes;
    uint64_t rng, tick, sid;
    rsp_rid rid;
    pt_sess sess[PT_MAX_SESS];
    uint32_t num_sess;
    uint32_t roots[4], num_roots;
    uint64_t tokens, hit_tokens, requests, hits;
    bench_samples ns;
} pt_run;

static uint64_t pt_rand(pt_run *r)
{
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return r->rng;
}

static uint32_t pt_between(pt_run *r, uint32_t lo, uint32_t hi)
{
    return lo + (uint32_t)(pt_rand(r) % (hi - lo + 1));
}

static uint32_t pt_node_new(pt_run *r, uint32_t parent, uint32_t tokens)
{
    if (r->num_nodes == r->cap_nodes) {
        r->cap_nodes = r->cap_nodes ? 2 * r->cap_nodes : 1024;
        r->nodes = realloc(r->nodes, r->cap_nodes * sizeof *r->nodes);
        if (!r->nodes)
            bench_die("prefix_trace", RSP_ENOMEM, "out of memory for the tree");
    }
    uint32_t len = (parent == PT_NONE ? 0 : r->nodes[parent].len) + tokens;
    r->nodes[r->num_nodes] = (pt_node){.parent = parent, .len = len};
    if (parent != PT_NONE && ++r->nodes[parent].children >= 2)
        r->nodes[parent].branch = true;
    return r->num_nodes++;
}

/* The owner thread, before the answer of the call that evicted: the next
 * request's walk (after that answer) sees the node uncached. */
static void pt_on_evict(void *ctx, const rsp_checkpoint_event *ev)
{
    pt_run *r = ctx;
    if (!ev->demoted)
        r->nodes[ev->key - 1].cached = false;
}

/* The byte i of block b, layer l of node n's state (0: the zero state). */
static uint8_t pt_byte(uint32_t n, uint32_t b, uint32_t l, uint32_t i)
{
    uint32_t x = (n + 1) * 2654435761u ^ (b * 131u + l * 17u + i);
    return n == PT_NONE ? 0 : (uint8_t)(x ^ x >> 13);
}

/* Write (forward) or check (restore) node n's state in request slot. */
static bool pt_state(pt_run *r, int32_t slot, uint32_t n, bool write)
{
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t l = 0; l < 2; l++) {
            rsp_block_view v;
            rsp_error err;
            BENCH_CHECK(rsp_pool_block(r->pool, b ? "ssm" : "conv", l, &v, &err), &err);
            uint8_t *at = (uint8_t *)v.data + (size_t)slot * PT_BLOCK_BYTES;
            for (uint32_t i = 0; i < PT_BLOCK_BYTES; i++) {
                if (write)
                    at[i] = pt_byte(n, b, l, i);
                else if (at[i] != pt_byte(n, b, l, i))
                    return false;
            }
        }
    return true;
}

/* What a restore of node n saves: its prefix less that of the deepest
 * cached branch point above it, the state a request would otherwise
 * start from (branch points stay: others share them). */
static uint64_t pt_value(const pt_run *r, uint32_t n)
{
    uint32_t b = r->nodes[n].parent;
    while (b != PT_NONE && !(r->nodes[b].branch && r->nodes[b].cached))
        b = r->nodes[b].parent;
    return r->nodes[n].len - (b == PT_NONE ? 0 : r->nodes[b].len);
}

/* One step: a row of rid from node `from` (cached, or PT_NONE: the zero
 * state) to node `to`, the restored state checked, `to`'s bytes written as
 * the forward, `to` taken at the commit and given its prefix as value. */
static void pt_step(pt_run *r, rsp_rid rid, uint32_t from, uint32_t to)
{
    rsp_error err = {0};
    uint32_t span = r->nodes[to].len - (from == PT_NONE ? 0 : r->nodes[from].len);
    rsp_row row = {.rid = rid, .label = RSP_LABEL_MAIN, .span = (int32_t)(span ? span : 1)};
    rsp_restore rs = {.rid = rid, .label = RSP_LABEL_MAIN, .key = (uint64_t)from + 1};
    rsp_checkpoint_decl take = {
        .rid = rid, .label = RSP_LABEL_MAIN, .tier = RSP_TIER_DEVICE, .key = (uint64_t)to + 1};
    rsp_step st = {.step_id = r->sid++,
                   .rows = &row,
                   .num_rows = 1,
                   .restores = from == PT_NONE ? NULL : &rs,
                   .num_restores = from == PT_NONE ? 0 : 1,
                   .checkpoints = &take,
                   .num_checkpoints = 1};
    rsp_admit_outcome out;
    BENCH_CHECK(rsp_step_admit(r->pool, &st, &out, &err), &err);
    if (!out.ok)
        bench_die("prefix_trace admit", RSP_ECAPACITY, "pool full");
    BENCH_CHECK(rsp_step_plan(r->pool, &st, &err), &err);
    rsp_read_begin();
    rsp_addressing a;
    BENCH_CHECK(rsp_plan_live_addressing(r->pool, RSP_LABEL_MAIN, &a, &err), &err);
    rsp_event ready = a.ready;
    int32_t slot = a.slot_indices[0];
    bool has_state = a.has_state[0];
    rsp_read_end();
    BENCH_CHECK(rsp_event_wait(r->pool, &ready, RSP_WAIT_FOREVER, &err), &err);
    if (has_state != (from != PT_NONE) || !pt_state(r, slot, from, false))
        bench_die("prefix_trace", RSP_EINVAL, "a restored state differs from its node's");
    pt_state(r, slot, to, true);
    const rsp_event done = rsp_event_complete();
    BENCH_CHECK(rsp_step_commit(r->pool, &st, &done, &err), &err);
    BENCH_CHECK(rsp_checkpoint_value(r->pool, (uint64_t)to + 1, pt_value(r, to), &err), &err);
    r->nodes[to].cached = true;
}

/* A request: the context of node n extended by `tokens` -> the new node. */
static uint32_t pt_request(pt_run *r, uint32_t n, uint32_t tokens)
{
    uint32_t c = pt_node_new(r, n, tokens);
    uint32_t a = n;
    while (a != PT_NONE && !r->nodes[a].cached)
        a = r->nodes[a].parent;
    r->requests++;
    r->tokens += r->nodes[c].len;
    if (a != PT_NONE) {
        r->hits++;
        r->hit_tokens += r->nodes[a].len;
    }
    rsp_rid rid = r->rid++;
    uint64_t t0 = bench_now_ns();
    if (n != PT_NONE && n != a && r->nodes[n].branch) {
        pt_step(r, rid, a, n); /* the branch point passed: taken on the way */
        a = n;
    }
    pt_step(r, rid, a, c);
    rsp_error err;
    BENCH_CHECK(rsp_remove(r->pool, rid, &err), &err);
    bench_samples_add(&r->ns, (double)(bench_now_ns() - t0));
    return c;
}

/* The session ready first (the others think). */
static pt_sess *pt_next(pt_run *r)
{
    pt_sess *best = &r->sess[0];
    for (uint32_t i = 1; i < r->num_sess; i++)
        if (r->sess[i].ready_at < best->ready_at)
            best = &r->sess[i];
    if (best->ready_at > r->tick)
        r->tick = best->ready_at;
    r->tick++;
    return best;
}

/* Multi-turn chat: 64 sessions, 2-16 turns of 70-600 tokens each (a
 * first turn of 200-800), back 8-120 requests later. Working set: each
 * session's last turn, 64 checkpoints. */
static void pt_chat(pt_run *r, uint32_t requests)
{
    r->num_sess = 64;
    for (uint32_t i = 0; i < r->num_sess; i++)
        r->sess[i] = (pt_sess){.ready_at = i, .left = 0};
    for (uint32_t k = 0; k < requests; k++) {
        pt_sess *s = pt_next(r);
        if (!s->left) {
            s->left = pt_between(r, 2, 16);
            s->path[0] = pt_request(r, PT_NONE, pt_between(r, 200, 800));
        } else {
            s->path[0] = pt_request(r, s->path[0], pt_between(r, 20, 200) + pt_between(r, 50, 400));
        }
        s->left--;
        s->ready_at = r->tick + pt_between(r, 8, 120);
    }
}

/* Shared prompts: 4 system prompts of 1,000-4,000 tokens (branch points),
 * 32 users asking questions of 70-300 tokens under one of them (the first
 * most often), a third followed up 16-48 requests later. Working set: the
 * 4 prompts and the open follow-ups, about 16. */
static void pt_shared(pt_run *r, uint32_t requests)
{
    r->num_roots = 4;
    for (uint32_t p = 0; p < r->num_roots; p++) {
        r->roots[p] = pt_node_new(r, PT_NONE, pt_between(r, 1000, 4000));
        r->nodes[r->roots[p]].branch = true;
    }
    r->num_sess = 32;
    for (uint32_t i = 0; i < r->num_sess; i++)
        r->sess[i] = (pt_sess){.ready_at = i};
    for (uint32_t k = 0; k < requests; k++) {
        pt_sess *s = pt_next(r);
        uint32_t q = pt_between(r, 20, 100) + pt_between(r, 50, 200);
        if (s->left) {
            s->path[0] = pt_request(r, s->path[0], q);
            s->left = 0;
        } else {
            uint32_t p = (uint32_t)(pt_rand(r) % 8);
            s->path[0] = pt_request(r, r->roots[p < 4 ? 0 : p - 4], q);
            s->left = pt_rand(r) % 3 == 0;
        }
        s->ready_at = r->tick + (s->left ? pt_between(r, 16, 48) : pt_between(r, 0, 32));
    }
}

/* Agentic: 2 tool prompts of 1,500-2,500 tokens, 16 trajectories of 8-40
 * steps of 80-400 tokens (a tool call and its result), each back 8-40
 * requests later; a fifth of the steps go back to an earlier point of
 * their trajectory and fork from it. Working set: each trajectory's tip
 * and the points it revisits, about 32. */
static void pt_agent(pt_run *r, uint32_t requests)
{
    r->num_roots = 2;
    for (uint32_t p = 0; p < r->num_roots; p++) {
        r->roots[p] = pt_node_new(r, PT_NONE, pt_between(r, 1500, 2500));
        r->nodes[r->roots[p]].branch = true;
    }
    r->num_sess = 16;
    for (uint32_t i = 0; i < r->num_sess; i++)
        r->sess[i] = (pt_sess){.ready_at = i};
    for (uint32_t k = 0; k < requests; k++) {
        pt_sess *s = pt_next(r);
        if (!s->left) {
            s->left = pt_between(r, 8, 40);
            s->path[0] = r->roots[pt_rand(r) % r->num_roots];
            s->depth = 1;
        } else if (s->depth > 2 && pt_rand(r) % 5 == 0) {
            s->depth = pt_between(r, 2, s->depth - 1); /* revisit, fork there */
        }
        uint32_t c = pt_request(r, s->path[s->depth - 1], pt_between(r, 80, 400));
        if (s->depth < PT_MAX_PATH)
            s->path[s->depth++] = c;
        else
            s->path[s->depth - 1] = c;
        s->left--;
        s->ready_at = r->tick + pt_between(r, 8, 40);
    }
}

static void pt_once(pt_run *r, pt_workload w, uint32_t capacity, rsp_checkpoint_policy policy,
                    uint32_t requests)
{
    memset(r, 0, sizeof *r);
    r->rng = 0x2545f4914f6cdd1dull + (uint64_t)w;
    r->sid = 1;
    r->rid = 1;
    bench_samples_init(&r->ns, requests);
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 4);
    cfg.max_checkpoints = capacity / 2;
    cfg.max_host_checkpoints = capacity - capacity / 2;
    cfg.checkpoint_demote = true;
    cfg.checkpoint_policy = policy;
    cfg.checkpoint_value_weight = PT_USES_PER_TOKEN * 64.0; /* BENCH_TINY: 64-byte slots */
    cfg.on_checkpoint_evict = pt_on_evict;
    cfg.on_checkpoint_evict_ctx = r;
    rsp_error err;
    BENCH_CHECK(rsp_pool_create(&cfg, &r->pool, &err), &err);
    if (w == PT_CHAT)
        pt_chat(r, requests);
    else if (w == PT_SHARED)
        pt_shared(r, requests);
    else
        pt_agent(r, requests);
    rsp_pool_destroy(r->pool);
    free(r->nodes);
}

static double pt_rate(const pt_run *r)
{
    return r->tokens ? (double)r->hit_tokens / (double)r->tokens : 0.0;
}

static void pt_report(const bench_opts *o, pt_workload w, uint32_t t, const pt_run *r,
                      const pt_run *lru, bool value)
{
    bench_result res = {.bench = "prefix_trace", .baseline = "lru"};
    snprintf(res.params, sizeof res.params,
             "\"workload\": \"%s\", \"tier\": \"%s\", \"policy\": \"%s\", \"checkpoints\": %u, "
             "\"requests\": %llu",
             pt_workload_names[w], pt_tier_names[t], value ? "value" : "lru", pt_tiers[w][t],
             (unsigned long long)r->requests);
    bench_result_samples(&res, &r->ns, &lru->ns);
    snprintf(res.extra, sizeof res.extra,
             "\"token_hit_rate\": %.4f, \"lru_token_hit_rate\": %.4f, \"request_hit_rate\": "
             "%.4f, \"tokens\": %llu, \"tokens_restored\": %llu",
             pt_rate(r), pt_rate(lru), r->requests ? (double)r->hits / (double)r->requests : 0.0,
             (unsigned long long)r->tokens, (unsigned long long)r->hit_tokens);
    bench_report(o, &res);
}

void bench_prefix_trace(const bench_opts *o)
{
    uint32_t requests = o->quick ? 1500 : 4000;
    if (rsp_reader_register(NULL) != RSP_OK)
        bench_die("prefix_trace", RSP_EINVAL, "rsp_reader_register");
    static pt_run lru, val;
    for (int w = 0; w < PT_WORKLOADS; w++)
        for (uint32_t t = 0; t < 3; t++) {
            pt_once(&lru, (pt_workload)w, pt_tiers[w][t], RSP_CHECKPOINT_LRU, requests);
            pt_once(&val, (pt_workload)w, pt_tiers[w][t], RSP_CHECKPOINT_VALUE, requests);
            pt_report(o, (pt_workload)w, t, &lru, &lru, false);
            pt_report(o, (pt_workload)w, t, &val, &lru, true);
            bench_samples_fini(&lru.ns);
            bench_samples_fini(&val.ns);
        }
    rsp_reader_unregister();
}
