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
    return k == RSP_MSG_ADMIT || k == RSP_MSG_PLAN || k == RSP_MSG_COMMIT || k == RSP_MSG_STEP;
}

static bool carries_name(rsp_msg_kind k)
{
    return k == RSP_MSG_LABEL;
}

/* STEP's second declaration: the previous step's, committed first. */
static bool carries_commit(const rsp_msg *m)
{
    return m->kind == RSP_MSG_STEP && m->commit;
}

/* The vector forms of the lifecycle kinds (a list instead of msg.rid). */
static bool carries_rids(const rsp_msg *m)
{
    return (m->kind == RSP_MSG_INGEST || m->kind == RSP_MSG_REMOVE || m->kind == RSP_MSG_RESET) &&
           m->num_rids > 0;
}

/* Where each array of m's wire form starts, and where they end. Reads only
 * m's kind and counts (and the commit's, from the caller's declaration when
 * encoding and from its copy when decoding), which the wire form holds
 * verbatim, so the decoder gets the encoder's answer. */
typedef struct step_offsets {
    size_t rows, pre, post, end;
} step_offsets;

typedef struct wire_offsets {
    step_offsets step, commit; /* msg.step's arrays; *msg.commit's (STEP with a commit) */
    size_t commit_decl;        /* *msg.commit itself */
    size_t rids;               /* msg.rids (a vector INGEST, REMOVE or RESET) */
    size_t end;
} wire_offsets;

/* s's arrays laid out from offset at. */
static step_offsets step_offsets_of(const rsp_step *s, size_t at)
{
    step_offsets o;
    o.rows = rsp__align_up(at, alignof(rsp_row));
    o.pre = rsp__align_up(o.rows + (size_t)s->num_rows * sizeof(rsp_row), alignof(rsp_fork));
    o.post = o.pre + (size_t)s->num_pre_forks * sizeof(rsp_fork);
    o.end = o.post + (size_t)s->num_post_forks * sizeof(rsp_fork);
    return o;
}

/* wire: NULL when encoding (the commit's counts are read from the caller's
 * declaration), the wire form when decoding (from its copy there). */
static wire_offsets wire_offsets_of(const rsp_msg *m, const unsigned char *wire)
{
    wire_offsets o = {.end = sizeof(rsp_msg)};
    if (carries_step(m->kind)) {
        o.step = step_offsets_of(&m->step, o.end);
        o.end = o.step.end;
    }
    if (carries_commit(m)) {
        o.commit_decl = rsp__align_up(o.end, alignof(rsp_step));
        const rsp_step *c = wire ? (const rsp_step *)(wire + o.commit_decl) : m->commit;
        o.commit = step_offsets_of(c, o.commit_decl + sizeof(rsp_step));
        o.end = o.commit.end;
    }
    if (carries_rids(m)) {
        o.rids = rsp__align_up(o.end, alignof(rsp_rid));
        o.end = o.rids + (size_t)m->num_rids * sizeof(rsp_rid);
    }
    return o;
}

/* A name needs no alignment: it follows the message at once. */
#define NAME_AT sizeof(rsp_msg)

size_t rsp__msg_wire_size(const rsp_msg *m)
{
    if (carries_name(m->kind))
        return NAME_AT + strlen(m->label_name) + 1;
    if (carries_step(m->kind) || carries_rids(m))
        return wire_offsets_of(m, NULL).end;
    return sizeof(rsp_msg);
}

/* memcpy's arguments must be valid pointers even for 0 bytes: an empty
 * array may be NULL. */
static void copy(unsigned char *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

static void copy_step(unsigned char *w, const step_offsets *o, const rsp_step *s)
{
    copy(w + o->rows, s->rows, o->pre - o->rows);
    copy(w + o->pre, s->pre_forks, o->post - o->pre);
    copy(w + o->post, s->post_forks, o->end - o->post);
}

/* Point s's arrays at their copies in w (NULL for an empty one). */
static void point_step(unsigned char *w, const step_offsets *o, rsp_step *s)
{
    s->rows = s->num_rows ? (const rsp_row *)(w + o->rows) : NULL;
    s->pre_forks = s->num_pre_forks ? (const rsp_fork *)(w + o->pre) : NULL;
    s->post_forks = s->num_post_forks ? (const rsp_fork *)(w + o->post) : NULL;
}

/* A declaration the kind does not carry: nothing to follow. */
static void clear_step(rsp_step *s)
{
    s->rows = NULL;
    s->pre_forks = s->post_forks = NULL;
    s->num_rows = s->num_pre_forks = s->num_post_forks = 0;
}

void rsp__msg_encode(const rsp_msg *m, void *dst)
{
    unsigned char *w = dst;
    memcpy(w, m, sizeof *m);
    if (carries_name(m->kind)) {
        memcpy(w + NAME_AT, m->label_name, strlen(m->label_name) + 1);
    } else if (carries_step(m->kind) || carries_rids(m)) {
        const wire_offsets o = wire_offsets_of(m, NULL);
        if (carries_step(m->kind))
            copy_step(w, &o.step, &m->step);
        if (carries_commit(m)) {
            memcpy(w + o.commit_decl, m->commit, sizeof(rsp_step));
            copy_step(w, &o.commit, m->commit);
        }
        if (carries_rids(m))
            memcpy(w + o.rids, m->rids, o.end - o.rids);
    }
}

const rsp_msg *rsp__msg_decode(void *wire, size_t size)
{
    unsigned char *w = wire;
    rsp_msg *m = wire;
    RSP__ASSERT(size >= sizeof *m);
    /* The caller's pointers came along with the copy: none may be followed. */
    const bool step = carries_step(m->kind), commit = carries_commit(m), rids = carries_rids(m);
    if (step || rids) {
        const wire_offsets o = wire_offsets_of(m, w);
        RSP__ASSERT(size == o.end);
        if (step)
            point_step(w, &o.step, &m->step);
        if (commit) {
            rsp_step *c = (rsp_step *)(w + o.commit_decl);
            point_step(w, &o.commit, c);
            m->commit = c;
        }
        m->rids = rids ? (const rsp_rid *)(w + o.rids) : NULL;
    } else {
        m->rids = NULL;
    }
    if (!step)
        clear_step(&m->step);
    if (!commit)
        m->commit = NULL;
    if (!rids)
        m->num_rids = 0;
    m->label_name = carries_name(m->kind) ? (const char *)(w + NAME_AT) : NULL;
    RSP__ASSERT(!m->label_name || memchr(m->label_name, '\0', size - NAME_AT));
    return m;
}
