/*
 * The owner's role lent to a caller (rsp__actor_post_call): a call runs on
 * its caller's thread when the owner sleeps, is posted when the owner is
 * busy or the actor is ordered, keeps a thread's earlier posts first, and
 * a close that races with it waits for it. Worker threads record; the main
 * thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "actor/actor.h"
#include "util/sync.h"

#define LOG_MAX 4096

/* A message: who posted it and its number in that poster's order. */
typedef struct lend_msg {
    uint32_t poster;
    uint32_t seq;
} lend_msg;

/* The handler's record: the role holder's fields are plain (K1/K2 order
 * them; TSan checks that), the gate and the counter of entries atomic. */
typedef struct lend_fake {
    uint32_t gate;     /* futex: 0 = the handler blocks, 1 = open */
    uint32_t entered;  /* handler calls started (atomic) */
    pthread_t last;    /* role holder: the thread of the latest call */
    uint32_t next[4];  /* role holder: each poster's next number */
    uint32_t disorder; /* role holder: numbers out of a poster's order */
    uint32_t handled;  /* role holder */
    uint32_t idles;    /* role holder: lent_idle calls */
    lend_msg log[LOG_MAX];
} lend_fake;

static void lend_handle(void *ctx, void *payload, size_t size, rsp_reply *reply)
{
    lend_fake *f = ctx;
    rsp__fetch_add_seq_cst_u32(&f->entered, 1);
    while (rsp__load_acquire_u32(&f->gate) == 0)
        rsp__futex_wait(&f->gate, 0, NULL);
    f->last = pthread_self();
    if (size == sizeof(lend_msg)) {
        lend_msg m;
        memcpy(&m, payload, sizeof m);
        if (m.poster < 4) {
            f->disorder += m.seq != f->next[m.poster];
            f->next[m.poster] = m.seq + 1;
        }
        if (f->handled < LOG_MAX)
            f->log[f->handled] = m;
        reply->plan_step_id = (uint64_t)m.poster << 32 | m.seq;
    }
    f->handled++;
}

static void lend_idle(void *ctx)
{
    ((lend_fake *)ctx)->idles++;
}

static void gate_set(lend_fake *f, uint32_t v)
{
    rsp__store_release_u32(&f->gate, v);
    rsp__futex_wake_all(&f->gate);
}

static rsp__actor *make_spin(lend_fake *f, bool inline_calls, bool ordered, uint32_t spin_max)
{
    memset(f, 0, sizeof *f);
    f->gate = 1;
    rsp__actor_config cfg = {.spin_max = spin_max,
                             .handle = lend_handle,
                             .lent_idle = lend_idle,
                             .ctx = f,
                             .inline_calls = inline_calls,
                             .ordered = ordered};
    rsp__actor *a = NULL;
    assert_int_equal(rsp__actor_create(&cfg, &a, NULL), RSP_OK);
    return a;
}

/* spin_max 1: the owner sleeps as soon as its inbox is empty. */
static rsp__actor *make(lend_fake *f, bool inline_calls, bool ordered)
{
    return make_spin(f, inline_calls, ordered, 1);
}

static rsp_ticket *ticket(uint32_t poster, uint32_t seq)
{
    void *payload;
    rsp_ticket *t = rsp__ticket_new(sizeof(lend_msg), &payload);
    assert_non_null(t);
    memcpy(payload, &(lend_msg){.poster = poster, .seq = seq}, sizeof(lend_msg));
    return t;
}

/* A synchronous call (post_call, then wait); returns the reply's echo. */
static uint64_t call(rsp__actor *a, uint32_t poster, uint32_t seq)
{
    rsp_ticket *t = ticket(poster, seq);
    rsp_reply r;
    if (rsp__actor_post_call(a, t, RSP_WAIT_FOREVER, NULL) != RSP_OK)
        return UINT64_MAX;
    if (rsp__ticket_wait(t, RSP_WAIT_FOREVER, &r) != RSP_OK)
        return UINT64_MAX;
    return r.plan_step_id;
}

static void fire(rsp__actor *a, uint32_t poster, uint32_t seq)
{
    assert_int_equal(rsp__actor_post(a, ticket(poster, seq), false, RSP_WAIT_FOREVER, NULL),
                     RSP_OK);
}

/* Until the owner has announced sleep and counted it (polled with yields;
 * the bound only keeps a broken build from hanging). The owner gives up
 * its role (asleep) before it counts the sleep, so a caller that read the
 * count as soon as it saw the owner asleep could read it one short. */
static bool owner_asleep_and_counted(rsp__actor *a)
{
    return rsp__actor_asleep(a) && rsp__actor_sleeps(a) > 0;
}

static void await_asleep(rsp__actor *a)
{
    for (long i = 0; i < 10 * 1000 * 1000 && !owner_asleep_and_counted(a); i++)
        sched_yield();
    assert_true(owner_asleep_and_counted(a));
}

static void await_entered(lend_fake *f, uint32_t n)
{
    while (rsp__load_seq_cst_u32(&f->entered) < n)
        sched_yield();
}

/* ------------------------------------------------------------------------ */

static void call_runs_on_the_caller_while_the_owner_sleeps(void **state)
{
    (void)state;
    lend_fake f;
    rsp__actor *a = make(&f, true, false);
    await_asleep(a);
    const uint64_t sleeps = rsp__actor_sleeps(a);
    assert_int_equal(call(a, 0, 0), 0);
    const uint32_t idles = f.idles; /* ours now: we held the role last */
    assert_int_equal(call(a, 0, 1), 1);
    assert_true(pthread_equal(f.last, pthread_self()));
    assert_int_equal(f.idles, idles + 1); /* each lent call runs lent_idle */
    assert_int_equal(rsp__actor_lent_calls(a), 2);
    assert_int_equal(rsp__actor_handled(a), 2);
    /* The owner was never woken: still asleep, the same sleep. */
    assert_true(rsp__actor_asleep(a));
    assert_int_equal(rsp__actor_sleeps(a), sleeps);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 2);
    assert_int_equal(f.disorder, 0);
}

static void call_is_posted_when_lending_is_off_or_ordered(void **state)
{
    (void)state;
    lend_fake f;
    for (int ordered = 0; ordered < 2; ordered++) {
        rsp__actor *a = make(&f, ordered == 1, ordered == 1);
        await_asleep(a);
        assert_int_equal(call(a, 0, 0), 0);
        assert_int_equal(rsp__actor_lent_calls(a), 0);
        assert_false(pthread_equal(f.last, pthread_self()));
        rsp__actor_destroy(a);
    }
}

typedef struct caller_arg {
    rsp__actor *a;
    uint32_t poster;
    uint32_t count;
    uint32_t every; /* a fire-and-forget post before every `every`-th call, 0: none */
    uint32_t wrong; /* recorded: replies that did not echo the call */
} caller_arg;

static void *caller_main(void *p)
{
    caller_arg *c = p;
    uint32_t seq = 0;
    for (uint32_t i = 0; i < c->count; i++) {
        if (c->every && i % c->every == 0)
            fire(c->a, c->poster, seq++);
        const uint64_t want = (uint64_t)c->poster << 32 | seq;
        c->wrong += call(c->a, c->poster, seq++) != want;
        if (i % 64 == 0)
            sched_yield(); /* let the owner fall asleep now and then */
    }
    return NULL;
}

static void call_is_posted_while_the_owner_is_busy(void **state)
{
    (void)state;
    lend_fake f;
    rsp__actor *a = make(&f, true, false);
    gate_set(&f, 0);
    fire(a, 1, 0);
    await_entered(&f, 1); /* the owner is in the handler, blocked */
    caller_arg c = {.a = a, .poster = 0, .count = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, caller_main, &c), 0);
    while (rsp__actor_depth(a) == 0) /* the call is queued, not run inline */
        sched_yield();
    gate_set(&f, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(c.wrong, 0);
    assert_int_equal(rsp__actor_lent_calls(a), 0);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 2);
}

/* Messages posted while a caller holds the role do not wake the owner; the
 * caller wakes it when it gives the role back, and they are handled. */
static void posts_during_a_lent_call_reach_the_owner(void **state)
{
    (void)state;
    lend_fake f;
    rsp__actor *a = make(&f, true, false);
    await_asleep(a);
    gate_set(&f, 0);
    caller_arg c = {.a = a, .poster = 0, .count = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, caller_main, &c), 0);
    await_entered(&f, 1); /* the caller holds the role, blocked in the handler */
    for (uint32_t i = 0; i < 3; i++)
        fire(a, 1, i);
    rsp_ticket *t = ticket(1, 3);
    assert_int_equal(rsp__actor_post(a, t, true, RSP_WAIT_FOREVER, NULL), RSP_OK);
    gate_set(&f, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    rsp_reply r;
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, &r), RSP_OK);
    assert_int_equal(r.plan_step_id, (1ull << 32) | 3);
    assert_int_equal(c.wrong, 0);
    assert_int_equal(rsp__actor_lent_calls(a), 1);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 5);
    assert_int_equal(f.disorder, 0);
}

/* An owner awake when a call comes (here: a post just woke it, and its
 * idle spin would outlast the gap to each next call) answers it, then
 * parks at once instead of spinning: the caller's next calls take the
 * role. With the owner's usual idle spin (50 us) and calls back to back,
 * an owner that spun after each answer would answer every call itself. */
static void owner_parks_after_answering_a_posted_call(void **state)
{
    (void)state;
    lend_fake f;
    rsp__actor *a = make_spin(&f, true, false, 0);
    fire(a, 1, 0);
    caller_arg c = {.a = a, .poster = 0, .count = 2000};
    caller_main(&c);
    assert_int_equal(c.wrong, 0);
    assert_true(rsp__actor_lent_calls(a) > 0);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 2001);
}

typedef struct closer_arg {
    rsp__actor *a;
    rsp_status st;
} closer_arg;

static void *closer_main(void *p)
{
    closer_arg *c = p;
    rsp_ticket *t = ticket(3, 0);
    c->st = rsp__actor_close(c->a, t, true, NULL);
    if (c->st == RSP_OK)
        c->st = rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL);
    return NULL;
}

/* A close while a caller holds the role waits for it: the last message is
 * handled after the call, by the owner; calls after the close are refused. */
static void close_racing_a_lent_call_waits_for_it(void **state)
{
    (void)state;
    lend_fake f;
    rsp__actor *a = make(&f, true, false);
    await_asleep(a);
    gate_set(&f, 0);
    caller_arg c = {.a = a, .poster = 0, .count = 1};
    pthread_t th, cl;
    assert_int_equal(pthread_create(&th, NULL, caller_main, &c), 0);
    await_entered(&f, 1);
    closer_arg ca = {.a = a};
    assert_int_equal(pthread_create(&cl, NULL, closer_main, &ca), 0);
    while (!rsp__actor_closed(a))
        sched_yield();
    gate_set(&f, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(pthread_join(cl, NULL), 0);
    assert_int_equal(c.wrong, 0);
    assert_int_equal(ca.st, RSP_OK);
    /* After the close: refused, not run inline. */
    rsp_ticket *t = ticket(0, 1);
    assert_int_equal(rsp__actor_post_call(a, t, RSP_WAIT_FOREVER, NULL), RSP_ESHUTDOWN);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 2);
    assert_int_equal(f.log[0].poster, 0); /* the call first, then the last message */
    assert_int_equal(f.log[1].poster, 3);
}

/* Callers that mix fire-and-forget posts and calls, while the owner sleeps
 * and wakes: every message is handled once, each poster's in its order
 * (a thread's earlier posts before its later call), whoever holds the role. */
static void calls_and_posts_keep_each_posters_order(void **state)
{
    (void)state;
    lend_fake f;
    rsp__actor *a = make(&f, true, false);
    enum { CALLERS = 3, CALLS = 3000 };
    caller_arg c[CALLERS];
    pthread_t th[CALLERS];
    for (uint32_t i = 0; i < CALLERS; i++) {
        c[i] = (caller_arg){.a = a, .poster = i, .count = CALLS, .every = i + 1};
        assert_int_equal(pthread_create(&th[i], NULL, caller_main, &c[i]), 0);
    }
    uint32_t expect = 0;
    for (uint32_t i = 0; i < CALLERS; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(c[i].wrong, 0);
        expect += CALLS + (CALLS + i) / (i + 1);
    }
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, expect);
    assert_int_equal(f.disorder, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(call_runs_on_the_caller_while_the_owner_sleeps),
        cmocka_unit_test(call_is_posted_when_lending_is_off_or_ordered),
        cmocka_unit_test(call_is_posted_while_the_owner_is_busy),
        cmocka_unit_test(posts_during_a_lent_call_reach_the_owner),
        cmocka_unit_test(owner_parks_after_answering_a_posted_call),
        cmocka_unit_test(close_racing_a_lent_call_waits_for_it),
        cmocka_unit_test(calls_and_posts_keep_each_posters_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
