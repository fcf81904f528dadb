/*
 * Plan (docs/semantics.md 4.3, 4.4, pre-forks 4.6): live, staged (preplan) or
 * promoted, in four phases: validate, count (labels, vector lengths,
 * leases), reserve (rids, pipeline check, buffers, arrays, work), apply.
 * Also clear_preplan, the stage query and build_graph_buffers.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <inttypes.h>
#include <string.h>

#include "addr.h"
#include "ckpt.h"
#include "spec.h"
#include "util/error.h"
#include "util/mem.h"

/* What the phases of one plan decide, for the next ones. */
typedef struct plan_ctx {
    uint32_t rec;                     /* the step's record */
    bool same;                        /* rows as validated at admit (rsp__step_revalidate) */
    bool promote;                     /* a stage of this step exists: promote or replace it */
    bool take_stage;                  /* a leased buffer is taken from another step's stage */
    uint64_t total;                   /* vector entries, all labels */
    uint32_t new_bufs;                /* buffers created */
    uint32_t lengths[RSP_MAX_LABELS]; /* per c->label_order entry */
    bool cache;                       /* keep this live plan's vectors (same.h PLAN) */
    uint64_t spec;                    /* per-token index entries past the vectors (spec.h) */
    uint64_t tensors;                 /* of them, entries uploaded to tensor buffers */
} plan_ctx;

/* --- 1. validate --------------------------------------------------------- */

static rsp_status plan_validate(rsp__core *c, const rsp_step *step, plan_ctx *p, rsp_error *err)
{
    rsp_status st = rsp__step_revalidate(c, step, &p->rec, &p->same, err);
    if (st)
        return st;
    if (p->rec == RSP__NONE)
        return rsp__fail(err, RSP_EORDER,
                         "plan: step %" PRIu64 " is not in flight (not admitted, or finished)",
                         step->step_id);
    if (c->steps[p->rec].phase == RSP__PHASE_PLANNED)
        return rsp__fail(err, RSP_EORDER, "plan: step %" PRIu64 " is already planned",
                         step->step_id);
    if (step->preplan && c->stage_active)
        return rsp__fail(err, RSP_ESTAGED,
                         "plan: a stage (step %" PRIu64 ") already exists; promote it or "
                         "clear_preplan first",
                         c->stage_step);
    p->promote = !step->preplan && c->stage_active && c->stage_step == step->step_id;
    /* Rows as validated at admit have its per-token rows. */
    return p->same ? RSP_OK : rsp__spec_plan_check(c, step, p->rec, err);
}

/* --- 2. count ------------------------------------------------------------ */

/* c->label_order and c->label_rows: the labels with rows, in first
 * appearance order, and their row counts. */
static void count_labels(rsp__core *c, const rsp_step *step)
{
    c->num_plan_labels = 0;
    for (uint32_t L = 0; L < c->num_labels; L++)
        c->label_rows[L] = 0;
    for (uint32_t i = 0; i < step->num_rows; i++) {
        rsp_label_id L = step->rows[i].label;
        if (c->label_rows[L]++ == 0)
            c->label_order[c->num_plan_labels++] = L;
    }
}

/* The vector length of leased label L (rows rows): its buffer's length,
 * or the length the buffer will be created with. Refuses more rows than
 * the buffer holds, and a buffer holding another in-flight step's plan
 * unless a live plan may take it from that step's stage (p->take_stage). */
static rsp_status lease_length(rsp__core *c, const rsp_step *step, plan_ctx *p, rsp_label_id L,
                               uint32_t rows, uint32_t *len, rsp_error *err)
{
    uint32_t id = rsp__lease_find(c, &step->lease, L);
    if (id != RSP__NONE && rows > c->bufs[id].capacity)
        return rsp__fail(err, RSP_ECAPACITY,
                         "plan: step %" PRIu64 ": label \"%s\" has %" PRIu32
                         " rows but its leased buffer (bucket %" PRIu32 ", lease slot %" PRIu32
                         ") holds %" PRIu32,
                         step->step_id, c->label_names[L], rows, step->lease.bucket_id,
                         step->lease.lease_slot, c->bufs[id].capacity);
    uint32_t owner = id == RSP__NONE ? RSP__NONE : c->bufs[id].owner;
    if (owner != RSP__NONE && owner != p->rec) {
        /* A captured graph reads this one buffer: it can hold one step's
         * addressing at a time. A live plan takes it from another step's
         * stage (the stage ends); anything else is refused, nothing
         * changed. */
        bool staged = c->stage_active && c->stage_rec == owner;
        if (step->preplan || !staged)
            return rsp__fail(err, RSP_ECAPACITY,
                             "plan: step %" PRIu64 ": the leased buffer (bucket %" PRIu32
                             ", lease slot %" PRIu32 ", label \"%s\") holds the %s of step %" PRIu64
                             ", still in flight; use another lease slot",
                             step->step_id, step->lease.bucket_id, step->lease.lease_slot,
                             c->label_names[L], staged ? "stage" : "live plan",
                             c->steps[owner].step_id);
        p->take_stage = true;
    }
    if (id != RSP__NONE) {
        *len = c->bufs[id].capacity;
    } else {
        *len = rows;
        if (step->lease.bucket_bs > *len)
            *len = step->lease.bucket_bs;
        if (c->graph_max_bs > *len)
            *len = c->graph_max_bs;
    }
    return RSP_OK;
}

/* count_labels from the record's plan cache: it was built from the same
 * rows (a change of the record's rows drops it). */
static bool count_labels_kept(rsp__core *c, const rsp_step *step, const plan_ctx *p)
{
    rsp__same *m = &c->steps[p->rec].same;
    if (!p->same || step->capture || !rsp__same_has(&c->same, m, RSP__SAME_PLAN))
        return false;
    for (uint32_t L = 0; L < c->num_labels; L++)
        c->label_rows[L] = 0;
    c->num_plan_labels = m->pc_num_labels;
    for (uint32_t li = 0; li < m->pc_num_labels; li++) {
        c->label_order[li] = m->pc_labels[li].label;
        c->label_rows[m->pc_labels[li].label] = m->pc_labels[li].num_rows;
    }
    return true;
}

/* Labels, rows and vector lengths (p->lengths, p->total). */
static rsp_status plan_count(rsp__core *c, const rsp_step *step, plan_ctx *p, rsp_error *err)
{
    if (!count_labels_kept(c, step, p))
        count_labels(c, step);
    p->total = 0;
    p->take_stage = false;
    for (uint32_t li = 0; li < c->num_plan_labels; li++) {
        rsp_label_id L = c->label_order[li];
        uint32_t rows = c->label_rows[L];
        p->lengths[li] = rows;
        if (step->has_lease) {
            rsp_status st = lease_length(c, step, p, L, rows, &p->lengths[li], err);
            if (st)
                return st;
        }
        p->total += p->lengths[li];
    }
    return rsp__spec_widths(c, step, p->same, p->rec, p->lengths, err);
}

/* --- 3. reserve ---------------------------------------------------------- */

/* The hook's share (core.h rsp__ext_need): the work, the uploads, the
 * buffers created or grown, and the plan object. */
static rsp_status reserve_ext(rsp__core *c, const rsp_step *step, const plan_ctx *p, uint32_t ops,
                              uint32_t pairs, rsp_error *err)
{
    uint32_t ids[2 * RSP_MAX_LABELS], caps[2 * RSP_MAX_LABELS]; /* [0, num_buffers) set */
    rsp__ext_need need = {.ops = ops,
                          .slots = pairs,
                          .pairs = pairs,
                          .upload_entries = p->total + p->tensors,
                          .buffer_id = ids,
                          .buffer_cap = caps,
                          .plan = true,
                          .plan_labels = c->num_plan_labels,
                          .plan_rows = step->num_rows,
                          .plan_entries = p->total,
                          .plan_spec = p->spec};
    for (uint32_t li = 0; li < c->num_plan_labels; li++)
        if (c->picks[li].capacity) {
            ids[need.num_buffers] = c->picks[li].id;
            caps[need.num_buffers++] = c->picks[li].capacity;
        }
    for (uint32_t li = 0; li < c->num_plan_labels; li++)
        if (c->picks[li].spec_create) {
            ids[need.num_buffers] = c->picks[li].spec_id;
            caps[need.num_buffers++] = p->lengths[li] * c->picks[li].spec_width;
        }
    return rsp__core_reserve_ext(c, &need, err);
}

/* The forking rids and the pipeline check (a live plan), then the
 * buffers, the addressing arrays, the record's pins, rows and post-fork
 * slots, and the work (pre-fork COPYs, a BUFFER and an UPLOAD per label). */
static rsp_status plan_reserve(rsp__core *c, const rsp_step *step, plan_ctx *p, rsp__work *w,
                               rsp_error *err)
{
    c->num_rids = 0;
    c->fpairs = NULL;
    if (!step->capture && rsp__collect_rids_for(c, step, p->rec, p->same))
        return rsp__fail(err, RSP_ENOMEM, "out of memory planning step %" PRIu64, step->step_id);
    if (!step->capture && !step->preplan)
        rsp__fork_pairs_prepare(c, step, p->rec);
    if (!step->preplan) {
        rsp_status st = rsp__pipeline_check(c, step, p->rec, err);
        if (st == RSP_OK && (step->num_restores || step->num_checkpoints))
            st = rsp__ck_plan_check(c, step, p->rec, err);
        if (st)
            return st;
    }
    /* A live plan's COPYs: its restores, then its pre-forks. */
    uint32_t restores = step->preplan ? 0 : step->num_restores;
    uint64_t pairs =
        step->preplan ? 0 : (uint64_t)c->num_rids * step->num_pre_forks + step->num_restores;
    uint64_t fslots =
        step->preplan ? 0
                      : (uint64_t)c->num_rids * step->num_post_forks * 2 + step->num_checkpoints;
    if (fslots > c->layout.max_slots)
        fslots = c->layout.max_slots;
    /* A stage that ends before the buffers are bound (this step's, at a
     * promotion that does not match; another step's, whose leased buffer
     * this live plan takes) leaves its buffers free for this plan. */
    uint32_t freed = p->promote || p->take_stage ? c->stage_rec : RSP__NONE;
    p->new_bufs = rsp__choose_buffers(c, step, p->lengths, freed);
    p->new_bufs += rsp__spec_number(c, c->num_bufs + p->new_bufs);
    p->tensors = 0;
    for (uint32_t li = 0; li < c->num_plan_labels; li++)
        if (c->picks[li].spec_id != RSP__NONE)
            p->tensors += (uint64_t)p->lengths[li] * c->picks[li].spec_width;
    /* A BUFFER and an UPLOAD per label, twice with a tensor buffer. */
    uint32_t ops = 2 * (uint32_t)pairs + 4 * c->num_plan_labels + 1;
    rsp__steprec *s = &c->steps[p->rec];
    if (pairs > UINT32_MAX / 4 ||
        rsp__addr_reserve(step->preplan ? &c->stage : &c->live, p->total, step->num_rows) ||
        rsp__spec_plan_reserve(c, step->preplan ? &c->stage : &c->live, p->lengths, &p->spec) ||
        rsp__bufs_reserve(c, p->new_bufs) || rsp__step_reserve(s, 0, step->num_rows) ||
        rsp__step_reserve_plan(s, step->num_rows, (uint32_t)fslots) ||
        rsp__work_reserve(w, ops, (uint32_t)pairs, (uint32_t)pairs) ||
        (pairs && rsp__work_reserve_marks(w, restores ? c->layout.num_ids : c->layout.max_slots)) ||
        (restores && rsp__ck_reserve_pins(s, restores)))
        return rsp__fail(err, RSP_ENOMEM, "out of memory planning step %" PRIu64, step->step_id);
    /* Room for the plan cache of a plain live plan; without it the plan
     * simply keeps no cache (the next one takes the general path). */
    rsp__same *m = &s->same;
    p->cache =
        p->same && !step->preplan && !step->capture && !step->num_restores &&
        !step->num_checkpoints && !s->num_spec_rows && /* output slots: new every admit */
        !rsp__grow((void **)&m->pc_slots, &m->cap_pc_slots, p->total, sizeof *m->pc_slots) &&
        !rsp__grow((void **)&m->pc_has, &m->cap_pc_has, p->total, sizeof *m->pc_has) &&
        !rsp__grow((void **)&m->pc_gens, &m->cap_pc_gens, step->num_rows, sizeof *m->pc_gens);
    return reserve_ext(c, step, p, ops, (uint32_t)pairs, err);
}

/* --- the same declaration ------------------------------------------------ */

/* How the live plan of p->rec may use its record's plan cache
 * (same.h). Its rows are the record's (p->same), which its admit pinned
 * and the cached plan addressed with no holding or request come or gone
 * since (ADMIT and PLAN hold): every row resolves to the holding (the
 * prows hints are exact) and slot it had then, and every slot is pinned.
 * COPY: no holding changed at all since the cached plan, every row it
 * addressed had has_state (it only goes false with the epoch), and no
 * slot has a pending zero (making one moves the epoch; the cached plan
 * took any over): the vectors are the cached ones. DERIVE: generations
 * and has_state may have moved (forks, resets that keep their slots, the
 * commit's writes): copy, then read both again per row; no slot anywhere
 * has a pending zero, so there is none to take over. The labels, their
 * rows and vector lengths must match (a lease or graph bucket changes the
 * pad tail). */
static int plan_is_same(rsp__core *c, const rsp_step *step, const plan_ctx *p)
{
    rsp__same *m = &c->steps[p->rec].same;
    if (!p->cache || !rsp__same_has(&c->same, m, RSP__SAME_ADMIT | RSP__SAME_PLAN) ||
        m->pc_num_labels != c->num_plan_labels || m->pc_total != p->total ||
        m->pc_rows != step->num_rows)
        return RSP__SAME_NO;
    for (uint32_t li = 0; li < c->num_plan_labels; li++) {
        const rsp__same_label *lp = &m->pc_labels[li];
        if (lp->label != c->label_order[li] || lp->num_rows != c->label_rows[lp->label] ||
            lp->length != p->lengths[li])
            return RSP__SAME_NO;
    }
    return rsp__same_plan_how(&c->same, m, c->zero_pendings != 0);
}

/* memcpy for n bytes that may be 0, when an empty plan's arrays are NULL
 * (memcpy's pointers must be valid even for 0 bytes). */
static inline void copy_bytes(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

/* has_state and generations of the cached plan's rows read again through
 * their exact hints (RSP__SAME_DERIVE), into a and the cache. */
static void plan_derive(rsp__core *c, rsp__addr *a, rsp__steprec *s)
{
    rsp__same *m = &s->same;
    bool all = true, moved = false;
    bool *has = a->has_state;
    uint64_t *gens = a->gens;
    rsp__req *reqs = c->reqs;
    const rsp__slot *slots = c->slots;
    uint64_t earlier = rsp__earlier_mask(c, (uint32_t)(s - c->steps)); /* as in rsp__build */
    for (uint32_t j = 0; j < m->pc_num_prows; j++) {
        rsp__prow *pr = &s->prows[j];
        const rsp__hold *h = &rsp__req_holds(&reqs[pr->rec])[pr->hold];
        bool f = h->has_state || (slots[h->slot].writes & earlier);
        moved |= has[pr->at] != f;
        has[pr->at] = f;
        gens[pr->gat] = pr->generation = h->generation;
        all &= h->has_state;
    }
    if (moved)
        rsp__same_drop(m, RSP__SAME_VHASH); /* the digest hashes has_state, not generations */
    copy_bytes(m->pc_has, has, (size_t)m->pc_total * sizeof *has);
    copy_bytes(m->pc_gens, gens, (size_t)m->pc_rows * sizeof *gens);
    rsp__same_plan_kept(&c->same, m, all);
    m->plan_all_true = all;
}

/* rsp__build's result from the plan cache (plan_is_same: how). */
static void plan_same(rsp__core *c, rsp__addr *a, const plan_ctx *p, int how)
{
    rsp__steprec *s = &c->steps[p->rec];
    rsp__same *m = &s->same;
    uint32_t off = 0, goff = 0;
    a->num_labels = m->pc_num_labels;
    for (uint32_t li = 0; li < a->num_labels; li++) {
        rsp__label_plan *lp = &a->labels[li];
        lp->label = m->pc_labels[li].label;
        lp->num_rows = m->pc_labels[li].num_rows;
        lp->length = m->pc_labels[li].length;
        lp->buffer = RSP__NONE;
        lp->slot_indices = a->slots + off;
        lp->has_state = a->has_state + off;
        lp->generations = a->gens + goff;
        off += lp->length;
        goff += lp->num_rows;
    }
    copy_bytes(a->slots, m->pc_slots, (size_t)m->pc_total * sizeof *a->slots);
    copy_bytes(a->has_state, m->pc_has, (size_t)m->pc_total * sizeof *a->has_state);
    copy_bytes(a->gens, m->pc_gens, (size_t)m->pc_rows * sizeof *a->gens);
    s->num_prows = m->pc_num_prows; /* prows[] still holds them */
    m->plan_all_true = true;
    if (how == RSP__SAME_DERIVE)
        plan_derive(c, a, s);
    s->plan_took = false;
    c->fast.plans++;
}

/* After rsp__build of a live plan: what commit and the next plan of this
 * record's rows may skip (plan_all_true, plan_took, the cache). */
static void plan_keep(rsp__core *c, const rsp__addr *a, const rsp_step *step, const plan_ctx *p)
{
    rsp__steprec *s = &c->steps[p->rec];
    rsp__same *m = &s->same;
    /* plan_all_true: set by rsp__build from the holdings' own flags (an
     * entry may be true through an earlier in-flight step's write, which
     * this step's commit must still record). */
    rsp__same_drop(m, RSP__SAME_PLAN | RSP__SAME_VHASH);
    if (!p->cache)
        return;
    rsp__same_plan_kept(&c->same, m, m->plan_all_true);
    m->pc_num_labels = a->num_labels;
    for (uint32_t li = 0; li < a->num_labels; li++)
        m->pc_labels[li] =
            (rsp__same_label){a->labels[li].label, a->labels[li].num_rows, a->labels[li].length};
    m->pc_total = (uint32_t)p->total;
    m->pc_rows = step->num_rows;
    m->pc_num_prows = s->num_prows;
    copy_bytes(m->pc_slots, a->slots, (size_t)p->total * sizeof *a->slots);
    copy_bytes(m->pc_has, a->has_state, (size_t)p->total * sizeof *a->has_state);
    copy_bytes(m->pc_gens, a->gens, (size_t)step->num_rows * sizeof *a->gens);
    rsp__same_keep(&c->same, m, RSP__SAME_PLAN);
}

/* --- 4. apply ------------------------------------------------------------ */

/* A live plan (or a promotion): pre-forks now, before the forward (at a
 * promotion too: the stage deferred them), then the addressing; the stage
 * of this step is promoted when it holds exactly that, else replaced. */
static void apply_live(rsp__core *c, const rsp_step *step, const plan_ctx *p, rsp__plan_out *out,
                       rsp__work *w)
{
    rsp__addr *live = &c->live;
    rsp__steprec *s = &c->steps[p->rec];
    if (step->num_restores) /* before the pre-forks: they may read what it starts */
        rsp__ck_apply_restores(c, step, p->rec, w);
    rsp__apply_forks(c, step, false, 0, false, w);
    int how = plan_is_same(c, step, p);
    if (how != RSP__SAME_NO) {
        plan_same(c, live, p, how);
    } else {
        s->num_prows = 0;
        s->plan_took = rsp__build(c, live, step, p->rec, false, p->lengths);
        plan_keep(c, live, step, p);
    }
    rsp__spec_fill(c, live, step, p->rec, true); /* a promotion compares it */
    rsp__same_planned(&c->same, &s->same);
    rsp__mark_post_forks(c, step, p->rec);
    if (step->num_checkpoints)
        rsp__ck_mark_takes(c, step, p->rec);
    if (p->promote && rsp__same_addressing(c, live, &c->stage, step)) {
        /* The stage's uploaded buffers already hold exactly this. */
        for (uint32_t li = 0; li < live->num_labels; li++) {
            live->labels[li].buffer = c->stage.labels[li].buffer;
            live->labels[li].spec_buffer = c->stage.labels[li].spec_buffer;
        }
        rsp__stage_drop(c, RSP__STAGE_PROMOTED, &out->stage);
        out->promoted = true;
    } else {
        if (p->promote)
            rsp__stage_drop(c, RSP__STAGE_REPLACED, &out->stage);
        rsp__bind_and_upload(c, live, step, p->rec, w);
        rsp__spec_bind(c, live, step, p->rec, w);
    }
    s->phase = RSP__PHASE_PLANNED;
    if (!s->capture)
        c->planned_bits |= 1ull << p->rec;
}

/* h combined with n bytes at p, 8 at a time (a multiply per 8 bytes:
 * the digest runs on every plan); the tail is zero-padded. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    }
    if (n) {
        uint64_t w = 0;
        memcpy(&w, b, n);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    }
    return h;
}

/* The digest's part that hashes the vectors: O(rows), a multiply per two
 * rows' slot ids and per eight rows' has_state. */
static uint64_t vectors_hash(const rsp__plan_out *out)
{
    uint64_t h = 0;
    for (uint32_t li = 0; li < out->num_labels; li++) {
        const rsp__label_plan *lp = &out->labels[li];
        h = rsp__mix64(h ^ ((uint64_t)lp->label << 32 | lp->num_rows));
        h = hash_bytes(h, lp->slot_indices, (size_t)lp->num_rows * sizeof(int32_t));
        h = hash_bytes(h, lp->has_state, (size_t)lp->num_rows * sizeof(bool));
        if (lp->spec_outputs) /* the output slots (else the tensor is the vector and pads) */
            h = hash_bytes(h, lp->spec_indices,
                           (size_t)lp->num_rows * lp->spec_width * sizeof(int32_t));
    }
    return h;
}

/* The plan's digest (rsp__plan_out.digest): the step, the vectors, the
 * free stack and the generation. A live plan whose vectors are its
 * record's plan cache (cached) hashes them once for as long as they stay
 * (pc_vhash): a steady step's digest is O(1). */
static uint64_t plan_digest(rsp__core *c, const rsp__plan_out *out, rsp__same *m, bool cached)
{
    uint64_t vh;
    if (cached && rsp__same_has(&c->same, m, RSP__SAME_VHASH)) {
        vh = m->pc_vhash;
        RSP__ASSERT(vh == vectors_hash(out)); /* checked builds: the cache is the vectors */
    } else {
        vh = vectors_hash(out);
        if (cached) {
            m->pc_vhash = vh;
            rsp__same_keep(&c->same, m, RSP__SAME_VHASH);
        }
    }
    uint64_t h = rsp__mix64(rsp__mix64(out->step_id * 2u + (out->staged ? 1u : 0u)) ^ vh);
    h = rsp__mix64(h ^ rsp__core_free_hash(c));
    return rsp__mix64(h ^ c->generation);
}

static void plan_apply(rsp__core *c, const rsp_step *step, const plan_ctx *p, rsp__plan_out *out,
                       rsp__work *w)
{
    memset(out, 0, sizeof *out);
    out->step_id = step->step_id;
    if (p->take_stage)
        rsp__stage_drop(c, RSP__STAGE_TAKEN, &out->stage);
    rsp__addr *target = step->preplan ? &c->stage : &c->live;
    if (step->preplan) {
        RSP__MUST(!rsp__build(c, target, step, p->rec, true,
                              p->lengths)); /* a stage takes no zero over */
        rsp__spec_fill(c, target, step, p->rec, false);
        rsp__bind_and_upload(c, target, step, p->rec, w);
        rsp__spec_bind(c, target, step, p->rec, w);
        c->stage_active = true;
        c->stage_step = step->step_id;
        c->stage_rec = p->rec;
        out->staged = true;
    } else {
        apply_live(c, step, p, out, w);
    }
    out->num_labels = target->num_labels;
    out->labels = target->labels;
    /* A live plan's vectors are its record's cache when it keeps one (it
     * kept them, or it is the cache's copy). */
    rsp__same *m = &c->steps[p->rec].same;
    out->digest =
        plan_digest(c, out, m, !step->preplan && rsp__same_has(&c->same, m, RSP__SAME_PLAN));
}

rsp_status rsp__core_plan(rsp__core *c, const rsp_step *step, rsp__plan_out *out, rsp__work *w,
                          rsp_error *err)
{
    rsp__op_begin(c);
    if (!out || !w)
        return rsp__fail(err, RSP_EINVAL, "plan: out or work is NULL");
    plan_ctx p;
    rsp_status st = plan_validate(c, step, &p, err);
    if (st == RSP_OK)
        st = plan_count(c, step, &p, err);
    if (st == RSP_OK)
        st = plan_reserve(c, step, &p, w, err);
    if (st)
        return st;
    /* Nothing below fails: every append takes room reserved above, in a
     * frozen list (an append that would grow trips RSP__ASSERT). */
    rsp__work_freeze(w);
    plan_apply(c, step, &p, out, w);
    rsp__work_thaw(w);
    return RSP_OK;
}

/* --- the stage, graph buffers -------------------------------------------- */

bool rsp__core_stage(const rsp__core *c, uint64_t *step_id)
{
    if (c->stage_active && step_id)
        *step_id = c->stage_step;
    return c->stage_active;
}

rsp_status rsp__core_clear_preplan(rsp__core *c, rsp__stage_change *stage, rsp_error *err)
{
    rsp__op_begin(c);
    (void)err;
    if (stage)
        *stage = (rsp__stage_change){RSP__STAGE_KEPT, 0};
    if (c->stage_active)
        rsp__stage_drop(c, RSP__STAGE_CLEARED, stage);
    return RSP_OK;
}

rsp_status rsp__core_build_graph_buffers(rsp__core *c, uint32_t max_bs, uint32_t max_seq_len,
                                         rsp__work *w, rsp_error *err)
{
    rsp__op_begin(c);
    (void)max_seq_len; /* recurrent state does not grow with the sequence */
    (void)w;
    if (max_bs == 0 || max_bs > rsp__core_max_rows(c))
        return rsp__fail(err, RSP_EINVAL,
                         "build_graph_buffers: max_bs = %" PRIu32 ": must be 1 .. %" PRIu32
                         " (max(8192, 2 x max_slots): past that a batch is only padding)",
                         max_bs, rsp__core_max_rows(c));
    /* Only the length of leased buffers created from now on; existing ones
     * never move (a captured graph baked their addresses in). */
    if (max_bs > c->graph_max_bs)
        c->graph_max_bs = max_bs;
    return RSP_OK;
}
