/* Configuration, validation, sharding and byte sizes (docs/semantics.md 1).
 * SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "helpers.h"

static rsp_block_config blocks[3];
static rsp_pool_config cfg;

static int setup(void **state)
{
    (void)state;
    rsp_pool_config_init(&cfg);
    blocks[0] = (rsp_block_config){.name = "conv",
                                   .dtype = RSP_DTYPE_F32,
                                   .ndim = 2,
                                   .shape = {4, 8},
                                   .num_shard_dims = 1,
                                   .shard_dims = {1}};
    blocks[1] = (rsp_block_config){.name = "ssm",
                                   .dtype = RSP_DTYPE_BF16,
                                   .ndim = 3,
                                   .shape = {2, 6, 16},
                                   .num_shard_dims = 1,
                                   .shard_dims = {0}};
    blocks[2] = (rsp_block_config){.name = "x", .dtype = RSP_DTYPE_I8, .ndim = 1, .shape = {3}};
    cfg.blocks = blocks;
    cfg.num_blocks = 3;
    cfg.num_layers = 5;
    cfg.max_slots = 7;
    return 0;
}

/* Expect `st` with a message containing `needle`, and no core created. */
static void expect_invalid(rsp_status st, const char *needle)
{
    rsp_error err = {0};
    rsp__layout lay;
    assert_int_equal(rsp__layout_build(&cfg, &lay, &err), st);
    assert_int_equal(err.status, st);
    if (!strstr(err.message, needle))
        fail_msg("message \"%s\" does not name \"%s\"", err.message, needle);
    rsp__core *core = (rsp__core *)0x1;
    rsp_error err2 = {0};
    assert_int_equal(rsp__core_create(&cfg, &core, &err2), st);
    assert_ptr_equal(core, (rsp__core *)0x1); /* out untouched on failure */
}

static void config_init_sets_defaults(void **state)
{
    (void)state;
    rsp_pool_config c;
    memset(&c, 0xab, sizeof c);
    rsp_pool_config_init(&c);
    assert_true(c.sink);
    assert_int_equal(c.world_size, 1);
    assert_int_equal(c.rank, 0);
    assert_int_equal(c.device, RSP_DEVICE_HOST);
    assert_int_equal(c.max_slots, 0);
    assert_int_equal(c.num_blocks, 0);
    assert_null(c.blocks);
    assert_int_equal(c.max_inflight_steps, 0);
}

static void dtype_sizes(void **state)
{
    (void)state;
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_F32), 4);
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_F16), 2);
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_BF16), 2);
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_F64), 8);
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_I8), 1);
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_U8), 1);
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_I32), 4);
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_I64), 8);
    assert_int_equal(rsp_dtype_size(RSP_DTYPE_COUNT_), 0);
    assert_int_equal(rsp_dtype_size((rsp_dtype)-1), 0);
}

static void layout_sizes_and_derived_fields(void **state)
{
    (void)state;
    rsp__layout lay;
    assert_int_equal(rsp__layout_build(&cfg, &lay, NULL), RSP_OK);
    assert_int_equal(lay.num_layers, 5);
    assert_int_equal(lay.max_slots, 7);
    assert_int_equal(lay.usable_slots, 6);
    assert_true(lay.sink);
    assert_int_equal(lay.pad_index, RSP_SINK_SLOT);
    assert_int_equal(lay.num_blocks, 3);
    assert_string_equal(lay.blocks[1].name, "ssm");
    assert_int_equal(lay.blocks[0].slot_bytes, 4 * 8 * 4);
    assert_int_equal(lay.blocks[0].layer_bytes, 4 * 8 * 4 * 7);
    assert_int_equal(lay.blocks[0].bytes, 4 * 8 * 4 * 7 * 5);
    assert_int_equal(lay.blocks[1].slot_bytes, 2 * 6 * 16 * 2);
    assert_int_equal(lay.blocks[2].slot_bytes, 3);
    assert_int_equal(lay.slot_bytes, 5 * (128 + 384 + 3));
    assert_int_equal(lay.total_bytes, lay.slot_bytes * 7);
    /* The offset helper is layer-major: [num_layers, max_slots, *shape]. */
    assert_int_equal(rsp__layout_offset(&lay, 0, 2, 3), 2 * 896 + 3 * 128);

    cfg.sink = false;
    assert_int_equal(rsp__layout_build(&cfg, &lay, NULL), RSP_OK);
    assert_int_equal(lay.usable_slots, 7);
    assert_int_equal(lay.pad_index, RSP_NO_SLOT);
}

static void sharding_narrows_named_axes(void **state)
{
    (void)state;
    cfg.world_size = 2;
    cfg.rank = 1;
    int64_t shapes[3][RSP_MAX_DIMS];
    assert_int_equal(rsp_shard_shapes(&cfg, shapes, NULL), RSP_OK);
    assert_int_equal(shapes[0][0], 4);
    assert_int_equal(shapes[0][1], 4);
    assert_int_equal(shapes[1][0], 1);
    assert_int_equal(shapes[1][1], 6);
    assert_int_equal(shapes[1][2], 16);
    assert_int_equal(shapes[2][0], 3);
    /* Recomputed from the unsharded shape: applying it twice is harmless. */
    int64_t again[3][RSP_MAX_DIMS];
    assert_int_equal(rsp_shard_shapes(&cfg, again, NULL), RSP_OK);
    assert_memory_equal(shapes, again, sizeof shapes);
    rsp__layout lay;
    assert_int_equal(rsp__layout_build(&cfg, &lay, NULL), RSP_OK);
    assert_int_equal(lay.blocks[0].slot_bytes, 4 * 4 * 4);
    assert_int_equal(lay.blocks[1].slot_bytes, 1 * 6 * 16 * 2);
    assert_int_equal(lay.blocks[1].shape[0], 1);
}

static void shard_not_divisible_is_error(void **state)
{
    (void)state;
    cfg.world_size = 3;
    cfg.rank = 0;
    expect_invalid(RSP_EINVAL, "blocks[0].shape[1] = 8 is not divisible by world_size = 3");
    int64_t shapes[3][RSP_MAX_DIMS];
    rsp_error err = {0};
    assert_int_equal(rsp_shard_shapes(&cfg, shapes, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "world_size"));
}

static void no_blocks_is_error(void **state)
{
    (void)state;
    cfg.num_blocks = 0;
    expect_invalid(RSP_EINVAL, "num_blocks = 0");
    cfg.num_blocks = RSP_MAX_BLOCKS + 1;
    expect_invalid(RSP_EINVAL, "num_blocks");
    cfg.num_blocks = 1;
    cfg.blocks = NULL;
    expect_invalid(RSP_EINVAL, "blocks is NULL");
}

static void zero_dim_is_error(void **state)
{
    (void)state;
    blocks[1].shape[2] = 0;
    expect_invalid(RSP_EINVAL, "blocks[1].shape[2] = 0");
    blocks[1].shape[2] = -4;
    expect_invalid(RSP_EINVAL, "blocks[1].shape[2] = -4");
}

static void ndim_out_of_range_is_error(void **state)
{
    (void)state;
    blocks[2].ndim = 0;
    expect_invalid(RSP_EINVAL, "blocks[2].ndim = 0");
    blocks[2].ndim = RSP_MAX_DIMS + 1;
    expect_invalid(RSP_EINVAL, "blocks[2].ndim = 9");
}

static void duplicate_block_name_is_error(void **state)
{
    (void)state;
    blocks[2].name = "conv";
    expect_invalid(RSP_EINVAL, "blocks[2].name = \"conv\" repeats blocks[0]");
}

static void bad_names_are_errors(void **state)
{
    (void)state;
    blocks[0].name = NULL;
    expect_invalid(RSP_EINVAL, "blocks[0].name is NULL");
    blocks[0].name = "";
    expect_invalid(RSP_EINVAL, "blocks[0].name is empty");
    char longname[RSP_NAME_MAX + 4];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    blocks[0].name = longname;
    expect_invalid(RSP_EINVAL, "blocks[0].name is too long");
    longname[RSP_NAME_MAX - 1] = '\0'; /* 31 chars: the longest allowed */
    rsp__layout lay;
    assert_int_equal(rsp__layout_build(&cfg, &lay, NULL), RSP_OK);
    assert_string_equal(lay.blocks[0].name, longname);
}

static void bad_dtype_is_error(void **state)
{
    (void)state;
    blocks[1].dtype = RSP_DTYPE_COUNT_;
    expect_invalid(RSP_EINVAL, "blocks[1].dtype");
}

static void sink_needs_two_slots(void **state)
{
    (void)state;
    cfg.max_slots = 1;
    expect_invalid(RSP_EINVAL, "max_slots = 1: with the sink on");
    cfg.sink = false;
    rsp__layout lay;
    assert_int_equal(rsp__layout_build(&cfg, &lay, NULL), RSP_OK);
    assert_int_equal(lay.usable_slots, 1);
    cfg.max_slots = 0;
    expect_invalid(RSP_EINVAL, "max_slots = 0");
}

static void zero_layers_is_error(void **state)
{
    (void)state;
    cfg.num_layers = 0;
    expect_invalid(RSP_EINVAL, "num_layers = 0");
}

static void world_size_and_rank_checked(void **state)
{
    (void)state;
    cfg.world_size = 0;
    expect_invalid(RSP_EINVAL, "world_size = 0");
    cfg.world_size = 2;
    cfg.rank = 2;
    expect_invalid(RSP_EINVAL, "rank = 2");
}

static void shard_dim_index_checked(void **state)
{
    (void)state;
    blocks[0].shard_dims[0] = 2;
    expect_invalid(RSP_EINVAL, "blocks[0].shard_dims[0] = 2: must be < ndim = 2");
    blocks[0].shard_dims[0] = 1;
    blocks[0].num_shard_dims = 2;
    blocks[0].shard_dims[1] = 1;
    expect_invalid(RSP_EINVAL, "blocks[0].shard_dims[1] = 1 repeats");
    blocks[0].num_shard_dims = 3;
    expect_invalid(RSP_EINVAL, "blocks[0].num_shard_dims = 3");
}

static void byte_overflow_is_error(void **state)
{
    (void)state;
    blocks[0].num_shard_dims = 0;
    blocks[0].shape[0] = INT64_MAX / 2;
    blocks[0].shape[1] = 8;
    expect_invalid(RSP_EINVAL, "overflow 64 bits");
    /* Fits per slot, overflows once multiplied by slots and layers. */
    blocks[0].shape[0] = (int64_t)1 << 40;
    blocks[0].shape[1] = 1;
    cfg.max_slots = 1u << 20;
    expect_invalid(RSP_EINVAL, "overflow 64 bits");
}

static void too_many_inflight_steps_is_error(void **state)
{
    (void)state;
    cfg.max_inflight_steps = 65;
    rsp__core *core = NULL;
    rsp_error err = {0};
    assert_int_equal(rsp__core_create(&cfg, &core, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "max_inflight_steps = 65"));
    cfg.max_inflight_steps = 64;
    assert_int_equal(rsp__core_create(&cfg, &core, &err), RSP_OK);
    rsp__core_destroy(core);
}

/* A size accepted only if it cannot cost unbounded memory. */
static void huge_inbox_capacity_is_error(void **state)
{
    (void)state;
    cfg.inbox_capacity = UINT32_MAX;
    rsp__core *core = NULL;
    rsp_error err = {0};
    assert_int_equal(rsp__core_create(&cfg, &core, &err), RSP_EINVAL);
    assert_non_null(strstr(err.message, "inbox_capacity = 4294967295"));
    cfg.inbox_capacity = 1u << 20;
    assert_int_equal(rsp__core_create(&cfg, &core, &err), RSP_OK);
    rsp__core_destroy(core);
    cfg.inbox_capacity = 0;
}

static void labels_intern_main_first(void **state)
{
    (void)state;
    rsp__core *core = NULL;
    assert_int_equal(rsp__core_create(&cfg, &core, NULL), RSP_OK);
    assert_int_equal(rsp__core_num_labels(core), 1);
    assert_string_equal(rsp__core_label_name(core, RSP_LABEL_MAIN), "main");
    rsp_label_id id = 99;
    assert_int_equal(rsp__core_label(core, "main", &id, NULL), RSP_OK);
    assert_int_equal(id, RSP_LABEL_MAIN);
    assert_int_equal(rsp__core_label(core, "draft", &id, NULL), RSP_OK);
    assert_int_equal(id, 1);
    assert_int_equal(rsp__core_label(core, "draft", &id, NULL), RSP_OK);
    assert_int_equal(id, 1); /* idempotent */
    assert_null(rsp__core_label_name(core, 2));
    rsp_error err = {0};
    assert_int_equal(rsp__core_label(core, "", &id, &err), RSP_EINVAL);
    assert_int_equal(rsp__core_label(core, NULL, &id, &err), RSP_EINVAL);
    char longname[RSP_NAME_MAX + 1];
    memset(longname, 'b', RSP_NAME_MAX);
    longname[RSP_NAME_MAX] = '\0';
    assert_int_equal(rsp__core_label(core, longname, &id, &err), RSP_EINVAL);
    char name[16];
    for (int i = 2; i < RSP_MAX_LABELS; i++) {
        snprintf(name, sizeof name, "beam%d", i);
        assert_int_equal(rsp__core_label(core, name, &id, NULL), RSP_OK);
        assert_int_equal(id, (rsp_label_id)i);
    }
    assert_int_equal(rsp__core_label(core, "one_too_many", &id, &err), RSP_ECAPACITY);
    assert_non_null(strstr(err.message, "one_too_many"));
    assert_int_equal(rsp__core_num_labels(core), RSP_MAX_LABELS);
    rsp__core_destroy(core);
}

static void core_layout_matches_build(void **state)
{
    (void)state;
    rsp__core *core = NULL;
    assert_int_equal(rsp__core_create(&cfg, &core, NULL), RSP_OK);
    rsp__layout lay;
    assert_int_equal(rsp__layout_build(&cfg, &lay, NULL), RSP_OK);
    assert_memory_equal(rsp__core_layout(core), &lay, sizeof lay);
    rsp_stats st;
    memset(&st, 0, sizeof st);
    rsp__core_stats(core, &st);
    assert_int_equal(st.max_slots, 7);
    assert_int_equal(st.usable_slots, 6);
    assert_int_equal(st.free_slots, 6);
    assert_int_equal(st.held_slots, 0);
    rsp__core_destroy(core);
}

#define T(f) cmocka_unit_test_setup(f, setup)
int main(void)
{
    const struct CMUnitTest tests[] = {
        T(config_init_sets_defaults),
        T(dtype_sizes),
        T(layout_sizes_and_derived_fields),
        T(sharding_narrows_named_axes),
        T(shard_not_divisible_is_error),
        T(no_blocks_is_error),
        T(zero_dim_is_error),
        T(ndim_out_of_range_is_error),
        T(duplicate_block_name_is_error),
        T(bad_names_are_errors),
        T(bad_dtype_is_error),
        T(sink_needs_two_slots),
        T(zero_layers_is_error),
        T(world_size_and_rank_checked),
        T(shard_dim_index_checked),
        T(byte_overflow_is_error),
        T(too_many_inflight_steps_is_error),
        T(huge_inbox_capacity_is_error),
        T(labels_intern_main_first),
        T(core_layout_matches_build),
    };
    return cmocka_run_group_tests_name("core_layout", tests, NULL, NULL);
}
