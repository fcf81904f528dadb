/*
 * rsp: the counters and gauges of rsp_stats, listed once.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Included by rsp.h; not a header of its own to include. Each line is
 * X(bits, name, kind, source, help), in rsp_stats's field order (the order
 * is its layout: a new field goes at the end, docs/abi.md):
 *
 *   bits    32 or 64: the field is uint<bits>_t
 *   name    the field of rsp_stats
 *   kind    COUNTER (only grows while the pool lives) or GAUGE (goes up and
 *           down), as Prometheus means them
 *   source  where the library takes it from: LAYOUT (fixed at create),
 *           ACTOR (the transport), CORE (the core's state, mirrored when
 *           the owner settles), OWNER (moved by the owner as it handles
 *           messages). A caller may ignore it.
 *   help    what the field counts, one line: the field's documentation and
 *           the metric's HELP text
 *
 * From this list the library makes the struct (rsp.h), the owner's mirror
 * and its lock-free reader, the table rsp_stats_fields returns (with each
 * field's Prometheus name: "rsp_" name, "_total" after a COUNTER's) and,
 * through that table, the Python package's mirror of the struct.
 */
#ifndef RSP_RSP_STATS_H
#define RSP_RSP_STATS_H

/* Release 0.1's fields: rsp_reply embeds their struct (rsp_stats_0_1),
 * so this part of the list is frozen; new fields go at the end of
 * RSP_STATS_FIELDS below. */
#define RSP_STATS_FIELDS_0_1(X)                                                                    \
    X(32, max_slots, GAUGE, LAYOUT, "slots in the pool, the sink slot included")                   \
    X(32, usable_slots, GAUGE, LAYOUT, "slots that can hold state (max_slots less the sink)")      \
    X(32, free_slots, GAUGE, CORE, "slots free for assignment")                                    \
    X(32, held_slots, GAUGE, CORE, "slots holding a request's state")                              \
    X(32, pending_release, GAUGE, CORE, "slots removed during a step, freed at its end")           \
    X(32, num_requests, GAUGE, CORE, "requests known to the pool")                                 \
    X(32, num_holdings, GAUGE, CORE, "(request, label) holdings")                                  \
    X(32, inbox_depth, GAUGE, ACTOR, "messages queued for the owner")                              \
    X(64, messages_handled, COUNTER, ACTOR, "messages the owner handled")                          \
    X(64, admits_ok, COUNTER, OWNER, "steps admitted")                                             \
    X(64, admits_refused, COUNTER, OWNER, "admits answered ok = false (the pool too full)")        \
    X(64, rollbacks, COUNTER, OWNER, "steps rolled back")                                          \
    X(64, plans, COUNTER, OWNER, "live plans published (promotions included)")                     \
    X(64, stages, COUNTER, OWNER, "staged plans published")                                        \
    X(64, promotions, COUNTER, OWNER, "stages that went live unchanged")                           \
    X(64, commits, COUNTER, OWNER, "steps committed")                                              \
    X(64, forks, COUNTER, OWNER, "slot copies issued")                                             \
    X(64, bytes_zeroed, COUNTER, OWNER, "bytes of slot memory zeroed")                             \
    X(64, bytes_copied, COUNTER, OWNER, "bytes of slot memory copied")                             \
    X(64, generation, COUNTER, CORE, "the pool-wide generation counter")                           \
    X(64, posts_failed, COUNTER, ACTOR,                                                            \
      "messages nobody read the answer of (fire-and-forget, or a forgotten ticket) that failed; "  \
      "see on_error")                                                                              \
    X(32, forward_waits, GAUGE, OWNER,                                                             \
      "forward_done events given to the device whose wait had not run when the owner last "        \
      "looked (after every message and when idle; exact in rsp_stats_snapshot): what "             \
      "rsp_pool_close would wait for")                                                             \
    X(32, checkpoints_device, GAUGE, CORE, "checkpoints stored on the device tier")                \
    X(32, checkpoints_host, GAUGE, CORE,                                                           \
      "checkpoints stored on the host tier (swapped requests' slots not included)")                \
    X(32, swapped_slots, GAUGE, CORE, "host-tier slots holding swapped-out requests' state")       \
    X(64, checkpoints_taken, COUNTER, OWNER, "checkpoints taken")                                  \
    X(64, checkpoints_restored, COUNTER, OWNER, "restores copied (live plans)")                    \
    X(64, checkpoints_evicted, COUNTER, OWNER, "checkpoints dropped for room (not demotions)")     \
    X(64, checkpoints_demoted, COUNTER, OWNER,                                                     \
      "checkpoints moved from the device to the host tier for room")                               \
    X(64, checkpoints_dropped, COUNTER, OWNER,                                                     \
      "checkpoints dropped by rsp_checkpoint_drop or replaced under their key")                    \
    X(64, checkpoints_skipped, COUNTER, OWNER, "takes declared in a step that found no room")      \
    X(64, swaps_out, COUNTER, OWNER, "requests swapped out to the host tier")                      \
    X(64, swaps_in, COUNTER, OWNER, "requests swapped back in")

#define RSP_STATS_FIELDS(X)                                                                        \
    RSP_STATS_FIELDS_0_1(X)                                                                        \
    X(64, checkpoint_hits_device, COUNTER, OWNER, "restores copied from the device tier")          \
    X(64, checkpoint_hits_host, COUNTER, OWNER, "restores copied from the host tier")              \
    X(64, checkpoint_misses, COUNTER, OWNER,                                                       \
      "admits refused because a restore named a key not stored (RSP_ENOKEY)")                      \
    X(64, checkpoints_evicted_device, COUNTER, OWNER,                                              \
      "checkpoints dropped for room from the device tier")                                         \
    X(64, checkpoints_evicted_host, COUNTER, OWNER,                                                \
      "checkpoints dropped for room from the host tier")                                           \
    X(64, checkpoint_bytes_restored, COUNTER, OWNER, "bytes copied by restores")                   \
    X(64, checkpoint_value_restored, COUNTER, OWNER,                                               \
      "the values (rsp_checkpoint_value) of the checkpoints restored, summed: recompute saved")    \
    X(64, guard_checks, COUNTER, OWNER, "commits guard mode checked")                              \
    X(64, guard_violations, COUNTER, OWNER,                                                        \
      "slots guard mode found written by a forward that did not address them (each one "           \
      "reported to on_error)")

#endif
