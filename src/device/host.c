/*
 * The host device: slot storage in anonymous mappings, create and destroy,
 * and the vtable (its submit in host_submit.c, its worker in
 * host_worker.c, its events in host_fence.c). host_impl.h has the threads
 * and every pair. SPDX-License-Identifier: Apache-2.0
 */
#include "host_impl.h"

#include "util/assert.h"
#include "util/error.h"
#include "util/mem.h"
#include "util/sync.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Slot storage: an anonymous private mapping of n bytes (page aligned, so
 * 64-byte aligned). The kernel hands out zero pages and touches them on
 * first write, so creation costs no memset and no page faults: a pool of
 * gigabytes is created in microseconds, and every slot reads as zero until
 * written. Releases still zero their slots (HOP_ZERO), so a free slot is
 * zero whether it was never used or released. NULL when the mapping fails
 * (out of memory or address space, or n absurd). Freed with
 * storage_unmap(p, n). */
static void *storage_map(uint64_t n)
{
    if (n == 0)
        n = 1;
    if (n > (uint64_t)SIZE_MAX / 2)
        return NULL;
    void *p = mmap(NULL, (size_t)n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void storage_unmap(void *p, uint64_t n)
{
    if (p)
        munmap(p, (size_t)(n ? n : 1));
}

uint64_t rsp__host_jobs_queued(const rsp__device *base)
{
    RSP__ASSERT(base->kind == RSP_DEVICE_HOST);
    return ((const rsp__host_device *)base)->queued;
}

/* ------------------------------------------------------------------------ */
/* The rest of the vtable                                                    */
/* ------------------------------------------------------------------------ */

static rsp_status host_buffer_get(const rsp__device *base, uint32_t id, void **slot_indices,
                                  void **has_state, uint32_t *capacity, rsp_error *err)
{
    const rsp__host_device *dev = (const rsp__host_device *)base;
    if (id >= dev->num_buffers || !dev->buffers[id].exists)
        return rsp__fail(err, RSP_EINVAL, "device buffer %u was never created", id);
    const host_buffer *hb = &dev->buffers[id];
    if (slot_indices)
        *slot_indices = hb->slot_indices;
    if (has_state)
        *has_state = hb->has_state;
    if (capacity)
        *capacity = hb->capacity;
    return RSP_OK;
}

static rsp_status host_sync(rsp__device *base, rsp_error *err)
{
    rsp__host_device *dev = (rsp__host_device *)base;
    (void)err;
    return rsp__fence_wait(&dev->fence, rsp__load_relaxed_u64(&dev->submitted), RSP_WAIT_FOREVER);
}

static rsp_status host_event_wait(const rsp__device *base, const rsp_event *event,
                                  uint64_t timeout_ns, rsp_error *err)
{
    (void)base;
    /* The kind and the tag were checked by rsp__device_event_wait. */
    if (!event->handle)
        return RSP_OK;
    rsp_status st = rsp__fence_wait(event->handle, event->value, timeout_ns);
    if (st == RSP_ETIMEDOUT)
        return rsp__fail(err, st, "event wait: host fence %p did not reach %llu in time (at %llu)",
                         event->handle, (unsigned long long)event->value,
                         (unsigned long long)rsp__fence_value(event->handle));
    return st;
}

static rsp_status host_read(rsp__device *base, uint32_t block, uint32_t layer, uint32_t slot,
                            void *dst, rsp_error *err)
{
    rsp__host_device *dev = (rsp__host_device *)base;
    (void)err; /* device.c checked the range: any slot id, request or checkpoint */
    /* Any thread: wait for what was submitted when we looked (HV2 orders the
     * worker's writes before our copy). */
    rsp__fence_wait(&dev->fence, rsp__load_relaxed_u64(&dev->submitted), RSP_WAIT_FOREVER);
    memcpy(dst, rsp__device_region(base, block, layer, slot),
           (size_t)base->layout->blocks[block].slot_bytes);
    return RSP_OK;
}

static void host_free(rsp__host_device *dev)
{
    for (uint32_t b = 0; b < RSP_MAX_BLOCKS; b++) {
        storage_unmap(dev->base.block_base[b], dev->block_bytes[b]);
        for (uint32_t t = 0; t < RSP_TIER_COUNT_; t++)
            storage_unmap(dev->base.tier_base[t][b], dev->tier_bytes[t][b]);
    }
    for (uint32_t i = 0; i < dev->num_buffers; i++) {
        free(dev->buffers[i].slot_indices);
        free(dev->buffers[i].has_state);
    }
    free(dev->buffers);
    free(dev->ring_buf);
    free(dev->stop_job);
    free(dev->scratch);
    free(dev->spare_job);
    free(dev->changes);
    rsp__host_spare_bufs_free(dev);
    dev->fence.magic = FENCE_DEAD;
    pthread_mutex_destroy(&dev->fence.lock);
    free(dev);
}

static void host_destroy(rsp__device *base)
{
    rsp__host_device *dev = (rsp__host_device *)base;
    /* The stop job runs after everything queued (FIFO): this drains. */
    host_job *stop = dev->stop_job;
    dev->stop_job = NULL;
    stop->value = dev->submitted + 1;
    rsp__host_ring_put(dev, stop);
    pthread_join(dev->worker, NULL);
    host_free(dev);
}

static const rsp__device_ops host_ops = {
    .event_kind = RSP_EVENT_HOST_FENCE,
    .destroy = host_destroy,
    .reserve = rsp__host_reserve,
    .submit = rsp__host_submit,
    .buffer = host_buffer_get,
    .sync = host_sync,
    .event_wait = host_event_wait,
    .read = host_read,
    .check_event = rsp__host_check_event,
    .checksum = rsp__host_checksum,
};

/* Create step: every block of the three storages (request slots, then the
 * device and host checkpoint tiers, all host memory here), mapped
 * (storage_map: zero, page aligned, touched lazily); a tier of no slots
 * maps nothing (its base stays NULL: no id reaches it). Each mapping is
 * recorded (base and size) as soon as it exists, so host_free unmaps it. */
static rsp_status host_blocks_alloc(rsp__host_device *dev, rsp_error *err)
{
    static const char *const what[] = {"request slots", "device-tier checkpoints",
                                       "host-tier checkpoints"};
    const rsp__layout *layout = dev->base.layout;
    for (rsp__space sp = RSP__SPACE_SLOTS; sp <= RSP__SPACE_HOST; sp++) {
        if (rsp__space_count(layout, sp) == 0)
            continue;
        for (uint32_t b = 0; b < layout->num_blocks; b++) {
            const uint64_t n = rsp__space_block_bytes(layout, sp, b);
            void **base = sp == RSP__SPACE_SLOTS ? &dev->base.block_base[b]
                                                 : &dev->base.tier_base[sp - RSP__SPACE_DEVICE][b];
            *base = storage_map(n);
            if (sp == RSP__SPACE_SLOTS)
                dev->block_bytes[b] = n;
            else
                dev->tier_bytes[sp - RSP__SPACE_DEVICE][b] = n;
            if (!*base)
                return rsp__fail(err, RSP_ENOMEM,
                                 "host device: cannot map block '%s' of the %s (%llu bytes): out "
                                 "of memory",
                                 layout->blocks[b].name, what[sp], (unsigned long long)n);
        }
    }
    return RSP_OK;
}

rsp_status rsp__host_device_create(const rsp__layout *layout, rsp__device **out, rsp_error *err)
{
    rsp__host_device *dev = NULL;
    if (posix_memalign((void **)&dev, 64, rsp__align_up(sizeof *dev, 64)) != 0)
        return rsp__fail(err, RSP_ENOMEM, "host device: out of memory");
    memset(dev, 0, sizeof *dev);
    dev->base.ops = &host_ops;
    dev->base.kind = RSP_DEVICE_HOST;
    dev->base.layout = layout;
    if (rsp__fence_init(&dev->fence) != RSP_OK) {
        free(dev); /* host_free would destroy the lock that failed */
        return rsp__fail(err, RSP_ENOMEM, "host device: cannot initialise its fence");
    }
    /* From here on, the one unwind path: host_free frees whatever exists. */
    rsp_status st = host_blocks_alloc(dev, err);
    if (st == RSP_OK)
        st = rsp__host_worker_start(dev, err);
    if (st != RSP_OK) {
        host_free(dev);
        return st;
    }
    *out = &dev->base;
    return RSP_OK;
}
