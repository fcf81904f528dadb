/*
 * The owner's handlers of EXPORT, EXPORT_CLOSE and IMPORT (of a request or
 * a checkpoint): the core's pins and reservations (core/xfer.h) for the
 * face's objects (xfer_impl.h), and the device work they need.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pool.h"
#include "util/error.h"
#include "xfer_impl.h"

/* A checkpoint export: one caller pin (drop, eviction and replacement
 * wait for the close), and its slot id. */
static rsp_status export_checkpoint(rsp_pool *p, rsp__xfer *x, rsp_error *e)
{
    rsp_checkpoint_info info;
    rsp_status st = rsp__core_checkpoint_query(p->core, x->key, &info, e);
    if (st == RSP_OK)
        st = rsp__core_checkpoint_pin(p->core, x->key, true, e);
    if (st != RSP_OK)
        return st;
    x->n = 1;
    x->holds[0] = (rsp__xfer_hold){.slot = (uint32_t)info.slot, .has_state = true};
    return RSP_OK;
}

rsp_status rsp__pool_on_export(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed; /* nothing fails after the pins */
    rsp__xfer *x = (rsp__xfer *)(uintptr_t)m->key;
    /* The done event first: it completes once everything submitted before
     * (the forwards of committed steps, their zeros and copies) ran, and
     * the pins below let nothing be queued on these slots after it. */
    rsp_status st = rsp__pool_submit(p, &x->done, &r->error);
    if (st != RSP_OK)
        return st;
    st = x->what == RSP_XFER_CHECKPOINT
             ? export_checkpoint(p, x, &r->error)
             : rsp__core_export(p->core, x->rid, x->labels, x->holds, &x->n, &r->error);
    x->open = st == RSP_OK;
    for (uint32_t i = 0; st == RSP_OK && x->what == RSP_XFER_REQUEST && i < x->n; i++)
        snprintf(x->names[i], RSP_NAME_MAX, "%s", rsp__core_label_name(p->core, x->holds[i].label));
    return st;
}

rsp_status rsp__pool_on_export_close(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    (void)changed;
    rsp__xfer *x = (rsp__xfer *)(uintptr_t)m->key;
    if (!x->open)
        return RSP_OK;
    x->open = false;
    if (x->what == RSP_XFER_CHECKPOINT)
        return rsp__core_checkpoint_pin(p->core, x->key, false, &r->error);
    rsp__core_export_close(p->core, x->holds, x->n);
    return RSP_OK;
}

/* A checkpoint import (what == RSP_XFER_CHECKPOINT): one tier slot,
 * holds[0], stored under x->key at the commit. Begin's done event
 * completes once the slot's ZERO ran: the face waits for it before the
 * transport writes. */
static rsp_status import_checkpoint(rsp_pool *p, rsp__xfer *x, rsp_reply *r, bool *changed)
{
    rsp_status st;
    switch ((rsp__xfer_op)x->op) {
    case RSP__XFER_BEGIN:
        st = rsp__core_import_ckpt_begin(p->core, x->key, &x->holds[0].slot, &p->work, &r->error);
        if (st != RSP_OK)
            return st;
        *changed = true;
        st = rsp__pool_submit(p, &x->done, &r->error);
        if (st != RSP_OK)
            return st;
        rsp__pool_ckpt_account(p); /* an eviction for room */
        x->n = 1;
        x->open = true;
        return RSP_OK;
    case RSP__XFER_COMMIT:
        if (!x->open)
            return rsp__fail(&r->error, RSP_EINVAL, "import commit: the import is not open");
        /* A key index node first: storing the key cannot fail after it. */
        st = rsp__pool_keys_reserve(p, 1, &r->error);
        if (st == RSP_OK)
            st = rsp__core_import_ckpt_commit(p->core, x->key, x->holds[0].slot, &r->error);
        if (st != RSP_OK)
            return st; /* still open: commit again or abort */
        rsp__pool_ckpt_account(p);
        x->open = false;
        return RSP_OK;
    case RSP__XFER_ABORT:
        if (!x->open)
            return RSP_OK;
        st = rsp__core_import_ckpt_abort(p->core, x->holds[0].slot, &p->work, &r->error);
        if (st != RSP_OK)
            return st;
        x->open = false;
        *changed = true;
        return rsp__pool_submit(p, NULL, &r->error);
    default: return rsp__fail(&r->error, RSP_EINVAL, "import: op %u", (unsigned)x->op);
    }
}

rsp_status rsp__pool_on_import(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed)
{
    rsp__xfer *x = (rsp__xfer *)(uintptr_t)m->key;
    if (x->what == RSP_XFER_CHECKPOINT)
        return import_checkpoint(p, x, r, changed);
    const rsp_xfer_header *h = x->header;
    char names[RSP_MAX_LABELS][RSP_NAME_MAX];
    rsp_status st = RSP_OK;
    switch ((rsp__xfer_op)x->op) {
    case RSP__XFER_BEGIN:
        /* The done event first: begin takes free slots whose zeros (and
         * the forwards those wait behind) may still be queued, and queues
         * no work of its own. The face waits for the event before the
         * transport writes, so nothing queued lands on the bytes after. */
        st = rsp__pool_submit(p, &x->done, &r->error);
        if (st != RSP_OK)
            return st;
        for (uint32_t i = 0; i < h->num_holdings; i++)
            memcpy(names[i], h->holdings[i].label, RSP_NAME_MAX);
        st = rsp__core_import_begin(p->core, x->rid, (const char(*)[RSP_NAME_MAX])names,
                                    h->num_holdings, x->holds, &x->created, &r->error);
        if (st == RSP_OK) {
            x->n = h->num_holdings;
            x->open = true;
        }
        return st;
    case RSP__XFER_COMMIT:
        if (!x->open)
            return rsp__fail(&r->error, RSP_EINVAL, "import commit: the import is not open");
        for (uint32_t i = 0; i < x->n; i++)
            x->holds[i].has_state = h->holdings[i].has_state;
        rsp__core_import_commit(p->core, x->rid, x->holds, x->n);
        x->open = false;
        return RSP_OK;
    case RSP__XFER_ABORT:
        if (!x->open)
            return RSP_OK;
        st = rsp__core_import_abort(p->core, x->rid, x->holds, x->n, x->created, &p->work,
                                    &r->error);
        if (st != RSP_OK)
            return st;
        x->open = false;
        *changed = true;
        return rsp__pool_submit(p, NULL, &r->error);
    default: return rsp__fail(&r->error, RSP_EINVAL, "import: op %u", (unsigned)x->op);
    }
}
