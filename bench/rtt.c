/*
 * rtt: post + wait of a barrier message, beside a bare futex ping-pong.
 * SPDX-License-Identifier: Apache-2.0
 *
 * owner asleep: before each sample the client sleeps GAP (1 ms), long
 *   enough for the owner to finish any adaptive spin and sleep on its futex;
 *   then one rsp_barrier (post + wait) is timed.
 * owner busy: rsp_barrier back to back, so each post finds the owner awake
 *   (still handling or spinning after the previous message).
 * The floor, measured in the same run: two threads passing a token with
 *   nothing but a futex each (store, FUTEX_WAKE; FUTEX_WAIT for the answer),
 *   once with the same GAP before each round trip (compared with "asleep":
 *   both pay the same wake-from-idle of this machine), once back to back
 *   (compared with "busy").
 * Each rsp line also says how often the owner went to sleep per round trip
 * (rsp__actor_sleeps, read through the internal pool struct): ~1 means every
 * post had to wake it, ~0 that it was awake when the post arrived.
 */
#include <pthread.h>
#include <stdio.h>

#include "actor/actor.h"
#include "bench.h"
#include "pool.h"
#include "util/sync.h"

#define GAP_NS 1000000u

/* The ping-pong: main writes ping and wakes; the partner answers on pong. */
typedef struct pingpong {
    uint32_t ping; /* main -> partner: round number; UINT32_MAX = stop */
    uint32_t pong; /* partner -> main: round number echoed */
} pingpong;

static void *pp_partner(void *arg)
{
    pingpong *pp = arg;
    bench_pin_partner(); /* where the owner runs, under --pin */
    uint32_t seen = 0;
    for (;;) {
        uint32_t v;
        /* A1: pairs with R1 in pp_round (the round number). */
        while ((v = rsp__load_acquire_u32(&pp->ping)) == seen)
            rsp__futex_wait(&pp->ping, seen, NULL);
        seen = v;
        if (v == UINT32_MAX)
            return NULL;
        /* R2: pairs with A2 in pp_round. */
        rsp__store_release_u32(&pp->pong, v);
        rsp__futex_wake(&pp->pong, 1);
    }
}

/* One round trip; returns its ns. */
static uint64_t pp_round(pingpong *pp, uint32_t round)
{
    uint64_t t0 = bench_now_ns();
    rsp__store_release_u32(&pp->ping, round); /* R1 */
    rsp__futex_wake(&pp->ping, 1);
    uint32_t v;
    while ((v = rsp__load_acquire_u32(&pp->pong)) != round) /* A2 */
        rsp__futex_wait(&pp->pong, v, NULL);
    return bench_now_ns() - t0;
}

static void measure_floor(uint32_t warm, uint32_t n, uint64_t gap, bench_samples *out)
{
    pingpong pp = {0, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, pp_partner, &pp) != 0)
        bench_die("pthread_create", RSP_ENOMEM, "");
    for (uint32_t i = 1; i <= warm + n; i++) {
        if (gap)
            bench_sleep_ns(gap);
        uint64_t ns = pp_round(&pp, i);
        if (i > warm)
            bench_samples_add(out, (double)ns);
    }
    rsp__store_release_u32(&pp.ping, UINT32_MAX);
    rsp__futex_wake(&pp.ping, 1);
    pthread_join(t, NULL);
}

static void measure_rsp(rsp_pool *pool, uint32_t warm, uint32_t n, uint64_t gap, bench_samples *out)
{
    rsp_error err = {0};
    for (uint32_t i = 0; i < warm + n; i++) {
        if (gap)
            bench_sleep_ns(gap);
        uint64_t t0 = bench_now_ns();
        BENCH_CHECK(rsp_barrier(pool, &err), &err);
        uint64_t ns = bench_now_ns() - t0;
        if (i >= warm)
            bench_samples_add(out, (double)ns);
    }
}

static void report(const bench_opts *o, const char *owner, const char *floor_name,
                   const bench_samples *rs, const bench_samples *fs, uint64_t gap,
                   double sleeps_per_op)
{
    bench_result res = {.bench = "rtt", .baseline = floor_name};
    snprintf(res.params, sizeof res.params, "\"owner\": \"%s\", \"gap_ns\": %llu", owner,
             (unsigned long long)gap);
    bench_result_samples(&res, rs, fs);
    snprintf(res.extra, sizeof res.extra, "\"owner_sleeps_per_op\": %.2f", sleeps_per_op);
    bench_report(o, &res);
}

void bench_rtt(const bench_opts *o)
{
    rsp_pool_config cfg;
    bench_config(&cfg, BENCH_TINY, 16);
    rsp_error err = {0};
    rsp_pool *pool;
    BENCH_CHECK(rsp_pool_create(&cfg, &pool, &err), &err);

    uint32_t asleep_n = o->quick ? 400 : 2000;
    uint32_t busy_n = o->quick ? 20000 : 200000;
    bench_samples rs, fs;

    /* Owner asleep vs the floor with the same gap; alternate halves so both
     * see the same machine state. */
    bench_samples_init(&rs, asleep_n);
    bench_samples_init(&fs, asleep_n);
    uint64_t sleeps = 0;
    for (int half = 0; half < 2; half++) {
        uint64_t s0 = rsp__actor_sleeps(pool->actor);
        measure_rsp(pool, 20, asleep_n / 2, GAP_NS, &rs);
        sleeps += rsp__actor_sleeps(pool->actor) - s0;
        measure_floor(20, asleep_n / 2, GAP_NS, &fs);
    }
    report(o, "asleep", "futex_pingpong_gap", &rs, &fs, GAP_NS,
           (double)sleeps / (double)(asleep_n + 40));
    bench_samples_fini(&rs);
    bench_samples_fini(&fs);

    bench_samples_init(&rs, busy_n);
    bench_samples_init(&fs, busy_n);
    sleeps = 0;
    for (int half = 0; half < 2; half++) {
        uint64_t s0 = rsp__actor_sleeps(pool->actor);
        measure_rsp(pool, 1000, busy_n / 2, 0, &rs);
        sleeps += rsp__actor_sleeps(pool->actor) - s0;
        measure_floor(1000, busy_n / 2, 0, &fs);
    }
    report(o, "busy", "futex_pingpong", &rs, &fs, 0, (double)sleeps / (double)(busy_n + 2000));
    bench_samples_fini(&rs);
    bench_samples_fini(&fs);

    rsp_pool_destroy(pool);
}
