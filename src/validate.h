/*
 * The face's validator: every check rsp_post makes of a message before it
 * is queued (the owner checks the rest: duplicate rows, order, capacity,
 * and answers through the ticket). SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_VALIDATE_H
#define RSP_VALIDATE_H

#include <rsp/rsp.h>

#include "pool.h"

/* The message's own rules: its kind, the step declaration(s) it carries
 * (arrays, interned labels, forks, checkpoint declarations: core/check.h),
 * a commit's forward_done (an event kind the pool's device can wait on,
 * named when a row wrote), id lists, a checkpoint's tier and label, a
 * label name, a graph batch. RSP_EINVAL / RSP_ENOLABEL naming the field;
 * nothing changed. Any thread. O(rows + forks + declarations). */
rsp_status rsp__msg_validate(const rsp_pool *pool, const rsp_msg *m, rsp_error *err);

/* An ordered pool's message carries its number (all kinds but the
 * queries, the barrier and the shutdown): RSP_EINVAL otherwise. Any
 * thread, O(1). */
rsp_status rsp__msg_check_seq(const rsp_pool *pool, const rsp_msg *m, rsp_error *err);

#endif
