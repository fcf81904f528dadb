/*
 * The smallest pool the API tests make: one layer, one block "ssm" of four
 * floats, max_slots slots, every other field the init's default.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_TESTS_SMALL_POOL_H
#define RSP_TESTS_SMALL_POOL_H

#include <rsp/rsp.h>

static inline void small_pool_config(rsp_pool_config *cfg, uint32_t max_slots)
{
    static const rsp_block_config blocks[1] = {
        {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}},
    };
    rsp_pool_config_init(cfg);
    cfg->num_layers = 1;
    cfg->blocks = blocks;
    cfg->num_blocks = 1;
    cfg->max_slots = max_slots;
}

#endif
