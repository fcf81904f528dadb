/*
 * Internal: the vtable behind rsp__device. device.c dispatches; host.c and
 * cuda.c implement. Only src/device/ includes this file.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_DEVICE_IMPL_H
#define RSP_DEVICE_IMPL_H

#include "device.h"

typedef struct rsp__device_ops {
    /* The only kind of event this device can wait on (device.c refuses the
     * others before any implementation sees them). */
    rsp_event_kind event_kind;
    void (*destroy)(rsp__device *dev);
    /* rsp__device_reserve; NULL = reserves nothing (submit may still fail). */
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
