/*
 * The public export and import calls (rsp.h, "Export and import"): checks,
 * the objects, the messages that carry them to the owner, and the waits.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "face.h"
#include "pool.h"
#include "util/error.h"
#include "util/time.h"
#include "xfer_impl.h"

/* Post msg for x and wait for its answer (a synchronous call). */
static rsp_status xfer_call(rsp__xfer *x, rsp_msg_kind kind, uint64_t seq, rsp_error *err)
{
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    if (rsp__in_read_section())
        return rsp__fail_in_section(err, "an export or import call (it waits for the owner)");
    rsp_msg m = {.kind = kind, .seq = seq, .key = (uint64_t)(uintptr_t)x};
    rsp_ticket *t;
    rsp_status st = rsp__post(x->pool, &m, &t, RSP_WAIT_FOREVER, true, err);
    if (st != RSP_OK)
        return st;
    rsp_reply r;
    st = rsp_wait(t, RSP_WAIT_FOREVER, &r);
    if (st != RSP_OK && err)
        *err = r.error;
    return st;
}

/* The spec's target, checked: a rank of a world whose size divides every
 * sharded axis. */
static rsp_status check_target(const rsp__layout *lay, const rsp_export_spec *s, uint32_t *tw,
                               rsp_error *err)
{
    *tw = s->target_world_size ? s->target_world_size : lay->world_size;
    if (s->target_rank >= *tw)
        return rsp__fail(err, RSP_EINVAL,
                         "spec->target_rank %" PRIu32
                         " is not below the target world size %" PRIu32,
                         s->target_rank, *tw);
    for (uint32_t b = 0; b < lay->num_blocks; b++)
        for (uint32_t d = 0; d < lay->blocks[b].ndim; d++)
            if ((lay->blocks[b].shard_mask >> d & 1) && lay->blocks[b].full_shape[d] % *tw)
                return rsp__fail(err, RSP_EINVAL,
                                 "spec->target_world_size %" PRIu32
                                 " does not divide blocks[%" PRIu32 "].shape[%" PRIu32
                                 "] = %" PRId64,
                                 *tw, b, d, lay->blocks[b].full_shape[d]);
    return RSP_OK;
}

static rsp_status check_spec(const rsp_pool *pool, const rsp_export_spec *s, rsp_export **out,
                             uint32_t *tw, rsp_error *err)
{
    if (!pool || !s || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : !s ? "spec" : "out");
    if (s->struct_size != sizeof *s)
        return rsp__fail(err, RSP_EINVAL,
                         "spec->struct_size %" PRIu32 " is not %zu: fill it with "
                         "rsp_export_spec_init",
                         s->struct_size, sizeof *s);
    if ((unsigned)s->what > (unsigned)RSP_XFER_CHECKPOINT)
        return rsp__fail(err, RSP_EINVAL, "spec->what %d is not an rsp_xfer_what", (int)s->what);
    return check_target(pool->layout, s, tw, err);
}

/* Ask the owner to pin until it answers other than RSP_EAGAIN (a step in
 * flight uses the holding: poll with a growing sleep until it committed),
 * then wait for the bytes (the done event). */
static rsp_status export_pin(rsp_export *e, uint64_t timeout_ns, rsp_error *err)
{
    const uint64_t deadline = rsp__deadline(timeout_ns);
    uint64_t nap = 20000;
    rsp_error why;
    rsp_status st;
    while ((st = xfer_call(&e->x, RSP_MSG_EXPORT, 0, &why)) == RSP_EAGAIN) {
        uint64_t now = rsp__now_ns();
        if (now >= deadline)
            return rsp__fail(err, RSP_ETIMEDOUT, "%s (timed out waiting)", why.message);
        uint64_t left = deadline - now;
        struct timespec ts = rsp__timespec_of(nap < left ? nap : left);
        nanosleep(&ts, NULL);
        nap = nap < 1000000 ? nap * 2 : nap;
    }
    if (st != RSP_OK) {
        if (err)
            *err = why;
        return st;
    }
    uint64_t now = rsp__now_ns();
    st = rsp__device_event_wait(e->x.pool->dev, &e->x.done,
                                deadline == RSP__NO_DEADLINE ? RSP_WAIT_FOREVER
                                : deadline > now             ? deadline - now
                                                             : 0,
                                err);
    if (st != RSP_OK)
        (void)xfer_call(&e->x, RSP_MSG_EXPORT_CLOSE, 0, NULL);
    return st;
}

/* The header's holdings and the extents of the pinned slots. */
static rsp_status export_describe(rsp_export *e, const rsp_export_spec *s, uint32_t tw,
                                  rsp_error *err)
{
    const rsp__layout *lay = e->x.pool->layout;
    rsp_xfer_header *h = &e->h;
    rsp__xfer_describe(lay, h);
    h->what = (uint32_t)s->what;
    h->rid = s->rid;
    h->key = s->key;
    h->tag = s->tag;
    h->target_world_size = tw;
    h->target_rank = s->target_rank;
    h->num_holdings = e->x.n;
    uint32_t slots[RSP_MAX_LABELS];
    for (uint32_t i = 0; i < e->x.n; i++) {
        memcpy(h->holdings[i].label, e->x.names[i], RSP_NAME_MAX);
        h->holdings[i].has_state = e->x.holds[i].has_state;
        h->holdings[i].generation = e->x.holds[i].generation;
        slots[i] = e->x.holds[i].slot;
    }
    uint64_t n = rsp__xfer_extents(lay, slots, e->x.n, lay->world_size, lay->rank, tw,
                                   s->target_rank, true, NULL, 0);
    if (n > UINT32_MAX || !(e->ext = calloc(n ? n : 1, sizeof *e->ext)))
        return rsp__fail(err, RSP_ENOMEM, "out of memory listing the export's extents");
    e->num_ext = (uint32_t)rsp__xfer_extents(lay, slots, e->x.n, lay->world_size, lay->rank, tw,
                                             s->target_rank, true, e->ext, n);
    return RSP_OK;
}

rsp_status rsp_export_open(rsp_pool *pool, const rsp_export_spec *spec, rsp_export **out,
                           rsp_error *err)
{
    uint32_t tw = 0; /* set by check_spec on RSP_OK; gcc cannot see it */
    rsp_status st = check_spec(pool, spec, out, &tw, err);
    if (st != RSP_OK)
        return st;
    *out = NULL;
    rsp_export *e = calloc(1, sizeof *e);
    if (!e)
        return rsp__fail(err, RSP_ENOMEM, "out of memory opening an export");
    e->x = (rsp__xfer){.tag = RSP__XFER_TAG,
                       .pool = pool,
                       .op = RSP__XFER_EXPORT,
                       .what = spec->what,
                       .rid = spec->rid,
                       .key = spec->key,
                       .labels = spec->labels};
    st = export_pin(e, spec->timeout_ns, err);
    if (st == RSP_OK) {
        st = export_describe(e, spec, tw, err);
        if (st != RSP_OK)
            (void)xfer_call(&e->x, RSP_MSG_EXPORT_CLOSE, 0, NULL);
    }
    if (st != RSP_OK) {
        free(e->ext);
        free(e);
        return st;
    }
    *out = e;
    return RSP_OK;
}

const rsp_xfer_header *rsp_export_header(const rsp_export *exp)
{
    return exp ? &exp->h : NULL;
}

const rsp_extent *rsp_export_extents(const rsp_export *exp, uint32_t *count)
{
    if (count)
        *count = exp ? exp->num_ext : 0;
    return exp ? exp->ext : NULL;
}

rsp_status rsp_export_close(rsp_export *exp, rsp_error *err)
{
    if (!exp)
        return RSP_OK;
    exp->x.op = RSP__XFER_CLOSE;
    rsp_status st = xfer_call(&exp->x, RSP_MSG_EXPORT_CLOSE, 0, err);
    if (st != RSP_OK)
        return st; /* still open: the caller may close it again */
    exp->x.tag = 0;
    free(exp->ext);
    free(exp);
    return RSP_OK;
}

/* h is a request's or a checkpoint's header for this pool's rank. */
static rsp_status check_header(const rsp_pool *pool, const rsp_xfer_header *h, rsp_error *err)
{
    rsp_status st = rsp__xfer_check_layout(pool->layout, h, err);
    if (st != RSP_OK)
        return st;
    if (h->what > RSP_XFER_CHECKPOINT)
        return rsp__fail(err, RSP_EINVAL, "import: h->what %" PRIu32 " is not an rsp_xfer_what",
                         h->what);
    if (h->what == RSP_XFER_CHECKPOINT && h->num_holdings != 1)
        return rsp__fail(err, RSP_EINVAL,
                         "import: a checkpoint's header has one holding, not %" PRIu32,
                         h->num_holdings);
    if (h->target_world_size != pool->layout->world_size || h->target_rank != pool->layout->rank)
        return rsp__fail(err, RSP_EINVAL,
                         "import: the export is for rank %" PRIu32 " of %" PRIu32
                         "; this pool is rank %" PRIu32 " of %" PRIu32,
                         h->target_rank, h->target_world_size, pool->layout->rank,
                         pool->layout->world_size);
    if (h->num_holdings > RSP_MAX_LABELS || h->world_size == 0 || h->rank >= h->world_size)
        return rsp__fail(err, RSP_EINVAL, "import: the header's %s is out of range",
                         h->num_holdings > RSP_MAX_LABELS ? "num_holdings" : "rank");
    return RSP_OK;
}

rsp_status rsp_import_begin(rsp_pool *pool, const rsp_xfer_header *h, rsp_rid rid, uint64_t seq,
                            rsp_import **out, rsp_error *err)
{
    if (!pool || !h || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : !h ? "h" : "out");
    *out = NULL;
    rsp_status st = check_header(pool, h, err);
    if (st != RSP_OK)
        return st;
    rsp_import *imp = calloc(1, sizeof *imp);
    if (!imp)
        return rsp__fail(err, RSP_ENOMEM, "out of memory beginning an import");
    imp->h = *h;
    imp->x = (rsp__xfer){.tag = RSP__XFER_TAG,
                         .pool = pool,
                         .op = RSP__XFER_BEGIN,
                         .what = (rsp_xfer_what)h->what,
                         .rid = rid,
                         .key = h->key,
                         .header = &imp->h};
    st = xfer_call(&imp->x, RSP_MSG_IMPORT, seq, err);
    /* The slots are zeroed by the device (a checkpoint's by begin, a
     * request's when they were last freed, maybe behind a forward still
     * running): the transport writes after that. The wait fails only with
     * the device (the pool answers RSP_EDEVICE from then on): the abort
     * gives the slots back where it needs no number of the caller's. */
    if (st == RSP_OK) {
        st = rsp__device_event_wait(pool->dev, &imp->x.done, RSP_WAIT_FOREVER, err);
        if (st != RSP_OK && !seq) {
            imp->x.op = RSP__XFER_ABORT;
            (void)xfer_call(&imp->x, RSP_MSG_IMPORT, 0, NULL);
        }
    }
    if (st != RSP_OK) {
        free(imp);
        return st;
    }
    *out = imp;
    return RSP_OK;
}

rsp_status rsp_import_extents(const rsp_import *imp, uint32_t src_world_size, uint32_t src_rank,
                              rsp_extent *out, uint32_t cap, uint32_t *count, rsp_error *err)
{
    if (!imp || !count || (cap && !out))
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !imp ? "imp" : !count ? "count" : "out");
    if (src_rank >= src_world_size)
        return rsp__fail(err, RSP_EINVAL,
                         "src_rank %" PRIu32 " is not below src_world_size %" PRIu32, src_rank,
                         src_world_size);
    const rsp__layout *lay = imp->x.pool->layout;
    for (uint32_t b = 0; b < lay->num_blocks; b++)
        for (uint32_t d = 0; d < lay->blocks[b].ndim; d++)
            if ((lay->blocks[b].shard_mask >> d & 1) &&
                lay->blocks[b].full_shape[d] % src_world_size)
                return rsp__fail(err, RSP_EINVAL,
                                 "src_world_size %" PRIu32 " does not divide blocks[%" PRIu32
                                 "].shape[%" PRIu32 "]",
                                 src_world_size, b, d);
    uint32_t slots[RSP_MAX_LABELS];
    for (uint32_t i = 0; i < imp->x.n; i++)
        slots[i] = imp->x.holds[i].slot;
    uint64_t n = rsp__xfer_extents(lay, slots, imp->x.n, src_world_size, src_rank, lay->world_size,
                                   lay->rank, false, out, cap);
    if (n > UINT32_MAX)
        return rsp__fail(err, RSP_EINVAL, "more than 2^32 extents");
    *count = (uint32_t)n;
    return RSP_OK;
}

/* Commit or abort: one message; the object is freed once it was handled. */
static rsp_status import_end(rsp_import *imp, rsp__xfer_op op, uint64_t seq, rsp_error *err)
{
    imp->x.op = op;
    rsp_status st = xfer_call(&imp->x, RSP_MSG_IMPORT, seq, err);
    if (st != RSP_OK)
        return st;
    imp->x.tag = 0;
    free(imp);
    return RSP_OK;
}

rsp_status rsp_import_commit(rsp_import *imp, uint64_t seq, rsp_error *err)
{
    if (!imp)
        return rsp__fail(err, RSP_EINVAL, "imp is NULL");
    return import_end(imp, RSP__XFER_COMMIT, seq, err);
}

rsp_status rsp_import_abort(rsp_import *imp, uint64_t seq, rsp_error *err)
{
    return imp ? import_end(imp, RSP__XFER_ABORT, seq, err) : RSP_OK;
}
