/*
 * The CUDA device: pool storage in GPU memory, one pool stream, batched
 * kernels (kernels/), pinned staging for addressing uploads, an event ring.
 * Checkpoint tiers: the device tier in GPU memory (cudaMalloc), the host
 * tier in mapped pinned host memory (cudaHostAlloc(cudaHostAllocMapped)),
 * which the copy kernel reads and writes through its device pointer: a COPY
 * op between any two storages is still one batched launch on the pool
 * stream, ordered FIFO with everything else.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Built only with RSP_HAVE_CUDA. Uses the CUDA runtime's C API.
 *
 * Who touches what (device.h: create/destroy/submit/buffer/sync come from one
 * thread at a time, the owner; event_wait and read from any thread):
 *
 *   field                         | written by            | read by
 *   ------------------------------+-----------------------+-------------------
 *   ordinal, stream, geom, head   | create (immutable)    | any thread
 *   events[], seq                 | submit (owner)        | owner; waiters only
 *                                 |                       | hold a copied handle
 *   staging[], buffers[], retired | submit/sync (owner)   | owner
 *
 * Any thread may enqueue on a CUDA stream, so read() (which enqueues a
 * device-to-host copy on the pool stream and waits for it) needs no lock
 * against submit(): it sees at least everything submitted before it started.
 *
 * Event ring. Every submit that has work or is asked for `done` records one
 * event, events[seq % RSP__CUDA_EVENTS]. An event is created once and
 * destroyed only at destroy, so a handle a published plan holds never
 * dangles. It is re-recorded RSP__CUDA_EVENTS submits later; a backend that
 * waits on it after that waits for a later point of the same FIFO stream, a
 * superset of the work it needed, never less. That later point depends only
 * on forward-done events that were recorded before their commit was
 * submitted, so the wait cannot close a cycle. 1024 submits is far more than
 * the steps a scheduler keeps in flight, so in practice waits are exact.
 *
 * Staging ring. RSP__CUDA_STAGING pairs of (pinned host, device) scratch.
 * One submit writes its kernel arguments (slot lists, copy pairs) and upload
 * vectors into one pair and remembers the seq of the event recorded after
 * the copies that read it; the pair is written again only after that event
 * has completed (waited for if need be, which is the backpressure when the
 * owner runs RSP__CUDA_STAGING submits ahead of the GPU).
 */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rsp_kernels.h"
#include "util/error.h"
#include "util/mem.h"
#include "util/time.h"
#include "device_impl.h"

_Static_assert(RSP__KMAX_BLOCKS == RSP_MAX_BLOCKS, "kernels and pool agree on the block bound");
_Static_assert(sizeof(rsp__kpair) == sizeof(rsp__copy) &&
                   offsetof(rsp__kpair, src) == offsetof(rsp__copy, src) &&
                   offsetof(rsp__kpair, dst) == offsetof(rsp__copy, dst),
               "copy pairs are handed to the kernel as they are");

#define RSP__CUDA_EVENTS 1024u
#define RSP__CUDA_STAGING 8u
/* Kernel arguments and vectors start on this boundary inside staging. */
#define RSP__CUDA_ALIGN 16u

typedef struct rsp__cuda_staging {
    unsigned char *host; /* pinned (cudaHostAlloc) */
    unsigned char *dev;  /* kernel arguments are copied here, same capacity */
    size_t cap;
    uint64_t seq; /* event seq recorded after the last copy that read it; 0 = never */
} rsp__cuda_staging;

/* One addressing buffer: device int32[cap] then bool[cap] in one allocation,
 * and a host shadow of what was last uploaded, to skip unchanged uploads. */
typedef struct rsp__cuda_buffer {
    unsigned char *mem; /* NULL: no such buffer yet */
    uint32_t cap;
    uint32_t shadow_count; /* entries of the last upload; shadow valid below it */
    int32_t *shadow_slots; /* host [cap] */
    bool *shadow_has;      /* host [cap] */
} rsp__cuda_buffer;

/* A device allocation freed once event seq has completed. */
typedef struct rsp__cuda_retired {
    void *mem;
    uint64_t seq;
} rsp__cuda_retired;

typedef struct rsp__cuda_device {
    rsp__device head; /* first: device.c casts */
    int ordinal;
    cudaStream_t stream;
    rsp__kgeom geom;
    uint32_t max_grid;

    cudaEvent_t events[RSP__CUDA_EVENTS]; /* created on first use */
    uint64_t seq;                         /* events recorded so far */

    rsp__cuda_staging staging[RSP__CUDA_STAGING];
    uint32_t next_staging;

    rsp__cuda_buffer *buffers; /* indexed by buffer id */
    uint32_t num_buffers;

    rsp__cuda_retired *retired;
    uint32_t num_retired, cap_retired;

    size_t *op_offset; /* submit scratch: staging offset of each op */
    uint32_t cap_op_offset;

    /* The host tier's blocks as cudaHostAlloc returned them (for
     * cudaFreeHost); head.tier_base[RSP_TIER_HOST] holds their device
     * pointers. Immutable after create. */
    void *host_tier[RSP_MAX_BLOCKS];
} rsp__cuda_device;

static inline rsp__cuda_device *rsp__cuda_of(rsp__device *dev)
{
    return (rsp__cuda_device *)dev;
}

static inline const rsp__cuda_device *rsp__cuda_of_const(const rsp__device *dev)
{
    return (const rsp__cuda_device *)dev;
}

/* Turn a CUDA error into a status; OOM is RSP_ENOMEM. Clears the runtime's
 * last-error so a later unrelated call does not report it again. */
static rsp_status rsp__cuda_fail(rsp_error *err, cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    return rsp__fail(err, e == cudaErrorMemoryAllocation ? RSP_ENOMEM : RSP_EDEVICE,
                     "CUDA %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define RSP__CUDA_TRY(err, call, what)                                                             \
    do {                                                                                           \
        cudaError_t rsp__e = (call);                                                               \
        if (rsp__e != cudaSuccess)                                                                 \
            return rsp__cuda_fail((err), rsp__e, (what));                                          \
    } while (0)

/* Every entry point makes the pool's GPU current and afterwards restores the
 * caller's current device (rsp_event_wait and reads run on the engine's own
 * threads, whose current device must not change under them). */
static rsp_status rsp__cuda_enter(const rsp__cuda_device *cd, int *prev, rsp_error *err)
{
    if (cudaGetDevice(prev) != cudaSuccess) {
        (void)cudaGetLastError();
        *prev = -1;
    }
    if (*prev != cd->ordinal)
        RSP__CUDA_TRY(err, cudaSetDevice(cd->ordinal), "cudaSetDevice");
    return RSP_OK;
}

static void rsp__cuda_leave(const rsp__cuda_device *cd, int prev)
{
    if (prev >= 0 && prev != cd->ordinal)
        (void)cudaSetDevice(prev);
}

/* ---- event ring --------------------------------------------------------- */

/* Record the next ring event after everything enqueued so far. Owner only. */
static rsp_status rsp__cuda_record(rsp__cuda_device *cd, cudaEvent_t *out, rsp_error *err)
{
    const uint32_t i = (uint32_t)(cd->seq % RSP__CUDA_EVENTS);
    if (!cd->events[i])
        RSP__CUDA_TRY(err, cudaEventCreateWithFlags(&cd->events[i], cudaEventDisableTiming),
                      "cudaEventCreateWithFlags");
    RSP__CUDA_TRY(err, cudaEventRecord(cd->events[i], cd->stream), "cudaEventRecord");
    cd->seq++;
    if (out)
        *out = cd->events[i];
    return RSP_OK;
}

/* The event recorded as number `seq` (1-based). If the ring has wrapped since,
 * the slot now holds a later point of the same stream: waiting for it covers
 * seq too. */
static cudaEvent_t rsp__cuda_event_of(const rsp__cuda_device *cd, uint64_t seq)
{
    return cd->events[(seq - 1) % RSP__CUDA_EVENTS];
}

/* Has the work before event `seq` completed? Errors count as "not known". */
static bool rsp__cuda_passed(const rsp__cuda_device *cd, uint64_t seq)
{
    if (seq == 0)
        return true;
    return cudaEventQuery(rsp__cuda_event_of(cd, seq)) == cudaSuccess;
}

/* ---- deferred frees ----------------------------------------------------- */

/* Free retired allocations whose event completed; all of them if `all`
 * (destroy, after a stream sync). Owner only. cudaFree synchronises the
 * device, which is why it is deferred and rare (buffer growth only). */
static void rsp__cuda_reap(rsp__cuda_device *cd, bool all)
{
    uint32_t kept = 0;
    for (uint32_t i = 0; i < cd->num_retired; i++) {
        if (all || rsp__cuda_passed(cd, cd->retired[i].seq))
            (void)cudaFree(cd->retired[i].mem);
        else
            cd->retired[kept++] = cd->retired[i];
    }
    cd->num_retired = kept;
}

/* Free mem once event `seq` has completed. Owner only. */
static rsp_status rsp__cuda_retire(rsp__cuda_device *cd, void *mem, uint64_t seq, rsp_error *err)
{
    if (rsp__grow((void **)&cd->retired, &cd->cap_retired, (uint64_t)cd->num_retired + 1,
                  sizeof *cd->retired) != RSP_OK)
        return rsp__fail(err, RSP_ENOMEM, "CUDA device: no host memory for a deferred free");
    cd->retired[cd->num_retired++] = (rsp__cuda_retired){mem, seq};
    return RSP_OK;
}

/* ---- addressing buffers --------------------------------------------------- */

static size_t rsp__cuda_buffer_bytes(uint32_t cap)
{
    /* int32 entries first, so the bool vector starts 4-byte aligned */
    return (size_t)cap * sizeof(int32_t) + (size_t)cap * sizeof(bool);
}

/* Room for buffer id in the table; new entries are zero (no buffer yet).
 * Owner only. */
static rsp_status rsp__cuda_buffers_reserve(rsp__cuda_device *cd, uint32_t id, rsp_error *err)
{
    if (id < cd->num_buffers)
        return RSP_OK;
    const uint32_t old = cd->num_buffers;
    if (rsp__grow((void **)&cd->buffers, &cd->num_buffers, (uint64_t)id + 1, sizeof *cd->buffers) !=
        RSP_OK)
        return rsp__fail(err, RSP_ENOMEM, "CUDA device: no host memory for buffer %u", id);
    memset(cd->buffers + old, 0, (size_t)(cd->num_buffers - old) * sizeof *cd->buffers);
    return RSP_OK;
}

/* Enqueue on the pool stream: zero the new allocation `mem` of cap entries,
 * then copy in every entry buf's current allocation holds (same layout,
 * smaller cap; the rest stays zero), as the host device keeps them. */
static cudaError_t rsp__cuda_buffer_fill(const rsp__cuda_device *cd, unsigned char *mem,
                                         uint32_t cap, const rsp__cuda_buffer *buf)
{
    cudaError_t e = cudaMemsetAsync(mem, 0, rsp__cuda_buffer_bytes(cap), cd->stream);
    if (e != cudaSuccess || !buf->mem)
        return e;
    e = cudaMemcpyAsync(mem, buf->mem, (size_t)buf->cap * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                        cd->stream);
    if (e != cudaSuccess)
        return e;
    return cudaMemcpyAsync(mem + (size_t)cap * sizeof(int32_t),
                           buf->mem + (size_t)buf->cap * sizeof(int32_t),
                           (size_t)buf->cap * sizeof(bool), cudaMemcpyDeviceToDevice, cd->stream);
}

/*
 * BUFFER op: make buffer `id` hold `cap` entries. Growth allocates anew,
 * copies the old contents on the pool stream (so the shadow stays true),
 * and frees the old allocation once the event of this submit (`seq`, not yet
 * recorded) has completed. Owner only, at submit time.
 */
static rsp_status rsp__cuda_buffer_ensure(rsp__cuda_device *cd, uint32_t id, uint32_t cap,
                                          uint64_t seq, rsp_error *err)
{
    rsp_status st = rsp__cuda_buffers_reserve(cd, id, err);
    if (st != RSP_OK)
        return st;
    rsp__cuda_buffer *buf = &cd->buffers[id];
    if (buf->mem && buf->cap >= cap)
        return RSP_OK;
    if (cap == 0)
        cap = 1;

    int32_t *ss = malloc((size_t)cap * sizeof *ss);
    bool *sh = malloc((size_t)cap * sizeof *sh);
    if (!ss || !sh) {
        free(ss);
        free(sh);
        return rsp__fail(err, RSP_ENOMEM, "CUDA device: no host memory for buffer %u shadow", id);
    }
    void *mem = NULL;
    cudaError_t e = cudaMalloc(&mem, rsp__cuda_buffer_bytes(cap));
    if (e != cudaSuccess) {
        free(ss);
        free(sh);
        return rsp__cuda_fail(err, e, "cudaMalloc (addressing buffer)");
    }
    e = rsp__cuda_buffer_fill(cd, mem, cap, buf);
    if (e != cudaSuccess)
        st = rsp__cuda_fail(err, e, "initialising an addressing buffer");
    else if (buf->mem)
        st = rsp__cuda_retire(cd, buf->mem, seq, err);
    if (st != RSP_OK) {
        /* nothing was published with mem; the stream never ran past it
         * unless the memset was enqueued, so wait before freeing */
        (void)cudaStreamSynchronize(cd->stream);
        (void)cudaFree(mem);
        free(ss);
        free(sh);
        return st;
    }
    if (buf->shadow_count) {
        memcpy(ss, buf->shadow_slots, (size_t)buf->shadow_count * sizeof *ss);
        memcpy(sh, buf->shadow_has, (size_t)buf->shadow_count * sizeof *sh);
    }
    free(buf->shadow_slots);
    free(buf->shadow_has);
    buf->mem = mem;
    buf->cap = cap;
    buf->shadow_slots = ss;
    buf->shadow_has = sh;
    return RSP_OK;
}

/* ---- staging -------------------------------------------------------------- */

static void rsp__cuda_staging_free(rsp__cuda_staging *s)
{
    if (s->host)
        (void)cudaFreeHost(s->host);
    if (s->dev)
        (void)cudaFree(s->dev);
    s->host = NULL;
    s->dev = NULL;
    s->cap = 0;
}

/* Make staging pair k writable with at least `bytes`: wait for the event of
 * the copies that last read it, then grow if needed. Owner only. */
static rsp_status rsp__cuda_staging_take(rsp__cuda_device *cd, uint32_t k, size_t bytes,
                                         rsp_error *err)
{
    rsp__cuda_staging *s = &cd->staging[k];
    if (s->seq && !rsp__cuda_passed(cd, s->seq))
        RSP__CUDA_TRY(err, cudaEventSynchronize(rsp__cuda_event_of(cd, s->seq)),
                      "cudaEventSynchronize (staging reuse)");
    if (s->cap >= bytes)
        return RSP_OK;
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < bytes)
        cap *= 2;
    rsp__cuda_staging_free(s);
    cudaError_t e = cudaHostAlloc((void **)&s->host, cap, cudaHostAllocDefault);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&s->dev, cap);
    if (e != cudaSuccess) {
        rsp__cuda_staging_free(s);
        return rsp__cuda_fail(err, e, "allocating pinned staging");
    }
    s->cap = cap;
    return RSP_OK;
}

/* ---- vtable ---------------------------------------------------------------- */

static void rsp__cuda_destroy(rsp__device *dev)
{
    rsp__cuda_device *cd = rsp__cuda_of(dev);
    int prev = -1;
    if (rsp__cuda_enter(cd, &prev, NULL) != RSP_OK)
        prev = -1;
    if (cd->stream)
        (void)cudaStreamSynchronize(cd->stream);
    rsp__cuda_reap(cd, true);
    for (uint32_t i = 0; i < cd->num_buffers; i++) {
        if (cd->buffers[i].mem)
            (void)cudaFree(cd->buffers[i].mem);
        free(cd->buffers[i].shadow_slots);
        free(cd->buffers[i].shadow_has);
    }
    for (uint32_t k = 0; k < RSP__CUDA_STAGING; k++)
        rsp__cuda_staging_free(&cd->staging[k]);
    for (uint32_t i = 0; i < RSP__CUDA_EVENTS; i++)
        if (cd->events[i])
            (void)cudaEventDestroy(cd->events[i]);
    for (uint32_t b = 0; b < RSP_MAX_BLOCKS; b++) {
        if (cd->head.block_base[b])
            (void)cudaFree(cd->head.block_base[b]);
        if (cd->head.tier_base[RSP_TIER_DEVICE][b])
            (void)cudaFree(cd->head.tier_base[RSP_TIER_DEVICE][b]);
        if (cd->host_tier[b])
            (void)cudaFreeHost(cd->host_tier[b]);
    }
    if (cd->stream)
        (void)cudaStreamDestroy(cd->stream);
    (void)cudaGetLastError();
    rsp__cuda_leave(cd, prev);
    free(cd->buffers);
    free(cd->retired);
    free(cd->op_offset);
    free(cd);
}

/* Pass 1 of submit: check every op against the layout and the buffers
 * (as this list's own BUFFER ops will leave them), and size the staging:
 * kernel arguments first (one copy to the device), upload vectors after.
 * Changes nothing. */
static rsp_status rsp__cuda_plan_ops(rsp__cuda_device *cd, const rsp__work *w, size_t *args_bytes,
                                     size_t *total_bytes, rsp_error *err)
{
    const rsp__layout *lay = cd->head.layout;
    size_t off = 0;
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        cd->op_offset[i] = 0;
        if (op->kind == RSP__OP_ZERO) {
            rsp_status st = rsp__device_check_ids(lay, w, i, err);
            if (st != RSP_OK)
                return st;
            cd->op_offset[i] = off;
            off = rsp__align_up(off + (size_t)op->count * sizeof(uint32_t), RSP__CUDA_ALIGN);
        } else if (op->kind == RSP__OP_COPY) {
            rsp_status st = rsp__device_check_ids(lay, w, i, err);
            if (st != RSP_OK)
                return st;
            cd->op_offset[i] = off;
            off = rsp__align_up(off + (size_t)op->count * sizeof(rsp__kpair), RSP__CUDA_ALIGN);
        } else if (op->kind == RSP__OP_BUFFER) {
            if (op->buffer == UINT32_MAX)
                return rsp__fail(err, RSP_EINVAL, "CUDA device: BUFFER op %u id out of range", i);
        } else if (op->kind != RSP__OP_WAIT && op->kind != RSP__OP_UPLOAD) {
            return rsp__fail(err, RSP_EINVAL, "CUDA device: unknown op kind %d", (int)op->kind);
        }
    }
    *args_bytes = off;
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if (op->kind != RSP__OP_UPLOAD)
            continue;
        /* capacity as this list leaves it at op i */
        uint64_t cap = op->buffer < cd->num_buffers && cd->buffers[op->buffer].mem
                           ? cd->buffers[op->buffer].cap
                           : 0;
        bool exists = cap > 0;
        for (uint32_t j = 0; j < i; j++)
            if (w->ops[j].kind == RSP__OP_BUFFER && w->ops[j].buffer == op->buffer) {
                exists = true;
                if (w->ops[j].capacity > cap)
                    cap = w->ops[j].capacity;
            }
        if (!exists)
            return rsp__fail(err, RSP_EINVAL,
                             "CUDA device: UPLOAD to buffer %u before its BUFFER op", op->buffer);
        if (op->count > cap)
            return rsp__fail(err, RSP_EINVAL,
                             "CUDA device: UPLOAD of %u entries into buffer %u of %llu", op->count,
                             op->buffer, (unsigned long long)cap);
        if (op->count && !op->slot_indices) /* has_state NULL: indices only (work.h) */
            return rsp__fail(err, RSP_EINVAL, "CUDA device: UPLOAD %u without vectors", i);
        cd->op_offset[i] = off;
        off = rsp__align_up(off + (size_t)op->count * sizeof(int32_t), RSP__CUDA_ALIGN);
        off = rsp__align_up(off + (size_t)op->count * sizeof(bool), RSP__CUDA_ALIGN);
    }
    *total_bytes = off;
    return RSP_OK;
}

/* UPLOAD: skip when the buffer already holds exactly these entries (its last
 * upload had the same length and contents); otherwise stage the vectors and
 * copy each with one host-to-device copy. */
static rsp_status rsp__cuda_upload(rsp__cuda_device *cd, const rsp__op *op,
                                   const rsp__cuda_staging *s, size_t off, rsp_error *err)
{
    rsp__cuda_buffer *buf = &cd->buffers[op->buffer];
    const size_t ns = (size_t)op->count * sizeof(int32_t);
    /* has_state NULL: an index tensor (work.h), no bools; the shadow stands in */
    const bool *has = op->has_state ? op->has_state : buf->shadow_has;
    const size_t nh = op->has_state ? (size_t)op->count * sizeof(bool) : 0;
    if (op->count == 0)
        return RSP_OK; /* nothing to write; the entries it holds stay true */
    if (buf->shadow_count == op->count && memcmp(buf->shadow_slots, op->slot_indices, ns) == 0 &&
        memcmp(buf->shadow_has, has, nh) == 0)
        return RSP_OK;
    unsigned char *hs = s->host + off;
    unsigned char *hh = s->host + rsp__align_up(off + ns, RSP__CUDA_ALIGN);
    memcpy(hs, op->slot_indices, ns);
    memcpy(hh, has, nh);
    RSP__CUDA_TRY(err, cudaMemcpyAsync(buf->mem, hs, ns, cudaMemcpyHostToDevice, cd->stream),
                  "cudaMemcpyAsync (slot_indices upload)");
    RSP__CUDA_TRY(err,
                  cudaMemcpyAsync(buf->mem + (size_t)buf->cap * sizeof(int32_t), hh, nh,
                                  cudaMemcpyHostToDevice, cd->stream),
                  "cudaMemcpyAsync (has_state upload)");
    memcpy(buf->shadow_slots, op->slot_indices, ns);
    memmove(buf->shadow_has, has, nh);
    buf->shadow_count = op->count;
    return RSP_OK;
}

/*
 * Submit, in phases: check the list and size its staging
 * (rsp__cuda_plan_ops: changes nothing), stage the kernel arguments,
 * enqueue each op, record the submit's event (rsp__cuda_finish). The CUDA
 * device reserves nothing ahead (rsp__device_reserve), so staging and
 * enqueueing may still fail after the core changed state: ops already
 * enqueued stay enqueued, the owner breaks the pool, and rsp__cuda_finish
 * still fences the staging they read.
 */

/* Take staging pair k for total_bytes and copy every kernel argument (ZERO
 * slot lists, COPY pairs: the first args_bytes) to the device in one copy,
 * ahead of the ops. The pair is private to this submit until its event
 * completes. Owner only. */
static rsp_status rsp__cuda_stage_args(rsp__cuda_device *cd, const rsp__work *w, uint32_t k,
                                       size_t args_bytes, size_t total_bytes, rsp_error *err)
{
    rsp_status st = rsp__cuda_staging_take(cd, k, total_bytes, err);
    if (st != RSP_OK)
        return st;
    rsp__cuda_staging *s = &cd->staging[k];
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if (op->count == 0)
            continue; /* the lists may be NULL then */
        if (op->kind == RSP__OP_ZERO)
            memcpy(s->host + cd->op_offset[i], w->slots + op->first,
                   (size_t)op->count * sizeof(uint32_t));
        else if (op->kind == RSP__OP_COPY)
            memcpy(s->host + cd->op_offset[i], w->pairs + op->first,
                   (size_t)op->count * sizeof(rsp__kpair));
    }
    if (args_bytes)
        RSP__CUDA_TRY(
            err, cudaMemcpyAsync(s->dev, s->host, args_bytes, cudaMemcpyHostToDevice, cd->stream),
            "cudaMemcpyAsync (kernel arguments)");
    return RSP_OK;
}

/* Enqueue op i of w on the pool stream: its kernel arguments are in s
 * (NULL when the submit staged nothing), at cd->op_offset[i]. *enqueued
 * becomes true when the op puts anything on the stream. my_seq: the event
 * this submit will record (a growth frees the old buffer after it). */
static rsp_status rsp__cuda_enqueue_op(rsp__cuda_device *cd, const rsp__work *w, uint32_t i,
                                       const rsp__cuda_staging *s, uint64_t my_seq, bool *enqueued,
                                       rsp_error *err)
{
    const rsp__op *op = &w->ops[i];
    const unsigned char *args = s ? s->dev + cd->op_offset[i] : NULL;
    cudaError_t e = cudaSuccess;
    switch (op->kind) {
    case RSP__OP_WAIT:
        if (!op->event.handle)
            return RSP_OK;
        *enqueued = true;
        e = cudaStreamWaitEvent(cd->stream, (cudaEvent_t)op->event.handle, 0);
        return e == cudaSuccess ? RSP_OK
                                : rsp__cuda_fail(err, e, "cudaStreamWaitEvent (forward done)");
    case RSP__OP_ZERO:
        *enqueued = *enqueued || op->count > 0;
        e = rsp__kernels_zero(&cd->geom, (const uint32_t *)args, op->count, cd->max_grid,
                              cd->stream);
        return e == cudaSuccess ? RSP_OK
                                : rsp__cuda_fail(err, e, "launching the batched zero kernel");
    case RSP__OP_COPY:
        *enqueued = *enqueued || op->count > 0;
        e = rsp__kernels_copy(&cd->geom, (const rsp__kpair *)args, op->count, cd->max_grid,
                              cd->stream);
        return e == cudaSuccess ? RSP_OK
                                : rsp__cuda_fail(err, e, "launching the batched copy kernel");
    case RSP__OP_BUFFER:
        *enqueued = true; /* its memset / copy */
        return rsp__cuda_buffer_ensure(cd, op->buffer, op->capacity, my_seq, err);
    case RSP__OP_UPLOAD:
        *enqueued = true;
        return rsp__cuda_upload(cd, op, s, cd->op_offset[i], err);
    }
    return RSP_OK; /* no other kind: rsp__cuda_plan_ops refused it */
}

/* Record this submit's event (number my_seq) and stamp staging pair k (s,
 * when the submit staged) with it; give `done`. st is the status so far:
 * even after a failure part-way the event is recorded and the staging
 * stamped, because copies already enqueued may still read the pinned
 * memory, so it must not be handed out again before they finish. */
static rsp_status rsp__cuda_finish(rsp__cuda_device *cd, rsp__cuda_staging *s, uint32_t k,
                                   uint64_t my_seq, rsp_status st, rsp_event *done, rsp_error *err)
{
    cudaEvent_t ev = NULL;
    rsp_status rec = rsp__cuda_record(cd, &ev, st == RSP_OK ? err : NULL);
    if (rec != RSP_OK) {
        if (s) /* no event to wait for: drain the stream before any reuse */
            (void)cudaStreamSynchronize(cd->stream);
        return st != RSP_OK ? st : rec;
    }
    if (s) {
        s->seq = my_seq;
        cd->next_staging = (k + 1) % RSP__CUDA_STAGING;
    }
    if (st != RSP_OK)
        return st;
    if (done)
        *done = rsp_event_cuda((void *)ev);
    return RSP_OK;
}

static rsp_status rsp__cuda_submit_on(rsp__cuda_device *cd, const rsp__work *w, rsp_event *done,
                                      rsp_error *err)
{
    if (rsp__grow((void **)&cd->op_offset, &cd->cap_op_offset, w->num_ops, sizeof *cd->op_offset) !=
        RSP_OK)
        return rsp__fail(err, RSP_ENOMEM, "CUDA device: no host memory for %u ops", w->num_ops);
    size_t args_bytes = 0, total_bytes = 0;
    rsp_status st = rsp__cuda_plan_ops(cd, w, &args_bytes, &total_bytes, err);
    if (st != RSP_OK)
        return st;
    rsp__cuda_reap(cd, false);

    /* The event recorded at the end of this submit will be number seq + 1. */
    const uint64_t my_seq = cd->seq + 1;
    const uint32_t k = cd->next_staging;
    rsp__cuda_staging *s = NULL;
    if (total_bytes) {
        st = rsp__cuda_stage_args(cd, w, k, args_bytes, total_bytes, err);
        if (st != RSP_OK)
            return st;
        s = &cd->staging[k];
    }
    bool enqueued = args_bytes > 0;
    for (uint32_t i = 0; i < w->num_ops && st == RSP_OK; i++)
        st = rsp__cuda_enqueue_op(cd, w, i, s, my_seq, &enqueued, err);
    if (!enqueued && !done)
        return st;
    return rsp__cuda_finish(cd, s, k, my_seq, st, done, err);
}

static rsp_status rsp__cuda_submit(rsp__device *dev, const rsp__work *w, rsp_event *done,
                                   rsp_error *err)
{
    rsp__cuda_device *cd = rsp__cuda_of(dev);
    /* A WAIT is a cudaStreamWaitEvent: only CUDA events (the pool checked
     * the caller's before the core ran; this guards direct submits). */
    for (uint32_t i = 0; w && i < w->num_ops; i++)
        if (w->ops[i].kind == RSP__OP_WAIT && w->ops[i].event.handle &&
            w->ops[i].event.kind != RSP_EVENT_CUDA)
            return rsp__fail(err, RSP_EINVAL,
                             "CUDA device submit: op %u WAITs for an event of kind %d, not a CUDA "
                             "event",
                             i, (int)w->ops[i].event.kind);
    int prev;
    rsp_status st = rsp__cuda_enter(cd, &prev, err);
    if (st == RSP_OK)
        st = rsp__cuda_submit_on(cd, w, done, err);
    rsp__cuda_leave(cd, prev);
    return st;
}

static rsp_status rsp__cuda_buffer_get(const rsp__device *dev, uint32_t id, void **slot_indices,
                                       void **has_state, uint32_t *capacity, rsp_error *err)
{
    const rsp__cuda_device *cd = rsp__cuda_of_const(dev);
    if (id >= cd->num_buffers || !cd->buffers[id].mem)
        return rsp__fail(err, RSP_EINVAL, "CUDA device: no addressing buffer %u", id);
    const rsp__cuda_buffer *buf = &cd->buffers[id];
    if (slot_indices)
        *slot_indices = buf->mem;
    if (has_state)
        *has_state = buf->mem + (size_t)buf->cap * sizeof(int32_t);
    if (capacity)
        *capacity = buf->cap;
    return RSP_OK;
}

static rsp_status rsp__cuda_sync(rsp__device *dev, rsp_error *err)
{
    rsp__cuda_device *cd = rsp__cuda_of(dev);
    int prev;
    rsp_status st = rsp__cuda_enter(cd, &prev, err);
    if (st != RSP_OK)
        return st;
    cudaError_t e = cudaStreamSynchronize(cd->stream);
    if (e != cudaSuccess)
        st = rsp__cuda_fail(err, e, "cudaStreamSynchronize");
    else
        rsp__cuda_reap(cd, false);
    rsp__cuda_leave(cd, prev);
    return st;
}

/* Any thread. Forever: cudaEventSynchronize. Otherwise poll with a growing
 * sleep (2 us .. 1 ms) so a timed wait honours its deadline. */
static rsp_status rsp__cuda_event_wait(const rsp__device *dev, const rsp_event *event,
                                       uint64_t timeout_ns, rsp_error *err)
{
    (void)dev; /* events need no current device: the caller's stays as it is */
    if (!event || !event->handle)
        return RSP_OK;
    cudaEvent_t ev = (cudaEvent_t)event->handle;
    if (timeout_ns == RSP_WAIT_FOREVER) {
        RSP__CUDA_TRY(err, cudaEventSynchronize(ev), "cudaEventSynchronize");
        return RSP_OK;
    }
    /* The timeout rule of util/time.h: one deadline, then before each nap
     * what is left of it. */
    const uint64_t deadline = rsp__deadline(timeout_ns);
    for (uint64_t nap = 2000;; nap = nap < 1000000 ? nap * 2 : nap) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return RSP_OK;
        if (e != cudaErrorNotReady)
            return rsp__cuda_fail(err, e, "cudaEventQuery");
        const uint64_t now = rsp__now_ns();
        if (now >= deadline)
            return rsp__fail(err, RSP_ETIMEDOUT, "CUDA event not complete after %llu ns",
                             (unsigned long long)timeout_ns);
        struct timespec ts = rsp__timespec_of(deadline - now < nap ? deadline - now : nap);
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

/* Any thread: a copy to host memory enqueued on the pool stream, so it runs
 * after everything submitted before, then waited for. */
static rsp_status rsp__cuda_read(rsp__device *dev, uint32_t block, uint32_t layer, uint32_t slot,
                                 void *dst, rsp_error *err)
{
    rsp__cuda_device *cd = rsp__cuda_of(dev);
    const rsp__layout *lay = cd->head.layout;
    int prev;
    rsp_status st = rsp__cuda_enter(cd, &prev, err);
    if (st != RSP_OK)
        return st;
    /* device.c checked the range: any slot id. The host tier's address is
     * the device pointer of mapped pinned memory: cudaMemcpyDefault lets
     * unified addressing tell where each side lives. */
    const unsigned char *src = rsp__device_region(&cd->head, block, layer, slot);
    cudaError_t e =
        cudaMemcpyAsync(dst, src, lay->blocks[block].slot_bytes, cudaMemcpyDefault, cd->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cd->stream);
    if (e != cudaSuccess)
        st = rsp__cuda_fail(err, e, "reading a slot (device to host)");
    rsp__cuda_leave(cd, prev);
    return st;
}

static const rsp__device_ops rsp__cuda_ops = {
    .event_kind = RSP_EVENT_CUDA,
    .destroy = rsp__cuda_destroy,
    .submit = rsp__cuda_submit,
    .buffer = rsp__cuda_buffer_get,
    .sync = rsp__cuda_sync,
    .event_wait = rsp__cuda_event_wait,
    .read = rsp__cuda_read,
    .checksum = rsp__cuda_checksum,
};

/* Is `ordinal` a CUDA device of this machine? RSP_ENODEV when not. */
static rsp_status rsp__cuda_check_ordinal(int ordinal, rsp_error *err)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return rsp__fail(err, RSP_ENODEV, "no CUDA device: cudaGetDeviceCount: %s (%s)",
                         cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (count == 0)
        return rsp__fail(err, RSP_ENODEV, "no CUDA device: cudaGetDeviceCount found 0");
    if (ordinal < 0 || ordinal >= count)
        return rsp__fail(err, RSP_ENODEV, "CUDA ordinal %d out of range: %d device(s)", ordinal,
                         count);
    return RSP_OK;
}

/* Create step: the pool stream, and the grid its kernels launch. The pool's
 * GPU is current. */
static rsp_status rsp__cuda_stream_create(rsp__cuda_device *cd, rsp_error *err)
{
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cd->ordinal);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&cd->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return rsp__cuda_fail(err, e, "creating the pool stream");
    /* 8 resident blocks of 256 threads fill an SM (2048 threads); more only
     * queues blocks, the grid-stride loop covers the rest. */
    cd->max_grid = (uint32_t)(sms > 0 ? sms : 1) * 8u;
    return RSP_OK;
}

static const char *const rsp__cuda_space_name[] = {"request slots", "device-tier checkpoints",
                                                   "host-tier checkpoints"};

/* Allocate block b of storage sp (n > 0 bytes): GPU memory for the request
 * slots and the device tier, mapped pinned host memory for the host tier
 * (the kernels reach it through its device pointer). Recorded at once (the
 * unwind frees it), zeroed (the GPU's on the pool stream), its device
 * pointer in *dptr. */
static rsp_status rsp__cuda_space_alloc(rsp__cuda_device *cd, rsp__space sp, uint32_t b, uint64_t n,
                                        void **dptr, rsp_error *err)
{
    void *mem = NULL;
    cudaError_t e;
    if (sp == RSP__SPACE_HOST) {
        e = cudaHostAlloc(&mem, n, cudaHostAllocMapped);
        if (e == cudaSuccess) {
            cd->host_tier[b] = mem;
            memset(mem, 0, n);
            e = cudaHostGetDevicePointer(dptr, mem, 0);
        }
    } else {
        e = cudaMalloc(&mem, n);
        if (e == cudaSuccess) {
            *(sp == RSP__SPACE_SLOTS ? &cd->head.block_base[b]
                                     : &cd->head.tier_base[RSP_TIER_DEVICE][b]) = mem;
            *dptr = mem;
            e = cudaMemsetAsync(mem, 0, n, cd->stream);
        }
    }
    if (e == cudaSuccess)
        return RSP_OK;
    rsp_status st = rsp__cuda_fail(err, e, "allocating pool storage");
    return rsp__fail(err, st,
                     "CUDA device %d: cannot allocate block '%s' of the %s (%llu bytes): %s",
                     cd->ordinal, cd->head.layout->blocks[b].name, rsp__cuda_space_name[sp],
                     (unsigned long long)n, cudaGetErrorString(e));
}

/* Create step: every block of the three storages (request slots, device
 * tier, host tier; a tier of no slots allocates nothing), zeroed (waited
 * for, so the storage reads zero when create returns), and the kernels'
 * view of them (rsp__kgeom). The stream exists. */
static rsp_status rsp__cuda_blocks_alloc(rsp__cuda_device *cd, rsp_error *err)
{
    const rsp__layout *layout = cd->head.layout;
    cd->geom.num_blocks = layout->num_blocks;
    cd->geom.num_layers = layout->num_layers;
    if (layout->max_checkpoints)
        cd->geom.tier_first[RSP_TIER_DEVICE] = layout->max_slots;
    if (layout->max_host_checkpoints)
        cd->geom.tier_first[RSP_TIER_HOST] = layout->max_slots + layout->max_checkpoints;
    for (rsp__space sp = RSP__SPACE_SLOTS; sp <= RSP__SPACE_HOST; sp++) {
        if (rsp__space_count(layout, sp) == 0)
            continue;
        for (uint32_t b = 0; b < layout->num_blocks; b++) {
            rsp__kblock *kb = &cd->geom.blocks[b];
            const uint64_t n = rsp__space_block_bytes(layout, sp, b);
            void *dptr = NULL;
            rsp_status st = rsp__cuda_space_alloc(cd, sp, b, n, &dptr, err);
            if (st != RSP_OK)
                return st;
            kb->slot_bytes = layout->blocks[b].slot_bytes;
            if (sp == RSP__SPACE_SLOTS) {
                kb->base = dptr;
                kb->layer_bytes = layout->blocks[b].layer_bytes;
            } else {
                const uint32_t t = sp - RSP__SPACE_DEVICE;
                cd->head.tier_base[t][b] = dptr;
                kb->tier_base[t] = dptr;
                kb->tier_layer_bytes[t] = kb->slot_bytes * rsp__space_count(layout, sp);
            }
        }
    }
    RSP__CUDA_TRY(err, cudaStreamSynchronize(cd->stream),
                  "cudaStreamSynchronize (zeroing pool storage)");
    return RSP_OK;
}

rsp_status rsp__cuda_device_create(int ordinal, const rsp__layout *layout, rsp__device **out,
                                   rsp_error *err)
{
    rsp_status st = rsp__cuda_check_ordinal(ordinal, err);
    if (st != RSP_OK)
        return st;
    if (layout->num_blocks == 0 || layout->num_blocks > RSP_MAX_BLOCKS)
        return rsp__fail(err, RSP_EINVAL, "CUDA device: %u blocks", layout->num_blocks);
    rsp__cuda_device *cd = calloc(1, sizeof *cd);
    if (!cd)
        return rsp__fail(err, RSP_ENOMEM, "CUDA device: no host memory");
    cd->head.ops = &rsp__cuda_ops;
    cd->head.kind = RSP_DEVICE_CUDA;
    cd->head.layout = layout;
    cd->ordinal = ordinal;

    /* Each step records what it made in cd as it goes, so the one unwind
     * path (rsp__cuda_destroy) frees exactly what exists. */
    int prev = -1;
    st = rsp__cuda_enter(cd, &prev, err);
    if (st == RSP_OK)
        st = rsp__cuda_stream_create(cd, err);
    if (st == RSP_OK)
        st = rsp__cuda_blocks_alloc(cd, err);
    if (st != RSP_OK) {
        rsp__cuda_destroy(&cd->head);
        if (prev >= 0 && prev != ordinal)
            (void)cudaSetDevice(prev); /* the caller's device, as enter found it */
        return st;
    }
    rsp__cuda_leave(cd, prev);
    *out = &cd->head;
    return RSP_OK;
}
