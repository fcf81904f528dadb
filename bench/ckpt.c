/*
 * Checkpoints: copy, lookup and churn, each beside a baseline.
 * SPDX-License-Identifier: Apache-2.0
 *
 * ckpt_copy   take + restore of one 1 MiB slot, as an engine does it: step
 *             i restores (rid, main) from the key step i-1 took and
 *             declares a take of the same row under the other key at its
 *             commit; rsp_step_next commits step i-1 (its take) and admits
 *             and plans step i (its restore) in one round trip, and the
 *             sample ends when step i's ready event fires (the device is
 *             FIFO: both copies are done). One sample = one take + one
 *             restore + the round trip. Baseline: memcpy of the same slot
 *             bytes (the pool's own storage, rsp_pool_block) into a 1 MiB
 *             buffer and back. ratio = memcpy / rsp (issue target >= 0.9).
 *             Points: tier device and host; path "device": the two copies
 *             through the device layer alone (submit, submit, sync: the
 *             copy path without messages or a step); path "step" with 1
 *             step a sample (each waited for) and with 8 steps posted back
 *             to back (the CPU running ahead, one sample = 8 steps / 8).
 * ckpt_lookup R readers (1, 2, 4, 8) each looking up keys with
 *             rsp_checkpoint_lookup (a read section a lookup), 1,024
 *             stored keys out of 2,048 asked for, while a writer takes a
 *             checkpoint (evicting the least recently used) every 50 us.
 *             Baseline: an open-addressing hash of the same keys behind a
 *             writer-preferring pthread_rwlock, its writer inserting and
 *             deleting at the same pace. One sample = a batch of 1,024
 *             lookups / 1,024 (read.c's method). Target <= 100 ns, flat.
 * ckpt_churn  100,000 takes of distinct keys into a device tier of 1,024
 *             tiny (64 B) slots, so all but the first 1,024 evict (point
 *             demote = true: 512 + 512 slots, every take demotes one and
 *             the host tier evicts one). Fire-and-forget messages, a
 *             barrier every 1,000: one sample = a batch's wall time /
 *             1,000 (the owner's time per take, the client posting in
 *             parallel; the 64 B copy is noise). Baseline: the engine-side
 *             bookkeeping an engine would otherwise write (hash + LRU list
 *             with eviction, single thread, no copy) for the same keys.
 *             Target <= 2 us a take. bench/profile.c's ckpt-churn mode
 *             counts the owner's instructions a take with callgrind.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "core/layout.h"
#include "core/work.h"
#include "device/device.h"
#include "util/sync.h"

#define COPY_MIB (1u << 20)

/* A key of index i (distinct, spread over the hash). */
static uint64_t ck_key(uint64_t i)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return x ^ (x >> 32);
}

/* Give rid 1 a holding of main (a one-row step) on a fresh pool. */
static void ck_hold(rsp_pool *pool, uint64_t step_id)
{
    rsp_error err = {0};
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step st = {.step_id = step_id, .rows = &row, .num_rows = 1};
    rsp_admit_outcome out;
    const rsp_event done = rsp_event_complete();
    BENCH_CHECK(rsp_step_admit(pool, &st, &out, &err), &err);
    if (!out.ok)
        bench_die("ck_hold admit", RSP_ECAPACITY, "pool full");
    BENCH_CHECK(rsp_step_plan(pool, &st, &err), &err);
    BENCH_CHECK(rsp_step_commit(pool, &st, &done, &err), &err);
}

/* ---------------------------------------------------------------------- */
/* ckpt_copy                                                               */

/* Wait for the live plan's ready event (main). */
static void ck_wait_ready(rsp_pool *pool)
{
    rsp_error err = {0};
    rsp_addressing a;
    rsp_read_begin();
    rsp_status st = rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, &err);
    rsp_event ready = a.ready;
    rsp_read_end();
    BENCH_CHECK(st, &err);
    BENCH_CHECK(rsp_event_wait(pool, &ready, RSP_WAIT_FOREVER, &err), &err);
}

/* Report one ckpt_copy point (path: its JSON params) and free the samples. */
static void ck_copy_report(const bench_opts *o, rsp_tier tier, const char *path, bench_samples *rs,
                           bench_samples *bs)
{
    bench_result res = {.bench = "ckpt_copy", .baseline = "memcpy"};
    snprintf(res.params, sizeof res.params,
             "\"tier\": \"%s\", \"slot_bytes\": %u, \"op\": \"take+restore\", %s",
             tier == RSP_TIER_DEVICE ? "device" : "host", COPY_MIB, path);
    bench_result_samples(&res, rs, bs);
    snprintf(res.extra, sizeof res.extra, "\"gb_per_s\": %.2f, \"baseline_gb_per_s\": %.2f",
             2.0 * COPY_MIB / res.median_ns, 2.0 * COPY_MIB / res.baseline_median_ns);
    bench_report(o, &res);
    bench_samples_fini(rs);
    bench_samples_fini(bs);
}

/* The chain of steps: step sid restores (rid 1, main) from keys[(sid - 1) % 2]
 * (the key step sid - 1 took) and takes it under keys[sid % 2] at commit. */
typedef struct ck_chain {
    rsp_row row;
    rsp_restore rest[2];
    rsp_checkpoint_decl take[2];
    rsp_step steps[2]; /* by sid % 2: the step in flight and the one before */
    uint64_t sid;      /* the last step posted (in flight) */
    uint64_t keys[2];
} ck_chain;

/* Post k STEP messages back to back (each commits the step before it and
 * admits and plans the next), wait for their answers, then for the last
 * plan's ready event. Returns the ns it all took. */
static uint64_t ck_chain_run(rsp_pool *pool, ck_chain *c, rsp_tier tier, uint32_t k)
{
    static rsp_reply reply; /* large: off the stack */
    rsp_ticket *t[8];
    rsp_error err = {0};
    uint64_t t0 = bench_now_ns();
    for (uint32_t i = 0; i < k; i++) {
        uint64_t sid = ++c->sid;
        rsp_step *cur = &c->steps[sid % 2];
        c->rest[sid % 2] =
            (rsp_restore){.rid = 1, .label = RSP_LABEL_MAIN, .key = c->keys[(sid - 1) % 2]};
        c->take[sid % 2] = (rsp_checkpoint_decl){
            .rid = 1, .label = RSP_LABEL_MAIN, .tier = tier, .key = c->keys[sid % 2]};
        *cur = (rsp_step){.step_id = sid,
                          .rows = &c->row,
                          .num_rows = 1,
                          .restores = &c->rest[sid % 2],
                          .num_restores = 1,
                          .checkpoints = &c->take[sid % 2],
                          .num_checkpoints = 1};
        rsp_msg m = {.kind = RSP_MSG_STEP, .step = *cur, .event = rsp_event_complete()};
        m.commit = sid > 2 ? &c->steps[(sid - 1) % 2] : NULL; /* step 2: 1 is committed */
        BENCH_CHECK(rsp_post(pool, &m, &t[i], RSP_WAIT_FOREVER, &err), &err);
    }
    for (uint32_t i = 0; i < k; i++) {
        BENCH_CHECK(rsp_wait(t[i], RSP_WAIT_FOREVER, &reply), &reply.error);
        if (!reply.planned)
            bench_die("ckpt_copy step", RSP_ECAPACITY, "not planned");
    }
    ck_wait_ready(pool);
    return bench_now_ns() - t0;
}

/* One point: tier, k steps a sample (1: each step waited for; 8: posted
 * back to back, as an engine whose CPU runs ahead of the device). */
static void ck_copy_point(const bench_opts *o, rsp_tier tier, uint32_t k)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_MIB, 4);
    if (tier == RSP_TIER_DEVICE)
        cfg.max_checkpoints = 2;
    else
        cfg.max_host_checkpoints = 2;
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    BENCH_CHECK(rsp_reader_register(&err), &err);
    ck_hold(pool, 1);
    ck_chain c = {.row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1},
                  .sid = 1,
                  .keys = {ck_key(0), ck_key(1)}};
    BENCH_CHECK(rsp_checkpoint_take(pool, c.keys[1], 1, RSP_LABEL_MAIN, tier, 0, &err), &err);

    rsp_block_view view;
    BENCH_CHECK(rsp_pool_block(pool, "state", 0, &view, &err), &err);
    rsp_holding h;
    BENCH_CHECK(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &h, &err), &err);
    uint8_t *slot = (uint8_t *)view.data + (size_t)h.index * COPY_MIB;
    uint8_t *buf = aligned_alloc(64, COPY_MIB);
    if (!buf)
        bench_die("aligned_alloc", RSP_ENOMEM, "");
    memset(buf, 1, COPY_MIB);

    const uint32_t reps = (o->quick ? 200 : 1000) / k;
    bench_samples rs, bs;
    bench_samples_init(&rs, reps);
    bench_samples_init(&bs, reps);
    for (uint32_t r = 0; r < reps + 2; r++) { /* 2 untimed warm-ups */
        uint64_t ns = ck_chain_run(pool, &c, tier, k);
        if (r >= 2)
            bench_samples_add(&rs, (double)ns / k);
        uint64_t t0 = bench_now_ns();
        for (uint32_t i = 0; i < k; i++) {
            memcpy(buf, slot, COPY_MIB);
            memcpy(slot, buf, COPY_MIB);
        }
        ns = bench_now_ns() - t0;
        if (r >= 2)
            bench_samples_add(&bs, (double)ns / k);
    }
    const rsp_event done = rsp_event_complete();
    BENCH_CHECK(rsp_step_commit(pool, &c.steps[c.sid % 2], &done, &err), &err);
    rsp_stats s;
    BENCH_CHECK(rsp_stats_snapshot(pool, &s, &err), &err);
    if (s.checkpoints_taken < (uint64_t)reps * k || s.checkpoints_restored < (uint64_t)reps * k)
        bench_die("ckpt_copy", RSP_EINVAL, "fewer takes or restores than steps");

    char path[64];
    snprintf(path, sizeof path, "\"path\": \"step\", \"steps_posted\": %u", k);
    ck_copy_report(o, tier, path, &rs, &bs);
    free(buf);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

/* The copy path alone: the device layer the owner uses (src/device), a
 * COPY of the request slot into a checkpoint slot of tier and one back,
 * each its own work list (submit), then a sync: the hand-offs to the device
 * worker and the waiter's wake-up included, no messages, no step (as
 * zero_fork measures zeroing and forks). Same baseline. */
static void ck_copy_device(const bench_opts *o, rsp_tier tier)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_MIB, 4);
    cfg.max_checkpoints = 1;
    cfg.max_host_checkpoints = 1;
    rsp_error err = {0};
    static rsp__layout lay; /* large (RSP_MAX_BLOCKS entries): keep it off the stack */
    BENCH_CHECK(rsp__layout_build(&cfg, &lay, &err), &err);
    rsp__device *dev;
    BENCH_CHECK(rsp__device_create(RSP_DEVICE_HOST, 0, &lay, &dev, &err), &err);
    const uint32_t req = 1, ck = lay.max_slots + (tier == RSP_TIER_DEVICE ? 0 : 1);
    rsp__work take, restore;
    rsp__work_init(&take);
    rsp__work_init(&restore);
    BENCH_CHECK(rsp__work_copy(&take, req, ck), &err);
    BENCH_CHECK(rsp__work_copy(&restore, ck, req), &err);
    uint8_t *slot = (uint8_t *)rsp__device_block_base(dev, 0) + rsp__layout_offset(&lay, 0, 0, req);
    uint8_t *buf = aligned_alloc(64, COPY_MIB);
    if (!buf)
        bench_die("aligned_alloc", RSP_ENOMEM, "");
    memset(buf, 1, COPY_MIB);
    memset(slot, 2, COPY_MIB);

    const uint32_t reps = o->quick ? 200 : 1000;
    bench_samples rs, bs;
    bench_samples_init(&rs, reps);
    bench_samples_init(&bs, reps);
    for (uint32_t r = 0; r < reps + 2; r++) { /* 2 untimed warm-ups (first touch) */
        uint64_t t0 = bench_now_ns();
        BENCH_CHECK(rsp__device_submit(dev, &take, NULL, &err), &err);
        BENCH_CHECK(rsp__device_submit(dev, &restore, NULL, &err), &err);
        BENCH_CHECK(rsp__device_sync(dev, &err), &err);
        uint64_t ns = bench_now_ns() - t0;
        if (r >= 2)
            bench_samples_add(&rs, (double)ns);
        t0 = bench_now_ns();
        memcpy(buf, slot, COPY_MIB);
        memcpy(slot, buf, COPY_MIB);
        ns = bench_now_ns() - t0;
        if (r >= 2)
            bench_samples_add(&bs, (double)ns);
    }
    ck_copy_report(o, tier, "\"path\": \"device\"", &rs, &bs);
    free(buf);
    rsp__work_fini(&take);
    rsp__work_fini(&restore);
    rsp__device_destroy(dev);
}

void bench_ckpt_copy(const bench_opts *o)
{
    ck_copy_device(o, RSP_TIER_DEVICE);
    ck_copy_device(o, RSP_TIER_HOST);
    ck_copy_point(o, RSP_TIER_DEVICE, 1);
    ck_copy_point(o, RSP_TIER_HOST, 1);
    ck_copy_point(o, RSP_TIER_DEVICE, 8);
    ck_copy_point(o, RSP_TIER_HOST, 8);
}

/* ---------------------------------------------------------------------- */
/* The baselines' hash: open addressing, linear probing, backward-shift    */
/* deletion; u64 key -> u32 value. Capacity a power of two, at most half   */
/* full. Single-threaded (callers lock).                                   */

typedef struct lk_hash {
    uint64_t *keys; /* 0 = empty (keys here are never 0) */
    uint32_t *vals;
    uint32_t mask;
} lk_hash;

static void lk_init(lk_hash *h, uint32_t cap)
{
    h->keys = calloc(cap, sizeof *h->keys);
    h->vals = calloc(cap, sizeof *h->vals);
    if (!h->keys || !h->vals)
        bench_die("calloc", RSP_ENOMEM, "");
    h->mask = cap - 1;
}

static void lk_fini(lk_hash *h)
{
    free(h->keys);
    free(h->vals);
}

static uint32_t lk_home(const lk_hash *h, uint64_t key)
{
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & h->mask;
}

static bool lk_find(const lk_hash *h, uint64_t key, uint32_t *val)
{
    for (uint32_t i = lk_home(h, key);; i = (i + 1) & h->mask) {
        if (h->keys[i] == key) {
            *val = h->vals[i];
            return true;
        }
        if (h->keys[i] == 0)
            return false;
    }
}

static void lk_put(lk_hash *h, uint64_t key, uint32_t val)
{
    uint32_t i = lk_home(h, key);
    while (h->keys[i] != 0 && h->keys[i] != key)
        i = (i + 1) & h->mask;
    h->keys[i] = key;
    h->vals[i] = val;
}

static void lk_del(lk_hash *h, uint64_t key)
{
    uint32_t i = lk_home(h, key);
    while (h->keys[i] != key) {
        if (h->keys[i] == 0)
            return;
        i = (i + 1) & h->mask;
    }
    /* Backward shift: move later members of the run into the hole when
     * their home does not lie cyclically in (hole, j]. */
    for (uint32_t j = (i + 1) & h->mask; h->keys[j] != 0; j = (j + 1) & h->mask) {
        uint32_t home = lk_home(h, h->keys[j]);
        bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            h->keys[i] = h->keys[j];
            h->vals[i] = h->vals[j];
            i = j;
        }
    }
    h->keys[i] = 0;
}

/* ---------------------------------------------------------------------- */
/* ckpt_lookup                                                             */

#define LK_PERIOD_NS 50000u
#define LK_BATCH 1024u
#define LK_STORED 1024u
#define LK_SPACE 2048u

typedef struct lk_shared {
    rsp_pool *pool; /* exactly one of pool / (rw, hash) */
    pthread_rwlock_t *rw;
    lk_hash *hash;
    uint32_t stop; /* main -> all: written once; relaxed polling is enough */
    pthread_barrier_t gate;
    uint64_t takes; /* writer only; read after join */
} lk_shared;

typedef struct lk_reader {
    lk_shared *sh;
    uint32_t seed;
    bench_samples samples;
    uint64_t reads, hits;
    uint64_t t_start, t_end;
    uint64_t cpu_ns; /* this reader's CPU time over the run */
} lk_reader;

/* The writer: one take (rsp) or insert + delete (baseline) every 50 us,
 * walking the key space so the stored set keeps changing. */
static void *lk_writer(void *p)
{
    lk_shared *sh = p;
    rsp_error err = {0};
    bench_tight_timer_slack();
    pthread_barrier_wait(&sh->gate);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    uint64_t i = LK_STORED;
    while (!rsp__load_relaxed_u32(&sh->stop)) {
        uint64_t key = ck_key(i % LK_SPACE), old = ck_key((i - LK_STORED) % LK_SPACE);
        if (sh->pool) {
            /* The tier is full: the take evicts its least recently used (= old). */
            BENCH_CHECK(
                rsp_checkpoint_take(sh->pool, key, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, &err),
                &err);
        } else {
            pthread_rwlock_wrlock(sh->rw);
            lk_del(sh->hash, old);
            lk_put(sh->hash, key, (uint32_t)(i % LK_STORED));
            pthread_rwlock_unlock(sh->rw);
        }
        i++;
        sh->takes++;
        bench_pace(&next, LK_PERIOD_NS);
    }
    return NULL;
}

static void *lk_read(void *p)
{
    lk_reader *r = p;
    lk_shared *sh = r->sh;
    rsp_error err = {0};
    if (sh->pool)
        BENCH_CHECK(rsp_reader_register(&err), &err);
    pthread_barrier_wait(&sh->gate);
    uint32_t x = r->seed | 1;
    uint64_t hits = 0;
    uint64_t c0 = bench_thread_cpu_ns();
    r->t_start = bench_now_ns();
    while (!rsp__load_relaxed_u32(&sh->stop)) {
        uint64_t t0 = bench_now_ns();
        for (uint32_t i = 0; i < LK_BATCH; i++) {
            x ^= x << 13; /* xorshift32: a key index a lookup */
            x ^= x >> 17;
            x ^= x << 5;
            uint64_t key = ck_key(x % LK_SPACE);
            if (sh->pool) {
                rsp_checkpoint_loc loc;
                rsp_read_begin();
                hits += rsp_checkpoint_lookup(sh->pool, key, &loc, NULL) == RSP_OK;
                rsp_read_end();
            } else {
                uint32_t v;
                pthread_rwlock_rdlock(sh->rw);
                hits += lk_find(sh->hash, key, &v);
                pthread_rwlock_unlock(sh->rw);
            }
        }
        bench_samples_add(&r->samples, (double)(bench_now_ns() - t0) / LK_BATCH);
        r->reads += LK_BATCH;
    }
    r->t_end = bench_now_ns();
    r->cpu_ns = bench_thread_cpu_ns() - c0;
    r->hits = hits;
    if (sh->pool)
        rsp_reader_unregister();
    return NULL;
}

typedef struct lk_run {
    bench_samples samples;
    uint64_t reads, hits, wall_ns, takes, cpu_ns;
} lk_run;

static void lk_once(lk_shared *sh, uint32_t R, uint64_t dur_ns, lk_run *out)
{
    sh->stop = 0;
    sh->takes = 0;
    pthread_barrier_init(&sh->gate, NULL, R + 2);
    lk_reader rd[8];
    pthread_t th[8], wr;
    for (uint32_t i = 0; i < R; i++) {
        rd[i] = (lk_reader){.sh = sh, .seed = 0x9E3779B9u * (i + 1)};
        bench_samples_init(&rd[i].samples, 4096);
        if (pthread_create(&th[i], NULL, lk_read, &rd[i]) != 0)
            bench_die("pthread_create", RSP_ENOMEM, "");
    }
    if (pthread_create(&wr, NULL, lk_writer, sh) != 0)
        bench_die("pthread_create", RSP_ENOMEM, "");
    pthread_barrier_wait(&sh->gate);
    bench_sleep_ns(dur_ns);
    rsp__store_relaxed_u32(&sh->stop, 1);
    for (uint32_t i = 0; i < R; i++)
        pthread_join(th[i], NULL);
    pthread_join(wr, NULL);
    uint64_t first = UINT64_MAX, last = 0;
    for (uint32_t i = 0; i < R; i++) {
        first = rd[i].t_start < first ? rd[i].t_start : first;
        last = rd[i].t_end > last ? rd[i].t_end : last;
        bench_samples_merge(&out->samples, &rd[i].samples);
        out->reads += rd[i].reads;
        out->hits += rd[i].hits;
        out->cpu_ns += rd[i].cpu_ns;
        bench_samples_fini(&rd[i].samples);
    }
    out->wall_ns += last - first;
    out->takes += sh->takes;
    pthread_barrier_destroy(&sh->gate);
}

void bench_ckpt_lookup(const bench_opts *o)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 8);
    cfg.max_checkpoints = LK_STORED;
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    ck_hold(pool, 1);
    for (uint32_t i = 0; i < LK_STORED; i++)
        BENCH_CHECK(
            rsp_checkpoint_take(pool, ck_key(i), 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, &err),
            &err);
    pthread_rwlock_t rw;
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&rw, &ra);
    pthread_rwlockattr_destroy(&ra);
    lk_hash hash;
    lk_init(&hash, 4 * LK_SPACE);
    for (uint32_t i = 0; i < LK_STORED; i++)
        lk_put(&hash, ck_key(i), i);

    static const uint32_t readers[] = {1, 2, 4, 8};
    const uint64_t dur = o->quick ? 200000000ull : 1000000000ull;
    const uint32_t reps = o->quick ? 2 : 3;
    for (size_t k = 0; k < sizeof readers / sizeof readers[0]; k++) {
        uint32_t R = readers[k];
        lk_run rr = {0}, br = {0};
        bench_samples_init(&rr.samples, 4096);
        bench_samples_init(&br.samples, 4096);
        for (uint32_t r = 0; r < reps; r++) {
            lk_shared a = {.pool = pool}, b = {.rw = &rw, .hash = &hash};
            lk_once(&a, R, dur, &rr);
            lk_once(&b, R, dur, &br);
        }
        bench_result res = {.bench = "ckpt_lookup", .baseline = "rwlock_hash"};
        snprintf(res.params, sizeof res.params,
                 "\"readers\": %u, \"stored\": %u, \"key_space\": %u, \"period_ns\": %u", R,
                 LK_STORED, LK_SPACE, LK_PERIOD_NS);
        bench_result_samples(&res, &rr.samples, &br.samples);
        res.ops_per_s = 1e9 * (double)rr.reads / (double)rr.wall_ns;
        res.baseline_ops_per_s = 1e9 * (double)br.reads / (double)br.wall_ns;
        /* hit rates near 1/2: both sides looked up the same key mix;
         * readers_cpus_used: the readers' CPU time over wall time, how many
         * cores they actually had (2 at most here) */
        snprintf(res.extra, sizeof res.extra,
                 "\"hit_rate\": %.3f, \"baseline_hit_rate\": %.3f, \"takes_per_s\": %.0f, "
                 "\"baseline_takes_per_s\": %.0f, \"readers_cpus_used\": %.2f, "
                 "\"baseline_readers_cpus_used\": %.2f",
                 (double)rr.hits / (double)rr.reads, (double)br.hits / (double)br.reads,
                 1e9 * (double)rr.takes / (double)rr.wall_ns,
                 1e9 * (double)br.takes / (double)br.wall_ns,
                 (double)rr.cpu_ns / (double)rr.wall_ns, (double)br.cpu_ns / (double)br.wall_ns);
        bench_report(o, &res);
        bench_samples_fini(&rr.samples);
        bench_samples_fini(&br.samples);
    }
    lk_fini(&hash);
    pthread_rwlock_destroy(&rw);
    rsp_pool_destroy(pool);
}

/* ---------------------------------------------------------------------- */
/* ckpt_churn                                                              */

#define CH_TAKES 100000u
#define CH_BATCH 1000u
#define CH_TIER 1024u

/* The engine-side baseline: hash + LRU list over `cap` entries; a put of
 * a new key at capacity evicts the tail (least recently used). */
typedef struct ch_lru {
    lk_hash hash;          /* key -> entry */
    uint64_t *key;         /* [cap] */
    uint32_t *prev, *next; /* [cap]: the LRU list, head = most recent */
    uint32_t head, tail, n, cap;
    uint64_t evicted;
} ch_lru;
#define CH_NIL UINT32_MAX

static void ch_init(ch_lru *l, uint32_t cap)
{
    lk_init(&l->hash, 4 * cap);
    l->key = calloc(cap, sizeof *l->key);
    l->prev = calloc(cap, sizeof *l->prev);
    l->next = calloc(cap, sizeof *l->next);
    if (!l->key || !l->prev || !l->next)
        bench_die("calloc", RSP_ENOMEM, "");
    l->head = l->tail = CH_NIL;
    l->n = 0;
    l->cap = cap;
    l->evicted = 0;
}

static void ch_fini(ch_lru *l)
{
    lk_fini(&l->hash);
    free(l->key);
    free(l->prev);
    free(l->next);
}

static void ch_push_head(ch_lru *l, uint32_t e)
{
    l->prev[e] = CH_NIL;
    l->next[e] = l->head;
    if (l->head != CH_NIL)
        l->prev[l->head] = e;
    l->head = e;
    if (l->tail == CH_NIL)
        l->tail = e;
}

static void ch_unlink(ch_lru *l, uint32_t e)
{
    if (l->prev[e] != CH_NIL)
        l->next[l->prev[e]] = l->next[e];
    else
        l->head = l->next[e];
    if (l->next[e] != CH_NIL)
        l->prev[l->next[e]] = l->prev[e];
    else
        l->tail = l->prev[e];
}

static void ch_put(ch_lru *l, uint64_t key)
{
    uint32_t e;
    if (lk_find(&l->hash, key, &e)) {
        ch_unlink(l, e);
    } else if (l->n < l->cap) {
        e = l->n++;
    } else {
        e = l->tail;
        ch_unlink(l, e);
        lk_del(&l->hash, l->key[e]);
        l->evicted++;
    }
    l->key[e] = key;
    lk_put(&l->hash, key, e);
    ch_push_head(l, e);
}

static void ch_point(const bench_opts *o, bool demote)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 8);
    cfg.max_checkpoints = demote ? CH_TIER / 2 : CH_TIER;
    cfg.max_host_checkpoints = demote ? CH_TIER / 2 : 0;
    cfg.checkpoint_demote = demote;
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);
    ck_hold(pool, 1);
    rsp_msg m = {
        .kind = RSP_MSG_CHECKPOINT, .rid = 1, .label = RSP_LABEL_MAIN, .tier = RSP_TIER_DEVICE};
    bench_samples rs, bs;
    bench_samples_init(&rs, CH_TAKES / CH_BATCH);
    bench_samples_init(&bs, CH_TAKES / CH_BATCH);
    ch_lru lru;
    ch_init(&lru, CH_TIER);
    (void)o;
    uint64_t rsp_ns = 0;
    for (uint32_t b = 0; b < CH_TAKES / CH_BATCH; b++) {
        uint64_t t0 = bench_now_ns();
        for (uint32_t i = 0; i < CH_BATCH; i++) {
            m.key = ck_key((uint64_t)b * CH_BATCH + i);
            BENCH_CHECK(rsp_post(pool, &m, NULL, RSP_WAIT_FOREVER, &err), &err);
        }
        BENCH_CHECK(rsp_barrier(pool, &err), &err);
        uint64_t ns = bench_now_ns() - t0;
        rsp_ns += ns;
        bench_samples_add(&rs, (double)ns / CH_BATCH);
        t0 = bench_now_ns();
        for (uint32_t i = 0; i < CH_BATCH; i++)
            ch_put(&lru, ck_key((uint64_t)b * CH_BATCH + i));
        bench_samples_add(&bs, (double)(bench_now_ns() - t0) / CH_BATCH);
    }
    rsp_stats s;
    BENCH_CHECK(rsp_stats_snapshot(pool, &s, &err), &err);
    uint64_t gone = s.checkpoints_evicted + s.checkpoints_demoted;
    if (s.checkpoints_taken != CH_TAKES || s.posts_failed != 0 || gone < CH_TAKES - CH_TIER)
        bench_die("ckpt_churn", RSP_EINVAL, "takes failed or did not evict");

    bench_result res = {.bench = "ckpt_churn", .baseline = "lru_hash"};
    snprintf(res.params, sizeof res.params,
             "\"takes\": %u, \"tier_slots\": %u, \"demote\": %s, \"slot_bytes\": 64", CH_TAKES,
             CH_TIER, demote ? "true" : "false");
    bench_result_samples(&res, &rs, &bs);
    res.ops_per_s = 1e9 * CH_TAKES / (double)rsp_ns;
    snprintf(res.extra, sizeof res.extra,
             "\"evicted\": %llu, \"demoted\": %llu, \"baseline_evicted\": %llu",
             (unsigned long long)s.checkpoints_evicted, (unsigned long long)s.checkpoints_demoted,
             (unsigned long long)lru.evicted);
    bench_report(o, &res);
    ch_fini(&lru);
    bench_samples_fini(&rs);
    bench_samples_fini(&bs);
    rsp_pool_destroy(pool);
}

void bench_ckpt_churn(const bench_opts *o)
{
    ch_point(o, false);
    ch_point(o, true);
}
