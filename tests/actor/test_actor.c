/*
 * The actor alone, with a fake handler and a payload of its own (the actor
 * is a transport: it knows no message schema): inbox order, credits,
 * wake-ups, tickets, payloads, the last message. Worker threads record; the
 * main thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "actor/actor.h"
#include "util/error.h"
#include "util/sync.h"

/* Sanitizer builds run the alternation test with fewer rounds (set by
 * tests/actor/CMakeLists.txt); the plain build runs the full 200,000. */
#ifndef RSP_TEST_ALTERNATIONS
#define RSP_TEST_ALTERNATIONS 200000
#endif

#define MAX_PRODUCERS 8

/* The fake's messages: what the fake handler should do, and an id
 * (producer << 32 | sequence number for FAKE_ORDERED). */
typedef enum fake_op {
    FAKE_ORDERED, /* checked for per-producer order */
    FAKE_FAIL,    /* answered RSP_EINVAL */
    FAKE_ECHO,    /* answered with its id; sometimes late */
    FAKE_LAST,    /* posted with rsp__actor_close */
    FAKE_BYTES,   /* a payload of any size: byte i is (id + i) & 0xff */
} fake_op;

typedef struct fake_msg {
    fake_op op;
    uint64_t id;
} fake_msg;

/* The fake handler's record. */
typedef struct fake {
    uint32_t gate;                    /* futex: 0 = handler blocks, 1 = open */
    uint32_t entered;                 /* handler calls started (atomic) */
    uint64_t next_seq[MAX_PRODUCERS]; /* owner only */
    uint64_t out_of_order;            /* owner only; read after join */
    uint64_t handled;                 /* owner only; read after join */
    uint64_t lasts;                   /* owner only: FAKE_LAST messages seen */
    uint64_t bad_payloads;            /* owner only: wrong size, alignment or bytes */
    uint32_t settles;                 /* cfg.settle calls (atomic) */
    uint64_t first_settled;           /* handled at the first settle (atomic) */
    uint64_t last_settled;            /* handled at the latest settle (atomic) */
} fake;

/* A FAKE_BYTES payload of size bytes: a fake_msg when it fits, then the
 * pattern; smaller ones are the pattern alone (op taken as FAKE_BYTES). */
static void bytes_fill(unsigned char *b, size_t size, uint64_t id)
{
    for (size_t i = 0; i < size; i++)
        b[i] = (unsigned char)(id + i);
    if (size >= sizeof(fake_msg))
        memcpy(b, &(fake_msg){.op = FAKE_BYTES, .id = id}, sizeof(fake_msg));
}

static bool bytes_ok(const unsigned char *b, size_t size, uint64_t id)
{
    size_t from = size >= sizeof(fake_msg) ? sizeof(fake_msg) : 0;
    for (size_t i = from; i < size; i++)
        if (b[i] != (unsigned char)(id + i))
            return false;
    return true;
}

static void fake_handle(void *ctx, void *payload, size_t size, rsp_reply *reply)
{
    fake *f = ctx;
    rsp__fetch_add_u32(&f->entered, 1);
    while (rsp__load_acquire_u32(&f->gate) == 0)
        rsp__futex_wait(&f->gate, 0, NULL);
    if ((uintptr_t)payload % alignof(max_align_t) != 0)
        f->bad_payloads++;
    if (size < sizeof(fake_msg)) { /* a short FAKE_BYTES: id = size */
        f->bad_payloads += !bytes_ok(payload, size, size);
        f->handled++;
        return;
    }
    const fake_msg *msg = payload;
    if (msg->op == FAKE_LAST) {
        f->lasts++;
        return;
    }
    f->handled++;
    if (msg->op == FAKE_ORDERED) {
        uint32_t p = (uint32_t)(msg->id >> 32);
        uint64_t seq = msg->id & 0xffffffffu;
        if (p < MAX_PRODUCERS) {
            if (seq != f->next_seq[p])
                f->out_of_order++;
            f->next_seq[p] = seq + 1;
        }
    }
    if (msg->op == FAKE_BYTES)
        f->bad_payloads += !bytes_ok(payload, size, msg->id);
    if (msg->op == FAKE_FAIL)
        rsp__fail(&reply->error, RSP_EINVAL, "fake failure for id %llu",
                  (unsigned long long)msg->id);
    if (msg->op == FAKE_ECHO && msg->id % 3 == 0) {
        /* Sometimes answer late, so the waiter falls asleep too. */
        for (int i = 0; i < 300; i++)
            rsp__cpu_relax();
    }
    reply->plan_step_id = msg->id; /* echo, so waiters can check their reply */
    /* The payload is the handler's until it returns: rewriting it is fine. */
    memset(payload, 0xee, size);
}

static void gate_open(fake *f)
{
    rsp__store_release_u32(&f->gate, 1);
    rsp__futex_wake_all(&f->gate);
}

static rsp__actor *make_actor(fake *f, uint32_t capacity, uint32_t spin_max, bool open)
{
    memset(f, 0, sizeof *f);
    f->gate = open ? 1 : 0;
    rsp__actor_config cfg = {
        .capacity = capacity, .spin_max = spin_max, .handle = fake_handle, .ctx = f};
    rsp__actor *a = NULL;
    rsp_error err;
    assert_int_equal(rsp__actor_create(&cfg, &a, &err), RSP_OK);
    return a;
}

/* A ticket carrying {op, id}: from a's pool if a is given (fire-and-forget
 * only), else malloc'd. */
static rsp_ticket *fake_ticket(rsp__actor *a, fake_op op, uint64_t id)
{
    void *payload;
    rsp_ticket *t = a ? rsp__actor_ticket_new(a, sizeof(fake_msg), &payload)
                      : rsp__ticket_new(sizeof(fake_msg), &payload);
    if (t)
        memcpy(payload, &(fake_msg){.op = op, .id = id}, sizeof(fake_msg));
    return t;
}

static rsp_status post(rsp__actor *a, fake_op op, uint64_t id, rsp_ticket **keep,
                       uint64_t timeout_ns)
{
    rsp_ticket *t = fake_ticket(NULL, op, id);
    if (!t)
        return RSP_ENOMEM;
    rsp_status st = op == FAKE_LAST ? rsp__actor_close(a, t, keep != NULL, NULL)
                                    : rsp__actor_post(a, t, keep != NULL, timeout_ns, NULL);
    if (keep)
        *keep = st == RSP_OK ? t : NULL;
    return st;
}

/* Wait until the handler has been entered n times (it is then blocked on
 * the gate). */
static void await_entered(fake *f, uint32_t n)
{
    while (rsp__load_acquire_u32(&f->entered) < n)
        sched_yield();
}

/* ------------------------------------------------------------------------ */

typedef struct producer_arg {
    rsp__actor *a;
    uint32_t id;
    uint32_t count;
    uint32_t failures; /* recorded, asserted by main */
} producer_arg;

static void *producer_main(void *p)
{
    producer_arg *pa = p;
    for (uint32_t i = 0; i < pa->count; i++) {
        uint64_t rid = (uint64_t)pa->id << 32 | i;
        if (post(pa->a, FAKE_ORDERED, rid, NULL, RSP_WAIT_FOREVER) != RSP_OK)
            pa->failures++;
    }
    return NULL;
}

static void many_producers_keep_per_producer_order(void **state)
{
    (void)state;
    fake f;
    /* A small inbox, so producers also exercise waiting for credit. */
    rsp__actor *a = make_actor(&f, 64, 0, true);
    enum { P = 6, N = 20000 };
    pthread_t th[P];
    producer_arg pa[P];
    for (uint32_t i = 0; i < P; i++) {
        pa[i] = (producer_arg){.a = a, .id = i, .count = N};
        assert_int_equal(pthread_create(&th[i], NULL, producer_main, &pa[i]), 0);
    }
    for (uint32_t i = 0; i < P; i++)
        pthread_join(th[i], NULL);
    rsp_ticket *t = NULL;
    assert_int_equal(post(a, FAKE_ECHO, 0, &t, RSP_WAIT_FOREVER), RSP_OK);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    assert_int_equal(rsp__actor_handled(a), (uint64_t)P * N + 1);
    rsp__actor_destroy(a);

    for (uint32_t i = 0; i < P; i++) {
        assert_int_equal(pa[i].failures, 0);
        assert_int_equal(f.next_seq[i], N);
    }
    assert_int_equal(f.out_of_order, 0);
    assert_int_equal(f.handled, (uint64_t)P * N + 1);
    /* Destroy's own stop marker ends the owner without reaching the handler. */
    assert_int_equal(f.lasts, 0);
    assert_int_equal(f.bad_payloads, 0);
}

/* ------------------------------------------------------------------------ */

typedef struct waiter_arg {
    rsp__actor *a;
    rsp_status st; /* recorded */
} waiter_arg;

static void *post_forever_main(void *p)
{
    waiter_arg *wa = p;
    wa->st = post(wa->a, FAKE_ORDERED, 99, NULL, RSP_WAIT_FOREVER);
    return NULL;
}

static void full_inbox_refuses_at_once_and_waits_up_to_timeout(void **state)
{
    (void)state;
    fake f;
    rsp__actor *a = make_actor(&f, 4, 0, false);
    rsp_ticket *t[5];
    assert_int_equal(post(a, FAKE_ORDERED, 0, &t[0], 0), RSP_OK);
    await_entered(&f, 1); /* the owner took message 0 (credit back) and blocks */
    for (int i = 1; i < 5; i++)
        assert_int_equal(post(a, FAKE_ORDERED, (uint64_t)i, &t[i], 0), RSP_OK);
    assert_int_equal(rsp__actor_depth(a), 4);

    rsp_error err;
    memset(&err, 0, sizeof err);
    rsp_ticket *x = fake_ticket(NULL, FAKE_ORDERED, 7);
    assert_int_equal(rsp__actor_post(a, x, false, 0, &err), RSP_EFULL);
    assert_int_equal(err.status, RSP_EFULL);
    assert_non_null(strstr(err.message, "inbox full"));

    x = fake_ticket(NULL, FAKE_ORDERED, 7);
    assert_int_equal(rsp__actor_post(a, x, false, 20 * 1000 * 1000, &err), RSP_ETIMEDOUT);
    assert_int_equal(err.status, RSP_ETIMEDOUT);

    /* A post waiting forever gets in once the owner gives credit back. */
    waiter_arg wa = {.a = a, .st = RSP_EINVAL};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, post_forever_main, &wa), 0);
    gate_open(&f);
    pthread_join(th, NULL);
    assert_int_equal(wa.st, RSP_OK);
    for (int i = 0; i < 5; i++)
        assert_int_equal(rsp__ticket_wait(t[i], RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 6);
}

/* ------------------------------------------------------------------------ */

typedef struct alternation_arg {
    rsp__actor *a;
    uint32_t rounds;
    uint32_t lost;     /* waits that timed out: a lost wake-up */
    uint32_t mismatch; /* wrong reply */
} alternation_arg;

static void *alternation_main(void *p)
{
    alternation_arg *aa = p;
    uint32_t x = 12345;
    for (uint32_t i = 0; i < aa->rounds; i++) {
        /* Vary where the post lands in the owner's way to sleep. */
        x = x * 1103515245u + 12345u;
        for (uint32_t k = (x >> 16) % 64; k > 0; k--)
            rsp__cpu_relax();
        rsp_ticket *t = NULL;
        if (post(aa->a, FAKE_ECHO, i, &t, RSP_WAIT_FOREVER) != RSP_OK) {
            aa->mismatch++;
            continue;
        }
        rsp_reply r;
        /* A lost wake-up shows as a wait that never ends: bound it so the
         * test reports it instead of hanging. 30 s is far beyond any
         * scheduling delay, so this is not a timing assertion. */
        rsp_status st = RSP_EAGAIN;
        /* Odd rounds poll for the answer, so only the owner sleeps and the
         * round costs one wake-up; even rounds sleep on the ticket too. */
        for (uint32_t k = 0; (i & 1) && st == RSP_EAGAIN && k < 1000000; k++) {
            st = rsp__ticket_wait(t, RSP_WAIT_POLL, &r);
            if (st == RSP_EAGAIN)
                rsp__cpu_relax();
        }
        if (st == RSP_EAGAIN) {
            while ((st = rsp__ticket_wait(t, 30ull * 1000 * 1000 * 1000, &r)) == RSP_ETIMEDOUT)
                aa->lost++;
        }
        if (st != RSP_OK || r.plan_step_id != i)
            aa->mismatch++;
    }
    return NULL;
}

static void post_and_sleep_alternation_never_loses_a_wakeup(void **state)
{
    (void)state;
    fake f;
    /* spin_max 1: the owner announces sleep right after each message, so
     * every post races with the owner falling asleep (F1/F2). */
    rsp__actor *a = make_actor(&f, 0, 1, true);
    alternation_arg aa = {.a = a, .rounds = RSP_TEST_ALTERNATIONS};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, alternation_main, &aa), 0);
    pthread_join(th, NULL);
    uint64_t sleeps = rsp__actor_sleeps(a);
    rsp__actor_destroy(a);
    print_message("owner slept %llu times in %u rounds\n", (unsigned long long)sleeps, aa.rounds);
    assert_int_equal(aa.lost, 0);
    /* The owner really went to sleep between posts (the path under test). */
    assert_true(sleeps > 0);
    assert_int_equal(aa.mismatch, 0);
    assert_int_equal(f.handled, RSP_TEST_ALTERNATIONS);
}

/* ------------------------------------------------------------------------ */

static void ticket_poll_and_timed_wait_leave_it_valid(void **state)
{
    (void)state;
    fake f;
    rsp__actor *a = make_actor(&f, 0, 0, false);
    rsp_ticket *t = NULL;
    assert_int_equal(post(a, FAKE_ORDERED, 42, &t, 0), RSP_OK);
    await_entered(&f, 1);
    rsp_reply r;
    memset(&r, 0xab, sizeof r);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_POLL, &r), RSP_EAGAIN);
    assert_int_equal(rsp__ticket_wait(t, 1000 * 1000, &r), RSP_ETIMEDOUT);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_POLL, NULL), RSP_EAGAIN);
    gate_open(&f);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, &r), RSP_OK);
    assert_int_equal(r.error.status, RSP_OK);
    assert_int_equal(r.plan_step_id, 42);
    rsp__actor_destroy(a);
}

/* ------------------------------------------------------------------------ */

static void failing_message_reports_status_and_fire_and_forget_counts(void **state)
{
    (void)state;
    fake f;
    rsp__actor *a = make_actor(&f, 0, 0, true);
    rsp_ticket *t = NULL;
    assert_int_equal(post(a, FAKE_FAIL, 5, &t, 0), RSP_OK);
    rsp_reply r;
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, &r), RSP_EINVAL);
    assert_int_equal(r.error.status, RSP_EINVAL);
    assert_non_null(strstr(r.error.message, "id 5"));
    for (int i = 0; i < 3; i++)
        assert_int_equal(post(a, FAKE_FAIL, 6, NULL, 0), RSP_OK);
    assert_int_equal(post(a, FAKE_ECHO, 0, &t, 0), RSP_OK);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    assert_int_equal(rsp__actor_unwaited_failures(a), 3);
    rsp__actor_destroy(a);
}

/* cfg.settle: runs on the owner, after the handler calls it counts. */
static void fake_settle(void *ctx)
{
    fake *f = ctx;
    if (rsp__load_relaxed_u32(&f->settles) == 0)
        rsp__store_relaxed_u64(&f->first_settled, f->handled);
    rsp__store_relaxed_u64(&f->last_settled, f->handled);
    rsp__store_release_u32(&f->settles, rsp__load_relaxed_u32(&f->settles) + 1);
}

static void settle_runs_before_a_waited_answer_and_once_a_batch(void **state)
{
    (void)state;
    fake f;
    memset(&f, 0, sizeof f);
    rsp__actor_config cfg = {.handle = fake_handle, .settle = fake_settle, .ctx = &f};
    rsp__actor *a = NULL;
    assert_int_equal(rsp__actor_create(&cfg, &a, NULL), RSP_OK);
    /* Batch 1: one fire-and-forget message, held in the handler while ten
     * more queue behind it (nine fire-and-forget, then a waited one). */
    assert_int_equal(post(a, FAKE_ORDERED, 0, NULL, 0), RSP_OK);
    await_entered(&f, 1);
    for (uint64_t i = 1; i < 10; i++)
        assert_int_equal(post(a, FAKE_ORDERED, i, NULL, 0), RSP_OK);
    rsp_ticket *t = NULL;
    assert_int_equal(post(a, FAKE_ECHO, 1, &t, 0), RSP_OK);
    gate_open(&f);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    /* The waiter's answer came after a settle that saw all eleven. */
    assert_int_equal(rsp__load_acquire_u32(&f.settles), 2);
    assert_int_equal(rsp__load_relaxed_u64(&f.last_settled), 11);
    rsp__actor_destroy(a);
    /* Batch 1 ended with a settle of its one message; batch 2 settled once,
     * before the answer (its end had nothing new); the stop marker none. */
    assert_int_equal(f.settles, 2);
    assert_int_equal(f.first_settled, 1);
    assert_int_equal(f.handled, 11);
}

/* ------------------------------------------------------------------------ */

typedef struct closer_arg {
    rsp__actor *a;
    rsp_status st;
} closer_arg;

static void *close_main(void *p)
{
    closer_arg *ca = p;
    ca->st = rsp__actor_close(ca->a, NULL, false, NULL);
    return NULL;
}

static void shutdown_answers_every_message_in_flight(void **state)
{
    (void)state;
    fake f;
    rsp__actor *a = make_actor(&f, 4, 0, false);
    rsp_ticket *t[5];
    assert_int_equal(post(a, FAKE_ORDERED, 0, &t[0], 0), RSP_OK);
    await_entered(&f, 1);
    for (int i = 1; i < 5; i++) /* fills the inbox behind the blocked message */
        assert_int_equal(post(a, FAKE_ORDERED, (uint64_t)i, &t[i], 0), RSP_OK);

    /* A producer blocked on a full inbox is released by the close. */
    waiter_arg wa = {.a = a, .st = RSP_OK};
    pthread_t wth, cth;
    assert_int_equal(pthread_create(&wth, NULL, post_forever_main, &wa), 0);
    closer_arg ca = {.a = a, .st = RSP_EINVAL};
    assert_int_equal(pthread_create(&cth, NULL, close_main, &ca), 0);
    pthread_join(wth, NULL);
    pthread_join(cth, NULL);
    assert_int_equal(wa.st, RSP_ESHUTDOWN);
    assert_int_equal(ca.st, RSP_OK);
    assert_true(rsp__actor_closed(a));

    /* Later posts and a second close are refused. */
    rsp_error err;
    rsp_ticket *x = fake_ticket(NULL, FAKE_ORDERED, 0);
    assert_int_equal(rsp__actor_post(a, x, true, RSP_WAIT_FOREVER, &err), RSP_ESHUTDOWN);
    assert_non_null(strstr(err.message, "shutting down"));
    assert_int_equal(rsp__actor_close(a, NULL, false, NULL), RSP_ESHUTDOWN);

    /* Everything queued before the shutdown is handled, then answered. */
    gate_open(&f);
    for (int i = 0; i < 5; i++)
        assert_int_equal(rsp__ticket_wait(t[i], RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 5);
    assert_int_equal(f.lasts, 0); /* the actor's own stop marker reaches no handler */
}

static void last_message_with_ticket_is_answered_last(void **state)
{
    (void)state;
    fake f;
    /* A full inbox (capacity 1, the owner held at the gate): the last
     * message takes no credit, so it still gets in. */
    rsp__actor *a = make_actor(&f, 1, 0, false);
    rsp_ticket *t[3];
    assert_int_equal(post(a, FAKE_ORDERED, 0, &t[0], 0), RSP_OK);
    await_entered(&f, 1); /* the owner took message 0 (credit back) and blocks */
    assert_int_equal(post(a, FAKE_ORDERED, 1, &t[1], 0), RSP_OK);
    assert_int_equal(post(a, FAKE_ORDERED, 8, NULL, 0), RSP_EFULL);
    assert_int_equal(post(a, FAKE_LAST, 0, &t[2], 0), RSP_OK);
    assert_int_equal(post(a, FAKE_ORDERED, 9, NULL, 0), RSP_ESHUTDOWN);
    assert_int_equal(post(a, FAKE_LAST, 1, NULL, 0), RSP_ESHUTDOWN);
    gate_open(&f);
    for (int i = 0; i < 3; i++)
        assert_int_equal(rsp__ticket_wait(t[i], RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 2);
    assert_int_equal(f.lasts, 1);
}

/* A thread-exit destructor of a key made after the ticket spare's: a
 * synchronous call then (a pool closed at thread exit) keeps a spare after
 * the spare's own destructor ran. */
static pthread_key_t late_key;

static void late_call(void *unused)
{
    (void)unused;
    void *payload;
    rsp_ticket *t = rsp__ticket_new(64, &payload);
    if (t)
        rsp__ticket_discard(t); /* kept as the thread's spare */
}

static void *spare_then_late_key(void *unused)
{
    (void)unused;
    void *payload;
    rsp_ticket *t = rsp__ticket_new(64, &payload);
    if (t)
        rsp__ticket_discard(t); /* the spare's key is made first */
    if (pthread_key_create(&late_key, late_call) == 0)
        (void)pthread_setspecific(late_key, &late_key);
    return NULL;
}

/* The spare a late destructor keeps is freed too: LeakSanitizer (the
 * sanitizer trees) reports it at exit otherwise. */
static void a_spare_kept_at_thread_exit_is_freed(void **state)
{
    (void)state;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, spare_then_late_key, NULL), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(pthread_key_delete(late_key), 0);
}

/* Post one FAKE_BYTES payload of size bytes (id = size) and wait for it. */
static void post_bytes(rsp__actor *a, size_t size, bool pooled)
{
    void *payload = NULL;
    rsp_ticket *t =
        pooled ? rsp__actor_ticket_new(a, size, &payload) : rsp__ticket_new(size, &payload);
    assert_non_null(t);
    assert_non_null(payload);
    bytes_fill(payload, size, size);
    assert_int_equal(rsp__actor_post(a, t, !pooled, 0, NULL), RSP_OK);
    if (!pooled)
        assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
}

/* The handler gets exactly the bytes the poster wrote, aligned for any
 * object, whatever the size and whichever way the ticket was made (pooled
 * ones are reused: each must carry its own message, not a previous one). */
static void payload_arrives_as_written(void **state)
{
    (void)state;
    fake f;
    rsp__actor *a = make_actor(&f, 0, 0, true);
    const size_t sizes[] = {0, 1, 15, sizeof(fake_msg), 100, 1000, 1152, 1153, 5000, 70000};
    const size_t n = sizeof sizes / sizeof sizes[0];
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++) {
            post_bytes(a, sizes[i], true);
            post_bytes(a, sizes[i], false);
        }
    }
    rsp_ticket *t = NULL;
    assert_int_equal(post(a, FAKE_ECHO, 1, &t, 0), RSP_OK);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp__actor_destroy(a);
    assert_int_equal(f.handled, 3 * 2 * n + 1);
    assert_int_equal(f.bad_payloads, 0);
}

static void idle_owner_sleeps_on_its_futex(void **state)
{
    (void)state;
    fake f;
    rsp__actor *a = make_actor(&f, 0, 0, true);
    rsp_ticket *t = NULL;
    assert_int_equal(post(a, FAKE_ECHO, 1, &t, 0), RSP_OK);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    /* No busy core when idle: the owner ends up asleep. Polled with
     * yields; the bound only keeps a broken build from hanging. */
    bool asleep = false;
    for (long i = 0; i < 10 * 1000 * 1000 && !asleep; i++) {
        asleep = rsp__actor_asleep(a);
        if (!asleep)
            sched_yield();
    }
    assert_true(asleep);
    /* And a post wakes it. */
    assert_int_equal(post(a, FAKE_ECHO, 2, &t, 0), RSP_OK);
    assert_int_equal(rsp__ticket_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    rsp__actor_destroy(a);
}

/* ------------------------------------------------------------------------ */

/* A message's held reference (rsp__ticket_hold: a host fence, in the pool)
 * is dropped exactly once: after the handler ran, before the answer; at
 * once when the post is refused; never again by a recycled ticket. */
static void count_drop(void *counter)
{
    __atomic_add_fetch((uint32_t *)counter, 1, __ATOMIC_RELAXED);
}

static uint32_t drops_of(uint32_t *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

static rsp_status post_held(rsp__actor *a, uint64_t rid, uint32_t *counter, rsp_ticket **keep,
                            uint64_t timeout_ns)
{
    rsp_ticket *t = fake_ticket(keep ? NULL : a, FAKE_ECHO, rid);
    assert_non_null(t);
    if (counter)
        rsp__ticket_hold(t, count_drop, counter);
    rsp_status st = rsp__actor_post(a, t, keep != NULL, timeout_ns, NULL);
    if (keep)
        *keep = st == RSP_OK ? t : NULL;
    return st;
}

static void held_reference_is_dropped_once_after_handling_or_refusal(void **state)
{
    (void)state;
    fake f;
    rsp__actor *a = make_actor(&f, 1, 0, false);
    uint32_t drops[4] = {0};
    assert_int_equal(post_held(a, 1, &drops[0], NULL, 0), RSP_OK);
    await_entered(&f, 1);                     /* the handler holds message 1 */
    assert_int_equal(drops_of(&drops[0]), 0); /* not before its handling */
    rsp_ticket *kept;
    assert_int_equal(post_held(a, 2, &drops[1], &kept, 0), RSP_OK); /* takes the one credit */
    /* Refused (inbox full): dropped on this thread before the post returns. */
    assert_int_equal(post_held(a, 3, &drops[2], NULL, 0), RSP_EFULL);
    assert_int_equal(drops_of(&drops[2]), 1);
    gate_open(&f);
    rsp_reply r;
    assert_int_equal(rsp__ticket_wait(kept, RSP_WAIT_FOREVER, &r), RSP_OK);
    /* Dropped before the answer was published: the waiter sees it. */
    assert_int_equal(drops_of(&drops[1]), 1);
    assert_int_equal(drops_of(&drops[0]), 1);
    /* Recycled fire-and-forget tickets carry no hold of a previous message. */
    for (uint64_t i = 0; i < 50; i++)
        assert_int_equal(post_held(a, 10 + i, NULL, NULL, UINT64_MAX), RSP_OK);
    assert_int_equal(post_held(a, 100, NULL, &kept, UINT64_MAX), RSP_OK);
    assert_int_equal(rsp__ticket_wait(kept, RSP_WAIT_FOREVER, &r), RSP_OK);
    /* Queued at destroy: handled and dropped too. */
    assert_int_equal(post_held(a, 200, &drops[3], NULL, UINT64_MAX), RSP_OK);
    rsp__actor_destroy(a);
    assert_int_equal(drops_of(&drops[0]), 1);
    assert_int_equal(drops_of(&drops[1]), 1);
    assert_int_equal(drops_of(&drops[2]), 1);
    assert_int_equal(drops_of(&drops[3]), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(many_producers_keep_per_producer_order),
        cmocka_unit_test(full_inbox_refuses_at_once_and_waits_up_to_timeout),
        cmocka_unit_test(post_and_sleep_alternation_never_loses_a_wakeup),
        cmocka_unit_test(ticket_poll_and_timed_wait_leave_it_valid),
        cmocka_unit_test(a_spare_kept_at_thread_exit_is_freed),
        cmocka_unit_test(failing_message_reports_status_and_fire_and_forget_counts),
        cmocka_unit_test(settle_runs_before_a_waited_answer_and_once_a_batch),
        cmocka_unit_test(shutdown_answers_every_message_in_flight),
        cmocka_unit_test(last_message_with_ticket_is_answered_last),
        cmocka_unit_test(payload_arrives_as_written),
        cmocka_unit_test(idle_owner_sleeps_on_its_futex),
        cmocka_unit_test(held_reference_is_dropped_once_after_handling_or_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
