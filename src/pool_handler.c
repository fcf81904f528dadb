/*
 * The owner's handler: one message (decoded from its wire form, msg.h) ->
 * its kind's handler -> core call -> device work -> plan publication ->
 * counters -> reply. Runs on the owner thread only, so none of the pool's
 * mutable state needs a lock. No slot logic lives here: the core decides,
 * this file routes and accounts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg.h"
#include "util/hb.h"
#include "util/assert.h"
#include "util/error.h"
#include "util/mem.h"
#include "util/sync.h"
#include "xfer_impl.h"

/* ------------------------------------------------------------------------ */
/* Forward-done waits (FW1/FW2, docs/ordering.md)                            */
/* ------------------------------------------------------------------------ */

static rsp_status submit(rsp_pool *p, rsp_event *done, rsp_error *err);

/* Whether the work list waits for a caller's forward_done. */
static bool work_waits(const rsp__work *w)
{
    for (uint32_t i = 0; i < w->num_ops; i++)
        if (w->ops[i].kind == RSP__OP_WAIT && w->ops[i].event.handle)
            return true;
    return false;
}

static void fwd_gauge(rsp_pool *p)
{
    rsp__store_relaxed_u32(&p->ctr.forward_waits, p->fwd_len - p->fwd_head);
}

/* Owner, before the core call of a commit or rollback naming an event:
 * room for one more entry, so recording it after the change cannot fail. */
static rsp_status fwd_reserve(rsp_pool *p, const rsp_event *ev, uint64_t step_id, rsp_error *e)
{
    if (!ev)
        return RSP_OK;
    pthread_mutex_lock(&p->fwd_lock); /* FW1: the array may move */
    if (p->fwd_head > 0 && p->fwd_len == p->fwd_cap) {
        memmove(p->fwd, p->fwd + p->fwd_head, (p->fwd_len - p->fwd_head) * sizeof *p->fwd);
        p->fwd_len -= p->fwd_head;
        p->fwd_head = 0;
    }
    rsp_status st = rsp__grow((void **)&p->fwd, &p->fwd_cap, p->fwd_len + 1ull, sizeof *p->fwd);
    pthread_mutex_unlock(&p->fwd_lock);
    if (st != RSP_OK)
        return rsp__fail(e, RSP_ENOMEM, "out of memory recording the forward_done of step %llu",
                         (unsigned long long)step_id);
    return RSP_OK;
}

/* Owner: drop the entries whose done event completed (FIFO: stop at the
 * first that has not). A poll per entry, none when there are none. */
static void fwd_prune(rsp_pool *p)
{
    if (p->fwd_head == p->fwd_len)
        return;
    pthread_mutex_lock(&p->fwd_lock); /* FW1 */
    uint64_t now = 0;                 /* device lag: one clock read a look */
    while (p->fwd_head < p->fwd_len &&
           rsp__device_event_wait(p->dev, &p->fwd[p->fwd_head].done, 0, NULL) == RSP_OK)
        now = rsp__latency_lag_done(p, p->fwd[p->fwd_head++].queued_ns, now);
    if (p->fwd_head == p->fwd_len)
        p->fwd_head = p->fwd_len = 0;
    fwd_gauge(p);
    pthread_mutex_unlock(&p->fwd_lock);
}

/* As submit_after, for a commit or rollback: when its work waits for the
 * caller's forward_done, ask the device for the list's done event and
 * record it (room reserved by fwd_reserve). */
static rsp_status submit_forward(rsp_pool *p, rsp_status st, bool *changed, uint64_t step_id,
                                 rsp_error *e)
{
    if (st != RSP_OK)
        return st;
    *changed = true;
    if (!work_waits(&p->work)) {
        st = submit(p, NULL, e);
        if (st == RSP_OK)
            rsp__pool_ckpt_account(p);
        return st;
    }
    rsp_event done = {0};
    st = submit(p, &done, e);
    if (st != RSP_OK)
        return st;
    pthread_mutex_lock(&p->fwd_lock); /* FW1 */
    p->fwd[p->fwd_len++] = (rsp__fwd_wait){step_id, done, p->lat.t0};
    fwd_gauge(p);
    pthread_mutex_unlock(&p->fwd_lock);
    rsp__pool_ckpt_account(p);
    return RSP_OK;
}

rsp_status rsp__pool_forward_waits(rsp_pool *p, uint64_t timeout_ns, rsp_close_report *out,
                                   rsp_error *err)
{
    pthread_mutex_lock(&p->fwd_lock); /* FW2 */
    const bool any = p->fwd_head < p->fwd_len;
    rsp_event last = any ? p->fwd[p->fwd_len - 1].done : (rsp_event){0};
    pthread_mutex_unlock(&p->fwd_lock);
    /* FIFO device: the last list's done completes after every earlier one. */
    if (!any || rsp__device_event_wait(p->dev, &last, timeout_ns, NULL) == RSP_OK)
        return RSP_OK;
    uint32_t n = 0, listed = 0;
    uint64_t first = 0;
    pthread_mutex_lock(&p->fwd_lock); /* FW2 */
    for (uint32_t i = p->fwd_head; i < p->fwd_len; i++) {
        if (rsp__device_event_wait(p->dev, &p->fwd[i].done, 0, NULL) == RSP_OK)
            continue;
        if (n++ == 0)
            first = p->fwd[i].step_id;
        if (out && listed < RSP_CLOSE_REPORT_MAX)
            out->step_ids[listed++] = p->fwd[i].step_id;
    }
    pthread_mutex_unlock(&p->fwd_lock);
    if (n == 0)
        return RSP_OK; /* completed between the wait and the look */
    if (out) {
        out->forward_waits = n;
        out->num_steps = listed;
    }
    return rsp__fail(err, RSP_ETIMEDOUT,
                     "%u forward_done wait(s) have not run within the timeout (the oldest: step "
                     "%llu): signal those events, then close again (nothing was destroyed)",
                     n, (unsigned long long)first);
}

/* The step a failure of m is about (false: m names none). STEP: the
 * commit's when it has one that was not done (the commit failed), else the
 * new step's (r: the message's reply). */
static bool failed_step(const rsp_msg *m, const rsp_reply *r, uint64_t *step_id)
{
    const bool has_step = m->kind == RSP_MSG_ADMIT || m->kind == RSP_MSG_ROLLBACK ||
                          m->kind == RSP_MSG_PLAN || m->kind == RSP_MSG_COMMIT ||
                          m->kind == RSP_MSG_STEP;
    *step_id = !has_step                                               ? 0
               : m->kind == RSP_MSG_STEP && m->commit && !r->committed ? m->commit->step_id
                                                                       : m->step.step_id;
    return has_step;
}

void rsp__pool_report_failure(void *ctx, const void *payload, size_t size, const rsp_reply *r)
{
    (void)size;
    rsp_pool *p = ctx;
    const rsp_msg *m = payload; /* the wire form starts with the message (msg.h) */
    rsp_failure f = {
        .status = r->error.status,
        .kind = m->kind,
        .message = r->error.message,
    };
    f.has_step = failed_step(m, r, &f.step_id);
    p->on_error(p->on_error_ctx, &f);
}

void rsp__pool_owner_idle(void *ctx)
{
    rsp_pool *p = ctx;
    fwd_prune(p);
    if (p->rec)
        rsp__record_flush(p->rec);
    /* Retired plans go to the reclaimer in batches; an idle owner hands
     * over the rest, so they do not wait for the next plan to be reclaimed. */
    rsp__publisher_flush(p->pub);
}

/* Lent calls between two hand-overs of retired plans: a steady stream of
 * steps run in the owner's role wakes the reclaimer once per this many
 * steps (a wake-up, a lock it then contends for, a grace period), and
 * holds at most this many retired plans beyond the owner's batch rule
 * until the owner thread next goes idle. */
#define RSP__LENT_FLUSH_EVERY 32u

void rsp__pool_lent_idle(void *ctx)
{
    rsp_pool *p = ctx;
    if (++p->lent_idles % RSP__LENT_FLUSH_EVERY == 0)
        rsp__publisher_flush(p->pub);
}

rsp_status rsp__pool_reserve(void *ctx, const rsp__ext_need *need, rsp_error *err)
{
    rsp_pool *p = ctx;
    rsp_status st = rsp__device_reserve(p->dev, need, err);
    if (st == RSP_OK && need->plan)
        st = rsp__plan_reserve(p->pub, need->plan_labels, need->plan_rows, need->plan_entries,
                               need->plan_spec, err);
    return st;
}

/* Submit the core's work (if any, or always when the caller wants its
 * completion event) and account what it costs. */
static rsp_status submit(rsp_pool *p, rsp_event *done, rsp_error *err)
{
    rsp__work *w = &p->work;
    if (!done && rsp__work_empty(w))
        return RSP_OK;
    uint32_t inject = rsp__load_relaxed_u32(&p->inject_submit_failures);
    if (inject) {
        rsp__store_relaxed_u32(&p->inject_submit_failures, inject - 1);
        return rsp__fail(err, RSP_ENOMEM, "device submit: out of host memory (injected)");
    }
    rsp_status st = rsp__device_submit(p->dev, w, done, err);
    if (st != RSP_OK)
        return st;
    uint64_t zeroed = 0, copied = 0;
    for (uint32_t i = 0; i < w->num_ops; i++) {
        if (w->ops[i].kind == RSP__OP_ZERO)
            zeroed += w->ops[i].count;
        else if (w->ops[i].kind == RSP__OP_COPY)
            copied += w->ops[i].count;
    }
    rsp__pool_bump(&p->ctr.forks, copied);
    rsp__pool_bump(&p->ctr.bytes_zeroed, zeroed * p->layout->slot_bytes);
    rsp__pool_bump(&p->ctr.bytes_copied, copied * p->layout->slot_bytes);
    return RSP_OK;
}

rsp_status rsp__pool_submit(rsp_pool *p, rsp_event *done, rsp_error *err)
{
    return submit(p, done, err);
}

void rsp__pool_inject_submit_failures(rsp_pool *p, uint32_t n)
{
    rsp__store_relaxed_u32(&p->inject_submit_failures, n);
}

/* The core owns the stage; the published staged plan follows its reports.
 * A stage the call ended (promoted, replaced, taken by a live plan that
 * took its leased buffer, its step committed or rolled back, cleared) is
 * unpublished. A live plan is published before this runs, so readers
 * never see a moment without one, nor a stage whose device vectors hold
 * another step's rows. */
static void sync_stage(rsp_pool *p, const rsp__stage_change *stage)
{
    if (stage->ended != RSP__STAGE_KEPT)
        rsp__publish_staged(p->pub, NULL);
}

/* *changed: set once the core has planned (a failure after it, in the
 * device or the plan's allocation, breaks the pool). */
static rsp_status handle_plan(rsp_pool *p, const rsp_step *step, rsp_reply *r, bool *changed)
{
    rsp_error *e = &r->error;
    rsp__plan_out out;
    rsp_status st = rsp__core_plan(p->core, step, &out, &p->work, e);
    if (st != RSP_OK)
        return st;
    *changed = true;
    rsp_event ready = {0};
    st = submit(p, &ready, e);
    if (st != RSP_OK)
        return st;
    rsp__pool_ckpt_account(p); /* restores copied */
    bool host_dev = rsp__device_kind(p->dev) == RSP_DEVICE_HOST;
    for (uint32_t i = 0; i < out.num_labels; i++) {
        const rsp__label_plan *lp = &out.labels[i];
        rsp__plan_label_src *s = &p->srcs[i];
        void *dsi = NULL, *dhs = NULL, *dsp = NULL;
        st = rsp__device_buffer(p->dev, lp->buffer, &dsi, &dhs, NULL, e);
        if (st == RSP_OK && lp->spec_buffer != UINT32_MAX) /* a leased per-token tensor */
            st = rsp__device_buffer(p->dev, lp->spec_buffer, &dsp, NULL, NULL, e);
        if (st != RSP_OK)
            return st;
        *s = (rsp__plan_label_src){
            .label = lp->label,
            .name = rsp__core_label_name(p->core, lp->label),
            .num_rows = lp->num_rows,
            .length = lp->length,
            .slot_indices = lp->slot_indices,
            .has_state = lp->has_state,
            .generations = lp->generations,
            .device_slot_indices = dsi,
            .device_has_state = dhs,
            .spec_width = lp->spec_width,
            .spec_indices = lp->spec_indices,
            .device_spec_indices = dsp,
            .host_device = host_dev,
        };
    }
    rsp_plan *plan = NULL;
    st = rsp__plan_new(p->pub, out.step_id, out.staged, ready, p->srcs, out.num_labels, &plan, e);
    if (st != RSP_OK)
        return st;
    rsp__plan_set_digest(plan, out.digest);
    if (out.staged) {
        rsp__publish_staged(p->pub, plan);
        rsp__pool_bump(&p->ctr.stages, 1);
    } else {
        rsp__publish_live(p->pub, plan);
        sync_stage(p, &out.stage); /* the stage it promoted, replaced or took */
        rsp__pool_bump(&p->ctr.plans, 1);
        if (p->guard)
            rsp__guard_plan(p, out.step_id);
        if (out.promoted)
            rsp__pool_bump(&p->ctr.promotions, 1);
    }
    r->plan_step_id = out.step_id;
    r->plan_staged = out.staged;
    r->plan_digest = out.digest;
    return RSP_OK;
}

/* ------------------------------------------------------------------------ */
/* One handler per message kind                                              */
/* ------------------------------------------------------------------------ */

/* Each handles its kind's message m and fills r. *changed: set once the
 * core has changed (a failure after that breaks the pool). */
typedef rsp_status (*kind_handler)(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed);

/* st: the status of a core call that appended device work. Once it
 * succeeded the core has changed: submit the work. */
static rsp_status submit_after(rsp_pool *p, rsp_status st, bool *changed, rsp_error *e)
{
    if (st != RSP_OK)
        return st;
    *changed = true;
    st = submit(p, NULL, e);
    if (st == RSP_OK)
        rsp__pool_ckpt_account(p);
    return st;
}

/* The caller's forward_done, if the message names one. */
static const rsp_event *event_of(const rsp_msg *m)
{
    return m->event.handle ? &m->event : NULL;
}

/* The vector forms (msg.rids): the core checks the list as a whole and
 * reserves for all of it before it changes anything. */
static rsp_status lifecycle_many(rsp_pool *p, const rsp_msg *m, rsp__lifecycle_op op, rsp_reply *r,
                                 bool *changed)
{
    rsp_status st =
        rsp__core_lifecycle_many(p->core, op, m->rids, m->num_rids, m->free, &p->work, &r->error);
    return submit_after(p, st, changed, &r->error);
}

static rsp_status on_ingest(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    if (m->num_rids)
        return lifecycle_many(p, m, RSP__LC_INGEST, r, changed);
    return rsp__core_ingest(p->core, m->rid, &r->error);
}

static rsp_status on_remove(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    if (m->num_rids)
        return lifecycle_many(p, m, RSP__LC_REMOVE, r, changed);
    rsp_status st = rsp__core_remove(p->core, m->rid, &p->work, &r->error);
    return submit_after(p, st, changed, &r->error);
}

static rsp_status on_release(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    rsp_status st = rsp__core_release(p->core, m->rid, m->label, &p->work, &r->error);
    return submit_after(p, st, changed, &r->error);
}

static rsp_status on_reset(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    if (m->num_rids)
        return lifecycle_many(p, m, RSP__LC_RESET, r, changed);
    rsp_status st = rsp__core_reset(p->core, m->rid, m->free, &p->work, &r->error);
    return submit_after(p, st, changed, &r->error);
}

/* The publisher's table of steps in flight follows admit (rsp_plan_of_step,
 * rsp_plan_wait_step): an admitted step enters it, a refused one is
 * recorded (a refused re-admit of a step in flight leaves it there). */
static void step_admitted(rsp_pool *p, uint64_t step_id, bool ok)
{
    if (ok)
        RSP__MUST(rsp__publisher_step_admitted(p->pub, step_id)); /* room: max_inflight <= table */
    else
        rsp__publisher_step_finished(p->pub, step_id, RSP__STEP_REFUSED);
}

static rsp_status admit_step(rsp_pool *p, const rsp_step *step, rsp_reply *r, bool *changed)
{
    rsp_status st = rsp__core_admit(p->core, step, &r->admit, &p->work, &r->error);
    st = submit_after(p, st, changed, &r->error);
    if (st == RSP_OK)
        rsp__pool_bump(r->admit.ok ? &p->ctr.admits_ok : &p->ctr.admits_refused, 1);
    else if (st == RSP_ENOKEY)
        rsp__pool_bump(&p->ctr.checkpoint_misses, 1);
    step_admitted(p, step->step_id, st == RSP_OK && r->admit.ok);
    return st;
}

static rsp_status on_admit(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    return admit_step(p, &m->step, r, changed);
}

static rsp_status on_rollback(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    /* The caller's event is checked before the core changes anything:
     * the device would refuse its WAIT only after the rollback. */
    const rsp_event *ev = event_of(m);
    rsp_status st = rsp__device_check_event(p->dev, ev, &r->error);
    rsp__stage_change stage = {RSP__STAGE_KEPT, 0};
    if (st == RSP_OK)
        st = fwd_reserve(p, ev, m->step.step_id, &r->error);
    if (st == RSP_OK)
        st = rsp__core_rollback(p->core, m->step.step_id, ev, &p->work, &stage, &r->error);
    st = submit_forward(p, st, changed, m->step.step_id, &r->error);
    if (st == RSP_OK) {
        sync_stage(p, &stage); /* the step's own stage ends with it */
        rsp__publisher_step_finished(p->pub, m->step.step_id, RSP__STEP_ROLLED_BACK);
        rsp__pool_bump(&p->ctr.rollbacks, 1);
    }
    return st;
}

static rsp_status on_plan(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    return handle_plan(p, &m->step, r, changed);
}

static rsp_status on_clear_preplan(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)m, (void)changed;
    rsp__stage_change stage;
    rsp_status st = rsp__core_clear_preplan(p->core, &stage, &r->error);
    if (st == RSP_OK)
        sync_stage(p, &stage);
    return st;
}

static rsp_status commit_step(rsp_pool *p, const rsp_step *step, const rsp_event *ev, rsp_reply *r,
                              bool *changed)
{
    rsp_status st = rsp__device_check_event(p->dev, ev, &r->error); /* as for rollback */
    rsp__stage_change stage = {RSP__STAGE_KEPT, 0};
    /* Guard mode checks what the forward wrote before the commit's own
     * zeros and post-forks change slots. */
    if (st == RSP_OK && p->guard && rsp__core_step_in_flight(p->core, step->step_id))
        rsp__guard_commit(p, step->step_id, ev);
    if (st == RSP_OK)
        st = fwd_reserve(p, ev, step->step_id, &r->error);
    if (st == RSP_OK)
        st = rsp__pool_keys_reserve(p, step->num_checkpoints, &r->error);
    if (st == RSP_OK)
        st = rsp__core_commit(p->core, step, ev, &p->work, &stage, &r->error);
    st = submit_forward(p, st, changed, step->step_id, &r->error);
    if (st == RSP_OK) {
        sync_stage(p, &stage); /* a committed step's stage (a capture's) ends with it */
        rsp__publisher_step_finished(p->pub, step->step_id, RSP__STEP_COMMITTED);
        rsp__pool_bump(&p->ctr.commits, 1);
    }
    return st;
}

static rsp_status on_commit(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    return commit_step(p, &m->step, event_of(m), r, changed);
}

/* ------------------------------------------------------------------------ */
/* RSP_MSG_STEP: commit the previous step, admit and plan the next          */
/* ------------------------------------------------------------------------ */

/* e's message, wrapped: "<what>: <the message> <then>" (the status stays). */
static rsp_status reword(rsp_error *e, rsp_status st, const char *what, const char *then)
{
    char cause[RSP_ERROR_MAX];
    snprintf(cause, sizeof cause, "%s", e->status != RSP_OK ? e->message : rsp_strerror(st));
    return rsp__fail(e, st, "%s: %s%s", what, cause, then);
}

/* The plan of the message's step was refused (nothing changed by it):
 * roll its admit back, so the message leaves the new step as it found it.
 * plan_st: the plan's status, its message in r->error. */
static rsp_status undo_admit(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed,
                             rsp_status plan_st, const char *then)
{
    char what[96];
    snprintf(what, sizeof what, "RSP_MSG_STEP: the plan of step %llu was refused",
             (unsigned long long)m->step.step_id);
    char cause[RSP_ERROR_MAX];
    snprintf(cause, sizeof cause, "%s", r->error.message);
    rsp__work_clear(&p->work);
    rsp__stage_change stage = {RSP__STAGE_KEPT, 0};
    rsp_error rb = {0};
    bool rolled = false; /* the rollback changed the core */
    rsp_status st = rsp__core_rollback(p->core, m->step.step_id, NULL, &p->work, &stage, &rb);
    st = submit_after(p, st, &rolled, &rb);
    if (st != RSP_OK && rolled) {
        *changed = true; /* its device work failed after it changed: broken */
        r->error = rb;
        return st;
    }
    if (st != RSP_OK)
        return rsp__fail(&r->error, plan_st,
                         "%s (%s), and rolling its admit back failed too (%s): the step stays "
                         "admitted: roll it back%s",
                         what, cause, rb.message, then);
    sync_stage(p, &stage);
    rsp__publisher_step_finished(p->pub, m->step.step_id, RSP__STEP_ROLLED_BACK);
    rsp__pool_bump(&p->ctr.rollbacks, 1);
    return rsp__fail(&r->error, plan_st, "%s, so its admit was rolled back: %s%s", what, cause,
                     then);
}

/* " (the commit of step N stands)" when the message committed one, else
 * "": the tail of a later phase's failure message. Built only on failure. */
static void commit_stands(const rsp_msg *m, const rsp_reply *r, char *then, size_t size)
{
    then[0] = '\0';
    if (r->committed)
        snprintf(then, size, " (the commit of step %llu stands)",
                 (unsigned long long)m->commit->step_id);
}

/* One phase's failure: a change it made before failing breaks the pool
 * (*changed); one that changed nothing leaves the phases before it as
 * they are. Messages are formatted on the failure paths only: a step's
 * success costs no formatting. */
static rsp_status step_phases(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    char what[96], then[64];
    if (m->commit) {
        rsp_status st = commit_step(p, m->commit, event_of(m), r, changed);
        if (st != RSP_OK) {
            snprintf(what, sizeof what, "RSP_MSG_STEP: the commit of step %llu (msg->commit)",
                     (unsigned long long)m->commit->step_id);
            return reword(&r->error, st, what, "; nothing else was done");
        }
        r->committed = true;
        *changed = false; /* the commit is done: what follows stands alone */
        rsp__work_clear(&p->work);
    }
    if (rsp__core_step_in_flight(p->core, m->step.step_id)) {
        commit_stands(m, r, then, sizeof then);
        return rsp__fail(&r->error, RSP_EORDER,
                         "RSP_MSG_STEP: the admit of step %llu: it is already in flight: the "
                         "message admits a new step (plan an admitted one with RSP_MSG_PLAN)%s",
                         (unsigned long long)m->step.step_id, then);
    }
    rsp_status st = admit_step(p, &m->step, r, changed);
    if (st != RSP_OK) {
        snprintf(what, sizeof what, "RSP_MSG_STEP: the admit of step %llu",
                 (unsigned long long)m->step.step_id);
        commit_stands(m, r, then, sizeof then);
        return reword(&r->error, st, what, then);
    }
    if (!r->admit.ok)
        return RSP_OK; /* the pool is full: nothing planned, the commit stands */
    *changed = false;
    rsp__work_clear(&p->work);
    st = handle_plan(p, &m->step, r, changed);
    if (st == RSP_OK) {
        r->planned = true;
        return RSP_OK;
    }
    if (*changed)
        return st; /* its device work or plan failed after it changed: broken */
    commit_stands(m, r, then, sizeof then);
    return undo_admit(p, m, r, changed, st, then);
}

static rsp_status on_step(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    r->committed = r->planned = false; /* a recycled ticket's reply is not cleared */
    rsp__core_rows_fixed(p->core, true);
    rsp_status st = step_phases(p, m, r, changed);
    rsp__core_rows_fixed(p->core, false);
    return st;
}

static rsp_status on_build_graph_buffers(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    rsp_status st =
        rsp__core_build_graph_buffers(p->core, m->max_bs, m->max_seq_len, &p->work, &r->error);
    return submit_after(p, st, changed, &r->error);
}

static rsp_status on_stats(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)m, (void)changed;
    rsp_stats all;
    rsp__pool_read_counters(p, &all);
    rsp__core_stats(p->core, &all);           /* exact: the owner is not mutating now */
    memcpy(&r->stats, &all, sizeof r->stats); /* 0.1's fields: rsp_reply's layout is frozen */
    return RSP_OK;
}

static rsp_status on_barrier(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)p, (void)m, (void)r, (void)changed;
    return RSP_OK; /* its answer is the point: everything before it is handled */
}

static rsp_status on_label(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed;
    rsp_status st = rsp__core_label(p->core, m->label_name, &r->label, &r->error);
    if (st == RSP_OK) {
        /* L1: pairs with the load-acquire in rsp_post's validation. The
         * waiter of this reply also sees it through the ticket (T1/T2). */
        rsp__store_release_u32(&p->num_labels, rsp__core_num_labels(p->core));
        rsp__publisher_set_labels(p->pub, rsp__core_num_labels(p->core));
    }
    return st;
}

static rsp_status on_holding(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed;
    return rsp__core_holding(p->core, m->rid, m->label, &r->holding, &r->error);
}

static rsp_status on_shutdown(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)m, (void)r, (void)changed;
    /* Plan waiters would wait for a step that will never come. The actor
     * stops the owner after this message (api.c posted it with close). */
    rsp__publisher_close(p->pub);
    return RSP_OK;
}

/* ------------------------------------------------------------------------ */
/* Checkpoints and swaps                                                     */
/* ------------------------------------------------------------------------ */

static rsp_status on_checkpoint(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    rsp_status st = rsp__pool_keys_reserve(p, 1, &r->error);
    if (st == RSP_OK)
        st = rsp__core_checkpoint(p->core, m->key, m->rid, m->label, m->tier, m->after_step,
                                  &p->work, &r->error);
    return submit_after(p, st, changed, &r->error);
}

static rsp_status on_checkpoint_drop(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed; /* no device work: nothing can fail after the change */
    rsp_status st = rsp__core_checkpoint_drop(p->core, m->key, &r->error);
    if (st == RSP_OK)
        rsp__pool_ckpt_account(p);
    return st;
}

static rsp_status on_checkpoint_pin(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed;
    return rsp__core_checkpoint_pin(p->core, m->key, m->pin, &r->error);
}

static rsp_status on_checkpoint_value(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed; /* no device work, no key moves */
    return rsp__core_checkpoint_value(p->core, m->key, m->value, &r->error);
}

static rsp_status on_checkpoint_query(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed;
    return rsp__core_checkpoint_query(p->core, m->key, &r->checkpoint, &r->error);
}

static rsp_status on_swap_out(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    rsp_status st = rsp__core_swap_out(p->core, m->rid, &p->work, &r->error);
    st = submit_after(p, st, changed, &r->error);
    if (st == RSP_OK)
        rsp__pool_bump(&p->ctr.swaps_out, 1);
    return st;
}

static rsp_status on_swap_in(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    rsp_status st = rsp__core_swap_in(p->core, m->rid, &r->admit, &p->work, &r->error);
    st = submit_after(p, st, changed, &r->error);
    if (st == RSP_OK && r->admit.ok)
        rsp__pool_bump(&p->ctr.swaps_in, 1);
    return st;
}

/* The message kinds: a new kind is one line here and its handler above. */
static const struct {
    const char *name;
    kind_handler handle;
} kinds[RSP_MSG_KIND_COUNT_] = {
    [RSP_MSG_INGEST] = {"ingest", on_ingest},
    [RSP_MSG_REMOVE] = {"remove", on_remove},
    [RSP_MSG_RESET] = {"reset", on_reset},
    [RSP_MSG_ADMIT] = {"admit", on_admit},
    [RSP_MSG_ROLLBACK] = {"rollback", on_rollback},
    [RSP_MSG_PLAN] = {"plan", on_plan},
    [RSP_MSG_CLEAR_PREPLAN] = {"clear_preplan", on_clear_preplan},
    [RSP_MSG_COMMIT] = {"commit", on_commit},
    [RSP_MSG_BUILD_GRAPH_BUFFERS] = {"build_graph_buffers", on_build_graph_buffers},
    [RSP_MSG_STATS] = {"stats", on_stats},
    [RSP_MSG_BARRIER] = {"barrier", on_barrier},
    [RSP_MSG_LABEL] = {"label", on_label},
    [RSP_MSG_HOLDING] = {"holding", on_holding},
    [RSP_MSG_SHUTDOWN] = {"shutdown", on_shutdown},
    [RSP_MSG_RELEASE] = {"release", on_release},
    [RSP_MSG_STEP] = {"step", on_step},
    [RSP_MSG_CHECKPOINT] = {"checkpoint", on_checkpoint},
    [RSP_MSG_CHECKPOINT_DROP] = {"checkpoint_drop", on_checkpoint_drop},
    [RSP_MSG_CHECKPOINT_PIN] = {"checkpoint_pin", on_checkpoint_pin},
    [RSP_MSG_CHECKPOINT_QUERY] = {"checkpoint_query", on_checkpoint_query},
    [RSP_MSG_SWAP_OUT] = {"swap_out", on_swap_out},
    [RSP_MSG_SWAP_IN] = {"swap_in", on_swap_in},
    [RSP_MSG_EXPORT] = {"export", rsp__pool_on_export},
    [RSP_MSG_EXPORT_CLOSE] = {"export_close", rsp__pool_on_export_close},
    [RSP_MSG_IMPORT] = {"import", rsp__pool_on_import},
    [RSP_MSG_CHECKPOINT_VALUE] = {"checkpoint_value", on_checkpoint_value},
    [RSP_MSG_DUMP] = {"dump", rsp__pool_on_dump},
};

static const char *kind_name(rsp_msg_kind k)
{
    return (unsigned)k < RSP_MSG_KIND_COUNT_ && kinds[k].name ? kinds[k].name : "?";
}

const char *rsp__pool_kind_name(rsp_msg_kind k)
{
    return kind_name(k);
}

/* The device work (or the plan) of message m failed after the core had
 * already changed: the pool can no longer say "nothing changed", and the
 * core's state (slots freed, a step finished) no longer matches the device
 * (a slot never zeroed, a plan never published). Break the pool for good:
 * m and every later message get RSP_EDEVICE naming m. Plan waiters are
 * released (RSP_ESHUTDOWN): the step they wait for will never come. */
static rsp_status break_pool(rsp_pool *p, const rsp_msg *m, rsp_reply *r)
{
    rsp_error *e = &r->error;
    char cause[RSP_ERROR_MAX];
    snprintf(cause, sizeof cause, "%s", e->status != RSP_OK ? e->message : "unknown failure");
    uint64_t step_id;
    char step[48] = "";
    if (failed_step(m, r, &step_id))
        snprintf(step, sizeof step, " of step %llu", (unsigned long long)step_id);
    snprintf(p->broken_why, sizeof p->broken_why,
             "the device work of message %s%s failed after the pool's state changed (%.120s)",
             kind_name(m->kind), step, cause);
    p->broken = true;
    rsp__publisher_close(p->pub);
    return rsp__fail(e, RSP_EDEVICE, "%s; the pool is broken: destroy it", p->broken_why);
}

void rsp__pool_handle(void *ctx, void *payload, size_t size, rsp_reply *r)
{
    rsp_pool *p = ctx;
    const uint64_t t0 = rsp__latency_start(p);
    if (p->rec) /* the wire form, before decoding rewrites it in place */
        rsp__record_msg(p->rec, payload, size);
    const rsp_msg *m = rsp__latency_decode(p, payload, size, t0);
    rsp_error *e = &r->error;
    rsp_status st;
    /* Set once the core has changed: a failure after it breaks the pool. */
    bool changed = false;
    rsp__work_clear(&p->work);
    p->handling = m->kind;

    if (p->broken && m->kind != RSP_MSG_SHUTDOWN) {
        r->committed = false; /* failed_step reads it (a recycled reply is not cleared) */
        rsp__fail(e, RSP_EDEVICE, "the pool is broken: %s; destroy it", p->broken_why);
        if (p->rec)
            rsp__record_reply(p->rec, r);
        return;
    }
    /* api.c validated the kind; the check keeps a bad one from indexing. */
    if ((unsigned)m->kind < RSP_MSG_KIND_COUNT_ && kinds[m->kind].handle)
        st = kinds[m->kind].handle(p, m, r, &changed);
    else
        st = rsp__fail(e, RSP_EINVAL, "msg->kind %d is not a message kind", (int)m->kind);
    if (st != RSP_OK && e->status == RSP_OK)
        rsp__fail(e, st, "%s", rsp_strerror(st)); /* a status without a message */
    if (st != RSP_OK && changed)
        st = break_pool(p, m, r);
    if (st == RSP_OK)
        e->status = RSP_OK;
    /* The gauges are mirrored by settle_gauges: before the answer of a
     * waited message and once a batch, not after every message. */
    fwd_prune(p);
    if (p->rec)
        rsp__record_reply(p->rec, r);
    if (t0)
        rsp__latency_count(p, m->kind, t0);
}
