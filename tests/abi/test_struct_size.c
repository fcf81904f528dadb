/*
 * rsp_pool_config's struct_size (docs/abi.md "Structs"): the init stamps
 * the caller's size and writes no byte past it, and rsp_pool_create and
 * rsp_shard_shapes refuse a config whose size is missing, too small, or
 * larger with a byte this library does not know, changing nothing.
 * Linked against librsp.so, as a program built elsewhere.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#define GUARD 0xab
#define EXTRA 32 /* a newer header's fields, past this struct */

static rsp_block_config block = {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};

/* A buffer of sizeof(rsp_pool_config) + EXTRA bytes, all GUARD. */
static unsigned char *guarded(void)
{
    unsigned char *b = malloc(sizeof(rsp_pool_config) + EXTRA);
    assert_non_null(b);
    memset(b, GUARD, sizeof(rsp_pool_config) + EXTRA);
    return b;
}

static void assert_untouched(const unsigned char *b, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        assert_int_equal(b[i], GUARD);
}

static void small(rsp_pool_config *cfg)
{
    cfg->num_layers = 1;
    cfg->blocks = &block;
    cfg->num_blocks = 1;
    cfg->max_slots = 4;
}

static void init_stamps_the_callers_size(void **state)
{
    (void)state;
    unsigned char *b = guarded();
    rsp_pool_config *cfg = (rsp_pool_config *)b;
    rsp_pool_config_init(cfg); /* the macro: this header's sizeof */
    assert_int_equal(cfg->struct_size, sizeof(rsp_pool_config));
    assert_true(cfg->sink);
    assert_int_equal(cfg->world_size, 1);
    assert_int_equal(cfg->owner_cpu, -1);
    assert_int_equal(cfg->num_layers, 0);
    assert_untouched(b, sizeof(rsp_pool_config), sizeof(rsp_pool_config) + EXTRA);

    /* The exported function, as a 0.1.0 binary calls it: 0.1's bytes only. */
    memset(b, GUARD, sizeof(rsp_pool_config) + EXTRA);
    void (*fn)(rsp_pool_config *) = &rsp_pool_config_init;
    fn(cfg);
    assert_int_equal(cfg->struct_size, RSP_POOL_CONFIG_SIZE_0_1);
    assert_int_equal(cfg->owner_cpu, -1);
    assert_untouched(b, RSP_POOL_CONFIG_SIZE_0_1, sizeof(rsp_pool_config) + EXTRA);

    /* A newer header's larger struct: the tail past this library's is zeroed. */
    memset(b, GUARD, sizeof(rsp_pool_config) + EXTRA);
    assert_int_equal(rsp_pool_config_init_size(cfg, sizeof(rsp_pool_config) + EXTRA), RSP_OK);
    assert_int_equal(cfg->struct_size, sizeof(rsp_pool_config) + EXTRA);
    for (size_t i = sizeof(rsp_pool_config); i < sizeof(rsp_pool_config) + EXTRA; i++)
        assert_int_equal(b[i], 0);

    /* Too small, or NULL: refused, nothing written. */
    memset(b, GUARD, sizeof(rsp_pool_config) + EXTRA);
    assert_int_equal(rsp_pool_config_init_size(cfg, RSP_POOL_CONFIG_SIZE_0_1 - 1), RSP_EINVAL);
    assert_int_equal(rsp_pool_config_init_size(cfg, 0), RSP_EINVAL);
    assert_untouched(b, 0, sizeof(rsp_pool_config) + EXTRA);
    assert_int_equal(rsp_pool_config_init_size(NULL, sizeof(rsp_pool_config)), RSP_EINVAL);
    free(b);
}

/* rsp_pool_create and rsp_shard_shapes refuse cfg with a message naming
 * `what`; nothing is created. */
static void assert_refused(const rsp_pool_config *cfg, const char *what)
{
    rsp_error e = {0};
    rsp_pool *pool = (rsp_pool *)&e;
    assert_int_equal(rsp_pool_create(cfg, &pool, &e), RSP_EINVAL);
    assert_null(pool);
    assert_non_null(strstr(e.message, what));
    int64_t shapes[1][RSP_MAX_DIMS];
    memset(&e, 0, sizeof e);
    assert_int_equal(rsp_shard_shapes(cfg, shapes, &e), RSP_EINVAL);
    assert_non_null(strstr(e.message, what));
}

static void create_reads_the_stamped_size_only(void **state)
{
    (void)state;
    unsigned char *b = guarded();
    rsp_pool_config *cfg = (rsp_pool_config *)b;

    /* A config that skipped the init. */
    memset(b, 0, sizeof(rsp_pool_config) + EXTRA);
    small(cfg);
    cfg->sink = true;
    cfg->world_size = 1;
    cfg->owner_cpu = -1;
    assert_refused(cfg, "struct_size = 0: fill the config with rsp_pool_config_init");
    cfg->struct_size = RSP_POOL_CONFIG_SIZE_0_1 - 8;
    assert_refused(cfg, "below any release's rsp_pool_config");

    /* A newer caller's struct that leaves its new fields at zero is served. */
    assert_int_equal(rsp_pool_config_init_size(cfg, sizeof(rsp_pool_config) + EXTRA), RSP_OK);
    small(cfg);
    rsp_pool *pool = NULL;
    rsp_error e = {0};
    assert_int_equal(rsp_pool_create(cfg, &pool, &e), RSP_OK);
    rsp_pool_info info;
    assert_int_equal(rsp_pool_info_get(pool, &info, NULL), RSP_OK);
    assert_int_equal(info.max_slots, 4);
    assert_true(info.sink);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
    int64_t shapes[1][RSP_MAX_DIMS];
    assert_int_equal(rsp_shard_shapes(cfg, shapes, NULL), RSP_OK);
    assert_int_equal(shapes[0][0], 4);

    /* ... one that sets a field this library does not know is not. */
    b[sizeof(rsp_pool_config) + 5] = 1;
    assert_refused(cfg, "past this librsp's rsp_pool_config");

    /* The 0.1 layout as the exported init stamps it creates a pool. */
    rsp_pool_config_init_size(cfg, RSP_POOL_CONFIG_SIZE_0_1);
    small(cfg);
    assert_int_equal(rsp_pool_create(cfg, &pool, &e), RSP_OK);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(init_stamps_the_callers_size),
        cmocka_unit_test(create_reads_the_stamped_size_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
