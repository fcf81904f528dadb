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
 *   after it, aligned     m.step.rows[num_rows]          ADMIT, PLAN, COMMIT
 *   then, aligned         m.step.pre_forks[num_pre]      ADMIT, PLAN, COMMIT
 *   then                  m.step.post_forks[num_post]    ADMIT, PLAN, COMMIT
 *   then                  m.label_name and its NUL       LABEL
 *
 * A kind not listed carries no array. A new kind with an array is one more
 * line in msg.c's carries_* helpers; one without is nothing here.
 */
#ifndef RSP_MSG_H
#define RSP_MSG_H

#include <stddef.h>

#include <rsp/rsp.h>

/* Bytes of m's wire form. m was validated (its arrays are there, its label
 * name is NUL-terminated). Any thread; O(1) (a strlen for LABEL). */
size_t rsp__msg_wire_size(const rsp_msg *m);

/* Write m's wire form, rsp__msg_wire_size(m) bytes, to dst (aligned for
 * rsp_msg): a copy of m, then a copy of each array its kind carries. After
 * this the caller's arrays may change. Any thread; O(size), no allocation. */
void rsp__msg_encode(const rsp_msg *m, void *dst);

/* The message a wire form holds, decoded in place: the result lives in
 * wire, its pointers point at the arrays inside wire (NULL for an empty or
 * absent one), and the step counts of a kind without a step are zero. Valid
 * while wire is. size: the payload's bytes (checked in debug builds). The
 * handler's thread; O(1). */
const rsp_msg *rsp__msg_decode(void *wire, size_t size);

#endif
