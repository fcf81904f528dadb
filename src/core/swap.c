/*
 * Swapping a request out to the host tier and back in (core.h
 * rsp__core_swap_out / _in; docs/design.md "Swap"). A swapped request
 * keeps its record but no holdings; its state lives in host-tier slots
 * owned by a swap record (core_impl.h rsp__swap), never evicted, given
 * back by swap_in, reset or remove (core.c). Validate, reserve, apply
 * like every operation. SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <string.h>

#include "ckpt.h"
#include "util/error.h"
#include "util/mem.h"

/* The request record of rid, swapped out or not as `want` (RSP_ENOREQ,
 * RSP_EORDER). */
static rsp_status swap_req(rsp__core *c, rsp_rid rid, bool want, rsp__req **out, rsp_error *err)
{
    *out = rsp__req_find(c, rid);
    if (!*out)
        return rsp__fail(err, RSP_ENOREQ, "swap: rid %" PRIu64 " does not exist", rid);
    if (((*out)->swap != 0) != want)
        return rsp__fail(err, RSP_EORDER, "swap %s: rid %" PRIu64 " is %s swapped out",
                         want ? "in" : "out", rid, want ? "not" : "already");
    return RSP_OK;
}

/* Every holding of r unpinned: no step in flight addresses or forks into
 * it (RSP_EORDER naming the step). */
static rsp_status check_unpinned(const rsp__core *c, const rsp__req *r, rsp_error *err)
{
    const rsp__hold *h = rsp__req_holds((rsp__req *)r);
    RSP__ASSERT(c->same.ghost == RSP__NONE); /* rsp__op_begin cleared any */
    rsp_status st = rsp__xfer_check_req(c, r, RSP__NONE, "swap out", err);
    if (st)
        return st;
    for (uint32_t i = 0; i < r->num_holds; i++) {
        uint64_t pins = c->slots[h[i].slot].pins | c->slots[h[i].slot].fork_pins;
        if (pins)
            return rsp__fail(err, RSP_EORDER,
                             "swap out: rid %" PRIu64 " \"%s\" (slot %" PRIu32
                             ") is used by step %" PRIu64 ", in flight; commit or roll it back "
                             "first",
                             r->rid, c->label_names[h[i].label], h[i].slot,
                             c->steps[__builtin_ctzll(pins)].step_id);
    }
    return RSP_OK;
}

/* A free swap record (reserved: the array has room). */
static uint32_t swap_alloc(rsp__core *c)
{
    if (c->free_swap != RSP__NONE) {
        uint32_t i = c->free_swap;
        c->free_swap = c->swaps[i].next_free;
        return i;
    }
    RSP__ASSERT(c->num_swap_recs < c->cap_swaps);
    return c->num_swap_recs++;
}

/* Validate and reserve a swap out of r: room in the host tier, the swap
 * record, the work, the report. */
static rsp_status out_reserve(rsp__core *c, rsp__req *r, rsp__work *w, rsp_error *err)
{
    uint32_t n = r->num_holds;
    uint32_t room = rsp__ck_room(c, RSP_TIER_HOST);
    if (room < n)
        return rsp__fail(err, RSP_ECAPACITY,
                         "swap out: rid %" PRIu64 " holds %" PRIu32 " slots but the host tier "
                         "can give %" PRIu32 " (free, or unpinned checkpoints to evict)",
                         r->rid, n, room);
    if (c->num_swap_recs == c->cap_swaps && c->free_swap == RSP__NONE &&
        rsp__grow((void **)&c->swaps, &c->cap_swaps, (uint64_t)c->num_swap_recs + 1,
                  sizeof *c->swaps))
        return rsp__fail(err, RSP_ENOMEM, "out of memory swapping out rid %" PRIu64, r->rid);
    /* A COPY op and a ZERO op; a pair and a zeroed slot per holding. */
    if (rsp__work_reserve(w, 2, n, n) || rsp__work_reserve_marks(w, c->layout.num_ids) ||
        rsp__ck_report_reserve(c, n, n, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory swapping out rid %" PRIu64, r->rid);
    return rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = 2, .slots = n, .pairs = n}, err);
}

rsp_status rsp__core_swap_out(rsp__core *c, rsp_rid rid, rsp__work *w, rsp_error *err)
{
    rsp__op_begin(c);
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "swap out: work is NULL");
    /* Checked before the rid: a request with no holdings needs no host
     * slot, and would otherwise be marked swapped out (its steps refused)
     * on a pool that can never swap anything. */
    if (!c->tiers[RSP_TIER_HOST].size)
        return rsp__fail(err, RSP_ECAPACITY,
                         "swap out: rid %" PRIu64 ": the pool has no host tier "
                         "(max_host_checkpoints = 0), so nothing can be swapped out",
                         rid);
    rsp__req *r;
    rsp_status st = swap_req(c, rid, false, &r, err);
    if (st == RSP_OK)
        st = check_unpinned(c, r, err);
    if (st == RSP_OK)
        st = out_reserve(c, r, w, err);
    if (st != RSP_OK)
        return st;
    rsp__work_freeze(w); /* nothing below fails */
    uint32_t si = swap_alloc(c);
    rsp__swap *sw = &c->swaps[si];
    rsp__hold *h = rsp__req_holds(r);
    sw->n = r->num_holds;
    for (uint32_t i = 0; i < sw->n; i++) {
        sw->label[i] = h[i].label;
        sw->has_state[i] = h[i].has_state;
        sw->slot[i] = rsp__ck_slot_for(c, RSP_TIER_HOST);
        RSP__MUST_OK(rsp__work_copy(w, h[i].slot, sw->slot[i]));
    }
    /* Released as any release: zeroed (after the copies, FIFO) and pushed,
     * in label insertion order like reset(free). */
    while (r->num_holds)
        rsp__hold_drop(c, r, 0, w);
    r->swap = si + 1;
    c->num_swapped++;
    c->swapped_slots += sw->n;
    rsp__work_thaw(w);
    return RSP_OK;
}

rsp_status rsp__core_swap_in(rsp__core *c, rsp_rid rid, rsp_admit_outcome *out, rsp__work *w,
                             rsp_error *err)
{
    rsp__op_begin(c);
    if (!w || !out)
        return rsp__fail(err, RSP_EINVAL, "swap in: out or work is NULL");
    rsp__req *r;
    rsp_status st = swap_req(c, rid, true, &r, err);
    if (st != RSP_OK)
        return st;
    rsp__swap *sw = &c->swaps[r->swap - 1];
    memset(out, 0, sizeof *out);
    out->usable = c->layout.usable_slots;
    out->free = c->free_top;
    if (sw->n > c->free_top) { /* an outcome, as admit's: nothing changed */
        out->rid = rid;
        out->label = sw->label[c->free_top];
        out->slots_short = sw->n - c->free_top;
        return RSP_OK;
    }
    if (rsp__work_reserve(w, 1, 0, sw->n) || rsp__work_reserve_marks(w, c->layout.num_ids) ||
        rsp__hold_reserve_spills(c, sw->n > RSP__INLINE_HOLDINGS))
        return rsp__fail(err, RSP_ENOMEM, "out of memory swapping in rid %" PRIu64, rid);
    st = rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = 1, .pairs = sw->n}, err);
    if (st != RSP_OK)
        return st;
    rsp__work_freeze(w); /* nothing below fails */
    for (uint32_t i = 0; i < sw->n; i++) {
        rsp__hold *h = rsp__hold_assign(c, r, sw->label[i]);
        RSP__MUST_OK(rsp__work_copy(w, sw->slot[i], h->slot));
        h->has_state = sw->has_state[i];
    }
    rsp__swap_forget(c, r);
    out->ok = true;
    out->free = c->free_top;
    return RSP_OK;
}
