/*
 * The face's one validator (validate.h): what rsp_post checks of a message
 * before it is queued, in one pass, calling the core's pure rules
 * (core/check.h) and the device's event check once each.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "validate.h"

#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "device/device.h"
#include "util/error.h"
#include "util/sync.h"
#include "xfer_impl.h"

/* The core's own rules (core/check.h): one place, one message, here and
 * from the owner. The other rules of a step (duplicate rows, rows per
 * label, fork list lengths, the lease's bucket) the owner checks, and its
 * answer comes back through the ticket. */
/* rows_checked: s's rows are ones already checked (a STEP's commit that
 * names the step's own rows), and *per_token says whether one has a
 * per-token byte; else the check sets *per_token. */
static rsp_status check_step(const rsp_step *s, uint32_t num_labels, bool rows_checked,
                             bool *per_token, rsp_error *err)
{
    rsp_status st = rsp__check_arrays(s, err);
    if (st == RSP_OK && !rows_checked)
        st = rsp__check_row_labels(s, num_labels, per_token, err);
    if (st == RSP_OK && !rows_checked && *per_token)
        st = rsp__check_spec_rows(s, NULL, err);
    if (st == RSP_OK)
        st = rsp__check_forks(s, num_labels, err);
    if (st == RSP_OK)
        st = rsp__check_ckpt_decls(s, num_labels, err);
    return st;
}

/* A commit whose rows wrote (a row with span > 0 that is not padding, the
 * step not a capture) must say when its forward is done: the zeroing of
 * slots released during the step and the post-forks are queued behind it,
 * and a missing event would let them run under a forward still writing.
 * rsp_event_complete() says "already done". */
static rsp_status check_forward_done(const rsp_step *s, const rsp_event *ev, rsp_error *err)
{
    if (ev->handle || ev->kind == RSP_EVENT_COMPLETE || s->capture)
        return RSP_OK;
    for (uint32_t i = 0; i < s->num_rows; i++) {
        const rsp_row *r = &s->rows[i];
        if (r->span > 0 && !r->padding)
            return rsp__fail(err, RSP_EINVAL,
                             "commit of step %llu: rows[%u] (rid %llu) wrote (span %d) but "
                             "forward_done is empty: pass the event recorded after the forward, "
                             "or rsp_event_complete() if it has already finished",
                             (unsigned long long)s->step_id, i, (unsigned long long)r->rid,
                             (int)r->span);
    }
    return RSP_OK;
}

/* A commit's declaration and its forward_done (COMMIT; STEP's msg->commit). */
static rsp_status check_commit(const rsp_pool *pool, const rsp_step *s, const rsp_event *ev,
                               uint32_t num_labels, bool rows_checked, bool per_token,
                               rsp_error *err)
{
    rsp_status st = check_step(s, num_labels, rows_checked, &per_token, err);
    if (st == RSP_OK && per_token)
        st = rsp__check_accepted(s, err);
    if (st == RSP_OK)
        st = rsp__device_check_event_kind(pool->dev, ev, "forward_done (msg->event)", err);
    if (st == RSP_OK)
        st = check_forward_done(s, ev, err);
    return st;
}

/* RSP_MSG_STEP: the new step, and the commit before it (msg->commit, named
 * as such: the rules' messages name a step's fields). */
static rsp_status check_step_msg(const rsp_pool *pool, const rsp_msg *m, uint32_t num_labels,
                                 rsp_error *err)
{
    bool per_token = false;
    rsp_status st = check_step(&m->step, num_labels, false, &per_token, err);
    if (st != RSP_OK || !m->commit)
        return st;
    const bool shared = m->commit->rows == m->step.rows && m->commit->num_rows == m->step.num_rows;
    st = check_commit(pool, m->commit, &m->event, num_labels, shared, per_token, err);
    if (st != RSP_OK) {
        if (err) {
            char cause[RSP_ERROR_MAX];
            snprintf(cause, sizeof cause, "%s", err->message);
            rsp__fail(err, st, "msg->commit (step %llu): %s",
                      (unsigned long long)m->commit->step_id, cause);
        }
        return st;
    }
    if (m->step.step_id <= m->commit->step_id)
        return rsp__fail(err, RSP_EINVAL,
                         "msg->step.step_id %llu is not above msg->commit.step_id %llu: the step "
                         "a STEP message admits comes after the one it commits",
                         (unsigned long long)m->step.step_id,
                         (unsigned long long)m->commit->step_id);
    return RSP_OK;
}

/* INGEST, REMOVE, RESET with a list (the owner checks it for repeats). */
static rsp_status check_rids(const rsp_msg *m, rsp_error *err)
{
    if (m->num_rids > RSP_MAX_MSG_RIDS)
        return rsp__fail(err, RSP_EINVAL, "msg->num_rids %u is above RSP_MAX_MSG_RIDS (%u)",
                         m->num_rids, RSP_MAX_MSG_RIDS);
    if (m->num_rids && !m->rids)
        return rsp__fail(err, RSP_EINVAL, "msg->rids is NULL but msg->num_rids is %u", m->num_rids);
    return RSP_OK;
}

/* CHECKPOINT: a tier that is one, an interned label (the rest, the holding,
 * the key and the tier's room, the owner checks). */
static rsp_status check_checkpoint(const rsp_msg *m, uint32_t num_labels, rsp_error *err)
{
    if ((unsigned)m->tier >= (unsigned)RSP_TIER_COUNT_)
        return rsp__fail(err, RSP_EINVAL,
                         "msg->tier %d is not a tier (RSP_TIER_DEVICE or RSP_TIER_HOST)",
                         (int)m->tier);
    return rsp__check_label(m->label, num_labels, err);
}

rsp_status rsp__msg_validate(const rsp_pool *pool, const rsp_msg *m, rsp_error *err)
{
    if ((unsigned)m->kind >= (unsigned)RSP_MSG_KIND_COUNT_)
        return rsp__fail(err, RSP_EINVAL, "msg->kind %d is not a message kind", (int)m->kind);
    /* L1: pairs with the owner's store-release after interning a label. */
    uint32_t num_labels = rsp__load_acquire_u32((uint32_t *)&pool->num_labels);
    switch (m->kind) {
    case RSP_MSG_COMMIT:
        return check_commit(pool, &m->step, &m->event, num_labels, false, false, err);
    case RSP_MSG_STEP: return check_step_msg(pool, m, num_labels, err);
    case RSP_MSG_INGEST:
    case RSP_MSG_REMOVE:
    case RSP_MSG_RESET: return check_rids(m, err);
    case RSP_MSG_ROLLBACK:
        return rsp__device_check_event_kind(pool->dev, &m->event, "forward_done (msg->event)", err);
    case RSP_MSG_ADMIT:
    case RSP_MSG_PLAN: {
        bool per_token;
        return check_step(&m->step, num_labels, false, &per_token, err);
    }
    case RSP_MSG_HOLDING: return rsp__check_label(m->label, num_labels, err);
    case RSP_MSG_RELEASE: return rsp__check_label(m->label, num_labels, err);
    case RSP_MSG_CHECKPOINT: return check_checkpoint(m, num_labels, err);
    case RSP_MSG_LABEL: {
        if (!m->label_name)
            return rsp__fail(err, RSP_EINVAL, "msg->label_name is NULL");
        size_t n = strnlen(m->label_name, RSP_NAME_MAX);
        if (n == 0)
            return rsp__fail(err, RSP_EINVAL, "msg->label_name is empty");
        if (n >= RSP_NAME_MAX)
            return rsp__fail(err, RSP_EINVAL, "msg->label_name is longer than %d characters",
                             RSP_NAME_MAX - 1);
        return RSP_OK;
    }
    case RSP_MSG_EXPORT:
    case RSP_MSG_EXPORT_CLOSE:
    case RSP_MSG_IMPORT: {
        /* The owner follows this pointer: only this pool's live objects. */
        const rsp__xfer *x = (const rsp__xfer *)(uintptr_t)m->key;
        if (!x || x->tag != RSP__XFER_TAG || x->pool != pool)
            return rsp__fail(err, RSP_EINVAL,
                             "msg->key is not an export or import of this pool: post these "
                             "kinds through rsp_export_open / _close and rsp_import_*");
        return RSP_OK;
    }
    case RSP_MSG_BUILD_GRAPH_BUFFERS:
        if (m->max_bs == 0)
            return rsp__fail(err, RSP_EINVAL, "msg->max_bs is 0 (a graph batch has >= 1 row)");
        return RSP_OK;
    default: return RSP_OK;
    }
}

/* Ordered pools (rsp.h, "Ordered posting"): every kind but the queries,
 * the barrier and the shutdown carries its number. */
static bool seq_exempt(rsp_msg_kind k)
{
    return k == RSP_MSG_STATS || k == RSP_MSG_HOLDING || k == RSP_MSG_CHECKPOINT_QUERY ||
           k == RSP_MSG_BARRIER || k == RSP_MSG_SHUTDOWN || k == RSP_MSG_EXPORT ||
           k == RSP_MSG_EXPORT_CLOSE || k == RSP_MSG_DUMP;
}

rsp_status rsp__msg_check_seq(const rsp_pool *pool, const rsp_msg *m, rsp_error *err)
{
    if (!pool->ordered || m->seq != 0 || seq_exempt(m->kind))
        return RSP_OK;
    return rsp__fail(err, RSP_EINVAL,
                     "msg->seq is 0, but the pool is ordered (rsp_pool_config.ordered): every "
                     "message but STATS, HOLDING, CHECKPOINT_QUERY, BARRIER, SHUTDOWN, EXPORT, "
                     "EXPORT_CLOSE and DUMP carries "
                     "its number (1, 2, "
                     "3, ...); the synchronous wrappers carry none: post it with rsp_post");
}
