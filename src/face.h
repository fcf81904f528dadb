/*
 * Internal to the face (api.c, api_sync.c, api_read.c): the fork guard
 * every public entry point checks, and the refusal of a wait inside a read
 * section.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_FACE_H
#define RSP_FACE_H

#include <stdbool.h>
#include <stdint.h>

#include <rsp/rsp.h>

#include "util/sync.h"

/* Set in a forked child by the atfork handler (api.c), never cleared. */
extern uint32_t rsp__forked_child;

/* Whether this process is a child forked from one that used rsp (liburcu
 * and the owner thread do not survive fork() without exec()). Any thread,
 * one relaxed load: a forked child starts with one thread, the one that
 * set the flag. */
static inline bool rsp__face_forked(void)
{
    return rsp__load_relaxed_u32(&rsp__forked_child) != 0;
}

/* Register the atfork handler that sets the flag, once per process; called
 * by each call that creates something a child could inherit (a pool, a
 * host fence, a reader registration). Any thread. */
void rsp__face_atfork(void);

/* rsp_post (api.c); sync: the caller passes the ticket to rsp_wait at
 * once (the synchronous wrappers), so the actor may run the message on
 * the caller's thread while the owner sleeps (rsp__actor_post_call). Any
 * thread. */
rsp_status rsp__post(rsp_pool *pool, const rsp_msg *msg, rsp_ticket **ticket, uint64_t timeout_ns,
                     bool sync, rsp_error *err);

/* RSP_EINVAL: `what` was called inside a read section, where waiting for
 * the owner could wait for that very section's end (docs/ordering.md).
 * Any thread; the error path only. */
rsp_status rsp__fail_in_section(rsp_error *err, const char *what);

#endif
