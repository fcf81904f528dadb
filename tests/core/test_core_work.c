/* The device work list (work.h): merging, copy batching rules, error-path
 * marks. SPDX-License-Identifier: Apache-2.0 */
#include <string.h>

#include "core/work_impl.h"
#include "helpers.h"

static void consecutive_zeros_merge_into_one_op(void **state)
{
    (void)state;
    rsp__work w;
    rsp__work_init(&w);
    assert_true(rsp__work_empty(&w));
    for (uint32_t s = 1; s <= 5; s++)
        assert_int_equal(rsp__work_zero(&w, s), RSP_OK);
    assert_int_equal(w.num_ops, 1);
    assert_int_equal(w.ops[0].kind, RSP__OP_ZERO);
    assert_int_equal(w.ops[0].first, 0);
    assert_int_equal(w.ops[0].count, 5);
    rsp_event ev = {.handle = NULL, .value = 3};
    assert_int_equal(rsp__work_wait(&w, &ev), RSP_OK);
    assert_int_equal(rsp__work_zero(&w, 9), RSP_OK);
    /* A WAIT between them keeps them apart: order matters. */
    assert_int_equal(w.num_ops, 3);
    assert_int_equal(w.ops[2].first, 5);
    assert_int_equal(w.ops[2].count, 1);
    rsp__work_clear(&w);
    assert_true(rsp__work_empty(&w));
    assert_int_equal(w.num_slots, 0);
    rsp__work_fini(&w);
}

static void independent_copies_batch_into_one_op(void **state)
{
    (void)state;
    rsp__work w;
    rsp__work_init(&w);
    assert_int_equal(rsp__work_copy(&w, 1, 2), RSP_OK);
    assert_int_equal(rsp__work_copy(&w, 3, 4), RSP_OK);
    assert_int_equal(rsp__work_copy(&w, 1, 5), RSP_OK); /* same source twice is fine */
    assert_int_equal(w.num_ops, 1);
    assert_int_equal(w.ops[0].count, 3);
    rsp__work_fini(&w);
}

static void chains_and_conflicts_split_into_ordered_copies(void **state)
{
    (void)state;
    rsp__work w;
    rsp__work_init(&w);
    assert_int_equal(rsp__work_copy(&w, 1, 2), RSP_OK);
    assert_int_equal(rsp__work_copy(&w, 2, 3), RSP_OK); /* reads what 1->2 writes */
    assert_int_equal(w.num_ops, 2);
    assert_int_equal(rsp__work_copy(&w, 4, 2), RSP_OK); /* writes what 2->3 reads */
    assert_int_equal(w.num_ops, 3);
    assert_int_equal(rsp__work_copy(&w, 5, 2), RSP_OK); /* writes 2 twice */
    assert_int_equal(w.num_ops, 4);
    assert_int_equal(rsp__work_copy(&w, 6, 6), RSP_OK); /* onto itself: nothing */
    assert_int_equal(w.num_pairs, 4);
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(w.ops[i].kind, RSP__OP_COPY);
        assert_int_equal(w.ops[i].first, i);
        assert_int_equal(w.ops[i].count, 1);
    }
    rsp__work_fini(&w);
}

static void mark_restore_puts_the_list_back(void **state)
{
    (void)state;
    rsp__work w;
    rsp__work_init(&w);
    assert_int_equal(rsp__work_zero(&w, 1), RSP_OK);
    rsp__work_mark m;
    rsp__work_mark_take(&w, &m);
    assert_int_equal(rsp__work_zero(&w, 2), RSP_OK); /* merged into op 0 */
    assert_int_equal(rsp__work_copy(&w, 3, 4), RSP_OK);
    assert_int_equal(rsp__work_buffer(&w, 0, 8), RSP_OK);
    rsp__work_mark_restore(&w, &m);
    assert_int_equal(w.num_ops, 1);
    assert_int_equal(w.num_slots, 1);
    assert_int_equal(w.num_pairs, 0);
    assert_int_equal(w.ops[0].count, 1);
    rsp__work_fini(&w);
}

/* After an error path drops a later COPY op, the op left last must still
 * refuse a pair that conflicts with it, even though the dropped op had
 * re-marked the same slots. */
static void copy_after_mark_restore_still_sees_conflicts(void **state)
{
    (void)state;
    rsp__work w;
    rsp__work_init(&w);
    assert_int_equal(rsp__work_copy(&w, 5, 6), RSP_OK); /* op A writes 6 */
    rsp__work_mark m;
    rsp__work_mark_take(&w, &m);
    assert_int_equal(rsp__work_copy(&w, 7, 6), RSP_OK); /* writes 6 too: op B */
    assert_int_equal(w.num_ops, 2);
    rsp__work_mark_restore(&w, &m);
    assert_int_equal(w.num_ops, 1);
    assert_int_equal(rsp__work_copy(&w, 8, 6), RSP_OK); /* writes 6 again */
    assert_int_equal(w.num_ops, 2);                     /* so it must not join op A */
    assert_int_equal(rsp__work_copy(&w, 9, 10), RSP_OK);
    assert_int_equal(w.num_ops, 2); /* independent pairs still batch */
    rsp__work_fini(&w);
}

static void reserve_then_append_does_not_grow(void **state)
{
    (void)state;
    rsp__work w;
    rsp__work_init(&w);
    assert_int_equal(rsp__work_reserve(&w, 200, 100, 100), RSP_OK);
    rsp__op *ops = w.ops;
    uint32_t *slots = w.slots;
    rsp__copy *pairs = w.pairs;
    for (uint32_t i = 0; i < 100; i++) {
        assert_int_equal(rsp__work_zero(&w, i), RSP_OK);
        assert_int_equal(rsp__work_copy(&w, 1000 + i, 2000 + i), RSP_OK);
    }
    assert_ptr_equal(w.ops, ops);
    assert_ptr_equal(w.slots, slots);
    assert_ptr_equal(w.pairs, pairs);
    rsp__work_fini(&w);
}

static void upload_and_buffer_ops_carry_their_fields(void **state)
{
    (void)state;
    rsp__work w;
    rsp__work_init(&w);
    int32_t idx[3] = {1, 2, 0};
    bool hs[3] = {true, false, false};
    assert_int_equal(rsp__work_buffer(&w, 7, 16), RSP_OK);
    assert_int_equal(rsp__work_upload(&w, 7, idx, hs, 3), RSP_OK);
    assert_int_equal(w.ops[0].kind, RSP__OP_BUFFER);
    assert_int_equal(w.ops[0].buffer, 7);
    assert_int_equal(w.ops[0].capacity, 16);
    assert_int_equal(w.ops[1].kind, RSP__OP_UPLOAD);
    assert_ptr_equal(w.ops[1].slot_indices, idx);
    assert_ptr_equal(w.ops[1].has_state, hs);
    assert_int_equal(w.ops[1].count, 3);
    rsp__work_fini(&w);
}

static void executor_rejects_overlapping_copies(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp__work w;
    rsp__work_init(&w);
    /* Hand-built bad list: one COPY op with a chain inside. */
    assert_int_equal(rsp__work_reserve(&w, 1, 0, 2), RSP_OK);
    w.pairs[0] = (rsp__copy){1, 2};
    w.pairs[1] = (rsp__copy){2, 3};
    w.ops[0] = (rsp__op){.kind = RSP__OP_COPY, .first = 0, .count = 2};
    w.num_ops = 1;
    w.num_pairs = 2;
    assert_false(rsp_test_store_apply(f.store, &w));
    assert_non_null(strstr(rsp_test_store_error(f.store), "both source and destination"));
    rsp__work_clear(&w);
    int32_t idx[2] = {1, 2};
    bool hs[2] = {false, false};
    assert_int_equal(rsp__work_upload(&w, 3, idx, hs, 2), RSP_OK);
    assert_false(rsp_test_store_apply(f.store, &w)); /* no BUFFER before */
    rsp__work_fini(&w);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(consecutive_zeros_merge_into_one_op),
        cmocka_unit_test(independent_copies_batch_into_one_op),
        cmocka_unit_test(chains_and_conflicts_split_into_ordered_copies),
        cmocka_unit_test(mark_restore_puts_the_list_back),
        cmocka_unit_test(copy_after_mark_restore_still_sees_conflicts),
        cmocka_unit_test(reserve_then_append_does_not_grow),
        cmocka_unit_test(upload_and_buffer_ops_carry_their_fields),
        cmocka_unit_test(executor_rejects_overlapping_copies),
    };
    return cmocka_run_group_tests_name("core_work", tests, NULL, NULL);
}
