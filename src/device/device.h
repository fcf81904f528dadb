/*
 * The device interface: slot storage, FIFO execution of work lists, events.
 * SPDX-License-Identifier: Apache-2.0
 *
 * A device owns the pool's storage and runs the work lists the core emits
 * (core/work.h: WAIT, ZERO, COPY, BUFFER, UPLOAD). It knows nothing of
 * requests, labels or checkpoint keys. Storage: three storages of the same
 * per-block layout [num_layers, count, *shape], zeroed at creation, one id
 * space over them (core/layout.h, rsp__layout_space): request slots
 * [0, max_slots), the device checkpoint tier (max_checkpoints ids next),
 * the host checkpoint tier (max_host_checkpoints ids last). ZERO slots and
 * COPY pairs may name any id < num_ids; copies go in any direction. Two implementations,
 * chosen at creation: host*.c (heap memory, a device worker thread, host fences as events) and
 * cuda.c (cudaMalloc, one pool stream, kernels/). device.c dispatches; device_impl.h says what an
 * implementation provides.
 *
 * Every implementation keeps one contract (docs/device.md):
 *   - FIFO: a list runs after everything submitted before it, its ops in
 *     order, like one CUDA stream;
 *   - submit copies what it needs, so the core may reuse its list at once;
 *   - BUFFER ops take effect at submit (rsp__device_buffer gives the new
 *     arrays as soon as it returns), while work queued before still sees
 *     the old ones;
 *   - a malformed list is refused whole (RSP_EINVAL) and changes nothing;
 *   - `done` completes once that list, and so everything before it, ran.
 *
 * Who calls what, from which thread:
 *
 *   function              | called by                      | thread
 *   ----------------------+--------------------------------+------------------
 *   create                | rsp_pool_create                | the creating
 *                         |                                | thread, before
 *                         |                                | the owner starts
 *   destroy               | rsp_pool_close, a failed       | after the owner
 *                         | rsp_pool_create                | stopped (joined)
 *   reserve, check_event  | the owner's message handler,   | owner
 *                         | before the core changes state  |
 *   submit, buffer        | the owner's message handler,   | owner
 *                         | after the core call            |
 *   check_event_kind      | rsp_post                       | any thread
 *   event_wait            | rsp_event_wait                 | any thread
 *   kind, block_base      | rsp_pool_block                 | any (immutable)
 *   sync, read            | tests, benchmarks              | sync: owner;
 *                         |                                | read: any thread
 *   checksum              | guard mode (pool_guard.c)      | owner
 *
 * "Owner" means one thread at a time: the pool's owner thread, or a test
 * that drives a device directly. Starting the owner (pthread_create)
 * orders create before its first call, joining it orders its last call
 * before destroy.
 */
#ifndef RSP_DEVICE_DEVICE_H
#define RSP_DEVICE_DEVICE_H

#include <rsp/rsp.h>

#include "core/core.h"
#include "core/layout.h"
#include "core/work.h"

typedef struct rsp__device rsp__device;

/* Allocate every block of the three storages (request slots, device tier,
 * host tier; a tier of no slots allocates nothing), zeroed (host device:
 * lazily zeroed anonymous mappings, page aligned; CUDA: request slots and
 * device tier by cudaMalloc, the host tier mapped pinned host memory) and
 * start the device's worker/stream. RSP_EINVAL (a bad layout or kind, an
 * id space whose num_ids is not the sum of the three counts), RSP_ENODEV
 * (CUDA not built, or no such GPU), RSP_ENOMEM, RSP_EDEVICE; nothing is
 * left allocated on failure. */
rsp_status rsp__device_create(rsp_device_kind kind, int cuda_ordinal, const rsp__layout *layout,
                              rsp__device **out, rsp_error *err);
/* Waits for all submitted work, then frees everything. NULL is a no-op.
 * Work behind a WAIT on an event nobody completes makes it wait forever. */
void rsp__device_destroy(rsp__device *dev);

rsp_device_kind rsp__device_kind(const rsp__device *dev);

/* Base pointer of block b of the request slots (host or device memory):
 * [num_layers, max_slots, *shape]; NULL past RSP_MAX_BLOCKS. The pool
 * reaches the tiers through work lists and rsp__device_read only.
 * Immutable after create: any thread. O(1). */
void *rsp__device_block_base(const rsp__device *dev, uint32_t b);
/* Base pointer of block b of storage sp (core/layout.h rsp__space: the
 * request slots, as rsp__device_block_base, or a checkpoint tier,
 * [num_layers, that tier's count, *shape]), as the device's copy code
 * addresses it: host device, heap memory; CUDA, device memory, and for the
 * host tier the device pointer of its mapped pinned memory (cudaMemcpy
 * reads and writes it like device memory). NULL past RSP_MAX_BLOCKS or for
 * a tier of no slots. For tests that address the tiers directly (the core
 * suites' executor). Immutable after create: any thread. O(1). */
void *rsp__device_space_base(const rsp__device *dev, rsp__space sp, uint32_t b);

/*
 * Allocate now what a later submit of a work list within `need` (core.h:
 * the work one core call emits, and the addressing buffers it creates or
 * grows) would allocate, so that the submit that follows the core's change
 * cannot fail for want of memory. The owner calls it from the core's
 * reserve hook, before the core changes anything. RSP_ENOMEM: nothing the
 * device does changed (what was reserved stays for later). Host device:
 * the job storage, the buffer table, the buffers' arrays. CUDA device:
 * nothing yet (its submit may still fail; the pool then breaks). Owner.
 * No allocation once warm, except for buffers created or grown.
 */
rsp_status rsp__device_reserve(rsp__device *dev, const rsp__ext_need *need, rsp_error *err);
/*
 * Queue a work list after everything submitted before. Copies what it needs
 * from *work (the core reuses it). BUFFER ops take effect now. If done is not
 * NULL it receives an event that completes once this work has run.
 * RSP_EINVAL: a malformed list (an op out of range: a ZERO or COPY id >=
 * num_ids; an UPLOAD past its buffer, a WAIT this device cannot wait on),
 * nothing of it queued or changed. Host device:
 * RSP_ENOMEM changes nothing, and after rsp__device_reserve for the list it
 * cannot happen (no allocation). CUDA device: RSP_ENOMEM or RSP_EDEVICE may
 * come after part of the list was enqueued. Owner. O(ops + entries copied);
 * the host device may run a small list inline when it is idle.
 */
rsp_status rsp__device_submit(rsp__device *dev, const rsp__work *work, rsp_event *done,
                              rsp_error *err);

/* Current device pointers of addressing buffer `id` (after a BUFFER op for it
 * was submitted): int32 slot_indices[capacity], bool has_state[capacity].
 * RSP_EINVAL for a buffer never created. Owner. O(1). */
rsp_status rsp__device_buffer(const rsp__device *dev, uint32_t id, void **slot_indices,
                              void **has_state, uint32_t *capacity, rsp_error *err);

/*
 * Can this device wait on the caller's event at all? An unknown kind, a
 * handle of kind RSP_EVENT_NONE, a kind other than the device's own (host:
 * host fences, CUDA: CUDA events) and a host fence whose tag does not match
 * are RSP_EINVAL, the message naming `what` (e.g. "forward_done"). NULL or a
 * NULL handle: RSP_OK ("already complete"). Any thread (reads only the
 * immutable device kind and the fence's tag). O(1).
 */
rsp_status rsp__device_check_event_kind(const rsp__device *dev, const rsp_event *event,
                                        const char *what, rsp_error *err);

/*
 * Would a WAIT on the caller's event be accepted by rsp__device_submit?
 * The owner asks before the core changes anything, so a bad forward_done is
 * refused with the pool unchanged (submit's own check would come too late).
 * First rsp__device_check_event_kind; then the host device refuses its own
 * timeline at a value no submitted work reaches (it would never complete).
 * NULL / a NULL handle: RSP_OK ("already complete"). Owner thread (reads the
 * submitted value). O(1).
 */
rsp_status rsp__device_check_event(const rsp__device *dev, const rsp_event *event, rsp_error *err);

/* Wait until everything submitted so far has run. Owner (tests). */
rsp_status rsp__device_sync(rsp__device *dev, rsp_error *err);

/* Wait for an event of this device (or a caller's forward-done); a kind it
 * cannot wait on: RSP_EINVAL (rsp__device_check_event_kind). Any thread. */
rsp_status rsp__device_event_wait(const rsp__device *dev, const rsp_event *event,
                                  uint64_t timeout_ns, rsp_error *err);

/* Copy one (block, layer, slot id) region to host memory dst (slot_bytes of
 * that block), after everything submitted so far. Any slot id < num_ids:
 * request slots and both checkpoint tiers. RSP_EINVAL out of range or dst
 * NULL. For tests and benchmarks. Any thread. */
rsp_status rsp__device_read(rsp__device *dev, uint32_t block, uint32_t layer, uint32_t slot,
                            void *dst, rsp_error *err);

/*
 * Guard mode: once everything submitted so far has run (FIFO: every queued
 * zero and copy), one checksum per (request slot slots[i], block b, layer
 * l) into out[((uint64_t)i * num_blocks + b) * num_layers + l]
 * (rsp__sum_bytes, device_impl.h: zero bytes sum to 0). RSP_EINVAL for a
 * slot >= max_slots (nothing written); RSP_EDEVICE (CUDA). Owner; waits
 * for the device. Host device: O(bytes) on the owner thread; CUDA: one
 * kernel and a copy of n x blocks x layers sums.
 */
rsp_status rsp__device_checksum(rsp__device *dev, const uint32_t *slots, uint32_t n, uint64_t *out,
                                rsp_error *err);

/* Jobs the host device dev has handed to its worker so far (the others ran
 * inline in submit, or had nothing to run). Tests only: they pin which
 * submits never wake the worker. Host device only. Owner. O(1). */
uint64_t rsp__host_jobs_queued(const rsp__device *dev);

/*
 * Host fences (host_fence.c): the internal side of the public rsp_host_fence_*
 * (api.c checks fork and NULL first). Any thread.
 *   _create: a fence at value 0 with one reference (RSP_ENOMEM).
 *   _valid: f is non-NULL and carries a live fence's tag (a cheap check, not
 *     a proof: see rsp_event in rsp.h). O(1).
 *   _ref / _unref: one reference more / less; the last unref frees. rsp_post
 *     takes one for the message of a commit or rollback naming the fence, the
 *     device one per queued WAIT on it.
 *   _signal, _value, _wait: the timeline (host_fence.c).
 *   _refs: references held now (tests; relaxed).
 */
rsp_status rsp__fence_create(rsp_host_fence **out, rsp_error *err);
bool rsp__fence_valid(const rsp_host_fence *f);
void rsp__fence_ref(rsp_host_fence *f);
void rsp__fence_unref(rsp_host_fence *f);
uint32_t rsp__fence_refs(const rsp_host_fence *f);
void rsp__fence_signal(rsp_host_fence *f, uint64_t value);
uint64_t rsp__fence_value(const rsp_host_fence *f);
rsp_status rsp__fence_wait(const rsp_host_fence *f, uint64_t value, uint64_t timeout_ns);

#endif
