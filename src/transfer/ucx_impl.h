/*
 * The UCX transport's two halves (ucx.c: context, registration, the
 * connection and its socket; ucx_offer.c: offers, gets and answers) share
 * the rsp_ucx struct and these helpers. Private to librsp_ucx.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_UCX_IMPL_H
#define RSP_UCX_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
    bool answer_due;        /* an offer's bytes arrived; the exporter waits for the answer */
    /* How long a wait for the peer's offer or answer polls before it
     * sleeps (RSP_UCX_SPIN_US at create, default 200 us): the peer often
     * answers within a transfer's time, and a sleeping process's wake-up
     * (tens of us on a VM) would add to every request moved alone. */
    uint64_t spin_ns;
    uint32_t num_peer;
    peer_region peer[MAX_REGIONS];
};

/* err (may be NULL) gets st and the message; returns st. */
rsp_status rsp__ucx_fail(rsp_error *err, rsp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* RSP_EDEVICE naming what failed and UCX's status string. */
rsp_status rsp__ucx_ucs_fail(rsp_error *err, const char *what, ucs_status_t s);
/* CLOCK_MONOTONIC in ns; now + timeout, saturated. */
uint64_t rsp__ucx_now_ns(void);
uint64_t rsp__ucx_deadline_of(uint64_t timeout_ns);
/* Move all of buf through fd by the deadline (out: write), polling
 * without sleeping for the first spin ns. worker (optional) is progressed
 * while waiting: a peer's gets over a transport without one-sided reads
 * (TCP) are served by our progress. */
rsp_status rsp__ucx_sock_wait_io(int fd, void *buf, size_t n, bool out, uint64_t deadline,
                                 ucp_worker_h worker, uint64_t spin, rsp_error *err);
rsp_status rsp__ucx_sock_io(int fd, void *buf, size_t n, bool out, uint64_t deadline,
                            rsp_error *err);
/* Close the endpoint (forced: every operation in flight is cancelled and
 * completes before this returns) and forget the peer's keys. */
void rsp__ucx_close_ep(rsp_ucx *u);

#endif
