/*
 * Internal: the wire form of a message, the bytes a ticket carries from
 * rsp_post (api.c, which encodes) to the owner's handler (pool.c, which
 * decodes). The actor moves them without looking.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Layout, for a message m (offsets from the start of the payload, which the
 * actor aligns for any object):
 *
 *   0                     m itself, as the caller gave it (its array
 *                         pointers are the caller's and never followed:
 *                         decode replaces them)
 *   ADMIT, PLAN, COMMIT, STEP:
 *   after it, aligned     m.step.rows[num_rows]
 *   then, aligned         m.step.pre_forks[num_pre_forks]
 *   then                  m.step.post_forks[num_post_forks]
 *   then, aligned         m.step.checkpoints[num_checkpoints]
 *   then, aligned         m.step.restores[num_restores]
 *   STEP with a commit:
 *   then, aligned         *m.commit (the declaration itself)
 *   then, the same five   m.commit->rows, pre_forks, post_forks, checkpoints,
 *                         restores
 *   INGEST, REMOVE, RESET with num_rids > 0:
 *   after it, aligned     m.rids[num_rids]
 *   LABEL:
 *   right after it        m.label_name and its NUL
 *
 *   PLAN, STEP posted while the pool's latency histograms are on:
 *   then, aligned to 8    the post stamp (uint64_t ns; rsp__msg_stamp)
 *
 *   INGEST, REMOVE, RESET without a list (the frequent small messages):
 *   sizeof(rsp_msg) bytes, of which only m's head (kind, rid, label,
 *   free: the fields before label_name) is written (rsp__msg_encode_head);
 *   decode clears the rest that any handler reads.
 *
 * A kind not listed carries no array: its wire form is m alone. Decoding
 * clears what the kind does not carry (a step's counts, commit, the rid
 * list, the name), so the owner never follows a caller's pointer. A new
 * kind that carries a step's arrays, a rid list or a name is one line in
 * msg.c's schema table; one without arrays is nothing here.
 */
#ifndef RSP_MSG_H
#define RSP_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <rsp/rsp.h>

/* Bytes of m's wire form. m was validated (its arrays are there, its label
 * name is NUL-terminated). Any thread; O(1) (a strlen for LABEL). */
size_t rsp__msg_wire_size(const rsp_msg *m);

/* Write m's wire form, rsp__msg_wire_size(m) bytes, to dst (aligned for
 * rsp_msg): a copy of m, then a copy of each array its kind carries. After
 * this the caller's arrays may change. Any thread; O(size), no allocation. */
void rsp__msg_encode(const rsp_msg *m, void *dst);

/* Whether m is an INGEST, REMOVE or RESET of one rid (no list): it needs
 * no validation past rsp_post's NULL checks, and its wire form is
 * sizeof(rsp_msg) bytes written by rsp__msg_encode_head. Any thread; O(1). */
static inline bool rsp__msg_is_single_lifecycle(const rsp_msg *m)
{
    return (unsigned)m->kind <= (unsigned)RSP_MSG_RESET && m->num_rids == 0;
}

/* rsp__msg_encode for a message of rsp__msg_is_single_lifecycle: m's head
 * only (kind, rid, label, free: a 24-byte copy instead of the whole
 * message's; msg.c checks the layout). Inline: every such post. Any
 * thread; O(1). */
static inline void rsp__msg_encode_head(const rsp_msg *m, void *dst)
{
    memcpy(dst, m, offsetof(rsp_msg, label_name));
}

/* The message a wire form holds, decoded in place: the result lives in
 * wire, its pointers point at the arrays inside wire (NULL for an empty or
 * absent one), and what the kind does not carry is cleared. Valid
 * while wire is. size: the payload's bytes (checked in debug builds). The
 * handler's thread; O(1). */
const rsp_msg *rsp__msg_decode(void *wire, size_t size);

/* The post stamp a wire form may end with: bytes of the wire form of m
 * (rsp__msg_wire_size's) with one, and the stamp written there. Only a
 * kind with a step's arrays (PLAN, STEP) carries one: decode tells it
 * from its size. Any thread; O(1). */
static inline size_t rsp__msg_stamped_size(size_t wire_size)
{
    return ((wire_size + 7) & ~(size_t)7) + sizeof(uint64_t);
}
void rsp__msg_stamp(void *wire, size_t stamped_size, uint64_t ns);

/* rsp__msg_decode, and the stamp the wire form carries (0: none). */
const rsp_msg *rsp__msg_decode_stamped(void *wire, size_t size, uint64_t *stamp);

#endif
