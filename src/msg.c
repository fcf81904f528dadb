/*
 * The wire form of a message (msg.h): one memcpy of the message, one per
 * array. Encoding and decoding derive the offsets from the same function,
 * so the two sides cannot disagree about the layout. A kind without arrays
 * (most of the small, frequent messages) costs one memcpy and no offsets.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "msg.h"

#include <stdalign.h>
#include <string.h>

#include "util/assert.h"
#include "util/mem.h"

/* Which arrays each kind carries (the schema's one table). */
static bool carries_step(rsp_msg_kind k)
{
    return k == RSP_MSG_ADMIT || k == RSP_MSG_PLAN || k == RSP_MSG_COMMIT;
}

static bool carries_name(rsp_msg_kind k)
{
    return k == RSP_MSG_LABEL;
}

/* Where each step array of m's wire form starts, and where they end.
 * Reads only m's counts, which the wire form holds verbatim, so the decoder
 * gets the encoder's answer. */
typedef struct step_offsets {
    size_t rows, pre, post, end;
} step_offsets;

static step_offsets step_offsets_of(const rsp_msg *m)
{
    step_offsets o;
    o.rows = rsp__align_up(sizeof(rsp_msg), alignof(rsp_row));
    o.pre = rsp__align_up(o.rows + (size_t)m->step.num_rows * sizeof(rsp_row), alignof(rsp_fork));
    o.post = o.pre + (size_t)m->step.num_pre_forks * sizeof(rsp_fork);
    o.end = o.post + (size_t)m->step.num_post_forks * sizeof(rsp_fork);
    return o;
}

/* A name needs no alignment: it follows the message at once. */
#define NAME_AT sizeof(rsp_msg)

size_t rsp__msg_wire_size(const rsp_msg *m)
{
    if (carries_step(m->kind))
        return step_offsets_of(m).end;
    if (carries_name(m->kind))
        return NAME_AT + strlen(m->label_name) + 1;
    return sizeof(rsp_msg);
}

/* memcpy's arguments must be valid pointers even for 0 bytes: an empty
 * array may be NULL. */
static void copy(unsigned char *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

void rsp__msg_encode(const rsp_msg *m, void *dst)
{
    unsigned char *w = dst;
    memcpy(w, m, sizeof *m);
    if (carries_step(m->kind)) {
        const step_offsets o = step_offsets_of(m);
        copy(w + o.rows, m->step.rows, o.pre - o.rows);
        copy(w + o.pre, m->step.pre_forks, o.post - o.pre);
        copy(w + o.post, m->step.post_forks, o.end - o.post);
    } else if (carries_name(m->kind)) {
        memcpy(w + NAME_AT, m->label_name, strlen(m->label_name) + 1);
    }
}

const rsp_msg *rsp__msg_decode(void *wire, size_t size)
{
    unsigned char *w = wire;
    rsp_msg *m = wire;
    RSP__ASSERT(size >= sizeof *m);
    /* The caller's pointers came along with the copy: none may be followed. */
    rsp_step *s = &m->step;
    if (carries_step(m->kind)) {
        const step_offsets o = step_offsets_of(m);
        RSP__ASSERT(size == o.end);
        s->rows = s->num_rows ? (const rsp_row *)(w + o.rows) : NULL;
        s->pre_forks = s->num_pre_forks ? (const rsp_fork *)(w + o.pre) : NULL;
        s->post_forks = s->num_post_forks ? (const rsp_fork *)(w + o.post) : NULL;
    } else {
        s->rows = NULL;
        s->pre_forks = s->post_forks = NULL;
        s->num_rows = s->num_pre_forks = s->num_post_forks = 0;
    }
    m->label_name = carries_name(m->kind) ? (const char *)(w + NAME_AT) : NULL;
    RSP__ASSERT(!m->label_name || memchr(m->label_name, '\0', size - NAME_AT));
    return m;
}
