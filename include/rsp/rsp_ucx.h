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
 * the exporter waits meanwhile. A begin refused before anything was
 * reserved (an offer of several requests: RSP_ECAPACITY) answers the
 * exporter and leaves *imp NULL. Any other failure leaves *imp open: end
 * it to abort it (after a failed transfer the endpoint is closed, every
 * get cancelled, and the end answers no one). */
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

/* Batches: one offer, one flush and one answer for many requests, so the
 * round trip and the pool's calls of each request stop adding to its
 * bytes' time, and requests in neighbouring slots on both sides move as one
 * get per layer. Each request is still imported whole or not at all. */

/** Exporter: offer exps[0..n) (n <= 65536) in one message and wait for the
 * peer's one answer. statuses (may be NULL; written unless an argument is
 * bad) gets each request's outcome (RSP_OK: committed by the peer).
 * Returns RSP_OK when every request was committed; else the first refused
 * request's status, err naming it; or RSP_EDEVICE / RSP_ETIMEDOUT /
 * RSP_EINVAL (a malformed answer) when no answer came, and then every
 * status is that one: the peer commits only once every byte arrived, but
 * an answer lost after it committed cannot be told from a failed
 * transfer here, so the importer's own outcome is the one that counts.
 * The caller closes every export afterwards either way. O(n + extents)
 * plus the transfer. */
RSP_API rsp_status rsp_ucx_send_many(rsp_ucx *u, rsp_export *const *exps, uint32_t n,
                                     uint64_t timeout_ns, rsp_status *statuses, rsp_error *err);

/** Importer: receive one offer of up to cap requests and import request i
 * as rids[i]: begin every one, pull the bytes of those begun in one batch
 * of gets (runs contiguous on both sides merged), one flush, then commit
 * each (or abort it: refused, or the transfer failed) and answer the
 * exporter once. seqs: NULL, or 2 x cap numbers for an ordered pool
 * (request i's begin at 2i, its commit or abort at 2i + 1). *count
 * (optional) gets how many the offer carried; headers and statuses
 * (optional, cap entries) each request's header and outcome. An offer of
 * more than cap is refused whole (RSP_ECAPACITY to every request). Returns
 * RSP_OK when every request committed, else the first failure's status,
 * err naming it. After a transport failure none is committed and the
 * rsp_ucx needs a new connection. */
RSP_API rsp_status rsp_ucx_receive_many(rsp_ucx *u, const rsp_rid *rids, uint32_t cap,
                                        const uint64_t *seqs, uint64_t timeout_ns, uint32_t *count,
                                        rsp_xfer_header *headers, rsp_status *statuses,
                                        rsp_error *err);

#ifdef __cplusplus
}
#endif

#endif
