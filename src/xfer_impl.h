/*
 * Internal: the export and import objects (rsp_export, rsp_import) and
 * what the face and the owner's handlers (pool_xfer.c) share about them.
 * SPDX-License-Identifier: Apache-2.0
 *
 * An object is the face's: rsp_export_open / rsp_import_begin allocate it,
 * fill what the owner needs (rid, labels, names) and post it as
 * rsp_msg.key (rsp_msg does not grow: docs/abi.md); the owner's handler writes its answer (the
 * holdings, a done event) into it before answering the ticket, which orders those writes before the
 * waiter's reads (T1/T2, docs/ordering.md). After that the face reads it alone until the next
 * message naming it.
 */
#ifndef RSP_XFER_IMPL_H
#define RSP_XFER_IMPL_H

#include <rsp/rsp.h>

#include "core/xfer.h"

/* The tag rsp_post checks before the owner follows rsp_msg.key. */
#define RSP__XFER_TAG 0x7273702d78666572ull /* "rsp-xfer" */

typedef enum rsp__xfer_op {
    RSP__XFER_EXPORT = 0, /* pin (owner) */
    RSP__XFER_CLOSE,      /* unpin */
    RSP__XFER_BEGIN,      /* import: reserve */
    RSP__XFER_COMMIT,
    RSP__XFER_ABORT,
} rsp__xfer_op;

/* The part of an export or import the owner reads and writes. */
typedef struct rsp__xfer {
    uint64_t tag; /* RSP__XFER_TAG while the object is live */
    rsp_pool *pool;
    uint32_t op; /* rsp__xfer_op: what the next message does */
    rsp_xfer_what what;
    rsp_rid rid;
    uint64_t key;
    uint64_t labels; /* export: the mask asked for */
    /* Export: pinned holdings (a checkpoint: one, label 0, its slot id).
     * Import: the reserved ones, in header order (a checkpoint: one, the
     * tier slot stored under key at the commit). */
    uint32_t n;
    rsp__xfer_hold holds[RSP_MAX_LABELS];
    char names[RSP_MAX_LABELS][RSP_NAME_MAX]; /* export: the holdings' label names */
    bool created;                             /* import: begin created the request */
    bool open;                                /* the owner holds pins or slots for it */
    /* Export: completes once the bytes are final; a checkpoint import's
     * begin: once its slot's zeros are written. */
    rsp_event done;
    const rsp_xfer_header *header; /* import begin: the header's names */
} rsp__xfer;

struct rsp_export {
    rsp__xfer x;
    rsp_xfer_header h;
    rsp_extent *ext;
    uint32_t num_ext;
};

struct rsp_import {
    rsp__xfer x;
    rsp_xfer_header h;
};

/* Fill the layout part of h (format, num_layers, blocks, fingerprint,
 * world size and rank) from lay. Any thread. O(blocks). */
void rsp__xfer_describe(const rsp__layout *lay, rsp_xfer_header *h);
/* h's layout against lay: RSP_EINVAL naming the first difference. */
rsp_status rsp__xfer_check_layout(const rsp__layout *lay, const rsp_xfer_header *h, rsp_error *err);
/* The extents of slot ids holds[0..n) in lay's regions for the share that
 * source rank (sw, sr) gives target rank (tw, tr); this pool is the source
 * when `source`, else the target. Writes up to cap into out (NULL: count
 * only); returns how many there are. O(extents). */
uint64_t rsp__xfer_extents(const rsp__layout *lay, const uint32_t *slots, uint32_t n, uint32_t sw,
                           uint32_t sr, uint32_t tw, uint32_t tr, bool source, rsp_extent *out,
                           uint64_t cap);

/* The owner's handlers of EXPORT, EXPORT_CLOSE and IMPORT (pool_xfer.c). */
rsp_status rsp__pool_on_export(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed);
rsp_status rsp__pool_on_export_close(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed);
rsp_status rsp__pool_on_import(rsp_pool *p, const rsp_msg *m, rsp_reply *r, bool *changed);

#endif
