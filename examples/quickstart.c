/*
 * README's "Using the pool", whole: create a small host pool, run one step
 * (admit, plan, read the addressing as a partition thread would, the
 * "forward", commit), check the holding, remove the request. Exits 0 on
 * success. Built and run by ctest (example_quickstart_c); quickstart.cpp is
 * the same program on the C++ binding. SPDX-License-Identifier: Apache-2.0
 */
#include <rsp/rsp.h>

#include <stdio.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != RSP_OK) {                                                                    \
            fprintf(stderr, "quickstart: %s: %s\n", #call, err.message);                           \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(void)
{
    rsp_error err = {0};
    /* Per slot and layer: a conv state [4, 256] and an SSM state [8, 16, 16]
     * sharded over the tensor-parallel group along its first dim. */
    rsp_block_config blocks[2] = {
        {.name = "conv", .dtype = RSP_DTYPE_BF16, .ndim = 2, .shape = {4, 256}},
        {.name = "ssm",
         .dtype = RSP_DTYPE_F32,
         .ndim = 3,
         .shape = {8, 16, 16},
         .num_shard_dims = 1,
         .shard_dims = {0}},
    };
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg); /* sink on, world_size 1, host device */
    cfg.num_layers = 4;
    cfg.blocks = blocks;
    cfg.num_blocks = 2;
    cfg.max_slots = 17; /* 16 usable + the sink: 1.1 MiB in all */
    rsp_pool *pool;
    TRY(rsp_pool_create(&cfg, &pool, &err));
    rsp_host_fence *fence;
    TRY(rsp_host_fence_create(&fence, &err));
    TRY(rsp_reader_register(&err));

    /* One request, one step of 32 tokens. */
    TRY(rsp_ingest(pool, 42, &err));
    rsp_row row = {.rid = 42, .label = RSP_LABEL_MAIN, .span = 32};
    rsp_step step = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome out;
    TRY(rsp_step_admit(pool, &step, &out, &err));
    if (!out.ok) { /* a full pool is an outcome: roll back, retry later */
        TRY(rsp_step_rollback(pool, step.step_id, NULL, &err));
        return 1;
    }
    TRY(rsp_step_plan(pool, &step, &err));

    /* A partition thread: wait for the plan, read it without locks. */
    TRY(rsp_plan_wait(pool, step.step_id, RSP_WAIT_FOREVER, &err));
    TRY(rsp_read_begin());
    rsp_addressing a;
    const rsp_plan *plan = NULL;
    rsp_status st = rsp_plan_addressing(rsp_plan_live(pool), RSP_LABEL_MAIN, &a, &err);
    if (st == RSP_OK) /* its vectors live as long as the plan: keep it past the section */
        plan = rsp_plan_ref(rsp_plan_live(pool));
    rsp_read_end();
    TRY(st);
    TRY(rsp_event_wait(pool, &a.ready, RSP_WAIT_FOREVER, &err)); /* never inside a section */
    printf("step 1: rid 42 reads and writes slot %d (has_state %d)\n", a.slot_indices[0],
           a.has_state[0]);
    rsp_plan_unref(plan);

    /* ... the forward runs on a.device_slot_indices, then: */
    rsp_event done = rsp_event_host(fence, 1);
    TRY(rsp_step_commit(pool, &step, &done, &err));
    rsp_host_fence_signal(fence, 1);

    rsp_holding h;
    TRY(rsp_holding_get(pool, 42, RSP_LABEL_MAIN, &h, &err));
    printf("after commit: slot %d, has_state %d\n", h.index, h.has_state);
    TRY(rsp_remove(pool, 42, &err)); /* zeroed and freed */

    rsp_reader_unregister();
    rsp_host_fence_destroy(fence);
    TRY(rsp_pool_close(pool, &err));
    return h.has_state ? 0 : 1;
}
