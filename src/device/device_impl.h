/*
 * Internal: what a device implementation provides. device.c dispatches
 * through the vtable below; host*.c and cuda.c implement it. Only
 * src/device/ includes this file.
 * SPDX-License-Identifier: Apache-2.0
 *
 * An implementation provides:
 *   - a struct whose first member is struct rsp__device (the common head),
 *     so a pointer to either converts to the other;
 *   - a create function, declared below and called by rsp__device_create
 *     (which has checked the block count and the id space already): it
 *     allocates and zeroes every block of the three storages (request
 *     slots, device tier, host tier), fills the head (ops, kind, layout,
 *     block_base, tier_base), starts its worker or stream, and frees
 *     everything when it fails;
 *   - a static rsp__device_ops. Each entry keeps the contract and the thread
 *     rule of the device.h function of the same name. All are required but
 *     reserve and check_event. device.c applies the event kind check
 *     (rsp__device_check_event_kind) before event_wait and check_event, not
 *     before submit: submit checks its own WAIT ops.
 */
#ifndef RSP_DEVICE_IMPL_H
#define RSP_DEVICE_IMPL_H

#include <string.h>

#include "device.h"

typedef struct rsp__device_ops {
    /* The only kind of event this device can wait on: device.c refuses the
     * others before event_wait and check_event see them. */
    rsp_event_kind event_kind;
    void (*destroy)(rsp__device *dev);
    /* rsp__device_reserve; NULL = reserves nothing (submit may still fail
     * for want of memory after the core changed state). */
    rsp_status (*reserve)(rsp__device *dev, const rsp__ext_need *need, rsp_error *err);
    rsp_status (*submit)(rsp__device *dev, const rsp__work *work, rsp_event *done, rsp_error *err);
    rsp_status (*buffer)(const rsp__device *dev, uint32_t id, void **slot_indices, void **has_state,
                         uint32_t *capacity, rsp_error *err);
    rsp_status (*sync)(rsp__device *dev, rsp_error *err);
    rsp_status (*event_wait)(const rsp__device *dev, const rsp_event *event, uint64_t timeout_ns,
                             rsp_error *err);
    rsp_status (*read)(rsp__device *dev, uint32_t block, uint32_t layer, uint32_t slot, void *dst,
                       rsp_error *err);
    /* rsp__device_check_event; NULL = every non-NULL handle is accepted. */
    rsp_status (*check_event)(const rsp__device *dev, const rsp_event *event, rsp_error *err);
    /* rsp__device_checksum, called after rsp__device_sync: slots are in
     * range. */
    rsp_status (*checksum)(rsp__device *dev, const uint32_t *slots, uint32_t n, uint64_t *out,
                           rsp_error *err);
} rsp__device_ops;

/* Common head of every device; implementations embed it first. */
struct rsp__device {
    const rsp__device_ops *ops;
    rsp_device_kind kind;
    const rsp__layout *layout; /* owned by the caller, outlives the device */
    /* Request slots: block b is [num_layers, max_slots, *shape] at block_base[b]. */
    void *block_base[RSP_MAX_BLOCKS];
    /* Checkpoint tiers (rsp_tier): block b of tier t is [num_layers, that
     * tier's count, *shape] at tier_base[t][b], as the copy code addresses
     * it (the CUDA host tier: the device pointer of its mapped pinned
     * memory). NULL when the tier has no slots. Immutable after create. */
    void *tier_base[RSP_TIER_COUNT_][RSP_MAX_BLOCKS];
};

/* Slots of storage sp (request slots, or a tier's checkpoint slots). O(1). */
static inline uint32_t rsp__space_count(const rsp__layout *lay, rsp__space sp)
{
    switch (sp) {
    case RSP__SPACE_SLOTS: return lay->max_slots;
    case RSP__SPACE_DEVICE: return lay->max_checkpoints;
    default: return lay->max_host_checkpoints;
    }
}

/* Base of block b of storage sp, as dev's copy code addresses it. O(1). */
static inline unsigned char *rsp__space_base(const rsp__device *dev, rsp__space sp, uint32_t b)
{
    return (unsigned char *)(sp == RSP__SPACE_SLOTS ? dev->block_base[b]
                                                    : dev->tier_base[sp - RSP__SPACE_DEVICE][b]);
}

/*
 * Address of (block b, layer l) of slot id `id` (< num_ids, checked by the
 * caller) in the storage the id lives in (rsp__layout_space): request
 * slots, device tier or host tier, each [num_layers, count, *shape] per
 * block. Any thread (reads immutable fields). O(1).
 */
static inline unsigned char *rsp__device_region(const rsp__device *dev, uint32_t b, uint32_t l,
                                                uint32_t id)
{
    const rsp__layout *lay = dev->layout;
    uint32_t index;
    const rsp__space sp = rsp__layout_space(lay, id, &index);
    const uint64_t sb = lay->blocks[b].slot_bytes;
    return rsp__space_base(dev, sp, b) + ((uint64_t)l * rsp__space_count(lay, sp) + index) * sb;
}

/* Bytes of block b of storage sp: the layout's `bytes` for the request
 * slots, slot_bytes * count * num_layers for a tier (no overflow: at most
 * the layout's checked tier_bytes). */
static inline uint64_t rsp__space_block_bytes(const rsp__layout *lay, rsp__space sp, uint32_t b)
{
    if (sp == RSP__SPACE_SLOTS)
        return lay->blocks[b].bytes;
    return lay->blocks[b].slot_bytes * rsp__space_count(lay, sp) * lay->num_layers;
}

/*
 * Guard mode's checksum of one region: over its 8-byte little-endian words
 * w_i (the last one zero-padded), the sum mod 2^64 of mix(w_i) * (2i + 1).
 * mix(0) = 0, so zero bytes sum to 0; an odd weight keeps every nonzero
 * word's term nonzero and tells positions apart; a sum is order-free, so
 * the CUDA kernel (kernels/rsp_guard.cu, the same formula) reduces in any
 * order and gets the same value. O(bytes).
 */
static inline uint64_t rsp__sum_mix(uint64_t x)
{
    x *= 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}
static inline uint64_t rsp__sum_bytes(const unsigned char *p, uint64_t n)
{
    uint64_t h = 0, i = 0;
    for (; (i + 1) * 8 <= n; i++) {
        uint64_t w;
        memcpy(&w, p + i * 8, 8);
        h += rsp__sum_mix(w) * (2 * i + 1);
    }
    if (i * 8 < n) {
        uint64_t w = 0;
        memcpy(&w, p + i * 8, n - i * 8);
        h += rsp__sum_mix(w) * (2 * i + 1);
    }
    return h;
}

/*
 * The range check of a submit, shared by both devices (device.c): op i of
 * w, a ZERO or a COPY, has its entries inside the list, and every id they
 * name (ZERO slots, both ends of COPY pairs) is < num_ids: request slots
 * and both checkpoint tiers (the core zeroes a checkpoint slot when a
 * take's source is zero-pending). RSP_EINVAL naming the op and the entry.
 * Owner. O(entries).
 */
rsp_status rsp__device_check_ids(const rsp__layout *lay, const rsp__work *w, uint32_t i,
                                 rsp_error *err);

rsp_status rsp__host_device_create(const rsp__layout *layout, rsp__device **out, rsp_error *err);
#ifdef RSP_HAVE_CUDA
rsp_status rsp__cuda_device_create(int ordinal, const rsp__layout *layout, rsp__device **out,
                                   rsp_error *err);
/* The CUDA device's checksum entry (cuda_guard.c). */
rsp_status rsp__cuda_checksum(rsp__device *dev, const uint32_t *slots, uint32_t n, uint64_t *out,
                              rsp_error *err);
#endif

#endif
