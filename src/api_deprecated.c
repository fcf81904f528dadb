/*
 * The 0.1 names kept as aliases of their 0.2 names (docs/abi.md, "Names"):
 * exported under RSP_0.1 for the whole 0.x series, so a program linked
 * against 0.1 still finds them; rsp.h marks each deprecated, naming the
 * call that replaces it. Each forwards to that call and costs what it
 * costs, plus one call.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "face.h"
#include "pool.h"

rsp_status rsp_pool_counters(const rsp_pool *pool, rsp_stats *out, rsp_error *err)
{
    return (rsp_stats_peek)(pool, out, err); /* 0.1's struct */
}

rsp_status rsp_stats_get(rsp_pool *pool, rsp_stats *out, rsp_error *err)
{
    return (rsp_stats_snapshot)(pool, out, err); /* 0.1's struct */
}

rsp_status rsp_clear_preplan(rsp_pool *pool, rsp_error *err)
{
    return rsp_step_unstage(pool, err);
}

/* Enters the section itself rather than through rsp_read_begin: a caller
 * of the old form (the Python package's compiled step) pays no extra call
 * on its every step. */
rsp_status rsp_read_begin_err(rsp_error *err)
{
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    rsp_status st = rsp__read_begin();
    return st == RSP_OK ? st : rsp__read_begin_explain(st, err);
}

rsp_status rsp_live_addressing(const rsp_pool *pool, rsp_label_id label, rsp_addressing *out,
                               rsp_error *err)
{
    return rsp_plan_live_addressing(pool, label, out, err);
}

const rsp_plan *rsp_plan_get(const rsp_pool *pool, uint64_t step_id)
{
    return rsp_plan_of_step(pool, step_id);
}
