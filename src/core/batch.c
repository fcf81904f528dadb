/*
 * The one-trip operations on top of the single ones (docs/semantics.md
 * 3.1 and 4.7: vector messages, one trip a step): ingest, reset and remove
 * of a list of rids as one all-or-nothing operation, and whether a step is
 * in flight. Kept apart from core.c: each is the single operation applied
 * per rid, with the list checked and everything reserved for all rids
 * before the first change.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>

#include "step.h"
#include "util/error.h"

bool rsp__core_step_in_flight(const rsp__core *c, uint64_t step_id)
{
    return rsp__step_find(c, step_id) != RSP__NONE;
}

/* A rid listed twice refuses the list (the scratch pair set, label 0). */
static rsp_status check_distinct(rsp__core *c, const rsp_rid *rids, uint32_t n, rsp_error *err)
{
    if (rsp__set_reset(c, n) != RSP_OK)
        return rsp__fail(err, RSP_ENOMEM, "out of memory checking a list of %" PRIu32 " rids", n);
    for (uint32_t i = 0; i < n; i++) {
        if (rsp__set_insert(c, rids[i], 0))
            continue;
        uint32_t j = 0;
        while (rids[j] != rids[i])
            j++;
        return rsp__fail(err, RSP_EINVAL,
                         "rids[%" PRIu32 "] (rid %" PRIu64 ") repeats rids[%" PRIu32
                         "]: a list names each rid once (nothing changed)",
                         i, rids[i], j);
    }
    return RSP_OK;
}

/* Ingest: room for every new rid's record first, then nothing fails. */
static rsp_status ingest_many(rsp__core *c, const rsp_rid *rids, uint32_t n, rsp_error *err)
{
    uint32_t fresh = 0;
    for (uint32_t i = 0; i < n; i++)
        fresh += rsp__req_find(c, rids[i]) == NULL;
    if (rsp__req_reserve(c, fresh) != RSP_OK)
        return rsp__fail(err, RSP_ENOMEM, "out of memory ingesting %" PRIu32 " new rids", fresh);
    for (uint32_t i = 0; i < n; i++)
        RSP__MUST(rsp__req_get(c, rids[i]) != NULL); /* reserved: cannot fail */
    return RSP_OK;
}

/* Reset or remove: the work list and the reserve hook get the whole
 * list's need at once; the single calls then find their room taken care
 * of (the hook is set aside while they run: asked per rid, it would
 * reserve each rid's share alone, not the list's). */
static rsp_status reset_many(rsp__core *c, bool remove, const rsp_rid *rids, uint32_t n, bool free,
                             rsp__work *w, rsp_error *err)
{
    uint32_t found = 0;
    uint64_t holds = 0;
    for (uint32_t i = 0; i < n; i++) {
        const rsp__req *r = rsp__req_find(c, rids[i]);
        found += r != NULL;
        holds += r ? r->num_holds : 0;
    }
    if (holds > UINT32_MAX / 2 || rsp__work_reserve(w, found, (uint32_t)holds, 0) != RSP_OK)
        return rsp__fail(err, RSP_ENOMEM, "out of memory %s %" PRIu32 " rids",
                         remove ? "removing" : "resetting", n);
    rsp__ext_need need = {.ops = found, .slots = (uint32_t)holds};
    rsp_status st = rsp__core_reserve_ext(c, &need, err);
    if (st != RSP_OK)
        return st;
    const rsp__reserve_hook hook = c->reserve_hook;
    c->reserve_hook = NULL;
    for (uint32_t i = 0; i < n && st == RSP_OK; i++)
        st = remove ? rsp__core_remove(c, rids[i], w, err)
                    : rsp__core_reset(c, rids[i], free, w, err);
    c->reserve_hook = hook;
    RSP__ASSERT(st == RSP_OK); /* everything it could need was reserved above */
    return st;
}

rsp_status rsp__core_lifecycle_many(rsp__core *c, rsp__lifecycle_op op, const rsp_rid *rids,
                                    uint32_t n, bool free, rsp__work *w, rsp_error *err)
{
    rsp__op_begin(c);
    if (n > 0 && !rids)
        return rsp__fail(err, RSP_EINVAL, "rids is NULL");
    if (op != RSP__LC_INGEST && !w)
        return rsp__fail(err, RSP_EINVAL, "work is NULL");
    rsp_status st = check_distinct(c, rids, n, err);
    if (st != RSP_OK)
        return st;
    if (op == RSP__LC_INGEST)
        return ingest_many(c, rids, n, err);
    return reset_many(c, op == RSP__LC_REMOVE, rids, n, free, w, err);
}
