/*
 * Export and import of holdings (docs/design.md "Export and import"): the
 * core's side. An export pins the slots of a request's holdings
 * (rsp__slot.xpins); an import's begin gives a request fresh slots marked
 * importing, its commit makes them ordinary holdings, its abort frees
 * them. The regions, header and extents are the face's (src/xfer*.c);
 * the core hands it slots. SPDX-License-Identifier: Apache-2.0
 *
 * Single-threaded like core.h: the owner thread (or a test) is the only
 * caller.
 */
#ifndef RSP_CORE_XFER_H
#define RSP_CORE_XFER_H

#include <stdbool.h>
#include <stdint.h>

#include <rsp/rsp.h>

#include "core.h"

/* One holding of an export or import: its label (this pool's id), slot,
 * has_state and generation. */
typedef struct rsp__xfer_hold {
    rsp_label_id label;
    uint32_t slot;
    bool has_state;
    uint64_t generation;
} rsp__xfer_hold;

/*
 * Pin rid's holdings of the labels in mask (0: every holding), in label
 * insertion order, into out[RSP_MAX_LABELS] (*n of them). RSP_ENOREQ (no
 * such rid, or it lacks a label of mask), RSP_EORDER (swapped out),
 * RSP_EPINNED (being imported), RSP_ECAPACITY (65535 exports of one
 * slot), RSP_EAGAIN (a step in flight addresses or forks into one: the
 * message names it; the face waits for its commit and asks again).
 * Nothing changed on failure. O(holdings).
 */
rsp_status rsp__core_export(rsp__core *c, rsp_rid rid, uint64_t mask, rsp__xfer_hold *out,
                            uint32_t *n, rsp_error *err);
/* Unpin what rsp__core_export pinned (the same list). Cannot fail. O(n). */
void rsp__core_export_close(rsp__core *c, const rsp__xfer_hold *holds, uint32_t n);

/*
 * Give rid (created if absent: *created) a fresh slot for each label
 * named in names[n] (label names, looked up, never interned), marked
 * importing, into out[n]. RSP_ENOLABEL (a name this pool has not
 * interned), RSP_EINVAL (a label twice, or rid holds one already),
 * RSP_EORDER (rid swapped out), RSP_ECAPACITY (fewer free slots than n),
 * RSP_ENOMEM; nothing changed on failure. O(n x labels).
 */
rsp_status rsp__core_import_begin(rsp__core *c, rsp_rid rid, const char (*names)[RSP_NAME_MAX],
                                  uint32_t n, rsp__xfer_hold *out, bool *created, rsp_error *err);
/* The import's holds become ordinary: has_state as holds[i].has_state, a
 * new generation each. They were begun and neither committed nor
 * aborted. Cannot fail. O(n x holdings). */
void rsp__core_import_commit(rsp__core *c, rsp_rid rid, const rsp__xfer_hold *holds, uint32_t n);
/* Zero and free the import's slots (ZERO ops into w), and the request if
 * begin created it and it holds nothing else. RSP_ENOMEM (work room),
 * nothing changed. O(n x holdings). */
rsp_status rsp__core_import_abort(rsp__core *c, rsp_rid rid, const rsp__xfer_hold *holds,
                                  uint32_t n, bool created, rsp__work *w, rsp_error *err);

/*
 * A checkpoint import's begin: a zeroed slot of the device tier (the host
 * tier when the device tier has none) into *slot, in no record (nothing
 * finds, evicts or frees it), by a free one or the tier's victim evicted
 * (reported). RSP_EINVAL (no checkpoint slots), RSP_EPINNED (key stored
 * and pinned), RSP_ECAPACITY (every checkpoint of the tier pinned),
 * RSP_ENOMEM; nothing changed on failure. O(records of the tier).
 */
rsp_status rsp__core_import_ckpt_begin(rsp__core *c, uint64_t key, uint32_t *slot, rsp__work *w,
                                       rsp_error *err);
/* Store key on the begun slot (ckpt.h rsp__ck_store: an unpinned
 * checkpoint under key is replaced). RSP_EPINNED (key stored and pinned
 * now), RSP_ENOMEM; nothing changed on failure. O(1). */
rsp_status rsp__core_import_ckpt_commit(rsp__core *c, uint64_t key, uint32_t slot, rsp_error *err);
/* Zero the begun slot (a ZERO into w) and give it back to its tier.
 * RSP_ENOMEM (work room), nothing changed. O(1). */
rsp_status rsp__core_import_ckpt_abort(rsp__core *c, uint32_t slot, rsp__work *w, rsp_error *err);

#endif
