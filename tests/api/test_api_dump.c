/*
 * The state dump (rsp_pool_dump, RSP_MSG_DUMP): the text is JSON (a small
 * validating parser below), its contents are the pool's state (holdings,
 * the free stack, pending slots, checkpoints, steps in flight and their
 * pins), a too-small buffer answers the size it needs, and dumping
 * changes nothing.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

/* --- a JSON validator: RFC 8259's grammar, no numbers' exponent checks --- */

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
        p++;
    return p;
}

static const char *value(const char *p, int depth);

static const char *string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    for (; *p != '"'; p++) {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\' && !*++p)
            return NULL;
    }
    return p + 1;
}

static const char *number(const char *p)
{
    const char *s = p;
    if (*p == '-')
        p++;
    while (*p >= '0' && *p <= '9')
        p++;
    return p > s && p[-1] != '-' ? p : NULL;
}

static const char *members(const char *p, char close, int depth)
{
    p = ws(p);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (close == '}') {
            p = string(ws(p));
            if (!p || *(p = ws(p)) != ':')
                return NULL;
            p++;
        }
        p = value(p, depth + 1);
        if (!p)
            return NULL;
        p = ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *value(const char *p, int depth)
{
    if (depth > 64)
        return NULL;
    p = ws(p);
    switch (*p) {
    case '{': return members(p + 1, '}', depth);
    case '[': return members(p + 1, ']', depth);
    case '"': return string(p);
    case 't': return strncmp(p, "true", 4) ? NULL : p + 4;
    case 'f': return strncmp(p, "false", 5) ? NULL : p + 5;
    case 'n': return strncmp(p, "null", 4) ? NULL : p + 4;
    default: return number(p);
    }
}

static bool is_json(const char *text)
{
    const char *end = value(text, 0);
    return end && *ws(end) == '\0';
}

/* --- the pool ------------------------------------------------------------ */

static rsp_pool *make_pool(void)
{
    static const rsp_block_config block = {
        .name = "s", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 1;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 8;
    cfg.max_checkpoints = 2;
    rsp_pool *pool = NULL;
    rsp_error err;
    rsp_status st = rsp_pool_create(&cfg, &pool, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_create: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    return pool;
}

static void admit_plan(rsp_pool *pool, uint64_t id, const rsp_rid *rids, uint32_t n, rsp_row *rows,
                       rsp_step *s)
{
    for (uint32_t i = 0; i < n; i++)
        rows[i] = (rsp_row){.rid = rids[i], .label = RSP_LABEL_MAIN, .span = 1};
    *s = (rsp_step){.step_id = id, .rows = rows, .num_rows = n};
    rsp_admit_outcome o;
    assert_int_equal(rsp_step_admit(pool, s, &o, NULL), RSP_OK);
    assert_true(o.ok);
    assert_int_equal(rsp_step_plan(pool, s, NULL), RSP_OK);
}

static char *dump(rsp_pool *pool)
{
    size_t needed = 0;
    assert_int_equal(rsp_pool_dump(pool, NULL, 0, &needed, NULL), RSP_OK);
    char *buf = malloc(needed);
    assert_non_null(buf);
    size_t again = 0;
    rsp_error err;
    rsp_status st = rsp_pool_dump(pool, buf, needed, &again, &err);
    if (st != RSP_OK)
        print_error("rsp_pool_dump: %s\n", err.message);
    assert_int_equal(st, RSP_OK);
    assert_int_equal(again, needed);
    assert_int_equal(strlen(buf) + 1, needed);
    return buf;
}

static void has(const char *text, const char *part)
{
    if (!strstr(text, part))
        print_error("the dump lacks %s:\n%s\n", part, text);
    assert_non_null(strstr(text, part));
}

/* Step 1 committed over rids 1, 2, 3; rid 2 removed (its slot on the free
 * stack); a checkpoint of rid 1 under key 7; step 2 planned over rids 1, 3
 * and in flight. */
static rsp_pool *busy_pool(int32_t *slot1, int32_t *slot2)
{
    rsp_pool *pool = make_pool();
    rsp_rid r3[3] = {1, 2, 3};
    rsp_row rows[3];
    rsp_step s;
    admit_plan(pool, 1, r3, 3, rows, &s);
    rsp_event done = rsp_event_complete();
    assert_int_equal(rsp_step_commit(pool, &s, &done, NULL), RSP_OK);
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &h, NULL), RSP_OK);
    *slot1 = h.index;
    assert_int_equal(rsp_holding_get(pool, 2, RSP_LABEL_MAIN, &h, NULL), RSP_OK);
    *slot2 = h.index;
    assert_int_equal(rsp_remove(pool, 2, NULL), RSP_OK);
    assert_int_equal(rsp_checkpoint_take(pool, 7, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, NULL),
                     RSP_OK);
    rsp_rid r2[2] = {1, 3};
    admit_plan(pool, 2, r2, 2, rows, &s);
    return pool;
}

static void the_dump_is_json(void **state)
{
    (void)state;
    assert_true(is_json("{\"a\":[1,-2,true,null,{\"b\":\"x\\\"y\"}]}"));
    assert_false(is_json("{\"a\":[1,]}"));
    assert_false(is_json("{\"a\":1"));
    int32_t s1, s2;
    rsp_pool *pool = busy_pool(&s1, &s2);
    char *text = dump(pool);
    if (!is_json(text))
        print_error("not JSON:\n%s\n", text);
    assert_true(is_json(text));
    free(text);
    rsp_pool *empty = make_pool();
    text = dump(empty);
    assert_true(is_json(text));
    has(text, "\"requests\":[]");
    has(text, "\"steps\":[]");
    has(text, "\"free_stack\":[],\"free_fresh\":[1,8]");
    free(text);
    assert_int_equal(rsp_pool_close(empty, NULL), RSP_OK);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void the_dump_shows_the_state(void **state)
{
    (void)state;
    int32_t s1, s2;
    rsp_pool *pool = busy_pool(&s1, &s2);
    char *text = dump(pool);
    char part[160];
    rsp_holding h;
    assert_int_equal(rsp_holding_get(pool, 1, RSP_LABEL_MAIN, &h, NULL), RSP_OK);
    snprintf(part, sizeof part,
             "{\"rid\":1,\"swapped\":false,\"holdings\":[{\"label\":0,\"slot\":%d,"
             "\"has_state\":true,\"generation\":%llu}]}",
             h.index, (unsigned long long)h.generation);
    has(text, part);
    assert_null(strstr(text, "\"rid\":2,")); /* removed */
    snprintf(part, sizeof part, "\"free_stack\":[%d],\"free_fresh\":[4,8]", s2);
    has(text, part);
    has(text, "{\"id\":0,\"name\":\"main\"}");
    has(text, "\"slots\":{\"max\":8,\"held\":2,\"pending\":0,\"free\":5,");
    has(text, "\"device\":{\"size\":2,\"free\":1,\"lru\":[{\"key\":7,\"slot\":8,\"user_pins\":0,"
              "\"step_pins\":0,");
    has(text, "\"host\":{\"size\":0,\"free\":0,\"lru\":[]}");
    has(text, "{\"step_id\":2,\"phase\":\"planned\",\"capture\":false,");
    rsp_holding h3;
    assert_int_equal(rsp_holding_get(pool, 3, RSP_LABEL_MAIN, &h3, NULL), RSP_OK);
    snprintf(part, sizeof part, "\"pinned\":[%d,%d],\"fresh\":[],\"restores_pinned\":[]", s1,
             h3.index);
    has(text, part);
    has(text, "\"stage\":null");
    has(text, "\"guard\":null");
    free(text);

    /* A removal while step 2 pins the slot: pending, listed. */
    assert_int_equal(rsp_remove(pool, 3, NULL), RSP_OK);
    text = dump(pool);
    snprintf(part, sizeof part, "\"pending\":[{\"slot\":%d,\"state\":\"pending\"", h3.index);
    has(text, part);
    free(text);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void a_small_buffer_answers_the_size_it_needs(void **state)
{
    (void)state;
    int32_t s1, s2;
    rsp_pool *pool = busy_pool(&s1, &s2);
    size_t needed = 0, small_needed = 0;
    assert_int_equal(rsp_pool_dump(pool, NULL, 0, &needed, NULL), RSP_OK);
    assert_true(needed > 100);
    char small[32];
    memset(small, 'x', sizeof small);
    rsp_error err;
    assert_int_equal(rsp_pool_dump(pool, small, sizeof small, &small_needed, &err), RSP_ECAPACITY);
    assert_int_equal(small_needed, needed);
    assert_int_equal(small[0], '\0');
    assert_non_null(strstr(err.message, "needs"));
    char *exact = malloc(needed);
    assert_non_null(exact);
    assert_int_equal(rsp_pool_dump(pool, exact, needed - 1, NULL, NULL), RSP_ECAPACITY);
    assert_int_equal(rsp_pool_dump(pool, exact, needed, NULL, NULL), RSP_OK);
    assert_int_equal(strlen(exact) + 1, needed);
    free(exact);
    assert_int_equal(rsp_pool_dump(pool, NULL, 5, NULL, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "buf"));
    rsp_msg m = {.kind = RSP_MSG_DUMP};
    rsp_ticket *t;
    assert_int_equal(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "rsp_pool_dump"));
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void dumping_changes_nothing(void **state)
{
    (void)state;
    int32_t s1, s2;
    rsp_pool *pool = busy_pool(&s1, &s2);
    rsp_stats before, after;
    assert_int_equal(rsp_stats_snapshot(pool, &before, NULL), RSP_OK);
    char *a = dump(pool);
    char *b = dump(pool);
    char small[8];
    (void)rsp_pool_dump(pool, small, sizeof small, NULL, NULL);
    assert_int_equal(rsp_stats_snapshot(pool, &after, NULL), RSP_OK);
    assert_string_equal(a, b);
    assert_int_equal(after.free_slots, before.free_slots);
    assert_int_equal(after.held_slots, before.held_slots);
    assert_int_equal(after.generation, before.generation);
    assert_int_equal(after.num_requests, before.num_requests);
    assert_int_equal(after.admits_ok, before.admits_ok);
    /* The step in flight still commits as it would have. */
    rsp_row rows[2] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1},
                       {.rid = 3, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s = {.step_id = 2, .rows = rows, .num_rows = 2};
    rsp_event done = rsp_event_complete();
    assert_int_equal(rsp_step_commit(pool, &s, &done, NULL), RSP_OK);
    free(a);
    free(b);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_dump_is_json),
        cmocka_unit_test(the_dump_shows_the_state),
        cmocka_unit_test(a_small_buffer_answers_the_size_it_needs),
        cmocka_unit_test(dumping_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
