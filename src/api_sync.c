/*
 * The synchronous wrappers: one call, one message posted and waited for
 * (rsp_post, rsp_wait: api.c), the reply's fields returned as out
 * parameters. Each refuses in a forked child and inside a read section
 * before posting anything.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <stdio.h>
#include <string.h>

#include "face.h"
#include "pool.h"
#include "util/error.h"

/* Validation names the fields of rsp_post's msg; a synchronous wrapper's
 * caller passed arguments instead: its message names those. */
static void name_the_arguments(rsp_error *err)
{
    static const char *const fields[][2] = {
        {"forward_done (msg->event)", "forward_done"},
        {"msg->label_name", "name"},
        {"msg->max_bs", "max_bs"},
        {"msg->num_rids", "n"},
        {"msg->rids", "rids"},
        {"msg->commit", "prev"},
        {"msg->step.step_id", "step->step_id"},
        {"msg->tier", "tier"},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        char *at = strstr(err->message, fields[i][0]);
        if (!at)
            continue;
        char rest[RSP_ERROR_MAX];
        snprintf(rest, sizeof rest, "%s", at + strlen(fields[i][0]));
        snprintf(at, sizeof err->message - (size_t)(at - err->message), "%s%s", fields[i][1], rest);
    }
}

/* Post and wait forever: the synchronous wrappers. */
static rsp_status call(rsp_pool *pool, const rsp_msg *m, rsp_reply *r, rsp_error *err)
{
    if (rsp__face_forked())
        return rsp__fail_forked(err); /* before the section check: a child may inherit one */
    if (rsp__in_read_section())
        return rsp__fail_in_section(err, "a synchronous call (it waits for the owner)");
    rsp_ticket *t;
    rsp_status st = rsp__post(pool, m, &t, RSP_WAIT_FOREVER, true, err);
    if (st != RSP_OK && err)
        name_the_arguments(err);
    if (st != RSP_OK)
        return st;
    st = rsp_wait(t, RSP_WAIT_FOREVER, r);
    if (st != RSP_OK && err)
        *err = r->error;
    return st;
}

rsp_status rsp_label(rsp_pool *pool, const char *name, rsp_label_id *out, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_LABEL, .label_name = name};
    rsp_reply r;
    rsp_status st = call(pool, &m, &r, err);
    if (st == RSP_OK && out)
        *out = r.label;
    return st;
}

rsp_status rsp_ingest(rsp_pool *pool, rsp_rid rid, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_INGEST, .rid = rid};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_remove(rsp_pool *pool, rsp_rid rid, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_REMOVE, .rid = rid};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_release(rsp_pool *pool, rsp_rid rid, rsp_label_id label, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_RELEASE, .rid = rid, .label = label};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_reset(rsp_pool *pool, rsp_rid rid, bool free_slots, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_RESET, .rid = rid, .free = free_slots};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_step_admit(rsp_pool *pool, const rsp_step *step, rsp_admit_outcome *out,
                          rsp_error *err)
{
    if (!step)
        return rsp__fail(err, RSP_EINVAL, "step is NULL");
    rsp_msg m = {.kind = RSP_MSG_ADMIT, .step = *step};
    rsp_reply r;
    rsp_status st = call(pool, &m, &r, err);
    if (st == RSP_OK && out)
        *out = r.admit;
    return st;
}

rsp_status rsp_step_rollback(rsp_pool *pool, uint64_t step_id, const rsp_event *forward_done,
                             rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_ROLLBACK, .step = {.step_id = step_id}};
    if (forward_done)
        m.event = *forward_done;
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_step_plan(rsp_pool *pool, const rsp_step *step, rsp_error *err)
{
    if (!step)
        return rsp__fail(err, RSP_EINVAL, "step is NULL");
    rsp_msg m = {.kind = RSP_MSG_PLAN, .step = *step};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_step_unstage(rsp_pool *pool, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_CLEAR_PREPLAN};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_step_commit(rsp_pool *pool, const rsp_step *step, const rsp_event *forward_done,
                           rsp_error *err)
{
    if (!step)
        return rsp__fail(err, RSP_EINVAL, "step is NULL");
    rsp_msg m = {.kind = RSP_MSG_COMMIT, .step = *step};
    if (forward_done)
        m.event = *forward_done;
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_step_next(rsp_pool *pool, const rsp_step *step, const rsp_step *prev,
                         const rsp_event *prev_done, rsp_step_outcome *out, rsp_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!step)
        return rsp__fail(err, RSP_EINVAL, "step is NULL");
    rsp_msg m = {.kind = RSP_MSG_STEP, .step = *step, .commit = prev};
    if (prev && prev_done)
        m.event = *prev_done;
    rsp_reply r;
    /* Read below even when nothing was posted (then nothing was done). */
    r.committed = r.planned = false;
    memset(&r.admit, 0, sizeof r.admit);
    rsp_status st = call(pool, &m, &r, err);
    if (out) {
        out->committed = r.committed;
        out->planned = r.planned;
        out->admit = r.admit;
        if (r.planned) {
            out->plan_step_id = r.plan_step_id;
            out->plan_staged = r.plan_staged;
            out->plan_digest = r.plan_digest;
        }
    }
    return st;
}

/* The vector forms: one message naming n rids. */
static rsp_status lifecycle_many(rsp_pool *pool, rsp_msg_kind kind, const rsp_rid *rids, uint32_t n,
                                 bool free_slots, rsp_error *err)
{
    if (n == 0)
        return RSP_OK; /* nothing listed: nothing to post */
    rsp_msg m = {.kind = kind, .rids = rids, .num_rids = n, .free = free_slots};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_ingest_many(rsp_pool *pool, const rsp_rid *rids, uint32_t n, rsp_error *err)
{
    return lifecycle_many(pool, RSP_MSG_INGEST, rids, n, false, err);
}

rsp_status rsp_remove_many(rsp_pool *pool, const rsp_rid *rids, uint32_t n, rsp_error *err)
{
    return lifecycle_many(pool, RSP_MSG_REMOVE, rids, n, false, err);
}

rsp_status rsp_reset_many(rsp_pool *pool, const rsp_rid *rids, uint32_t n, bool free_slots,
                          rsp_error *err)
{
    return lifecycle_many(pool, RSP_MSG_RESET, rids, n, free_slots, err);
}

rsp_status rsp_build_graph_buffers(rsp_pool *pool, uint32_t max_bs, uint32_t max_seq_len,
                                   rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_BUILD_GRAPH_BUFFERS, .max_bs = max_bs, .max_seq_len = max_seq_len};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_stats_snapshot_size(rsp_pool *pool, rsp_stats *out, size_t size, rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "out is NULL");
    if (size < sizeof(rsp_stats_0_1))
        return rsp__fail(err, RSP_EINVAL, "size = %zu: below 0.1's rsp_stats (%zu bytes)", size,
                         sizeof(rsp_stats_0_1));
    rsp_msg m = {.kind = RSP_MSG_STATS};
    rsp_reply r;
    rsp_status st = call(pool, &m, &r, err);
    if (st != RSP_OK)
        return st;
    /* The fields past 0.1's are not in the reply (its layout is frozen):
     * read after the answer, they include every message before it. */
    rsp_stats all;
    st = rsp_stats_peek_size(pool, &all, sizeof all, err);
    if (st != RSP_OK)
        return st;
    memcpy(&all, &r.stats, sizeof r.stats);
    memcpy(out, &all, size < sizeof all ? size : sizeof all);
    return RSP_OK;
}

/* The exported name: what a program built against 0.1 or 0.2 calls. */
rsp_status(rsp_stats_snapshot)(rsp_pool *pool, rsp_stats *out, rsp_error *err)
{
    return rsp_stats_snapshot_size(pool, out, sizeof(rsp_stats_0_1), err);
}

rsp_status rsp_barrier(rsp_pool *pool, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_BARRIER};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_checkpoint_take(rsp_pool *pool, uint64_t key, rsp_rid rid, rsp_label_id label,
                               rsp_tier tier, uint64_t after_step, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_CHECKPOINT,
                 .key = key,
                 .rid = rid,
                 .label = label,
                 .tier = tier,
                 .after_step = after_step};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_checkpoint_drop(rsp_pool *pool, uint64_t key, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_CHECKPOINT_DROP, .key = key};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_checkpoint_value(rsp_pool *pool, uint64_t key, uint64_t value, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_CHECKPOINT_VALUE, .key = key, .value = value};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

static rsp_status checkpoint_pin(rsp_pool *pool, uint64_t key, bool pin, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_CHECKPOINT_PIN, .key = key, .pin = pin};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_checkpoint_pin(rsp_pool *pool, uint64_t key, rsp_error *err)
{
    return checkpoint_pin(pool, key, true, err);
}

rsp_status rsp_checkpoint_unpin(rsp_pool *pool, uint64_t key, rsp_error *err)
{
    return checkpoint_pin(pool, key, false, err);
}

rsp_status rsp_checkpoint_query(rsp_pool *pool, uint64_t key, rsp_checkpoint_info *out,
                                rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "out is NULL");
    rsp_msg m = {.kind = RSP_MSG_CHECKPOINT_QUERY, .key = key};
    rsp_reply r;
    rsp_status st = call(pool, &m, &r, err);
    if (st == RSP_OK)
        *out = r.checkpoint;
    return st;
}

rsp_status rsp_swap_out(rsp_pool *pool, rsp_rid rid, rsp_error *err)
{
    rsp_msg m = {.kind = RSP_MSG_SWAP_OUT, .rid = rid};
    rsp_reply r;
    return call(pool, &m, &r, err);
}

rsp_status rsp_swap_in(rsp_pool *pool, rsp_rid rid, rsp_admit_outcome *out, rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "out is NULL (it says whether the pool had room)");
    rsp_msg m = {.kind = RSP_MSG_SWAP_IN, .rid = rid};
    rsp_reply r;
    rsp_status st = call(pool, &m, &r, err);
    if (st == RSP_OK)
        *out = r.admit;
    return st;
}

rsp_status rsp_holding_get(rsp_pool *pool, rsp_rid rid, rsp_label_id label, rsp_holding *out,
                           rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "out is NULL");
    rsp_msg m = {.kind = RSP_MSG_HOLDING, .rid = rid, .label = label};
    rsp_reply r;
    rsp_status st = call(pool, &m, &r, err);
    if (st == RSP_OK)
        *out = r.holding;
    return st;
}

rsp_status rsp_pool_dump(rsp_pool *pool, char *buf, size_t size, size_t *needed, rsp_error *err)
{
    if (!buf && size)
        return rsp__fail(err, RSP_EINVAL, "buf is NULL but size is %zu", size);
    rsp__dump_args args = {.buf = buf, .size = size, .needed = 0};
    rsp_msg m = {.kind = RSP_MSG_DUMP, .key = (uint64_t)(uintptr_t)&args};
    rsp_reply r;
    rsp_status st = call(pool, &m, &r, err);
    if (needed && (st == RSP_OK || st == RSP_ECAPACITY))
        *needed = args.needed;
    return st;
}
