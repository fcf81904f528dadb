/*
 * The publisher's invariants (RSP__ASSERT, active in Debug and sanitizer
 * builds): a plan misused from inside the library (published twice,
 * discarded while published) aborts at the cause instead of corrupting the
 * reference count or a retired batch. Each case runs in a child process,
 * which must die of SIGABRT naming the violated condition; the main thread
 * asserts. Skipped where the asserts are compiled out.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "publish/publish.h"

#include "../util/child_abort.h"

#ifdef RSP_DEBUG_ASSERTS
/* A one-label, one-row plan of step id (the child's: _exit on failure). */
static rsp_plan *child_plan(rsp__publisher *p, uint64_t id)
{
    static int32_t si[1] = {0};
    static bool hs[1] = {true};
    static uint64_t gen[1] = {1};
    const rsp__plan_label_src src = {.label = 0,
                                     .name = "main",
                                     .num_rows = 1,
                                     .length = 1,
                                     .slot_indices = si,
                                     .has_state = hs,
                                     .generations = gen};
    rsp_plan *plan = NULL;
    if (rsp__plan_new(p, id, false, (rsp_event){0}, &src, 1, &plan, NULL) != RSP_OK)
        _exit(2);
    return plan;
}

/* A publisher and a plan of step 1. */
static rsp__publisher *child_publisher(rsp_plan **plan)
{
    rsp__publisher *p = NULL;
    if (rsp__publisher_create(0, &p, NULL) != RSP_OK)
        _exit(2);
    *plan = child_plan(p, 1);
    return p;
}

/* Published twice: the second publication would retire the plan while it
 * is still the live one. */
static void publish_twice(void)
{
    rsp_plan *plan;
    rsp__publisher *p = child_publisher(&plan);
    rsp__publish_live(p, plan);
    rsp__publish_live(p, plan);
}

/* Discarded while published: readers may still see it. */
static void discard_published(void)
{
    rsp_plan *plan;
    rsp__publisher *p = child_publisher(&plan);
    rsp__publish_live(p, plan);
    rsp__plan_discard(plan);
}

/* The control: a plan published, referenced and released, replaced, then
 * destroy: the child exits 0 with nothing on stderr. */
static void well_behaved(void)
{
    rsp_plan *plan;
    rsp__publisher *p = child_publisher(&plan);
    rsp__publish_live(p, plan);
    rsp__plan_unref(rsp__plan_ref(plan));
    rsp__publish_live(p, child_plan(p, 2));
    rsp__publisher_destroy(p);
}
#endif

static void misuse_aborts_at_the_cause(void **state)
{
    (void)state;
#ifndef RSP_DEBUG_ASSERTS
    skip();
#else
    assert_true(aborts_with(publish_twice, ", rsp__publish_live)"));
    assert_true(aborts_with(discard_published, ", rsp__plan_discard)"));
    assert_true(runs_clean(well_behaved));
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(misuse_aborts_at_the_cause),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
