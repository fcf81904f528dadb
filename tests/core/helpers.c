/* Fixtures for the core suites. SPDX-License-Identifier: Apache-2.0 */
#include "helpers.h"

#include <stdlib.h>
#include <string.h>

/* fx_init's config in f, not created yet. */
static void fx_config(fx *f, uint32_t max_slots, bool sink)
{
    memset(f, 0, sizeof *f);
    rsp_pool_config_init(&f->cfg);
    f->blocks[0] =
        (rsp_block_config){.name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 2, .shape = {3, 4}};
    f->blocks[1] =
        (rsp_block_config){.name = "ssm", .dtype = RSP_DTYPE_BF16, .ndim = 2, .shape = {2, 5}};
    f->cfg.blocks = f->blocks;
    f->cfg.num_blocks = 2;
    f->cfg.num_layers = 2;
    f->cfg.max_slots = max_slots;
    f->cfg.sink = sink;
}

void fx_init(fx *f, uint32_t max_slots, bool sink)
{
    fx_config(f, max_slots, sink);
    fx_init_cfg(f, &f->cfg);
}

void fx_init_ck(fx *f, uint32_t max_slots, uint32_t device, uint32_t host, bool demote)
{
    fx_config(f, max_slots, true);
    f->cfg.max_checkpoints = device;
    f->cfg.max_host_checkpoints = host;
    f->cfg.checkpoint_demote = demote;
    fx_init_cfg(f, &f->cfg);
}

void fx_init_cfg(fx *f, const rsp_pool_config *cfg)
{
    if (cfg != &f->cfg) {
        memset(f, 0, sizeof *f);
        f->cfg = *cfg;
    }
    rsp_status st = rsp__core_create(&f->cfg, &f->core, &f->err);
    if (st)
        fail_msg("core_create: %s", f->err.message);
    f->store = rsp_test_store_new(rsp__core_layout(f->core));
    rsp__work_init(&f->work);
}

void fx_fini(fx *f)
{
    rsp__core_destroy(f->core);
    rsp_test_store_free(f->store);
    rsp__work_fini(&f->work);
}

rsp_label_id fx_label(fx *f, const char *name)
{
    rsp_label_id id = 0;
    assert_int_equal(rsp__core_label(f->core, name, &id, &f->err), RSP_OK);
    return id;
}

static rsp_status after(fx *f, rsp_status st)
{
    if (st != RSP_OK) {
        const rsp__ckpt_report *r = rsp__core_ckpt_report(f->core);
        assert_int_equal(f->err.status, st);
        assert_true(f->err.message[0] != '\0');
        assert_true(rsp__work_empty(&f->work));
        /* A failed call leaves an empty checkpoint report. */
        assert_int_equal(r->num_changes + r->num_evictions + r->num_skips, 0);
        assert_int_equal(r->taken + r->restored + r->dropped, 0);
        return st;
    }
    if (!rsp_test_store_apply(f->store, &f->work))
        fail_msg("bad work list: %s", rsp_test_store_error(f->store));
    return st;
}

void (*fx_core_hook)(bool enter);

static void hook(bool enter)
{
    if (fx_core_hook)
        fx_core_hook(enter);
}

/* One core call, between the hook's enter and leave. */
#define CORE(call) (hook(true), core_st = (call), hook(false), core_st)

static void before(fx *f)
{
    rsp__work_clear(&f->work);
    memset(&f->err, 0, sizeof f->err);
}

rsp_status fx_ingest(fx *f, rsp_rid rid)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_ingest(f->core, rid, &f->err)));
}

rsp_status fx_reset(fx *f, rsp_rid rid, bool free)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_reset(f->core, rid, free, &f->work, &f->err)));
}

rsp_status fx_remove(fx *f, rsp_rid rid)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_remove(f->core, rid, &f->work, &f->err)));
}

rsp_status fx_release(fx *f, rsp_rid rid, rsp_label_id label)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_release(f->core, rid, label, &f->work, &f->err)));
}

rsp_status fx_admit(fx *f, const rsp_step *s, rsp_admit_outcome *out)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_admit(f->core, s, out, &f->work, &f->err)));
}

void fx_admit_ok(fx *f, const rsp_step *s)
{
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(f, s, &out), RSP_OK);
    assert_true(out.ok);
}

rsp_status fx_rollback(fx *f, uint64_t step_id, const rsp_event *done)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_rollback(f->core, step_id, done, &f->work, &f->stage, &f->err)));
}

rsp_status fx_plan(fx *f, const rsp_step *s)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_plan(f->core, s, &f->plan, &f->work, &f->err)));
}

rsp_status fx_commit(fx *f, const rsp_step *s, const rsp_event *done)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_commit(f->core, s, done, &f->work, &f->stage, &f->err)));
}

rsp_status fx_checkpoint(fx *f, uint64_t key, rsp_rid rid, rsp_label_id label, rsp_tier tier,
                         uint64_t after_step)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_checkpoint(f->core, key, rid, label, tier, after_step, &f->work,
                                              &f->err)));
}

rsp_status fx_ck_drop(fx *f, uint64_t key)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_checkpoint_drop(f->core, key, &f->err)));
}

rsp_status fx_ck_pin(fx *f, uint64_t key, bool pin)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_checkpoint_pin(f->core, key, pin, &f->err)));
}

rsp_status fx_swap_out(fx *f, rsp_rid rid)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_swap_out(f->core, rid, &f->work, &f->err)));
}

rsp_status fx_swap_in(fx *f, rsp_rid rid, rsp_admit_outcome *out)
{
    before(f);
    rsp_status core_st;
    return after(f, CORE(rsp__core_swap_in(f->core, rid, out, &f->work, &f->err)));
}

rsp_checkpoint_info fx_ck(fx *f, uint64_t key)
{
    rsp_checkpoint_info info;
    memset(&info, 0, sizeof info);
    assert_int_equal(rsp__core_checkpoint_query(f->core, key, &info, NULL), RSP_OK);
    return info;
}

bool fx_ck_has(fx *f, uint64_t key)
{
    return rsp__core_checkpoint_query(f->core, key, NULL, NULL) == RSP_OK;
}

const rsp__ckpt_report *fx_ck_report(fx *f)
{
    return rsp__core_ckpt_report(f->core);
}

void fx_run_step(fx *f, const rsp_step *s)
{
    fx_admit_ok(f, s);
    assert_int_equal(fx_plan(f, s), RSP_OK);
    assert_int_equal(fx_commit(f, s, NULL), RSP_OK);
}

int32_t fx_slot(fx *f, rsp_rid rid, rsp_label_id label)
{
    rsp_holding h;
    if (rsp__core_holding(f->core, rid, label, &h, NULL) != RSP_OK)
        return -1;
    return h.index;
}

bool fx_has_state(fx *f, rsp_rid rid, rsp_label_id label)
{
    rsp_holding h;
    assert_int_equal(rsp__core_holding(f->core, rid, label, &h, NULL), RSP_OK);
    return h.has_state;
}

uint64_t fx_gen(fx *f, rsp_rid rid, rsp_label_id label)
{
    rsp_holding h;
    assert_int_equal(rsp__core_holding(f->core, rid, label, &h, NULL), RSP_OK);
    return h.generation;
}

const rsp__label_plan *fx_plan_label(fx *f, rsp_label_id label)
{
    for (uint32_t i = 0; i < f->plan.num_labels; i++)
        if (f->plan.labels[i].label == label)
            return &f->plan.labels[i];
    fail_msg("label %u not in the last plan", label);
    return NULL;
}

rsp_stats fx_stats(fx *f)
{
    rsp_stats s;
    memset(&s, 0, sizeof s);
    rsp__core_stats(f->core, &s);
    return s;
}

void fx_check_invariants(fx *f)
{
    const rsp__layout *lay = rsp__core_layout(f->core);
    rsp_stats st = fx_stats(f);
    uint32_t counts[4] = {0};
    for (uint32_t s = 0; s < lay->max_slots; s++) {
        rsp__slot_state k = rsp__core_slot_state(f->core, s);
        assert_true((unsigned)k < 4);
        counts[k]++;
        if (k == RSP__SLOT_FREE && !rsp_test_store_slot_is_zero(f->store, s))
            fail_msg("free slot %u does not read zeros", s);
    }
    assert_int_equal(counts[RSP__SLOT_SINK], lay->sink ? 1 : 0);
    assert_int_equal(counts[RSP__SLOT_FREE], st.free_slots);
    assert_int_equal(counts[RSP__SLOT_HELD], st.held_slots);
    assert_int_equal(counts[RSP__SLOT_PENDING], st.pending_release);
    assert_int_equal(st.free_slots + st.held_slots + st.pending_release + (lay->sink ? 1 : 0),
                     lay->max_slots);
    uint32_t *order = malloc((st.free_slots ? st.free_slots : 1) * sizeof *order);
    assert_non_null(order);
    uint32_t n = rsp__core_free_order(f->core, order, st.free_slots);
    assert_int_equal(n, st.free_slots);
    bool *seen = calloc(lay->max_slots, sizeof *seen);
    assert_non_null(seen);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(rsp__core_slot_state(f->core, order[i]), RSP__SLOT_FREE);
        assert_false(seen[order[i]]);
        seen[order[i]] = true;
    }
    free(seen);
    /* The running hash of the free stack (plan digests) matches the
     * stack, as the sum of its definition: order[i] sits at depth
     * n - 1 - i. */
    uint64_t h = 0, pw = 1;
    for (uint32_t d = 0; d < n; d++, pw *= RSP__FREE_HASH_P)
        h += (uint64_t)(order[n - 1 - d] + 1) * pw;
    assert_true(h == rsp__core_free_hash(f->core));
    free(order);
}

void sb_init(stepb *b, uint64_t step_id)
{
    memset(b, 0, sizeof *b);
    b->s.step_id = step_id;
    b->s.rows = b->rows;
    b->s.pre_forks = b->pre;
    b->s.post_forks = b->post;
}

void sb_row(stepb *b, rsp_rid rid, rsp_label_id label, int32_t span)
{
    assert_true(b->s.num_rows < FX_MAX_ROWS);
    b->rows[b->s.num_rows++] = (rsp_row){.rid = rid, .label = label, .span = span};
}

void sb_pad(stepb *b, rsp_rid rid, rsp_label_id label)
{
    assert_true(b->s.num_rows < FX_MAX_ROWS);
    b->rows[b->s.num_rows++] = (rsp_row){.rid = rid, .label = label, .span = 1, .padding = true};
}

void sb_restore(stepb *b, rsp_rid rid, rsp_label_id label, uint64_t key)
{
    assert_true(b->s.num_restores < FX_MAX_FORKS);
    b->s.restores = b->restores;
    b->restores[b->s.num_restores++] = (rsp_restore){rid, label, key};
}

void sb_take(stepb *b, rsp_rid rid, rsp_label_id label, uint64_t key, rsp_tier tier)
{
    assert_true(b->s.num_checkpoints < FX_MAX_FORKS);
    b->s.checkpoints = b->takes;
    b->takes[b->s.num_checkpoints++] = (rsp_checkpoint_decl){rid, label, tier, key};
}

void sb_pre(stepb *b, rsp_label_id from, rsp_label_id to)
{
    b->pre[b->s.num_pre_forks++] = (rsp_fork){from, to, 0};
}

void sb_post(stepb *b, rsp_label_id from, rsp_label_id to)
{
    b->post[b->s.num_post_forks++] = (rsp_fork){from, to, 0};
}

void sb_lease(stepb *b, uint32_t bucket_bs, uint32_t bucket_id, uint32_t lease_slot)
{
    b->s.has_lease = true;
    b->s.lease = (rsp_lease){bucket_bs, bucket_id, lease_slot};
}

void snap_take(fx *f, snap *s)
{
    memset(s, 0, sizeof *s);
    s->stats = fx_stats(f);
    const rsp__layout *lay = rsp__core_layout(f->core);
    assert_true(lay->max_slots <= SNAP_MAX_SLOTS);
    s->num_free = rsp__core_free_order(f->core, s->free_order, SNAP_MAX_SLOTS);
    for (uint32_t i = 0; i < lay->max_slots; i++) {
        s->slot_state[i] = (uint8_t)rsp__core_slot_state(f->core, i);
        s->checksum[i] = rsp_test_store_checksum(f->store, i);
    }
    uint32_t nl = rsp__core_num_labels(f->core);
    for (rsp_rid r = 0; r < SNAP_MAX_RIDS; r++) {
        s->has_req[r] = rsp__core_has_request(f->core, r);
        for (rsp_label_id l = 0; l < 4 && l < nl; l++)
            s->held[r][l] = rsp__core_holding(f->core, r, l, &s->hold[r][l], NULL) == RSP_OK;
    }
    for (uint64_t k = 0; k < SNAP_MAX_KEYS; k++)
        s->ck_has[k] = rsp__core_checkpoint_query(f->core, k, &s->ck[k], NULL) == RSP_OK;
    for (uint32_t i = 0; i < SNAP_MAX_CK_SLOTS && lay->max_slots + i < lay->num_ids; i++)
        s->ck_sum[i] = rsp_test_store_checksum(f->store, lay->max_slots + i);
}

void snap_assert_equal(const snap *a, const snap *b)
{
    assert_memory_equal(&a->stats, &b->stats, sizeof a->stats);
    assert_int_equal(a->num_free, b->num_free);
    assert_memory_equal(a->free_order, b->free_order, sizeof a->free_order);
    assert_memory_equal(a->slot_state, b->slot_state, sizeof a->slot_state);
    assert_memory_equal(a->checksum, b->checksum, sizeof a->checksum);
    assert_memory_equal(a->has_req, b->has_req, sizeof a->has_req);
    assert_memory_equal(a->ck_has, b->ck_has, sizeof a->ck_has);
    assert_memory_equal(a->ck, b->ck, sizeof a->ck);
    assert_memory_equal(a->ck_sum, b->ck_sum, sizeof a->ck_sum);
    for (int r = 0; r < SNAP_MAX_RIDS; r++)
        for (int l = 0; l < 4; l++) {
            assert_int_equal(a->held[r][l], b->held[r][l]);
            if (a->held[r][l]) {
                assert_int_equal(a->hold[r][l].index, b->hold[r][l].index);
                assert_int_equal(a->hold[r][l].has_state, b->hold[r][l].has_state);
                assert_int_equal(a->hold[r][l].generation, b->hold[r][l].generation);
            }
        }
}

void sb_group(stepb *b, uint16_t group)
{
    b->rows[b->s.num_rows - 1].fork_group = group;
}

void sb_pre_group(stepb *b, uint32_t group)
{
    b->pre[b->s.num_pre_forks - 1].group = group;
}

void sb_post_group(stepb *b, uint32_t group)
{
    b->post[b->s.num_post_forks - 1].group = group;
}
