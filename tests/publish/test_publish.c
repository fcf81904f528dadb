/*
 * Plan publication alone: RCU lifetime, references, the retired cap,
 * plan waits, staged vs live, reader registration.
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
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "publish/publish.h"
#include "util/sync.h"

#define ROWS 8

/* A plan whose every value is derived from step: two labels, main (0) and
 * draft (1); draft has a longer (graph bucket) vector. */
static rsp_plan *make_plan(rsp__publisher *p, uint64_t step, bool staged)
{
    int32_t si[2][ROWS * 2];
    bool hs[2][ROWS * 2];
    uint64_t gen[2][ROWS];
    rsp__plan_label_src src[2];
    for (uint32_t l = 0; l < 2; l++) {
        for (uint32_t i = 0; i < ROWS * 2; i++) {
            si[l][i] = (int32_t)((step * 7 + i + l) % 1000);
            hs[l][i] = ((step + i + l) & 1) != 0;
        }
        for (uint32_t i = 0; i < ROWS; i++)
            gen[l][i] = step * 100 + i + l;
        src[l] = (rsp__plan_label_src){.label = l,
                                       .name = l ? "draft" : "main",
                                       .num_rows = ROWS,
                                       .length = l ? ROWS * 2 : ROWS,
                                       .slot_indices = si[l],
                                       .has_state = hs[l],
                                       .generations = gen[l],
                                       .device_slot_indices = (void *)(uintptr_t)(step + 1),
                                       .device_has_state = NULL};
    }
    rsp_plan *plan = NULL;
    rsp_event ready = {.handle = NULL, .value = step};
    if (rsp__plan_new(p, step, staged, ready, src, 2, &plan, NULL) != RSP_OK)
        return NULL;
    return plan;
}

/* Count the values of plan that differ from what make_plan(step) wrote. */
static uint32_t plan_mismatches(const rsp_plan *plan, uint64_t step)
{
    uint32_t bad = 0;
    if (rsp__plan_step_id(plan) != step)
        bad++;
    for (uint32_t l = 0; l < 2; l++) {
        rsp_addressing a;
        if (rsp__plan_addressing(plan, l, &a, NULL) != RSP_OK) {
            bad++;
            continue;
        }
        if (a.num_rows != ROWS || a.length != (l ? ROWS * 2 : ROWS) || a.step_id != step ||
            a.ready.value != step || a.device_slot_indices != (void *)(uintptr_t)(step + 1))
            bad++;
        for (uint32_t i = 0; i < a.length; i++) {
            if (a.slot_indices[i] != (int32_t)((step * 7 + i + l) % 1000) ||
                a.has_state[i] != (((step + i + l) & 1) != 0))
                bad++;
        }
        for (uint32_t i = 0; i < ROWS; i++)
            if (a.generations[i] != step * 100 + i + l)
                bad++;
    }
    return bad;
}

/* A tiny one-shot event between two test threads. */
typedef struct flag {
    uint32_t v;
} flag;
static void flag_set(flag *f)
{
    rsp__store_release_u32(&f->v, 1);
    rsp__futex_wake_all(&f->v);
}
static void flag_wait(flag *f)
{
    while (rsp__load_acquire_u32(&f->v) == 0)
        rsp__futex_wait(&f->v, 0, NULL);
}

/* ------------------------------------------------------------------------ */

enum { MORE = 10000 };

typedef struct lifetime_ctx {
    rsp__publisher *p;
    flag reader_in, owner_done, reader_out;
    /* recorded by the reader */
    rsp_status begin_st;
    uint64_t first_step;
    uint32_t mismatches;
    uint64_t live_after;
    /* recorded by the owner */
    uint32_t retired_while_reading;
    uint32_t plan_failures;
} lifetime_ctx;

static void *lifetime_owner(void *arg)
{
    lifetime_ctx *c = arg;
    rsp_plan *plan = make_plan(c->p, 0, false);
    if (!plan)
        c->plan_failures++;
    else
        rsp__publish_live(c->p, plan);
    flag_wait(&c->reader_in);
    for (uint64_t s = 1; s <= MORE; s++) {
        plan = make_plan(c->p, s, false);
        if (!plan) {
            c->plan_failures++;
            continue;
        }
        rsp__publish_live(c->p, plan);
    }
    /* The reader is still inside its section: no grace period can end, so
     * nothing retired may have been reclaimed. */
    c->retired_while_reading = rsp__publisher_retired(c->p);
    flag_set(&c->owner_done);
    flag_wait(&c->reader_out);
    return NULL;
}

static void *lifetime_reader(void *arg)
{
    lifetime_ctx *c = arg;
    rsp__reader_register(NULL);
    rsp__publisher_wait(c->p, 0, RSP_WAIT_FOREVER, NULL); /* step 0 is out */
    c->begin_st = rsp__read_begin();
    const rsp_plan *plan = rsp__publisher_live(c->p);
    c->first_step = plan ? rsp__plan_step_id(plan) : UINT64_MAX;
    flag_set(&c->reader_in);
    flag_wait(&c->owner_done);
    /* Under ASan a reclaimed plan would fault here; in every build its
     * contents must be intact. */
    c->mismatches = plan ? plan_mismatches(plan, 0) : 1;
    const rsp_plan *now = rsp__publisher_live(c->p);
    c->live_after = now ? rsp__plan_step_id(now) : UINT64_MAX;
    rsp__read_end();
    rsp__reader_unregister();
    flag_set(&c->reader_out);
    return NULL;
}

static void reader_in_section_keeps_plan_alive_while_owner_publishes_10000_more(void **state)
{
    (void)state;
    lifetime_ctx c;
    memset(&c, 0, sizeof c);
    /* A cap above 10,000: the owner must never fall back to
     * synchronize_rcu, which would wait for this very reader. */
    assert_int_equal(rsp__publisher_create(2 * MORE, &c.p, NULL), RSP_OK);
    pthread_t o, r;
    assert_int_equal(pthread_create(&o, NULL, lifetime_owner, &c), 0);
    assert_int_equal(pthread_create(&r, NULL, lifetime_reader, &c), 0);
    pthread_join(r, NULL);
    pthread_join(o, NULL);
    rsp__publisher_destroy(c.p);

    assert_int_equal(c.plan_failures, 0);
    assert_int_equal(c.begin_st, RSP_OK);
    assert_int_equal(c.first_step, 0);
    assert_int_equal(c.mismatches, 0);
    assert_int_equal(c.live_after, MORE);
    assert_int_equal(c.retired_while_reading, MORE);
}

/* ------------------------------------------------------------------------ */

typedef struct ref_ctx {
    rsp__publisher *p;
    flag got_ref, owner_done;
    const rsp_plan *held;
    uint32_t mismatches;
    uint32_t objects_while_held;
} ref_ctx;

static void *ref_reader(void *arg)
{
    ref_ctx *c = arg;
    rsp__reader_register(NULL);
    rsp__read_begin();
    const rsp_plan *plan = rsp__publisher_live(c->p);
    c->held = plan ? rsp__plan_ref(plan) : NULL;
    rsp__read_end();
    flag_set(&c->got_ref);
    flag_wait(&c->owner_done);
    c->mismatches = c->held ? plan_mismatches(c->held, 3) : 1;
    if (c->held)
        rsp__plan_unref(c->held);
    rsp__reader_unregister();
    return NULL;
}

static void reference_keeps_plan_past_the_read_section(void **state)
{
    (void)state;
    ref_ctx c;
    memset(&c, 0, sizeof c);
    /* A tiny cap: the owner also goes through synchronize_rcu, which must
     * not free a referenced plan either. */
    assert_int_equal(rsp__publisher_create(2, &c.p, NULL), RSP_OK);
    rsp__publish_live(c.p, make_plan(c.p, 3, false));
    pthread_t r;
    assert_int_equal(pthread_create(&r, NULL, ref_reader, &c), 0);
    flag_wait(&c.got_ref);
    for (uint64_t s = 4; s < 200; s++)
        rsp__publish_live(c.p, make_plan(c.p, s, false));
    c.objects_while_held = rsp__publisher_objects(c.p);
    flag_set(&c.owner_done);
    pthread_join(r, NULL);
    rsp__publisher_destroy(c.p);
    assert_non_null(c.held);
    assert_int_equal(c.mismatches, 0);
    /* The live plan, the referenced one, and whatever the reclaimer holds. */
    assert_true(c.objects_while_held >= 2);
}

/* ------------------------------------------------------------------------ */

typedef struct churn_ctx {
    rsp__publisher *p;
    uint32_t *stop;
    uint64_t sections; /* this reader's, read after join */
    uint32_t mismatches;
} churn_ctx;

static void *churn_reader(void *arg)
{
    churn_ctx *c = arg;
    rsp__reader_register(NULL);
    while (!rsp__load_acquire_u32(c->stop)) {
        rsp__read_begin();
        const rsp_plan *plan = rsp__publisher_live(c->p);
        if (plan)
            c->mismatches += plan_mismatches(plan, rsp__plan_step_id(plan));
        rsp__read_end();
        c->sections++;
    }
    rsp__reader_unregister();
    return NULL;
}

static void retired_plans_stay_under_the_cap(void **state)
{
    (void)state;
    rsp__publisher *p;
    uint32_t stop = 0;
    assert_int_equal(rsp__publisher_create(4, &p, NULL), RSP_OK);
    churn_ctx c[2];
    pthread_t r[2];
    for (int i = 0; i < 2; i++) {
        c[i] = (churn_ctx){.p = p, .stop = &stop};
        assert_int_equal(pthread_create(&r[i], NULL, churn_reader, &c[i]), 0);
    }
    for (uint64_t s = 1; s <= 2000; s++)
        rsp__publish_live(p, make_plan(p, s, false));
    rsp__store_release_u32(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(r[i], NULL);
    uint32_t max = rsp__publisher_retired_max(p);
    rsp__publisher_destroy(p);
    for (int i = 0; i < 2; i++)
        assert_int_equal(c[i].mismatches, 0);
    assert_true(max <= 4);
    assert_true(max >= 1);
}

/* ------------------------------------------------------------------------ */

typedef struct wait_ctx {
    rsp__publisher *p;
    uint64_t want;
    uint64_t timeout;
    rsp_status st;
    uint64_t seen; /* the live step right after the wait returned */
    flag started;
} wait_ctx;

static void *waiter_main(void *arg)
{
    wait_ctx *w = arg;
    rsp__reader_register(NULL);
    flag_set(&w->started);
    w->st = rsp__publisher_wait(w->p, w->want, w->timeout, NULL);
    rsp__read_begin();
    const rsp_plan *plan = rsp__publisher_live(w->p);
    w->seen = plan ? rsp__plan_step_id(plan) : 0;
    rsp__read_end();
    rsp__reader_unregister();
    return NULL;
}

static void plan_wait_wakes_on_the_right_step(void **state)
{
    (void)state;
    rsp__publisher *p;
    assert_int_equal(rsp__publisher_create(0, &p, NULL), RSP_OK);
    enum { W = 4 };
    wait_ctx w[W];
    pthread_t th[W];
    const uint64_t wants[W] = {1, 50, 99, 100};
    for (int i = 0; i < W; i++) {
        w[i] = (wait_ctx){.p = p, .want = wants[i], .timeout = RSP_WAIT_FOREVER};
        assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
    }
    for (int i = 0; i < W; i++)
        flag_wait(&w[i].started);
    for (uint64_t s = 1; s <= 100; s++) {
        rsp__publish_live(p, make_plan(p, s, false));
        if (s % 10 == 0)
            sched_yield();
    }
    for (int i = 0; i < W; i++)
        pthread_join(th[i], NULL);

    /* Past the last step: a bounded wait times out, a poll too. */
    rsp_error err;
    assert_int_equal(rsp__publisher_wait(p, 101, 1000 * 1000, &err), RSP_ETIMEDOUT);
    assert_non_null(strstr(err.message, "101"));
    assert_int_equal(rsp__publisher_wait(p, 101, 0, NULL), RSP_ETIMEDOUT);
    assert_int_equal(rsp__publisher_wait(p, 100, 0, NULL), RSP_OK);

    /* A waiter for a step that never comes is released by close. */
    wait_ctx late = {.p = p, .want = 1000, .timeout = RSP_WAIT_FOREVER};
    pthread_t lt;
    assert_int_equal(pthread_create(&lt, NULL, waiter_main, &late), 0);
    flag_wait(&late.started);
    rsp__publisher_close(p);
    pthread_join(lt, NULL);

    rsp__publisher_destroy(p);
    for (int i = 0; i < W; i++) {
        assert_int_equal(w[i].st, RSP_OK);
        assert_true(w[i].seen >= w[i].want);
    }
    assert_int_equal(late.st, RSP_ESHUTDOWN);
}

/* ------------------------------------------------------------------------ */

static void staged_and_live_are_separate(void **state)
{
    (void)state;
    rsp__publisher *p;
    assert_int_equal(rsp__publisher_create(0, &p, NULL), RSP_OK);
    rsp__reader_register(NULL);

    assert_int_equal(rsp__read_begin(), RSP_OK);
    assert_null(rsp__publisher_live(p));
    assert_null(rsp__publisher_staged(p));
    rsp__read_end();

    rsp__publish_live(p, make_plan(p, 5, false));
    rsp__publish_staged(p, make_plan(p, 6, true));
    assert_int_equal(rsp__read_begin(), RSP_OK);
    const rsp_plan *live = rsp__publisher_live(p);
    const rsp_plan *staged = rsp__publisher_staged(p);
    assert_non_null(live);
    assert_non_null(staged);
    assert_int_equal(rsp__plan_step_id(live), 5);
    assert_false(rsp__plan_is_staged(live));
    assert_int_equal(rsp__plan_step_id(staged), 6);
    assert_true(rsp__plan_is_staged(staged));
    rsp_addressing a;
    assert_int_equal(rsp__plan_addressing(staged, 1, &a, NULL), RSP_OK);
    assert_true(a.staged);
    assert_int_equal(plan_mismatches(live, 5), 0);
    rsp__read_end();

    /* Unpublishing the stage leaves the live plan alone. */
    rsp__publish_staged(p, NULL);
    assert_int_equal(rsp__read_begin(), RSP_OK);
    assert_null(rsp__publisher_staged(p));
    assert_int_equal(rsp__plan_step_id(rsp__publisher_live(p)), 5);
    rsp__read_end();

    rsp__reader_unregister();
    rsp__publisher_destroy(p);
}

static void addressing_of_unplanned_label_names_the_planned_ones(void **state)
{
    (void)state;
    rsp__publisher *p;
    assert_int_equal(rsp__publisher_create(0, &p, NULL), RSP_OK);
    rsp_plan *plan = make_plan(p, 9, false);
    rsp_error err;
    rsp_addressing a;
    memset(&a, 0x5a, sizeof a);
    rsp_addressing before = a;
    assert_int_equal(rsp__plan_addressing(plan, 7, &a, &err), RSP_ENOPLAN);
    assert_int_equal(err.status, RSP_ENOPLAN);
    assert_non_null(strstr(err.message, "label 7"));
    assert_non_null(strstr(err.message, "main (0)"));
    assert_non_null(strstr(err.message, "draft (1)"));
    assert_memory_equal(&a, &before, sizeof a);
    rsp__plan_discard(plan);
    rsp__publisher_destroy(p);
}

static void *unregistered_main(void *arg)
{
    rsp_status *st = arg;
    st[0] = rsp__read_begin();
    st[1] = rsp__reader_registered() ? RSP_OK : RSP_ENOTREG;
    rsp__read_end(); /* unbalanced: ignored */
    rsp__reader_register(NULL);
    rsp__reader_register(NULL); /* twice: harmless */
    st[2] = rsp__read_begin();
    rsp__read_end();
    rsp__reader_unregister();
    st[3] = rsp__read_begin();
    return NULL;
}

static void unregistered_reader_gets_enotreg(void **state)
{
    (void)state;
    rsp_status st[4] = {RSP_OK, RSP_OK, RSP_EINVAL, RSP_OK};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, unregistered_main, st), 0);
    pthread_join(th, NULL);
    assert_int_equal(st[0], RSP_ENOTREG);
    assert_int_equal(st[1], RSP_ENOTREG);
    assert_int_equal(st[2], RSP_OK);
    assert_int_equal(st[3], RSP_ENOTREG);
}

static void live_outside_a_read_section_is_null(void **state)
{
    (void)state;
    rsp__publisher *p;
    assert_int_equal(rsp__publisher_create(0, &p, NULL), RSP_OK);
    rsp__publish_live(p, make_plan(p, 1, false));
    rsp__reader_register(NULL);
    assert_null(rsp__publisher_live(p));
    rsp__reader_unregister();
    rsp__publisher_destroy(p);
}

static void *forgetful_reader(void *arg)
{
    (void)arg;
    rsp__reader_register(NULL);
    rsp__read_begin();
    rsp__read_end();
    return NULL; /* exits registered: the thread-exit hook unregisters it */
}

static void reader_exiting_registered_does_not_stall_grace_periods(void **state)
{
    (void)state;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, forgetful_reader, NULL), 0);
    pthread_join(th, NULL);
    rsp__publisher *p;
    assert_int_equal(rsp__publisher_create(1, &p, NULL), RSP_OK);
    /* Cap 1: these go through synchronize_rcu, which would wait on a dead
     * registered reader forever. */
    for (uint64_t s = 1; s <= 8; s++)
        rsp__publish_live(p, make_plan(p, s, false));
    rsp__publisher_destroy(p);
}

/* The reclaimer thread frees every retired plan on its own (a grace period
 * per hand-off), with no reader in the way: nothing but the live plan stays
 * alive, and the owner never had to wait at the cap. */
static void reclaimer_frees_retired_plans_without_the_owner(void **state)
{
    (void)state;
    rsp__publisher *p;
    assert_int_equal(rsp__publisher_create(8, &p, NULL), RSP_OK);
    for (uint64_t s = 1; s <= 1000; s++) {
        rsp__publish_live(p, make_plan(p, s, false));
        if (s % 100 == 0)
            rsp__publisher_flush(p); /* what an idle owner does */
    }
    /* A partial batch that did not fit next to the reclaimer's share stays
     * with the owner until a later flush (an idle owner flushes again when
     * it next goes idle). */
    while (rsp__publisher_retired(p) != 0 || rsp__publisher_objects(p) != 1) {
        rsp__publisher_flush(p);
        sched_yield();
    }
    assert_true(rsp__publisher_retired_max(p) <= 8);
    rsp__publisher_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reader_in_section_keeps_plan_alive_while_owner_publishes_10000_more),
        cmocka_unit_test(reference_keeps_plan_past_the_read_section),
        cmocka_unit_test(retired_plans_stay_under_the_cap),
        cmocka_unit_test(plan_wait_wakes_on_the_right_step),
        cmocka_unit_test(staged_and_live_are_separate),
        cmocka_unit_test(addressing_of_unplanned_label_names_the_planned_ones),
        cmocka_unit_test(unregistered_reader_gets_enotreg),
        cmocka_unit_test(live_outside_a_read_section_is_null),
        cmocka_unit_test(reader_exiting_registered_does_not_stall_grace_periods),
        cmocka_unit_test(reclaimer_frees_retired_plans_without_the_owner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
