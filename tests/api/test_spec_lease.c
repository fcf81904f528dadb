/*
 * Per-token index tensors under a lease (docs/semantics.md 9.3) on the
 * host device: the device copy is one buffer per leased key whose address
 * and width stay across plans, rewritten by each plan with its pads; a row
 * wider than the key's tensor is refused with nothing changed; without a
 * lease the device copy is the host copy.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

static rsp_pool *make_pool(int32_t *pad)
{
    static const rsp_block_config block = {
        .name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 1;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 32;
    rsp_pool *pool = NULL;
    assert_int_equal(rsp_pool_create(&cfg, &pool, NULL), RSP_OK);
    rsp_pool_info info;
    assert_int_equal(rsp_pool_info_get(pool, &info, NULL), RSP_OK);
    *pad = info.pad_index;
    return pool;
}

static rsp_row spec_row(rsp_rid rid, int32_t span)
{
    rsp_row r;
    memset(&r, 0, sizeof r); /* the per-token fields were tail padding */
    r.rid = rid;
    r.label = RSP_LABEL_MAIN;
    r.span = span;
    r.per_token_states = span > 0 ? 1 : 0;
    if (span == 0)
        r.span = 1; /* a plain decode row */
    return r;
}

/* The live plan's tensor and vector of the main label, the plan kept
 * referenced until unref, its ready event waited for. */
static const rsp_plan *live_tensor(rsp_pool *pool, rsp_spec_indices *si, rsp_addressing *a)
{
    rsp_error err;
    assert_int_equal(rsp_read_begin(), RSP_OK);
    const rsp_plan *plan = rsp_plan_ref(rsp_plan_live(pool));
    rsp_read_end();
    assert_non_null(plan);
    assert_int_equal(rsp_plan_spec_indices(plan, RSP_LABEL_MAIN, si, &err), RSP_OK);
    assert_int_equal(rsp_plan_addressing(plan, RSP_LABEL_MAIN, a, &err), RSP_OK);
    assert_int_equal(rsp_event_wait(pool, &si->ready, RSP_WAIT_FOREVER, &err), RSP_OK);
    return plan;
}

/* Column 0 is the vector, every entry the host copy has the device copy
 * has, and rows past num_rows are pads. */
static void check_tensor(const rsp_spec_indices *si, const rsp_addressing *a, int32_t pad)
{
    const int32_t *dev = si->device_indices;
    assert_non_null(dev);
    assert_int_equal(si->length, a->length);
    for (uint32_t i = 0; i < si->length; i++) {
        assert_int_equal(si->indices[(size_t)i * si->width], a->slot_indices[i]);
        for (uint32_t t = 0; t < si->width; t++) {
            size_t k = (size_t)i * si->width + t;
            assert_int_equal(dev[k], si->indices[k]);
            if (i >= si->num_rows)
                assert_int_equal(si->indices[k], pad);
        }
    }
}

static void step_through(rsp_pool *pool, const rsp_step *step)
{
    rsp_admit_outcome out;
    rsp_error err;
    assert_int_equal(rsp_step_admit(pool, step, &out, &err), RSP_OK);
    assert_true(out.ok);
    assert_int_equal(rsp_step_plan(pool, step, &err), RSP_OK);
}

static void commit(rsp_pool *pool, const rsp_step *step)
{
    const rsp_event done = rsp_event_complete();
    rsp_error err;
    assert_int_equal(rsp_step_commit(pool, step, &done, &err), RSP_OK);
}

static void leased_tensor_address_and_width_stay_across_plans(void **state)
{
    (void)state;
    int32_t pad;
    rsp_pool *pool = make_pool(&pad);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    const rsp_lease lease = {.bucket_bs = 4, .bucket_id = 0, .lease_slot = 0};
    rsp_row rows[2] = {spec_row(1, 3), spec_row(2, 2)};
    rsp_step step = {.step_id = 1, .rows = rows, .num_rows = 2, .has_lease = true, .lease = lease};
    step_through(pool, &step);
    rsp_spec_indices si;
    rsp_addressing a;
    const rsp_plan *plan = live_tensor(pool, &si, &a);
    assert_int_equal(si.width, 4); /* 1 + the widest span */
    assert_int_equal(si.length, 4);
    assert_ptr_not_equal(si.device_indices, si.indices); /* the key's buffer, not the copy */
    check_tensor(&si, &a, pad);
    assert_int_equal(si.indices[1 * 4 + 3], pad); /* rid 2's span 2: its last column pads */
    void *addr = si.device_indices;
    rsp_plan_unref(plan);
    rows[0].accepted = 2;
    rows[1].accepted = 1;
    commit(pool, &step);

    /* Narrower rows, then a plain step: the same buffer, the same width. */
    rsp_row narrow[1] = {spec_row(1, 1)};
    rsp_step s2 = {.step_id = 2, .rows = narrow, .num_rows = 1, .has_lease = true, .lease = lease};
    step_through(pool, &s2);
    plan = live_tensor(pool, &si, &a);
    assert_ptr_equal(si.device_indices, addr);
    assert_int_equal(si.width, 4);
    check_tensor(&si, &a, pad);
    assert_int_not_equal(si.indices[1], pad); /* its output slot */
    assert_int_equal(si.indices[2], pad);
    assert_int_equal(si.indices[3], pad);
    rsp_plan_unref(plan);
    commit(pool, &s2);

    rsp_row plain[2] = {spec_row(1, 0), spec_row(2, 0)};
    rsp_step s3 = {.step_id = 3, .rows = plain, .num_rows = 2, .has_lease = true, .lease = lease};
    step_through(pool, &s3);
    plan = live_tensor(pool, &si, &a);
    assert_ptr_equal(si.device_indices, addr);
    assert_int_equal(si.width, 4);
    check_tensor(&si, &a, pad);
    for (uint32_t i = 0; i < si.length; i++)
        for (uint32_t t = 1; t < si.width; t++)
            assert_int_equal(si.indices[i * si.width + t], pad); /* no outputs this step */
    rsp_plan_unref(plan);
    commit(pool, &s3);
    rsp_reader_unregister();
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void capture_rows_fix_the_width(void **state)
{
    (void)state;
    int32_t pad;
    rsp_pool *pool = make_pool(&pad);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    const rsp_lease lease = {.bucket_bs = 2, .bucket_id = 1, .lease_slot = 0};
    rsp_row dummies[2] = {spec_row(90, 5), spec_row(91, 5)};
    rsp_step cap = {.step_id = 1,
                    .rows = dummies,
                    .num_rows = 2,
                    .capture = true,
                    .has_lease = true,
                    .lease = lease};
    step_through(pool, &cap);
    rsp_spec_indices si;
    rsp_addressing a;
    const rsp_plan *plan = live_tensor(pool, &si, &a);
    assert_int_equal(si.width, 6);
    for (uint32_t k = 0; k < si.length * si.width; k++)
        assert_int_equal(si.indices[k], pad); /* a capture addresses nothing */
    void *addr = si.device_indices;
    rsp_plan_unref(plan);
    commit(pool, &cap);

    rsp_row rows[1] = {spec_row(1, 3)};
    rsp_step s2 = {.step_id = 2, .rows = rows, .num_rows = 1, .has_lease = true, .lease = lease};
    step_through(pool, &s2);
    plan = live_tensor(pool, &si, &a);
    assert_ptr_equal(si.device_indices, addr);
    assert_int_equal(si.width, 6);
    check_tensor(&si, &a, pad);
    rsp_plan_unref(plan);
    commit(pool, &s2);
    rsp_reader_unregister();
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void row_wider_than_the_lease_is_refused(void **state)
{
    (void)state;
    int32_t pad;
    rsp_pool *pool = make_pool(&pad);
    const rsp_lease lease = {.bucket_bs = 2, .bucket_id = 0, .lease_slot = 0};
    rsp_row rows[1] = {spec_row(1, 2)};
    rsp_step s1 = {.step_id = 1, .rows = rows, .num_rows = 1, .has_lease = true, .lease = lease};
    step_through(pool, &s1);
    commit(pool, &s1);

    rsp_row wide[1] = {spec_row(1, 4)};
    rsp_step s2 = {.step_id = 2, .rows = wide, .num_rows = 1, .has_lease = true, .lease = lease};
    rsp_admit_outcome out;
    rsp_error err;
    assert_int_equal(rsp_step_admit(pool, &s2, &out, &err), RSP_OK);
    rsp_stats before, after;
    assert_int_equal(rsp_stats_snapshot(pool, &before, NULL), RSP_OK);
    assert_int_equal(rsp_step_plan(pool, &s2, &err), RSP_ECAPACITY);
    assert_non_null(strstr(err.message, "too small"));
    assert_int_equal(rsp_stats_snapshot(pool, &after, NULL), RSP_OK);
    assert_int_equal(after.held_slots, before.held_slots);
    assert_int_equal(after.free_slots, before.free_slots);
    assert_int_equal(after.plans, before.plans);
    /* Nothing changed: the step is still admitted and plans on another
     * lease slot, whose key gets a tensor of its own width. */
    s2.lease.lease_slot = 1;
    assert_int_equal(rsp_step_plan(pool, &s2, &err), RSP_OK);
    commit(pool, &s2);
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

static void without_a_lease_the_device_copy_is_the_host_copy(void **state)
{
    (void)state;
    int32_t pad;
    rsp_pool *pool = make_pool(&pad);
    assert_int_equal(rsp_reader_register(NULL), RSP_OK);
    rsp_row rows[1] = {spec_row(1, 2)};
    rsp_step s1 = {.step_id = 1, .rows = rows, .num_rows = 1};
    step_through(pool, &s1);
    rsp_spec_indices si;
    rsp_addressing a;
    const rsp_plan *plan = live_tensor(pool, &si, &a);
    assert_int_equal(si.width, 3);
    assert_ptr_equal(si.device_indices, si.indices);
    rsp_plan_unref(plan);
    commit(pool, &s1);
    rsp_reader_unregister();
    assert_int_equal(rsp_pool_close(pool, NULL), RSP_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(leased_tensor_address_and_width_stay_across_plans),
        cmocka_unit_test(capture_rows_fix_the_width),
        cmocka_unit_test(row_wider_than_the_lease_is_refused),
        cmocka_unit_test(without_a_lease_the_device_copy_is_the_host_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
