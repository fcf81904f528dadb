/*
 * Waiting well (src/actor/spin.h): the learned spin budget and the
 * fallback decision, driven with made-up timings (no clock, no threads).
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "actor/spin.h"

#define CAP 50000u

/* n waits that each took waited_ns, seen by the spin when it fits the
 * budget (a partner with a core of its own). */
static rsp__spin run_own_core(rsp__spin s, int n, uint64_t waited_ns)
{
    for (int i = 0; i < n; i++) {
        uint64_t b = rsp__spin_budget(s, CAP);
        s = rsp__spin_learn(s, b, b && waited_ns <= b, waited_ns, CAP);
    }
    return s;
}

static void pack_round_trips(void **state)
{
    (void)state;
    rsp__spin s = {.est_ns = 123456, .fails = 3, .level = 7, .skip = 1024};
    rsp__spin u = rsp__spin_unpack(rsp__spin_pack(s));
    assert_int_equal(u.est_ns, s.est_ns);
    assert_int_equal(u.fails, s.fails);
    assert_int_equal(u.level, s.level);
    assert_int_equal(u.skip, s.skip);
    rsp__spin z = rsp__spin_unpack(0);
    assert_int_equal(z.est_ns + z.fails + z.level + z.skip, 0);
}

/* A fresh state spins the slack; the budget is twice the estimate plus
 * the slack, capped. */
static void budget_is_twice_the_estimate_plus_slack_capped(void **state)
{
    (void)state;
    rsp__spin s = {0};
    assert_int_equal(rsp__spin_budget(s, CAP), RSP__SPIN_SLACK_NS);
    s.est_ns = 2000;
    assert_int_equal(rsp__spin_budget(s, CAP), 2 * 2000 + RSP__SPIN_SLACK_NS);
    s.est_ns = 40000;
    assert_int_equal(rsp__spin_budget(s, CAP), CAP);
    assert_int_equal(rsp__spin_budget(s, 3000), 3000);
    s.skip = 1;
    assert_int_equal(rsp__spin_budget(s, CAP), 0);
}

/* The estimate follows the waits (weight 1/4), long waits enter capped. */
static void estimate_follows_the_waits(void **state)
{
    (void)state;
    rsp__spin s = {0};
    s = rsp__spin_learn(s, RSP__SPIN_SLACK_NS, false, 4000, CAP);
    assert_int_equal(s.est_ns, 1000);
    s = rsp__spin_learn(s, 3000, false, 4000, CAP);
    assert_int_equal(s.est_ns, 1750);
    /* Converges on a steady wait, and the budget then covers it. */
    s = run_own_core((rsp__spin){0}, 40, 3000);
    assert_in_range(s.est_ns, 2900, 3000);
    assert_true(rsp__spin_budget(s, CAP) >= 3000);
    assert_int_equal(s.fails, 0);
    assert_int_equal(s.skip, 0);
    /* Downwards too. */
    s = run_own_core(s, 40, 500);
    assert_in_range(s.est_ns, 500, 600);
    /* A wait of seconds (an idle pool) enters as the cap. */
    s = rsp__spin_learn((rsp__spin){0}, 0, false, 5000000000ull, CAP);
    assert_int_equal(s.est_ns, CAP / 4);
}

/* A partner with a core of its own: waits of 2 us learned within a few
 * waits, after which every spin sees the event and none is skipped. */
static void own_core_spins_succeed_and_never_back_off(void **state)
{
    (void)state;
    rsp__spin s = {0};
    int fails = 0, skipped = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t b = rsp__spin_budget(s, CAP);
        bool seen = b && 2000 <= b;
        fails += b && !seen;
        skipped += b == 0;
        s = rsp__spin_learn(s, b, seen, 2000 + (seen ? 0 : 5000), CAP);
    }
    assert_true(fails <= 3); /* only while learning */
    assert_int_equal(skipped, 0);
    assert_int_equal(s.level, 0);
}

/* A shared core: the partner cannot run while we spin, so every spin runs
 * out (the event comes only after we sleep). After RSP__SPIN_FAILS in a row
 * the next 8 waits do not spin, then one probe; the back-off doubles up to
 * 8 << RSP__SPIN_MAX_LEVEL, so spinning becomes rare. */
static void shared_core_falls_back_and_backs_off(void **state)
{
    (void)state;
    rsp__spin s = {0};
    for (unsigned i = 0; i < RSP__SPIN_FAILS; i++) {
        uint64_t b = rsp__spin_budget(s, CAP);
        assert_true(b > 0);
        s = rsp__spin_learn(s, b, false, b + 7000, CAP);
    }
    assert_int_equal(s.skip, 8);
    assert_int_equal(s.level, 1);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(rsp__spin_budget(s, CAP), 0);
        s = rsp__spin_learn(s, 0, false, 9000, CAP);
    }
    assert_true(rsp__spin_budget(s, CAP) > 0); /* the probe */
    /* Keep failing: count spins over many waits. */
    int spins = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t b = rsp__spin_budget(s, CAP);
        spins += b != 0;
        s = rsp__spin_learn(s, b, false, b + 9000, CAP);
    }
    assert_int_equal(s.level, RSP__SPIN_MAX_LEVEL);
    assert_true(spins < 20000 / 100); /* under 1% of the waits spin */
}

/* One success ends the back-off: fails and level reset. */
static void one_success_resets_the_back_off(void **state)
{
    (void)state;
    rsp__spin s = {.est_ns = 1000, .fails = 2, .level = 5};
    s = rsp__spin_learn(s, 3000, true, 1500, CAP);
    assert_int_equal(s.fails, 0);
    assert_int_equal(s.level, 0);
    assert_int_equal(s.skip, 0);
    /* Failures not in a row do not back off. */
    for (int i = 0; i < 100; i++) {
        uint64_t b = rsp__spin_budget(s, CAP);
        s = rsp__spin_learn(s, b, i % 3 != 0, i % 3 ? 1000 : CAP, CAP);
    }
    assert_int_equal(s.skip, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pack_round_trips),
        cmocka_unit_test(budget_is_twice_the_estimate_plus_slack_capped),
        cmocka_unit_test(estimate_follows_the_waits),
        cmocka_unit_test(own_core_spins_succeed_and_never_back_off),
        cmocka_unit_test(shared_core_falls_back_and_backs_off),
        cmocka_unit_test(one_success_resets_the_back_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
