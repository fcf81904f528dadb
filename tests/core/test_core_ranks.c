/* Tensor-parallel ranks agree on slot ids (docs/semantics.md 2): two cores with
 * different ranks (and different local shapes) driven by the same sequence
 * make the same pops and pushes. SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "helpers.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void init_rank(fx *f, uint32_t rank)
{
    memset(f, 0, sizeof *f);
    rsp_pool_config_init(&f->cfg);
    f->blocks[0] = (rsp_block_config){.name = "conv",
                                      .dtype = RSP_DTYPE_F32,
                                      .ndim = 2,
                                      .shape = {4, 8},
                                      .num_shard_dims = 1,
                                      .shard_dims = {1}};
    f->blocks[1] = (rsp_block_config){.name = "ssm",
                                      .dtype = RSP_DTYPE_F16,
                                      .ndim = 1,
                                      .shape = {6},
                                      .num_shard_dims = 1,
                                      .shard_dims = {0}};
    f->cfg.blocks = f->blocks;
    f->cfg.num_blocks = 2;
    f->cfg.num_layers = 2;
    f->cfg.max_slots = 12;
    f->cfg.world_size = 2;
    f->cfg.rank = rank;
    fx_init_cfg(f, &f->cfg);
}

static void compare(fx *a, fx *b, rsp_label_id nl)
{
    uint32_t oa[16], ob[16];
    uint32_t na = rsp__core_free_order(a->core, oa, 16), nb = rsp__core_free_order(b->core, ob, 16);
    assert_int_equal(na, nb);
    assert_memory_equal(oa, ob, na * sizeof *oa);
    for (rsp_rid r = 0; r < 24; r++)
        for (rsp_label_id l = 0; l < nl; l++) {
            rsp_rid rid = r * 0x9e3779b97f4a7c15ull; /* spread over the hash */
            assert_int_equal(fx_slot(a, rid, l), fx_slot(b, rid, l));
        }
}

static void ranks_make_identical_allocations(void **state)
{
    (void)state;
    fx a, b;
    init_rank(&a, 0);
    init_rank(&b, 1);
    rsp_label_id d = fx_label(&a, "draft");
    assert_int_equal(fx_label(&b, "draft"), d);
    /* Give rank 1 a much larger rid table (other requests it knows about),
     * so that any iteration in hash order would differ between the ranks. */
    for (rsp_rid r = 0; r < 3000; r++)
        assert_int_equal(fx_ingest(&b, (1ull << 63) | r), RSP_OK);
    for (uint64_t id = 1; id <= 3000; id++) {
        stepb s;
        sb_init(&s, id);
        uint32_t n = 1 + (uint32_t)(next() % 6);
        for (uint32_t i = 0; i < n; i++) {
            rsp_rid rid = (next() % 24) * 0x9e3779b97f4a7c15ull;
            rsp_label_id l = next() % 3 == 0 ? d : 0;
            bool dup = false;
            for (uint32_t k = 0; k < s.s.num_rows; k++)
                dup |= s.rows[k].rid == rid && s.rows[k].label == l;
            if (!dup)
                sb_row(&s, rid, l, (int32_t)(next() % 3));
        }
        if (next() % 3 == 0)
            sb_pre(&s, 0, d);
        if (next() % 4 == 0)
            sb_post(&s, d, 0);
        rsp_admit_outcome oa, ob;
        assert_int_equal(fx_admit(&a, &s.s, &oa), RSP_OK);
        assert_int_equal(fx_admit(&b, &s.s, &ob), RSP_OK);
        assert_int_equal(oa.ok, ob.ok);
        if (oa.ok) {
            if (next() % 5 == 0) {
                assert_int_equal(fx_rollback(&a, id, NULL), RSP_OK);
                assert_int_equal(fx_rollback(&b, id, NULL), RSP_OK);
            } else {
                assert_int_equal(fx_plan(&a, &s.s), RSP_OK);
                assert_int_equal(fx_plan(&b, &s.s), RSP_OK);
                assert_int_equal(fx_commit(&a, &s.s, NULL), RSP_OK);
                assert_int_equal(fx_commit(&b, &s.s, NULL), RSP_OK);
            }
        }
        if (next() % 3 == 0) {
            rsp_rid rid = (next() % 24) * 0x9e3779b97f4a7c15ull;
            bool free = next() % 2;
            if (next() % 2) {
                assert_int_equal(fx_remove(&a, rid), RSP_OK);
                assert_int_equal(fx_remove(&b, rid), RSP_OK);
            } else {
                assert_int_equal(fx_reset(&a, rid, free), RSP_OK);
                assert_int_equal(fx_reset(&b, rid, free), RSP_OK);
            }
        }
        compare(&a, &b, 2);
    }
    fx_check_invariants(&a);
    assert_int_equal(fx_stats(&a).generation, fx_stats(&b).generation);
    fx_fini(&a);
    fx_fini(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ranks_make_identical_allocations),
    };
    return cmocka_run_group_tests_name("core_ranks", tests, NULL, NULL);
}
