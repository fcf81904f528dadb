/*
 * Lifecycle and misuse through the public API: typed events,
 * host fences dropped right after a post, destroy while a thread waits for
 * a plan, every call in a forked child, rsp_pool_close inside a read
 * section, an unbalanced rsp_read_end.
 * Worker threads record; the main thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "device/device.h" /* rsp__fence_ref/_unref/_refs: the forward's own handle */
#include "pool.h"          /* pool->pub: rsp__publisher_waiters */

/* One 16-byte block, one layer: slot s is floats [4 s, 4 s + 4). */
static rsp_pool *make_pool(uint32_t max_slots)
{
    static const rsp_block_config block = {
        .name = "s", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 1;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = max_slots;
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_create: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    return pool;
}

static float *slot_row(rsp_pool *pool, int32_t slot)
{
    rsp_block_view v;
    assert_int_equal(rsp_pool_block(pool, "s", 0, &v, NULL), RSP_OK);
    return (float *)v.data + 4 * slot;
}

static rsp_stats stats(rsp_pool *pool)
{
    rsp_stats s;
    rsp_error err;
    rsp_status st = rsp_stats_snapshot(pool, &s, &err);
    if (st != RSP_OK)
        print_error("rsp_stats_snapshot: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    return s;
}

/* Admit and plan step `id` with one row (rid, span 1); returns rid's slot. */
static int32_t admit_plan(rsp_pool *pool, uint64_t id, rsp_rid rid)
{
    rsp_row row = {.rid = rid, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = id, .rows = &row, .num_rows = 1};
    rsp_admit_outcome o;
    rsp_error err;
    assert_int_equal(rsp_step_admit(pool, &s, &o, &err), RSP_OK);
    assert_true(o.ok);
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_OK);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, rid, RSP_LABEL_MAIN, &h, NULL), RSP_OK);
    return h.index;
}

/* Wait until the device has run everything submitted so far: plan a fresh
 * step and wait for its ready event (FIFO). */
static void device_drain(rsp_pool *pool, uint64_t id, rsp_rid rid)
{
    admit_plan(pool, id, rid);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    rsp_addressing a;
    assert_int_equal(rsp_plan_addressing(rsp_plan_live(pool), RSP_LABEL_MAIN, &a, NULL), RSP_OK);
    assert_int_equal(rsp_read_end(), RSP_OK);
    assert_int_equal(rsp_event_wait(pool, &a.ready, RSP_WAIT_FOREVER, NULL), RSP_OK);
}

typedef struct flag {
    uint32_t v;
} flag;

static void flag_set(flag *f)
{
    __atomic_store_n(&f->v, 1, __ATOMIC_RELEASE);
}

static void flag_wait(flag *f)
{
    while (!__atomic_load_n(&f->v, __ATOMIC_ACQUIRE))
        sched_yield();
}

/* ------------------------------------------------------------------------ */
/* Item 5: events carry their kind                                          */
/* ------------------------------------------------------------------------ */

static void expect_refused_event(rsp_pool *pool, const rsp_step *s, const rsp_event *ev,
                                 const char *needle)
{
    rsp_error err;
    assert_int_equal(rsp_step_commit(pool, s, ev, &err), RSP_EINVAL);
    if (!strstr(err.message, needle))
        print_error("message \"%s\" lacks \"%s\"\n", err.message, needle);
    assert_non_null(strstr(err.message, needle));
    assert_int_equal(rsp_step_rollback(pool, s->step_id, ev, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, needle));
    /* rsp_post refuses it before queueing anything. */
    rsp_msg m = {.kind = RSP_MSG_COMMIT, .step = *s, .event = *ev};
    assert_int_equal(rsp_post(pool, &m, NULL, 0, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, needle));
    assert_int_equal(rsp_event_wait(pool, ev, 0, &err), RSP_EINVAL);
}

static void events_of_a_kind_the_host_device_cannot_wait_on_are_refused(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4);
    int32_t slot = admit_plan(pool, 1, 1);
    float *data = slot_row(pool, slot);
    data[0] = 42.0f;                                     /* the forward wrote the slot */
    assert_int_equal(rsp_remove(pool, 1, NULL), RSP_OK); /* zeroed by the commit */
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_stats before = stats(pool);

    /* A stray object of fence size, all zeros: not a fence. Before events
     * had a kind and fences a tag, the host pool took a reference in it
     * and waited on it. */
    uint64_t stray[16];
    memset(stray, 0, sizeof stray);
    rsp_event cuda = rsp_event_cuda(stray);
    expect_refused_event(pool, &s, &cuda, "CUDA event");
    rsp_event untyped = {.handle = stray, .value = 1};
    expect_refused_event(pool, &s, &untyped, "RSP_EVENT_NONE");
    rsp_event unknown = {.kind = (rsp_event_kind)77, .handle = NULL};
    expect_refused_event(pool, &s, &unknown, "not an event kind");
    rsp_event fake = rsp_event_host((rsp_host_fence *)stray, 1);
    expect_refused_event(pool, &s, &fake, "not a live rsp_host_fence");
    assert_int_equal(rsp_host_fence_wait((rsp_host_fence *)stray, 1, 0), RSP_EINVAL);
    for (size_t i = 0; i < sizeof stray / sizeof stray[0]; i++)
        assert_true(stray[i] == 0); /* nothing wrote into it */

    rsp_stats after = stats(pool);
    assert_int_equal(after.commits, before.commits);
    assert_int_equal(after.rollbacks, before.rollbacks);
    assert_int_equal(after.pending_release, before.pending_release);
    assert_int_equal(after.messages_handled, before.messages_handled + 1); /* the stats */
    assert_true(data[0] == 42.0f);

    /* A real fence and a zeroed event ("complete") are accepted. */
    rsp_host_fence *f = NULL;
    assert_int_equal(rsp_host_fence_create(&f, NULL), RSP_OK);
    rsp_host_fence_signal(f, 3);
    rsp_event done = rsp_event_host(f, 3);
    assert_int_equal(rsp_event_wait(pool, &done, 0, NULL), RSP_OK);
    rsp_event none = {0};
    assert_int_equal(rsp_event_wait(pool, &none, 0, NULL), RSP_OK);
    assert_int_equal(rsp_step_commit(pool, &s, &done, NULL), RSP_OK);
    rsp_host_fence_destroy(f);
    device_drain(pool, 2, 2);
    assert_true(data[0] == 0.0f);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* Item 7: a fence dropped right after its post                              */
/* ------------------------------------------------------------------------ */

/* Holds a read section open until told to end it: past the retired-plan cap
 * the owner waits for a grace period, i.e. for this section, and handles
 * nothing meanwhile. */
typedef struct section_holder {
    flag in, go;
    rsp_status st;
} section_holder;

static void *section_main(void *arg)
{
    section_holder *h = arg;
    h->st = rsp_reader_register(NULL);
    if (h->st == RSP_OK)
        h->st = rsp_read_begin();
    flag_set(&h->in);
    flag_wait(&h->go);
    rsp_read_end();
    rsp_reader_unregister();
    return NULL;
}

static void post_ok(rsp_pool *pool, const rsp_msg *m, rsp_ticket **t)
{
    rsp_error err;
    rsp_status st = rsp_post(pool, m, t, RSP_WAIT_FOREVER, &err);
    if (st != RSP_OK)
        print_error("rsp_post: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
}

static void host_fence_destroyed_right_after_its_post_outlives_a_late_owner(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8);
    /* Step 1 (rid 7, then removed: its commit zeroes the slot after f1)
     * and step 2 (rid 9: its rollback zeroes the slot after f2). */
    float *d7 = slot_row(pool, admit_plan(pool, 1, 7));
    float *d9 = slot_row(pool, admit_plan(pool, 2, 9));
    d7[0] = 7.0f;
    d9[0] = 9.0f;
    assert_int_equal(rsp_remove(pool, 7, NULL), RSP_OK);

    section_holder h = {0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, section_main, &h), 0);
    flag_wait(&h.in);
    assert_int_equal(h.st, RSP_OK);

    /* 300 more steps, fire-and-forget: with the section open at most about
     * two retired caps of plans can be published, so the owner stops on
     * one of these (waiting for the section) and has not handled the
     * commit and rollback below when their fences are destroyed. */
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    for (uint64_t id = 3; id < 303; id++) {
        rsp_step s = {.step_id = id, .rows = &row, .num_rows = 1};
        rsp_msg m[3] = {{.kind = RSP_MSG_ADMIT, .step = s},
                        {.kind = RSP_MSG_PLAN, .step = s},
                        {.kind = RSP_MSG_COMMIT, .step = s, .event = {.kind = RSP_EVENT_COMPLETE}}};
        for (int k = 0; k < 3; k++)
            post_ok(pool, &m[k], NULL);
    }

    /* f1 is complete already; the caller drops it right after the post. */
    rsp_host_fence *f1 = NULL, *f2 = NULL;
    assert_int_equal(rsp_host_fence_create(&f1, NULL), RSP_OK);
    assert_int_equal(rsp_host_fence_create(&f2, NULL), RSP_OK);
    rsp_host_fence_signal(f1, 5);
    rsp_row r7 = {.rid = 7, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_msg commit = {.kind = RSP_MSG_COMMIT,
                      .step = {.step_id = 1, .rows = &r7, .num_rows = 1},
                      .event = rsp_event_host(f1, 5)};
    rsp_ticket *t1, *t2;
    post_ok(pool, &commit, &t1);
    rsp_host_fence_destroy(f1);
    /* f2 is not complete: the forward keeps its own (internal) handle to
     * signal it later; the caller drops its handle right after the post. */
    rsp__fence_ref(f2);
    rsp_msg rollback = {
        .kind = RSP_MSG_ROLLBACK, .step = {.step_id = 2}, .event = rsp_event_host(f2, 3)};
    post_ok(pool, &rollback, &t2);
    rsp_host_fence_destroy(f2);

    flag_set(&h.go);
    pthread_join(th, NULL);
    rsp_reply r;
    assert_int_equal(rsp_wait(t1, RSP_WAIT_FOREVER, &r), RSP_OK);
    assert_int_equal(rsp_wait(t2, RSP_WAIT_FOREVER, &r), RSP_OK);
    rsp_stats s = stats(pool);
    assert_int_equal(s.rollbacks, 1);
    assert_int_equal(s.commits, 301);
    /* The device waits for f2 before the rollback's zero: nothing after
     * that WAIT has run, and the fence is alive (the device's reference
     * and the forward's). */
    assert_true(d9[0] == 9.0f);
    assert_int_equal(rsp__fence_refs(f2), 2);
    rsp__fence_signal(f2, 3);
    rsp__fence_unref(f2);
    device_drain(pool, 400, 11);
    assert_true(d7[0] == 0.0f);
    assert_true(d9[0] == 0.0f);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

static void fence_reference_of_a_refused_post_is_dropped(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4);
    rsp_host_fence *f = NULL;
    assert_int_equal(rsp_host_fence_create(&f, NULL), RSP_OK);
    rsp_host_fence_signal(f, 1);
    /* Handled: the message's reference is gone once it is answered, the
     * device's once its WAIT ran. */
    admit_plan(pool, 1, 1);
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_event done = rsp_event_host(f, 1);
    assert_int_equal(rsp_step_commit(pool, &s, &done, NULL), RSP_OK);
    device_drain(pool, 2, 2);
    assert_int_equal(rsp__fence_refs(f), 1);
    /* Refused (the pool shut down): the post's reference is dropped. */
    rsp_msg sd = {.kind = RSP_MSG_SHUTDOWN};
    assert_int_equal(rsp_post(pool, &sd, NULL, 0, NULL), RSP_OK);
    rsp_msg m = {.kind = RSP_MSG_ROLLBACK, .step = {.step_id = 2}, .event = done};
    rsp_error err;
    assert_int_equal(rsp_post(pool, &m, NULL, 0, &err), RSP_ESHUTDOWN);
    assert_int_equal(rsp_step_rollback(pool, 2, &done, &err), RSP_ESHUTDOWN);
    assert_int_equal(rsp__fence_refs(f), 1);
    rsp_host_fence_destroy(f); /* the last reference: freed (LeakSanitizer checks) */
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* Item 10: destroy while a thread waits in rsp_plan_wait                    */
/* ------------------------------------------------------------------------ */

typedef struct plan_waiter {
    rsp_pool *pool;
    rsp_status st;
    char message[RSP_ERROR_MAX];
} plan_waiter;

static void *plan_waiter_main(void *arg)
{
    plan_waiter *w = arg;
    rsp_error err = {0};
    w->st = rsp_plan_wait(w->pool, 1000, RSP_WAIT_FOREVER, &err);
    memcpy(w->message, err.message, sizeof w->message);
    return NULL;
}

static void destroy_wakes_a_plan_waiter_and_waits_for_it_to_leave(void **state)
{
    (void)state;
    for (int round = 0; round < 20; round++) {
        rsp_pool *pool = make_pool(4);
        admit_plan(pool, 1, 1);
        plan_waiter w = {.pool = pool};
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, plan_waiter_main, &w), 0);
        /* Destroy only once the waiter is inside the wait (a call that may
         * start after destroy is a use after free by contract). */
        while (rsp__publisher_waiters(pool->pub) == 0)
            sched_yield();
        /* ThreadSanitizer checks that the waiter's accesses to the pool
         * happen before destroy frees it. */
        rsp_pool_destroy(pool);
        pthread_join(th, NULL);
        assert_int_equal(w.st, RSP_ESHUTDOWN);
        assert_non_null(strstr(w.message, "shut down"));
    }
}

/* ------------------------------------------------------------------------ */
/* Item 11: a forked child                                                   */
/* ------------------------------------------------------------------------ */

static void every_call_in_a_forked_child_answers_eforked(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(8);
    admit_plan(pool, 1, 1);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    const rsp_plan *plan = rsp_plan_ref(rsp_plan_live(pool));
    rsp_addressing a;
    assert_int_equal(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, NULL), RSP_OK);
    assert_int_equal(rsp_read_end(), RSP_OK);
    assert_int_equal(a.ready.kind, RSP_EVENT_HOST_FENCE);
    rsp_host_fence *f = NULL;
    assert_int_equal(rsp_host_fence_create(&f, NULL), RSP_OK);
    rsp_host_fence_signal(f, 5);
    rsp_msg bar = {.kind = RSP_MSG_BARRIER};
    rsp_ticket *t;
    assert_int_equal(rsp_post(pool, &bar, &t, 0, NULL), RSP_OK);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* The child: no cmocka; the exit code is the first check that
         * failed. A call that waits for the parent's threads would hang:
         * the alarm turns that into a failure. */
        alarm(20);
        int n = 0;
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        n++;                                                                                       \
        if (!(cond))                                                                               \
            _exit(n);                                                                              \
    } while (0)
        rsp_error err;
        rsp_host_fence *g = (rsp_host_fence *)1;
        CHECK(rsp_host_fence_create(&g, &err) == RSP_EFORKED && g == NULL);
        CHECK(err.status == RSP_EFORKED);
        /* The pool's own timeline: its worker exists only in the parent. */
        CHECK(rsp_host_fence_wait(a.ready.handle, a.ready.value + 1000, RSP_WAIT_FOREVER) ==
              RSP_EFORKED);
        CHECK(rsp_host_fence_wait(f, 1, 0) == RSP_EFORKED);
        CHECK(rsp_host_fence_value(f) == 0);
        rsp_host_fence_signal(f, 9); /* nothing */
        rsp_host_fence_destroy(f);   /* nothing */
        CHECK(rsp_event_wait(pool, &a.ready, RSP_WAIT_FOREVER, &err) == RSP_EFORKED);
        CHECK(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, &err) == RSP_EFORKED);
        CHECK(rsp_plan_ref(plan) == NULL);
        CHECK(rsp_plan_step_id(plan) == 0);
        CHECK(!rsp_plan_is_staged(plan));
        rsp_plan_unref(plan); /* nothing */
        CHECK(rsp_read_begin() == RSP_EFORKED);
        CHECK(rsp_read_end() == RSP_EFORKED);
        CHECK(rsp_reader_register(&err) == RSP_EFORKED);
        CHECK(rsp_plan_live(pool) == NULL);
        CHECK(rsp_wait(t, RSP_WAIT_FOREVER, NULL) == RSP_EFORKED);
        CHECK(rsp_post(pool, &bar, NULL, 0, &err) == RSP_EFORKED);
        CHECK(rsp_barrier(pool, &err) == RSP_EFORKED);
        CHECK(rsp_plan_wait(pool, 1, RSP_WAIT_FOREVER, &err) == RSP_EFORKED);
        rsp_stats st;
        CHECK(rsp_stats_peek(pool, &st, &err) == RSP_EFORKED);
        rsp_pool_info info;
        CHECK(rsp_pool_info_get(pool, &info, &err) == RSP_EFORKED);
        CHECK(rsp_pool_close(pool, &err) == RSP_EFORKED);
        CHECK(strstr(err.message, "fork") != NULL);
        rsp_pool_destroy(pool); /* returns at once */
        /* The pure helpers still work. */
        CHECK(rsp_dtype_size(RSP_DTYPE_F32) == 4);
        CHECK(rsp_event_host(f, 3).kind == RSP_EVENT_HOST_FENCE);
        CHECK(strstr(rsp_strerror(RSP_EFORKED), "RSP_EFORKED") != NULL);
#undef CHECK
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status))
        print_error("child killed by signal %d\n", WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        print_error("child check %d failed\n", WEXITSTATUS(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* The parent is unaffected. */
    assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, NULL), RSP_OK);
    assert_int_equal(rsp_host_fence_value(f), 5);
    rsp_plan_unref(plan);
    rsp_host_fence_destroy(f);
    rsp_reader_unregister();
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

/* ------------------------------------------------------------------------ */
/* Item 12: destroy inside a read section, unbalanced rsp_read_end           */
/* ------------------------------------------------------------------------ */

static void pool_close_inside_a_read_section_is_refused_with_a_message(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    rsp_error err = {0};
    assert_int_equal(rsp_pool_close(pool, &err), RSP_EINVAL);
    assert_int_equal(err.status, RSP_EINVAL);
    assert_non_null(strstr(err.message, "read section"));
    rsp_pool_destroy(pool); /* also nothing: the same refusal, status dropped */
    assert_int_equal(rsp_read_end(), RSP_OK);
    /* The pool is intact and still works. */
    assert_int_equal(rsp_ingest(pool, 1, NULL), RSP_OK);
    assert_int_equal(stats(pool).num_requests, 1);
    rsp_reader_unregister();
    assert_int_equal(rsp_pool_close(pool, &err), RSP_OK);
    assert_int_equal(rsp_pool_close(NULL, &err), RSP_OK);
}

/* Debug and sanitizer builds of the library print misuse that returns a
 * status callers often drop; the tests are built with the same flags. */
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define EXPECT_REPORT 1
#else
#define EXPECT_REPORT 0
#endif

/* rsp_read_end with stderr captured into buf. */
static rsp_status read_end_captured(char *buf, size_t size)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 2);
    rsp_status st = rsp_read_end();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(buf, 1, size - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
    return st;
}

static void unbalanced_read_end_is_refused_and_keeps_the_nesting(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool(4);
    admit_plan(pool, 1, 1);
    char out[512];
    /* Not even registered: no section. */
    assert_int_equal(read_end_captured(out, sizeof out), RSP_EINVAL);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    assert_int_equal(read_end_captured(out, sizeof out), RSP_EINVAL);
    if (EXPECT_REPORT)
        assert_non_null(strstr(out, "rsp_read_end without an open read section"));
    assert_int_equal(rsp_read_begin(), RSP_OK);
    assert_int_equal(rsp_read_begin(), RSP_OK);
    assert_int_equal(rsp_read_end(), RSP_OK);
    assert_non_null(rsp_plan_live(pool)); /* still inside the outer section */
    assert_int_equal(rsp_read_end(), RSP_OK);
    assert_null(rsp_plan_live(pool)); /* outside */
    assert_int_equal(read_end_captured(out, sizeof out), RSP_EINVAL);
    /* The count did not go below zero: one begin opens one section, and a
     * wait on the owner is allowed again after its end. */
    assert_int_equal(rsp_read_begin(), RSP_OK);
    rsp_error err;
    assert_int_equal(rsp_barrier(pool, &err), RSP_EINVAL); /* inside a section */
    assert_int_equal(rsp_read_end(), RSP_OK);
    assert_int_equal(rsp_barrier(pool, &err), RSP_OK);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(events_of_a_kind_the_host_device_cannot_wait_on_are_refused),
        cmocka_unit_test(host_fence_destroyed_right_after_its_post_outlives_a_late_owner),
        cmocka_unit_test(fence_reference_of_a_refused_post_is_dropped),
        cmocka_unit_test(destroy_wakes_a_plan_waiter_and_waits_for_it_to_leave),
        cmocka_unit_test(every_call_in_a_forked_child_answers_eforked),
        cmocka_unit_test(pool_close_inside_a_read_section_is_refused_with_a_message),
        cmocka_unit_test(unbalanced_read_end_is_refused_and_keeps_the_nesting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
