/*
 * Export pins and import reservations (xfer.h). An operation module like
 * swap.c: validate, reserve, apply. A checkpoint import reserves a tier
 * slot through ckpt.h and stores its key there at the commit.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <string.h>

#include "ckpt.h"
#include "core_impl.h"
#include "util/error.h"
#include "xfer.h"

/* Whether rid's holding h may be exported now: not being imported, no
 * step in flight addressing or forking into it, room in its pin count. */
static rsp_status export_check(const rsp__core *c, rsp_rid rid, const rsp__hold *h, rsp_error *err)
{
    const rsp__slot *s = &c->slots[h->slot];
    const char *name = c->label_names[h->label];
    if (s->importing)
        return rsp__fail(err, RSP_EPINNED,
                         "export: rid %" PRIu64 " \"%s\" is being imported; commit it first", rid,
                         name);
    uint64_t pins = s->pins | s->fork_pins;
    if (pins)
        return rsp__fail(err, RSP_EAGAIN,
                         "export: rid %" PRIu64 " \"%s\" is used by step %" PRIu64
                         ", in flight: its bytes are final after that step's commit and forward",
                         rid, name, c->steps[__builtin_ctzll(pins)].step_id);
    if (s->xpins == UINT16_MAX)
        return rsp__fail(err, RSP_ECAPACITY,
                         "export: rid %" PRIu64 " \"%s\" has %u open exports, the most one "
                         "holding may have",
                         rid, name, (unsigned)UINT16_MAX);
    return RSP_OK;
}

rsp_status rsp__core_export(rsp__core *c, rsp_rid rid, uint64_t mask, rsp__xfer_hold *out,
                            uint32_t *n, rsp_error *err)
{
    rsp__op_begin(c);
    const rsp__req *r = rsp__req_find(c, rid);
    if (!r)
        return rsp__fail(err, RSP_ENOREQ, "export: rid %" PRIu64 " does not exist", rid);
    if (r->swap)
        return rsp__fail(err, RSP_EORDER,
                         "export: rid %" PRIu64 " is swapped out; swap it in first", rid);
    const rsp__hold *h = rsp__req_holds((rsp__req *)r);
    uint64_t found = 0;
    uint32_t k = 0;
    for (uint32_t i = 0; i < r->num_holds; i++) {
        if (mask && !(mask >> h[i].label & 1))
            continue;
        rsp_status st = export_check(c, rid, &h[i], err);
        if (st)
            return st;
        found |= 1ull << h[i].label;
        out[k++] = (rsp__xfer_hold){h[i].label, h[i].slot, h[i].has_state, h[i].generation};
    }
    uint64_t missing = mask & ~found;
    if (missing)
        return rsp__fail(err, RSP_ENOREQ, "export: rid %" PRIu64 " holds no slot of label %s", rid,
                         __builtin_ctzll(missing) < (int)c->num_labels
                             ? c->label_names[__builtin_ctzll(missing)]
                             : "(not interned)");
    /* Nothing fails below: pin. */
    for (uint32_t i = 0; i < k; i++) {
        rsp__slot *s = &c->slots[out[i].slot];
        c->xfer_slots += s->xpins == 0;
        s->xpins++;
    }
    *n = k;
    return RSP_OK;
}

void rsp__core_export_close(rsp__core *c, const rsp__xfer_hold *holds, uint32_t n)
{
    rsp__op_begin(c);
    for (uint32_t i = 0; i < n; i++) {
        rsp__slot *s = &c->slots[holds[i].slot];
        RSP__ASSERT(s->xpins > 0 && c->xfer_slots > 0);
        s->xpins--;
        c->xfer_slots -= s->xpins == 0;
    }
}

/* names[n] as this pool's label ids, each once, none held by r (NULL:
 * rid has no record). */
static rsp_status import_labels(const rsp__core *c, const rsp__req *r, rsp_rid rid,
                                const char (*names)[RSP_NAME_MAX], uint32_t n, rsp__xfer_hold *out,
                                rsp_error *err)
{
    uint64_t seen = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t l = 0;
        while (l < c->num_labels && strncmp(c->label_names[l], names[i], RSP_NAME_MAX) != 0)
            l++;
        if (l == c->num_labels)
            return rsp__fail(err, RSP_ENOLABEL,
                             "import: label \"%.*s\" is not interned in this pool (rsp_label)",
                             RSP_NAME_MAX - 1, names[i]);
        if (seen >> l & 1)
            return rsp__fail(err, RSP_EINVAL, "import: label \"%s\" appears twice",
                             c->label_names[l]);
        if (r && rsp__hold_find_const(r, l))
            return rsp__fail(err, RSP_EINVAL,
                             "import: rid %" PRIu64 " already holds label \"%s\"; release it "
                             "first",
                             rid, c->label_names[l]);
        seen |= 1ull << l;
        out[i] = (rsp__xfer_hold){.label = l};
    }
    return RSP_OK;
}

rsp_status rsp__core_import_begin(rsp__core *c, rsp_rid rid, const char (*names)[RSP_NAME_MAX],
                                  uint32_t n, rsp__xfer_hold *out, bool *created, rsp_error *err)
{
    rsp__op_begin(c);
    rsp__req *r = rsp__req_find(c, rid);
    if (r && r->swap)
        return rsp__fail(err, RSP_EORDER,
                         "import: rid %" PRIu64 " is swapped out; swap it in first", rid);
    rsp_status st = import_labels(c, r, rid, names, n, out, err);
    if (st)
        return st;
    if (n > c->free_top)
        return rsp__fail(err, RSP_ECAPACITY,
                         "import: rid %" PRIu64 " needs %" PRIu32 " slots, %" PRIu32 " are free",
                         rid, n, c->free_top);
    /* Reserve: a record for a new rid, a spill array for a request that
     * outgrows its inline holdings. */
    uint32_t had = r ? r->num_holds : 0;
    if ((!r && rsp__req_reserve(c, 1)) ||
        ((!r || !r->heap) && had + n > RSP__INLINE_HOLDINGS && rsp__hold_reserve_spills(c, 1)))
        return rsp__fail(err, RSP_ENOMEM, "out of memory importing rid %" PRIu64, rid);
    *created = !r;
    r = rsp__req_get(c, rid); /* reserved: cannot fail */
    RSP__ASSERT(r);
    for (uint32_t i = 0; i < n; i++) {
        rsp__hold *h = rsp__hold_assign(c, r, out[i].label);
        out[i].slot = h->slot;
        c->slots[h->slot].importing = true;
        c->xfer_slots++;
    }
    return RSP_OK;
}

void rsp__core_import_commit(rsp__core *c, rsp_rid rid, const rsp__xfer_hold *holds, uint32_t n)
{
    rsp__op_begin(c);
    rsp__req *r = rsp__req_find(c, rid);
    RSP__ASSERT(r);
    for (uint32_t i = 0; r && i < n; i++) {
        rsp__hold *h = rsp__hold_find(r, holds[i].label);
        RSP__ASSERT(h && h->slot == holds[i].slot && c->slots[h->slot].importing);
        c->slots[h->slot].importing = false;
        c->xfer_slots--;
        h->has_state = holds[i].has_state;
        h->generation = rsp__next_generation(c);
    }
}

rsp_status rsp__core_import_abort(rsp__core *c, rsp_rid rid, const rsp__xfer_hold *holds,
                                  uint32_t n, bool created, rsp__work *w, rsp_error *err)
{
    rsp__op_begin(c);
    rsp__req *r = rsp__req_find(c, rid);
    RSP__ASSERT(r);
    if (rsp__work_reserve(w, 1, n, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory aborting the import of rid %" PRIu64, rid);
    rsp_status st = rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = 1, .slots = n}, err);
    if (st)
        return st;
    rsp__work_freeze(w); /* nothing below fails */
    for (uint32_t i = 0; r && i < n; i++) {
        rsp__hold *h = rsp__hold_find(r, holds[i].label);
        RSP__ASSERT(h && h->slot == holds[i].slot && c->slots[h->slot].importing);
        c->slots[h->slot].importing = false;
        c->xfer_slots--;
        /* No step addressed it (admit refused), so it is zeroed and freed now. */
        rsp__hold_drop(c, r, (uint32_t)(h - rsp__req_holds(r)), w);
    }
    rsp__work_thaw(w);
    /* A record that holds nothing frees nothing: the remove cannot fail. */
    if (created && r && !r->num_holds && !r->swap)
        RSP__MUST_OK(rsp__core_remove(c, rid, w, err));
    return RSP_OK;
}

/* --- checkpoint imports -------------------------------------------------- */

static const char *const tier_name[RSP_TIER_COUNT_] = {"device", "host"};

/* The tier of a checkpoint slot id (the host tier's ids come last). */
static rsp_tier tier_of(const rsp__core *c, uint32_t slot)
{
    return slot >= c->tiers[RSP_TIER_HOST].first ? RSP_TIER_HOST : RSP_TIER_DEVICE;
}

/* key may be stored now: not under a pinned checkpoint (a take's rule). */
static rsp_status ckpt_key_free(const rsp__core *c, uint64_t key, const char *what, rsp_error *err)
{
    uint32_t i = rsp__ck_find(c, key);
    if (i == RSP__NONE || !rsp__ck_pinned(&c->ck[i]))
        return RSP_OK;
    return rsp__fail(err, RSP_EPINNED,
                     "import %s: checkpoint key %" PRIu64 " is stored and pinned (%d steps "
                     "restoring from it, %" PRIu32 " caller pins): it cannot be replaced",
                     what, key, __builtin_popcountll(c->ck[i].step_pins), c->ck[i].user_pins);
}

rsp_status rsp__core_import_ckpt_begin(rsp__core *c, uint64_t key, uint32_t *slot, rsp__work *w,
                                       rsp_error *err)
{
    rsp__op_begin(c);
    rsp_tier t = c->tiers[RSP_TIER_DEVICE].size ? RSP_TIER_DEVICE : RSP_TIER_HOST;
    if (!c->tiers[t].size)
        return rsp__fail(err, RSP_EINVAL,
                         "import: checkpoint key %" PRIu64 ": this pool has no checkpoint slots "
                         "(max_checkpoints and max_host_checkpoints are 0)",
                         key);
    rsp_status st = ckpt_key_free(c, key, "begin", err);
    if (st != RSP_OK)
        return st;
    if (!rsp__ck_room(c, t))
        return rsp__fail(err, RSP_ECAPACITY,
                         "import: checkpoint key %" PRIu64 ": the %s tier is full (%" PRIu32
                         " slots) and none of its checkpoints can be evicted",
                         key, tier_name[t], c->tiers[t].size);
    /* The ZERO of the reserved slot, and the report of an eviction. */
    if (rsp__work_reserve(w, 1, 1, 0) || rsp__ck_report_reserve(c, 1, 1, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory importing checkpoint %" PRIu64, key);
    st = rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = 1, .slots = 1}, err);
    if (st != RSP_OK)
        return st;
    rsp__work_freeze(w); /* nothing below fails */
    *slot = rsp__ck_slot_for(c, t);
    RSP__MUST_OK(rsp__work_zero(w, *slot)); /* reserved, frozen */
    rsp__work_thaw(w);
    return RSP_OK;
}

rsp_status rsp__core_import_ckpt_commit(rsp__core *c, uint64_t key, uint32_t slot, rsp_error *err)
{
    rsp__op_begin(c);
    rsp_status st = ckpt_key_free(c, key, "commit", err);
    if (st != RSP_OK)
        return st;
    if (rsp__ck_report_reserve(c, 2, 0, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory committing checkpoint %" PRIu64, key);
    rsp__ck_store(c, key, tier_of(c, slot), slot);
    return RSP_OK;
}

rsp_status rsp__core_import_ckpt_abort(rsp__core *c, uint32_t slot, rsp__work *w, rsp_error *err)
{
    rsp__op_begin(c);
    if (rsp__work_reserve(w, 1, 1, 0))
        return rsp__fail(err, RSP_ENOMEM, "out of memory aborting a checkpoint import");
    rsp_status st = rsp__core_reserve_ext(c, &(rsp__ext_need){.ops = 1, .slots = 1}, err);
    if (st != RSP_OK)
        return st;
    rsp__work_freeze(w);                   /* nothing below fails */
    RSP__MUST_OK(rsp__work_zero(w, slot)); /* reserved, frozen */
    rsp__work_thaw(w);
    rsp__tier_push(c, tier_of(c, slot), slot);
    return RSP_OK;
}
