/*
 * The UCX transport (rsp_ucx.h): a UCP worker per pool side, regions
 * registered once, an address and rkey exchange over a socket, one-sided
 * gets by the importer, completion, then import commit; abort on any
 * failure or timeout. Only the public rsp API is used.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The socket carries, in each direction, framed little messages (this
 * host's byte order: both ends run this library on the same ABI):
 *   hello   u32 magic, u32 address bytes, the worker address,
 *           u32 regions, per region: u64 base, u64 length, u32 rkey
 *           bytes, the packed rkey
 *   offer   u32 magic, the rsp_xfer_header, u32 n, rsp_extent[n]
 *   answer  u32 magic, i32 status, the rsp_error message (RSP_ERROR_MAX)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <rsp/rsp_ucx.h>

#define HELLO_MAGIC 0x72737068u  /* "rsph" */
#define OFFER_MAGIC 0x7273706fu  /* "rspo" */
#define ANSWER_MAGIC 0x72737061u /* "rspa" */
#define MAX_REGIONS (3u * RSP_MAX_BLOCKS)
#define MAX_RKEY 4096u
#define MAX_ADDR 65536u

typedef struct peer_region {
    uint64_t base, length;
    ucp_rkey_h rkey;
} peer_region;

struct rsp_ucx {
    rsp_pool *pool;
    ucp_context_h ctx;
    ucp_worker_h worker;
    uint32_t num_regions;
    rsp_region regions[MAX_REGIONS];
    ucp_mem_h memh[MAX_REGIONS];
    ucp_ep_h ep;
    int fd;
    ucs_status_t ep_status; /* the endpoint's error handler's last status */
    uint32_t num_peer;
    peer_region peer[MAX_REGIONS];
};

static rsp_status fail(rsp_error *err, rsp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static rsp_status fail(rsp_error *err, rsp_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = st;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return st;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t deadline_of(uint64_t timeout_ns)
{
    uint64_t n = now_ns();
    return timeout_ns > UINT64_MAX - n ? UINT64_MAX : n + timeout_ns;
}

/* Move all of buf through fd by the deadline (poll, then read or write).
 * worker (optional) is progressed while waiting: a peer's gets over a
 * transport without one-sided reads (TCP) are served by our progress. */
static rsp_status sock_wait_io(int fd, void *buf, size_t n, bool out, uint64_t deadline,
                               ucp_worker_h worker, rsp_error *err)
{
    char *p = buf;
    while (n) {
        uint64_t now = now_ns();
        if (now >= deadline)
            return fail(err, RSP_ETIMEDOUT, "rsp_ucx: the socket timed out");
        uint64_t left_ms = (deadline - now) / 1000000u + 1;
        /* With a worker: progress until it has nothing to do, then sleep on
         * the socket and the worker's event fd alike (ucp_worker_arm). */
        int efd = -1;
        if (worker) {
            while (ucp_worker_progress(worker))
                ;
            if (ucp_worker_get_efd(worker, &efd) != UCS_OK || ucp_worker_arm(worker) != UCS_OK)
                efd = -2; /* busy or no wake-up: look again at once */
        }
        struct pollfd pfd[2] = {{.fd = fd, .events = out ? POLLOUT : POLLIN},
                                {.fd = efd, .events = POLLIN}};
        int r = poll(pfd, efd >= 0 ? 2 : 1, efd == -2 ? 0 : left_ms > 1000 ? 1000 : (int)left_ms);
        if (r < 0 && errno != EINTR)
            return fail(err, RSP_EDEVICE, "rsp_ucx: poll: %s", strerror(errno));
        if (r <= 0 || !(pfd[0].revents & (out ? POLLOUT : POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t k = out ? write(fd, p, n) : read(fd, p, n);
        if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
            return fail(err, RSP_EDEVICE, "rsp_ucx: the peer closed the connection%s%s",
                        k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
        if (k > 0)
            p += k, n -= (size_t)k;
    }
    return RSP_OK;
}

static rsp_status sock_io(int fd, void *buf, size_t n, bool out, uint64_t deadline, rsp_error *err)
{
    return sock_wait_io(fd, buf, n, out, deadline, NULL, err);
}

static rsp_status ucs_fail(rsp_error *err, const char *what, ucs_status_t s)
{
    return fail(err, RSP_EDEVICE, "rsp_ucx: %s: %s", what, ucs_status_string(s));
}

static void unregister(rsp_ucx *u)
{
    for (uint32_t i = 0; i < u->num_regions; i++)
        if (u->memh[i])
            ucp_mem_unmap(u->ctx, u->memh[i]);
}

static rsp_status register_regions(rsp_ucx *u, rsp_error *err)
{
    rsp_status st = rsp_pool_regions(u->pool, u->regions, MAX_REGIONS, &u->num_regions, err);
    if (st != RSP_OK)
        return st;
    for (uint32_t i = 0; i < u->num_regions; i++) {
        ucp_mem_map_params_t mp = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            .address = u->regions[i].base,
            .length = u->regions[i].length,
        };
        ucs_status_t s = ucp_mem_map(u->ctx, &mp, &u->memh[i]);
        if (s != UCS_OK)
            return ucs_fail(err, "ucp_mem_map", s);
    }
    return RSP_OK;
}

rsp_status rsp_ucx_create(rsp_pool *pool, rsp_ucx **out, rsp_error *err)
{
    if (!pool || !out)
        return fail(err, RSP_EINVAL, "rsp_ucx_create: %s is NULL", !pool ? "pool" : "out");
    rsp_ucx *u = calloc(1, sizeof *u);
    if (!u)
        return fail(err, RSP_ENOMEM, "rsp_ucx_create: out of memory");
    u->pool = pool;
    u->fd = -1;
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                       .features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP};
    ucs_status_t s = ucp_init(&pp, NULL, &u->ctx);
    rsp_status st = s == UCS_OK ? RSP_OK : ucs_fail(err, "ucp_init", s);
    if (st == RSP_OK) {
        ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                  .thread_mode = UCS_THREAD_MODE_SINGLE};
        s = ucp_worker_create(u->ctx, &wp, &u->worker);
        st = s == UCS_OK ? RSP_OK : ucs_fail(err, "ucp_worker_create", s);
    }
    if (st == RSP_OK)
        st = register_regions(u, err);
    if (st != RSP_OK) {
        rsp_ucx_destroy(u);
        return st;
    }
    *out = u;
    return RSP_OK;
}

/* Close the endpoint (forced: every operation in flight is cancelled and
 * completes before this returns) and forget the peer's keys. */
static void close_ep(rsp_ucx *u)
{
    for (uint32_t i = 0; i < u->num_peer; i++)
        ucp_rkey_destroy(u->peer[i].rkey);
    u->num_peer = 0;
    if (!u->ep)
        return;
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                              .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *req = ucp_ep_close_nbx(u->ep, &rp);
    if (UCS_PTR_IS_PTR(req)) {
        while (ucp_request_check_status(req) == UCS_INPROGRESS)
            ucp_worker_progress(u->worker);
        ucp_request_free(req);
    }
    u->ep = NULL;
}

void rsp_ucx_destroy(rsp_ucx *u)
{
    if (!u)
        return;
    if (u->worker)
        close_ep(u);
    if (u->ctx)
        unregister(u);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->ctx)
        ucp_cleanup(u->ctx);
    free(u);
}

/* Our hello: the worker address and every region's base, length, rkey. */
static rsp_status send_hello(rsp_ucx *u, uint64_t deadline, rsp_error *err)
{
    ucp_address_t *addr;
    size_t alen;
    ucs_status_t s = ucp_worker_get_address(u->worker, &addr, &alen);
    if (s != UCS_OK)
        return ucs_fail(err, "ucp_worker_get_address", s);
    uint32_t head[2] = {HELLO_MAGIC, (uint32_t)alen};
    rsp_status st = sock_io(u->fd, head, sizeof head, true, deadline, err);
    if (st == RSP_OK)
        st = sock_io(u->fd, addr, alen, true, deadline, err);
    ucp_worker_release_address(u->worker, addr);
    if (st == RSP_OK)
        st = sock_io(u->fd, &u->num_regions, sizeof u->num_regions, true, deadline, err);
    for (uint32_t i = 0; st == RSP_OK && i < u->num_regions; i++) {
        void *rk;
        size_t rlen;
        s = ucp_rkey_pack(u->ctx, u->memh[i], &rk, &rlen);
        if (s != UCS_OK)
            return ucs_fail(err, "ucp_rkey_pack", s);
        uint64_t r[2] = {(uint64_t)(uintptr_t)u->regions[i].base, u->regions[i].length};
        uint32_t n = (uint32_t)rlen;
        st = sock_io(u->fd, r, sizeof r, true, deadline, err);
        if (st == RSP_OK)
            st = sock_io(u->fd, &n, sizeof n, true, deadline, err);
        if (st == RSP_OK)
            st = sock_io(u->fd, rk, rlen, true, deadline, err);
        ucp_rkey_buffer_release(rk);
    }
    return st;
}

static void on_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    ((rsp_ucx *)arg)->ep_status = status;
}

/* The peer's hello: open the endpoint to its address, unpack its rkeys. */
static rsp_status read_hello(rsp_ucx *u, uint64_t deadline, rsp_error *err)
{
    uint32_t head[2];
    rsp_status st = sock_io(u->fd, head, sizeof head, false, deadline, err);
    if (st == RSP_OK && (head[0] != HELLO_MAGIC || head[1] == 0 || head[1] > MAX_ADDR))
        return fail(err, RSP_EINVAL, "rsp_ucx: the peer's hello is malformed");
    void *addr = st == RSP_OK ? malloc(head[1]) : NULL;
    if (st == RSP_OK && !addr)
        return fail(err, RSP_ENOMEM, "rsp_ucx: out of memory");
    if (st == RSP_OK)
        st = sock_io(u->fd, addr, head[1], false, deadline, err);
    if (st == RSP_OK) {
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
            .address = addr,
            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
            .err_handler = {.cb = on_ep_error, .arg = u},
        };
        u->ep_status = UCS_OK;
        ucs_status_t s = ucp_ep_create(u->worker, &ep, &u->ep);
        if (s != UCS_OK) {
            /* Shared memory transports (sysv, posix, cma) cannot detect a
             * dead peer: without that mode a failure shows as a timeout. */
            ep.field_mask &=
                ~(uint64_t)(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
            s = ucp_ep_create(u->worker, &ep, &u->ep);
        }
        if (s != UCS_OK)
            st = ucs_fail(err, "ucp_ep_create", s);
    }
    free(addr);
    uint32_t n = 0;
    if (st == RSP_OK)
        st = sock_io(u->fd, &n, sizeof n, false, deadline, err);
    if (st == RSP_OK && n > MAX_REGIONS)
        return fail(err, RSP_EINVAL, "rsp_ucx: the peer lists %" PRIu32 " regions", n);
    for (uint32_t i = 0; st == RSP_OK && i < n; i++) {
        uint64_t r[2];
        uint32_t rlen;
        char rk[MAX_RKEY];
        st = sock_io(u->fd, r, sizeof r, false, deadline, err);
        if (st == RSP_OK)
            st = sock_io(u->fd, &rlen, sizeof rlen, false, deadline, err);
        if (st == RSP_OK && rlen > MAX_RKEY)
            return fail(err, RSP_EINVAL, "rsp_ucx: a remote key of %" PRIu32 " bytes", rlen);
        if (st == RSP_OK)
            st = sock_io(u->fd, rk, rlen, false, deadline, err);
        ucs_status_t s = st == RSP_OK ? ucp_ep_rkey_unpack(u->ep, rk, &u->peer[i].rkey) : UCS_OK;
        if (s != UCS_OK)
            return ucs_fail(err, "ucp_ep_rkey_unpack", s);
        if (st == RSP_OK) {
            u->peer[i].base = r[0], u->peer[i].length = r[1];
            u->num_peer = i + 1;
        }
    }
    return st;
}

rsp_status rsp_ucx_connect(rsp_ucx *u, int fd, uint64_t timeout_ns, rsp_error *err)
{
    if (!u || fd < 0)
        return fail(err, RSP_EINVAL, "rsp_ucx_connect: %s", !u ? "u is NULL" : "fd < 0");
    close_ep(u);
    u->fd = fd;
    uint64_t deadline = deadline_of(timeout_ns);
    /* Both sides send first: the socket buffers a hello (a few KiB). */
    rsp_status st = send_hello(u, deadline, err);
    if (st == RSP_OK)
        st = read_hello(u, deadline, err);
    if (st != RSP_OK)
        close_ep(u);
    return st;
}

static rsp_status send_answer(rsp_ucx *u, rsp_status st, const rsp_error *why, uint64_t deadline)
{
    struct {
        uint32_t magic;
        int32_t status;
        char message[RSP_ERROR_MAX];
    } a = {ANSWER_MAGIC, (int32_t)st, {0}};
    if (why && st != RSP_OK)
        memcpy(a.message, why->message, sizeof a.message);
    return sock_io(u->fd, &a, sizeof a, true, deadline, NULL);
}

rsp_status rsp_ucx_send(rsp_ucx *u, const rsp_export *exp, uint64_t timeout_ns, rsp_error *err)
{
    if (!u || !exp || !u->ep)
        return fail(err, RSP_EINVAL, "rsp_ucx_send: %s",
                    !u     ? "u is NULL"
                    : !exp ? "exp is NULL"
                           : "not connected");
    uint64_t deadline = deadline_of(timeout_ns);
    uint32_t n, magic = OFFER_MAGIC;
    const rsp_extent *x = rsp_export_extents(exp, &n);
    rsp_status st = sock_io(u->fd, &magic, sizeof magic, true, deadline, err);
    if (st == RSP_OK)
        st = sock_io(u->fd, (void *)rsp_export_header(exp), sizeof(rsp_xfer_header), true, deadline,
                     err);
    if (st == RSP_OK)
        st = sock_io(u->fd, &n, sizeof n, true, deadline, err);
    if (st == RSP_OK)
        st = sock_io(u->fd, (void *)x, (size_t)n * sizeof *x, true, deadline, err);
    struct {
        uint32_t magic;
        int32_t status;
        char message[RSP_ERROR_MAX];
    } a;
    /* The peer gets our bytes while we wait for its answer; our worker
     * progresses meanwhile (emulated gets need it). */
    if (st == RSP_OK)
        st = sock_wait_io(u->fd, &a, sizeof a, false, deadline, u->worker, err);
    if (st != RSP_OK)
        return st;
    if (a.magic != ANSWER_MAGIC)
        return fail(err, RSP_EINVAL, "rsp_ucx: the peer's answer is malformed");
    if (a.status != RSP_OK)
        return fail(err, (rsp_status)a.status, "rsp_ucx: the peer refused: %.*s",
                    RSP_ERROR_MAX - 32, a.message);
    return RSP_OK;
}

/* The exporter's offer: its header and extents (malloc'd into *x). */
static rsp_status read_offer(rsp_ucx *u, rsp_xfer_header *h, rsp_extent **x, uint32_t *n,
                             uint64_t deadline, rsp_error *err)
{
    uint32_t magic;
    rsp_status st = sock_io(u->fd, &magic, sizeof magic, false, deadline, err);
    if (st == RSP_OK && magic != OFFER_MAGIC)
        return fail(err, RSP_EINVAL, "rsp_ucx: the peer's offer is malformed");
    if (st == RSP_OK)
        st = sock_io(u->fd, h, sizeof *h, false, deadline, err);
    if (st == RSP_OK)
        st = sock_io(u->fd, n, sizeof *n, false, deadline, err);
    if (st != RSP_OK)
        return st;
    if (!(*x = malloc(((size_t)*n + 1) * sizeof **x)))
        return fail(err, RSP_ENOMEM, "rsp_ucx: out of memory for %" PRIu32 " extents", *n);
    return sock_io(u->fd, *x, (size_t)*n * sizeof **x, false, deadline, err);
}

/* Every remote extent inside the region the peer registered, the pairs
 * of equal length. */
static rsp_status check_pairs(const rsp_ucx *u, const rsp_extent *from, const rsp_extent *to,
                              uint32_t n, rsp_error *err)
{
    for (uint32_t i = 0; i < n; i++) {
        const peer_region *r = from[i].region < u->num_peer ? &u->peer[from[i].region] : NULL;
        if (!r || from[i].offset > r->length || from[i].length > r->length - from[i].offset ||
            from[i].length != to[i].length)
            return fail(err, RSP_EINVAL,
                        "rsp_ucx: the offer's extent %" PRIu32 " does not match this pool's", i);
    }
    return RSP_OK;
}

/* Get every pair, then wait for all of them (or the deadline, or the
 * endpoint's failure). The caller closes the endpoint after a failure,
 * which cancels what is still in flight. */
static rsp_status get_all(rsp_ucx *u, const rsp_extent *from, const rsp_extent *to, uint32_t n,
                          uint64_t deadline, rsp_error *err)
{
    ucp_request_param_t rp = {.op_attr_mask = 0};
    for (uint32_t i = 0; i < n; i++) {
        const peer_region *r = &u->peer[from[i].region];
        void *dst = (char *)u->regions[to[i].region].base + to[i].offset;
        ucs_status_ptr_t req =
            ucp_get_nbx(u->ep, dst, to[i].length, r->base + from[i].offset, r->rkey, &rp);
        if (UCS_PTR_IS_ERR(req))
            return ucs_fail(err, "ucp_get_nbx", UCS_PTR_STATUS(req));
        if (req)
            ucp_request_free(req); /* completion is the flush's below */
    }
    ucs_status_ptr_t f = ucp_ep_flush_nbx(u->ep, &rp);
    if (UCS_PTR_IS_ERR(f))
        return ucs_fail(err, "ucp_ep_flush_nbx", UCS_PTR_STATUS(f));
    ucs_status_t s = UCS_OK;
    while (f && (s = ucp_request_check_status(f)) == UCS_INPROGRESS) {
        ucp_worker_progress(u->worker);
        if (u->ep_status != UCS_OK || now_ns() >= deadline)
            break;
    }
    if (f && s == UCS_INPROGRESS) {
        /* A flush cannot be cancelled (ucp_request_cancel serves receives):
         * waiting for it spun forever on a dead peer over shared memory.
         * Released as it is; the caller's forced close of the endpoint
         * cancels the gets it waits for. */
        ucp_request_free(f);
        return u->ep_status != UCS_OK ? ucs_fail(err, "the peer failed", u->ep_status)
                                      : fail(err, RSP_ETIMEDOUT, "rsp_ucx: the gets timed out");
    }
    if (f)
        ucp_request_free(f);
    if (s != UCS_OK || u->ep_status != UCS_OK)
        return ucs_fail(err, "the gets failed", s != UCS_OK ? s : u->ep_status);
    return RSP_OK;
}

/* Pull the offer's bytes into the begun import imp. */
static rsp_status pull(rsp_ucx *u, rsp_import *imp, const rsp_xfer_header *h,
                       const rsp_extent *from, uint32_t n, uint64_t deadline, rsp_error *err)
{
    uint32_t m;
    rsp_extent *to = malloc(((size_t)n + 1) * sizeof *to);
    if (!to)
        return fail(err, RSP_ENOMEM, "rsp_ucx: out of memory for %" PRIu32 " extents", n);
    rsp_status st = rsp_import_extents(imp, h->world_size, h->rank, to, n, &m, err);
    if (st == RSP_OK && m != n)
        st = fail(err, RSP_EINVAL,
                  "rsp_ucx: the offer lists %" PRIu32 " extents, this pool expects %" PRIu32, n, m);
    if (st == RSP_OK)
        st = check_pairs(u, from, to, n, err);
    if (st == RSP_OK)
        st = get_all(u, from, to, n, deadline, err);
    free(to);
    return st;
}

rsp_status rsp_ucx_receive(rsp_ucx *u, rsp_rid rid, uint64_t seq_begin, uint64_t seq_end,
                           uint64_t timeout_ns, rsp_xfer_header *header, rsp_error *err)
{
    if (!u || !u->ep)
        return fail(err, RSP_EINVAL, "rsp_ucx_receive: %s", !u ? "u is NULL" : "not connected");
    uint64_t deadline = deadline_of(timeout_ns);
    rsp_xfer_header h;
    rsp_extent *from = NULL;
    uint32_t n = 0;
    rsp_error why = {0};
    rsp_import *imp = NULL;
    rsp_status st = read_offer(u, &h, &from, &n, deadline, &why);
    if (st == RSP_OK && header)
        *header = h;
    if (st == RSP_OK)
        st = rsp_import_begin(u->pool, &h, rid, seq_begin, &imp, &why);
    bool transport = false;
    if (st == RSP_OK) {
        st = pull(u, imp, &h, from, n, deadline, &why);
        transport = st != RSP_OK;
    }
    free(from);
    if (transport)
        close_ep(u); /* cancels every get in flight before the slots are freed */
    if (imp && st == RSP_OK)
        st = rsp_import_commit(imp, seq_end, &why);
    if (imp && st != RSP_OK)
        (void)rsp_import_abort(imp, seq_end, NULL);
    if (!transport)
        (void)send_answer(u, st, &why, deadline);
    if (st != RSP_OK && err)
        *err = why;
    return st;
}
