/*
 * The rules a step declaration must follow, as pure functions: each rule
 * lives here once, with its one message. The core runs them on every
 * admit, plan and commit (step.c); the face (api.c) runs the ones it can
 * know before a message is queued (NULL arrays, interned labels), so a
 * caller gets the same words from either. SPDX-License-Identifier: Apache-2.0
 *
 * Nothing here reads core state: what a rule needs (the number of interned
 * labels, the row bound, the label names for a message) is passed. Any
 * thread. Duplicate rows are not here: finding them needs the core's hash
 * set (step.c).
 */
#ifndef RSP_CORE_CHECK_H
#define RSP_CORE_CHECK_H

#include <rsp/rsp.h>

/* Fork entries per list (pre or post) of one step: one per (from, to). */
#define RSP__MAX_FORKS (RSP_MAX_LABELS * RSP_MAX_LABELS)

/* Rows of one label in a step, a lease's bucket_bs and a graph max_bs are
 * at most max(8192, 2 x max_slots). Each row with state addresses a slot of
 * its own, so past 2 x max_slots a batch is only padding; the floor lets a
 * small pool serve the usual graph buckets (and tests). Each bound row
 * costs a few bytes per plan, so this caps a plan at tens of MiB instead
 * of letting one call ask for gigabytes. Fits 32 bits: max_slots <=
 * INT32_MAX. O(1). */
#define RSP__ROWS_FLOOR 8192u
static inline uint32_t rsp__max_rows(uint32_t max_slots)
{
    uint32_t n = 2u * max_slots;
    return n > RSP__ROWS_FLOOR ? n : RSP__ROWS_FLOOR;
}

/* rsp_row keeps its 24 bytes: skip_post_forks and fork_group live in what
 * was padding after `padding` (a declaration stays cheap to copy). */
_Static_assert(sizeof(rsp_row) == 24, "rsp_row must stay 24 bytes");

/* A fork's group names a row group (uint16), or 0 (every rid). */
#define RSP__MAX_FORK_GROUP UINT16_MAX

/* Does fork f apply to a rid whose rows carry `group` (0 or its group)? */
static inline bool rsp__fork_applies(const rsp_fork *f, uint16_t group)
{
    return f->group == 0 || f->group == group;
}

/* Has any fork of f[0 .. n) a group? O(n). */
static inline bool rsp__forks_grouped(const rsp_fork *f, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (f[i].group)
            return true;
    return false;
}

/* A row addresses a slot (and may take one): not padding, span > 0. */
static inline bool rsp__row_addresses(const rsp_row *row)
{
    return !row->padding && row->span > 0;
}

/* Does a row ask for per-token states (validated: the byte is 0 or 1)? */
static inline bool rsp__row_per_token(const rsp_row *row)
{
    return row->per_token_states == 1 && rsp__row_addresses(row);
}

/* step is not NULL, and rows, pre_forks, post_forks, checkpoints and
 * restores are not NULL when their counts are not 0 (RSP_EINVAL). O(1). */
rsp_status rsp__check_arrays(const rsp_step *step, rsp_error *err);

/* Fork lists of at most RSP__MAX_FORKS entries; every fork's group at
 * most RSP__MAX_FORK_GROUP; a lease's bucket_bs in 1 .. max_rows
 * (RSP_EINVAL). O(forks). */
rsp_status rsp__check_limits(const rsp_step *step, uint32_t max_rows, rsp_error *err);

/* label is one of the num_labels interned ones (RSP_ENOLABEL). O(1). */
rsp_status rsp__check_label(rsp_label_id label, uint32_t num_labels, rsp_error *err);

/* Every row's label is interned (RSP_ENOLABEL); *per_token: whether some
 * row's per_token_states byte is not 0 (only then need rsp__check_spec_rows
 * and rsp__check_accepted read the rows). O(rows). */
rsp_status rsp__check_row_labels(const rsp_step *step, uint32_t num_labels, bool *per_token,
                                 rsp_error *err);

/* The same, and at most max_rows rows per label (RSP_EINVAL, naming the
 * label: names[l] is label l's name), in one pass. O(rows). */
rsp_status rsp__check_rows(const rsp_step *step, uint32_t num_labels, uint32_t max_rows,
                           const char (*names)[RSP_NAME_MAX], rsp_error *err);

/* Rows with per-token states (docs/semantics.md 9.3): per_token_states
 * is 0 or 1, and a row with 1 is no padding row and has 1 <= span <=
 * RSP_SPEC_MAX_TOKENS (RSP_EINVAL naming the row). *any (may be NULL):
 * whether some row has it. O(rows). */
rsp_status rsp__check_spec_rows(const rsp_step *step, bool *any, rsp_error *err);

/* A commit's accepted counts: at most the row's span on a per-token row
 * (RSP_EINVAL naming the row); ignored elsewhere. O(rows). */
rsp_status rsp__check_accepted(const rsp_step *step, rsp_error *err);

/* Every pre- and post-fork's from and to are interned (RSP_ENOLABEL).
 * O(forks). */
rsp_status rsp__check_forks(const rsp_step *step, uint32_t num_labels, rsp_error *err);

/* Checkpoints and restores: none in a capture step
 * (RSP_EINVAL); every entry's label interned (RSP_ENOLABEL); every take's
 * tier one of rsp_tier (RSP_EINVAL). Restores first, then checkpoints, in
 * entry order. Run after rsp__check_forks, by rsp_post and the core
 * alike. O(entries). */
rsp_status rsp__check_ckpt_decls(const rsp_step *step, uint32_t num_labels, rsp_error *err);

/* The messages of the rules "each restore and each checkpoint names a row
 * of the step with span > 0" and "no (rid, label) restored twice, no key
 * taken twice" (RSP_EINVAL): entry i of restores (restore) or
 * checkpoints; first: the earlier entry it repeats. Finding them needs
 * the core's hash set (step.c), like duplicate rows, which also bounds
 * each list by the row bound. O(1). */
rsp_status rsp__fail_ckpt_row(const rsp_step *step, bool restore, uint32_t i, rsp_error *err);
rsp_status rsp__fail_ckpt_dup(const rsp_step *step, bool restore, uint32_t i, uint32_t first,
                              rsp_error *err);

/* The message of the rule "all non-padding rows of one rid carry one
 * fork_group" (RSP_EINVAL): rows[i] carries another group than rows[first],
 * an earlier row of the same rid. Finding them needs the core's hash set
 * (step.c), like duplicate rows. O(1). */
rsp_status rsp__fail_fork_group(const rsp_step *step, uint32_t i, uint32_t first, rsp_error *err);

#endif
