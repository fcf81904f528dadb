/*
 * The 0.1 names (docs/abi.md, "Names"): each deprecated alias answers as
 * the 0.2 call that replaced it, success and refusal alike, and the new
 * read-side call rsp_read_explain words each status rsp_read_begin gives.
 * The aliases are called on purpose: their deprecation warning is off here.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>
#include "../util/small_pool.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static rsp_pool *make_pool(void)
{
    rsp_pool_config cfg;
    small_pool_config(&cfg, 8);
    rsp_pool *pool = NULL;
    rsp_error err;
    assert_int_equal(rsp_pool_create(&cfg, &pool, &err), RSP_OK);
    return pool;
}

static void stats_aliases_read_what_the_new_calls_read(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool();
    rsp_error err;
    assert_int_equal(rsp_ingest(pool, 1, &err), RSP_OK);
    rsp_stats a, b;
    assert_int_equal(rsp_stats_snapshot(pool, &a, &err), RSP_OK);
    assert_int_equal(rsp_stats_get(pool, &b, &err), RSP_OK);
    /* Two snapshots of an idle pool differ only in messages_handled (the
     * first snapshot is one more message handled). */
    assert_int_equal(b.messages_handled, a.messages_handled + 1);
    b.messages_handled = a.messages_handled;
    /* The aliases are what 0.1 programs call: they write 0.1's struct. */
    assert_memory_equal(&a, &b, sizeof(rsp_stats_0_1));
    assert_int_equal(rsp_stats_peek(pool, &a, &err), RSP_OK);
    assert_int_equal(rsp_pool_counters(pool, &b, &err), RSP_OK);
    assert_memory_equal(&a, &b, sizeof(rsp_stats_0_1));
    assert_int_equal(a.num_requests, 1);
    /* Refusals word the same. */
    assert_int_equal(rsp_pool_counters(pool, NULL, &err), RSP_EINVAL);
    assert_string_equal(err.message, "out is NULL");
    assert_int_equal(rsp_stats_get(pool, NULL, &err), RSP_EINVAL);
    rsp_pool_destroy(pool);
}

static void clear_preplan_is_step_unstage(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool();
    rsp_error err;
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1, .preplan = true};
    rsp_admit_outcome out;
    assert_int_equal(rsp_step_admit(pool, &s, &out, &err), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_OK);
    rsp_stats st;
    assert_int_equal(rsp_stats_snapshot(pool, &st, &err), RSP_OK);
    assert_int_equal(st.stages, 1);
    assert_int_equal(rsp_clear_preplan(pool, &err), RSP_OK);
    /* The stage is gone: planning it again stages anew (RSP_ESTAGED had it
     * stayed). */
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_OK);
    assert_int_equal(rsp_step_unstage(pool, &err), RSP_OK);
    assert_int_equal(rsp_step_unstage(pool, &err), RSP_OK); /* none: fine */
    rsp_pool_destroy(pool);
}

static void plan_aliases_find_the_plans_the_new_calls_find(void **state)
{
    (void)state;
    rsp_pool *pool = make_pool();
    rsp_error err;
    rsp_row row = {.rid = 1, .label = RSP_LABEL_MAIN, .span = 1};
    rsp_step s = {.step_id = 1, .rows = &row, .num_rows = 1};
    rsp_admit_outcome out;
    assert_int_equal(rsp_step_admit(pool, &s, &out, &err), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s, &err), RSP_OK);
    assert_int_equal(rsp_reader_register(&err), RSP_OK);
    assert_int_equal(rsp_read_begin_err(&err), RSP_OK);
    const rsp_plan *plan = rsp_plan_of_step(pool, 1);
    assert_non_null(plan);
    assert_ptr_equal(rsp_plan_get(pool, 1), plan);
    assert_null(rsp_plan_get(pool, 2));
    rsp_addressing a, b;
    assert_int_equal(rsp_plan_live_addressing(pool, RSP_LABEL_MAIN, &a, &err), RSP_OK);
    assert_int_equal(rsp_live_addressing(pool, RSP_LABEL_MAIN, &b, &err), RSP_OK);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(rsp_live_addressing(pool, RSP_LABEL_MAIN, NULL, &err), RSP_EINVAL);
    assert_string_equal(err.message, "out is NULL");
    assert_int_equal(rsp_read_end(), RSP_OK);
    rsp_reader_unregister();
    rsp_event done = rsp_event_complete();
    assert_int_equal(rsp_step_commit(pool, &s, &done, &err), RSP_OK);
    rsp_pool_destroy(pool);
}

static void *begin_both_ways(void *arg)
{
    rsp_error *e = arg; /* [0]: rsp_read_begin_err, [1]: begin then explain */
    e[0].status = rsp_read_begin_err(&e[0]);
    e[1].status = rsp_read_explain(rsp_read_begin(), &e[1]);
    return NULL;
}

static void read_explain_words_what_read_begin_err_did(void **state)
{
    (void)state;
    rsp_error e[2];
    memset(e, 0, sizeof e);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, begin_both_ways, e), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(e[0].status, RSP_ENOTREG);
    assert_int_equal(e[1].status, RSP_ENOTREG);
    assert_string_equal(e[0].message, e[1].message);
    assert_non_null(strstr(e[1].message, "rsp_reader_register"));
    /* RSP_OK leaves err alone; a status rsp_read_begin never gives is
     * still worded. */
    rsp_error err = {.status = RSP_EFULL, .message = "kept"};
    assert_int_equal(rsp_read_explain(RSP_OK, &err), RSP_OK);
    assert_string_equal(err.message, "kept");
    assert_int_equal(rsp_read_explain(RSP_EFULL, &err), RSP_EFULL);
    assert_int_equal(err.status, RSP_EFULL);
    assert_non_null(strstr(err.message, "rsp_read_begin"));
    assert_int_equal(rsp_read_explain(RSP_EINVAL, NULL), RSP_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stats_aliases_read_what_the_new_calls_read),
        cmocka_unit_test(clear_preplan_is_step_unstage),
        cmocka_unit_test(plan_aliases_find_the_plans_the_new_calls_find),
        cmocka_unit_test(read_explain_words_what_read_begin_err_did),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
