/*
 * The actor's invariants (RSP__ASSERT, active in Debug and sanitizer
 * builds): a ticket misused from inside the library (a second release, a
 * second post, a wait on a ticket nobody kept, a pooled ticket never given
 * back) aborts at the cause instead of corrupting a free list. Each case
 * runs in a child process, which must die of SIGABRT naming the violated
 * condition; the main thread asserts. Skipped where the asserts are
 * compiled out.
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

#include "actor/actor.h"

#include "../util/child_abort.h"

#ifdef RSP_DEBUG_ASSERTS
static void no_handler(void *ctx, void *payload, size_t size, rsp_reply *reply)
{
    (void)ctx, (void)payload, (void)size, (void)reply;
}

static rsp__actor *child_actor(void)
{
    rsp__actor_config cfg = {.capacity = 8, .handle = no_handler};
    rsp__actor *a = NULL;
    if (rsp__actor_create(&cfg, &a, NULL) != RSP_OK)
        _exit(2);
    return a;
}

/* Released twice: the second release finds the ticket already free. The
 * first new takes this thread's spare (if any), so the second one is a
 * fresh block that its discard keeps as the spare: the second discard then
 * reads live memory, not freed memory. */
static void release_twice(void)
{
    void *p;
    rsp_ticket *spare = rsp__ticket_new(0, &p);
    rsp_ticket *t = rsp__ticket_new(8, &p);
    if (!spare || !t)
        _exit(2);
    rsp__ticket_discard(t);
    rsp__ticket_discard(t);
}

static void wait_unposted(void)
{
    void *p;
    rsp_ticket *t = rsp__ticket_new(8, &p);
    if (!t)
        _exit(2);
    (void)rsp__ticket_wait(t, 0, NULL);
}

/* Posted twice: the second post finds references on it (the waiter's, and
 * the owner's until it answers). */
static void post_twice(void)
{
    rsp__actor *a = child_actor();
    void *p;
    rsp_ticket *t = rsp__ticket_new(8, &p);
    if (!t || rsp__actor_post(a, t, true, 0, NULL) != RSP_OK)
        _exit(2);
    (void)rsp__actor_post(a, t, true, 0, NULL);
}

/* A pooled ticket taken and never posted nor discarded: destroy counts the
 * free stack and finds one missing. */
static void pooled_leak(void)
{
    rsp__actor *a = child_actor();
    void *p;
    if (!rsp__actor_ticket_new(a, 8, &p))
        _exit(2);
    rsp__actor_destroy(a);
}

/* The control: a kept ticket posted, answered and waited for, a pooled one
 * taken and discarded, destroy with every ticket back: the child exits 0
 * with nothing on stderr. */
static void well_behaved(void)
{
    rsp__actor *a = child_actor();
    void *p;
    rsp_ticket *t = rsp__ticket_new(8, &p);
    if (!t || rsp__actor_post(a, t, true, 0, NULL) != RSP_OK)
        _exit(2);
    if (rsp__ticket_wait(t, UINT64_MAX, NULL) != RSP_OK)
        _exit(2);
    rsp_ticket *u = rsp__actor_ticket_new(a, 8, &p);
    if (!u)
        _exit(2);
    rsp__ticket_discard(u);
    rsp__actor_destroy(a);
}

#endif

static void misuse_aborts_at_the_cause(void **state)
{
    (void)state;
#ifndef RSP_DEBUG_ASSERTS
    skip();
#else
    assert_true(aborts_with(release_twice, "t->state != RSP__TICKET_FREE"));
    assert_true(aborts_with(wait_unposted, "t->kept ("));
    assert_true(aborts_with(post_twice, ", rsp__actor_post)"));
    assert_true(aborts_with(pooled_leak, "rsp__ticket_pooled_free(a)"));
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
