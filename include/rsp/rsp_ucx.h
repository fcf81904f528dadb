/*
 * rsp_ucx: moving an export from a pool in one process to a pool in
 * another (or on another machine) over UCX (docs/transfer.md). A separate
 * library, librsp_ucx, built when UCX is found. SPDX-License-Identifier:
 * Apache-2.0
 *
 * One rsp_ucx is one pool's side of one connection: a UCP context and
 * worker, the pool's regions registered once (rsp_pool_regions), and,
 * after rsp_ucx_connect, an endpoint to the peer and the peer's regions
 * and remote keys. The importer pulls: it reads the exporter's offer
 * (header and extents) from the socket, begins the import, gets every
 * extent one-sidedly (ucp_get_nbx), waits for completion, commits, and
 * answers the exporter; on any failure or timeout it closes the endpoint
 * (cancelling every get in flight) before it aborts the import, so no
 * byte lands in a freed slot. Not thread-safe: one thread per rsp_ucx.
 */
#ifndef RSP_UCX_H
#define RSP_UCX_H

#include <rsp/rsp.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rsp_ucx rsp_ucx;

/** A UCP context and worker for pool, its regions registered. The pool
 * must outlive it. RSP_EDEVICE naming the UCX error; RSP_ENOMEM. */
RSP_API rsp_status rsp_ucx_create(rsp_pool *pool, rsp_ucx **out, rsp_error *err);
/** Close the endpoint, unregister, free. NULL: a no-op. */
RSP_API void rsp_ucx_destroy(rsp_ucx *u);

/** Exchange worker addresses, regions and remote keys with the peer over
 * fd (a connected stream socket both sides call this on), and open the
 * endpoint. RSP_ETIMEDOUT, RSP_EDEVICE (UCX or the socket failed). */
RSP_API rsp_status rsp_ucx_connect(rsp_ucx *u, int fd, uint64_t timeout_ns, rsp_error *err);

/** Exporter: offer exp to the peer and wait for its answer: RSP_OK once
 * the peer committed its import; its status if it refused or aborted;
 * RSP_EDEVICE if the peer went away; RSP_ETIMEDOUT. The caller closes
 * exp afterwards either way. */
RSP_API rsp_status rsp_ucx_send(rsp_ucx *u, const rsp_export *exp, uint64_t timeout_ns,
                                rsp_error *err);

/** Importer: receive one offer and import it as rid (seq_begin, seq_end:
 * the begin's and the commit's or abort's numbers in an ordered pool,
 * else 0; rsp_ucx_receive_begin, then _end with RSP_OK): all of it
 * committed (RSP_OK) or nothing (the import aborted,
 * the status says why; after a transport failure the endpoint is closed
 * and the rsp_ucx needs a new connection). header (optional) gets the
 * offer's header (its tag, the exporter's generations). */
RSP_API rsp_status rsp_ucx_receive(rsp_ucx *u, rsp_rid rid, uint64_t seq_begin, uint64_t seq_end,
                                   uint64_t timeout_ns, rsp_xfer_header *header, rsp_error *err);

/** Importer, first half: receive one offer, begin its import as rid and
 * pull every byte into it; *imp gets the open import, which the caller may
 * read (rsp_import_extents) before it ends it with rsp_ucx_receive_end;
 * the exporter waits meanwhile. A refused begin answers the exporter and
 * leaves *imp NULL. A failed transfer closes the endpoint (every get
 * cancelled) and leaves *imp open: end it to abort it. */
RSP_API rsp_status rsp_ucx_receive_begin(rsp_ucx *u, rsp_rid rid, uint64_t seq_begin,
                                         uint64_t timeout_ns, rsp_xfer_header *header,
                                         rsp_import **imp, rsp_error *err);
/** Importer, second half: commit imp when verdict is RSP_OK and the pull
 * succeeded, else abort it (its slots zeroed and freed), and answer the
 * exporter with the outcome (its rsp_ucx_send returns verdict for an abort
 * the caller chose). Returns RSP_OK once committed, else the status the
 * exporter got. imp is freed either way. */
RSP_API rsp_status rsp_ucx_receive_end(rsp_ucx *u, rsp_import *imp, rsp_status verdict,
                                       uint64_t seq_end, uint64_t timeout_ns, rsp_error *err);

#ifdef __cplusplus
}
#endif

#endif
