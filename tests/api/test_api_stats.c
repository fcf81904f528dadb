/*
 * rsp_stats_fields: the table made from RSP_STATS_FIELDS covers rsp_stats
 * field by field (offsets in order, widths, no gap, nothing left over),
 * names each metric as Prometheus does, and a snapshot read through the
 * table's offsets gives the struct's own values.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>
#include "../util/small_pool.h"

static void the_table_covers_rsp_stats_in_order(void **state)
{
    (void)state;
    uint32_t n = 0;
    const rsp_stats_field *f = rsp_stats_fields(&n);
    assert_non_null(f);
    assert_ptr_equal(rsp_stats_fields(NULL), f);
    assert_true(n > 0);
    uint32_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        assert_true(f[i].bits == 32 || f[i].bits == 64);
        /* Each field where the previous ended, aligned to its width. */
        uint32_t align = f[i].bits / 8;
        at = (at + align - 1) / align * align;
        assert_int_equal(f[i].offset, at);
        at += f[i].bits / 8;
        char want[96];
        snprintf(want, sizeof want, "rsp_%s%s", f[i].name,
                 f[i].kind == RSP_METRIC_COUNTER ? "_total" : "");
        assert_string_equal(f[i].metric, want);
        assert_true(f[i].help[0] != '\0');
    }
    assert_int_equal((at + 7) / 8 * 8, sizeof(rsp_stats));
    /* Fields the ABI test pins: the first, one in the middle, the last. */
    assert_string_equal(f[0].name, "max_slots");
    assert_int_equal(f[0].offset, offsetof(rsp_stats, max_slots));
    assert_int_equal(f[n - 1].offset, offsetof(rsp_stats, guard_violations));
}

static void a_snapshot_reads_the_same_through_the_table(void **state)
{
    (void)state;
    rsp_pool_config cfg;
    small_pool_config(&cfg, 8);
    rsp_pool *pool = NULL;
    rsp_error err;
    assert_int_equal(rsp_pool_create(&cfg, &pool, &err), RSP_OK);
    assert_int_equal(rsp_ingest(pool, 1, &err), RSP_OK);
    assert_int_equal(rsp_ingest(pool, 2, &err), RSP_OK);
    rsp_stats s;
    assert_int_equal(rsp_stats_snapshot(pool, &s, &err), RSP_OK);
    uint32_t n;
    const rsp_stats_field *f = rsp_stats_fields(&n);
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)&s + f[i].offset;
        uint64_t v;
        if (f[i].bits == 32) {
            uint32_t v32;
            memcpy(&v32, p, 4);
            v = v32;
        } else {
            memcpy(&v, p, 8);
        }
        if (strcmp(f[i].name, "num_requests") == 0)
            assert_int_equal(v, s.num_requests);
        if (strcmp(f[i].name, "max_slots") == 0)
            assert_int_equal(v, 8);
        if (strcmp(f[i].name, "messages_handled") == 0)
            assert_int_equal(v, s.messages_handled);
    }
    assert_int_equal(s.num_requests, 2);
    rsp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_table_covers_rsp_stats_in_order),
        cmocka_unit_test(a_snapshot_reads_the_same_through_the_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
