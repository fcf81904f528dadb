/*
 * Device dispatch: pick the implementation at creation, then forward every
 * call through the vtable (device_impl.h). Thread rules are device.h's.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "device_impl.h"

#include <stdio.h>

#include "util/error.h"

rsp_status rsp__device_create(rsp_device_kind kind, int cuda_ordinal, const rsp__layout *layout,
                              rsp__device **out, rsp_error *err)
{
    if (!layout || !out)
        return rsp__fail(err, RSP_EINVAL, "device create: layout or out is NULL");
    if (layout->num_blocks == 0 || layout->num_blocks > RSP_MAX_BLOCKS)
        return rsp__fail(err, RSP_EINVAL, "device create: %u blocks (1..%d)", layout->num_blocks,
                         RSP_MAX_BLOCKS);
    const uint64_t ids =
        (uint64_t)layout->max_slots + layout->max_checkpoints + layout->max_host_checkpoints;
    if (layout->max_slots == 0 || ids != layout->num_ids || ids > (uint64_t)INT32_MAX)
        return rsp__fail(err, RSP_EINVAL,
                         "device create: the layout's id space is inconsistent: num_ids %u, "
                         "max_slots %u + max_checkpoints %u + max_host_checkpoints %u = %llu "
                         "(must be equal, max_slots >= 1, at most INT32_MAX)",
                         layout->num_ids, layout->max_slots, layout->max_checkpoints,
                         layout->max_host_checkpoints, (unsigned long long)ids);
    switch (kind) {
    case RSP_DEVICE_HOST: (void)cuda_ordinal; return rsp__host_device_create(layout, out, err);
    case RSP_DEVICE_CUDA:
#ifdef RSP_HAVE_CUDA
        return rsp__cuda_device_create(cuda_ordinal, layout, out, err);
#else
        return rsp__fail(err, RSP_ENODEV,
                         "device create: rsp was built without CUDA (configure with RSP_CUDA=ON "
                         "on a machine with nvcc), so device CUDA:%d is not available",
                         cuda_ordinal);
#endif
    }
    return rsp__fail(err, RSP_EINVAL, "device create: unknown device kind %d", (int)kind);
}

void rsp__device_destroy(rsp__device *dev)
{
    if (dev)
        dev->ops->destroy(dev);
}

rsp_device_kind rsp__device_kind(const rsp__device *dev)
{
    return dev->kind;
}

void *rsp__device_block_base(const rsp__device *dev, uint32_t b)
{
    return b < RSP_MAX_BLOCKS ? dev->block_base[b] : NULL;
}

void *rsp__device_space_base(const rsp__device *dev, rsp__space sp, uint32_t b)
{
    return b < RSP_MAX_BLOCKS ? rsp__space_base(dev, sp, b) : NULL;
}

rsp_status rsp__device_reserve(rsp__device *dev, const rsp__ext_need *need, rsp_error *err)
{
    return dev->ops->reserve ? dev->ops->reserve(dev, need, err) : RSP_OK;
}

rsp_status rsp__device_submit(rsp__device *dev, const rsp__work *work, rsp_event *done,
                              rsp_error *err)
{
    return dev->ops->submit(dev, work, done, err);
}

rsp_status rsp__device_buffer(const rsp__device *dev, uint32_t id, void **slot_indices,
                              void **has_state, uint32_t *capacity, rsp_error *err)
{
    return dev->ops->buffer(dev, id, slot_indices, has_state, capacity, err);
}

static const char *event_kind_name(rsp_event_kind k)
{
    switch (k) {
    case RSP_EVENT_HOST_FENCE: return "a host fence";
    case RSP_EVENT_CUDA: return "a CUDA event";
    default: return "an event of no kind";
    }
}

rsp_status rsp__device_check_event_kind(const rsp__device *dev, const rsp_event *event,
                                        const char *what, rsp_error *err)
{
    if (!event)
        return RSP_OK;
    if ((unsigned)event->kind >= (unsigned)RSP_EVENT_KIND_COUNT_)
        return rsp__fail(err, RSP_EINVAL, "%s.kind %d is not an event kind", what,
                         (int)event->kind);
    if (!event->handle)
        return RSP_OK; /* "already complete", whatever the kind */
    const rsp_event_kind want = dev->ops->event_kind;
    if (event->kind == RSP_EVENT_NONE)
        return rsp__fail(
            err, RSP_EINVAL, "%s has a handle (%p) but kind RSP_EVENT_NONE: build it with %s", what,
            event->handle, want == RSP_EVENT_CUDA ? "rsp_event_cuda()" : "rsp_event_host()");
    if (event->kind != want)
        return rsp__fail(err, RSP_EINVAL,
                         "%s is %s, which the %s device cannot wait on (it waits on %s only)", what,
                         event_kind_name(event->kind),
                         dev->kind == RSP_DEVICE_CUDA ? "CUDA" : "host", event_kind_name(want));
    if (event->kind == RSP_EVENT_HOST_FENCE && !rsp__fence_valid(event->handle))
        return rsp__fail(err, RSP_EINVAL,
                         "%s.handle %p is not a live rsp_host_fence (its tag does not match: "
                         "another object, or a destroyed fence)",
                         what, event->handle);
    return RSP_OK;
}

rsp_status rsp__device_check_event(const rsp__device *dev, const rsp_event *event, rsp_error *err)
{
    rsp_status st = rsp__device_check_event_kind(dev, event, "forward_done", err);
    if (st != RSP_OK || !event || !event->handle || !dev->ops->check_event)
        return st;
    return dev->ops->check_event(dev, event, err);
}

rsp_status rsp__device_sync(rsp__device *dev, rsp_error *err)
{
    return dev->ops->sync(dev, err);
}

rsp_status rsp__device_event_wait(const rsp__device *dev, const rsp_event *event,
                                  uint64_t timeout_ns, rsp_error *err)
{
    if (!event)
        return rsp__fail(err, RSP_EINVAL, "event wait: event is NULL");
    rsp_status st = rsp__device_check_event_kind(dev, event, "event", err);
    if (st != RSP_OK)
        return st;
    return dev->ops->event_wait(dev, event, timeout_ns, err);
}

rsp_status rsp__device_read(rsp__device *dev, uint32_t block, uint32_t layer, uint32_t slot,
                            void *dst, rsp_error *err)
{
    const rsp__layout *lay = dev->layout;
    if (block >= lay->num_blocks || layer >= lay->num_layers || slot >= lay->num_ids || !dst)
        return rsp__fail(err, RSP_EINVAL,
                         "device read: block %u layer %u slot id %u outside %u blocks, %u layers, "
                         "%u slot ids (or dst NULL)",
                         block, layer, slot, lay->num_blocks, lay->num_layers, lay->num_ids);
    return dev->ops->read(dev, block, layer, slot, dst, err);
}

rsp_status rsp__device_checksum(rsp__device *dev, const uint32_t *slots, uint32_t n, uint64_t *out,
                                rsp_error *err)
{
    for (uint32_t i = 0; i < n; i++)
        if (slots[i] >= dev->layout->max_slots)
            return rsp__fail(err, RSP_EINVAL, "device checksum: slots[%u] = %u: not a request slot",
                             i, slots[i]);
    if (!dev->ops->checksum)
        return rsp__fail(err, RSP_ENODEV, "device checksum: this device cannot checksum slots");
    rsp_status st = dev->ops->sync(dev, err);
    return st == RSP_OK ? dev->ops->checksum(dev, slots, n, out, err) : st;
}

rsp_status rsp__device_check_ids(const rsp__layout *lay, const rsp__work *w, uint32_t i,
                                 rsp_error *err)
{
    const rsp__op *op = &w->ops[i];
    const bool zero = op->kind == RSP__OP_ZERO;
    const char *what = zero ? "ZERO slots" : "COPY pairs";
    const uint32_t listed = zero ? w->num_slots : w->num_pairs;
    if ((uint64_t)op->first + op->count > listed)
        return rsp__fail(err, RSP_EINVAL, "device submit: op %u %s [%u, %llu) past the list's %u",
                         i, what, op->first, (unsigned long long)op->first + op->count, listed);
    for (uint32_t k = 0; k < op->count; k++) {
        const uint32_t a = zero ? w->slots[op->first + k] : w->pairs[op->first + k].src;
        const uint32_t b = zero ? a : w->pairs[op->first + k].dst;
        if (a < lay->num_ids && b < lay->num_ids)
            continue;
        char entry[32];
        if (zero)
            snprintf(entry, sizeof entry, "ZERO slot %u", a);
        else
            snprintf(entry, sizeof entry, "COPY %u -> %u", a, b);
        return rsp__fail(err, RSP_EINVAL,
                         "device submit: op %u %s outside the %u slot ids (max_slots %u + "
                         "max_checkpoints %u + max_host_checkpoints %u)",
                         i, entry, lay->num_ids, lay->max_slots, lay->max_checkpoints,
                         lay->max_host_checkpoints);
    }
    return RSP_OK;
}

/* --- events (rsp.h): the device layer's own values; host.c and cuda.c
 * make them too ------------------------------------------------------- */

rsp_event rsp_event_host(rsp_host_fence *fence, uint64_t value)
{
    rsp_event e = {.kind = RSP_EVENT_HOST_FENCE, .handle = fence, .value = value};
    return e;
}

rsp_event rsp_event_cuda(void *cuda_event)
{
    rsp_event e = {.kind = RSP_EVENT_CUDA, .handle = cuda_event, .value = 0};
    return e;
}

rsp_event rsp_event_complete(void)
{
    rsp_event e = {.kind = RSP_EVENT_COMPLETE, .handle = NULL, .value = 0};
    return e;
}
