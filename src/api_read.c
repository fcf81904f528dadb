/*
 * The read side's entry points: reader registration, read sections, the
 * published plans and their addressing, the checkpoint key index, the plan
 * waits and the event wait. No message: each reads what the owner
 * published (publish/), or waits on it.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "face.h"
#include "pool.h"
#include "util/error.h"

/* ------------------------------------------------------------------------ */
/* Readers                                                                   */
/* ------------------------------------------------------------------------ */

rsp_status rsp_reader_register(rsp_error *err)
{
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    rsp__face_atfork();
    return rsp__reader_register(err);
}

rsp_status rsp_reader_register_qsbr(rsp_error *err)
{
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    rsp__face_atfork();
    return rsp__reader_register_qsbr(err);
}

rsp_status rsp_reader_quiescent(void)
{
    return rsp__face_forked() ? RSP_EFORKED : rsp__reader_quiescent();
}

rsp_status rsp_reader_offline(void)
{
    return rsp__face_forked() ? RSP_EFORKED : rsp__reader_offline();
}

rsp_status rsp_reader_online(void)
{
    return rsp__face_forked() ? RSP_EFORKED : rsp__reader_online();
}

void rsp_reader_unregister(void)
{
    if (rsp__face_forked())
        return;
    rsp__reader_unregister();
}

/* rsp_read_begin, rsp_read_end, rsp_plan_live_addressing: no rsp__face_forked() check
 * here: a forked child's threads are never on the read side's fast paths
 * (rsp__reader_fork_child), whose slow paths say RSP_EFORKED. */
rsp_status rsp_read_begin(void)
{
    return rsp__read_begin();
}

rsp_status rsp_read_explain(rsp_status status, rsp_error *err)
{
    if (status == RSP_OK)
        return RSP_OK;
    if (status == RSP_EFORKED || rsp__face_forked())
        return rsp__fail_forked(err);
    if (status == RSP_ENOTREG || status == RSP_EINVAL)
        return rsp__read_begin_explain(status, err);
    return rsp__fail(err, status, "rsp_read_begin: %s", rsp_strerror(status));
}

rsp_status rsp_read_end(void)
{
    return rsp__read_end();
}

const rsp_plan *rsp_plan_live(const rsp_pool *pool)
{
    if (!pool) /* a forked child reads nothing: its threads are outside any section */
        return NULL;
    return rsp__publisher_live(pool->pub);
}

const rsp_plan *rsp_plan_staged(const rsp_pool *pool)
{
    if (!pool) /* a forked child reads nothing: its threads are outside any section */
        return NULL;
    return rsp__publisher_staged(pool->pub);
}

uint64_t rsp_plan_step_id(const rsp_plan *plan)
{
    return plan && !rsp__face_forked() ? rsp__plan_step_id(plan) : 0;
}

bool rsp_plan_is_staged(const rsp_plan *plan)
{
    return plan && !rsp__face_forked() ? rsp__plan_is_staged(plan) : false;
}

uint64_t rsp_plan_digest(const rsp_plan *plan)
{
    return plan && !rsp__face_forked() ? rsp__plan_digest(plan) : 0;
}

rsp_status rsp_plan_addressing(const rsp_plan *plan, rsp_label_id label, rsp_addressing *out,
                               rsp_error *err)
{
    if (!plan || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !plan ? "plan" : "out");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    return rsp__plan_addressing(plan, label, out, err);
}

rsp_status rsp_plan_spec_indices(const rsp_plan *plan, rsp_label_id label, rsp_spec_indices *out,
                                 rsp_error *err)
{
    if (!plan || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !plan ? "plan" : "out");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    return rsp__plan_spec_indices(plan, label, out, err);
}

rsp_status rsp_plan_live_addressing(const rsp_pool *pool, rsp_label_id label, rsp_addressing *out,
                                    rsp_error *err)
{
    if (!pool || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : "out");
    return rsp__live_addressing(pool->pub, label, out, err);
}

rsp_status rsp_checkpoint_lookup(const rsp_pool *pool, uint64_t key, rsp_checkpoint_loc *out,
                                 rsp_error *err)
{
    if (__builtin_expect(!pool, 0))
        return rsp__fail(err, RSP_EINVAL, "pool is NULL");
    if (__builtin_expect(rsp__face_forked(), 0))
        return rsp__fail_forked(err);
    return rsp__keys_lookup(pool->keys, key, out, err);
}

const rsp_plan *rsp_plan_ref(const rsp_plan *plan)
{
    return plan && !rsp__face_forked() ? rsp__plan_ref(plan) : NULL;
}

void rsp_plan_unref(const rsp_plan *plan)
{
    if (plan && !rsp__face_forked())
        rsp__plan_unref(plan);
}

rsp_status rsp_plan_wait(rsp_pool *pool, uint64_t step_id, uint64_t timeout_ns, rsp_error *err)
{
    if (!pool)
        return rsp__fail(err, RSP_EINVAL, "pool is NULL");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    if (timeout_ns != 0 && rsp__in_read_section())
        return rsp__fail_in_section(err, "rsp_plan_wait (with a timeout)");
    return rsp__publisher_wait(pool->pub, step_id, timeout_ns, err);
}

const rsp_plan *rsp_plan_of_step(const rsp_pool *pool, uint64_t step_id)
{
    if (!pool || rsp__face_forked())
        return NULL;
    return rsp__publisher_step_plan(pool->pub, step_id);
}

rsp_status rsp_plan_wait_step(rsp_pool *pool, uint64_t step_id, uint64_t timeout_ns, rsp_error *err)
{
    if (!pool)
        return rsp__fail(err, RSP_EINVAL, "pool is NULL");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    if (timeout_ns != 0 && rsp__in_read_section())
        return rsp__fail_in_section(err, "rsp_plan_wait_step (with a timeout)");
    return rsp__publisher_wait_step(pool->pub, step_id, timeout_ns, err);
}

rsp_status rsp_event_wait(const rsp_pool *pool, const rsp_event *event, uint64_t timeout_ns,
                          rsp_error *err)
{
    if (!pool || !event)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : "event");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    /* The device checks the kind (and a host fence's tag) first; a NULL
     * handle of a valid kind is "already complete". */
    return rsp__device_event_wait(pool->dev, event, timeout_ns, err);
}
