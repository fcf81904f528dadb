/*
 * A draft-verify loop with partial acceptance (docs/semantics.md 9.3): three
 * requests, K = 3 draft tokens a step. Each verify step asks for per-token
 * states (rsp_row.per_token_states); the "kernel" reads the [rows, 1 + K]
 * index tensor of rsp_plan_spec_indices as vLLM's speculative kernels do:
 * column 0 the request's state, column t the slot for the state after token
 * t. The toy model's state is a running token count, so after every commit
 * the request's slot must hold exactly what the forward wrote for the
 * accepted token. The commit names the accepted count per row; no byte is
 * copied (the accepted output slot becomes the request's slot). Exits 0 on
 * success. Built and run by ctest (example_spec_decode).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <rsp/rsp.h>

#include <stdio.h>
#include <string.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != RSP_OK) {                                                                    \
            fprintf(stderr, "spec_decode: %s: %s\n", #call, err.message);                          \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define NREQ 3
#define K 3

/* The toy state: one int64 per slot (block "tokens", one layer). */
static int64_t *state_of(const rsp_block_view *v, int32_t slot)
{
    return (int64_t *)((char *)v->data + (size_t)slot * (size_t)v->strides[0] * 8);
}

int main(void)
{
    rsp_error err = {0};
    rsp_block_config block = {.name = "tokens", .dtype = RSP_DTYPE_I64, .ndim = 1, .shape = {1}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 1;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 1 + NREQ * (2 + K); /* the sink, and per request its state + 1 + K outputs */
    rsp_pool *pool;
    TRY(rsp_pool_create(&cfg, &pool, &err));
    rsp_block_view view;
    TRY(rsp_pool_block(pool, "tokens", 0, &view, &err));
    TRY(rsp_reader_register(&err));

    int64_t tokens[NREQ] = {0};                  /* what each request's state must say */
    const rsp_event done = rsp_event_complete(); /* the forward runs inline below */
    for (uint64_t id = 1; id <= 6; id++) {
        rsp_row rows[NREQ];
        memset(rows, 0, sizeof rows); /* the per-token fields were tail padding: zero-fill */
        for (int r = 0; r < NREQ; r++) {
            rows[r].rid = (rsp_rid)(100 + r);
            rows[r].label = RSP_LABEL_MAIN;
            rows[r].span = 1 + K; /* the last accepted token and K drafts */
            rows[r].per_token_states = 1;
        }
        rsp_step step = {.step_id = id, .rows = rows, .num_rows = NREQ};
        rsp_admit_outcome out;
        TRY(rsp_step_admit(pool, &step, &out, &err));
        if (!out.ok) {
            fprintf(stderr, "spec_decode: pool full\n");
            return 1;
        }
        TRY(rsp_step_plan(pool, &step, &err));

        /* The verify forward: for each token t, state after t = state + t. */
        TRY(rsp_read_begin());
        rsp_spec_indices si;
        rsp_addressing a;
        rsp_status st = rsp_plan_spec_indices(rsp_plan_live(pool), RSP_LABEL_MAIN, &si, &err);
        if (st == RSP_OK)
            st = rsp_plan_addressing(rsp_plan_live(pool), RSP_LABEL_MAIN, &a, &err);
        const rsp_plan *plan = st == RSP_OK ? rsp_plan_ref(rsp_plan_live(pool)) : NULL;
        rsp_read_end();
        TRY(st);
        TRY(rsp_event_wait(pool, &si.ready, RSP_WAIT_FOREVER, &err));
        for (int r = 0; r < NREQ; r++) {
            const int32_t *ix = si.indices + (size_t)r * si.width;
            int64_t s = a.has_state[r] ? *state_of(&view, ix[0]) : 0;
            for (uint32_t t = 1; t <= (uint32_t)rows[r].span; t++)
                *state_of(&view, ix[t]) = s + t;
        }
        rsp_plan_unref(plan);

        /* The sampler accepted a (1 .. 1 + K) tokens of each request. */
        for (int r = 0; r < NREQ; r++) {
            rows[r].accepted = (uint16_t)(1 + (id + (uint64_t)r) % (1 + K));
            tokens[r] += rows[r].accepted;
        }
        TRY(rsp_step_commit(pool, &step, &done, &err));
        for (int r = 0; r < NREQ; r++) {
            rsp_holding h;
            TRY(rsp_holding_get(pool, rows[r].rid, RSP_LABEL_MAIN, &h, &err));
            int64_t got = *state_of(&view, h.index);
            printf("step %llu: rid %llu accepted %u -> slot %d holds %lld tokens\n",
                   (unsigned long long)id, (unsigned long long)rows[r].rid, rows[r].accepted,
                   h.index, (long long)got);
            if (!h.has_state || got != tokens[r]) {
                fprintf(stderr, "spec_decode: rid %llu holds %lld, want %lld\n",
                        (unsigned long long)rows[r].rid, (long long)got, (long long)tokens[r]);
                return 1;
            }
        }
    }
    rsp_stats s;
    TRY(rsp_stats_snapshot(pool, &s, &err));
    printf("held %u slots for %d requests, %u free\n", s.held_slots, NREQ, s.free_slots);
    rsp_reader_unregister();
    TRY(rsp_pool_close(pool, &err));
    return s.held_slots == NREQ ? 0 : 1;
}
