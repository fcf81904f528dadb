/*
 * Internal: what a device implementation provides. device.c dispatches
 * through the vtable below; host.c and cuda.c implement it. Only
 * src/device/ includes this file.
 * SPDX-License-Identifier: Apache-2.0
 *
 * An implementation provides:
 *   - a struct whose first member is struct rsp__device (the common head),
 *     so a pointer to either converts to the other;
 *   - a create function, declared below and called by rsp__device_create
 *     (which has checked the block count already): it allocates and zeroes
 *     every block, fills the head (ops, kind, layout, block_base), starts
 *     its worker or stream, and frees everything when it fails;
 *   - a static rsp__device_ops. Each entry keeps the contract and the thread
 *     rule of the device.h function of the same name. All are required but
 *     reserve and check_event. device.c applies the event kind check
 *     (rsp__device_check_event_kind) before event_wait and check_event, not
 *     before submit: submit checks its own WAIT ops.
 */
#ifndef RSP_DEVICE_IMPL_H
#define RSP_DEVICE_IMPL_H

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
} rsp__device_ops;

/* Common head of every device; implementations embed it first. */
struct rsp__device {
    const rsp__device_ops *ops;
    rsp_device_kind kind;
    const rsp__layout *layout; /* owned by the caller, outlives the device */
    void *block_base[RSP_MAX_BLOCKS];
};

rsp_status rsp__host_device_create(const rsp__layout *layout, rsp__device **out, rsp_error *err);
#ifdef RSP_HAVE_CUDA
rsp_status rsp__cuda_device_create(int ordinal, const rsp__layout *layout, rsp__device **out,
                                   rsp_error *err);
#endif

#endif
