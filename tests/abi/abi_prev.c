/*
 * The ABI test (docs/abi.md "The ABI test"): built against the public
 * header of the previous release (RSP_ABI_HEADER, a copy kept in
 * tests/abi/), linked against the library this tree builds, it runs a
 * short pool lifecycle through that header's structs and checks what
 * comes back, so a layout, symbol or behaviour the new library changed
 * under an old program fails here. Plain C, no test framework: it prints
 * the first failure and exits 1.
 * SPDX-License-Identifier: Apache-2.0
 */
#include RSP_ABI_HEADER

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rsp_error err;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "abi_prev: %s:%d: %s failed (last error: %s)\n", __FILE__, __LINE__,   \
                    #cond, err.message);                                                           \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define TRY(call) CHECK((call) == RSP_OK)

int main(void)
{
    printf("abi_prev: built against rsp %d.%d.%d, running on librsp %s\n", RSP_VERSION_MAJOR,
           RSP_VERSION_MINOR, RSP_VERSION_PATCH, rsp_version_string());
    TRY(RSP_VERSION_CHECK(&err));

    rsp_block_config blocks[2] = {
        {.name = "conv", .dtype = RSP_DTYPE_BF16, .ndim = 2, .shape = {4, 16}},
        {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 2, .shape = {8, 4}},
    };
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    CHECK(cfg.sink && cfg.world_size == 1 && cfg.owner_cpu == -1);
    cfg.num_layers = 2;
    cfg.blocks = blocks;
    cfg.num_blocks = 2;
    cfg.max_slots = 5;
    cfg.max_checkpoints = 1; /* late in the struct: read at its old offset */
    rsp_pool *pool = NULL;
    TRY(rsp_pool_create(&cfg, &pool, &err));
    rsp_pool_info info;
    TRY(rsp_pool_info_get(pool, &info, &err));
    CHECK(info.max_slots == 5 && info.usable_slots == 4 && info.num_blocks == 2);
    CHECK(info.slot_bytes == 2 * (4 * 16 * 2 + 8 * 4 * 4) && info.owner_cpu == -1);
    rsp_block_view view;
    TRY(rsp_pool_block(pool, "ssm", 1, &view, &err));
    CHECK(view.ndim == 3 && view.shape[0] == 5 && view.shape[1] == 8 && view.strides[0] == 32);

    /* One step: admit, plan, read the plan, commit. */
    TRY(rsp_reader_register(&err));
    TRY(rsp_ingest(pool, 42, &err));
    rsp_row row = {.rid = 42, .label = RSP_LABEL_MAIN, .span = 8};
    rsp_step step = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome out;
    TRY(rsp_step_admit(pool, &step, &out, &err));
    CHECK(out.ok);
    TRY(rsp_step_plan(pool, &step, &err));
    TRY(rsp_plan_wait_step(pool, 1, RSP_WAIT_FOREVER, &err));
    TRY(rsp_read_begin());
    const rsp_plan *plan = rsp_plan_get(pool, 1);
    rsp_addressing a;
    memset(&a, 0, sizeof a);
    rsp_status st = plan ? rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, &err) : RSP_ENOPLAN;
    int32_t slot = st == RSP_OK ? a.slot_indices[0] : RSP_NO_SLOT;
    bool had_state = st == RSP_OK && a.has_state[0];
    TRY(rsp_read_end());
    TRY(st);
    CHECK(a.step_id == 1 && a.num_rows == 1 && a.length >= 1 && !a.staged);
    CHECK(slot > 0 && slot < 5 && !had_state);
    rsp_event done = rsp_event_complete();
    TRY(rsp_step_commit(pool, &step, &done, &err));
    rsp_holding h;
    TRY(rsp_holding_get(pool, 42, RSP_LABEL_MAIN, &h, &err));
    CHECK(h.index == slot && h.has_state);

    /* Stats, once by the wrapper and once by message (rsp_msg, rsp_reply). */
    rsp_stats s;
    TRY(rsp_stats_get(pool, &s, &err));
    CHECK(s.max_slots == 5 && s.held_slots == 1 && s.admits_ok == 1 && s.commits == 1);
    CHECK(s.plans == 1 && s.swaps_in == 0 && s.checkpoints_device == 0);
    rsp_msg m;
    memset(&m, 0, sizeof m);
    m.kind = RSP_MSG_STATS;
    rsp_ticket *t = NULL;
    TRY(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, &err));
    rsp_reply r;
    TRY(rsp_wait(t, RSP_WAIT_FOREVER, &r));
    CHECK(r.error.status == RSP_OK && r.stats.commits == 1 && r.stats.held_slots == 1);

    /* Checkpoint fields sit late in rsp_msg and rsp_reply: take one by
     * message, query it by message. */
    memset(&m, 0, sizeof m);
    m.kind = RSP_MSG_CHECKPOINT;
    m.rid = 42;
    m.label = RSP_LABEL_MAIN;
    m.key = 7;
    m.tier = RSP_TIER_DEVICE;
    TRY(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, &err));
    TRY(rsp_wait(t, RSP_WAIT_FOREVER, &r));
    memset(&m, 0, sizeof m);
    m.kind = RSP_MSG_CHECKPOINT_QUERY;
    m.key = 7;
    TRY(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, &err));
    TRY(rsp_wait(t, RSP_WAIT_FOREVER, &r));
    CHECK(r.checkpoint.key == 7 && r.checkpoint.tier == RSP_TIER_DEVICE);
    CHECK(r.checkpoint.bytes == info.slot_bytes && r.checkpoint.slot == 5);
    TRY(rsp_stats_get(pool, &s, &err));
    CHECK(s.checkpoints_taken == 1 && s.checkpoints_device == 1);

    /* A refusal still reads as one: a status and a message naming the field. */
    rsp_pool_config bad = cfg;
    bad.num_layers = 0;
    rsp_pool *none = NULL;
    CHECK(rsp_pool_create(&bad, &none, &err) == RSP_EINVAL && none == NULL);
    CHECK(strstr(err.message, "num_layers") != NULL);

    TRY(rsp_remove(pool, 42, &err));
    rsp_reader_unregister();
    TRY(rsp_pool_close(pool, &err));
    printf("abi_prev: ok\n");
    return 0;
}
