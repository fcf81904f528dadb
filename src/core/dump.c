/*
 * The state dump: the core's state as JSON members (rsp_pool_dump). Reads
 * only, allocates nothing: the writer (util/json.h) counts what does not
 * fit, so the same walk answers a too-small buffer with the size it needs.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "core_impl.h"
#include "util/json.h"

static const char *const phase_name[] = {"admitted", "planned", "ending"};
static const char *const state_name[] = {"free", "sink", "held", "pending"};

static void dump_labels(const rsp__core *c, rsp__jw *w)
{
    rsp__jw_put(w, "\"labels\":[");
    for (uint32_t i = 0; i < c->num_labels; i++) {
        rsp__jw_put(w, "%s{\"id\":%u,\"name\":", i ? "," : "", i);
        rsp__jw_str(w, c->label_names[i]);
        rsp__jw_put(w, "}");
    }
    rsp__jw_put(w, "]");
}

static void dump_requests(const rsp__core *c, rsp__jw *w)
{
    rsp__jw_put(w, ",\"requests\":[");
    bool first = true;
    for (uint32_t i = 0; i < c->num_recs; i++) {
        const rsp__req *r = &c->reqs[i];
        if (!r->live)
            continue;
        rsp__jw_put(w, "%s{\"rid\":%llu,\"swapped\":%s,\"holdings\":[", first ? "" : ",",
                    (unsigned long long)r->rid, r->swap ? "true" : "false");
        first = false;
        const rsp__hold *h = r->heap ? r->heap : r->inl;
        for (uint32_t k = 0; k < r->num_holds; k++)
            rsp__jw_put(w, "%s{\"label\":%u,\"slot\":%u,\"has_state\":%s,\"generation\":%llu}",
                        k ? "," : "", h[k].label, h[k].slot, h[k].has_state ? "true" : "false",
                        (unsigned long long)h[k].generation);
        rsp__jw_put(w, "]");
        if (r->swap) {
            const rsp__swap *sw = &c->swaps[r->swap - 1];
            rsp__jw_put(w, ",\"host_slots\":[");
            for (uint32_t k = 0; k < sw->n; k++)
                rsp__jw_put(w, "%s{\"label\":%u,\"slot\":%u,\"has_state\":%s}", k ? "," : "",
                            sw->label[k], sw->slot[k], sw->has_state[k] ? "true" : "false");
            rsp__jw_put(w, "]");
        }
        rsp__jw_put(w, "}");
    }
    rsp__jw_put(w, "]");
}

/* The free stack top first: the released slots (last pushed first), then
 * the slots never handed out as a range [fresh, max_slots), popped lowest
 * first; pending slots, and those waiting for a zero, apart. */
static void dump_slots(const rsp__core *c, rsp__jw *w)
{
    rsp__jw_put(w,
                ",\"slots\":{\"max\":%u,\"held\":%u,\"pending\":%u,\"free\":%u,"
                "\"generation\":%llu}",
                c->layout.max_slots, c->held, c->pending, c->free_top,
                (unsigned long long)c->generation);
    rsp__jw_put(w, ",\"free_stack\":[");
    for (uint32_t i = c->num_pushed; i-- > 0;)
        rsp__jw_put(w, "%s%u", i + 1 == c->num_pushed ? "" : ",", c->free_stack[i]);
    rsp__jw_put(w, "],\"free_fresh\":[%u,%u]", c->fresh, c->layout.max_slots);
    rsp__jw_put(w, ",\"pending\":[");
    bool first = true;
    for (uint32_t s = 0; s < c->fresh; s++) {
        const rsp__slot *sl = &c->slots[s];
        if (sl->state != RSP__SLOT_PENDING && !sl->zero_pending)
            continue;
        rsp__jw_put(w, "%s{\"slot\":%u,\"state\":\"%s\",\"zero_pending\":%s}", first ? "" : ",", s,
                    state_name[sl->state & 3], sl->zero_pending ? "true" : "false");
        first = false;
    }
    rsp__jw_put(w, "]");
}

static void dump_checkpoints(const rsp__core *c, rsp__jw *w)
{
    static const char *const tier_name[RSP_TIER_COUNT_] = {"device", "host"};
    rsp__jw_put(w, ",\"checkpoints\":{");
    for (int t = 0; t < RSP_TIER_COUNT_; t++) {
        const rsp__tier *tr = &c->tiers[t];
        rsp__jw_put(w, "%s\"%s\":{\"size\":%u,\"free\":%u,\"lru\":[", t ? "," : "", tier_name[t],
                    tr->size, tr->free_top);
        bool first = true;
        for (uint32_t i = tr->head; i != RSP__NONE; i = c->ck[i].next) {
            const rsp__ckrec *k = &c->ck[i];
            rsp__jw_put(w,
                        "%s{\"key\":%llu,\"slot\":%u,\"user_pins\":%u,\"step_pins\":%d,"
                        "\"last_use\":%llu}",
                        first ? "" : ",", (unsigned long long)k->key, c->layout.max_slots + i,
                        k->user_pins, __builtin_popcountll(k->step_pins),
                        (unsigned long long)k->last_use);
            first = false;
        }
        rsp__jw_put(w, "]}");
    }
    rsp__jw_put(w, "}");
}

static void dump_step(const rsp__core *c, const rsp__steprec *s, rsp__jw *w)
{
    rsp__jw_put(w, "{\"step_id\":%llu,\"phase\":\"%s\",\"capture\":%s,\"admit_seq\":%llu",
                (unsigned long long)s->step_id, phase_name[s->phase % 3],
                s->capture ? "true" : "false", (unsigned long long)s->admit_seq);
    rsp__jw_put(w, ",\"pinned\":[");
    for (uint32_t k = 0; k < s->num_pinned; k++)
        rsp__jw_put(w, "%s%u", k ? "," : "", s->pinned[k]);
    rsp__jw_put(w, "],\"fresh\":[");
    for (uint32_t k = 0; k < s->num_journal; k++)
        rsp__jw_put(w, "%s{\"rid\":%llu,\"label\":%u,\"slot\":%u}", k ? "," : "",
                    (unsigned long long)s->journal[k].rid, s->journal[k].label, s->journal[k].slot);
    rsp__jw_put(w, "],\"restores_pinned\":[");
    for (uint32_t k = 0; k < s->num_ckrecs; k++)
        rsp__jw_put(w, "%s%llu", k ? "," : "", (unsigned long long)c->ck[s->ckrecs[k]].key);
    rsp__jw_put(w, "]}");
}

static void dump_steps(const rsp__core *c, rsp__jw *w)
{
    rsp__jw_put(w, ",\"steps\":[");
    bool first = true;
    for (uint32_t i = 0; i < c->max_inflight; i++) {
        if (!c->steps[i].used)
            continue;
        rsp__jw_put(w, "%s", first ? "" : ",");
        first = false;
        dump_step(c, &c->steps[i], w);
    }
    rsp__jw_put(w, "]");
    if (c->stage_active)
        rsp__jw_put(w, ",\"stage\":{\"step_id\":%llu}", (unsigned long long)c->stage_step);
    else
        rsp__jw_put(w, ",\"stage\":null");
}

void rsp__core_dump(const rsp__core *c, rsp__jw *w)
{
    dump_labels(c, w);
    dump_slots(c, w);
    dump_requests(c, w);
    dump_checkpoints(c, w);
    dump_steps(c, w);
}
