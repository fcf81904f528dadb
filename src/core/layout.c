/*
 * Config validation, sharding and byte sizes (layout.h), plus the public
 * config helpers of rsp.h that need nothing but the config.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "layout.h"

#include <float.h>
#include <inttypes.h>
#include <string.h>

#include "util/error.h"

size_t rsp_dtype_size(rsp_dtype dtype)
{
    switch (dtype) {
    case RSP_DTYPE_F32: return 4;
    case RSP_DTYPE_F16: return 2;
    case RSP_DTYPE_BF16: return 2;
    case RSP_DTYPE_F64: return 8;
    case RSP_DTYPE_I8: return 1;
    case RSP_DTYPE_U8: return 1;
    case RSP_DTYPE_I32: return 4;
    case RSP_DTYPE_I64: return 8;
    case RSP_DTYPE_COUNT_: break;
    }
    return 0;
}

/* This library's defaults, in a struct of this library's size. */
static void config_defaults(rsp_pool_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = (uint32_t)sizeof *cfg;
    cfg->sink = true;
    cfg->world_size = 1;
    cfg->rank = 0;
    cfg->device = RSP_DEVICE_HOST;
    cfg->owner_cpu = -1;
}

rsp_status rsp_pool_config_init_size(rsp_pool_config *cfg, size_t size)
{
    if (!cfg || size < RSP_POOL_CONFIG_SIZE_0_1 || size > UINT32_MAX)
        return RSP_EINVAL;
    /* Only the caller's bytes: an older caller's struct is smaller than
     * this library's, a newer one's larger (its unknown tail zeroed). */
    rsp_pool_config d;
    config_defaults(&d);
    d.struct_size = (uint32_t)size;
    memcpy(cfg, &d, size < sizeof d ? size : sizeof d);
    if (size > sizeof d)
        memset((unsigned char *)cfg + sizeof d, 0, size - sizeof d);
    return RSP_OK;
}

/* The exported function (rsp.h's macro of the same name passes the
 * caller's size instead): what a program built against 0.1.0 calls, so it
 * fills 0.1's layout, whatever this library's struct has grown to. */
void(rsp_pool_config_init)(rsp_pool_config *cfg)
{
    (void)rsp_pool_config_init_size(cfg, RSP_POOL_CONFIG_SIZE_0_1);
}

rsp_status rsp__config_import(const rsp_pool_config *cfg, rsp_pool_config *out, rsp_error *err)
{
    if (!cfg)
        return rsp__fail(err, RSP_EINVAL, "config is NULL");
    const size_t size = cfg->struct_size, mine = sizeof *out;
    if (size == 0)
        return rsp__fail(err, RSP_EINVAL,
                         "cfg->struct_size = 0: fill the config with rsp_pool_config_init "
                         "before setting its fields");
    if (size < RSP_POOL_CONFIG_SIZE_0_1)
        return rsp__fail(err, RSP_EINVAL,
                         "cfg->struct_size = %zu: below any release's rsp_pool_config (%zu "
                         "bytes in 0.1); fill it with rsp_pool_config_init",
                         size, (size_t)RSP_POOL_CONFIG_SIZE_0_1);
    /* A newer caller's fields this library does not know are served only
     * at zero, i.e. not set: anything else would be silently ignored. */
    const unsigned char *tail = (const unsigned char *)cfg;
    for (size_t i = mine; i < size; i++)
        if (tail[i])
            return rsp__fail(err, RSP_EINVAL,
                             "cfg->struct_size = %zu: the config sets byte %zu, past this "
                             "librsp's rsp_pool_config (%zu bytes, librsp %s)",
                             size, i, mine, rsp_version_string());
    config_defaults(out);
    memcpy(out, cfg, size < mine ? size : mine);
    out->struct_size = (uint32_t)mine;
    return RSP_OK;
}

/* a * b into *out; false when it does not fit in 64 bits. */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* The checkpoint tiers of cfg into *out (whose slot sizes are set): every
 * slot id, request and checkpoint, travels as int32. */
static rsp_status layout_checkpoints(const rsp_pool_config *cfg, rsp__layout *out, rsp_error *err)
{
    uint64_t ids = (uint64_t)cfg->max_slots + cfg->max_checkpoints + cfg->max_host_checkpoints;
    if (ids > (uint64_t)INT32_MAX)
        return rsp__fail(err, RSP_EINVAL,
                         "max_slots + max_checkpoints + max_host_checkpoints = %" PRIu64
                         ": at most %d (slot ids are int32)",
                         ids, INT32_MAX);
    if (cfg->checkpoint_policy >= RSP_CHECKPOINT_POLICY_COUNT_)
        return rsp__fail(err, RSP_EINVAL,
                         "checkpoint_policy = %" PRIu32 ": not an rsp_checkpoint_policy",
                         cfg->checkpoint_policy);
    /* Not NaN, not infinite, not negative: a score must order. */
    if (!(cfg->checkpoint_value_weight >= 0 && cfg->checkpoint_value_weight <= DBL_MAX))
        return rsp__fail(err, RSP_EINVAL, "checkpoint_value_weight = %g: must be finite and >= 0",
                         cfg->checkpoint_value_weight);
    out->max_checkpoints = cfg->max_checkpoints;
    out->max_host_checkpoints = cfg->max_host_checkpoints;
    out->num_ids = (uint32_t)ids;
    if (!mul_u64(out->slot_bytes, cfg->max_checkpoints, &out->tier_bytes[RSP_TIER_DEVICE]) ||
        !mul_u64(out->slot_bytes, cfg->max_host_checkpoints, &out->tier_bytes[RSP_TIER_HOST]))
        return rsp__fail(err, RSP_EINVAL,
                         "checkpoint storage (slot_bytes * tier size) overflows 64 bits");
    return RSP_OK;
}

/* Block b of cfg: name, dtype, dims and shard axes; local gets its shape
 * on this rank. */
static rsp_status check_block(const rsp_pool_config *cfg, uint32_t b, int64_t *local,
                              rsp_error *err)
{
    const rsp_block_config *bc = &cfg->blocks[b];
    if (!bc->name)
        return rsp__fail(err, RSP_EINVAL, "blocks[%" PRIu32 "].name is NULL", b);
    size_t len = strnlen(bc->name, RSP_NAME_MAX);
    if (len == 0)
        return rsp__fail(err, RSP_EINVAL, "blocks[%" PRIu32 "].name is empty", b);
    if (len >= RSP_NAME_MAX)
        return rsp__fail(err, RSP_EINVAL,
                         "blocks[%" PRIu32 "].name is too long: at most %d characters", b,
                         RSP_NAME_MAX - 1);
    for (uint32_t o = 0; o < b; o++)
        if (strcmp(cfg->blocks[o].name, bc->name) == 0)
            return rsp__fail(err, RSP_EINVAL,
                             "blocks[%" PRIu32 "].name = \"%s\" repeats blocks[%" PRIu32
                             "]: block names must be unique",
                             b, bc->name, o);
    if (rsp_dtype_size(bc->dtype) == 0)
        return rsp__fail(err, RSP_EINVAL, "blocks[%" PRIu32 "].dtype = %d is not a dtype", b,
                         (int)bc->dtype);
    if (bc->ndim == 0 || bc->ndim > RSP_MAX_DIMS)
        return rsp__fail(err, RSP_EINVAL, "blocks[%" PRIu32 "].ndim = %" PRIu32 ": must be 1..%d",
                         b, bc->ndim, RSP_MAX_DIMS);
    for (uint32_t d = 0; d < bc->ndim; d++)
        if (bc->shape[d] <= 0)
            return rsp__fail(err, RSP_EINVAL,
                             "blocks[%" PRIu32 "].shape[%" PRIu32 "] = %" PRId64
                             ": every dim must be > 0",
                             b, d, bc->shape[d]);
    if (bc->num_shard_dims > bc->ndim)
        return rsp__fail(err, RSP_EINVAL,
                         "blocks[%" PRIu32 "].num_shard_dims = %" PRIu32
                         ": more than ndim = %" PRIu32,
                         b, bc->num_shard_dims, bc->ndim);
    memcpy(local, bc->shape, RSP_MAX_DIMS * sizeof *local);
    for (uint32_t s = 0; s < bc->num_shard_dims; s++) {
        uint32_t axis = bc->shard_dims[s];
        if (axis >= bc->ndim)
            return rsp__fail(err, RSP_EINVAL,
                             "blocks[%" PRIu32 "].shard_dims[%" PRIu32 "] = %" PRIu32
                             ": must be < ndim = %" PRIu32,
                             b, s, axis, bc->ndim);
        for (uint32_t o = 0; o < s; o++)
            if (bc->shard_dims[o] == axis)
                return rsp__fail(err, RSP_EINVAL,
                                 "blocks[%" PRIu32 "].shard_dims[%" PRIu32 "] = %" PRIu32
                                 " repeats shard_dims[%" PRIu32 "]",
                                 b, s, axis, o);
        /* From the unsharded shape, so sharding twice gives the same result. */
        if (bc->shape[axis] % (int64_t)cfg->world_size != 0)
            return rsp__fail(err, RSP_EINVAL,
                             "blocks[%" PRIu32 "].shape[%" PRIu32 "] = %" PRId64
                             " is not divisible by world_size = %" PRIu32,
                             b, axis, bc->shape[axis], cfg->world_size);
        local[axis] = bc->shape[axis] / (int64_t)cfg->world_size;
    }
    return RSP_OK;
}

/*
 * Check what sharding needs (blocks, names, dtypes, dims, shard axes,
 * world_size/rank) and write the local shapes. Shared by rsp_shard_shapes and
 * the full validation, so both give the same message for the same fault.
 */
static rsp_status check_blocks_and_shard(const rsp_pool_config *cfg, int64_t (*out)[RSP_MAX_DIMS],
                                         rsp_error *err)
{
    if (!cfg)
        return rsp__fail(err, RSP_EINVAL, "config is NULL");
    if (cfg->num_blocks == 0)
        return rsp__fail(err, RSP_EINVAL, "num_blocks = 0: a pool needs at least one block");
    if (cfg->num_blocks > RSP_MAX_BLOCKS)
        return rsp__fail(err, RSP_EINVAL, "num_blocks = %" PRIu32 ": at most %d blocks",
                         cfg->num_blocks, RSP_MAX_BLOCKS);
    if (!cfg->blocks)
        return rsp__fail(err, RSP_EINVAL, "blocks is NULL with num_blocks = %" PRIu32,
                         cfg->num_blocks);
    if (cfg->world_size == 0)
        return rsp__fail(err, RSP_EINVAL, "world_size = 0: must be >= 1");
    if (cfg->rank >= cfg->world_size)
        return rsp__fail(err, RSP_EINVAL, "rank = %" PRIu32 ": must be < world_size = %" PRIu32,
                         cfg->rank, cfg->world_size);
    for (uint32_t b = 0; b < cfg->num_blocks; b++) {
        int64_t local[RSP_MAX_DIMS] = {0};
        rsp_status st = check_block(cfg, b, local, err);
        if (st != RSP_OK)
            return st;
        if (out)
            memcpy(out[b], local, sizeof local);
    }
    return RSP_OK;
}

rsp_status rsp_shard_shapes(const rsp_pool_config *cfg, int64_t (*out)[RSP_MAX_DIMS],
                            rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "out is NULL");
    rsp_pool_config mine;
    rsp_status st = rsp__config_import(cfg, &mine, err);
    if (st)
        return st;
    int64_t tmp[RSP_MAX_BLOCKS][RSP_MAX_DIMS];
    st = check_blocks_and_shard(&mine, tmp, err);
    if (st)
        return st;
    memcpy(out, tmp, (size_t)mine.num_blocks * sizeof tmp[0]);
    return RSP_OK;
}

rsp_status rsp__layout_build(const rsp_pool_config *cfg, rsp__layout *out, rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "layout out is NULL");
    int64_t local[RSP_MAX_BLOCKS][RSP_MAX_DIMS];
    rsp_status st = check_blocks_and_shard(cfg, local, err);
    if (st)
        return st;
    if (cfg->num_layers == 0)
        return rsp__fail(err, RSP_EINVAL, "num_layers = 0: must be > 0");
    if (cfg->max_slots == 0)
        return rsp__fail(err, RSP_EINVAL, "max_slots = 0: must be >= 1");
    if (cfg->sink && cfg->max_slots < 2)
        return rsp__fail(err, RSP_EINVAL,
                         "max_slots = %" PRIu32 ": with the sink on, max_slots must be >= 2",
                         cfg->max_slots);
    /* Slot ids travel as int32 in the addressing vectors. */
    if (cfg->max_slots > (uint32_t)INT32_MAX)
        return rsp__fail(err, RSP_EINVAL, "max_slots = %" PRIu32 ": at most %d", cfg->max_slots,
                         INT32_MAX);

    memset(out, 0, sizeof *out);
    out->num_layers = cfg->num_layers;
    out->max_slots = cfg->max_slots;
    out->sink = cfg->sink;
    out->usable_slots = cfg->max_slots - (cfg->sink ? 1u : 0u);
    out->pad_index = cfg->sink ? RSP_SINK_SLOT : RSP_NO_SLOT;
    out->num_blocks = cfg->num_blocks;
    out->world_size = cfg->world_size;
    out->rank = cfg->rank;
    uint64_t slot_bytes_all = 0;
    for (uint32_t b = 0; b < cfg->num_blocks; b++) {
        const rsp_block_config *bc = &cfg->blocks[b];
        rsp__block_layout *bl = &out->blocks[b];
        memcpy(bl->name, bc->name, strlen(bc->name) + 1);
        bl->dtype = bc->dtype;
        bl->elem_size = (uint32_t)rsp_dtype_size(bc->dtype);
        bl->ndim = bc->ndim;
        memcpy(bl->full_shape, bc->shape, sizeof bl->full_shape);
        for (uint32_t d = 0; d < bc->num_shard_dims; d++)
            bl->shard_mask |= 1u << bc->shard_dims[d];
        uint64_t n = bl->elem_size;
        for (uint32_t d = 0; d < bc->ndim; d++) {
            bl->shape[d] = local[b][d];
            if (!mul_u64(n, (uint64_t)local[b][d], &n))
                return rsp__fail(err, RSP_EINVAL,
                                 "blocks[%" PRIu32 "]: bytes of one slot overflow 64 bits", b);
        }
        bl->slot_bytes = n;
        uint64_t per_layer_all_slots;
        if (!mul_u64(n, cfg->max_slots, &bl->layer_bytes) ||
            !mul_u64(bl->layer_bytes, cfg->num_layers, &bl->bytes) ||
            !mul_u64(n, cfg->num_layers, &per_layer_all_slots) ||
            __builtin_add_overflow(slot_bytes_all, per_layer_all_slots, &slot_bytes_all))
            return rsp__fail(err, RSP_EINVAL,
                             "blocks[%" PRIu32 "]: bytes of [num_layers = %" PRIu32
                             ", max_slots = %" PRIu32 ", ...] overflow 64 bits",
                             b, cfg->num_layers, cfg->max_slots);
    }
    out->slot_bytes = slot_bytes_all;
    if (!mul_u64(slot_bytes_all, cfg->max_slots, &out->total_bytes))
        return rsp__fail(err, RSP_EINVAL, "total_bytes (slot_bytes * max_slots) overflows 64 bits");
    return layout_checkpoints(cfg, out, err);
}
