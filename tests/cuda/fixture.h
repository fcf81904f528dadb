/*
 * Shared by the tests/cuda suites: a layout of awkward block sizes and
 * hand-built work lists (no core), so each test pins one device rule.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Include after <cmocka.h>. Test code, main thread only.
 */
#ifndef RSP_TESTS_CUDA_FIXTURE_H
#define RSP_TESTS_CUDA_FIXTURE_H

#include <stdio.h>
#include <string.h>

#include "core/layout.h"
#include "core/work.h"

/* ------------------------------------------------------------------------ */

/* Blocks of real dtypes with awkward sizes: bf16[3] (6 bytes), u8[1],
 * f32[1025] (4100 bytes) and f64[4097] (32776 bytes, more than one chunk). */
static inline void make_layout(rsp__layout *lay, uint32_t layers, uint32_t slots)
{
    static const struct {
        const char *name;
        rsp_dtype dtype;
        uint32_t elem;
        int64_t n;
    } spec[4] = {{"bf16x3", RSP_DTYPE_BF16, 2, 3},
                 {"u8x1", RSP_DTYPE_U8, 1, 1},
                 {"f32x1025", RSP_DTYPE_F32, 4, 1025},
                 {"f64x4097", RSP_DTYPE_F64, 8, 4097}};
    memset(lay, 0, sizeof *lay);
    lay->num_layers = layers;
    lay->max_slots = slots;
    lay->sink = true;
    lay->usable_slots = slots - 1;
    lay->pad_index = 0;
    lay->num_blocks = 4;
    for (uint32_t b = 0; b < 4; b++) {
        rsp__block_layout *bl = &lay->blocks[b];
        snprintf(bl->name, sizeof bl->name, "%s", spec[b].name);
        bl->dtype = spec[b].dtype;
        bl->elem_size = spec[b].elem;
        bl->ndim = 1;
        bl->shape[0] = spec[b].n;
        bl->slot_bytes = (uint64_t)spec[b].elem * (uint64_t)spec[b].n;
        bl->layer_bytes = bl->slot_bytes * slots;
        bl->bytes = bl->layer_bytes * layers;
        lay->slot_bytes += bl->slot_bytes * layers;
    }
    lay->total_bytes = lay->slot_bytes * slots;
    lay->num_ids = lay->max_slots; /* no checkpoint tiers */
}

typedef struct test_work {
    rsp__work w;
    rsp__op ops[16];
    uint32_t slots[64];
    rsp__copy pairs[64];
} test_work;

static inline void tw_init(test_work *t)
{
    memset(t, 0, sizeof *t);
    t->w.ops = t->ops;
    t->w.cap_ops = 16;
    t->w.slots = t->slots;
    t->w.cap_slots = 64;
    t->w.pairs = t->pairs;
    t->w.cap_pairs = 64;
}

static inline rsp__op *tw_op(test_work *t, rsp__op_kind kind)
{
    assert_true(t->w.num_ops < 16);
    rsp__op *op = &t->ops[t->w.num_ops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    return op;
}

static inline void tw_wait(test_work *t, rsp_event ev)
{
    tw_op(t, RSP__OP_WAIT)->event = ev;
}

/* One ZERO op over n slots (one batched launch). */
static inline void tw_zero(test_work *t, const uint32_t *slots, uint32_t n)
{
    rsp__op *op = tw_op(t, RSP__OP_ZERO);
    op->first = t->w.num_slots;
    op->count = n;
    for (uint32_t i = 0; i < n; i++)
        t->slots[t->w.num_slots++] = slots[i];
}

/* One COPY op over n pairs. */
static inline void tw_copy(test_work *t, const rsp__copy *pairs, uint32_t n)
{
    rsp__op *op = tw_op(t, RSP__OP_COPY);
    op->first = t->w.num_pairs;
    op->count = n;
    for (uint32_t i = 0; i < n; i++)
        t->pairs[t->w.num_pairs++] = pairs[i];
}

static inline void tw_buffer(test_work *t, uint32_t id, uint32_t cap)
{
    rsp__op *op = tw_op(t, RSP__OP_BUFFER);
    op->buffer = id;
    op->capacity = cap;
}

static inline void tw_upload(test_work *t, uint32_t id, const int32_t *idx, const bool *has,
                             uint32_t n)
{
    rsp__op *op = tw_op(t, RSP__OP_UPLOAD);
    op->buffer = id;
    op->slot_indices = idx;
    op->has_state = has;
    op->count = n;
}

#endif
