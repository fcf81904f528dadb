/*
 * The host device: slot storage in anonymous mappings and a device worker
 * thread that runs work lists in FIFO order, with a monotonic timeline
 * (rsp_host_fence) as its event. It exists so the ordering rules of
 * docs/semantics.md 5 are real on a CPU: a missing wait is a visible bug
 * without a GPU. SPDX-License-Identifier: Apache-2.0
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
 * Synchronises-with pairs (tags used at both ends below):
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
#include "device_impl.h"

#include "util/assert.h"
#include "util/hb.h"
#include "util/mem.h"
#include "util/time.h"
#include "util/error.h"
#include "util/sync.h"

#include <ck_ring.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

static rsp_status fence_init(struct rsp_host_fence *f)
{
    f->magic = FENCE_MAGIC;
    f->value = 0;
    f->seq = 0;
    f->waiters = 0;
    f->refs = 1;
    return pthread_mutex_init(&f->lock, NULL) == 0 ? RSP_OK : RSP_ENOMEM;
}

static bool fence_reached(struct rsp_host_fence *f, uint64_t value)
{
    /* HV2: pairs with HV1 in fence_signal. */
    return rsp__load_acquire_u64(&f->value) >= value;
}

static void fence_signal(struct rsp_host_fence *f, uint64_t value)
{
    bool raised = false;
    pthread_mutex_lock(&f->lock);
    /* Relaxed: `value` only changes under this lock. */
    if (value > rsp__load_relaxed_u64(&f->value)) {
        /* HV1: publishes everything written before this signal; pairs with HV2. */
        rsp__store_release_u64(&f->value, value);
        /* HW2: pairs with HW1 in fence_wait. Seq_cst RMW (a release too: a
         * waiter whose snapshot of `seq` reads it sees `value`), then the
         * seq_cst load of `waiters` below (store->load). */
        rsp__fetch_add_seq_cst_u32(&f->seq, 1);
        raised = true;
    }
    pthread_mutex_unlock(&f->lock);
    /* HW2: seq_cst, after the seq_cst bump: a waiter counted after this load
     * snapshots `seq` after the bump (the seq_cst order) and sees the raise. */
    if (raised && rsp__load_seq_cst_u32(&f->waiters) != 0)
        rsp__futex_wake_all(&f->seq);
}

static rsp_status fence_wait(struct rsp_host_fence *f, uint64_t value, uint64_t timeout_ns)
{
    if (fence_reached(f, value))
        return RSP_OK;
    if (timeout_ns == 0)
        return RSP_ETIMEDOUT;
    for (int i = 0; i < HOST_SPIN; i++) {
        rsp__cpu_relax();
        if (fence_reached(f, value))
            return RSP_OK;
    }
    uint64_t deadline = rsp__deadline(timeout_ns);
    rsp_status st = RSP_OK;
    /* HW1: pairs with HW2 in fence_signal: seq_cst RMW, then the seq_cst
     * load of `seq` below (store->load). */
    rsp__fetch_add_seq_cst_u32(&f->waiters, 1);
    for (;;) {
        /* HW1: seq_cst (so also acquire): the snapshot is taken before
         * `value` is re-read, so a raise after the re-read changes `seq` and
         * the futex refuses to sleep on the stale snapshot; and a snapshot
         * that reads a bump sees that raise's value. */
        uint32_t seq = rsp__load_seq_cst_u32(&f->seq);
        if (fence_reached(f, value))
            break;
        struct timespec ts;
        const struct timespec *rel;
        if (!rsp__time_left(deadline, &ts, &rel)) {
            st = RSP_ETIMEDOUT;
            break;
        }
        rsp__futex_wait(&f->seq, seq, rel);
    }
    /* Relaxed: a stale count only costs a signaller a spare wake. */
    rsp__fetch_add_relaxed_u32(&f->waiters, (uint32_t)-1);
    return st;
}

rsp_status rsp__fence_create(rsp_host_fence **out, rsp_error *err)
{
    struct rsp_host_fence *f = malloc(sizeof *f);
    if (!f)
        return rsp__fail(err, RSP_ENOMEM, "rsp_host_fence_create: out of memory");
    if (fence_init(f) != RSP_OK) {
        free(f);
        return rsp__fail(err, RSP_ENOMEM, "rsp_host_fence_create: cannot initialise its lock");
    }
    *out = f;
    return RSP_OK;
}

bool rsp__fence_valid(const rsp_host_fence *f)
{
    return f && f->magic == FENCE_MAGIC;
}

void rsp__fence_ref(rsp_host_fence *f)
{
    /* Relaxed: the caller already holds a reference (every drop is acq_rel,
     * RC1/RC2). */
    rsp__fetch_add_relaxed_u32(&f->refs, 1);
}

void rsp__fence_unref(rsp_host_fence *f)
{
    /* RC1: acq_rel RMW; its release half orders every use of f by this
     * thread before the decrement. Pairs with RC2 in whichever thread drops
     * the last one. */
    if (rsp__fetch_add_acq_rel_u32(&f->refs, UINT32_MAX) != 1)
        return;
    /* RC2: the RMW saw the last reference; its acquire half orders the free
     * after RC1 of every other holder, so nobody touches f any more. */
    f->magic = FENCE_DEAD; /* a later use of the freed handle may still see it */
    pthread_mutex_destroy(&f->lock);
    free(f);
}

uint32_t rsp__fence_refs(const rsp_host_fence *f)
{
    return rsp__load_relaxed_u32((uint32_t *)&f->refs);
}

void rsp__fence_signal(rsp_host_fence *f, uint64_t value)
{
    fence_signal(f, value);
}

uint64_t rsp__fence_value(const rsp_host_fence *f)
{
    return rsp__load_acquire_u64(&f->value); /* HV2 */
}

rsp_status rsp__fence_wait(const rsp_host_fence *f, uint64_t value, uint64_t timeout_ns)
{
    /* The futex and the waiter count need a writable word; the timeline
     * itself is only read. */
    return fence_wait((struct rsp_host_fence *)f, value, timeout_ns);
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
    } spare_bufs[RSP_MAX_LABELS];
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

/* 64-byte aligned, zero-filled; NULL when out of memory or n is absurd. */
static void *alloc_zeroed(uint64_t n)
{
    if (n == 0)
        n = 1;
    if (n > (uint64_t)SIZE_MAX - 64)
        return NULL;
    void *p = NULL;
    if (posix_memalign(&p, 64, rsp__align_up((size_t)n, 64)) != 0)
        return NULL;
    memset(p, 0, (size_t)n);
    return p;
}

/* ------------------------------------------------------------------------ */
/* The worker                                                                */
/* ------------------------------------------------------------------------ */

static bool ring_take(rsp__host_device *dev, host_job **job)
{
    void *p = NULL;
    rsp__hb_ignore_begin();
    /* HQ2: pairs with HQ1 in ring_put (ck_ring's load fence after the tail). */
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
        /* HS1: pairs with HS2 in ring_put. A full fence orders the
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

static void run_job(rsp__host_device *dev, const host_job *job)
{
    for (uint32_t i = 0; i < job->num_ops; i++) {
        const host_op *op = &job->ops[i];
        switch (op->kind) {
        case HOP_WAIT:
            /* Checked at submit: a host fence, never this device's own
             * timeline ahead of this job. Forever: FIFO means nothing later
             * may run before it. */
            if (op->u.event.handle) {
                fence_wait(op->u.event.handle, op->u.event.value, RSP_WAIT_FOREVER);
                if (op->u.event.handle != &dev->fence)
                    rsp__fence_unref(op->u.event.handle); /* taken in hold_waited_fences */
            }
            break;
        case HOP_ZERO: run_zero(&dev->base, op->u.slots, op->count); break;
        case HOP_COPY: run_copy(&dev->base, op->u.pairs, op->count); break;
        case HOP_UPLOAD:
            memcpy(op->u.up.dst_idx, op->u.up.src_idx, (size_t)op->count * sizeof(int32_t));
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
        run_job(dev, job);
        bool stop = job->stop;
        uint64_t value = job->value;
        free(job);
        /* HV1: "done up to job `value`"; pairs with HV2 in every waiter and
         * in can_run_inline's idle check. */
        fence_signal(&dev->fence, value);
        if (stop)
            return NULL;
    }
}

/* Enqueue job (owner). Waits, spinning then sleeping on the timeline, while
 * the ring is full: every completed job was dequeued first. */
static void ring_put(rsp__host_device *dev, host_job *job)
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
        fence_wait(&dev->fence, done + 1, RSP_WAIT_FOREVER);
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

/* ------------------------------------------------------------------------ */
/* Submit                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * host_submit runs in four phases, so that everything that can fail comes
 * before anything changes (the way DPDK's ring moves its head before it
 * updates its tail):
 *
 *   validate  check every op, count what the job needs; changes nothing.
 *   reserve   every allocation: the job's storage, the buffer change
 *             records, room in the buffer table, the arrays of each buffer
 *             created or grown; taken from what host_reserve set aside when
 *             it fits, so a reserved submit allocates nothing here. On
 *             failure all of it is given back: RSP_ENOMEM, nothing changed.
 *   apply     fill the job and swap the new buffers in. Cannot fail.
 *   hand off  run the job inline or queue it for the worker. Cannot fail.
 *
 * Validate and apply walk the list once each; reserve walks it only when
 * the list has BUFFER ops (a buffer created or grown, which is rare).
 */

/* Capacity buffer `id` will have when op `upto` of w runs: the current one,
 * raised by every earlier BUFFER op of the same list; -1 if it will not
 * exist by then. */
static int64_t capacity_at(const rsp__host_device *dev, const rsp__work *w, uint32_t upto,
                           uint32_t id)
{
    int64_t cap =
        id < dev->num_buffers && dev->buffers[id].exists ? (int64_t)dev->buffers[id].capacity : -1;
    for (uint32_t j = 0; j < upto; j++)
        if (w->ops[j].kind == RSP__OP_BUFFER && w->ops[j].buffer == id &&
            (int64_t)w->ops[j].capacity > cap)
            cap = w->ops[j].capacity;
    return cap;
}

/* What a job needs, counted by validate (and by host_reserve from a
 * rsp__ext_need). */
typedef struct job_size {
    uint32_t ops;                 /* host ops: one per op (a BUFFER's: its RETIRE) */
    uint32_t buffers;             /* BUFFER ops: one buffer change record each */
    size_t slots, pairs, uploads; /* entries copied into the job */
} job_size;

/* A WAIT may name any host fence, or the device's own timeline at a value
 * already submitted: a later one would wait for work queued behind itself
 * (FIFO) and never complete. Owner only (reads `submitted`). */
static bool wait_ok(const rsp__host_device *dev, const rsp_event *ev)
{
    return !(ev->handle == &dev->fence && ev->value > dev->submitted);
}

static rsp_status host_check_event(const rsp__device *base, const rsp_event *ev, rsp_error *err)
{
    const rsp__host_device *dev = (const rsp__host_device *)base;
    if (wait_ok(dev, ev))
        return RSP_OK;
    return rsp__fail(err, RSP_EINVAL,
                     "forward_done is the pool's own device timeline at value %llu, which no "
                     "submitted work reaches (at most %llu): it would never complete",
                     (unsigned long long)ev->value, (unsigned long long)dev->submitted);
}

/* --- phase 1: validate ---------------------------------------------------- */

static rsp_status check_wait(const rsp__host_device *dev, const rsp__op *op, uint32_t i,
                             rsp_error *err)
{
    if (op->event.handle &&
        (op->event.kind != RSP_EVENT_HOST_FENCE || !rsp__fence_valid(op->event.handle)))
        return rsp__fail(err, RSP_EINVAL,
                         "device submit: op %u WAITs for an event that is not a live host "
                         "fence (kind %d)",
                         i, (int)op->event.kind);
    if (!wait_ok(dev, &op->event))
        return rsp__fail(err, RSP_EINVAL,
                         "device submit: op %u WAITs for value %llu of the device's own "
                         "timeline, which no earlier work reaches",
                         i, (unsigned long long)op->event.value);
    return RSP_OK;
}

/* An UPLOAD must fit the buffer as the list leaves it at that op. */
static rsp_status check_upload(const rsp__host_device *dev, const rsp__work *w, uint32_t i,
                               rsp_error *err)
{
    const rsp__op *op = &w->ops[i];
    int64_t cap = capacity_at(dev, w, i, op->buffer);
    if (cap < 0)
        return rsp__fail(err, RSP_EINVAL,
                         "device submit: op %u UPLOAD into buffer %u, which no BUFFER op created",
                         i, op->buffer);
    if (op->count > cap)
        return rsp__fail(err, RSP_EINVAL,
                         "device submit: op %u UPLOAD of %u entries into buffer %u of capacity "
                         "%lld",
                         i, op->count, op->buffer, (long long)cap);
    if (op->count && (!op->slot_indices || !op->has_state))
        return rsp__fail(err, RSP_EINVAL, "device submit: op %u UPLOAD with NULL vectors", i);
    return RSP_OK;
}

static rsp_status check_op(const rsp__host_device *dev, const rsp__work *w, uint32_t i,
                           rsp_error *err)
{
    const rsp__op *op = &w->ops[i];
    switch (op->kind) {
    case RSP__OP_WAIT: return check_wait(dev, op, i, err);
    case RSP__OP_ZERO: return rsp__device_check_ids(dev->base.layout, w, i, err);
    case RSP__OP_COPY: return rsp__device_check_ids(dev->base.layout, w, i, err);
    case RSP__OP_UPLOAD: return check_upload(dev, w, i, err);
    case RSP__OP_BUFFER:
        if (op->buffer >= HOST_MAX_BUFFERS)
            return rsp__fail(err, RSP_EINVAL,
                             "device submit: op %u BUFFER id %u out of range (< %u)", i, op->buffer,
                             HOST_MAX_BUFFERS);
        return RSP_OK;
    default:
        return rsp__fail(err, RSP_EINVAL, "device submit: op %u has unknown kind %d", i,
                         (int)op->kind);
    }
}

/* What a (valid) op adds to its job. */
static void count_op(const rsp__op *op, job_size *sz)
{
    sz->ops++; /* a BUFFER op's: a growth retires the old arrays through the worker */
    switch (op->kind) {
    case RSP__OP_ZERO: sz->slots += op->count; break;
    case RSP__OP_COPY: sz->pairs += op->count; break;
    case RSP__OP_UPLOAD: sz->uploads += op->count; break;
    case RSP__OP_BUFFER: sz->buffers++; break;
    default: break;
    }
}

/* Phase 1: check every op against the layout and the buffers and count what
 * the job needs, in one pass. Changes nothing. */
static rsp_status validate(const rsp__host_device *dev, const rsp__work *w, job_size *sz,
                           rsp_error *err)
{
    memset(sz, 0, sizeof *sz);
    for (uint32_t i = 0; i < w->num_ops; i++) {
        rsp_status st = check_op(dev, w, i, err);
        if (st != RSP_OK)
            return st;
        count_op(&w->ops[i], sz);
    }
    return RSP_OK;
}

/* --- storage a submit takes, and host_reserve sets aside ------------------ */

/* Make room for buffer ids up to id in the table; new entries are zero (no
 * such buffer). Owner only. */
static rsp_status buffers_reserve(rsp__host_device *dev, uint32_t id)
{
    if (id < dev->num_buffers)
        return RSP_OK;
    const uint32_t old = dev->num_buffers;
    if (rsp__grow((void **)&dev->buffers, &dev->num_buffers, (uint64_t)id + 1,
                  sizeof *dev->buffers) != RSP_OK)
        return RSP_ENOMEM;
    memset(dev->buffers + old, 0, (size_t)(dev->num_buffers - old) * sizeof *dev->buffers);
    return RSP_OK;
}

/* One buffer a submit creates or grows: its new arrays, allocated in the
 * reserve phase and swapped in by apply, in list order. */
typedef struct buffer_change {
    uint32_t op;       /* index of its BUFFER op in the list */
    uint32_t capacity; /* the buffer's once applied (a spare's arrays may be larger) */
    int32_t *slot_indices;
    bool *has_state;
} buffer_change;

/* Byte offsets of a job's parts in its one allocation; returns its size. */
typedef struct job_offsets {
    size_t slots, pairs, idx, has;
} job_offsets;

static size_t job_layout(const job_size *sz, job_offsets *o)
{
    o->slots = rsp__align_up(sizeof(host_job) + (size_t)sz->ops * sizeof(host_op), 8);
    o->pairs = rsp__align_up(o->slots + sz->slots * sizeof(uint32_t), 8);
    o->idx = rsp__align_up(o->pairs + sz->pairs * sizeof(rsp__copy), 8);
    o->has = o->idx + sz->uploads * sizeof(int32_t);
    return o->has + sz->uploads * sizeof(bool);
}

static void spare_bufs_free(rsp__host_device *dev)
{
    for (uint32_t i = 0; i < dev->num_spare_bufs; i++) {
        free(dev->spare_bufs[i].slot_indices);
        free(dev->spare_bufs[i].has_state);
    }
    dev->num_spare_bufs = 0;
}

/* Zeroed arrays of cap entries; false (nothing allocated): out of memory. */
static bool alloc_buffer_arrays(uint32_t cap, int32_t **idx, bool **has)
{
    *idx = alloc_zeroed((uint64_t)cap * sizeof(int32_t));
    *has = alloc_zeroed((uint64_t)cap * sizeof(bool));
    if (*idx && *has)
        return true;
    free(*idx);
    free(*has);
    return false;
}

/* Arrays for buffer id with at least cap entries: a reserved spare when
 * there is one (taken), else a new allocation (false: out of memory). */
static bool buffer_arrays(rsp__host_device *dev, uint32_t id, uint32_t cap, int32_t **idx,
                          bool **has)
{
    for (uint32_t i = 0; i < dev->num_spare_bufs; i++) {
        struct host_spare_buf *sb = &dev->spare_bufs[i];
        if (sb->id == id && sb->capacity >= cap) {
            *idx = sb->slot_indices;
            *has = sb->has_state;
            *sb = dev->spare_bufs[--dev->num_spare_bufs];
            return true;
        }
    }
    return alloc_buffer_arrays(cap, idx, has);
}

/* Storage for a job run inline: reused, grown on demand (to the exact size:
 * it is a byte count, not an array, and at most one job's worth). Owner
 * only. */
static host_job *scratch_job(rsp__host_device *dev, size_t size)
{
    if (size > dev->scratch_size) {
        host_job *j = realloc(dev->scratch, size);
        if (!j)
            return NULL;
        dev->scratch = j;
        dev->scratch_size = size;
    }
    return dev->scratch;
}

/* rsp__device_reserve: everything a submit of work within `need` would
 * allocate, allocated now. Owner only. O(buffers of need) allocations, none
 * once warm. */
static rsp_status host_reserve(rsp__device *base, const rsp__ext_need *need, rsp_error *err)
{
    rsp__host_device *dev = (rsp__host_device *)base;
    /* A BUFFER op may add a RETIRE op to the job. */
    job_size sz = {.ops = need->ops + need->num_buffers,
                   .buffers = need->num_buffers,
                   .slots = need->slots,
                   .pairs = need->pairs,
                   .uploads = need->upload_entries};
    job_offsets o;
    size_t bytes = job_layout(&sz, &o);
    if (!scratch_job(dev, bytes))
        goto oom;
    if (dev->spare_job_size < bytes) {
        free(dev->spare_job);
        dev->spare_job_size = 0;
        if (!(dev->spare_job = malloc(bytes)))
            goto oom;
        dev->spare_job_size = bytes;
    }
    if (rsp__grow((void **)&dev->changes, &dev->cap_changes, sz.buffers, sizeof *dev->changes) !=
        RSP_OK)
        goto oom;
    spare_bufs_free(dev); /* what the last reserve left unused */
    for (uint32_t i = 0; i < need->num_buffers; i++) {
        uint32_t id = need->buffer_id[i], cap = need->buffer_cap[i] ? need->buffer_cap[i] : 1;
        if (id >= HOST_MAX_BUFFERS)
            return rsp__fail(err, RSP_EINVAL, "device reserve: buffer id %u out of range", id);
        if (buffers_reserve(dev, id) != RSP_OK)
            goto oom;
        const host_buffer *hb = &dev->buffers[id];
        if (hb->exists && hb->capacity >= cap)
            continue;
        struct host_spare_buf *sb = &dev->spare_bufs[dev->num_spare_bufs];
        sb->id = id;
        sb->capacity = cap;
        if (!alloc_buffer_arrays(cap, &sb->slot_indices, &sb->has_state))
            goto oom;
        dev->num_spare_bufs++;
    }
    return RSP_OK;
oom:
    return rsp__fail(err, RSP_ENOMEM, "device: out of host memory reserving a job");
}

/* --- phase 2: reserve ----------------------------------------------------- */

/* Work that touches at most this many slot bytes may run inline on the owner
 * (about 25-40 us of memset/memcpy here): a hand-off to the worker costs a
 * futex wake of the worker and one of the waiter, 5-10 us each on a VM,
 * which dominated every plan (addressing uploads) and small zero/fork. */
#define HOST_INLINE_BYTES (1u << 20)

/*
 * Whether w may run inline, in the owner's submit, instead of on the worker:
 * only when FIFO order allows it (every job submitted so far has completed,
 * so nothing is queued or running: the worker is idle) and nothing in w can
 * block (each WAIT's event is already reached) and w is small. Owner only.
 *
 * The idle check is the acquire end of the worker's "done up to job N":
 * HV2 here pairs with HV1 in the worker's fence_signal of the last
 * submitted value, so its ZERO, COPY, UPLOAD and RETIRE writes for every
 * earlier job happen before the inline run's (a plan's ready must cover the
 * zeroes of the slots it hands out; an inline UPLOAD must land after a
 * queued one into the same arrays, and after a RETIRE that moved them).
 * The same HV2 on each waited-for fence orders its signaller's writes.
 *
 * An UPLOAD is a memcpy of the plan's vectors into the buffer's arrays
 * (run_job). The owner may do it when the worker is idle because the
 * arrays are written only by this device's jobs, all of them done; readers
 * reach the vectors through the plan's ready event, which hand_off raises
 * (HV1) after the copy, as the worker would.
 */
static bool can_run_inline(rsp__host_device *dev, const rsp__work *w, const job_size *sz)
{
    const uint64_t slot_bytes = dev->base.layout->slot_bytes;
    if ((uint64_t)(sz->slots + sz->pairs) * slot_bytes > HOST_INLINE_BYTES)
        return false;
    /* HV2 (the idle check): pairs with HV1 in worker_main. */
    if (!fence_reached(&dev->fence, dev->submitted))
        return false; /* a job is queued or running: FIFO puts w behind it */
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if (op->kind == RSP__OP_WAIT && op->event.handle &&
            !fence_reached(op->event.handle, op->event.value))
            return false;
    }
    return true;
}

/* What the reserve phase took for one submit: apply consumes it, unreserve
 * gives it back. */
typedef struct job_reservation {
    bool run_inline;        /* job is dev->scratch, run by the owner */
    host_job *job;          /* else the job's own allocation (the worker frees it) */
    buffer_change *changes; /* [num_changes], in list order */
    uint32_t num_changes;
    bool changes_owned; /* allocated for this submit, not dev->changes */
} job_reservation;

/* The job's one allocation: the scratch for a job run inline, else the
 * storage host_reserve set aside when it fits, else a new one. NULL: out of
 * memory. */
static host_job *take_job_storage(rsp__host_device *dev, size_t bytes, bool run_inline)
{
    if (run_inline)
        return scratch_job(dev, bytes);
    if (dev->spare_job && dev->spare_job_size >= bytes) {
        host_job *job = dev->spare_job;
        dev->spare_job = NULL;
        dev->spare_job_size = 0;
        return job;
    }
    return malloc(bytes);
}

/* Capacity buffer id has when a BUFFER op for it is applied: what the last
 * change of this list before that op gives it, else what the table says; -1
 * while it does not exist. The table has room for id. Unlike capacity_at
 * (validate's rule for UPLOADs, which counts a BUFFER op's capacity as
 * asked), this is what apply will find: 1 after a BUFFER op of capacity 0. */
static int64_t capacity_before(const rsp__host_device *dev, const rsp__work *w,
                               const job_reservation *r, uint32_t id)
{
    for (uint32_t k = r->num_changes; k-- > 0;)
        if (w->ops[r->changes[k].op].buffer == id)
            return r->changes[k].capacity;
    const host_buffer *hb = &dev->buffers[id];
    return hb->exists ? (int64_t)hb->capacity : -1;
}

/* A change, with its arrays, for every BUFFER op that creates its buffer or
 * grows it: decided as the ops before it leave the buffer, so apply makes
 * exactly these changes in this order. Room in the table for every id. */
static rsp_status reserve_buffer_changes(rsp__host_device *dev, const rsp__work *w,
                                         job_reservation *r)
{
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if (op->kind != RSP__OP_BUFFER)
            continue;
        if (buffers_reserve(dev, op->buffer) != RSP_OK)
            return RSP_ENOMEM;
        if (capacity_before(dev, w, r, op->buffer) >= (int64_t)op->capacity)
            continue; /* exists and large enough: the op changes nothing */
        buffer_change *c = &r->changes[r->num_changes];
        c->op = i;
        c->capacity = op->capacity ? op->capacity : 1;
        if (!buffer_arrays(dev, op->buffer, c->capacity, &c->slot_indices, &c->has_state))
            return RSP_ENOMEM;
        r->num_changes++;
    }
    return RSP_OK;
}

/* Give back what the reserve phase took. Nothing was applied, so this
 * restores everything (the buffer table may keep more zeroed entries). */
static void unreserve(job_reservation *r)
{
    for (uint32_t k = 0; k < r->num_changes; k++) {
        free(r->changes[k].slot_indices);
        free(r->changes[k].has_state);
    }
    if (r->changes_owned)
        free(r->changes);
    if (!r->run_inline)
        free(r->job);
}

/* Phase 2: every allocation of this submit, into r (r->run_inline set).
 * RSP_ENOMEM: all of it given back, nothing changed. */
static rsp_status reserve(rsp__host_device *dev, const rsp__work *w, const job_size *sz,
                          size_t job_bytes, job_reservation *r)
{
    r->job = take_job_storage(dev, job_bytes, r->run_inline);
    if (!r->job)
        return RSP_ENOMEM;
    if (sz->buffers == 0)
        return RSP_OK;
    if (sz->buffers <= dev->cap_changes) {
        r->changes = dev->changes;
    } else if ((r->changes = malloc(sz->buffers * sizeof *r->changes)) != NULL) {
        r->changes_owned = true;
    } else {
        unreserve(r);
        return RSP_ENOMEM;
    }
    if (reserve_buffer_changes(dev, w, r) != RSP_OK) {
        unreserve(r);
        return RSP_ENOMEM;
    }
    return RSP_OK;
}

/* --- phase 3: apply ------------------------------------------------------- */

/* Where the next copied entries go in a job's storage (job_layout). */
typedef struct job_cursor {
    uint32_t *slots;
    rsp__copy *pairs;
    int32_t *idx;
    bool *has;
} job_cursor;

/* A job run inline (in host_submit, while w is alive) reads the entries of
 * its ZERO, COPY and UPLOAD ops where w has them: no staging copy. */
static void direct_op(const rsp__host_device *dev, const rsp__work *w, const rsp__op *op,
                      host_op *h)
{
    switch (op->kind) {
    case RSP__OP_ZERO:
        h->kind = HOP_ZERO;
        h->u.slots = w->slots + op->first;
        break;
    case RSP__OP_COPY:
        h->kind = HOP_COPY;
        h->u.pairs = w->pairs + op->first;
        break;
    default: { /* an UPLOAD (copy_op takes the WAITs) */
        RSP__ASSERT(op->kind == RSP__OP_UPLOAD);
        const host_buffer *hb = &dev->buffers[op->buffer];
        h->kind = HOP_UPLOAD;
        h->u.up.src_idx = op->slot_indices;
        h->u.up.src_has = op->has_state;
        h->u.up.dst_idx = hb->slot_indices;
        h->u.up.dst_has = hb->has_state;
        break;
    }
    }
}

/* Append the host op of a WAIT, ZERO, COPY or UPLOAD to the job, copying
 * its entries (unless `direct`: a job run inline, see direct_op). Cannot
 * fail: validate counted the room (count_op). An UPLOAD's buffer exists
 * (validated) and holds its newest arrays (a change earlier in the list was
 * applied first: list order). */
static void copy_op(const rsp__host_device *dev, const rsp__work *w, const rsp__op *op,
                    job_cursor *c, host_job *job, bool direct)
{
    host_op *h = &job->ops[job->num_ops++];
    h->count = op->count;
    if (direct && op->kind != RSP__OP_WAIT) {
        direct_op(dev, w, op, h);
        return;
    }
    switch (op->kind) {
    case RSP__OP_WAIT:
        h->kind = HOP_WAIT;
        h->count = 0;
        h->u.event = op->event;
        break;
    case RSP__OP_ZERO:
        memcpy(c->slots, w->slots + op->first, (size_t)op->count * sizeof *c->slots);
        h->kind = HOP_ZERO;
        h->u.slots = c->slots;
        c->slots += op->count;
        break;
    case RSP__OP_COPY:
        memcpy(c->pairs, w->pairs + op->first, (size_t)op->count * sizeof *c->pairs);
        h->kind = HOP_COPY;
        h->u.pairs = c->pairs;
        c->pairs += op->count;
        break;
    default: { /* an UPLOAD: apply passes BUFFER ops to apply_change */
        RSP__ASSERT(op->kind == RSP__OP_UPLOAD);
        const host_buffer *hb = &dev->buffers[op->buffer];
        memcpy(c->idx, op->slot_indices, (size_t)op->count * sizeof *c->idx);
        memcpy(c->has, op->has_state, (size_t)op->count * sizeof *c->has);
        h->kind = HOP_UPLOAD;
        h->u.up.src_idx = c->idx;
        h->u.up.src_has = c->has;
        h->u.up.dst_idx = hb->slot_indices;
        h->u.up.dst_has = hb->has_state;
        c->idx += op->count;
        c->has += op->count;
        break;
    }
    }
}

/* Swap a buffer's new arrays in: they take effect now (rsp__device_buffer
 * returns them). Uploads queued before may still write the old arrays, so a
 * growth does not free them: its RETIRE op copies them into the new ones and
 * frees them when the worker reaches it (FIFO). Cannot fail: the arrays and
 * the table entry were reserved, the RETIRE's room counted (count_op). */
static void apply_change(rsp__host_device *dev, uint32_t id, const buffer_change *c, host_job *job)
{
    host_buffer *hb = &dev->buffers[id];
    if (hb->exists) {
        host_op *h = &job->ops[job->num_ops++];
        h->kind = HOP_RETIRE;
        h->count = hb->capacity;
        h->u.retire.old_idx = hb->slot_indices;
        h->u.retire.old_has = hb->has_state;
        h->u.retire.new_idx = c->slot_indices;
        h->u.retire.new_has = c->has_state;
    }
    *hb = (host_buffer){c->slot_indices, c->has_state, c->capacity, true};
}

/* Phase 3: fill the job and apply the buffer changes, in list order.
 * Cannot fail (copy_op, apply_change). Consumes r's change records. */
static void apply(rsp__host_device *dev, const rsp__work *w, const job_offsets *off,
                  job_reservation *r)
{
    host_job *job = r->job;
    char *data = (char *)job;
    job_cursor c = {.slots = (uint32_t *)(data + off->slots),
                    .pairs = (rsp__copy *)(data + off->pairs),
                    .idx = (int32_t *)(data + off->idx),
                    .has = (bool *)(data + off->has)};
    job->stop = false;
    job->num_ops = 0;
    uint32_t next = 0; /* the next change to apply */
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if (op->kind != RSP__OP_BUFFER)
            copy_op(dev, w, op, &c, job, r->run_inline);
        else if (next < r->num_changes && r->changes[next].op == i)
            apply_change(dev, op->buffer, &r->changes[next++], job);
    }
    if (r->changes_owned)
        free(r->changes); /* the arrays now belong to the buffers */
}

/* --- phase 4: hand off ---------------------------------------------------- */

/* A job keeps every caller fence it waits on alive until its WAIT has run
 * (released in run_job). Owner only, once the job can no longer fail. */
static void hold_waited_fences(rsp__host_device *dev, const host_job *job)
{
    for (uint32_t i = 0; i < job->num_ops; i++) {
        const host_op *op = &job->ops[i];
        if (op->kind == HOP_WAIT && op->u.event.handle && op->u.event.handle != &dev->fence)
            rsp__fence_ref(op->u.event.handle);
    }
}

/* Phase 4: run the applied job here or queue it for the worker, and give
 * `done`. Cannot fail: a full ring makes ring_put wait, never refuse. */
static void hand_off(rsp__host_device *dev, const job_reservation *r, rsp_event *done)
{
    host_job *job = r->job;
    if (job->num_ops == 0) {
        /* Only buffer creations: nothing for the worker to do. */
        if (!r->run_inline)
            free(job);
    } else {
        job->value = dev->submitted + 1;
        hold_waited_fences(dev, job);
        if (r->run_inline) {
            /* The device is idle and the work cannot block: run it here, in
             * FIFO order all the same, and raise the timeline (HV1) as the
             * worker would. Readers of `submitted` wait for the raise. */
            run_job(dev, job);
            rsp__store_relaxed_u64(&dev->submitted, job->value);
            fence_signal(&dev->fence, job->value);
        } else {
            ring_put(dev, job);
            dev->queued++;
        }
    }
    if (done)
        *done = rsp_event_host(&dev->fence, dev->submitted);
}

uint64_t rsp__host_jobs_queued(const rsp__device *base)
{
    RSP__ASSERT(base->kind == RSP_DEVICE_HOST);
    return ((const rsp__host_device *)base)->queued;
}

static rsp_status host_submit(rsp__device *base, const rsp__work *w, rsp_event *done,
                              rsp_error *err)
{
    rsp__host_device *dev = (rsp__host_device *)base;
    if (!w)
        return rsp__fail(err, RSP_EINVAL, "device submit: work is NULL");
    job_size sz;
    rsp_status st = validate(dev, w, &sz, err);
    if (st != RSP_OK)
        return st;
    if (sz.ops == 0) {
        /* Nothing to run: complete once everything before has run, so a
         * plan's ready still covers earlier zeroes of the slots it hands
         * out. On an idle device that value is already reached: the event
         * is complete at once and nothing wakes the worker. */
        if (done)
            *done = rsp_event_host(&dev->fence, dev->submitted);
        return RSP_OK;
    }
    job_offsets off;
    const size_t job_bytes = job_layout(&sz, &off);
    job_reservation r = {.run_inline = can_run_inline(dev, w, &sz)};
    if (reserve(dev, w, &sz, job_bytes, &r) != RSP_OK)
        return rsp__fail(err, RSP_ENOMEM, "device submit: out of host memory");
    apply(dev, w, &off, &r);
    hand_off(dev, &r, done);
    return RSP_OK;
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
    return fence_wait(&dev->fence, rsp__load_relaxed_u64(&dev->submitted), RSP_WAIT_FOREVER);
}

static rsp_status host_event_wait(const rsp__device *base, const rsp_event *event,
                                  uint64_t timeout_ns, rsp_error *err)
{
    (void)base;
    /* The kind and the tag were checked by rsp__device_event_wait. */
    if (!event->handle)
        return RSP_OK;
    rsp_status st = fence_wait(event->handle, event->value, timeout_ns);
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
    fence_wait(&dev->fence, rsp__load_relaxed_u64(&dev->submitted), RSP_WAIT_FOREVER);
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
    spare_bufs_free(dev);
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
    ring_put(dev, stop);
    pthread_join(dev->worker, NULL);
    host_free(dev);
}

static const rsp__device_ops host_ops = {
    .event_kind = RSP_EVENT_HOST_FENCE,
    .destroy = host_destroy,
    .reserve = host_reserve,
    .submit = host_submit,
    .buffer = host_buffer_get,
    .sync = host_sync,
    .event_wait = host_event_wait,
    .read = host_read,
    .check_event = host_check_event,
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

/* Create step: the ring, the stop job (allocated now so destroy cannot
 * fail), then the worker that consumes the ring. */
static rsp_status host_worker_start(rsp__host_device *dev, rsp_error *err)
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

rsp_status rsp__host_device_create(const rsp__layout *layout, rsp__device **out, rsp_error *err)
{
    rsp__host_device *dev = NULL;
    if (posix_memalign((void **)&dev, 64, rsp__align_up(sizeof *dev, 64)) != 0)
        return rsp__fail(err, RSP_ENOMEM, "host device: out of memory");
    memset(dev, 0, sizeof *dev);
    dev->base.ops = &host_ops;
    dev->base.kind = RSP_DEVICE_HOST;
    dev->base.layout = layout;
    if (fence_init(&dev->fence) != RSP_OK) {
        free(dev); /* host_free would destroy the lock that failed */
        return rsp__fail(err, RSP_ENOMEM, "host device: cannot initialise its fence");
    }
    /* From here on, the one unwind path: host_free frees whatever exists. */
    rsp_status st = host_blocks_alloc(dev, err);
    if (st == RSP_OK)
        st = host_worker_start(dev, err);
    if (st != RSP_OK) {
        host_free(dev);
        return st;
    }
    *out = &dev->base;
    return RSP_OK;
}
