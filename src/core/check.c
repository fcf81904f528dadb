/*
 * The rules of a step declaration (check.h): pure, one message per rule.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "check.h"

#include <inttypes.h>

#include "util/error.h"

/* The message of an array that is NULL with a count. */
static rsp_status null_array(const rsp_step *step, const char *what, uint32_t n, rsp_error *err)
{
    return rsp__fail(err, RSP_EINVAL, "step %" PRIu64 ": %s is NULL with num_%s = %" PRIu32,
                     step->step_id, what, what, n);
}

rsp_status rsp__check_arrays(const rsp_step *step, rsp_error *err)
{
    if (!step)
        return rsp__fail(err, RSP_EINVAL, "step is NULL");
    /* In declaration order. Tests, not a table: every admit, plan and
     * commit runs them. */
    if (step->num_rows && !step->rows)
        return null_array(step, "rows", step->num_rows, err);
    if (step->num_pre_forks && !step->pre_forks)
        return null_array(step, "pre_forks", step->num_pre_forks, err);
    if (step->num_post_forks && !step->post_forks)
        return null_array(step, "post_forks", step->num_post_forks, err);
    if (step->num_checkpoints && !step->checkpoints)
        return null_array(step, "checkpoints", step->num_checkpoints, err);
    if (step->num_restores && !step->restores)
        return null_array(step, "restores", step->num_restores, err);
    return RSP_OK;
}

rsp_status rsp__check_limits(const rsp_step *step, uint32_t max_rows, rsp_error *err)
{
    if (step->num_pre_forks > RSP__MAX_FORKS || step->num_post_forks > RSP__MAX_FORKS)
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": %" PRIu32 " pre_forks and %" PRIu32
                         " post_forks: at most %u each (one per pair of labels)",
                         step->step_id, step->num_pre_forks, step->num_post_forks, RSP__MAX_FORKS);
    for (int k = 0; k < 2; k++) {
        const rsp_fork *f = k ? step->post_forks : step->pre_forks;
        uint32_t n = k ? step->num_post_forks : step->num_pre_forks;
        for (uint32_t i = 0; i < n; i++)
            if (f[i].group > RSP__MAX_FORK_GROUP)
                return rsp__fail(err, RSP_EINVAL,
                                 "step %" PRIu64 ": %s[%" PRIu32 "].group = %" PRIu32
                                 ": at most %u (a row's fork_group is 16 bits)",
                                 step->step_id, k ? "post_forks" : "pre_forks", i, f[i].group,
                                 RSP__MAX_FORK_GROUP);
    }
    if (step->has_lease && step->lease.bucket_bs == 0)
        return rsp__fail(err, RSP_EINVAL, "step %" PRIu64 ": lease.bucket_bs = 0", step->step_id);
    if (step->has_lease && step->lease.bucket_bs > max_rows)
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": lease.bucket_bs = %" PRIu32 ": at most %" PRIu32
                         " (max(8192, 2 x max_slots): past that a bucket is only padding)",
                         step->step_id, step->lease.bucket_bs, max_rows);
    return RSP_OK;
}

rsp_status rsp__check_label(rsp_label_id label, uint32_t num_labels, rsp_error *err)
{
    if (label < num_labels)
        return RSP_OK;
    return rsp__fail(err, RSP_ENOLABEL, "label %" PRIu32 " is not interned (%" PRIu32 " labels)",
                     label, num_labels);
}

/* The message of a row whose label is not interned (both row checks). */
static rsp_status bad_row_label(const rsp_step *step, uint32_t i, uint32_t num_labels,
                                rsp_error *err)
{
    return rsp__fail(err, RSP_ENOLABEL,
                     "step %" PRIu64 ": rows[%" PRIu32 "].label = %" PRIu32
                     " is not an interned label (%" PRIu32 " labels)",
                     step->step_id, i, step->rows[i].label, num_labels);
}

rsp_status rsp__check_row_labels(const rsp_step *step, uint32_t num_labels, bool *per_token,
                                 rsp_error *err)
{
    /* The largest label first, four rows at a time without a branch (a
     * client checks every row of every step it posts); the first bad row
     * is looked for only when there is one. The per-token bytes are OR'd
     * in the same pass, so a step without per-token rows is not read a
     * second time for them. */
    const rsp_row *rows = step->rows;
    uint32_t n = step->num_rows, i = 0;
    uint32_t m0 = 0, m1 = 0, m2 = 0, m3 = 0;
    unsigned pt = 0;
    for (; i + 4 <= n; i += 4) {
        m0 = rows[i].label > m0 ? rows[i].label : m0;
        m1 = rows[i + 1].label > m1 ? rows[i + 1].label : m1;
        m2 = rows[i + 2].label > m2 ? rows[i + 2].label : m2;
        m3 = rows[i + 3].label > m3 ? rows[i + 3].label : m3;
        pt |= (unsigned)(rows[i].per_token_states | rows[i + 1].per_token_states |
                         rows[i + 2].per_token_states | rows[i + 3].per_token_states);
    }
    for (; i < n; i++) {
        m0 = rows[i].label > m0 ? rows[i].label : m0;
        pt |= rows[i].per_token_states;
    }
    *per_token = pt != 0;
    m0 = m0 > m1 ? m0 : m1;
    m2 = m2 > m3 ? m2 : m3;
    if (n == 0 || (m0 > m2 ? m0 : m2) < num_labels)
        return RSP_OK;
    for (i = 0; i < n; i++)
        if (rows[i].label >= num_labels)
            break;
    return bad_row_label(step, i, num_labels, err);
}

rsp_status rsp__check_rows(const rsp_step *step, uint32_t num_labels, uint32_t max_rows,
                           const char (*names)[RSP_NAME_MAX], rsp_error *err)
{
    uint32_t rows_of[RSP_MAX_LABELS] = {0};
    for (uint32_t i = 0; i < step->num_rows; i++) {
        rsp_label_id L = step->rows[i].label;
        if (L >= num_labels)
            return bad_row_label(step, i, num_labels, err);
        if (++rows_of[L] > max_rows)
            return rsp__fail(
                err, RSP_EINVAL,
                "step %" PRIu64 ": label \"%s\" has more than %" PRIu32
                " rows (max(8192, 2 x max_slots): every row with state addresses its own slot)",
                step->step_id, names[L], max_rows);
    }
    return RSP_OK;
}

rsp_status rsp__check_spec_rows(const rsp_step *step, bool *any, rsp_error *err)
{
    bool seen = false;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *r = &step->rows[i];
        if (!r->per_token_states)
            continue;
        if (r->per_token_states != 1)
            return rsp__fail(err, RSP_EINVAL,
                             "step %" PRIu64 ": rows[%" PRIu32 "].per_token_states = %u: 0 or 1 "
                             "(zero-fill rows: the field was tail padding before 0.3)",
                             step->step_id, i, (unsigned)r->per_token_states);
        if (r->padding || r->span < 1 || r->span > RSP_SPEC_MAX_TOKENS)
            return rsp__fail(err, RSP_EINVAL,
                             "step %" PRIu64 ": rows[%" PRIu32 "] (rid %" PRIu64
                             ") asks for per-token states with span %" PRId32
                             "%s: a per-token row is no padding and has 1 <= span <= %d",
                             step->step_id, i, r->rid, r->span, r->padding ? " as padding" : "",
                             RSP_SPEC_MAX_TOKENS);
        seen = true;
    }
    if (any)
        *any = seen;
    return RSP_OK;
}

rsp_status rsp__check_accepted(const rsp_step *step, rsp_error *err)
{
    for (uint32_t i = 0; i < step->num_rows; i++) {
        const rsp_row *r = &step->rows[i];
        if (r->per_token_states == 1 && r->accepted > r->span)
            return rsp__fail(err, RSP_EINVAL,
                             "commit: step %" PRIu64 ": rows[%" PRIu32 "] (rid %" PRIu64
                             ").accepted = %u: at most its span %" PRId32,
                             step->step_id, i, r->rid, (unsigned)r->accepted, r->span);
    }
    return RSP_OK;
}

rsp_status rsp__check_forks(const rsp_step *step, uint32_t num_labels, rsp_error *err)
{
    for (int k = 0; k < 2; k++) {
        const rsp_fork *f = k ? step->post_forks : step->pre_forks;
        uint32_t n = k ? step->num_post_forks : step->num_pre_forks;
        const char *what = k ? "post_forks" : "pre_forks";
        for (uint32_t i = 0; i < n; i++) {
            bool from = f[i].from >= num_labels;
            if (from || f[i].to >= num_labels)
                return rsp__fail(err, RSP_ENOLABEL,
                                 "step %" PRIu64 ": %s[%" PRIu32 "].%s = %" PRIu32
                                 " is not an interned label (%" PRIu32 " labels)",
                                 step->step_id, what, i, from ? "from" : "to",
                                 from ? f[i].from : f[i].to, num_labels);
        }
    }
    return RSP_OK;
}

rsp_status rsp__fail_fork_group(const rsp_step *step, uint32_t i, uint32_t first, rsp_error *err)
{
    return rsp__fail(err, RSP_EINVAL,
                     "step %" PRIu64 ": rows[%" PRIu32 "] (rid %" PRIu64 ") has fork_group %u but "
                     "rows[%" PRIu32 "] of the same rid has %u: every row of a rid carries "
                     "one fork_group",
                     step->step_id, i, step->rows[i].rid, (unsigned)step->rows[i].fork_group, first,
                     (unsigned)step->rows[first].fork_group);
}

rsp_status rsp__check_ckpt_decls(const rsp_step *step, uint32_t num_labels, rsp_error *err)
{
    if (step->capture && (step->num_checkpoints || step->num_restores))
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": a capture step declares no checkpoints or restores "
                         "(its rows are dummies)",
                         step->step_id);
    for (uint32_t i = 0; i < step->num_restores; i++)
        if (step->restores[i].label >= num_labels)
            return rsp__fail(err, RSP_ENOLABEL,
                             "step %" PRIu64 ": restores[%" PRIu32 "].label = %" PRIu32
                             " is not an interned label (%" PRIu32 " labels)",
                             step->step_id, i, step->restores[i].label, num_labels);
    for (uint32_t i = 0; i < step->num_checkpoints; i++) {
        const rsp_checkpoint_decl *d = &step->checkpoints[i];
        if (d->label >= num_labels)
            return rsp__fail(err, RSP_ENOLABEL,
                             "step %" PRIu64 ": checkpoints[%" PRIu32 "].label = %" PRIu32
                             " is not an interned label (%" PRIu32 " labels)",
                             step->step_id, i, d->label, num_labels);
        if ((unsigned)d->tier >= RSP_TIER_COUNT_)
            return rsp__fail(err, RSP_EINVAL,
                             "step %" PRIu64 ": checkpoints[%" PRIu32 "].tier = %d is not a tier",
                             step->step_id, i, (int)d->tier);
    }
    return RSP_OK;
}

rsp_status rsp__fail_ckpt_row(const rsp_step *step, bool restore, uint32_t i, rsp_error *err)
{
    rsp_rid rid = restore ? step->restores[i].rid : step->checkpoints[i].rid;
    rsp_label_id label = restore ? step->restores[i].label : step->checkpoints[i].label;
    return rsp__fail(err, RSP_EINVAL,
                     "step %" PRIu64 ": %s[%" PRIu32 "] (rid %" PRIu64 ", label %" PRIu32
                     ") names no row of the step with span > 0",
                     step->step_id, restore ? "restores" : "checkpoints", i, rid, label);
}

rsp_status rsp__fail_ckpt_dup(const rsp_step *step, bool restore, uint32_t i, uint32_t first,
                              rsp_error *err)
{
    if (restore)
        return rsp__fail(err, RSP_EINVAL,
                         "step %" PRIu64 ": restores[%" PRIu32 "] repeats (rid %" PRIu64
                         ", label %" PRIu32 ") of restores[%" PRIu32 "]: a row starts from one "
                         "checkpoint",
                         step->step_id, i, step->restores[i].rid, step->restores[i].label, first);
    return rsp__fail(err, RSP_EINVAL,
                     "step %" PRIu64 ": checkpoints[%" PRIu32 "] repeats key %" PRIu64
                     " of checkpoints[%" PRIu32 "]: a key holds one state",
                     step->step_id, i, step->checkpoints[i].key, first);
}
