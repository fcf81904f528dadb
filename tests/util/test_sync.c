/*
 * test_sync: the memory-order contract of src/util/sync.h, and the
 * reference counts and hand-overs of the library that rely on it
 * (docs/ordering.md: T1/T2/T3 tickets, X1 plan references, HV/HW host
 * fences).
 * SPDX-License-Identifier: Apache-2.0
 *
 * What these can catch, honestly: x86-64 is strongly ordered (TSO), so a
 * missing acquire or release is invisible to a plain run here; a weakly
 * ordered CPU (aarch64) reorders what these tests would need to observe.
 * Two things make them bite anyway:
 *  - ThreadSanitizer models the C11 orders of __atomic accesses whatever
 *    the CPU: a release store or acq_rel decrement weakened to relaxed
 *    leaves no happens-before edge, and the plain reads of the payload race
 *    with its rewrite or free (reported, and the TSan tree fails). Every
 *    hand-over below puts plain data on one side of the edge for that.
 *  - Store buffering IS visible on x86: the store->load test fails on x86
 *    if the seq_cst RMW were a plain (release) store. With the real
 *    wrappers it can never fail.
 * Under ASan a drop that frees twice or too early shows as a double free or
 * use after free. A lost wake-up hangs (the ctest timeout fails it).
 *
 * cmocka is not thread-safe: helper threads record, the main thread
 * asserts. No assertion depends on timing.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "actor/actor.h"
#include "publish/publish.h"
#include "util/sync.h"

/* Sanitizer builds (set by tests/util/CMakeLists.txt) run fewer rounds:
 * every atomic is a runtime call under TSan. */
#ifndef RSP_TEST_SCALE
#define RSP_TEST_SCALE 1
#endif
#define SCALED(n) ((n) / RSP_TEST_SCALE)

#define THREADS 4

static void spin_pause(unsigned *i)
{
    if (++*i % 64 == 0)
        sched_yield(); /* the other side may share our core */
    else
        rsp__cpu_relax();
}

/* A reusable barrier for the litmus rounds: arrive (seq_cst RMW), spin
 * until all n of this round arrived. */
static void round_barrier(uint32_t *count, uint32_t n, uint32_t round)
{
    rsp__fetch_add_seq_cst_u32(count, 1);
    unsigned i = 0;
    while (rsp__load_acquire_u32(count) < n * (round + 1))
        spin_pause(&i);
}

/* ------------------------------------------------------------------------ */
/* The wrappers                                                              */
/* ------------------------------------------------------------------------ */

enum { ADDS = 200000 };

typedef struct add_ctx {
    uint32_t c32;
    uint64_t c64;
    uint32_t start;
} add_ctx;

static void *adder(void *arg)
{
    add_ctx *c = arg;
    round_barrier(&c->start, THREADS, 0);
    for (uint32_t i = 0; i < SCALED(ADDS); i++) {
        rsp__fetch_add_relaxed_u32(&c->c32, 1);
        rsp__fetch_add_relaxed_u64(&c->c64, 1u << 20);
    }
    return NULL;
}

/* Even relaxed, an RMW is one indivisible step: no increment is lost. */
static void relaxed_rmw_loses_no_increment(void **state)
{
    (void)state;
    add_ctx c = {0};
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, adder, &c), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(c.c32, (uint32_t)THREADS * SCALED(ADDS));
    assert_true(c.c64 == ((uint64_t)THREADS * SCALED(ADDS)) << 20);
}

/* ------------------------------------------------------------------------ */

enum { MP_ROUNDS = 20000, MP_WORDS = 16 };

typedef struct mp_ctx {
    uint32_t seq;               /* release store by the producer, acquire load by the consumer */
    uint32_t ack;               /* and back */
    uint64_t payload[MP_WORDS]; /* plain: carried only by the two edges */
    uint32_t mismatches;        /* consumer only; read after join */
} mp_ctx;

static void *mp_consumer(void *arg)
{
    mp_ctx *c = arg;
    for (uint32_t r = 1; r <= SCALED(MP_ROUNDS); r++) {
        unsigned i = 0;
        while (rsp__load_acquire_u32(&c->seq) != r)
            spin_pause(&i);
        for (int w = 0; w < MP_WORDS; w++)
            if (c->payload[w] != (uint64_t)r * 1000 + (uint64_t)w)
                c->mismatches++;
        rsp__store_release_u32(&c->ack, r); /* our reads before its next rewrite */
    }
    return NULL;
}

/* Message passing, the shape of T1/T2, HV1/HV2, L1: plain writes, a release
 * store; an acquire load that sees it, plain reads of all of them. Under
 * TSan a relaxed store or load on either edge is a reported race. */
static void release_store_publishes_plain_data_to_acquire_load(void **state)
{
    (void)state;
    mp_ctx *c = calloc(1, sizeof *c);
    assert_non_null(c);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, mp_consumer, c), 0);
    for (uint32_t r = 1; r <= SCALED(MP_ROUNDS); r++) {
        unsigned i = 0;
        while (rsp__load_acquire_u32(&c->ack) != r - 1)
            spin_pause(&i);
        for (int w = 0; w < MP_WORDS; w++)
            c->payload[w] = (uint64_t)r * 1000 + (uint64_t)w;
        rsp__store_release_u32(&c->seq, r);
    }
    pthread_join(th, NULL);
    assert_int_equal(c->mismatches, 0);
    free(c);
}

/* ------------------------------------------------------------------------ */

enum { OBJECTS = 20000 };

typedef struct rc_obj {
    uint32_t refs;
    uint32_t payload[7]; /* plain; read by every holder before its drop */
} rc_obj;

typedef struct rc_ctx {
    rc_obj **objs;
    uint32_t frees;      /* atomic */
    uint32_t mismatches; /* atomic */
    uint32_t start;
} rc_ctx;

typedef struct rc_arg {
    rc_ctx *c;
    uint32_t id;
} rc_arg;

static void *rc_holder(void *arg)
{
    rc_arg *a = arg;
    rc_ctx *c = a->c;
    const uint32_t n = SCALED(OBJECTS);
    round_barrier(&c->start, THREADS, 0);
    /* Each thread walks from its own offset, so which holder drops last
     * (and frees) varies from object to object. */
    for (uint32_t k = 0; k < n; k++) {
        uint32_t i = (k + a->id * (n / THREADS)) % n;
        rc_obj *o = c->objs[i];
        uint32_t bad = 0;
        for (int w = 0; w < 7; w++)
            bad += o->payload[w] != i + (uint32_t)w;
        if (bad)
            rsp__fetch_add_relaxed_u32(&c->mismatches, bad);
        /* The pattern of T3, X1 and RC1/RC2: an acq_rel decrement; the one
         * that reaches zero frees. */
        if (rsp__fetch_add_acq_rel_u32(&o->refs, UINT32_MAX) == 1) {
            o->payload[0] = UINT32_MAX; /* the freer's write: after every read */
            free(o);
            rsp__fetch_add_relaxed_u32(&c->frees, 1);
        }
    }
    return NULL;
}

/* Every object is freed exactly once, by whichever holder drops last, after
 * every holder's reads. ASan: a double free or early free; TSan: the
 * holders' reads race with the free unless the drop is acq_rel. */
static void acq_rel_drop_frees_exactly_once_after_every_holder(void **state)
{
    (void)state;
    const uint32_t n = SCALED(OBJECTS);
    rc_ctx c = {0};
    c.objs = calloc(n, sizeof *c.objs);
    assert_non_null(c.objs);
    for (uint32_t i = 0; i < n; i++) {
        c.objs[i] = malloc(sizeof *c.objs[i]);
        assert_non_null(c.objs[i]);
        c.objs[i]->refs = THREADS;
        for (uint32_t w = 0; w < 7; w++)
            c.objs[i]->payload[w] = i + w;
    }
    pthread_t th[THREADS];
    rc_arg args[THREADS];
    for (uint32_t t = 0; t < THREADS; t++) {
        args[t] = (rc_arg){&c, t};
        assert_int_equal(pthread_create(&th[t], NULL, rc_holder, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    assert_int_equal(c.frees, n);
    assert_int_equal(c.mismatches, 0);
    free(c.objs);
}

/* ------------------------------------------------------------------------ */

enum { SB_ROUNDS = 4000000 };

typedef struct sb_ctx {
    uint32_t *x, *y;    /* per round: each side's announcement */
    uint8_t *missed[2]; /* per round: this side did not see the other's */
    uint32_t go;
} sb_ctx;

typedef struct sb_arg {
    sb_ctx *c;
    int side;
} sb_arg;

static void *sb_side(void *arg)
{
    sb_arg *a = arg;
    sb_ctx *c = a->c;
    /* One CPU each when there are two: the reordering needs both sides
     * running at once (a failed pin only makes the test weaker). */
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(a->side, &cs);
    (void)pthread_setaffinity_np(pthread_self(), sizeof cs, &cs);
    round_barrier(&c->go, 2, 0);
    uint32_t *mine = a->side ? c->y : c->x;
    const uint32_t *theirs = a->side ? c->x : c->y;
    uint8_t *missed = c->missed[a->side];
    /* No barrier per round: both sides race through the rounds, and while
     * they overlap, each round is a fresh store-buffering litmus. */
    for (uint32_t r = 0; r < SCALED(SB_ROUNDS); r++) {
        /* Announce, then look: the shape of F1/F2, C1/C2, S1/S2, W1/W2 and
         * HW1/HW2. */
        rsp__fetch_add_seq_cst_u32(&mine[r], 1);
        missed[r] = rsp__load_seq_cst_u32(&theirs[r]) == 0;
    }
    return NULL;
}

/* Store buffering: with a seq_cst RMW then a seq_cst load on both sides,
 * at least one side sees the other's announcement, every round. With a
 * release store and an acquire load instead (a plain MOV each on x86) this
 * failed in each of 3 runs on a loaded 2-core machine (114 to 2,385 rounds
 * of 4,000,000 missed on both sides), so the test sees a wrong announce;
 * with the real wrappers it never fails. */
static void seq_cst_rmw_then_load_never_both_miss(void **state)
{
    (void)state;
    const uint32_t n = SCALED(SB_ROUNDS);
    sb_ctx c = {0};
    c.x = calloc(n, sizeof *c.x);
    c.y = calloc(n, sizeof *c.y);
    c.missed[0] = calloc(n, 1);
    c.missed[1] = calloc(n, 1);
    assert_true(c.x && c.y && c.missed[0] && c.missed[1]);
    pthread_t th[2];
    sb_arg args[2] = {{&c, 0}, {&c, 1}};
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, sb_side, &args[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    uint32_t both = 0;
    for (uint32_t r = 0; r < n; r++)
        both += c.missed[0][r] && c.missed[1][r];
    free(c.x);
    free(c.y);
    free(c.missed[0]);
    free(c.missed[1]);
    assert_int_equal(both, 0);
}

/* ------------------------------------------------------------------------ */
/* The library's hand-overs                                                  */
/* ------------------------------------------------------------------------ */

enum { TICKETS = 4000 };

/* The handler writes the whole reply: the waiter reads all of it after T2,
 * then drops (T3); when the owner's drop comes last, the owner frees. */
static void echo_handle(void *ctx, void *payload, size_t size, rsp_reply *reply)
{
    (void)ctx, (void)size;
    uint64_t id;
    memcpy(&id, payload, sizeof id);
    reply->plan_step_id = id;
    reply->label = (rsp_label_id)(id * 3);
    snprintf(reply->error.message, sizeof reply->error.message, "echo %llu",
             (unsigned long long)id);
}

typedef struct ticket_arg {
    rsp__actor *a;
    uint32_t id;
    uint32_t mismatches; /* this thread's; read after join */
    uint32_t failures;
} ticket_arg;

static void *ticket_client(void *arg)
{
    ticket_arg *c = arg;
    for (uint32_t i = 0; i < SCALED(TICKETS); i++) {
        const uint64_t id = (uint64_t)c->id << 32 | i;
        void *payload;
        if (i % 4 == 3) {
            /* Fire-and-forget, from the actor's pool: the owner's drop is the
             * last, and the ticket is recycled to another poster (T3, then
             * the free stack's hand-over). */
            rsp_ticket *t = rsp__actor_ticket_new(c->a, sizeof id, &payload);
            if (t)
                memcpy(payload, &id, sizeof id);
            if (!t || rsp__actor_post(c->a, t, false, UINT64_MAX, NULL) != RSP_OK)
                c->failures++;
            continue;
        }
        rsp_ticket *t = rsp__ticket_new(sizeof id, &payload);
        if (t)
            memcpy(payload, &id, sizeof id);
        if (!t || rsp__actor_post(c->a, t, true, UINT64_MAX, NULL) != RSP_OK) {
            c->failures++;
            continue;
        }
        rsp_reply r;
        if (rsp__ticket_wait(t, UINT64_MAX, &r) != RSP_OK) {
            c->failures++;
            continue;
        }
        char want[64];
        snprintf(want, sizeof want, "echo %llu", (unsigned long long)id);
        if (r.plan_step_id != id || r.label != (rsp_label_id)(id * 3) ||
            strcmp(r.error.message, want) != 0)
            c->mismatches++;
    }
    return NULL;
}

/* Every waiter reads its complete reply (T1/T2), and each kept ticket is
 * freed once, after both the owner's and the waiter's last access (T3):
 * ASan sees an early or double free, TSan a missing order. */
static void ticket_replies_are_read_before_the_last_drop(void **state)
{
    (void)state;
    /* spin_max 1: the owner sleeps at once, so waiters sleep too and both
     * wake-up paths run. */
    rsp__actor_config cfg = {.capacity = 64, .spin_max = 1, .handle = echo_handle};
    rsp__actor *a = NULL;
    assert_int_equal(rsp__actor_create(&cfg, &a, NULL), RSP_OK);
    pthread_t th[THREADS];
    ticket_arg args[THREADS];
    for (uint32_t t = 0; t < THREADS; t++) {
        args[t] = (ticket_arg){.a = a, .id = t};
        assert_int_equal(pthread_create(&th[t], NULL, ticket_client, &args[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    rsp__actor_destroy(a);
    for (int t = 0; t < THREADS; t++) {
        assert_int_equal(args[t].failures, 0);
        assert_int_equal(args[t].mismatches, 0);
    }
}

/* ------------------------------------------------------------------------ */

enum { PLANS = 3000, READERS = 3 };

static rsp_plan *make_plan(rsp__publisher *p, uint64_t step)
{
    int32_t si[16];
    bool hs[16];
    uint64_t gen[4];
    for (uint32_t i = 0; i < 16; i++) {
        si[i] = (int32_t)(step * 5 + i);
        hs[i] = ((step + i) & 1) != 0;
    }
    for (uint32_t i = 0; i < 4; i++)
        gen[i] = step * 10 + i;
    rsp__plan_label_src src = {.label = 0,
                               .name = "main",
                               .num_rows = 4,
                               .length = 16,
                               .slot_indices = si,
                               .has_state = hs,
                               .generations = gen};
    rsp_plan *plan = NULL;
    if (rsp__plan_new(p, step, false, (rsp_event){0}, &src, 1, &plan, NULL) != RSP_OK)
        return NULL;
    return plan;
}

static uint32_t plan_mismatches(const rsp_plan *plan)
{
    uint64_t step = rsp__plan_step_id(plan);
    rsp_addressing a;
    if (rsp__plan_addressing(plan, 0, &a, NULL) != RSP_OK || a.step_id != step || a.length != 16 ||
        a.num_rows != 4)
        return 1;
    uint32_t bad = 0;
    for (uint32_t i = 0; i < 16; i++)
        bad += a.slot_indices[i] != (int32_t)(step * 5 + i) ||
               a.has_state[i] != (((step + i) & 1) != 0);
    for (uint32_t i = 0; i < 4; i++)
        bad += a.generations[i] != step * 10 + i;
    return bad;
}

typedef struct plan_reader_arg {
    rsp__publisher *p;
    uint32_t *stop;
    uint32_t refs_taken; /* relaxed atomic: the owner watches it */
    uint32_t mismatches; /* this reader's; read after join */
} plan_reader_arg;

static void *plan_reader(void *arg)
{
    plan_reader_arg *c = arg;
    rsp__reader_register(NULL);
    while (!rsp__load_acquire_u32(c->stop)) {
        rsp__read_begin();
        const rsp_plan *plan = rsp__publisher_live(c->p);
        const rsp_plan *held = plan ? rsp__plan_ref(plan) : NULL;
        rsp__read_end();
        if (!held) {
            sched_yield();
            continue;
        }
        /* Outside the section: only our reference keeps the plan (X1). */
        sched_yield();
        c->mismatches += plan_mismatches(held);
        (void)rsp__fetch_add_relaxed_u32(&c->refs_taken, 1);
        rsp__plan_unref(held);
    }
    rsp__reader_unregister();
    return NULL;
}

/* Readers reference plans, leave the read section, read them, unref; the
 * owner meanwhile retires every plan (to the reclaimer thread and, at the
 * small cap, its own synchronize_rcu). Each plan is freed once, by the last of the reclaimer
 * and its readers (destroy waits for the count of live plans to reach zero:
 * a lost drop hangs it, a double one is an ASan double free), after every
 * reader's reads (TSan: a missing order on X1 is a race with the free). */
static void plan_refs_from_many_readers_free_each_plan_once(void **state)
{
    (void)state;
    rsp__publisher *p = NULL;
    uint32_t stop = 0;
    assert_int_equal(rsp__publisher_create(8, &p, NULL), RSP_OK);
    /* This thread plays the owner. */
    rsp__publish_live(p, make_plan(p, 1));
    pthread_t th[READERS];
    plan_reader_arg args[READERS];
    for (int i = 0; i < READERS; i++) {
        args[i] = (plan_reader_arg){.p = p, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, plan_reader, &args[i]), 0);
    }
    uint32_t failed = 0;
    for (uint64_t s = 2; s <= SCALED(PLANS); s++) {
        rsp_plan *plan = make_plan(p, s);
        if (!plan) {
            failed++;
            continue;
        }
        rsp__publish_live(p, plan);
        if (s % 16 == 0)
            sched_yield(); /* let the readers take references to this one */
    }
    /* On a loaded machine the readers may not have run yet: go on
     * publishing (yielding) until one of them took a reference, so the
     * test checks what it is about; bounded, refs > 0 fails below. */
    for (uint64_t s = SCALED(PLANS) + 1, n = 0; n < 200000; s++, n++) {
        uint32_t seen = 0;
        for (int i = 0; i < READERS; i++)
            seen += rsp__load_relaxed_u32(&args[i].refs_taken);
        if (seen >= READERS)
            break;
        rsp_plan *plan = make_plan(p, s);
        if (!plan) {
            failed++;
            break;
        }
        rsp__publish_live(p, plan);
        sched_yield();
    }
    rsp__store_release_u32(&stop, 1);
    uint32_t refs = 0;
    for (int i = 0; i < READERS; i++) {
        pthread_join(th[i], NULL);
        refs += args[i].refs_taken;
        assert_int_equal(args[i].mismatches, 0);
    }
    rsp__publisher_destroy(p); /* waits for every plan's last drop */
    assert_int_equal(failed, 0);
    assert_true(refs > 0);
}

/* ------------------------------------------------------------------------ */

enum { RAISES = 2000, FENCE_WAITERS = 3 };

typedef struct fence_ctx {
    rsp_host_fence *f;
    uint64_t *data; /* data[v] written (plain) before the fence reaches v */
} fence_ctx;

typedef struct fence_arg {
    fence_ctx *c;
    uint32_t id;
    uint32_t mismatches, failures; /* this waiter's; read after join */
} fence_arg;

static void *fence_waiter(void *arg)
{
    fence_arg *w = arg;
    for (uint64_t v = 1 + w->id; v <= SCALED(RAISES); v += FENCE_WAITERS) {
        /* HW1/HW2: a raise is never missed (a lost wake-up hangs here);
         * HV1/HV2: the data written before the raise is visible. */
        if (rsp_host_fence_wait(w->c->f, v, RSP_WAIT_FOREVER) != RSP_OK)
            w->failures++;
        else if (w->c->data[v] != v * 7)
            w->mismatches++;
    }
    return NULL;
}

/* A signaller raises a host fence one value at a time, writing plain data
 * for each value first; waiters wait for every value (sleeping on the futex
 * most of the time) and read its data. */
static void fence_waiters_see_every_raise_and_its_data(void **state)
{
    (void)state;
    fence_ctx c;
    assert_int_equal(rsp_host_fence_create(&c.f, NULL), RSP_OK);
    c.data = calloc(SCALED(RAISES) + 1, sizeof *c.data);
    assert_non_null(c.data);
    pthread_t th[FENCE_WAITERS];
    fence_arg args[FENCE_WAITERS];
    for (uint32_t i = 0; i < FENCE_WAITERS; i++) {
        args[i] = (fence_arg){.c = &c, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, fence_waiter, &args[i]), 0);
    }
    for (uint64_t v = 1; v <= SCALED(RAISES); v++) {
        c.data[v] = v * 7;
        rsp_host_fence_signal(c.f, v);
        if (v % 8 == 0)
            sched_yield(); /* let waiters fall asleep between raises */
    }
    for (int i = 0; i < FENCE_WAITERS; i++)
        pthread_join(th[i], NULL);
    rsp_host_fence_destroy(c.f);
    free(c.data);
    for (int i = 0; i < FENCE_WAITERS; i++) {
        assert_int_equal(args[i].failures, 0);
        assert_int_equal(args[i].mismatches, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(relaxed_rmw_loses_no_increment),
        cmocka_unit_test(release_store_publishes_plain_data_to_acquire_load),
        cmocka_unit_test(acq_rel_drop_frees_exactly_once_after_every_holder),
        cmocka_unit_test(seq_cst_rmw_then_load_never_both_miss),
        cmocka_unit_test(ticket_replies_are_read_before_the_last_drop),
        cmocka_unit_test(plan_refs_from_many_readers_free_each_plan_once),
        cmocka_unit_test(fence_waiters_see_every_raise_and_its_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
