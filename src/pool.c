/*
 * The owner's handler: one message -> core call -> device work -> plan
 * publication -> counters -> reply. Runs on the owner thread only, so none
 * of the pool's mutable state needs a lock. No slot logic lives here: the
 * core decides, this file routes and accounts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

#include <stdio.h>

#include "util/hb.h"
#include "util/error.h"
#include "util/sync.h"

/* Single writer (the owner): a relaxed load + store is an exact increment,
 * and readers see each value whole (relaxed atomic loads). */
static void bump(uint64_t *c, uint64_t d)
{
    if (d)
        rsp__store_relaxed_u64(c, rsp__load_relaxed_u64(c) + d);
}

void rsp__pool_mirror_gauges(rsp_pool *p)
{
    rsp_stats s = {0};
    rsp__core_stats(p->core, &s);
    rsp__pool_counters *c = &p->ctr;
    rsp__store_relaxed_u32(&c->free_slots, s.free_slots);
    rsp__store_relaxed_u32(&c->held_slots, s.held_slots);
    rsp__store_relaxed_u32(&c->pending_release, s.pending_release);
    rsp__store_relaxed_u32(&c->num_requests, s.num_requests);
    rsp__store_relaxed_u32(&c->num_holdings, s.num_holdings);
    rsp__store_relaxed_u64(&c->generation, s.generation);
}

void rsp__pool_read_counters(const rsp_pool *p, rsp_stats *out)
{
    rsp__pool_counters *c = (rsp__pool_counters *)&p->ctr;
    out->max_slots = p->layout->max_slots;
    out->usable_slots = p->layout->usable_slots;
    /* Relaxed everywhere: gauges, each read whole, none orders anything. */
    out->free_slots = rsp__load_relaxed_u32(&c->free_slots);
    out->held_slots = rsp__load_relaxed_u32(&c->held_slots);
    out->pending_release = rsp__load_relaxed_u32(&c->pending_release);
    out->num_requests = rsp__load_relaxed_u32(&c->num_requests);
    out->num_holdings = rsp__load_relaxed_u32(&c->num_holdings);
    out->generation = rsp__load_relaxed_u64(&c->generation);
    out->inbox_depth = rsp__actor_depth(p->actor);
    out->messages_handled = rsp__actor_handled(p->actor);
    out->admits_ok = rsp__load_relaxed_u64(&c->admits_ok);
    out->admits_refused = rsp__load_relaxed_u64(&c->admits_refused);
    out->rollbacks = rsp__load_relaxed_u64(&c->rollbacks);
    out->plans = rsp__load_relaxed_u64(&c->plans);
    out->stages = rsp__load_relaxed_u64(&c->stages);
    out->promotions = rsp__load_relaxed_u64(&c->promotions);
    out->commits = rsp__load_relaxed_u64(&c->commits);
    out->forks = rsp__load_relaxed_u64(&c->forks);
    out->bytes_zeroed = rsp__load_relaxed_u64(&c->bytes_zeroed);
    out->bytes_copied = rsp__load_relaxed_u64(&c->bytes_copied);
}

void rsp__pool_owner_idle(void *ctx)
{
    rsp_pool *p = ctx;
    /* Retired plans go to the reclaimer in batches; an idle owner hands
     * over the rest, so they do not wait for the next plan to be reclaimed. */
    rsp__publisher_flush(p->pub);
}

rsp_status rsp__pool_reserve(void *ctx, const rsp__ext_need *need, rsp_error *err)
{
    rsp_pool *p = ctx;
    rsp_status st = rsp__device_reserve(p->dev, need, err);
    if (st == RSP_OK && need->plan)
        st = rsp__plan_reserve(p->pub, need->plan_labels, need->plan_rows, need->plan_entries, err);
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
    bump(&p->ctr.forks, copied);
    bump(&p->ctr.bytes_zeroed, zeroed * p->layout->slot_bytes);
    bump(&p->ctr.bytes_copied, copied * p->layout->slot_bytes);
    return RSP_OK;
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
    for (uint32_t i = 0; i < out.num_labels; i++) {
        const rsp__label_plan *lp = &out.labels[i];
        rsp__plan_label_src *s = &p->srcs[i];
        void *dsi = NULL, *dhs = NULL;
        uint32_t cap = 0;
        st = rsp__device_buffer(p->dev, lp->buffer, &dsi, &dhs, &cap, e);
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
        };
    }
    rsp_plan *plan = NULL;
    st = rsp__plan_new(p->pub, out.step_id, out.staged, ready, p->srcs, out.num_labels, &plan, e);
    if (st != RSP_OK)
        return st;
    if (out.staged) {
        rsp__publish_staged(p->pub, plan);
        bump(&p->ctr.stages, 1);
    } else {
        rsp__publish_live(p->pub, plan);
        sync_stage(p, &out.stage); /* the stage it promoted, replaced or took */
        bump(&p->ctr.plans, 1);
        if (out.promoted)
            bump(&p->ctr.promotions, 1);
    }
    r->plan_step_id = out.step_id;
    r->plan_staged = out.staged;
    return RSP_OK;
}

static const char *kind_name(rsp_msg_kind k)
{
    static const char *const names[RSP_MSG_KIND_COUNT_] = {
        [RSP_MSG_INGEST] = "ingest",
        [RSP_MSG_REMOVE] = "remove",
        [RSP_MSG_RESET] = "reset",
        [RSP_MSG_ADMIT] = "admit",
        [RSP_MSG_ROLLBACK] = "rollback",
        [RSP_MSG_PLAN] = "plan",
        [RSP_MSG_CLEAR_PREPLAN] = "clear_preplan",
        [RSP_MSG_COMMIT] = "commit",
        [RSP_MSG_BUILD_GRAPH_BUFFERS] = "build_graph_buffers",
        [RSP_MSG_STATS] = "stats",
        [RSP_MSG_BARRIER] = "barrier",
        [RSP_MSG_LABEL] = "label",
        [RSP_MSG_HOLDING] = "holding",
        [RSP_MSG_SHUTDOWN] = "shutdown",
    };
    return (unsigned)k < RSP_MSG_KIND_COUNT_ ? names[k] : "?";
}

/* The device work (or the plan) of message m failed after the core had
 * already changed: the pool can no longer say "nothing changed", and the
 * core's state (slots freed, a step finished) no longer matches the device
 * (a slot never zeroed, a plan never published). Break the pool for good:
 * m and every later message get RSP_EDEVICE naming m. Plan waiters are
 * released (RSP_ESHUTDOWN): the step they wait for will never come. */
static rsp_status break_pool(rsp_pool *p, const rsp_msg *m, rsp_error *e)
{
    char cause[RSP_ERROR_MAX];
    snprintf(cause, sizeof cause, "%s", e->status != RSP_OK ? e->message : "unknown failure");
    const bool has_step = m->kind == RSP_MSG_ADMIT || m->kind == RSP_MSG_ROLLBACK ||
                          m->kind == RSP_MSG_PLAN || m->kind == RSP_MSG_COMMIT;
    char step[48] = "";
    if (has_step)
        snprintf(step, sizeof step, " of step %llu", (unsigned long long)m->step.step_id);
    snprintf(p->broken_why, sizeof p->broken_why,
             "the device work of message %s%s failed after the pool's state changed (%.120s)",
             kind_name(m->kind), step, cause);
    p->broken = true;
    rsp__publisher_close(p->pub);
    return rsp__fail(e, RSP_EDEVICE, "%s; the pool is broken: destroy it", p->broken_why);
}

void rsp__pool_handle(void *ctx, const rsp_msg *m, rsp_reply *r)
{
    rsp_pool *p = ctx;
    rsp_error *e = &r->error;
    rsp__core *core = p->core;
    rsp__work *w = &p->work;
    const rsp_event *ev = m->event.handle ? &m->event : NULL;
    rsp_status st = RSP_OK;
    /* Set once the core has changed: a failure after it breaks the pool. */
    bool changed = false;
    rsp__stage_change stage = {RSP__STAGE_KEPT, 0}; /* set by commit, rollback, clear */
    rsp__work_clear(w);

    if (p->broken && m->kind != RSP_MSG_SHUTDOWN) {
        rsp__fail(e, RSP_EDEVICE, "the pool is broken: %s; destroy it", p->broken_why);
        return;
    }
    switch (m->kind) {
    case RSP_MSG_INGEST: st = rsp__core_ingest(core, m->rid, e); break;
    case RSP_MSG_REMOVE:
        st = rsp__core_remove(core, m->rid, w, e);
        if ((changed = st == RSP_OK))
            st = submit(p, NULL, e);
        break;
    case RSP_MSG_RESET:
        st = rsp__core_reset(core, m->rid, m->free, w, e);
        if ((changed = st == RSP_OK))
            st = submit(p, NULL, e);
        break;
    case RSP_MSG_ADMIT:
        st = rsp__core_admit(core, &m->step, &r->admit, w, e);
        if ((changed = st == RSP_OK))
            st = submit(p, NULL, e);
        if (st == RSP_OK)
            bump(r->admit.ok ? &p->ctr.admits_ok : &p->ctr.admits_refused, 1);
        break;
    case RSP_MSG_ROLLBACK:
        /* The caller's event is checked before the core changes anything:
         * the device would refuse its WAIT only after the rollback. */
        st = rsp__device_check_event(p->dev, ev, e);
        if (st == RSP_OK)
            st = rsp__core_rollback(core, m->step.step_id, ev, w, &stage, e);
        if ((changed = st == RSP_OK))
            st = submit(p, NULL, e);
        if (st == RSP_OK)
            bump(&p->ctr.rollbacks, 1);
        break;
    case RSP_MSG_PLAN: st = handle_plan(p, &m->step, r, &changed); break;
    case RSP_MSG_CLEAR_PREPLAN: st = rsp__core_clear_preplan(core, &stage, e); break;
    case RSP_MSG_COMMIT:
        st = rsp__device_check_event(p->dev, ev, e); /* as for rollback */
        if (st == RSP_OK)
            st = rsp__core_commit(core, &m->step, ev, w, &stage, e);
        if ((changed = st == RSP_OK))
            st = submit(p, NULL, e);
        if (st == RSP_OK)
            bump(&p->ctr.commits, 1);
        break;
    case RSP_MSG_BUILD_GRAPH_BUFFERS:
        st = rsp__core_build_graph_buffers(core, m->max_bs, m->max_seq_len, w, e);
        if ((changed = st == RSP_OK))
            st = submit(p, NULL, e);
        break;
    case RSP_MSG_STATS:
        rsp__pool_read_counters(p, &r->stats);
        rsp__core_stats(core, &r->stats); /* exact: the owner is not mutating now */
        break;
    case RSP_MSG_BARRIER: break;
    case RSP_MSG_LABEL:
        st = rsp__core_label(core, m->label_name, &r->label, e);
        if (st == RSP_OK) {
            /* L1: pairs with the load-acquire in rsp_post's validation. The
             * waiter of this reply also sees it through the ticket (T1/T2). */
            rsp__store_release_u32(&p->num_labels, rsp__core_num_labels(core));
        }
        break;
    case RSP_MSG_HOLDING: st = rsp__core_holding(core, m->rid, m->label, &r->holding, e); break;
    case RSP_MSG_SHUTDOWN:
        /* Plan waiters would wait for a step that will never come. */
        rsp__publisher_close(p->pub);
        break;
    case RSP_MSG_KIND_COUNT_:
    default:
        st = rsp__fail(e, RSP_EINVAL, "msg->kind %d is not a message kind", (int)m->kind);
        break;
    }
    if (st != RSP_OK && e->status == RSP_OK)
        rsp__fail(e, st, "%s", rsp_strerror(st)); /* a status without a message */
    if (st != RSP_OK && changed)
        st = break_pool(p, m, e);
    if (st == RSP_OK)
        e->status = RSP_OK;
    if (!p->broken)
        sync_stage(p, &stage);
    rsp__pool_mirror_gauges(p);
}
