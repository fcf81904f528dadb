/*
 * A program outside the rsp tree, built against an installed rsp (CMake
 * package or pkg-config): creates a host pool, runs one step, checks the
 * addressing, and exits 0. Compiled as C11 and (consumer.cpp) as C++17.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <rsp/rsp.h>

#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        rsp_status st_ = (call);                                                                   \
        if (st_ != RSP_OK) {                                                                       \
            fprintf(stderr, "consumer: %s failed: %s: %s\n", #call, rsp_strerror(st_),             \
                    err.message);                                                                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int run(void)
{
    rsp_error err;
    memset(&err, 0, sizeof err);
    rsp_block_config block;
    memset(&block, 0, sizeof block);
    block.name = "ssm";
    block.dtype = RSP_DTYPE_F32;
    block.ndim = 2;
    block.shape[0] = 4;
    block.shape[1] = 8;

    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 2;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 4;

    rsp_pool *pool = NULL;
    CHECK(rsp_pool_create(&cfg, &pool, &err));
    rsp_pool_info info;
    CHECK(rsp_pool_info_get(pool, &info, &err));
    if (info.usable_slots != 3 || info.slot_bytes != 2u * 4u * 8u * sizeof(float)) {
        fprintf(stderr, "consumer: unexpected pool info\n");
        return 1;
    }

    rsp_row row;
    memset(&row, 0, sizeof row);
    row.rid = 42;
    row.label = RSP_LABEL_MAIN;
    row.span = 1;
    rsp_step step;
    memset(&step, 0, sizeof step);
    step.step_id = 1;
    step.rows = &row;
    step.num_rows = 1;

    rsp_admit_outcome out;
    CHECK(rsp_ingest(pool, 42, &err));
    CHECK(rsp_step_admit(pool, &step, &out, &err));
    CHECK(rsp_step_plan(pool, &step, &err));
    /* No forward ran here: the commit says so (rsp_event_complete). */
    const rsp_event done = rsp_event_complete();
    CHECK(rsp_step_commit(pool, &step, &done, &err));
    rsp_holding h;
    CHECK(rsp_holding_get(pool, 42, RSP_LABEL_MAIN, &h, &err));
    if (!out.ok || h.index != 1 || !h.has_state) {
        fprintf(stderr, "consumer: unexpected holding (ok %d, slot %d, has_state %d)\n", out.ok,
                h.index, h.has_state);
        return 1;
    }
    rsp_pool_destroy(pool);
    return 0;
}

int main(void)
{
    int rc = run();
    if (rc == 0)
        printf("consumer: ok\n");
    return rc;
}
