/*
 * The UCX transport's transfers (rsp_ucx.h, wire form in ucx.c): offers of
 * one request or many, the importer's begins, merged gets, one flush,
 * commits or aborts, and the answer.
 * SPDX-License-Identifier: Apache-2.0
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucx_impl.h"

/* --- offers and answers --------------------------------------------------- */

/* The most requests one offer carries: it bounds what a malformed offer
 * makes the importer allocate before it can tell. */
#define MAX_OFFER 65536u
#define MAX_OFFER_BYTES (1ull << 30)

/* One offer as the importer holds it: entry i is header h[i] with
 * count[i] extents from from[first[i]] on; to[] the same positions in this
 * pool once begun; imp[i] its open import; st[i] its outcome so far. */
typedef struct offer {
    uint32_t n, extents;
    rsp_xfer_header *h;
    uint32_t *count, *first;
    rsp_extent *from, *to;
    rsp_import **imp;
    rsp_status *st;
    uint32_t failed; /* the first entry that failed (n: none) */
    rsp_error why;   /* its message */
} offer;

static void offer_free(offer *o)
{
    free(o->h);
    free(o->count);
    free(o->first);
    free(o->from);
    free(o->to);
    free(o->imp);
    free(o->st);
    memset(o, 0, sizeof *o);
}

static void entry_fail(offer *o, uint32_t i, rsp_status st, const rsp_error *why)
{
    o->st[i] = st;
    if (o->failed == o->n || i < o->failed) {
        o->failed = i;
        o->why.status = st;
        snprintf(o->why.message, sizeof o->why.message, "%s", why ? why->message : "");
    }
}

/* A header on the wire is its fixed fields, the blocks and the holdings in
 * use: the rest of rsp_xfer_header is room (RSP_MAX_BLOCKS blocks,
 * RSP_MAX_LABELS holdings) that would make a batch's offer mostly zeros. */
#define HEAD_FIXED offsetof(rsp_xfer_header, blocks)

static size_t header_wire(const rsp_xfer_header *h)
{
    return HEAD_FIXED + (size_t)h->num_blocks * sizeof h->blocks[0] + sizeof h->num_holdings +
           (size_t)h->num_holdings * sizeof h->holdings[0];
}

static char *put(char *p, const void *v, size_t n)
{
    memcpy(p, v, n);
    return p + n;
}

/* The offer of exps[0..n): u32 magic, u32 n, u64 body bytes, then the
 * body: per entry its header (header_wire) and u32 extent count, then
 * every entry's extents in entry order. One buffer, one write. */
static rsp_status encode_offer(rsp_export *const *exps, uint32_t n, char **buf, size_t *len,
                               rsp_error *err)
{
    size_t body = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t c;
        (void)rsp_export_extents(exps[i], &c);
        body += header_wire(rsp_export_header(exps[i])) + sizeof c + (size_t)c * sizeof(rsp_extent);
    }
    char *b = malloc(16 + body);
    if (!b)
        return rsp__ucx_fail(err, RSP_ENOMEM,
                             "rsp_ucx: out of memory for an offer of %" PRIu32 " requests", n);
    uint32_t head[2] = {OFFER_MAGIC, n};
    uint64_t blen = body;
    char *p = put(put(b, head, sizeof head), &blen, sizeof blen);
    for (uint32_t i = 0; i < n; i++) {
        const rsp_xfer_header *h = rsp_export_header(exps[i]);
        uint32_t c;
        (void)rsp_export_extents(exps[i], &c);
        p = put(p, h, HEAD_FIXED);
        p = put(p, h->blocks, (size_t)h->num_blocks * sizeof h->blocks[0]);
        p = put(p, &h->num_holdings, sizeof h->num_holdings);
        p = put(p, h->holdings, (size_t)h->num_holdings * sizeof h->holdings[0]);
        p = put(p, &c, sizeof c);
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t c;
        const rsp_extent *x = rsp_export_extents(exps[i], &c);
        p = put(p, x, (size_t)c * sizeof *x);
    }
    *buf = b;
    *len = 16 + body;
    return RSP_OK;
}

/* Take n bytes at *p from a body ending at end, or say it is too short. */
static bool take(const char **p, const char *end, void *v, size_t n)
{
    if ((size_t)(end - *p) < n)
        return false;
    memcpy(v, *p, n);
    *p += n;
    return true;
}

/* The body's entries into o (its arrays allocated here). */
static rsp_status parse_offer(offer *o, const char *p, const char *end, rsp_error *err)
{
    const size_t n = o->n;
    o->h = calloc(n, sizeof *o->h);
    o->count = malloc(n * sizeof *o->count);
    o->first = malloc(n * sizeof *o->first);
    o->imp = calloc(n, sizeof *o->imp);
    o->st = calloc(n, sizeof *o->st);
    if (!o->h || !o->count || !o->first || !o->imp || !o->st)
        return rsp__ucx_fail(err, RSP_ENOMEM, "rsp_ucx: out of memory for an offer of %zu requests",
                             n);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        rsp_xfer_header *h = &o->h[i];
        bool ok = take(&p, end, h, HEAD_FIXED) && h->num_blocks <= RSP_MAX_BLOCKS &&
                  take(&p, end, h->blocks, (size_t)h->num_blocks * sizeof h->blocks[0]) &&
                  take(&p, end, &h->num_holdings, sizeof h->num_holdings) &&
                  h->num_holdings <= RSP_MAX_LABELS &&
                  take(&p, end, h->holdings, (size_t)h->num_holdings * sizeof h->holdings[0]) &&
                  take(&p, end, &o->count[i], sizeof o->count[i]);
        if (!ok)
            return rsp__ucx_fail(err, RSP_EINVAL,
                                 "rsp_ucx: the peer's offer is malformed (request %zu)", i);
        o->first[i] = (uint32_t)total;
        total += o->count[i];
    }
    if (total > UINT32_MAX || (size_t)(end - p) != total * sizeof(rsp_extent))
        return rsp__ucx_fail(err, RSP_EINVAL,
                             "rsp_ucx: the peer's offer is malformed (its extents)");
    o->extents = (uint32_t)total;
    o->from = malloc((total + 1) * sizeof *o->from);
    o->to = malloc((total + 1) * sizeof *o->to);
    if (!o->from || !o->to)
        return rsp__ucx_fail(err, RSP_ENOMEM, "rsp_ucx: out of memory for %" PRIu64 " extents",
                             total);
    memcpy(o->from, p, total * sizeof *o->from);
    return RSP_OK;
}

/* Read one offer into o. A failure leaves the stream unusable (the caller
 * closes the endpoint). */
static rsp_status read_offer(rsp_ucx *u, offer *o, uint64_t deadline, rsp_error *err)
{
    memset(o, 0, sizeof *o);
    uint32_t head[2];
    uint64_t body;
    rsp_status st =
        rsp__ucx_sock_wait_io(u->fd, head, sizeof head, false, deadline, NULL, u->spin_ns, err);
    if (st == RSP_OK)
        st = rsp__ucx_sock_io(u->fd, &body, sizeof body, false, deadline, err);
    if (st != RSP_OK)
        return st;
    if (head[0] != OFFER_MAGIC || head[1] == 0 || head[1] > MAX_OFFER || body > MAX_OFFER_BYTES)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx: the peer's offer is malformed");
    char *b = malloc(body ? body : 1);
    if (!b)
        return rsp__ucx_fail(err, RSP_ENOMEM,
                             "rsp_ucx: out of memory for an offer of %" PRIu64 " bytes", body);
    st = rsp__ucx_sock_io(u->fd, b, body, false, deadline, err);
    o->n = head[1];
    o->failed = o->n;
    if (st == RSP_OK)
        st = parse_offer(o, b, b + body, err);
    free(b);
    return st;
}

/* The answer: u32 magic, u32 n, i32 status[n], u32 the first failed entry
 * (n: none), its message (RSP_ERROR_MAX bytes). */
static rsp_status send_answer(rsp_ucx *u, const offer *o, uint64_t deadline)
{
    size_t len = 8 + (size_t)o->n * 4 + 4 + RSP_ERROR_MAX;
    char *b = calloc(1, len);
    if (!b)
        return RSP_ENOMEM; /* the exporter times out: the endpoint is closed below */
    uint32_t head[2] = {ANSWER_MAGIC, o->n};
    char *p = put(b, head, sizeof head);
    for (uint32_t i = 0; i < o->n; i++) {
        int32_t s = (int32_t)o->st[i];
        p = put(p, &s, sizeof s);
    }
    p = put(p, &o->failed, sizeof o->failed);
    if (o->failed < o->n)
        memcpy(p, o->why.message, RSP_ERROR_MAX);
    rsp_status st = rsp__ucx_sock_io(u->fd, b, len, true, deadline, NULL);
    free(b);
    return st;
}

/* The peer's answer to an offer of n: statuses[i] (may be NULL) each
 * request's, written only when the whole answer is well formed (then
 * *answered); returns the first refused one's status (err naming it). A
 * status outside rsp_status makes the answer malformed. */
static rsp_status read_answer(rsp_ucx *u, uint32_t n, uint64_t deadline, rsp_status *statuses,
                              bool *answered, rsp_error *err)
{
    uint32_t head[2];
    /* The peer gets our bytes while we wait for its answer; our worker
     * progresses meanwhile (emulated gets need it). */
    rsp_status st = rsp__ucx_sock_wait_io(u->fd, head, sizeof head, false, deadline, u->worker,
                                          u->spin_ns, err);
    if (st != RSP_OK)
        return st;
    if (head[0] != ANSWER_MAGIC || head[1] != n)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx: the peer's answer is malformed");
    size_t rest = (size_t)n * 4 + 4 + RSP_ERROR_MAX;
    char *a = malloc(rest);
    if (!a)
        return rsp__ucx_fail(err, RSP_ENOMEM, "rsp_ucx: out of memory for an answer");
    st = rsp__ucx_sock_io(u->fd, a, rest, false, deadline, err);
    uint32_t failed = n;
    if (st == RSP_OK)
        memcpy(&failed, a + (size_t)n * 4, 4);
    for (uint32_t i = 0; st == RSP_OK && i < n; i++) {
        int32_t s;
        memcpy(&s, a + (size_t)i * 4, 4);
        if (s < 0 || s >= (int32_t)RSP_STATUS_COUNT_ || (i == failed && s == RSP_OK))
            st = rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx: the peer's answer is malformed");
    }
    *answered = st == RSP_OK;
    for (uint32_t i = 0; *answered && statuses && i < n; i++) {
        int32_t s;
        memcpy(&s, a + (size_t)i * 4, 4);
        statuses[i] = (rsp_status)s;
    }
    if (st == RSP_OK && failed < n) {
        int32_t s;
        memcpy(&s, a + (size_t)failed * 4, 4);
        const char *msg = a + (size_t)n * 4 + 4;
        st = n == 1 ? rsp__ucx_fail(err, (rsp_status)s, "rsp_ucx: the peer refused: %.*s",
                                    RSP_ERROR_MAX - 32, msg)
                    : rsp__ucx_fail(err, (rsp_status)s,
                                    "rsp_ucx: the peer refused request %" PRIu32 " of %" PRIu32
                                    ": %.*s",
                                    failed, n, RSP_ERROR_MAX - 64, msg);
    }
    free(a);
    return st;
}

rsp_status rsp_ucx_send_many(rsp_ucx *u, rsp_export *const *exps, uint32_t n, uint64_t timeout_ns,
                             rsp_status *statuses, rsp_error *err)
{
    if (!u || !exps || !u->ep || n == 0 || n > MAX_OFFER)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx_send: %s",
                             !u       ? "u is NULL"
                             : !exps  ? "exps is NULL"
                             : !u->ep ? "not connected"
                                      : "n must be 1..65536");
    for (uint32_t i = 0; i < n; i++)
        if (!exps[i])
            return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx_send: exps[%" PRIu32 "] is NULL", i);
    uint64_t deadline = rsp__ucx_deadline_of(timeout_ns);
    char *buf = NULL;
    size_t len = 0;
    rsp_status st = encode_offer(exps, n, &buf, &len, err);
    if (st == RSP_OK) {
        st = rsp__ucx_sock_io(u->fd, buf, len, true, deadline, err);
        free(buf);
    }
    bool answered = false;
    if (st == RSP_OK)
        st = read_answer(u, n, deadline, statuses, &answered, err);
    for (uint32_t i = 0; !answered && statuses && i < n; i++)
        statuses[i] = st; /* no answer: this side knows only the send's outcome */
    return st;
}

rsp_status rsp_ucx_send(rsp_ucx *u, const rsp_export *exp, uint64_t timeout_ns, rsp_error *err)
{
    if (!exp)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx_send: exp is NULL");
    rsp_export *one = (rsp_export *)exp; /* only read: the batch takes an array of pointers */
    return rsp_ucx_send_many(u, &one, 1, timeout_ns, NULL, err);
}

/* --- the importer ----------------------------------------------------------- */

/* Every remote extent inside the region the peer registered, the pairs
 * of equal length. */
static rsp_status check_pairs(const rsp_ucx *u, const rsp_extent *from, const rsp_extent *to,
                              uint32_t n, rsp_error *err)
{
    for (uint32_t i = 0; i < n; i++) {
        const peer_region *r = from[i].region < u->num_peer ? &u->peer[from[i].region] : NULL;
        if (!r || from[i].offset > r->length || from[i].length > r->length - from[i].offset ||
            from[i].length != to[i].length)
            return rsp__ucx_fail(
                err, RSP_EINVAL,
                "rsp_ucx: the offer's extent %" PRIu32 " does not match this pool's", i);
    }
    return RSP_OK;
}

typedef struct pair {
    rsp_extent from, to;
} pair;

/* Get every pair, then wait for all of them (or the deadline, or the
 * endpoint's failure). The caller closes the endpoint after a failure,
 * which cancels what is still in flight. */
static rsp_status get_all(rsp_ucx *u, const pair *p, uint32_t n, uint64_t deadline, rsp_error *err)
{
    ucp_request_param_t rp = {.op_attr_mask = 0};
    for (uint32_t i = 0; i < n; i++) {
        const peer_region *r = &u->peer[p[i].from.region];
        void *dst = (char *)u->regions[p[i].to.region].base + p[i].to.offset;
        ucs_status_ptr_t req =
            ucp_get_nbx(u->ep, dst, p[i].to.length, r->base + p[i].from.offset, r->rkey, &rp);
        if (UCS_PTR_IS_ERR(req))
            return rsp__ucx_ucs_fail(err, "ucp_get_nbx", UCS_PTR_STATUS(req));
        if (req)
            ucp_request_free(req); /* completion is the flush's below */
    }
    ucs_status_ptr_t f = ucp_ep_flush_nbx(u->ep, &rp);
    if (UCS_PTR_IS_ERR(f))
        return rsp__ucx_ucs_fail(err, "ucp_ep_flush_nbx", UCS_PTR_STATUS(f));
    ucs_status_t s = UCS_OK;
    while (f && (s = ucp_request_check_status(f)) == UCS_INPROGRESS) {
        ucp_worker_progress(u->worker);
        if (u->ep_status != UCS_OK || rsp__ucx_now_ns() >= deadline)
            break;
    }
    if (f && s == UCS_INPROGRESS) {
        /* A flush cannot be cancelled, and over shared memory a dead peer
         * never completes it: the forced close cancels the gets and the
         * flush alike, and nothing progresses them after it. */
        ucs_status_t why = u->ep_status;
        rsp__ucx_close_ep(u);
        ucp_request_free(f); /* released by UCX once it completes */
        return why != UCS_OK ? rsp__ucx_ucs_fail(err, "the peer failed", why)
                             : rsp__ucx_fail(err, RSP_ETIMEDOUT, "rsp_ucx: the gets timed out");
    }
    if (f)
        ucp_request_free(f);
    if (s != UCS_OK || u->ep_status != UCS_OK)
        return rsp__ucx_ucs_fail(err, "the gets failed", s != UCS_OK ? s : u->ep_status);
    return RSP_OK;
}

/* Begin entry i's import as rid and find this pool's extents for it; a
 * refusal or a mismatch is entry i's outcome (an open import is aborted
 * by end_all). */
static void begin_one(rsp_ucx *u, offer *o, uint32_t i, rsp_rid rid, uint64_t seq)
{
    rsp_error why = {0};
    const rsp_xfer_header *h = &o->h[i];
    rsp_status st = rsp_import_begin(u->pool, h, rid, seq, &o->imp[i], &why);
    uint32_t m = 0, c = o->count[i];
    if (st == RSP_OK)
        st =
            rsp_import_extents(o->imp[i], h->world_size, h->rank, o->to + o->first[i], c, &m, &why);
    if (st == RSP_OK && m != c)
        st = rsp__ucx_fail(
            &why, RSP_EINVAL,
            "rsp_ucx: the offer lists %" PRIu32 " extents, this pool expects %" PRIu32, c, m);
    if (st == RSP_OK)
        st = check_pairs(u, o->from + o->first[i], o->to + o->first[i], c, &why);
    if (st != RSP_OK)
        entry_fail(o, i, st, &why);
}

static int pair_order(const void *a, const void *b)
{
    const rsp_extent *x = &((const pair *)a)->from, *y = &((const pair *)b)->from;
    if (x->region != y->region)
        return x->region < y->region ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The begun entries' extent pairs, in the exporter's address order, each
 * run that is contiguous on both sides merged into one: a batch of
 * requests in neighbouring slots moves as one get per layer. */
static uint32_t merged_pairs(const offer *o, pair *out)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->n; i++)
        for (uint32_t k = 0; o->st[i] == RSP_OK && k < o->count[i]; k++)
            out[n++] = (pair){o->from[o->first[i] + k], o->to[o->first[i] + k]};
    qsort(out, n, sizeof *out, pair_order);
    uint32_t m = 0;
    for (uint32_t k = 0; k < n; k++) {
        pair *last = m ? &out[m - 1] : NULL;
        if (last && last->from.region == out[k].from.region &&
            last->to.region == out[k].to.region &&
            last->from.offset + last->from.length == out[k].from.offset &&
            last->to.offset + last->to.length == out[k].to.offset) {
            last->from.length += out[k].from.length;
            last->to.length += out[k].to.length;
        } else {
            out[m++] = out[k];
        }
    }
    return m;
}

/* Begin every entry (rids[i], seqs: begin numbers at 2i) and pull the
 * bytes of those begun. A transport failure closes the endpoint (every get
 * cancelled) and is returned; the imports stay open for end_all. */
static rsp_status begin_and_pull(rsp_ucx *u, offer *o, const rsp_rid *rids, const uint64_t *seqs,
                                 uint64_t deadline, rsp_error *err)
{
    for (uint32_t i = 0; i < o->n; i++)
        begin_one(u, o, i, rids[i], seqs ? seqs[2 * i] : 0);
    pair *pairs = malloc(((size_t)o->extents + 1) * sizeof *pairs);
    if (!pairs) {
        rsp__ucx_close_ep(u);
        return rsp__ucx_fail(err, RSP_ENOMEM, "rsp_ucx: out of memory for %" PRIu32 " extents",
                             o->extents);
    }
    const uint32_t m = merged_pairs(o, pairs);
    rsp_status st = m ? get_all(u, pairs, m, deadline, err) : RSP_OK;
    free(pairs);
    if (st != RSP_OK)
        rsp__ucx_close_ep(u); /* cancels every get in flight before the slots are freed */
    return st;
}

/* Commit every entry still whole when the transfer succeeded (transport
 * RSP_OK), abort every other open import (seqs: end numbers at 2i + 1). */
static void end_all(offer *o, rsp_status transport, const rsp_error *why, const uint64_t *seqs)
{
    for (uint32_t i = 0; i < o->n; i++) {
        if (!o->imp[i])
            continue;
        const uint64_t seq = seqs ? seqs[2 * i + 1] : 0;
        rsp_error e = {0};
        rsp_status st = o->st[i];
        if (st == RSP_OK && transport != RSP_OK)
            entry_fail(o, i, st = transport, why);
        if (st == RSP_OK && (st = rsp_import_commit(o->imp[i], seq, &e)) != RSP_OK)
            entry_fail(o, i, st, &e);
        if (st != RSP_OK)
            (void)rsp_import_abort(o->imp[i], seq, NULL);
        o->imp[i] = NULL;
    }
}

/* Refuse a whole offer of more requests than the caller named. */
static void refuse_all(offer *o, uint32_t cap)
{
    rsp_error why;
    rsp__ucx_fail(&why, RSP_ECAPACITY,
                  "rsp_ucx: an offer of %" PRIu32 " requests; the importer takes %" PRIu32, o->n,
                  cap);
    for (uint32_t i = 0; i < o->n; i++)
        entry_fail(o, i, RSP_ECAPACITY, &why);
}

static rsp_status outcome(const offer *o, rsp_error *err)
{
    if (o->failed == o->n)
        return RSP_OK;
    if (err)
        *err = o->why;
    return o->why.status;
}

rsp_status rsp_ucx_receive_many(rsp_ucx *u, const rsp_rid *rids, uint32_t cap, const uint64_t *seqs,
                                uint64_t timeout_ns, uint32_t *count, rsp_xfer_header *headers,
                                rsp_status *statuses, rsp_error *err)
{
    if (count)
        *count = 0;
    if (!u || !u->ep || !rids || cap == 0)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx_receive: %s",
                             !u       ? "u is NULL"
                             : !u->ep ? "not connected"
                             : !rids  ? "rids is NULL"
                                      : "cap is 0");
    uint64_t deadline = rsp__ucx_deadline_of(timeout_ns);
    offer o;
    rsp_status st = read_offer(u, &o, deadline, err);
    if (st != RSP_OK) {
        offer_free(&o);
        return st;
    }
    if (o.n > cap) {
        refuse_all(&o, cap);
    } else {
        rsp_error why = {0};
        st = begin_and_pull(u, &o, rids, seqs, deadline, &why);
        end_all(&o, st, &why, seqs);
    }
    if (st == RSP_OK) /* after a failed pull the endpoint is gone: no answer */
        (void)send_answer(u, &o, deadline);
    const uint32_t k = o.n < cap ? o.n : cap;
    if (count)
        *count = o.n;
    for (uint32_t i = 0; i < k; i++) {
        if (headers)
            headers[i] = o.h[i];
        if (statuses)
            statuses[i] = o.st[i];
    }
    st = outcome(&o, err);
    offer_free(&o);
    return st;
}

rsp_status rsp_ucx_receive_begin(rsp_ucx *u, rsp_rid rid, uint64_t seq_begin, uint64_t timeout_ns,
                                 rsp_xfer_header *header, rsp_import **imp, rsp_error *err)
{
    if (imp)
        *imp = NULL;
    if (!u || !u->ep || !imp)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx_receive_begin: %s",
                             !u     ? "u is NULL"
                             : !imp ? "imp is NULL"
                                    : "not connected");
    uint64_t deadline = rsp__ucx_deadline_of(timeout_ns);
    offer o;
    rsp_status st = read_offer(u, &o, deadline, err);
    if (st == RSP_OK && header)
        *header = o.h[0];
    const uint64_t seqs[2] = {seq_begin, 0};
    rsp_error why = {0};
    if (st == RSP_OK && o.n > 1)
        refuse_all(&o, 1);
    else if (st == RSP_OK)
        st = begin_and_pull(u, &o, &rid, seqs, deadline, &why);
    rsp_import *one = o.imp ? o.imp[0] : NULL; /* none when the offer did not arrive */
    if (st == RSP_OK && !one) {
        /* Refused before anything was reserved: answer now. */
        (void)send_answer(u, &o, deadline);
        st = outcome(&o, &why);
    } else if (one) {
        /* Open, whole or not: the end commits or aborts it with its own
         * number and answers, unless the pull failed and closed the
         * endpoint. */
        *imp = one;
        u->answer_due = st == RSP_OK;
        st = st == RSP_OK ? outcome(&o, &why) : st;
    }
    if (st != RSP_OK && err)
        *err = why.status ? why : *err;
    offer_free(&o);
    return st;
}

rsp_status rsp_ucx_receive_end(rsp_ucx *u, rsp_import *imp, rsp_status verdict, uint64_t seq_end,
                               uint64_t timeout_ns, rsp_error *err)
{
    if (!u || !imp)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx_receive_end: %s is NULL", !u ? "u" : "imp");
    uint64_t deadline = rsp__ucx_deadline_of(timeout_ns);
    rsp_status st = RSP_OK;
    rsp_import *one[1] = {imp};
    offer o = {.n = 1, .imp = one, .st = &st, .failed = 1};
    rsp_error why = {0};
    if (verdict == RSP_OK && !u->answer_due)
        verdict =
            rsp__ucx_fail(&why, RSP_EDEVICE, "rsp_ucx: the transfer failed; the import is aborted");
    else if (verdict != RSP_OK)
        verdict = rsp__ucx_fail(&why, verdict, "rsp_ucx: the importer aborted the import (%s)",
                                rsp_strerror(verdict));
    const uint64_t seqs[2] = {0, seq_end};
    end_all(&o, verdict, &why, seqs);
    if (u->answer_due)
        (void)send_answer(u, &o, deadline);
    u->answer_due = false;
    return outcome(&o, err);
}

rsp_status rsp_ucx_receive(rsp_ucx *u, rsp_rid rid, uint64_t seq_begin, uint64_t seq_end,
                           uint64_t timeout_ns, rsp_xfer_header *header, rsp_error *err)
{
    rsp_import *imp = NULL;
    uint64_t deadline = rsp__ucx_deadline_of(timeout_ns);
    rsp_status st = rsp_ucx_receive_begin(u, rid, seq_begin, timeout_ns, header, &imp, err);
    if (imp) {
        uint64_t now = rsp__ucx_now_ns();
        /* A failed pull keeps its own message: the end only aborts. */
        rsp_status end = rsp_ucx_receive_end(
            u, imp, st, seq_end, deadline > now ? deadline - now : 0, st == RSP_OK ? err : NULL);
        st = st == RSP_OK ? end : st;
    }
    return st;
}
