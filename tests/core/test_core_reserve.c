/* The core's reserve hook (core.h, rsp__ext_need): what a call reports
 * before its first change covers the device work and the plan it then
 * produces, and a hook that fails refuses the call with nothing changed.
 * SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "helpers.h"
#include "util/error.h"

static const int fence_dummy = 0;
static const rsp_event done_ev = {.handle = (void *)&fence_dummy, .value = 3};

typedef struct hook_state {
    int calls;
    rsp__ext_need last; /* its buffer arrays point at ids and caps */
    uint32_t ids[RSP_MAX_LABELS], caps[RSP_MAX_LABELS];
    rsp_status fail_with; /* RSP_OK: succeed */
} hook_state;

static rsp_status record_hook(void *ctx, const rsp__ext_need *need, rsp_error *err)
{
    hook_state *h = ctx;
    h->calls++;
    h->last = *need;
    /* The need's arrays are the caller's, valid during the call only. */
    for (uint32_t k = 0; k < need->num_buffers; k++) {
        h->ids[k] = need->buffer_id[k];
        h->caps[k] = need->buffer_cap[k];
    }
    h->last.buffer_id = h->ids;
    h->last.buffer_cap = h->caps;
    if (h->fail_with)
        return rsp__fail(err, h->fail_with, "reserve hook: refused (test)");
    return RSP_OK;
}

/* The work list f->work the last call appended fits h->last. */
static void assert_covered(fx *f, const hook_state *h)
{
    const rsp__work *w = &f->work;
    const rsp__ext_need *n = &h->last;
    assert_true(w->num_ops <= n->ops);
    assert_true(w->num_slots <= n->slots);
    assert_true(w->num_pairs <= n->pairs);
    uint64_t uploads = 0;
    for (uint32_t i = 0; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if (op->kind == RSP__OP_UPLOAD)
            uploads += op->count;
        if (op->kind != RSP__OP_BUFFER)
            continue;
        bool found = false;
        for (uint32_t k = 0; k < n->num_buffers; k++)
            found |= n->buffer_id[k] == op->buffer && n->buffer_cap[k] == op->capacity;
        assert_true(found);
    }
    assert_true(uploads <= n->upload_entries);
}

static void assert_plan_covered(fx *f, const hook_state *h)
{
    assert_covered(f, h);
    assert_true(h->last.plan);
    assert_int_equal(h->last.plan_labels, f->plan.num_labels);
    uint64_t rows = 0, entries = 0;
    for (uint32_t i = 0; i < f->plan.num_labels; i++) {
        rows += f->plan.labels[i].num_rows;
        entries += f->plan.labels[i].length;
    }
    assert_true(rows <= h->last.plan_rows);
    assert_true(entries <= h->last.plan_entries);
}

/* Eager buffers created and grown, leased ones created, pre- and
 * post-forks, a stage and its promotion: every call's need covers it. */
static void need_covers_work_and_plan(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 32, true);
    hook_state h = {0};
    rsp__core_set_reserve_hook(f.core, record_hook, &h);
    rsp_label_id d = fx_label(&f, "draft");
    for (uint64_t id = 1; id <= 12; id++) {
        stepb b;
        sb_init(&b, id);
        uint32_t n = 1 + (uint32_t)(id * 3 % 7); /* rows vary: eager buffers grow */
        for (rsp_rid r = 1; r <= n; r++) {
            sb_row(&b, r, 0, 1);
            if (id % 3 == 0)
                sb_row(&b, r, d, 2);
        }
        if (id % 3 == 0) {
            sb_pre(&b, 0, d);
            sb_post(&b, d, 0);
        }
        if (id % 4 == 1)
            sb_lease(&b, 8, (uint32_t)(id % 2), 0);
        fx_admit_ok(&f, &b.s);
        if (id % 5 == 2) {
            b.s.preplan = true;
            h.calls = 0;
            assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
            assert_int_equal(h.calls, 1);
            assert_plan_covered(&f, &h);
            b.s.preplan = false;
        }
        h.calls = 0;
        assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
        assert_int_equal(h.calls, 1);
        assert_plan_covered(&f, &h);
        h.calls = 0;
        assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
        assert_int_equal(h.calls, 1);
        assert_covered(&f, &h);
        if (id % 4 == 0) {
            h.calls = 0;
            assert_int_equal(fx_remove(&f, 1), RSP_OK);
            assert_int_equal(h.calls, 1);
            assert_covered(&f, &h);
        }
    }
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A hook that fails refuses the call: its status and message, nothing
 * changed, no work. */
static void failing_hook_changes_nothing(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    hook_state h = {0};
    rsp__core_set_reserve_hook(f.core, record_hook, &h);
    rsp_label_id d = fx_label(&f, "draft");
    stepb b;
    sb_init(&b, 1);
    for (rsp_rid r = 1; r <= 3; r++)
        sb_row(&b, r, 0, 1);
    fx_run_step(&f, &b.s);
    sb_init(&b, 2);
    for (rsp_rid r = 1; r <= 3; r++) {
        sb_row(&b, r, 0, 1);
        sb_row(&b, r, d, 2);
    }
    sb_pre(&b, 0, d);
    sb_post(&b, d, 0);
    fx_admit_ok(&f, &b.s); /* admit emits no work: the hook is not asked */

    snap before, after;
    h.fail_with = RSP_ENOMEM;
    snap_take(&f, &before);
    assert_int_equal(fx_plan(&f, &b.s), RSP_ENOMEM);
    assert_int_equal(fx_reset(&f, 1, false), RSP_ENOMEM);
    assert_int_equal(fx_remove(&f, 2), RSP_ENOMEM);
    assert_int_equal(fx_rollback(&f, 2, NULL), RSP_ENOMEM);
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);

    h.fail_with = RSP_OK;
    assert_int_equal(fx_plan(&f, &b.s), RSP_OK);
    h.fail_with = RSP_ENOMEM;
    snap_take(&f, &before);
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_ENOMEM);
    snap_take(&f, &after);
    snap_assert_equal(&before, &after);
    h.fail_with = RSP_OK;
    assert_int_equal(fx_commit(&f, &b.s, &done_ev), RSP_OK);
    fx_check_invariants(&f);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(need_covers_work_and_plan),
        cmocka_unit_test(failing_hook_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
