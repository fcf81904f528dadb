/*
 * Storage layout of a pool: validated config, sharded shapes, byte sizes.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Pure: no threads, no devices. Immutable once built; any thread may read it.
 */
#ifndef RSP_CORE_LAYOUT_H
#define RSP_CORE_LAYOUT_H

#include <rsp/rsp.h>

typedef struct rsp__block_layout {
    char name[RSP_NAME_MAX];
    rsp_dtype dtype;
    uint32_t elem_size;
    uint32_t ndim;
    int64_t shape[RSP_MAX_DIMS];      /* local (sharded) shape */
    uint64_t slot_bytes;              /* bytes of one slot of one layer */
    uint64_t layer_bytes;             /* slot_bytes * max_slots */
    uint64_t bytes;                   /* layer_bytes * num_layers: one allocation */
    int64_t full_shape[RSP_MAX_DIMS]; /* unsharded (exports describe it) */
    uint32_t shard_mask;              /* bit d: axis d is split across ranks */
} rsp__block_layout;

typedef struct rsp__layout {
    uint32_t num_layers;
    uint32_t max_slots;
    uint32_t usable_slots;
    bool sink;
    int32_t pad_index;
    uint32_t num_blocks;
    rsp__block_layout blocks[RSP_MAX_BLOCKS];
    uint64_t slot_bytes;  /* all layers, all blocks of one slot */
    uint64_t total_bytes; /* slot_bytes * max_slots */
    /* Checkpoint slots (docs/design.md "Checkpoints"): ids
     * [max_slots, max_slots + max_checkpoints) are the device tier's, the
     * next max_host_checkpoints the host tier's; num_ids is the sum, which
     * fits int32. tier_bytes[t]: slot_bytes * that tier's count. */
    uint32_t max_checkpoints, max_host_checkpoints;
    uint32_t num_ids;
    uint64_t tier_bytes[RSP_TIER_COUNT_];
    uint32_t world_size, rank; /* tensor parallelism (exports' headers) */
} rsp__layout;

/* The storage a slot id lives in. */
typedef enum rsp__space {
    RSP__SPACE_SLOTS = 0, /* request slots */
    RSP__SPACE_DEVICE,    /* device-tier checkpoint slots */
    RSP__SPACE_HOST,      /* host-tier checkpoint slots */
} rsp__space;

/* Which storage slot id `id` (< num_ids) lives in, and its index there
 * (*index, [0, that storage's count)). O(1). */
static inline rsp__space rsp__layout_space(const rsp__layout *lay, uint32_t id, uint32_t *index)
{
    if (id < lay->max_slots) {
        *index = id;
        return RSP__SPACE_SLOTS;
    }
    id -= lay->max_slots;
    if (id < lay->max_checkpoints) {
        *index = id;
        return RSP__SPACE_DEVICE;
    }
    *index = id - lay->max_checkpoints;
    return RSP__SPACE_HOST;
}

/*
 * Validate cfg (docs/semantics.md 1) and fill *out. On error *out is
 * unspecified and err names the field. O(blocks * dims).
 */
rsp_status rsp__layout_build(const rsp_pool_config *cfg, rsp__layout *out, rsp_error *err);

/* The caller's config (of cfg->struct_size bytes: an older or newer
 * header's rsp_pool_config) as this library's struct in *out: the bytes
 * the caller has, this library's defaults for the fields it lacks.
 * RSP_EINVAL naming struct_size when it is 0 (no rsp_pool_config_init),
 * below 0.1's size, or larger with a non-zero byte this library does not
 * know; *out is then unspecified. rsp_pool_create and rsp_shard_shapes
 * read the caller's config only through this. */
rsp_status rsp__config_import(const rsp_pool_config *cfg, rsp_pool_config *out, rsp_error *err);

/* Byte offset of (block b, layer l, slot s) from block b's base pointer. */
static inline uint64_t rsp__layout_offset(const rsp__layout *lay, uint32_t b, uint32_t l,
                                          uint32_t s)
{
    const rsp__block_layout *bl = &lay->blocks[b];
    return (uint64_t)l * bl->layer_bytes + (uint64_t)s * bl->slot_bytes;
}

#endif
