/*
 * Forks (docs/semantics.md 4.6, 5.1): the forking rids of a step, applying pre-
 * and post-forks, the pipeline check of a live plan against the other planned
 * steps, and the post-fork marks that check reads. Above step records, below
 * addressing and the operations. SPDX-License-Identifier: Apache-2.0
 *
 * The forking rids of a call live in c->rids (first appearance order,
 * non-padding rows of a step with forks; none for a capture step), each
 * with a record hint in c->rid_recs and, when a fork of the step has a
 * group (per-rid forks), its rows' fork_group in c->rid_groups.
 * A fork applies to the rids of its group (group 0: all of them), in the
 * same order; the step-wide form never looks at a group (its loops test
 * nothing per fork), so it costs what it cost before groups existed.
 */
#ifndef RSP_CORE_FORK_H
#define RSP_CORE_FORK_H

#include "step.h"

/* Request record of c->rids[k], NULL when it has none; the record found is
 * remembered (and checked on the next call), so the forks of one rid cost
 * one hash probe per call rather than one per fork and use. O(1). */
static inline rsp__req *rsp__rid_req(rsp__core *c, uint32_t k)
{
    uint32_t ri = c->rid_recs[k];
    if (ri < c->num_recs && c->reqs[ri].live && c->reqs[ri].rid == c->rids[k])
        return &c->reqs[ri];
    rsp__req *r = rsp__req_find(c, c->rids[k]);
    c->rid_recs[k] = r ? (uint32_t)(r - c->reqs) : RSP__NONE;
    return r;
}

/* Has any pre- or post-fork of step a group? O(forks). */
bool rsp__step_forks_grouped(const rsp_step *step);

/* One (forking rid, fork) pair, as rsp__fork_each hands it to its
 * visitor: c->rids[k] and fork f, index i of pre ++ post (pre: i is a
 * pre-fork's). Returns false to stop the walk (an error). */
typedef bool (*rsp__fork_visit)(rsp__core *c, void *ctx, uint32_t k, const rsp_fork *f, uint32_t i,
                                bool pre);

/* The one fork loop: visit every (rid, fork) pair of step that applies, in
 * the order every use of forks follows (docs/semantics.md 4.6): per rid of
 * c->rids (first appearance), its pre-forks (if pre) then its post-forks
 * (if post), those of its group (all of them when no fork of the step has
 * one). False when a visit stopped it. Always inline, so each caller's
 * visitor is inlined into its own copy of the loop. O(rids x forks). */
__attribute__((always_inline)) static inline bool rsp__fork_each(rsp__core *c, const rsp_step *step,
                                                                 bool pre, bool post,
                                                                 rsp__fork_visit visit, void *ctx)
{
    uint32_t npre = step->num_pre_forks;
    uint32_t first = pre ? 0 : npre, end = post ? npre + step->num_post_forks : npre;
    bool grouped = first < end && rsp__step_forks_grouped(step); /* c->rid_groups filled */
    for (uint32_t k = 0; k < c->num_rids; k++)
        for (uint32_t i = first; i < end; i++) {
            const rsp_fork *f = i < npre ? &step->pre_forks[i] : &step->post_forks[i - npre];
            if (grouped && !rsp__fork_applies(f, c->rid_groups[k]))
                continue; /* not this rid's fork */
            if (!visit(c, ctx, k, f, i, i < npre))
                return false;
        }
    return true;
}

/* Fill c->rids with the forking rids of step (and c->rid_groups when
 * rsp__step_forks_grouped). The pair set is the caller's,
 * reset with room for the rows (an admit shares it with its own pairs: the
 * rid marks use a label id no interned label has). RSP_ENOMEM: c->rids
 * could not grow (only scratch changed). O(rows). */
rsp_status rsp__collect_rids_in_set(rsp__core *c, const rsp_step *step);
/* The same with a fresh pair set. */
rsp_status rsp__collect_rids(rsp__core *c, const rsp_step *step);
/* The same for in-flight record rec; same: step's rows are the record's
 * validated rows (rsp__step_same_rows), then the rids its admit kept are
 * copied instead of hashing every row again (not for a grouped step: the
 * kept rids carry no groups). */
rsp_status rsp__collect_rids_for(rsp__core *c, const rsp_step *step, uint32_t rec, bool same);
/* Keep c->rids (collected from s's rows, with forks) in record s for the
 * plan and commit of the same rows. Without memory the record simply keeps
 * none (a later call collects them again): never fails. */
void rsp__keep_rids(rsp__core *c, rsp__steprec *s);

/* A commit's skip_post_forks: *any when a non-padding row of step says so,
 * and then c->rid_skip[k] for each c->rids[k] (any of its rows says so).
 * RSP_ENOMEM: only scratch changed. O(rows) when no row says so (a scan),
 * else O(rows + rids) (the pair set). */
rsp_status rsp__collect_skips(rsp__core *c, const rsp_step *step, bool *any);

/* Apply step's pre- or post-forks (docs/semantics.md 4.6) for every rid in
 * c->rids (c->fpairs when resolved), each fork to the rids of its group; with
 * `skips` (rsp__collect_skips said any), none to a rid whose c->rid_skip is
 * set. Skips a fork whose source or target slot is pinned by a step in `avoid`
 * (a commit passes the other planned steps: their forwards may be writing those
 * slots, and a commit cannot be refused). The caller reserved 2 ops, a slot and
 * a pair per (rid, fork) and the COPY marks, and froze the list.
 * O(rids x forks). */
void rsp__apply_forks(rsp__core *c, const rsp_step *step, bool post, uint64_t avoid, bool skips,
                      rsp__work *w);

/* Are step's forks the step-wide ones record s's last admit kept (same.h
 * FORKS)? O(forks). */
bool rsp__fork_kept(rsp__core *c, rsp__steprec *s, const rsp_step *step);

/* Point c->fpairs at record rec's resolved forks when c->rids are the
 * record's kept rids and step's forks the step-wide ones its admit kept:
 * resolved again only when a holding or request came or went since
 * (same.h PAIRS), so a steady fork step finds its (rid, fork) holdings
 * without a lookup. Else c->fpairs = NULL (found per rid and fork). Call
 * it after collecting c->rids, before the first change (it may allocate;
 * without memory it leaves c->fpairs NULL). O(1), O(rids x (forks +
 * holdings)) when resolving. */
void rsp__fork_pairs_prepare(rsp__core *c, const rsp_step *step, uint32_t rec);

/* docs/semantics.md 5.1, pipelined steps: refuse (RSP_EORDER, "commit step N
 * first", nothing changed) a live plan of record rec whose forks touch a
 * slot another planned step may write, or whose rows address a slot
 * another planned step's post-forks will touch. Uses c->rids. O(rids x
 * forks + rows). */
rsp_status rsp__pipeline_check(rsp__core *c, const rsp_step *step, uint32_t rec, rsp_error *err);

/* Mark the slots the post-forks of record rec's live plan will read and
 * write at its commit (for rsp__pipeline_check of later plans). The caller
 * reserved the record's fslots (2 per rid and post-fork). Uses c->rids. */
void rsp__mark_post_forks(rsp__core *c, const rsp_step *step, uint32_t rec);

/* The flag (rid, label) of request r, whose rows carry `group`, will have
 * once the pre-forks f[0 .. k) of its group ran in order (a stage, which
 * defers them): follow the last such fork into label back to its source.
 * Inline: once per row of a staged plan. O(k x holdings). */
static inline bool rsp__inherited_flag(const rsp__req *r, const rsp_fork *f, uint32_t k,
                                       uint16_t group, rsp_label_id label)
{
    for (;;) {
        uint32_t j = k;
        while (j-- > 0)
            if (f[j].to == label && f[j].from != label && rsp__fork_applies(&f[j], group) &&
                rsp__hold_find_const(r, f[j].from))
                break;
        if (j == UINT32_MAX) {
            const rsp__hold *h = rsp__hold_find_const(r, label);
            return h && h->has_state;
        }
        label = f[j].from;
        k = j;
    }
}

#endif
