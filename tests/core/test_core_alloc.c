/* No allocation per step after warm-up (item 4): malloc, calloc and
 * realloc are wrapped at link time (-Wl,--wrap) and counted while a steady
 * workload runs. SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);

static bool counting;
static unsigned long allocs;

void *__wrap_malloc(size_t n);
void *__wrap_malloc(size_t n)
{
    allocs += counting;
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size)
{
    allocs += counting;
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n)
{
    allocs += counting;
    return __real_realloc(p, n);
}

static const int fence_dummy = 0;

/* One step of a steady serving loop: 8 requests decode, every third step
 * forks main -> draft before and draft -> main after, every other step is
 * staged first and promoted, every 5th step is refused by "other resources"
 * and rolled back, every 7th a request finishes and a new one arrives
 * (removed while the step that addresses it is in flight). Returns the
 * status of the first failing call, RSP_OK otherwise; no assertions, so the
 * counted section calls nothing but the core. */
static rsp_status one_step(rsp__core *core, rsp__work *w, uint64_t id, rsp_label_id draft,
                           rsp_rid *rids)
{
    rsp_row rows[16];
    uint32_t n = 0;
    for (int i = 0; i < 8; i++) {
        rows[n++] = (rsp_row){.rid = rids[i], .label = RSP_LABEL_MAIN, .span = 1};
        if (id % 3 == 0)
            rows[n++] = (rsp_row){.rid = rids[i], .label = draft, .span = 2};
    }
    rsp_fork pre = {RSP_LABEL_MAIN, draft, 0}, post = {draft, RSP_LABEL_MAIN, 0};
    rsp_step s = {.step_id = id, .rows = rows, .num_rows = n};
    if (id % 3 == 0) {
        s.pre_forks = &pre;
        s.num_pre_forks = 1;
        s.post_forks = &post;
        s.num_post_forks = 1;
    }
    if (id % 4 == 1)
        s.has_lease = true,
        s.lease = (rsp_lease){.bucket_bs = 16, .bucket_id = 0, .lease_slot = (uint32_t)(id % 2)};
    rsp_event done = {.kind = RSP_EVENT_HOST_FENCE, .handle = (void *)&fence_dummy, .value = id};
    rsp_admit_outcome out;
    rsp__plan_out plan;
    rsp_status st;
    rsp__work_clear(w);
    if ((st = rsp__core_admit(core, &s, &out, w, NULL)) || !out.ok)
        return st ? st : RSP_ECAPACITY;
    if (id % 5 == 0)
        return rsp__core_rollback(core, id, NULL, w, NULL, NULL);
    if (id % 2 == 0) {
        s.preplan = true;
        if ((st = rsp__core_plan(core, &s, &plan, w, NULL)))
            return st;
        s.preplan = false;
    }
    if ((st = rsp__core_plan(core, &s, &plan, w, NULL)))
        return st;
    if (id % 7 == 0) {
        if ((st = rsp__core_remove(core, rids[id % 8], w, NULL)))
            return st;
        rids[id % 8] += 1000;
        if ((st = rsp__core_ingest(core, rids[id % 8], NULL)))
            return st;
    }
    if (id % 11 == 0 && (st = rsp__core_reset(core, rids[(id + 1) % 8], false, w, NULL)))
        return st;
    return rsp__core_commit(core, &s, &done, w, NULL, NULL);
}

static void steady_steps_allocate_nothing_after_warm_up(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 40, true);
    rsp_label_id draft = fx_label(&f, "draft");
    rsp_rid rids[8];
    for (int i = 0; i < 8; i++)
        rids[i] = (rsp_rid)i + 1;
    uint64_t id = 1;
    for (; id <= 300; id++)
        assert_int_equal(one_step(f.core, &f.work, id, draft, rids), RSP_OK);
    allocs = 0;
    counting = true;
    rsp_status st = RSP_OK;
    for (; id <= 1300 && st == RSP_OK; id++)
        st = one_step(f.core, &f.work, id, draft, rids);
    counting = false;
    assert_int_equal(st, RSP_OK);
    assert_int_equal(allocs, 0);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void wrapping_is_in_effect(void **state)
{
    (void)state;
    /* The counter must see the core's allocations, or the test above
     * proves nothing. */
    allocs = 0;
    counting = true;
    rsp__core *core = NULL;
    rsp_block_config b = {.name = "x", .dtype = RSP_DTYPE_U8, .ndim = 1, .shape = {4}};
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.blocks = &b;
    cfg.num_blocks = 1;
    cfg.num_layers = 1;
    cfg.max_slots = 4;
    rsp_status st = rsp__core_create(&cfg, &core, NULL);
    counting = false;
    assert_int_equal(st, RSP_OK);
    assert_true(allocs > 0);
    rsp__core_destroy(core);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(wrapping_is_in_effect),
        cmocka_unit_test(steady_steps_allocate_nothing_after_warm_up),
    };
    return cmocka_run_group_tests_name("core_alloc", tests, NULL, NULL);
}
