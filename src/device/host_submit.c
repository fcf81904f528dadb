/*
 * The host device's submit (four phases: validate, reserve, apply, hand
 * off), its reserve ahead of a core call, the check of a caller's event,
 * and the inline run of a job on an idle device. Owner only. host_impl.h
 * has the threads and every pair. SPDX-License-Identifier: Apache-2.0
 */
#include "host_impl.h"

#include "util/assert.h"
#include "util/error.h"
#include "util/mem.h"
#include "util/sync.h"

#include <stdlib.h>
#include <string.h>

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
/* Submit                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * rsp__host_submit runs in four phases, so that everything that can fail comes
 * before anything changes (the way DPDK's ring moves its head before it
 * updates its tail):
 *
 *   validate  check every op, count what the job needs; changes nothing.
 *   reserve   every allocation: the job's storage, the buffer change
 *             records, room in the buffer table, the arrays of each buffer
 *             created or grown; taken from what rsp__host_reserve set aside when
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

/* What a job needs, counted by validate (and by rsp__host_reserve from a
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

rsp_status rsp__host_check_event(const rsp__device *base, const rsp_event *ev, rsp_error *err)
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
    if (op->count && !op->slot_indices) /* has_state NULL: indices only (work.h) */
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

/* --- storage a submit takes, and rsp__host_reserve sets aside ------------ */

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

void rsp__host_spare_bufs_free(rsp__host_device *dev)
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
rsp_status rsp__host_reserve(rsp__device *base, const rsp__ext_need *need, rsp_error *err)
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
    rsp__host_spare_bufs_free(dev); /* what the last reserve left unused */
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
 * HV2 here pairs with HV1 in the worker's rsp__fence_signal of the last
 * submitted value, so its ZERO, COPY, UPLOAD and RETIRE writes for every
 * earlier job happen before the inline run's (a plan's ready must cover the
 * zeroes of the slots it hands out; an inline UPLOAD must land after a
 * queued one into the same arrays, and after a RETIRE that moved them).
 * The same HV2 on each waited-for fence orders its signaller's writes.
 *
 * An UPLOAD is a memcpy of the plan's vectors into the buffer's arrays
 * (rsp__host_run_job). The owner may do it when the worker is idle because the
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
    if (!rsp__fence_reached(&dev->fence, dev->submitted))
        return false; /* a job is queued or running: FIFO puts w behind it */
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if (op->kind == RSP__OP_WAIT && op->event.handle &&
            !rsp__fence_reached(op->event.handle, op->event.value))
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
 * storage rsp__host_reserve set aside when it fits, else a new one. NULL: out of
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

/* A job run inline (in rsp__host_submit, while w is alive) reads the entries of
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
        if (op->has_state) /* NULL: an index tensor's upload, indices only */
            memcpy(c->has, op->has_state, (size_t)op->count * sizeof *c->has);
        h->kind = HOP_UPLOAD;
        h->u.up.src_idx = c->idx;
        h->u.up.src_has = op->has_state ? c->has : NULL;
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
 * (released in rsp__host_run_job). Owner only, once the job can no longer fail. */
static void hold_waited_fences(rsp__host_device *dev, const host_job *job)
{
    for (uint32_t i = 0; i < job->num_ops; i++) {
        const host_op *op = &job->ops[i];
        if (op->kind == HOP_WAIT && op->u.event.handle && op->u.event.handle != &dev->fence)
            rsp__fence_ref(op->u.event.handle);
    }
}

/* Phase 4: run the applied job here or queue it for the worker, and give
 * `done`. Cannot fail: a full ring makes rsp__host_ring_put wait, never refuse. */
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
            rsp__host_run_job(dev, job);
            rsp__store_relaxed_u64(&dev->submitted, job->value);
            rsp__fence_signal(&dev->fence, job->value);
        } else {
            rsp__host_ring_put(dev, job);
            dev->queued++;
        }
    }
    if (done)
        *done = rsp_event_host(&dev->fence, dev->submitted);
}

rsp_status rsp__host_submit(rsp__device *base, const rsp__work *w, rsp_event *done, rsp_error *err)
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
