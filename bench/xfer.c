/*
 * rsp-bench-xfer: moving requests between two processes over UCX, against
 * plain UCX gets of the same bytes in the same run (docs/transfer.md).
 * SPDX-License-Identifier: Apache-2.0
 *
 * A prefill process (the child) fills 256 requests of 1 MiB (one block,
 * 8 layers of 128 KiB); the decode process (the parent) measures, for 1,
 * 64 and 256 requests:
 *   rsp   each request exported (prefill), offered, imported by gets of
 *         its 8 extents, flushed and committed (decode): rsp_ucx_send /
 *         rsp_ucx_receive, then removed again (untimed);
 *   batch the n requests exported, offered in one rsp_ucx_send_many,
 *         imported by one rsp_ucx_receive_many (one flush, one answer);
 *   ucx   the same bytes as one 1 MiB ucp_get_nbx per request from the
 *         peer's registered slots and a flush each, no pool involved;
 * and the latency from the export's start (the header's tag: the
 * prefill's CLOCK_MONOTONIC, shared by both processes on one host) to a
 * decode step that addresses the request (admit and plan done).
 * One JSON object a line. --quick: fewer repetitions. UCX_TLS picks the
 * transports (default: UCX's choice, shared memory on one host).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <rsp/rsp.h>
#include <rsp/rsp_ucx.h>

#define LAYERS 8
#define MAX_REQS 256u
#define REQ_BYTES (1u << 20)
#define TIMEOUT (60ull * 1000000000ull)

static const rsp_block_config block = {
    .name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {REQ_BYTES / LAYERS / 4}};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

_Noreturn static void die(const char *what, const rsp_error *e)
{
    fprintf(stderr, "rsp-bench-xfer: %s%s%s\n", what, e ? ": " : "", e ? e->message : "");
    exit(1);
}

static void io(int fd, void *p, size_t n, bool out)
{
    for (char *c = p; n;) {
        ssize_t k = out ? write(fd, c, n) : read(fd, c, n);
        if (k <= 0)
            die("socket", NULL);
        c += k, n -= (size_t)k;
    }
}

static rsp_pool *make_pool(void)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = LAYERS;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = MAX_REQS + 2;
    rsp_pool *pool;
    rsp_error e;
    if (rsp_pool_create(&cfg, &pool, &e) != RSP_OK)
        die("rsp_pool_create", &e);
    return pool;
}

static void step(rsp_pool *pool, uint64_t id, rsp_rid rid, bool commit)
{
    rsp_row row = {.rid = rid, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = id, .rows = &row, .num_rows = 1};
    rsp_admit_outcome a;
    rsp_error e;
    rsp_event done = rsp_event_complete();
    if (rsp_step_admit(pool, &s, &a, &e) != RSP_OK || !a.ok || rsp_step_plan(pool, &s, &e) ||
        (commit ? rsp_step_commit(pool, &s, &done, &e) : rsp_step_rollback(pool, id, NULL, &e)))
        die("step", &e);
}

/* Plain UCX: a context, a worker, the slots region mapped, an endpoint to
 * the peer and its rkey (exchanged over fd, as rsp_ucx does). */
typedef struct raw {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_mem_h memh;
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    uint64_t peer_base;
    char *base;
} raw;

static void raw_open(raw *r, rsp_pool *pool, int fd)
{
    rsp_region reg;
    uint32_t n;
    if (rsp_pool_regions(pool, &reg, 1, &n, NULL) != RSP_OK)
        die("regions", NULL);
    r->base = reg.base;
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                       .features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP};
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_mem_map_params_t mp = {.field_mask =
                                   UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = reg.base,
                               .length = reg.length};
    ucp_address_t *addr;
    size_t alen, rlen;
    void *rk;
    if (ucp_init(&pp, NULL, &r->ctx) || ucp_worker_create(r->ctx, &wp, &r->worker) ||
        ucp_mem_map(r->ctx, &mp, &r->memh) || ucp_worker_get_address(r->worker, &addr, &alen) ||
        ucp_rkey_pack(r->ctx, r->memh, &rk, &rlen))
        die("ucx set-up", NULL);
    uint64_t head[3] = {alen, rlen, (uint64_t)(uintptr_t)reg.base}, peer[3];
    io(fd, head, sizeof head, true);
    io(fd, addr, alen, true);
    io(fd, rk, rlen, true);
    io(fd, peer, sizeof peer, false);
    char *pa = malloc(peer[0]), *pr = malloc(peer[1]);
    io(fd, pa, peer[0], false);
    io(fd, pr, peer[1], false);
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                          .address = (ucp_address_t *)pa};
    if (ucp_ep_create(r->worker, &ep, &r->ep) || ucp_ep_rkey_unpack(r->ep, pr, &r->rkey))
        die("ucx endpoint", NULL);
    r->peer_base = peer[2];
    ucp_worker_release_address(r->worker, addr);
    ucp_rkey_buffer_release(rk);
    free(pa);
    free(pr);
}

static void raw_wait(raw *r, ucs_status_ptr_t q)
{
    if (UCS_PTR_IS_ERR(q))
        die("ucx request", NULL);
    while (q && ucp_request_check_status(q) == UCS_INPROGRESS)
        ucp_worker_progress(r->worker);
    if (q)
        ucp_request_free(q);
}

/* n requests' bytes, a 1 MiB get and a flush each. */
static void raw_gets(raw *r, uint32_t n)
{
    ucp_request_param_t rp = {.op_attr_mask = 0};
    for (uint32_t i = 0; i < n; i++) {
        uint64_t off = (uint64_t)(i + 1) * REQ_BYTES;
        raw_wait(r, ucp_get_nbx(r->ep, r->base + off, REQ_BYTES, r->peer_base + off, r->rkey, &rp));
        raw_wait(r, ucp_ep_flush_nbx(r->ep, &rp));
    }
}

/* Commands from decode to prefill: offer n requests (tag: the clock), the
 * raw phase (only progress until its end), quit. */
enum { CMD_OFFER = 1, CMD_RAW, CMD_QUIT, CMD_BATCH };

static void prefill(int fd)
{
    rsp_pool *pool = make_pool();
    rsp_block_view v;
    for (rsp_rid r = 1; r <= MAX_REQS; r++)
        step(pool, r, r, true);
    for (uint32_t l = 0; l < LAYERS; l++)
        if (rsp_pool_block(pool, "ssm", l, &v, NULL) == RSP_OK)
            memset(v.data, 0x5a, (size_t)(MAX_REQS + 2) * REQ_BYTES / LAYERS);
    rsp_ucx *u;
    rsp_error e;
    raw r;
    if (rsp_ucx_create(pool, &u, &e) || rsp_ucx_connect(u, fd, TIMEOUT, &e))
        die("prefill connect", &e);
    raw_open(&r, pool, fd);
    for (;;) {
        uint32_t cmd[2];
        /* A prefill worker is awake while it serves: wait for the next
         * command polling (a millisecond) before a blocking read, so the
         * timed runs do not include this harness's wake-up. */
        for (uint64_t until = now_ns() + 1000000u; now_ns() < until;)
            if (recv(fd, cmd, 1, MSG_PEEK | MSG_DONTWAIT) == 1)
                break;
        io(fd, cmd, sizeof cmd, false);
        if (cmd[0] == CMD_QUIT)
            break;
        if (cmd[0] == CMD_RAW) { /* gets over TCP need our progress; sleep between */
            uint8_t end = 0;
            int efd = -1;
            ucp_worker_get_efd(r.worker, &efd);
            while (recv(fd, &end, 1, MSG_DONTWAIT) != 1) {
                while (ucp_worker_progress(r.worker))
                    ;
                struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = efd, .events = POLLIN}};
                if (ucp_worker_arm(r.worker) == UCS_OK)
                    poll(p, 2, 100);
            }
            continue;
        }
        if (cmd[0] == CMD_BATCH) {
            static rsp_export *xs[MAX_REQS];
            for (rsp_rid rid = 1; rid <= cmd[1]; rid++) {
                rsp_export_spec s;
                rsp_export_spec_init(&s);
                s.rid = rid;
                s.tag = now_ns();
                if (rsp_export_open(pool, &s, &xs[rid - 1], &e))
                    die("export", &e);
            }
            if (rsp_ucx_send_many(u, xs, cmd[1], TIMEOUT, NULL, &e))
                die("offer", &e);
            for (uint32_t i = 0; i < cmd[1]; i++)
                rsp_export_close(xs[i], NULL);
            continue;
        }
        for (rsp_rid rid = 1; rid <= cmd[1]; rid++) {
            rsp_export_spec s;
            rsp_export_spec_init(&s);
            s.rid = rid;
            s.tag = now_ns();
            rsp_export *x;
            if (rsp_export_open(pool, &s, &x, &e) || rsp_ucx_send(u, x, TIMEOUT, &e))
                die("offer", &e);
            rsp_export_close(x, NULL);
        }
    }
    rsp_ucx_destroy(u);
    rsp_pool_close(pool, NULL);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, uint32_t n)
{
    qsort(v, n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* Remove rids first..first+n and let their zeroing (about 50 us a MiB
 * here) finish: a run's begins wait for the work queued before them, and
 * the previous run's zeroing is the decode pool's cost of those removes,
 * not of the next transfer. */
static void drop(rsp_pool *pool, rsp_rid first, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        rsp_remove(pool, first + i, NULL);
    usleep(1000 + 100 * n);
}

/* One repetition of n requests through rsp: ns. */
static uint64_t rsp_run(rsp_pool *pool, rsp_ucx *u, int fd, uint32_t n)
{
    uint32_t cmd[2] = {CMD_OFFER, n};
    rsp_error e;
    io(fd, cmd, sizeof cmd, true);
    uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < n; i++)
        if (rsp_ucx_receive(u, 1000 + i, 0, 0, TIMEOUT, NULL, &e) != RSP_OK)
            die("receive", &e);
    uint64_t t = now_ns() - t0;
    drop(pool, 1000, n);
    return t;
}

/* One repetition of n requests as one batch: ns. */
static uint64_t batch_run(rsp_pool *pool, rsp_ucx *u, int fd, uint32_t n)
{
    uint32_t cmd[2] = {CMD_BATCH, n};
    rsp_rid rids[MAX_REQS];
    rsp_error e;
    for (uint32_t i = 0; i < n; i++)
        rids[i] = 1000 + i;
    io(fd, cmd, sizeof cmd, true);
    uint64_t t0 = now_ns();
    if (rsp_ucx_receive_many(u, rids, n, NULL, TIMEOUT, NULL, NULL, NULL, &e) != RSP_OK)
        die("receive_many", &e);
    uint64_t t = now_ns() - t0;
    drop(pool, 1000, n);
    return t;
}

static uint64_t raw_run(raw *r, int fd, uint32_t n)
{
    uint32_t cmd[2] = {CMD_RAW, n};
    io(fd, cmd, sizeof cmd, true);
    uint64_t t0 = now_ns();
    raw_gets(r, n);
    uint64_t t = now_ns() - t0;
    uint8_t end = 1;
    io(fd, &end, 1, true);
    return t;
}

/* Export start (the tag) to a decode step that addresses the request. */
static uint64_t latency(rsp_pool *pool, rsp_ucx *u, int fd, uint64_t id)
{
    uint32_t cmd[2] = {CMD_OFFER, 1};
    rsp_xfer_header h;
    rsp_error e;
    io(fd, cmd, sizeof cmd, true);
    if (rsp_ucx_receive(u, 5000, 0, 0, TIMEOUT, &h, &e) != RSP_OK)
        die("receive", &e);
    step(pool, id, 5000, false);
    uint64_t t = now_ns() - h.tag;
    rsp_remove(pool, 5000, NULL);
    return t;
}

static void decode(int fd, bool quick)
{
    rsp_pool *pool = make_pool();
    rsp_ucx *u;
    rsp_error e;
    raw r;
    if (rsp_ucx_create(pool, &u, &e) || rsp_ucx_connect(u, fd, TIMEOUT, &e))
        die("decode connect", &e);
    raw_open(&r, pool, fd);
    const uint32_t reps = quick ? 3 : 9, sizes[3] = {1, 64, 256};
    uint64_t a[9], b[9], c[9];
    for (uint32_t k = 0; k < 3; k++) {
        uint32_t n = sizes[k];
        for (uint32_t i = 0; i < reps; i++) { /* interleaved: all see the same machine */
            b[i] = raw_run(&r, fd, n);
            a[i] = rsp_run(pool, u, fd, n);
            c[i] = batch_run(pool, u, fd, n);
        }
        double rs = (double)n * REQ_BYTES / (double)median(a, reps);
        double bs = (double)n * REQ_BYTES / (double)median(c, reps);
        double us = (double)n * REQ_BYTES / (double)median(b, reps);
        printf("{\"bench\":\"xfer\",\"requests\":%" PRIu32 ",\"bytes\":%" PRIu64
               ",\"rsp_gbps\":%.3f,\"batch_gbps\":%.3f,\"ucx_gbps\":%.3f,\"ratio\":%.3f,"
               "\"batch_ratio\":%.3f,\"reps\":%" PRIu32 "}\n",
               n, (uint64_t)n * REQ_BYTES, rs, bs, us, rs / us, bs / us, reps);
        fflush(stdout);
    }
    uint64_t lat[32];
    const uint32_t nl = quick ? 9 : 31;
    for (uint32_t i = 0; i < nl; i++)
        lat[i] = latency(pool, u, fd, 10 + i);
    printf("{\"bench\":\"xfer_latency\",\"bytes\":%u,\"export_to_step_us\":%.1f,\"reps\":%" PRIu32
           "}\n",
           REQ_BYTES, (double)median(lat, nl) / 1e3, nl);
    uint32_t quit[2] = {CMD_QUIT, 0};
    io(fd, quit, sizeof quit, true);
    rsp_ucx_destroy(u);
    rsp_pool_close(pool, NULL);
}

int main(int argc, char **argv)
{
    bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        die("socketpair", NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(sv[0]);
        prefill(sv[1]);
        _exit(0);
    }
    close(sv[1]);
    decode(sv[0], quick);
    int ws;
    waitpid(pid, &ws, 0);
    return WIFEXITED(ws) && WEXITSTATUS(ws) == 0 ? 0 : 1;
}
