/*
 * The public entry points, a thin face: argument, fork and read-section
 * checks, validation, then one call (pool lifecycle: pool.c; messages:
 * encoded by msg.c, posted to the actor, handled by pool_handler.c). The
 * synchronous wrappers are in api_sync.c, the read side in api_read.c.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Every message is validated here, before it reaches the owner: an invalid
 * one is refused with a status and a message naming the field, and nothing
 * is queued. What only the owner can know (step order, stages, duplicate
 * rows, capacity) comes back through the ticket.
 *
 * Owners of the other public functions: core/layout.c (config init, shard
 * shapes, dtype size), util/error.c (rsp_strerror). Host fences are
 * implemented in device/host_fence.c; their public entry points are here, with
 * the fork check every entry point makes.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/layout.h"
#include "face.h"
#include "msg.h"
#include "validate.h"
#include "pool.h"
#include "util/error.h"
#include "util/sync.h"
#include "util/time.h"

/* ------------------------------------------------------------------------ */
/* fork() without exec(): liburcu and the owner thread do not survive it.   */
/* ------------------------------------------------------------------------ */

/* Set in the child by the atfork handler; any thread reads it relaxed (a
 * forked child starts with one thread, which is the one that set it). The
 * handler is registered by the first call that creates something a child
 * could inherit (a pool, a host fence, a reader registration). */
uint32_t rsp__forked_child;
static pthread_once_t rsp__atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
    rsp__store_relaxed_u32(&rsp__forked_child, 1);
    rsp__reader_fork_child(); /* the read side's fast paths check no flag */
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, on_fork_child);
}

void rsp__face_atfork(void)
{
    pthread_once(&rsp__atfork_once, register_atfork);
}

bool rsp__forked(void)
{
    return rsp__face_forked();
}

rsp_status rsp__fail_forked(rsp_error *err)
{
    return rsp__fail(err, RSP_EFORKED,
                     "called in a child after fork() without exec(): rsp does not survive fork");
}

/* ------------------------------------------------------------------------ */
/* Waiting inside a read section                                             */
/* ------------------------------------------------------------------------ */

/* A thread inside rsp_read_begin/end must not wait for the owner: past the
 * retired-plan cap the owner waits for a grace period, i.e. for that very
 * section to end (docs/ordering.md), and neither would move again. Every
 * call that waits on the owner refuses instead, before posting anything. */
#define IN_SECTION_MSG                                                                             \
    "called inside a read section: end it (or take rsp_plan_ref) first; an online QSBR reader: "   \
    "rsp_reader_offline first"

rsp_status rsp__fail_in_section(rsp_error *err, const char *what)
{
    return rsp__fail(err, RSP_EINVAL, "%s " IN_SECTION_MSG, what);
}

/* ------------------------------------------------------------------------ */
/* Pool                                                                      */
/* ------------------------------------------------------------------------ */

rsp_status rsp_pool_create(const rsp_pool_config *cfg, rsp_pool **out, rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "out is NULL");
    *out = NULL;
    if (!cfg)
        return rsp__fail(err, RSP_EINVAL, "cfg is NULL");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    rsp__face_atfork();
    rsp_pool_config mine; /* the caller's, of its struct_size (docs/abi.md) */
    rsp_status st = rsp__config_import(cfg, &mine, err);
    if (st != RSP_OK)
        return st;
    return rsp__pool_create(&mine, out, err);
}

rsp_status rsp_pool_close(rsp_pool *pool, rsp_error *err)
{
    if (!pool)
        return RSP_OK;
    if (rsp__face_forked()) {
        /* The owner, reclaimer and device threads exist only in the parent:
         * joining them would hang. Leave everything; exec() or exit
         * reclaims it. */
        return rsp__fail(err, RSP_EFORKED,
                         "rsp_pool_close: called in a child after fork() without exec(): the "
                         "pool's threads exist only in the parent, nothing was freed");
    }
    /* Destroy waits for a grace period, i.e. for this thread's own
     * section: refuse instead (the pool stays usable). */
    if (rsp__in_read_section())
        return rsp__fail(err, RSP_EINVAL,
                         "rsp_pool_close: called inside a read section, and destroying waits "
                         "for a grace period, i.e. for that section: end it, then call again "
                         "(nothing was destroyed)");
    rsp__pool_destroy(pool);
    return RSP_OK;
}

/* What is left of a wait until deadline, as a timeout (forever stays
 * forever). */
static uint64_t time_left_ns(uint64_t deadline)
{
    if (deadline == RSP__NO_DEADLINE)
        return RSP_WAIT_FOREVER;
    uint64_t now = rsp__now_ns();
    return deadline > now ? deadline - now : 0;
}

/* The messages posted before the close handled, within the deadline:
 * false when the owner was late (or the inbox full). */
static bool close_barrier(rsp_pool *pool, uint64_t timeout_ns, uint64_t deadline)
{
    rsp_msg barrier = {.kind = RSP_MSG_BARRIER};
    rsp_ticket *t = NULL;
    rsp_status st = rsp_post(pool, &barrier, &t, timeout_ns, NULL);
    if (st == RSP_OK) {
        st = rsp_wait(t, time_left_ns(deadline), NULL);
        if (st == RSP_ETIMEDOUT || st == RSP_EAGAIN)
            rsp_ticket_forget(t);
    }
    return !(st == RSP_ETIMEDOUT || st == RSP_EAGAIN || st == RSP_EFULL);
}

/* rsp_pool_close_timed's refusal, naming everything still held: each part
 * is short so that all of them fit in one message. */
static rsp_status close_held(rsp_error *err, bool owner_late, const rsp_close_report *rep,
                             uint32_t refs, bool grace_late)
{
    char held[RSP_ERROR_MAX] = "";
    size_t n = 0;
#define HELD(...)                                                                                  \
    (n += (size_t)snprintf(held + n, n < sizeof held ? sizeof held - n : 0, __VA_ARGS__))
    if (owner_late)
        HELD("the owner had not handled the messages posted before it; ");
    if (rep->forward_waits)
        HELD("%u forward_done wait(s) not run (oldest: step %llu): signal their events; ",
             rep->forward_waits, (unsigned long long)rep->step_ids[0]);
    if (refs)
        HELD("%u plan reference%s held (rsp_plan_unref); ", refs, refs == 1 ? "" : "s");
    if (grace_late)
        HELD("no grace period (a read section open on another thread?); ");
#undef HELD
    n = strlen(held);
    if (n >= 2)
        held[n - 2] = '\0'; /* the last "; " */
    return rsp__fail(err, RSP_ETIMEDOUT,
                     "rsp_pool_close_timed: nothing destroyed; at the timeout: %s", held);
}

/* Everything rsp_pool_close waits for, bounded by one deadline and before
 * anything is torn down: the messages posted before the call (a barrier),
 * the device's forward_done waits, the callers' plan references, and a
 * grace period (another thread's read section). Once one is late the rest
 * are only looked at (the close fails anyway), and a grace period only
 * when nothing else is held. RSP_OK, or RSP_ETIMEDOUT naming what is held,
 * the pool as it was. */
static rsp_status close_wait(rsp_pool *pool, uint64_t timeout_ns, rsp_close_report *out,
                             rsp_error *err)
{
    rsp_close_report local;
    rsp_close_report *rep = out ? out : &local;
    memset(rep, 0, sizeof *rep);
    const uint64_t deadline = rsp__deadline(timeout_ns);
    const bool owner_late = !close_barrier(pool, timeout_ns, deadline);
    rsp_status fw =
        rsp__pool_forward_waits(pool, owner_late ? 0 : time_left_ns(deadline), rep, NULL);
    const bool late = owner_late || fw != RSP_OK;
    uint32_t refs = rsp__publisher_refs_wait(pool->pub, late ? 0 : deadline);
    bool grace_late =
        !late && refs == 0 && rsp__publisher_grace_timed(pool->pub, deadline) != RSP_OK;
    if (!late && refs == 0 && !grace_late)
        return RSP_OK;
    return close_held(err, owner_late, rep, refs, grace_late);
}

rsp_status rsp_pool_close_timed(rsp_pool *pool, uint64_t timeout_ns, rsp_close_report *out,
                                rsp_error *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!pool)
        return RSP_OK;
    if (rsp__face_forked())
        return rsp__fail(err, RSP_EFORKED,
                         "rsp_pool_close_timed: called in a child after fork() without exec(): "
                         "nothing was freed");
    if (rsp__in_read_section())
        return rsp__fail(err, RSP_EINVAL,
                         "rsp_pool_close_timed: called inside a read section: end it, then call "
                         "again (nothing was destroyed)");
    rsp_status st = close_wait(pool, timeout_ns, out, err);
    if (st != RSP_OK)
        return st;
    rsp__pool_destroy(pool);
    if (out)
        out->closed = true;
    return RSP_OK;
}

void rsp_pool_destroy(rsp_pool *pool)
{
    (void)rsp_pool_close(pool, NULL);
}

rsp_status rsp_pool_info_get(const rsp_pool *pool, rsp_pool_info *out, rsp_error *err)
{
    if (!pool || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : "out");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    const rsp__layout *l = pool->layout;
    *out = (rsp_pool_info){
        .num_layers = l->num_layers,
        .num_blocks = l->num_blocks,
        .max_slots = l->max_slots,
        .usable_slots = l->usable_slots,
        .sink = l->sink,
        .pad_index = l->pad_index,
        .slot_bytes = l->slot_bytes,
        .total_bytes = l->total_bytes,
        .device = pool->device_kind,
        .owner_cpu = pool->owner_cpu,
    };
    return RSP_OK;
}

rsp_status rsp_pool_block(const rsp_pool *pool, const char *name, uint32_t layer,
                          rsp_block_view *out, rsp_error *err)
{
    if (!pool || !name || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : !name ? "name" : "out");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    const rsp__layout *l = pool->layout;
    uint32_t b = 0;
    while (b < l->num_blocks && strncmp(l->blocks[b].name, name, RSP_NAME_MAX) != 0)
        b++;
    if (b == l->num_blocks)
        return rsp__fail(err, RSP_EINVAL, "no block named \"%.*s\"", RSP_NAME_MAX, name);
    if (layer >= l->num_layers)
        return rsp__fail(err, RSP_EINVAL, "layer %u out of range (the pool has %u layers)", layer,
                         l->num_layers);
    const rsp__block_layout *bl = &l->blocks[b];
    rsp_block_view v;
    memset(&v, 0, sizeof v);
    v.data = (char *)rsp__device_block_base(pool->dev, b) + (uint64_t)layer * bl->layer_bytes;
    v.dtype = bl->dtype;
    v.ndim = 1 + bl->ndim;
    v.shape[0] = l->max_slots;
    for (uint32_t d = 0; d < bl->ndim; d++)
        v.shape[1 + d] = bl->shape[d];
    int64_t stride = 1;
    for (uint32_t d = v.ndim; d-- > 0;) {
        v.strides[d] = stride;
        stride *= v.shape[d];
    }
    *out = v;
    return RSP_OK;
}

/* rsp_stats begins with 0.1's fields, laid out alike: rsp_reply.stats
 * is copied into it as bytes. */
_Static_assert(sizeof(rsp_stats_0_1) <= sizeof(rsp_stats) &&
                   offsetof(rsp_stats_0_1, swaps_in) == offsetof(rsp_stats, swaps_in),
               "rsp_stats starts with rsp_stats_0_1");

rsp_status rsp_stats_peek_size(const rsp_pool *pool, rsp_stats *out, size_t size, rsp_error *err)
{
    if (!pool || !out)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : "out");
    if (size < sizeof(rsp_stats_0_1))
        return rsp__fail(err, RSP_EINVAL, "size = %zu: below 0.1's rsp_stats (%zu bytes)", size,
                         sizeof(rsp_stats_0_1));
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    rsp_stats all;
    rsp__pool_read_counters(pool, &all);
    memcpy(out, &all, size < sizeof all ? size : sizeof all);
    return RSP_OK;
}

/* The exported name: what a program built against 0.1 or 0.2 calls. */
rsp_status(rsp_stats_peek)(const rsp_pool *pool, rsp_stats *out, rsp_error *err)
{
    return rsp_stats_peek_size(pool, out, sizeof(rsp_stats_0_1), err);
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

static void drop_fence(void *fence)
{
    rsp__fence_unref(fence);
}

/* The host fence a message names as forward_done, if it holds one
 * (validated: a host fence with a matching tag on a host pool). */
static rsp_host_fence *message_fence(const rsp_msg *m)
{
    if (m->kind != RSP_MSG_COMMIT && m->kind != RSP_MSG_ROLLBACK &&
        !(m->kind == RSP_MSG_STEP && m->commit))
        return NULL;
    if (m->event.kind != RSP_EVENT_HOST_FENCE || !m->event.handle)
        return NULL;
    return m->event.handle;
}

rsp_status rsp__post(rsp_pool *pool, const rsp_msg *msg, rsp_ticket **ticket, uint64_t timeout_ns,
                     bool sync, rsp_error *err)
{
    if (ticket)
        *ticket = NULL;
    if (!pool || !msg)
        return rsp__fail(err, RSP_EINVAL, "%s is NULL", !pool ? "pool" : "msg");
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    /* A single-rid INGEST, REMOVE or RESET has nothing for validate to
     * look at, no fence, and a fixed wire size (msg.h): the frequent small
     * messages skip those steps. */
    const bool single = rsp__msg_is_single_lifecycle(msg);
    rsp_status st = single ? RSP_OK : rsp__msg_validate(pool, msg, err);
    if (st == RSP_OK)
        st = rsp__msg_check_seq(pool, msg, err);
    if (st != RSP_OK)
        return st;
    /* Inside a read section a wait for credit could wait for an owner that
     * waits for the section: take what is free now, or refuse (RSP_EFULL). */
    const bool in_section = timeout_ns != 0 && rsp__in_read_section();
    if (in_section)
        timeout_ns = 0;
    /* The message travels as its wire form (msg.h): the actor moves the
     * bytes, the owner's handler (pool.c) decodes them. Fire-and-forget
     * tickets are recycled by the actor (the owner frees them: no
     * cross-thread malloc/free per message); kept ones are freed by their
     * waiter, on its own thread, and may outlive the pool. */
    void *wire;
    /* A PLAN or STEP carries its post time while the latency histograms
     * are on (post to plan published); off, no clock is read. */
    const uint64_t stamp = single ? 0 : rsp__latency_stamp(pool, msg);
    size_t wire_size = single ? sizeof *msg : rsp__msg_wire_size(msg);
    if (stamp)
        wire_size = rsp__msg_stamped_size(wire_size);
    rsp_ticket *t = rsp__actor_ticket_new(ticket ? NULL : pool->actor, wire_size, &wire);
    if (!t)
        return rsp__fail(err, RSP_ENOMEM, "out of memory copying the message");
    if (single)
        rsp__msg_encode_head(msg, wire);
    else
        rsp__msg_encode(msg, wire);
    if (stamp)
        rsp__msg_stamp(wire, wire_size, stamp);
    /* Ordered pools: the transport delivers in this number's order (a
     * shutdown is the inbox's last message and never waits). */
    if (pool->ordered && msg->kind != RSP_MSG_SHUTDOWN)
        rsp__ticket_set_seq(t, msg->seq);
    /* H1: a commit's or rollback's host fence is referenced before the post
     * returns: the caller may destroy its handle at once, and the owner may
     * handle the message much later (docs/ordering.md, "fence references").
     * The ticket drops it once the message is handled, or when the post is
     * refused; the device takes its own for the WAIT it queues. */
    rsp_host_fence *fence = single ? NULL : message_fence(msg);
    if (fence) {
        rsp__fence_ref(fence);
        rsp__ticket_hold(t, drop_fence, fence);
    }
    /* A shutdown is the inbox's last message: it closes the inbox behind
     * it (and takes no credit). */
    if (!single && msg->kind == RSP_MSG_SHUTDOWN)
        st = rsp__actor_close(pool->actor, t, ticket != NULL, err);
    else if (sync && ticket)
        st = rsp__actor_post_call(pool->actor, t, timeout_ns, err);
    else
        st = rsp__actor_post(pool->actor, t, ticket != NULL, timeout_ns, err);
    if (st == RSP_OK && ticket)
        *ticket = t;
    if (st == RSP_EFULL && in_section)
        return rsp__fail(err, RSP_EFULL,
                         "rsp_post: the inbox is full and the caller is inside a read section, "
                         "where it may not wait for credit (the owner may be waiting for the "
                         "section to end): end it first");
    return st;
}

rsp_status rsp_post(rsp_pool *pool, const rsp_msg *msg, rsp_ticket **ticket, uint64_t timeout_ns,
                    rsp_error *err)
{
    /* The dump's owner writes into its caller's memory while the caller
     * waits: rsp_pool_dump's own post only (pool.h, rsp__dump_args). */
    if (msg && msg->kind == RSP_MSG_DUMP)
        return rsp__fail(err, RSP_EINVAL,
                         "msg->kind RSP_MSG_DUMP is sent by rsp_pool_dump only (call it)");
    return rsp__post(pool, msg, ticket, timeout_ns, false, err);
}

rsp_status rsp_wait(rsp_ticket *ticket, uint64_t timeout_ns, rsp_reply *reply)
{
    rsp_status st;
    if (!ticket) {
        st = RSP_EINVAL;
        if (reply) {
            memset(reply, 0, sizeof *reply);
            rsp__fail(&reply->error, st, "ticket is NULL");
        }
        return st;
    }
    if (rsp__face_forked()) {
        /* The owner that would answer does not exist in this process. */
        if (reply) {
            memset(reply, 0, sizeof *reply);
            rsp__fail_forked(&reply->error);
        }
        return RSP_EFORKED;
    }
    if (timeout_ns != RSP_WAIT_POLL && rsp__in_read_section()) {
        /* The ticket stays valid: the caller polls, or waits after the section. */
        if (reply) {
            memset(reply, 0, sizeof *reply);
            rsp__fail_in_section(&reply->error, "rsp_wait (with a timeout)");
        }
        return RSP_EINVAL;
    }
    return rsp__ticket_wait(ticket, timeout_ns, reply);
}

void rsp_ticket_forget(rsp_ticket *ticket)
{
    if (ticket && !rsp__face_forked())
        rsp__ticket_forget(ticket);
}

/* ------------------------------------------------------------------------ */
/* Events and host fences                                                    */
/* ------------------------------------------------------------------------ */

rsp_status rsp_host_fence_create(rsp_host_fence **out, rsp_error *err)
{
    if (!out)
        return rsp__fail(err, RSP_EINVAL, "rsp_host_fence_create: out is NULL");
    *out = NULL;
    if (rsp__face_forked())
        return rsp__fail_forked(err);
    rsp__face_atfork();
    return rsp__fence_create(out, err);
}

/* In a forked child the fence may be waited on by a device worker that
 * exists only in the parent: every fence call does nothing there. */
void rsp_host_fence_destroy(rsp_host_fence *fence)
{
    if (!rsp__face_forked() && rsp__fence_valid(fence))
        rsp__fence_unref(fence);
}

void rsp_host_fence_signal(rsp_host_fence *fence, uint64_t value)
{
    if (!rsp__face_forked() && rsp__fence_valid(fence))
        rsp__fence_signal(fence, value);
}

uint64_t rsp_host_fence_value(const rsp_host_fence *fence)
{
    if (rsp__face_forked() || !rsp__fence_valid(fence))
        return 0;
    return rsp__fence_value(fence);
}

rsp_status rsp_host_fence_wait(const rsp_host_fence *fence, uint64_t value, uint64_t timeout_ns)
{
    if (rsp__face_forked())
        return RSP_EFORKED;
    if (!rsp__fence_valid(fence))
        return RSP_EINVAL;
    return rsp__fence_wait(fence, value, timeout_ns);
}
