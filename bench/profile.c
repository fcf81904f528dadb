/*
 * rsp-bench-profile: small fixed workloads to run under
 * `valgrind --tool=callgrind`, so the work per operation of rsp and of the
 * baseline can be compared in instructions, whatever else the machine does
 * (bench/profile.sh runs them all and prints instructions per operation).
 * SPDX-License-Identifier: Apache-2.0
 *
 *   rsp-bench-profile MODE [N]
 *     read-rsp | read-rwlock     N reads of the live plan's addressing (one reader)
 *     read-live | read-qsbr      the same with rsp_plan_live_addressing (one call), as a
 *                                default (memb) or a QSBR reader
 *     ingest-rsp | ingest-mutex  N ingest + remove pairs (one client thread;
 *                                rsp: fire-and-forget posts, then a barrier)
 *     step-rsp | step-mutex      N steady decode steps of 256 rows, one label
 *                                (rsp: the pipelined protocol of bench/step.c)
 *     fork-rsp | fork-mutex      the same with bench/step.c's fork variant: rows
 *                                on "draft", pre-fork main->draft, post-fork
 *                                draft->main, 1 KiB slots
 *     step-mutex-general | fork-mutex-general
 *                                step-mutex / fork-mutex with the core's
 *                                same-declaration path off (the general path)
 *     ckpt-churn                 N takes of distinct keys into a full device
 *                                tier of 1,024 tiny checkpoints (each evicts
 *                                the least recently used), fire-and-forget,
 *                                then a barrier (owner time a take)
 *     ckpt-lookup                N rsp_checkpoint_lookup of stored and missing
 *                                keys (one reader, a read section each)
 *
 * Each mode does its set-up, then the N operations, then tears down; the
 * profile script subtracts a run with N = 0 (set-up and tear-down only).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baseline.h"
#include "bench.h"

/* Rows of the step workloads: 256, or RSP_PROFILE_ROWS from the
 * environment (e.g. 1: what a 1-row decode step costs). */
static uint32_t STEP_ROWS = 256u;

/* How read_rsp reads: the four calls, the one-call accessor as a default
 * (memb) reader, or the one-call accessor as a QSBR reader announcing a
 * quiescent state every READ_QSBR_EVERY reads (a partition thread does once
 * per step). */
enum read_how { READ_FOUR_CALLS, READ_ONE_CALL, READ_QSBR };
#define READ_QSBR_EVERY 64u

static void read_rsp_how(uint32_t n, enum read_how how)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 80);
    rsp_error err = {0};
    rsp_row rows[64];
    for (uint32_t i = 0; i < 64; i++)
        rows[i] = (rsp_row){.rid = i + 1, .span = 1};
    rsp_step st = {.step_id = 1, .rows = rows, .num_rows = 64};
    rsp_admit_outcome out;
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    BENCH_CHECK(rsp_step_admit(pool, &st, &out, &err), &err);
    BENCH_CHECK(rsp_step_plan(pool, &st, &err), &err);
    if (how == READ_QSBR)
        BENCH_CHECK(rsp_reader_register_qsbr(&err), &err);
    else
        BENCH_CHECK(rsp_reader_register(&err), &err);
    uint64_t acc = 0;
    for (uint32_t i = 0; i < n; i++) {
        rsp_read_begin();
        rsp_addressing a;
        rsp_status s = RSP_ENOPLAN;
        if (how == READ_FOUR_CALLS) {
            const rsp_plan *p = rsp_plan_live(pool);
            if (p)
                s = rsp_plan_addressing(p, RSP_LABEL_MAIN, &a, NULL);
        } else {
            s = rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, NULL);
        }
        if (s == RSP_OK)
            acc += a.step_id + a.num_rows + (uint64_t)a.slot_indices[0] + a.has_state[0];
        rsp_read_end();
        if (how == READ_QSBR && i % READ_QSBR_EVERY == READ_QSBR_EVERY - 1)
            rsp_reader_quiescent();
    }
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
    printf("read-rsp: %u reads (checksum %llu)\n", n, (unsigned long long)acc);
}

static void read_rsp(uint32_t n)
{
    read_rsp_how(n, READ_FOUR_CALLS);
}
static void read_live(uint32_t n)
{
    read_rsp_how(n, READ_ONE_CALL);
}
static void read_qsbr(uint32_t n)
{
    read_rsp_how(n, READ_QSBR);
}

static void read_rwlock(uint32_t n)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 80);
    rsp_error err = {0};
    rsp_row rows[64];
    for (uint32_t i = 0; i < 64; i++)
        rows[i] = (rsp_row){.rid = i + 1, .span = 1};
    rsp_step st = {.step_id = 1, .rows = rows, .num_rows = 64};
    rsp_admit_outcome out;
    bl_pool *bl;
    BENCH_CHECK(bl_create(&cfg, &bl, &err), &err);
    BENCH_CHECK(bl_admit(bl, &st, &out, &err), &err);
    BENCH_CHECK(bl_plan(bl, &st, &err), &err);
    uint64_t acc = 0;
    for (uint32_t i = 0; i < n; i++) {
        bl_read_begin(bl);
        rsp_addressing a;
        if (bl_plan_addressing(bl, RSP_LABEL_MAIN, &a) == RSP_OK)
            acc += a.step_id + a.num_rows + (uint64_t)a.slot_indices[0] + a.has_state[0];
        bl_read_end(bl);
    }
    bl_destroy(bl);
    printf("read-rwlock: %u reads (checksum %llu)\n", n, (unsigned long long)acc);
}

static void ingest_rsp(uint32_t n)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 64);
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    rsp_msg m = {0};
    for (uint32_t i = 0; i < n; i++) {
        m.rid = i + 1;
        m.kind = RSP_MSG_INGEST;
        BENCH_CHECK(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
        m.kind = RSP_MSG_REMOVE;
        BENCH_CHECK(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
    }
    BENCH_CHECK(rsp_barrier(pool, &err), &err);
    rsp_pool_destroy(pool);
    printf("ingest-rsp: %u pairs\n", n);
}

/* The vector form: the same n pairs, 64 rids a message. */
static void ingest_vector(uint32_t n)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 64);
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    rsp_rid rids[64];
    rsp_msg m = {.rids = rids};
    for (uint32_t i = 0; i < n; i += 64) {
        m.num_rids = n - i < 64 ? n - i : 64;
        for (uint32_t k = 0; k < m.num_rids; k++)
            rids[k] = i + k + 1;
        m.kind = RSP_MSG_INGEST;
        BENCH_CHECK(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
        m.kind = RSP_MSG_REMOVE;
        BENCH_CHECK(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
    }
    BENCH_CHECK(rsp_barrier(pool, &err), &err);
    rsp_pool_destroy(pool);
    printf("ingest-vector: %u pairs, 64 rids a message\n", n);
}

static void ingest_mutex(uint32_t n)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 64);
    rsp_error err = {0};
    bl_pool *bl;
    BENCH_CHECK(bl_create(&cfg, &bl, &err), &err);
    for (uint32_t i = 0; i < n; i++) {
        BENCH_CHECK(bl_ingest(bl, i + 1, &err), &err);
        BENCH_CHECK(bl_remove(bl, i + 1, &err), &err);
    }
    bl_destroy(bl);
    printf("ingest-mutex: %u pairs\n", n);
}

/* One warm-up step first (it allocates every slot), so N steady steps follow. */
static void steps_rsp(uint32_t n, bool fork)
{
    rsp_pool_config cfg;
    bench_config(&cfg, fork ? BENCH_KIB : BENCH_TINY, 2 * STEP_ROWS + 8);
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    BENCH_CHECK(rsp_reader_register(&err), &err);
    rsp_label_id draft;
    BENCH_CHECK(rsp_label(pool, "draft", &draft, &err), &err);
    rsp_label_id label = fork ? draft : RSP_LABEL_MAIN;
    rsp_row *rows = calloc(STEP_ROWS, sizeof *rows);
    if (!rows)
        bench_die("calloc", RSP_ENOMEM, "");
    for (uint32_t i = 0; i < STEP_ROWS; i++)
        rows[i] = (rsp_row){.rid = i + 1, .label = label, .span = 1};
    rsp_fork pre = {.from = RSP_LABEL_MAIN, .to = draft},
             post = {.from = draft, .to = RSP_LABEL_MAIN};
    rsp_msg m = {.step = {.rows = rows, .num_rows = STEP_ROWS}};
    if (fork) {
        m.step.pre_forks = &pre;
        m.step.num_pre_forks = 1;
        m.step.post_forks = &post;
        m.step.num_post_forks = 1;
    }
    rsp_reply *reply = malloc(sizeof *reply);
    if (!reply)
        bench_die("malloc", RSP_ENOMEM, "");
    for (uint64_t sid = 1; sid <= (uint64_t)n + 1; sid++) {
        rsp_ticket *ta, *tp;
        m.step.step_id = sid;
        m.kind = RSP_MSG_ADMIT;
        BENCH_CHECK(rsp_post(pool, &m, &ta, RSP_WAIT_FOREVER, &err), &err);
        m.kind = RSP_MSG_PLAN;
        BENCH_CHECK(rsp_post(pool, &m, &tp, RSP_WAIT_FOREVER, &err), &err);
        BENCH_CHECK(rsp_wait(ta, RSP_WAIT_FOREVER, reply), &reply->error);
        BENCH_CHECK(rsp_wait(tp, RSP_WAIT_FOREVER, reply), &reply->error);
        rsp_read_begin();
        rsp_addressing a;
        rsp_status st = rsp_plan_addressing(rsp_plan_live(pool), label, &a, &err);
        rsp_read_end();
        BENCH_CHECK(st, &err);
        BENCH_CHECK(rsp_event_wait(pool, &a.ready, RSP_WAIT_FOREVER, &err), &err);
        m.kind = RSP_MSG_COMMIT;
        m.event = rsp_event_complete(); /* the ready wait above: no forward writes */
        BENCH_CHECK(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
        m.event = (rsp_event){0};
    }
    BENCH_CHECK(rsp_barrier(pool, &err), &err);
    free(reply);
    free(rows);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
    printf("%s-rsp: %u steps of %u rows\n", fork ? "fork" : "step", n, STEP_ROWS);
}

/* The same steady 256-row step through rsp_step_next (one round
 * trip: it commits the previous step and admits and plans this one). */
static void onetrip_rsp(uint32_t n)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 2 * STEP_ROWS + 8);
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    BENCH_CHECK(rsp_reader_register(&err), &err);
    rsp_row *rows = calloc(STEP_ROWS, sizeof *rows);
    if (!rows)
        bench_die("calloc", RSP_ENOMEM, "");
    for (uint32_t i = 0; i < STEP_ROWS; i++)
        rows[i] = (rsp_row){.rid = i + 1, .span = 1};
    rsp_step cur = {.rows = rows, .num_rows = STEP_ROWS}, prev = cur;
    const rsp_event done = rsp_event_complete(); /* the ready wait: no forward writes */
    for (uint64_t sid = 1; sid <= (uint64_t)n + 1; sid++) {
        cur.step_id = sid;
        prev.step_id = sid - 1;
        rsp_step_outcome o;
        BENCH_CHECK(rsp_step_next(pool, &cur, sid > 1 ? &prev : NULL, &done, &o, &err), &err);
        rsp_read_begin();
        rsp_addressing a;
        rsp_status st = rsp_plan_addressing(rsp_plan_live(pool), RSP_LABEL_MAIN, &a, &err);
        rsp_read_end();
        BENCH_CHECK(st, &err);
        BENCH_CHECK(rsp_event_wait(pool, &a.ready, RSP_WAIT_FOREVER, &err), &err);
    }
    BENCH_CHECK(rsp_step_commit(pool, &cur, &done, &err), &err);
    free(rows);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
    printf("step-onetrip: %u steps of %u rows\n", n, STEP_ROWS);
}

static void steps_mutex(uint32_t n, bool fork, bool fast)
{
    rsp_pool_config cfg;
    bench_config(&cfg, fork ? BENCH_KIB : BENCH_TINY, 2 * STEP_ROWS + 8);
    rsp_error err = {0};
    bl_pool *bl;
    BENCH_CHECK(bl_create(&cfg, &bl, &err), &err);
    bl_set_fast(bl, fast);
    rsp_label_id draft;
    BENCH_CHECK(bl_label(bl, "draft", &draft, &err), &err);
    rsp_label_id label = fork ? draft : RSP_LABEL_MAIN;
    rsp_row *rows = calloc(STEP_ROWS, sizeof *rows);
    if (!rows)
        bench_die("calloc", RSP_ENOMEM, "");
    for (uint32_t i = 0; i < STEP_ROWS; i++)
        rows[i] = (rsp_row){.rid = i + 1, .label = label, .span = 1};
    rsp_fork pre = {.from = RSP_LABEL_MAIN, .to = draft},
             post = {.from = draft, .to = RSP_LABEL_MAIN};
    rsp_step st = {.rows = rows, .num_rows = STEP_ROWS};
    if (fork) {
        st.pre_forks = &pre;
        st.num_pre_forks = 1;
        st.post_forks = &post;
        st.num_post_forks = 1;
    }
    rsp_admit_outcome out;
    for (uint64_t sid = 1; sid <= (uint64_t)n + 1; sid++) {
        st.step_id = sid;
        BENCH_CHECK(bl_admit(bl, &st, &out, &err), &err);
        BENCH_CHECK(bl_plan(bl, &st, &err), &err);
        rsp_addressing a;
        bl_read_begin(bl);
        rsp_status s = bl_plan_addressing(bl, label, &a);
        bl_read_end(bl);
        BENCH_CHECK(s, &err);
        BENCH_CHECK(bl_commit(bl, &st, NULL, &err), &err);
    }
    free(rows);
    bl_destroy(bl);
    printf("%s-mutex%s: %u steps of %u rows\n", fork ? "fork" : "step", fast ? "" : "-general", n,
           STEP_ROWS);
}

static void step_rsp(uint32_t n)
{
    steps_rsp(n, false);
}
static void step_mutex(uint32_t n)
{
    steps_mutex(n, false, true);
}
static void step_mutex_general(uint32_t n)
{
    steps_mutex(n, false, false);
}
static void fork_mutex_general(uint32_t n)
{
    steps_mutex(n, true, false);
}
static void fork_rsp(uint32_t n)
{
    steps_rsp(n, true);
}
static void fork_mutex(uint32_t n)
{
    steps_mutex(n, true, true);
}

/* A tier of CKPT_TIER checkpoints filled in the set-up (so the
 * N measured takes all evict), rid 1 holding the 64 B slot they copy. */
#define CKPT_TIER 1024u

static uint64_t ckpt_key(uint64_t i)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 31);
}

static rsp_pool *ckpt_pool(void)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 8);
    cfg.max_checkpoints = CKPT_TIER;
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    rsp_row row = {.rid = 1, .span = 1};
    rsp_step st = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome out;
    const rsp_event done = rsp_event_complete();
    BENCH_CHECK(rsp_step_admit(pool, &st, &out, &err), &err);
    BENCH_CHECK(rsp_step_plan(pool, &st, &err), &err);
    BENCH_CHECK(rsp_step_commit(pool, &st, &done, &err), &err);
    rsp_msg m = {.kind = RSP_MSG_CHECKPOINT, .rid = 1, .tier = RSP_TIER_DEVICE};
    for (uint32_t i = 0; i < CKPT_TIER; i++) {
        m.key = ckpt_key(i);
        BENCH_CHECK(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
    }
    BENCH_CHECK(rsp_barrier(pool, &err), &err);
    return pool;
}

static void ckpt_churn(uint32_t n)
{
    rsp_pool *pool = ckpt_pool();
    rsp_error err = {0};
    rsp_msg m = {.kind = RSP_MSG_CHECKPOINT, .rid = 1, .tier = RSP_TIER_DEVICE};
    for (uint32_t i = 0; i < n; i++) {
        m.key = ckpt_key(CKPT_TIER + i);
        BENCH_CHECK(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
    }
    BENCH_CHECK(rsp_barrier(pool, &err), &err);
    rsp_stats s;
    BENCH_CHECK(rsp_stats_snapshot(pool, &s, &err), &err);
    rsp_pool_destroy(pool);
    printf("ckpt-churn: %u takes, %llu evictions\n", n, (unsigned long long)s.checkpoints_evicted);
}

static void ckpt_lookup(uint32_t n)
{
    rsp_pool *pool = ckpt_pool();
    rsp_error err = {0};
    BENCH_CHECK(rsp_reader_register(&err), &err);
    uint64_t hits = 0;
    for (uint32_t i = 0; i < n; i++) {
        rsp_checkpoint_loc loc;
        rsp_read_begin();
        hits += rsp_checkpoint_lookup(pool, ckpt_key(i % (2 * CKPT_TIER)), &loc, NULL) == RSP_OK;
        rsp_read_end();
    }
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
    printf("ckpt-lookup: %u lookups, %llu hits\n", n, (unsigned long long)hits);
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*run)(uint32_t);
    } modes[] = {
        {"read-rsp", read_rsp},
        {"read-live", read_live},
        {"read-qsbr", read_qsbr},
        {"read-rwlock", read_rwlock},
        {"ingest-rsp", ingest_rsp},
        {"ingest-mutex", ingest_mutex},
        {"step-rsp", step_rsp},
        {"step-mutex", step_mutex},
        {"fork-rsp", fork_rsp},
        {"fork-mutex", fork_mutex},
        {"step-mutex-general", step_mutex_general},
        {"fork-mutex-general", fork_mutex_general},
        {"step-onetrip", onetrip_rsp},
        {"ingest-vector", ingest_vector},
        {"ckpt-churn", ckpt_churn},
        {"ckpt-lookup", ckpt_lookup},
    };
    if (argc < 2) {
        fprintf(stderr, "usage: rsp-bench-profile MODE [N]; modes:");
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
            fprintf(stderr, " %s", modes[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    uint32_t n = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 1000;
    const char *rows = getenv("RSP_PROFILE_ROWS");
    if (rows && *rows) {
        STEP_ROWS = (uint32_t)strtoul(rows, NULL, 10);
        if (STEP_ROWS == 0 || STEP_ROWS > 4096) {
            fprintf(stderr, "rsp-bench-profile: RSP_PROFILE_ROWS must be 1 .. 4096\n");
            return 2;
        }
    }
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        if (strcmp(argv[1], modes[i].name) == 0) {
            modes[i].run(n);
            return 0;
        }
    fprintf(stderr, "rsp-bench-profile: unknown mode '%s'\n", argv[1]);
    return 2;
}
