/*
 * The device work list: what the core asks the device to do for one message.
 * SPDX-License-Identifier: Apache-2.0
 *
 * The core appends operations; the device executes them in list order, after
 * everything submitted before (FIFO, like one CUDA stream). The list and the
 * data it points at belong to the core and are valid until the core's next
 * call: a device copies what it needs at submit time.
 *
 * Operations:
 *   WAIT    wait for `event` (a caller's forward-done) before anything after it
 *   ZERO    zero slots[first .. first+count) in every layer of every block
 *   COPY    copy pairs[first .. first+count) (src -> dst) in every layer of
 *           every block; pairs within one COPY never overlap (no slot is both
 *           a source and a destination, no destination twice), so one batched
 *           launch is exact. Chains (a->b, b->c) are split into ordered COPYs.
 *   BUFFER  make addressing buffer `buffer` hold at least `capacity` entries
 *           (creates it, or grows it; growth may move it). Handled at submit
 *           time, so rsp__device_buffer() sees the result immediately.
 *   UPLOAD  copy host vectors (slot_indices, has_state)[0 .. count) into
 *           addressing buffer `buffer`; has_state NULL: slot_indices only
 *           (a per-token index tensor's buffer, whose bool half is unused).
 */
#ifndef RSP_CORE_WORK_H
#define RSP_CORE_WORK_H

#include <rsp/rsp.h>

typedef enum rsp__op_kind {
    RSP__OP_WAIT = 0,
    RSP__OP_ZERO,
    RSP__OP_COPY,
    RSP__OP_BUFFER,
    RSP__OP_UPLOAD,
} rsp__op_kind;

typedef struct rsp__copy {
    uint32_t src;
    uint32_t dst;
} rsp__copy;

typedef struct rsp__op {
    rsp__op_kind kind;
    uint32_t first;              /* ZERO: into slots; COPY: into pairs */
    uint32_t count;              /* ZERO/COPY: entries; UPLOAD: vector length */
    uint32_t buffer;             /* BUFFER/UPLOAD */
    uint32_t capacity;           /* BUFFER */
    rsp_event event;             /* WAIT */
    const int32_t *slot_indices; /* UPLOAD, host, [count] */
    const bool *has_state;       /* UPLOAD, host, [count]; NULL: indices only */
    uint32_t stamp;              /* COPY: batch identity for the conflict marks;
                                  * the list's own bookkeeping, devices ignore it */
} rsp__op;

/* Grows by doubling; after warm-up a step appends without allocating. */
typedef struct rsp__work {
    rsp__op *ops;
    uint32_t num_ops, cap_ops;
    uint32_t *slots;
    uint32_t num_slots, cap_slots;
    rsp__copy *pairs;
    uint32_t num_pairs, cap_pairs;
    /* Per slot, the stamp of the COPY op that last read / wrote it, so that
     * whether a pair may join the last COPY op is O(1), not O(pairs). */
    uint32_t *read_mark, *write_mark;
    uint32_t cap_marks;
    uint32_t next_stamp;
    /* Set by the core between reserving and the end of its apply phase:
     * an append that would have to grow is then a broken reservation
     * (RSP__ASSERT in debug and sanitizer builds). */
    bool frozen;
} rsp__work;

void rsp__work_init(rsp__work *w);
void rsp__work_fini(rsp__work *w);
/* Forget the contents, keep the capacity. */
void rsp__work_clear(rsp__work *w);
bool rsp__work_empty(const rsp__work *w);

/* Appenders; RSP_ENOMEM only when growing fails. Consecutive ZEROs (and
 * non-conflicting COPYs) are merged into one op. */
rsp_status rsp__work_wait(rsp__work *w, const rsp_event *event);
rsp_status rsp__work_zero(rsp__work *w, uint32_t slot);
rsp_status rsp__work_copy(rsp__work *w, uint32_t src, uint32_t dst);
rsp_status rsp__work_buffer(rsp__work *w, uint32_t buffer, uint32_t capacity);
rsp_status rsp__work_upload(rsp__work *w, uint32_t buffer, const int32_t *slot_indices,
                            const bool *has_state, uint32_t count);

#endif
