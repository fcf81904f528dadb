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

/* Which arrays each kind carries (the schema's one table). A kind listed
 * with COMMIT or RIDS carries them only when the message has them
 * (msg.commit, msg.num_rids). One load per message: the small, frequent
 * kinds take the fast path on a zero. */
enum {
    STEP_ARRAYS = 1, /* msg.step's rows and fork lists */
    NAME = 2,        /* msg.label_name */
    COMMIT = 4,      /* *msg.commit and its arrays */
    RIDS = 8,        /* msg.rids */
};
static const unsigned char schema[RSP_MSG_KIND_COUNT_] = {
    [RSP_MSG_ADMIT] = STEP_ARRAYS,  [RSP_MSG_PLAN] = STEP_ARRAYS,
    [RSP_MSG_COMMIT] = STEP_ARRAYS, [RSP_MSG_STEP] = STEP_ARRAYS | COMMIT,
    [RSP_MSG_LABEL] = NAME,         [RSP_MSG_INGEST] = RIDS,
    [RSP_MSG_REMOVE] = RIDS,        [RSP_MSG_RESET] = RIDS,
};

/* The arrays m carries (validated: its kind is one). */
static unsigned arrays_of(const rsp_msg *m)
{
    RSP__ASSERT((unsigned)m->kind < RSP_MSG_KIND_COUNT_);
    unsigned a = schema[m->kind];
    if (a & (COMMIT | RIDS)) {
        if (!m->commit)
            a &= ~(unsigned)COMMIT;
        if (!m->num_rids)
            a &= ~(unsigned)RIDS;
    }
    return a;
}

/* Where each array of m's wire form starts, and where they end. Reads only
 * m's kind and counts (and the commit's, from the caller's declaration when
 * encoding and from its copy when decoding), which the wire form holds
 * verbatim, so the decoder gets the encoder's answer. */
typedef struct step_offsets {
    size_t rows, pre, post, ckpt, restore, end;
} step_offsets;

typedef struct wire_offsets {
    step_offsets step, commit; /* msg.step's arrays; *msg.commit's (STEP with a commit) */
    size_t commit_decl;        /* *msg.commit itself */
    size_t rids;               /* msg.rids (a vector INGEST, REMOVE or RESET) */
    size_t end;
} wire_offsets;

/* s's arrays laid out from offset at; rows: whether its rows are copied
 * (a commit's rows that are the step's are not: commit_shares_rows). */
__attribute__((always_inline)) static inline step_offsets step_offsets_of(const rsp_step *s,
                                                                          size_t at, bool rows)
{
    step_offsets o;
    o.rows = rsp__align_up(at, alignof(rsp_row));
    o.pre = rsp__align_up(o.rows + (rows ? (size_t)s->num_rows * sizeof(rsp_row) : 0),
                          alignof(rsp_fork));
    o.post = o.pre + (size_t)s->num_pre_forks * sizeof(rsp_fork);
    o.ckpt = rsp__align_up(o.post + (size_t)s->num_post_forks * sizeof(rsp_fork),
                           alignof(rsp_checkpoint_decl));
    o.restore = rsp__align_up(o.ckpt + (size_t)s->num_checkpoints * sizeof(rsp_checkpoint_decl),
                              alignof(rsp_restore));
    o.end = o.restore + (size_t)s->num_restores * sizeof(rsp_restore);
    return o;
}

/* The commit declaration of m (a STEP with a commit): the caller's when
 * encoding (wire NULL), its copy when decoding. */
__attribute__((always_inline)) static inline const rsp_step *
commit_decl_of(const rsp_msg *m, const unsigned char *wire, size_t at)
{
    return wire ? (const rsp_step *)(wire + at) : m->commit;
}

/* A STEP whose commit names the very rows of its step (the same array
 * and count: an engine passing one declaration's rows to both) carries
 * them once; the decoded commit points at the step's copy, so the owner's
 * core compares them once too. Read from the caller's pointers, which the
 * wire form holds verbatim until decode replaces them: both sides agree. */
__attribute__((always_inline)) static inline bool commit_shares_rows(const rsp_msg *m,
                                                                     const rsp_step *c)
{
    return c->num_rows && c->rows == m->step.rows && c->num_rows == m->step.num_rows;
}

/* wire: NULL when encoding (the commit's counts are read from the caller's
 * declaration), the wire form when decoding (from its copy there, whose
 * rows pointer is still the caller's). *shared: commit_shares_rows. */
__attribute__((always_inline)) static inline wire_offsets
wire_offsets_of(const rsp_msg *m, unsigned arrays, const unsigned char *wire, bool *shared)
{
    wire_offsets o; /* only the fields of the arrays present are set, and read */
    o.end = sizeof(rsp_msg);
    *shared = false;
    if (arrays & STEP_ARRAYS) {
        o.step = step_offsets_of(&m->step, o.end, true);
        o.end = o.step.end;
    }
    if (arrays & COMMIT) {
        o.commit_decl = rsp__align_up(o.end, alignof(rsp_step));
        const rsp_step *c = commit_decl_of(m, wire, o.commit_decl);
        *shared = (arrays & STEP_ARRAYS) && commit_shares_rows(m, c);
        o.commit = step_offsets_of(c, o.commit_decl + sizeof(rsp_step), !*shared);
        o.end = o.commit.end;
    }
    if (arrays & RIDS) {
        o.rids = rsp__align_up(o.end, alignof(rsp_rid));
        o.end = o.rids + (size_t)m->num_rids * sizeof(rsp_rid);
    }
    return o;
}

/* A name needs no alignment: it follows the message at once. */
#define NAME_AT sizeof(rsp_msg)

size_t rsp__msg_wire_size(const rsp_msg *m)
{
    const unsigned a = arrays_of(m);
    if (!a)
        return sizeof(rsp_msg);
    if (a & NAME)
        return NAME_AT + strlen(m->label_name) + 1;
    bool shared;
    return wire_offsets_of(m, a, NULL, &shared).end;
}

/* memcpy's arguments must be valid pointers even for 0 bytes: an empty
 * array may be NULL. */
static void copy(unsigned char *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

/* rows: whether s's rows are copied (step_offsets_of). */
static void copy_step(unsigned char *w, const step_offsets *o, const rsp_step *s, bool rows)
{
    copy(w + o->rows, s->rows, rows ? (size_t)s->num_rows * sizeof(rsp_row) : 0);
    copy(w + o->pre, s->pre_forks, o->post - o->pre);
    copy(w + o->post, s->post_forks, (size_t)s->num_post_forks * sizeof(rsp_fork));
    copy(w + o->ckpt, s->checkpoints, (size_t)s->num_checkpoints * sizeof(rsp_checkpoint_decl));
    copy(w + o->restore, s->restores, o->end - o->restore);
}

/* Point s's arrays at their copies in w (NULL for an empty one). */
static void point_step(unsigned char *w, const step_offsets *o, rsp_step *s)
{
    s->rows = s->num_rows ? (const rsp_row *)(w + o->rows) : NULL;
    s->pre_forks = s->num_pre_forks ? (const rsp_fork *)(w + o->pre) : NULL;
    s->post_forks = s->num_post_forks ? (const rsp_fork *)(w + o->post) : NULL;
    s->checkpoints = s->num_checkpoints ? (const rsp_checkpoint_decl *)(w + o->ckpt) : NULL;
    s->restores = s->num_restores ? (const rsp_restore *)(w + o->restore) : NULL;
}

/* A declaration the kind does not carry: nothing to follow. */
static void clear_step(rsp_step *s)
{
    s->rows = NULL;
    s->pre_forks = s->post_forks = NULL;
    s->checkpoints = NULL;
    s->restores = NULL;
    s->num_rows = s->num_pre_forks = s->num_post_forks = 0;
    s->num_checkpoints = s->num_restores = 0;
}

/* The arrays of a message that has some: out of line, so the frequent
 * kinds without arrays (one memcpy) save no registers for them (inlined,
 * it made ingest and remove measurably dearer in bench/profile.sh). */
__attribute__((noinline)) static void encode_arrays(const rsp_msg *m, unsigned a, unsigned char *w)
{
    if (a & NAME) {
        memcpy(w + NAME_AT, m->label_name, strlen(m->label_name) + 1);
        return;
    }
    bool shared;
    const wire_offsets o = wire_offsets_of(m, a, NULL, &shared);
    if (a & STEP_ARRAYS)
        copy_step(w, &o.step, &m->step, true);
    if (a & COMMIT) {
        memcpy(w + o.commit_decl, m->commit, sizeof(rsp_step));
        copy_step(w, &o.commit, m->commit, !shared);
    }
    if (a & RIDS)
        memcpy(w + o.rids, m->rids, o.end - o.rids);
}

void rsp__msg_encode(const rsp_msg *m, void *dst)
{
    memcpy(dst, m, sizeof *m);
    const unsigned a = arrays_of(m);
    if (a)
        encode_arrays(m, a, dst);
}

/* The head of a single-rid lifecycle message (rsp__msg_encode_head, msg.h):
 * what its handler reads (kind, rid, free; label rides along). */
#define HEAD_BYTES offsetof(rsp_msg, label_name)
_Static_assert(RSP_MSG_INGEST == 0 && RSP_MSG_REMOVE == 1 && RSP_MSG_RESET == 2,
               "rsp__msg_is_single_lifecycle takes kinds 0-2 to be the lifecycle kinds");
_Static_assert(offsetof(rsp_msg, kind) < HEAD_BYTES && offsetof(rsp_msg, rid) < HEAD_BYTES &&
                   offsetof(rsp_msg, label) < HEAD_BYTES && offsetof(rsp_msg, free) < HEAD_BYTES,
               "the head holds kind, rid, label and free");

void rsp__msg_stamp(void *wire, size_t stamped_size, uint64_t ns)
{
    RSP__ASSERT(schema[((rsp_msg *)wire)->kind] & STEP_ARRAYS);
    memcpy((unsigned char *)wire + stamped_size - sizeof ns, &ns, sizeof ns);
}

/* Decode's half for a message with arrays: point m at their copies; a
 * stamp past them (rsp__msg_stamp) into *stamp. */
__attribute__((noinline)) static void decode_arrays(rsp_msg *m, unsigned a, size_t size,
                                                    uint64_t *stamp)
{
    unsigned char *w = (unsigned char *)m;
    (void)size;
    if (a & NAME) {
        m->label_name = (const char *)(w + NAME_AT);
        RSP__ASSERT(memchr(m->label_name, '\0', size - NAME_AT));
        return;
    }
    bool shared;
    const wire_offsets o = wire_offsets_of(m, a, w, &shared);
    RSP__ASSERT(size == o.end || ((a & STEP_ARRAYS) && size == rsp__msg_stamped_size(o.end)));
    if (size != o.end)
        memcpy(stamp, w + size - sizeof *stamp, sizeof *stamp);
    if (a & COMMIT) { /* first: the caller's pointers decide `shared` above */
        rsp_step *c = (rsp_step *)(w + o.commit_decl);
        point_step(w, &o.commit, c);
        if (shared)
            c->rows = (const rsp_row *)(w + o.step.rows);
        m->commit = c;
    }
    if (a & STEP_ARRAYS)
        point_step(w, &o.step, &m->step);
    if (a & RIDS)
        m->rids = (const rsp_rid *)(w + o.rids);
}

const rsp_msg *rsp__msg_decode(void *wire, size_t size)
{
    uint64_t stamp;
    return rsp__msg_decode_stamped(wire, size, &stamp);
}

const rsp_msg *rsp__msg_decode_stamped(void *wire, size_t size, uint64_t *stamp)
{
    rsp_msg *m = wire;
    *stamp = 0;
    RSP__ASSERT(size >= sizeof *m);
    /* The caller's pointers came along with the copy: none may be followed
     * (the flags read m's commit pointer and counts, not what they point
     * at). What the message does not carry is cleared. */
    if (size == sizeof *m) { /* nothing but m: no array, name, commit or list */
        if ((unsigned)m->kind <= (unsigned)RSP_MSG_RESET) {
            /* Written by rsp__msg_encode_head (or in full): past the head
             * the bytes may be an earlier message's. What a handler or a
             * failure report could read is set here. */
            m->event = (rsp_event){0};
            m->seq = 0;
        }
        clear_step(&m->step);
        m->label_name = NULL;
        m->commit = NULL;
        m->rids = NULL;
        m->num_rids = 0;
        return m;
    }
    const unsigned a = arrays_of(m);
    if (!(a & STEP_ARRAYS))
        clear_step(&m->step);
    if (!(a & NAME))
        m->label_name = NULL;
    if (!(a & COMMIT))
        m->commit = NULL;
    if (!(a & RIDS)) {
        m->rids = NULL;
        m->num_rids = 0;
    }
    if (a)
        decode_arrays(m, a, size, stamp);
    return m;
}
