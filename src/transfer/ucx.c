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
 *   offer   u32 magic, u32 n requests, u64 body bytes; the body: per
 *           request its rsp_xfer_header (the blocks and holdings in use
 *           only) and u32 extent count, then every request's extents
 *   answer  u32 magic, u32 n, i32 status[n], u32 the first failed request
 *           (n: none), its rsp_error message (RSP_ERROR_MAX)
 * A single request is an offer of one.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ucx_impl.h"

rsp_status rsp__ucx_fail(rsp_error *err, rsp_status st, const char *fmt, ...)
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

uint64_t rsp__ucx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t rsp__ucx_deadline_of(uint64_t timeout_ns)
{
    uint64_t n = rsp__ucx_now_ns();
    return timeout_ns > UINT64_MAX - n ? UINT64_MAX : n + timeout_ns;
}

rsp_status rsp__ucx_sock_wait_io(int fd, void *buf, size_t n, bool out, uint64_t deadline,
                                 ucp_worker_h worker, uint64_t spin, rsp_error *err)
{
    char *p = buf;
    const uint64_t spin_until = rsp__ucx_now_ns() + spin;
    while (n) {
        uint64_t now = rsp__ucx_now_ns();
        if (now >= deadline)
            return rsp__ucx_fail(err, RSP_ETIMEDOUT, "rsp_ucx: the socket timed out");
        uint64_t left_ms = (deadline - now) / 1000000u + 1;
        const bool spin = now < spin_until;
        /* With a worker: progress until it has nothing to do, then sleep on
         * the socket and the worker's event fd alike (ucp_worker_arm). */
        int efd = -1;
        if (worker) {
            while (ucp_worker_progress(worker))
                ;
            if (!spin &&
                (ucp_worker_get_efd(worker, &efd) != UCS_OK || ucp_worker_arm(worker) != UCS_OK))
                efd = -2; /* busy or no wake-up: look again at once */
        }
        struct pollfd pfd[2] = {{.fd = fd, .events = out ? POLLOUT : POLLIN},
                                {.fd = efd, .events = POLLIN}};
        int r = poll(pfd, efd >= 0 ? 2 : 1,
                     spin || efd == -2 ? 0
                     : left_ms > 1000  ? 1000
                                       : (int)left_ms);
        if (r < 0 && errno != EINTR)
            return rsp__ucx_fail(err, RSP_EDEVICE, "rsp_ucx: poll: %s", strerror(errno));
        if (r <= 0 || !(pfd[0].revents & (out ? POLLOUT : POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t k = out ? write(fd, p, n) : read(fd, p, n);
        if (k == 0 || (k < 0 && errno != EINTR && errno != EAGAIN))
            return rsp__ucx_fail(err, RSP_EDEVICE, "rsp_ucx: the peer closed the connection%s%s",
                                 k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
        if (k > 0)
            p += k, n -= (size_t)k;
    }
    return RSP_OK;
}

rsp_status rsp__ucx_sock_io(int fd, void *buf, size_t n, bool out, uint64_t deadline,
                            rsp_error *err)
{
    return rsp__ucx_sock_wait_io(fd, buf, n, out, deadline, NULL, 0, err);
}

rsp_status rsp__ucx_ucs_fail(rsp_error *err, const char *what, ucs_status_t s)
{
    return rsp__ucx_fail(err, RSP_EDEVICE, "rsp_ucx: %s: %s", what, ucs_status_string(s));
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
            return rsp__ucx_ucs_fail(err, "ucp_mem_map", s);
    }
    return RSP_OK;
}

rsp_status rsp_ucx_create(rsp_pool *pool, rsp_ucx **out, rsp_error *err)
{
    if (!pool || !out)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx_create: %s is NULL", !pool ? "pool" : "out");
    rsp_ucx *u = calloc(1, sizeof *u);
    if (!u)
        return rsp__ucx_fail(err, RSP_ENOMEM, "rsp_ucx_create: out of memory");
    u->pool = pool;
    u->fd = -1;
    const char *spin = getenv("RSP_UCX_SPIN_US");
    u->spin_ns = (spin && *spin ? strtoull(spin, NULL, 10) : 200u) * 1000u;
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                       .features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP};
    ucs_status_t s = ucp_init(&pp, NULL, &u->ctx);
    rsp_status st = s == UCS_OK ? RSP_OK : rsp__ucx_ucs_fail(err, "ucp_init", s);
    if (st == RSP_OK) {
        ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                  .thread_mode = UCS_THREAD_MODE_SINGLE};
        s = ucp_worker_create(u->ctx, &wp, &u->worker);
        st = s == UCS_OK ? RSP_OK : rsp__ucx_ucs_fail(err, "ucp_worker_create", s);
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
void rsp__ucx_close_ep(rsp_ucx *u)
{
    for (uint32_t i = 0; i < u->num_peer; i++)
        ucp_rkey_destroy(u->peer[i].rkey);
    u->num_peer = 0;
    u->answer_due = false;
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
        rsp__ucx_close_ep(u);
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
        return rsp__ucx_ucs_fail(err, "ucp_worker_get_address", s);
    uint32_t head[2] = {HELLO_MAGIC, (uint32_t)alen};
    rsp_status st = rsp__ucx_sock_io(u->fd, head, sizeof head, true, deadline, err);
    if (st == RSP_OK)
        st = rsp__ucx_sock_io(u->fd, addr, alen, true, deadline, err);
    ucp_worker_release_address(u->worker, addr);
    if (st == RSP_OK)
        st = rsp__ucx_sock_io(u->fd, &u->num_regions, sizeof u->num_regions, true, deadline, err);
    for (uint32_t i = 0; st == RSP_OK && i < u->num_regions; i++) {
        void *rk;
        size_t rlen;
        s = ucp_rkey_pack(u->ctx, u->memh[i], &rk, &rlen);
        if (s != UCS_OK)
            return rsp__ucx_ucs_fail(err, "ucp_rkey_pack", s);
        uint64_t r[2] = {(uint64_t)(uintptr_t)u->regions[i].base, u->regions[i].length};
        uint32_t n = (uint32_t)rlen;
        st = rsp__ucx_sock_io(u->fd, r, sizeof r, true, deadline, err);
        if (st == RSP_OK)
            st = rsp__ucx_sock_io(u->fd, &n, sizeof n, true, deadline, err);
        if (st == RSP_OK)
            st = rsp__ucx_sock_io(u->fd, rk, rlen, true, deadline, err);
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
    rsp_status st = rsp__ucx_sock_io(u->fd, head, sizeof head, false, deadline, err);
    if (st == RSP_OK && (head[0] != HELLO_MAGIC || head[1] == 0 || head[1] > MAX_ADDR))
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx: the peer's hello is malformed");
    void *addr = st == RSP_OK ? malloc(head[1]) : NULL;
    if (st == RSP_OK && !addr)
        return rsp__ucx_fail(err, RSP_ENOMEM, "rsp_ucx: out of memory");
    if (st == RSP_OK)
        st = rsp__ucx_sock_io(u->fd, addr, head[1], false, deadline, err);
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
            st = rsp__ucx_ucs_fail(err, "ucp_ep_create", s);
    }
    free(addr);
    uint32_t n = 0;
    if (st == RSP_OK)
        st = rsp__ucx_sock_io(u->fd, &n, sizeof n, false, deadline, err);
    if (st == RSP_OK && n > MAX_REGIONS)
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx: the peer lists %" PRIu32 " regions", n);
    for (uint32_t i = 0; st == RSP_OK && i < n; i++) {
        uint64_t r[2];
        uint32_t rlen;
        char rk[MAX_RKEY];
        st = rsp__ucx_sock_io(u->fd, r, sizeof r, false, deadline, err);
        if (st == RSP_OK)
            st = rsp__ucx_sock_io(u->fd, &rlen, sizeof rlen, false, deadline, err);
        if (st == RSP_OK && rlen > MAX_RKEY)
            return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx: a remote key of %" PRIu32 " bytes",
                                 rlen);
        if (st == RSP_OK)
            st = rsp__ucx_sock_io(u->fd, rk, rlen, false, deadline, err);
        ucs_status_t s = st == RSP_OK ? ucp_ep_rkey_unpack(u->ep, rk, &u->peer[i].rkey) : UCS_OK;
        if (s != UCS_OK)
            return rsp__ucx_ucs_fail(err, "ucp_ep_rkey_unpack", s);
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
        return rsp__ucx_fail(err, RSP_EINVAL, "rsp_ucx_connect: %s", !u ? "u is NULL" : "fd < 0");
    rsp__ucx_close_ep(u);
    u->fd = fd;
    uint64_t deadline = rsp__ucx_deadline_of(timeout_ns);
    /* Both sides send first: the socket buffers a hello (a few KiB). */
    rsp_status st = send_hello(u, deadline, err);
    if (st == RSP_OK)
        st = read_hello(u, deadline, err);
    if (st != RSP_OK)
        rsp__ucx_close_ep(u);
    return st;
}
