/*
 * Internal: the host device's shared state. The host device is slot storage
 * in anonymous mappings and a device worker thread that runs work lists in
 * FIFO order, with a monotonic timeline (rsp_host_fence) as its event. It
 * exists so the ordering rules of docs/semantics.md 5 are real on a CPU: a
 * missing wait is a visible bug without a GPU. Only src/device/host*.c
 * include this file. SPDX-License-Identifier: Apache-2.0
 *
 * One job a file:
 *   host.c         the device: slot storage, create and destroy, the vtable
 *                  (sync, event_wait, read, buffer);
 *   host_fence.c   rsp_host_fence, the timeline (HV, HW, RC);
 *   host_worker.c  the ring and the worker thread, and the execution of a
 *                  job's ops (HQ, HS; HV1 for each job it runs);
 *   host_submit.c  reserve, check_event and submit in four phases, the
 *                  inline run on an idle device (HV2 in its idle check).
 *
 * Threads:
 *   owner (one thread at a time): create, destroy, reserve, check_event,
 *     submit, buffer, sync; it is the single producer of the ck_ring SPSC
 *     queue.
 *   worker (one per device): the single consumer; runs WAIT/ZERO/COPY/UPLOAD
 *     and frees what a buffer growth retired, then raises the timeline.
 *     Exception: when the device is idle (every submitted job completed) and
 *     a work list is small and cannot block, submit runs it inline on the
 *     owner and raises the timeline itself (can_run_inline): FIFO order is
 *     the same, and a plan's upload skips two thread wake-ups.
 *   any thread: event_wait, read, and every rsp_host_fence_* function.
 *
 * Synchronises-with pairs (tags used at both ends in the files above):
 *   HQ1/HQ2  job publication: the owner's ring enqueue (ck_ring's store fence
 *          before the tail store) -> the worker's dequeue.
 *   HS1/HS2  worker sleep: the worker announces `sleeping`, full fence, re-checks
 *          the ring; the owner enqueues, full fence, checks `sleeping`.
 *   HW1/HW2  fence wake: a waiter counts itself in `waiters` (seq_cst RMW),
 *          then reads `seq` (seq_cst) and `value`; a signaller stores
 *          `value` (release), bumps `seq` (seq_cst RMW), reads `waiters`
 *          (seq_cst). Store->load on both sides.
 *   HV1/HV2  fence value: the release store of `value` in signal -> the acquire
 *          load in wait/value; everything the worker wrote for a job is
 *          visible to whoever sees the job's value reached, the owner's
 *          idle check before an inline run (can_run_inline) included.
 *   RC1/RC2  fence references: every drop is an acq_rel decrement; the one
 *          that reaches zero frees after every other holder's last access.
 */
#ifndef RSP_DEVICE_HOST_IMPL_H
#define RSP_DEVICE_HOST_IMPL_H

#include "device_impl.h"

#include "util/sync.h"

#include <ck_ring.h>
#include <pthread.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* rsp_host_fence: a monotonic 64-bit timeline with futex wake-up            */
/* ------------------------------------------------------------------------ */

/* Spins before a futex sleep: long enough to catch a job that is about to
 * finish, short enough not to steal a 2-core CI machine from the worker. */
#define HOST_SPIN 256

/* The tag of a live fence, and what its last unref leaves behind. */
#define FENCE_MAGIC 0x72737066u /* "rspf" */
#define FENCE_DEAD 0x64656164u  /* "dead" */

struct rsp_host_fence {
    /* FENCE_MAGIC from init until the last reference goes (then FENCE_DEAD):
     * a cheap check that a handle given as a host fence is one. Written
     * before the fence is handed out and when it dies; read by any thread
     * that was handed it. */
    uint32_t magic;
    /* Any thread: written under `lock` with a release store (HV1), read with
     * an acquire load (HV2). Never decreases. */
    uint64_t value;
    /* Futex word, bumped after every raise (HW2), so a sleeper whose snapshot
     * is stale returns at once instead of missing the wake. Any thread. */
    uint32_t seq;
    /* Threads inside fence_wait's sleeping path (HW1); signal skips the wake
     * syscall while it is zero. Any thread, atomic. */
    uint32_t waiters;
    /* Serialises signallers only: a raise is compare-then-store and sync.h
     * has no 64-bit compare-and-swap. Waiters never take it. */
    pthread_mutex_t lock;
    /* The creator's reference plus one per queued WAIT on this fence, so a
     * caller may destroy a fence the device still waits on (as CUDA lets a
     * stream outlive a destroyed event): the last reference frees it. Any
     * thread, atomic (RC1/RC2). */
    uint32_t refs;
};

static inline bool rsp__fence_reached(const struct rsp_host_fence *f, uint64_t value)
{
    /* HV2: pairs with HV1 in fence_signal (host_fence.c). */
    return rsp__load_acquire_u64(&f->value) >= value;
}

/* ------------------------------------------------------------------------ */
/* Jobs: a submitted work list, copied                                       */
/* ------------------------------------------------------------------------ */

typedef enum host_op_kind {
    HOP_WAIT = 0,
    HOP_ZERO,   /* slots[count] */
    HOP_COPY,   /* pairs[count] */
    HOP_UPLOAD, /* src vectors (inside the job) -> a buffer's arrays */
    HOP_RETIRE, /* a grown buffer: copy old -> new, then free old */
} host_op_kind;

typedef struct host_op {
    host_op_kind kind;
    uint32_t count;
    union {
        rsp_event event;
        const uint32_t *slots;
        const rsp__copy *pairs;
        struct {
            const int32_t *src_idx;
            const bool *src_has;
            int32_t *dst_idx;
            bool *dst_has;
        } up;
        struct {
            int32_t *old_idx;
            bool *old_has;
            int32_t *new_idx;
            bool *new_has;
        } retire; /* count = old capacity */
    } u;
} host_op;

/* One allocation: the header, ops[num_ops], then the copied data. Written by
 * the owner before HQ1, read and freed by the worker after HQ2. */
typedef struct host_job {
    uint64_t value; /* timeline value reached once this job has run */
    bool stop;      /* destroy's last job: the worker exits after it */
    uint32_t num_ops;
    host_op ops[];
} host_job;

/* An addressing buffer. Owner only; the worker sees raw pointers in jobs. */
typedef struct host_buffer {
    int32_t *slot_indices;
    bool *has_state;
    uint32_t capacity;
    bool exists;
} host_buffer;

/* Buffer ids index a table: the core hands them out densely from 0, so a
 * huge id is a bug, refused before it could size the table. */
#define HOST_MAX_BUFFERS (1u << 20)

/* Entries of the ring: a power of two; ck_ring holds one fewer. */
#define HOST_RING_SIZE 1024u

typedef struct rsp__host_device {
    rsp__device base;                     /* first: rsp__device* and rsp__host_device* convert */
    uint64_t block_bytes[RSP_MAX_BLOCKS]; /* immutable: each block's mapping (storage_map) */
    /* Immutable: each checkpoint tier's block mappings (base.tier_base). */
    uint64_t tier_bytes[RSP_TIER_COUNT_][RSP_MAX_BLOCKS];

    /* Owner only. */
    host_buffer *buffers;
    uint32_t num_buffers; /* entries of `buffers` (ids 0..num_buffers-1), all set */
    host_job *stop_job;   /* allocated at creation so destroy cannot fail */
    host_job *scratch;    /* reused job storage for work run inline */
    size_t scratch_size;
    /* Reserved ahead by host_reserve (owner only), so that a submit after
     * the core changed state does not allocate: storage for the next job
     * handed to the worker, the change records of its BUFFER ops, and the
     * arrays of the buffers it creates or grows. A submit takes them when
     * they fit and allocates otherwise (callers that reserve nothing). */
    host_job *spare_job;
    size_t spare_job_size;
    struct buffer_change *changes; /* cap_changes records, reused */
    uint32_t cap_changes;
    struct host_spare_buf {
        uint32_t id, capacity;
        int32_t *slot_indices;
        bool *has_state;
    } spare_bufs[2 * RSP_MAX_LABELS]; /* a plan's vector and index tensor buffers */
    uint32_t num_spare_bufs;
    pthread_t worker;

    /* Written by the owner (relaxed store after HQ1), read by any thread in
     * sync/read: the value of the last job enqueued. */
    uint64_t submitted;
    /* Owner only: jobs handed to the worker through the ring (destroy's stop
     * job excluded), for tests that pin which submits never reach it
     * (rsp__host_jobs_queued). */
    uint64_t queued;

    /* Owner (producer) and worker (consumer); ck_ring keeps its indices on
     * separate cache lines. */
    struct ck_ring ring;
    ck_ring_buffer_t *ring_buf;

    /* Futex word: 1 while the worker announces sleep (HS1/HS2). */
    uint32_t sleeping CK_CC_CACHELINE;

    /* The device's timeline; raised by the worker after each job. */
    struct rsp_host_fence fence CK_CC_CACHELINE;
} rsp__host_device;

/* host_fence.c: a fence at value 0 with one reference, not yet handed out
 * (the device's own timeline is one, embedded in the device). RSP_ENOMEM:
 * its lock could not be initialised. */
rsp_status rsp__fence_init(struct rsp_host_fence *f);

/* host_worker.c: the ring, the stop job (allocated now so destroy cannot
 * fail), then the worker thread. Create step; host_free frees what exists. */
rsp_status rsp__host_worker_start(rsp__host_device *dev, rsp_error *err);
/* host_worker.c: enqueue a job for the worker (owner, HQ1/HS2); waits while
 * the ring is full, never refuses. */
void rsp__host_ring_put(rsp__host_device *dev, host_job *job);
/* host_worker.c: run a job's ops in order: the worker for a queued job, the
 * owner for one run inline on an idle device. */
void rsp__host_run_job(rsp__host_device *dev, const host_job *job);

/* host_submit.c: the vtable's reserve, check_event and submit (device.h),
 * and the spare buffer arrays a reserve left unused, freed (owner). */
rsp_status rsp__host_reserve(rsp__device *base, const rsp__ext_need *need, rsp_error *err);
rsp_status rsp__host_check_event(const rsp__device *base, const rsp_event *ev, rsp_error *err);
rsp_status rsp__host_submit(rsp__device *base, const rsp__work *w, rsp_event *done, rsp_error *err);
/* rsp__device_checksum (host_guard.c). */
rsp_status rsp__host_checksum(rsp__device *dev, const uint32_t *slots, uint32_t n, uint64_t *out,
                              rsp_error *err);
void rsp__host_spare_bufs_free(rsp__host_device *dev);

#endif
