/* In-test executor of core device work. SPDX-License-Identifier: Apache-2.0 */
#include "core/exec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct test_buffer {
    uint32_t capacity; /* 0: never created */
    uint32_t moves;
    int32_t *slots;
    bool *has_state;
} test_buffer;

struct rsp_test_store {
    rsp__layout layout;
    uint8_t *base[RSP_MAX_BLOCKS];
    test_buffer *buffers;
    uint32_t num_buffers;
    rsp_test_store_counts counts;
    char error[256];
};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "exec: out of memory\n");
        abort();
    }
    return p;
}

rsp_test_store *rsp_test_store_new(const rsp__layout *layout)
{
    rsp_test_store *s = xcalloc(1, sizeof *s);
    s->layout = *layout;
    for (uint32_t b = 0; b < layout->num_blocks; b++)
        s->base[b] = xcalloc(1, (size_t)layout->blocks[b].bytes);
    return s;
}

void rsp_test_store_free(rsp_test_store *s)
{
    if (!s)
        return;
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        free(s->base[b]);
    for (uint32_t i = 0; i < s->num_buffers; i++) {
        free(s->buffers[i].slots);
        free(s->buffers[i].has_state);
    }
    free(s->buffers);
    free(s);
}

static bool fail(rsp_test_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(rsp_test_store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof s->error, fmt, ap);
    va_end(ap);
    return false;
}

const char *rsp_test_store_error(const rsp_test_store *s)
{
    return s->error;
}

uint8_t *rsp_test_store_slot_ptr(rsp_test_store *s, uint32_t block, uint32_t layer, uint32_t slot)
{
    return s->base[block] + rsp__layout_offset(&s->layout, block, layer, slot);
}

static const uint8_t *cslot(const rsp_test_store *s, uint32_t b, uint32_t l, uint32_t slot)
{
    return s->base[b] + rsp__layout_offset(&s->layout, b, l, slot);
}

static void zero_slot(rsp_test_store *s, uint32_t slot)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++)
            memset(rsp_test_store_slot_ptr(s, b, l, slot), 0,
                   (size_t)s->layout.blocks[b].slot_bytes);
}

static void copy_slot(rsp_test_store *s, uint32_t src, uint32_t dst)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++)
            memcpy(rsp_test_store_slot_ptr(s, b, l, dst), rsp_test_store_slot_ptr(s, b, l, src),
                   (size_t)s->layout.blocks[b].slot_bytes);
}

static test_buffer *buffer_get(rsp_test_store *s, uint32_t id, bool create)
{
    if (id >= s->num_buffers) {
        if (!create)
            return NULL;
        uint32_t n = s->num_buffers ? s->num_buffers : 8;
        while (n <= id)
            n *= 2;
        test_buffer *nb = realloc(s->buffers, (size_t)n * sizeof *nb);
        if (!nb)
            abort();
        memset(nb + s->num_buffers, 0, (size_t)(n - s->num_buffers) * sizeof *nb);
        s->buffers = nb;
        s->num_buffers = n;
    }
    return &s->buffers[id];
}

static bool apply_copy(rsp_test_store *s, const rsp__work *w, const rsp__op *op, uint32_t i)
{
    if ((uint64_t)op->first + op->count > w->num_pairs)
        return fail(s, "op %u: COPY pairs [%u, +%u) past %u", i, op->first, op->count,
                    w->num_pairs);
    const rsp__copy *p = w->pairs + op->first;
    for (uint32_t a = 0; a < op->count; a++) {
        if (p[a].src >= s->layout.max_slots || p[a].dst >= s->layout.max_slots)
            return fail(s, "op %u: COPY pair %u (%u -> %u) out of range", i, a, p[a].src, p[a].dst);
        if (p[a].src == p[a].dst)
            return fail(s, "op %u: COPY pair %u copies slot %u onto itself", i, a, p[a].src);
        for (uint32_t c = 0; c < op->count; c++) {
            if (c != a && p[c].dst == p[a].dst)
                return fail(s, "op %u: COPY destination %u appears twice", i, p[a].dst);
            if (p[c].src == p[a].dst)
                return fail(s, "op %u: COPY slot %u is both source and destination", i, p[a].dst);
        }
    }
    /* Non-overlapping pairs: sequential copies equal one batched launch. */
    for (uint32_t a = 0; a < op->count; a++)
        copy_slot(s, p[a].src, p[a].dst);
    s->counts.pairs_copied += op->count;
    return true;
}

bool rsp_test_store_apply(rsp_test_store *s, const rsp__work *w)
{
    s->error[0] = '\0';
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if ((unsigned)op->kind > RSP__OP_UPLOAD)
            return fail(s, "op %u: unknown kind %d", i, (int)op->kind);
        s->counts.ops[op->kind]++;
        switch (op->kind) {
        case RSP__OP_WAIT: break;
        case RSP__OP_ZERO:
            if ((uint64_t)op->first + op->count > w->num_slots)
                return fail(s, "op %u: ZERO slots [%u, +%u) past %u", i, op->first, op->count,
                            w->num_slots);
            for (uint32_t a = 0; a < op->count; a++) {
                uint32_t slot = w->slots[op->first + a];
                if (slot >= s->layout.max_slots)
                    return fail(s, "op %u: ZERO slot %u out of range", i, slot);
                zero_slot(s, slot);
            }
            s->counts.slots_zeroed += op->count;
            break;
        case RSP__OP_COPY:
            if (!apply_copy(s, w, op, i))
                return false;
            break;
        case RSP__OP_BUFFER: {
            test_buffer *b = buffer_get(s, op->buffer, true);
            if (op->capacity > b->capacity) {
                int32_t *ns = xcalloc(op->capacity, sizeof *ns);
                bool *nh = xcalloc(op->capacity, sizeof *nh);
                if (b->capacity) {
                    memcpy(ns, b->slots, (size_t)b->capacity * sizeof *ns);
                    memcpy(nh, b->has_state, (size_t)b->capacity * sizeof *nh);
                    b->moves++;
                }
                free(b->slots);
                free(b->has_state);
                b->slots = ns;
                b->has_state = nh;
                b->capacity = op->capacity;
            }
            break;
        }
        case RSP__OP_UPLOAD: {
            test_buffer *b = buffer_get(s, op->buffer, false);
            if (!b || b->capacity == 0)
                return fail(s, "op %u: UPLOAD into buffer %u that does not exist", i, op->buffer);
            if (op->count > b->capacity)
                return fail(s, "op %u: UPLOAD of %u entries into buffer %u of %u", i, op->count,
                            op->buffer, b->capacity);
            if (op->count && (!op->slot_indices || !op->has_state))
                return fail(s, "op %u: UPLOAD with NULL vectors", i);
            if (op->count) {
                memcpy(b->slots, op->slot_indices, (size_t)op->count * sizeof *b->slots);
                memcpy(b->has_state, op->has_state, (size_t)op->count * sizeof *b->has_state);
            }
            break;
        }
        }
    }
    return true;
}

void rsp_test_store_fill(rsp_test_store *s, uint32_t slot, uint8_t byte)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++)
            memset(rsp_test_store_slot_ptr(s, b, l, slot), byte,
                   (size_t)s->layout.blocks[b].slot_bytes);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

void rsp_test_store_fill_pattern(rsp_test_store *s, uint32_t slot, uint64_t seed)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++) {
            uint8_t *p = rsp_test_store_slot_ptr(s, b, l, slot);
            uint64_t n = s->layout.blocks[b].slot_bytes;
            for (uint64_t i = 0; i < n; i++)
                p[i] = (uint8_t)(mix(seed * 0x9e3779b97f4a7c15ull + ((uint64_t)b << 48) +
                                     ((uint64_t)l << 32) + i) |
                                 1u); /* never 0: a filled slot is never "zero" */
        }
}

bool rsp_test_store_slot_is_zero(const rsp_test_store *s, uint32_t slot)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++) {
            const uint8_t *p = cslot(s, b, l, slot);
            for (uint64_t i = 0; i < s->layout.blocks[b].slot_bytes; i++)
                if (p[i])
                    return false;
        }
    return true;
}

uint64_t rsp_test_store_checksum(const rsp_test_store *s, uint32_t slot)
{
    uint64_t h = 0x243f6a8885a308d3ull;
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++) {
            const uint8_t *p = cslot(s, b, l, slot);
            for (uint64_t i = 0; i < s->layout.blocks[b].slot_bytes; i++)
                h = mix(h ^ p[i]) + i;
        }
    return h;
}

uint64_t rsp_test_store_zero_checksum(const rsp_test_store *s)
{
    uint64_t h = 0x243f6a8885a308d3ull;
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++)
            for (uint64_t i = 0; i < s->layout.blocks[b].slot_bytes; i++)
                h = mix(h ^ 0) + i;
    return h;
}

static const test_buffer *cbuf(const rsp_test_store *s, uint32_t id)
{
    return id < s->num_buffers ? &s->buffers[id] : NULL;
}

uint32_t rsp_test_store_buffer_capacity(const rsp_test_store *s, uint32_t id)
{
    const test_buffer *b = cbuf(s, id);
    return b ? b->capacity : 0;
}

const int32_t *rsp_test_store_buffer_slots(const rsp_test_store *s, uint32_t id)
{
    const test_buffer *b = cbuf(s, id);
    return b ? b->slots : NULL;
}

const bool *rsp_test_store_buffer_has_state(const rsp_test_store *s, uint32_t id)
{
    const test_buffer *b = cbuf(s, id);
    return b ? b->has_state : NULL;
}

uint32_t rsp_test_store_buffer_moves(const rsp_test_store *s, uint32_t id)
{
    const test_buffer *b = cbuf(s, id);
    return b ? b->moves : 0;
}

rsp_test_store_counts rsp_test_store_counts_get(const rsp_test_store *s)
{
    return s->counts;
}
