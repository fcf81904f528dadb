/*
 * The owner's handler: one message -> core call -> device work -> plan
 * publication -> counters -> reply. Runs on the owner thread only, so none
 * of the pool's mutable state needs a lock. No slot logic lives here: the
 * core decides, this file routes and accounts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "pool.h"

#include "hb.h"
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

void rsp__pool_owner_start(void *ctx)
{
    rsp_pool *p = ctx;
    rsp__publisher_owner_enter(p->pub);
}

void rsp__pool_owner_idle(void *ctx)
{
    rsp_pool *p = ctx;
    /* Retired plans go to call_rcu in batches; an idle owner hands over
     * the rest, so they do not wait for the next plan to be reclaimed. */
    rsp__publisher_flush(p->pub);
}

void rsp__pool_owner_stop(void *ctx)
{
    rsp_pool *p = ctx;
    rsp__publisher_owner_leave(p->pub);
}

/* Submit the core's work (if any, or always when the caller wants its
 * completion event) and account what it costs. */
static rsp_status submit(rsp_pool *p, rsp_event *done, rsp_error *err)
{
    rsp__work *w = &p->work;
    if (!done && rsp__work_empty(w))
        return RSP_OK;
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

static void unpublish_stage(rsp_pool *p)
{
    if (!p->has_stage)
        return;
    rsp__publish_staged(p->pub, NULL);
    p->has_stage = false;
}

static rsp_status handle_plan(rsp_pool *p, const rsp_step *step, rsp_reply *r)
{
    rsp_error *e = &r->error;
    rsp__plan_out out;
    rsp_status st = rsp__core_plan(p->core, step, &out, &p->work, e);
    if (st != RSP_OK)
        return st;
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
        p->has_stage = true;
        p->stage_step = out.step_id;
        bump(&p->ctr.stages, 1);
    } else {
        /* Live first, then drop the stage it consumed: readers never see
         * a moment without a live plan. */
        rsp__publish_live(p->pub, plan);
        if (p->has_stage && p->stage_step == out.step_id)
            unpublish_stage(p);
        bump(&p->ctr.plans, 1);
        if (out.promoted)
            bump(&p->ctr.promotions, 1);
    }
    r->plan_step_id = out.step_id;
    r->plan_staged = out.staged;
    return RSP_OK;
}

void rsp__pool_handle(void *ctx, const rsp_msg *m, rsp_reply *r)
{
    rsp_pool *p = ctx;
    rsp_error *e = &r->error;
    rsp__core *core = p->core;
    rsp__work *w = &p->work;
    const rsp_event *ev = m->event.handle ? &m->event : NULL;
    rsp_status st = RSP_OK;
    rsp__work_clear(w);

    switch (m->kind) {
    case RSP_MSG_INGEST: st = rsp__core_ingest(core, m->rid, e); break;
    case RSP_MSG_REMOVE:
        st = rsp__core_remove(core, m->rid, w, e);
        if (st == RSP_OK)
            st = submit(p, NULL, e);
        break;
    case RSP_MSG_RESET:
        st = rsp__core_reset(core, m->rid, m->free, w, e);
        if (st == RSP_OK)
            st = submit(p, NULL, e);
        break;
    case RSP_MSG_ADMIT:
        st = rsp__core_admit(core, &m->step, &r->admit, w, e);
        if (st == RSP_OK)
            st = submit(p, NULL, e);
        if (st == RSP_OK)
            bump(r->admit.ok ? &p->ctr.admits_ok : &p->ctr.admits_refused, 1);
        break;
    case RSP_MSG_ROLLBACK:
        st = rsp__core_rollback(core, m->step.step_id, ev, w, e);
        if (st == RSP_OK)
            st = submit(p, NULL, e);
        if (st == RSP_OK) {
            /* The core drops a stage of the step it rolls back. */
            if (p->has_stage && p->stage_step == m->step.step_id)
                unpublish_stage(p);
            bump(&p->ctr.rollbacks, 1);
        }
        break;
    case RSP_MSG_PLAN: st = handle_plan(p, &m->step, r); break;
    case RSP_MSG_CLEAR_PREPLAN:
        st = rsp__core_clear_preplan(core, e);
        if (st == RSP_OK)
            unpublish_stage(p);
        break;
    case RSP_MSG_COMMIT:
        st = rsp__core_commit(core, &m->step, ev, w, e);
        if (st == RSP_OK)
            st = submit(p, NULL, e);
        if (st == RSP_OK)
            bump(&p->ctr.commits, 1);
        break;
    case RSP_MSG_BUILD_GRAPH_BUFFERS:
        st = rsp__core_build_graph_buffers(core, m->max_bs, m->max_seq_len, w, e);
        if (st == RSP_OK)
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
    if (st == RSP_OK)
        e->status = RSP_OK;
    rsp__pool_mirror_gauges(p);
}
