/*
 * The host device's worker: the SPSC ring from the owner (HQ1/HQ2), the
 * worker's sleep and wake-up (HS1/HS2), the execution of a job's ops
 * (WAIT, ZERO, COPY, UPLOAD, RETIRE) and the timeline raise after each job
 * (HV1). host_impl.h has the threads and every pair.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "host_impl.h"

#include "util/error.h"
#include "util/hb.h"
#include "util/sync.h"

#include <ck_ring.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* ThreadSanitizer annotations                                               */
/* ------------------------------------------------------------------------ */

/*
 * Our own atomics (util/sync.h: __atomic builtins) are seen by TSan, so the
 * fence's pairs (HV, HW, RC) need no annotation. ck_ring is built on ck_pr,
 * inline assembly that TSan does not see: its loads and stores are neither
 * reported nor turned into happens-before edges. So the job hand-off through
 * it (HQ1/HQ2) states its edge explicitly (release before the enqueue,
 * acquire after the dequeue: src/util/hb.h), and the ring's own slot copies are
 * hidden from TSan with rsp__hb_ignore_begin/end (they are ordered by
 * ck_ring's fences, which TSan cannot model). Outside a TSan build these are
 * all empty.
 */

/* ------------------------------------------------------------------------ */
/* The worker                                                                */
/* ------------------------------------------------------------------------ */

static bool ring_take(rsp__host_device *dev, host_job **job)
{
    void *p = NULL;
    rsp__hb_ignore_begin();
    /* HQ2: pairs with HQ1 in rsp__host_ring_put (ck_ring's load fence after the tail). */
    bool ok = ck_ring_dequeue_spsc(&dev->ring, dev->ring_buf, &p);
    rsp__hb_ignore_end();
    if (ok) {
        rsp__hb_acquire(p);
        *job = p;
    }
    return ok;
}

/* Next job: spin briefly, then sleep on `sleeping` until the owner wakes us. */
static host_job *worker_next(rsp__host_device *dev)
{
    host_job *job;
    for (;;) {
        for (int i = 0; i < HOST_SPIN; i++) {
            if (ring_take(dev, &job))
                return job;
            rsp__cpu_relax();
        }
        /* HS1: pairs with HS2 in rsp__host_ring_put. A full fence orders the
         * announcement before the re-check of the ring (store->load; the
         * re-check is ck_ring's loads, so no seq_cst RMW would do). */
        rsp__store_relaxed_u32(&dev->sleeping, 1);
        rsp__fence_full();
        if (ring_take(dev, &job)) {
            rsp__store_relaxed_u32(&dev->sleeping, 0);
            return job;
        }
        rsp__futex_wait(&dev->sleeping, 1, NULL);
        /* Relaxed: only a hint for the producer; the loop re-checks. */
        rsp__store_relaxed_u32(&dev->sleeping, 0);
    }
}

/* ZERO: every layer of every block of each slot id, in its storage. */
static void run_zero(const rsp__device *dev, const uint32_t *slots, uint32_t count)
{
    const rsp__layout *lay = dev->layout;
    for (uint32_t i = 0; i < count; i++)
        for (uint32_t b = 0; b < lay->num_blocks; b++)
            for (uint32_t l = 0; l < lay->num_layers; l++)
                memset(rsp__device_region(dev, b, l, slots[i]), 0,
                       (size_t)lay->blocks[b].slot_bytes);
}

/* COPY: each id is resolved to its storage (request slots, device tier,
 * host tier: rsp__device_region), so a pair may go any way between them;
 * one memcpy per (block, layer). */
static void run_copy(const rsp__device *dev, const rsp__copy *pairs, uint32_t count)
{
    const rsp__layout *lay = dev->layout;
    for (uint32_t i = 0; i < count; i++) {
        if (pairs[i].src == pairs[i].dst)
            continue;
        for (uint32_t b = 0; b < lay->num_blocks; b++)
            for (uint32_t l = 0; l < lay->num_layers; l++)
                memcpy(rsp__device_region(dev, b, l, pairs[i].dst),
                       rsp__device_region(dev, b, l, pairs[i].src),
                       (size_t)lay->blocks[b].slot_bytes);
    }
}

void rsp__host_run_job(rsp__host_device *dev, const host_job *job)
{
    for (uint32_t i = 0; i < job->num_ops; i++) {
        const host_op *op = &job->ops[i];
        switch (op->kind) {
        case HOP_WAIT:
            /* Checked at submit: a host fence, never this device's own
             * timeline ahead of this job. Forever: FIFO means nothing later
             * may run before it. */
            if (op->u.event.handle) {
                rsp__fence_wait(op->u.event.handle, op->u.event.value, RSP_WAIT_FOREVER);
                if (op->u.event.handle != &dev->fence)
                    rsp__fence_unref(op->u.event.handle); /* taken in hold_waited_fences */
            }
            break;
        case HOP_ZERO: run_zero(&dev->base, op->u.slots, op->count); break;
        case HOP_COPY: run_copy(&dev->base, op->u.pairs, op->count); break;
        case HOP_UPLOAD:
            memcpy(op->u.up.dst_idx, op->u.up.src_idx, (size_t)op->count * sizeof(int32_t));
            if (op->u.up.src_has) /* NULL: an index tensor, indices only */
                memcpy(op->u.up.dst_has, op->u.up.src_has, (size_t)op->count * sizeof(bool));
            break;
        case HOP_RETIRE:
            /* Earlier uploads into the old arrays have run (FIFO), so the
             * new arrays start with exactly what the old ones held. */
            memcpy(op->u.retire.new_idx, op->u.retire.old_idx, (size_t)op->count * sizeof(int32_t));
            memcpy(op->u.retire.new_has, op->u.retire.old_has, (size_t)op->count * sizeof(bool));
            free(op->u.retire.old_idx);
            free(op->u.retire.old_has);
            break;
        }
    }
}

static void *worker_main(void *arg)
{
    rsp__host_device *dev = arg;
    for (;;) {
        host_job *job = worker_next(dev);
        rsp__host_run_job(dev, job);
        bool stop = job->stop;
        uint64_t value = job->value;
        free(job);
        /* HV1: "done up to job `value`"; pairs with HV2 in every waiter and
         * in can_run_inline's idle check. */
        rsp__fence_signal(&dev->fence, value);
        if (stop)
            return NULL;
    }
}

/* Enqueue job (owner). Waits, spinning then sleeping on the timeline, while
 * the ring is full: every completed job was dequeued first. */
void rsp__host_ring_put(rsp__host_device *dev, host_job *job)
{
    /* Read before the enqueue: from then on the worker may free the job. */
    uint64_t value = job->value;
    rsp__hb_release(job);
    for (;;) {
        rsp__hb_ignore_begin();
        /* HQ1: ck_ring fences the slot store before the tail store; pairs
         * with HQ2 in ring_take. */
        bool ok = ck_ring_enqueue_spsc(&dev->ring, dev->ring_buf, job);
        rsp__hb_ignore_end();
        if (ok)
            break;
        /* Full: wait for the next completion, then retry. */
        uint64_t done = rsp__load_acquire_u64(&dev->fence.value);
        rsp__fence_wait(&dev->fence, done + 1, RSP_WAIT_FOREVER);
    }
    /* Relaxed: `submitted` is read by sync/read only to pick a value to wait
     * for; the wait itself orders (HV1/HV2). */
    rsp__store_relaxed_u64(&dev->submitted, value);
    /* HS2: full fence; the enqueue is ordered before the `sleeping` check;
     * pairs with HS1 in worker_next. */
    rsp__fence_full();
    /* Relaxed: `sleeping` carries no data; the fence orders the protocol. */
    if (rsp__load_relaxed_u32(&dev->sleeping) != 0 && rsp__swap_relaxed_u32(&dev->sleeping, 0) != 0)
        rsp__futex_wake(&dev->sleeping, 1);
}

/* Create step: the ring, the stop job (allocated now so destroy cannot
 * fail), then the worker that consumes the ring. */
rsp_status rsp__host_worker_start(rsp__host_device *dev, rsp_error *err)
{
    dev->ring_buf = calloc(HOST_RING_SIZE, sizeof *dev->ring_buf);
    dev->stop_job = malloc(sizeof(host_job));
    if (!dev->ring_buf || !dev->stop_job)
        return rsp__fail(err, RSP_ENOMEM, "host device: out of memory");
    dev->stop_job->stop = true;
    dev->stop_job->num_ops = 0;
    ck_ring_init(&dev->ring, HOST_RING_SIZE);
    int rc = pthread_create(&dev->worker, NULL, worker_main, dev);
    if (rc != 0)
        return rsp__fail(err, rc == EAGAIN ? RSP_ENOMEM : RSP_EDEVICE,
                         "host device: cannot start the device worker: %s", strerror(rc));
    return RSP_OK;
}
