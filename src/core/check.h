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

/* A row addresses a slot (and may take one): not padding, span > 0. */
static inline bool rsp__row_addresses(const rsp_row *row)
{
    return !row->padding && row->span > 0;
}

/* step is not NULL, and rows, pre_forks and post_forks are not NULL when
 * their counts are not 0 (RSP_EINVAL). O(1). */
rsp_status rsp__check_arrays(const rsp_step *step, rsp_error *err);

/* Fork lists of at most RSP__MAX_FORKS entries; a lease's bucket_bs in
 * 1 .. max_rows (RSP_EINVAL). O(1). */
rsp_status rsp__check_limits(const rsp_step *step, uint32_t max_rows, rsp_error *err);

/* label is one of the num_labels interned ones (RSP_ENOLABEL). O(1). */
rsp_status rsp__check_label(rsp_label_id label, uint32_t num_labels, rsp_error *err);

/* Every row's label is interned (RSP_ENOLABEL). O(rows). */
rsp_status rsp__check_row_labels(const rsp_step *step, uint32_t num_labels, rsp_error *err);

/* The same, and at most max_rows rows per label (RSP_EINVAL, naming the
 * label: names[l] is label l's name), in one pass. O(rows). */
rsp_status rsp__check_rows(const rsp_step *step, uint32_t num_labels, uint32_t max_rows,
                           const char (*names)[RSP_NAME_MAX], rsp_error *err);

/* Every pre- and post-fork's from and to are interned (RSP_ENOLABEL).
 * O(forks). */
rsp_status rsp__check_forks(const rsp_step *step, uint32_t num_labels, rsp_error *err);

#endif
