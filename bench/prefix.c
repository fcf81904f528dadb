/*
 * prefix_reuse: requests sharing prefixes, started from
 * checkpoints, against the same workload recomputing the prefix.
 * SPDX-License-Identifier: Apache-2.0
 *
 * P = 4 "system prompts" of L tokens (points: L = 512 and 2048). Warm-up:
 * one request a prompt computes it (a row of span L) and its step declares
 * a checkpoint of that row under the prompt's key at commit. Then every
 * step is a batch of R = 8 new requests, each with one of the prompts and
 * 32 tokens of its own:
 *   rsp:       rows of span 32, each with a restore from its prompt's key
 *              (the plan copies the prompt's state in before ready); the
 *              forward runs the 32 new tokens.
 *   recompute: rows of span L + 32 (span = prefix length + own tokens), no
 *              restore; the forward runs all L + 32 tokens from the zero
 *              state.
 * The forward is a toy recurrence run on the host over the row's whole
 * state (1 KiB slots: 2 layers x {conv, ssm} f32[64]), once a token:
 * s = s * a + x(token), what an SSM layer's scan does to its state a
 * token, so its cost grows with the tokens run like a real prefill. One
 * sample = one step: admit, plan, wait for ready, the forward, commit.
 * Both paths end with bit-identical states (checked on the untimed runs
 * against a scratch recomputation), so the restore is exactly a skipped
 * prefix. ratio = recompute / rsp (the speed-up); extra: tokens and state
 * bytes the forward did not run, bytes the restores copied.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define PR_P 4u
#define PR_R 8u
#define PR_NEW 32u
#define PR_FLOATS 64u /* per (block, layer) of the kib shape */
#define PR_ARRAYS 4u  /* 2 blocks x 2 layers */

typedef struct pr_ctx {
    rsp_pool *pool;
    float *base[PR_ARRAYS]; /* rsp_pool_block views: [max_slots][64] each */
    uint32_t prefix;        /* L */
    uint64_t sid, rid;      /* next step id and rid */
} pr_ctx;

static uint64_t pr_key(uint32_t p)
{
    return 0xC0FFEE00ull + p;
}

/* The token value of position pos of prompt p for user u (u = 0: the
 * shared prompt, positions < L). */
static float pr_token(uint32_t p, uint32_t u, uint32_t pos, uint32_t j)
{
    uint32_t h = (p * 2654435761u) ^ (u * 40503u) ^ (pos * 2246822519u) ^ (j * 3266489917u);
    h ^= h >> 15;
    return (float)(h & 0xFFu) * (1.0f / 256.0f);
}

/* The toy forward over positions [from, to) of one state (PR_ARRAYS x 64
 * floats, at s[a]). */
static void pr_forward(float *const s[PR_ARRAYS], uint32_t p, uint32_t u, uint32_t from,
                       uint32_t to, uint32_t prefix)
{
    for (uint32_t pos = from; pos < to; pos++) {
        uint32_t who = pos < prefix ? 0 : u;
        for (uint32_t a = 0; a < PR_ARRAYS; a++)
            for (uint32_t j = 0; j < PR_FLOATS; j++)
                s[a][j] = s[a][j] * 0.9990234375f + pr_token(p, who, pos, j + 64 * a);
    }
}

static void pr_slot_state(const pr_ctx *c, int32_t slot, float *s[PR_ARRAYS])
{
    for (uint32_t a = 0; a < PR_ARRAYS; a++)
        s[a] = c->base[a] + (size_t)slot * PR_FLOATS;
}

/* One batch step of PR_R new requests; restore: start from the prompts'
 * checkpoints. Returns the step's ns; check: compare every row's final
 * state with a scratch recomputation (untimed). */
static uint64_t pr_step(pr_ctx *c, bool restore, bool check)
{
    rsp_error err = {0};
    rsp_row rows[PR_R];
    rsp_restore rs[PR_R];
    uint32_t prompt[PR_R], user[PR_R];
    rsp_rid rids[PR_R];
    for (uint32_t k = 0; k < PR_R; k++) {
        rids[k] = c->rid++;
        prompt[k] = (uint32_t)(rids[k] + k) % PR_P;
        user[k] = (uint32_t)rids[k];
        int32_t span = (int32_t)(PR_NEW + (restore ? 0 : c->prefix));
        rows[k] = (rsp_row){.rid = rids[k], .label = RSP_LABEL_MAIN, .span = span};
        rs[k] = (rsp_restore){.rid = rids[k], .label = RSP_LABEL_MAIN, .key = pr_key(prompt[k])};
    }
    rsp_step st = {.step_id = c->sid++, .rows = rows, .num_rows = PR_R};
    if (restore) {
        st.restores = rs;
        st.num_restores = PR_R;
    }
    const rsp_event done = rsp_event_complete();
    rsp_admit_outcome out;
    uint64_t t0 = bench_now_ns();
    BENCH_CHECK(rsp_step_admit(c->pool, &st, &out, &err), &err);
    if (!out.ok)
        bench_die("prefix_reuse admit", RSP_ECAPACITY, "pool full");
    BENCH_CHECK(rsp_step_plan(c->pool, &st, &err), &err);
    rsp_addressing a;
    int32_t slots[PR_R];
    rsp_read_begin();
    rsp_status s = rsp_plan_live_addressing(c->pool, RSP_LABEL_MAIN, &a, &err);
    rsp_event ready = a.ready;
    for (uint32_t k = 0; s == RSP_OK && k < PR_R; k++) {
        slots[k] = a.slot_indices[k];
        if (a.has_state[k] != restore)
            s = RSP_EINVAL;
    }
    rsp_read_end();
    BENCH_CHECK(s, &err);
    BENCH_CHECK(rsp_event_wait(c->pool, &ready, RSP_WAIT_FOREVER, &err), &err);
    for (uint32_t k = 0; k < PR_R; k++) {
        float *state[PR_ARRAYS];
        pr_slot_state(c, slots[k], state);
        uint32_t from = restore ? c->prefix : 0;
        pr_forward(state, prompt[k], user[k], from, c->prefix + PR_NEW, c->prefix);
    }
    BENCH_CHECK(rsp_step_commit(c->pool, &st, &done, &err), &err);
    uint64_t ns = bench_now_ns() - t0;
    for (uint32_t k = 0; check && k < PR_R; k++) {
        static float scratch[PR_ARRAYS][PR_FLOATS];
        float *ref[PR_ARRAYS], *state[PR_ARRAYS];
        for (uint32_t i = 0; i < PR_ARRAYS; i++)
            ref[i] = memset(scratch[i], 0, sizeof scratch[i]);
        pr_forward(ref, prompt[k], user[k], 0, c->prefix + PR_NEW, c->prefix);
        pr_slot_state(c, slots[k], state);
        for (uint32_t i = 0; i < PR_ARRAYS; i++)
            if (memcmp(ref[i], state[i], sizeof scratch[i]) != 0)
                bench_die("prefix_reuse", RSP_EINVAL, "a row's state differs from recomputing");
    }
    BENCH_CHECK(rsp_remove_many(c->pool, rids, PR_R, &err), &err);
    return ns;
}

/* One request a prompt computes it; its step takes the checkpoint. */
static void pr_warm(pr_ctx *c)
{
    rsp_error err = {0};
    for (uint32_t p = 0; p < PR_P; p++) {
        rsp_rid rid = c->rid++;
        rsp_row row = {.rid = rid, .label = RSP_LABEL_MAIN, .span = (int32_t)c->prefix};
        rsp_checkpoint_decl take = {
            .rid = rid, .label = RSP_LABEL_MAIN, .tier = RSP_TIER_DEVICE, .key = pr_key(p)};
        rsp_step st = {.step_id = c->sid++,
                       .rows = &row,
                       .num_rows = 1,
                       .checkpoints = &take,
                       .num_checkpoints = 1};
        rsp_admit_outcome out;
        const rsp_event done = rsp_event_complete();
        BENCH_CHECK(rsp_step_admit(c->pool, &st, &out, &err), &err);
        BENCH_CHECK(rsp_step_plan(c->pool, &st, &err), &err);
        rsp_holding h;
        BENCH_CHECK(rsp_holding_get(c->pool, rid, RSP_LABEL_MAIN, &h, &err), &err);
        float *state[PR_ARRAYS];
        pr_slot_state(c, h.index, state);
        pr_forward(state, p, 0, 0, c->prefix, c->prefix);
        BENCH_CHECK(rsp_step_commit(c->pool, &st, &done, &err), &err);
        BENCH_CHECK(rsp_remove(c->pool, rid, &err), &err);
    }
}

static void pr_point(const bench_opts *o, uint32_t prefix)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_KIB, 1 + 2 * PR_R);
    cfg.max_checkpoints = PR_P;
    rsp_error err = {0};
    pr_ctx c = {.prefix = prefix, .sid = 1, .rid = 1};
    BENCH_CHECK(rsp_pool_create(&cfg, &c.pool, &err), &err);
    BENCH_CHECK(rsp_reader_register(&err), &err);
    static const char *const names[2] = {"conv", "ssm"};
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t l = 0; l < 2; l++) {
            rsp_block_view v;
            BENCH_CHECK(rsp_pool_block(c.pool, names[b], l, &v, &err), &err);
            c.base[b * 2 + l] = v.data;
        }
    pr_warm(&c);
    const uint32_t reps = o->quick ? 20 : 100;
    bench_samples rs, bs;
    bench_samples_init(&rs, reps);
    bench_samples_init(&bs, reps);
    for (uint32_t r = 0; r < reps + 2; r++) { /* 2 untimed, checked warm-ups */
        bool check = r < 2 || r == reps + 1;
        uint64_t a = pr_step(&c, true, check), b = pr_step(&c, false, check);
        if (r >= 2) {
            bench_samples_add(&rs, (double)a);
            bench_samples_add(&bs, (double)b);
        }
    }
    rsp_stats s;
    BENCH_CHECK(rsp_stats_snapshot(c.pool, &s, &err), &err);
    rsp_pool_info info;
    BENCH_CHECK(rsp_pool_info_get(c.pool, &info, &err), &err);

    bench_result res = {.bench = "prefix_reuse", .baseline = "recompute"};
    snprintf(res.params, sizeof res.params,
             "\"prefixes\": %u, \"prefix_tokens\": %u, \"rows\": %u, \"new_tokens\": %u, "
             "\"slot_bytes\": %llu",
             PR_P, prefix, PR_R, PR_NEW, (unsigned long long)info.slot_bytes);
    bench_result_samples(&res, &rs, &bs);
    /* Saved a step: the prefix tokens the forward skipped, and the state
     * bytes it would have read and written for them (the toy scan streams
     * the whole state once a token); paid: the restores' copies. */
    snprintf(res.extra, sizeof res.extra,
             "\"step_ns_saved\": %.0f, \"tokens_saved_per_step\": %u, "
             "\"state_bytes_saved_per_step\": %llu, \"bytes_restored_per_step\": %llu, "
             "\"restores\": %llu",
             res.baseline_median_ns - res.median_ns, PR_R * prefix,
             (unsigned long long)(2ull * PR_R * prefix * info.slot_bytes),
             (unsigned long long)(PR_R * info.slot_bytes),
             (unsigned long long)s.checkpoints_restored);
    bench_report(o, &res);
    bench_samples_fini(&rs);
    bench_samples_fini(&bs);
    rsp_reader_unregister();
    rsp_pool_destroy(c.pool);
}

void bench_prefix_reuse(const bench_opts *o)
{
    pr_point(o, 512);
    pr_point(o, 2048);
}
