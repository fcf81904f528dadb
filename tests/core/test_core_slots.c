/* Slots, holdings, the free stack, the sink, request lifecycle
 * (docs/semantics.md 2, 3). SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <string.h>

#include "helpers.h"

/* Admit + plan + commit one row of (rid, label, span 1). */
static void touch(fx *f, uint64_t step, rsp_rid rid, rsp_label_id label)
{
    stepb b;
    sb_init(&b, step);
    sb_row(&b, rid, label, 1);
    fx_run_step(f, &b.s);
}

static void fresh_pool_pops_ascending_from_one_with_sink(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    assert_int_equal(rsp__core_slot_state(f.core, 0), RSP__SLOT_SINK);
    uint32_t order[8];
    assert_int_equal(rsp__core_free_order(f.core, order, 8), 5);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal(order[i], i + 1);
    for (rsp_rid r = 0; r < 5; r++)
        touch(&f, r, 100 + r, RSP_LABEL_MAIN);
    for (rsp_rid r = 0; r < 5; r++)
        assert_int_equal(fx_slot(&f, 100 + r, RSP_LABEL_MAIN), (int32_t)r + 1);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void fresh_pool_pops_ascending_from_zero_without_sink(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, false);
    assert_int_equal(rsp__core_slot_state(f.core, 0), RSP__SLOT_FREE);
    for (rsp_rid r = 0; r < 4; r++)
        touch(&f, r, r, RSP_LABEL_MAIN);
    for (rsp_rid r = 0; r < 4; r++)
        assert_int_equal(fx_slot(&f, r, RSP_LABEL_MAIN), (int32_t)r);
    assert_int_equal(fx_stats(&f).free_slots, 0);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void most_recently_released_slot_is_reused_first(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    for (rsp_rid r = 1; r <= 5; r++)
        touch(&f, r, r, RSP_LABEL_MAIN); /* slots 1..5 */
    assert_int_equal(fx_remove(&f, 2), RSP_OK);
    assert_int_equal(fx_remove(&f, 4), RSP_OK);
    uint32_t order[8];
    assert_int_equal(rsp__core_free_order(f.core, order, 8), 4);
    assert_int_equal(order[0], 4);
    assert_int_equal(order[1], 2);
    assert_int_equal(order[2], 6);
    touch(&f, 10, 20, RSP_LABEL_MAIN);
    touch(&f, 11, 21, RSP_LABEL_MAIN);
    touch(&f, 12, 22, RSP_LABEL_MAIN);
    assert_int_equal(fx_slot(&f, 20, 0), 4);
    assert_int_equal(fx_slot(&f, 21, 0), 2);
    assert_int_equal(fx_slot(&f, 22, 0), 6);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* Creation writes no per-slot state: the free stack's slots never handed
 * out are implicit (core_impl.h), its hash computed in closed form. Both
 * read as the stack of every slot pushed in descending order, at sizes
 * around powers of two and large (from 65537 slots the slot array and the
 * stack are mappings, util/mem.h); two slots taken and given back lie on
 * top in release order. */
static void fresh_pool_stack_and_hash_match_a_full_push_at_any_size(void **state)
{
    (void)state;
    static const uint32_t sizes[] = {1, 2, 3, 4, 5, 255, 256, 257, 4096, 65537, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int sink = 0; sink < 2; sink++) {
            if (sink && sizes[i] < 2)
                continue;
            fx f;
            fx_init(&f, sizes[i], sink);
            uint32_t first = sink ? 1u : 0u;
            assert_int_equal(fx_stats(&f).free_slots, sizes[i] - first);
            uint32_t order[300];
            uint32_t n = rsp__core_free_order(f.core, order, 300);
            assert_int_equal(n, sizes[i] - first);
            for (uint32_t k = 0; k < n && k < 300; k++)
                assert_int_equal(order[k], first + k);
            fx_check_invariants(&f); /* the hash, by its definition */
            if (n >= 2) {
                touch(&f, 1, 1, RSP_LABEL_MAIN);
                touch(&f, 2, 2, RSP_LABEL_MAIN);
                assert_int_equal(fx_stats(&f).free_slots, n - 2);
                assert_int_equal(fx_remove(&f, 1), RSP_OK);
                assert_int_equal(fx_remove(&f, 2), RSP_OK);
                assert_int_equal(rsp__core_free_order(f.core, order, 300), n);
                assert_int_equal(order[0], first + 1);
                assert_int_equal(order[1], first);
                fx_check_invariants(&f);
            }
            fx_fini(&f);
        }
}

/* Filled to its last slot, then released in some order and filled again:
 * the released slots come back last released first, whether they were
 * fresh or came back before; the free count follows. */
static void pool_filled_to_the_last_slot_reuses_in_release_order(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    for (rsp_rid r = 1; r <= 5; r++)
        touch(&f, r, r, RSP_LABEL_MAIN); /* slots 1..5: every slot */
    assert_int_equal(fx_stats(&f).free_slots, 0);
    uint32_t order[8];
    assert_int_equal(rsp__core_free_order(f.core, order, 8), 0);
    assert_true(rsp__core_free_hash(f.core) == 0);
    fx_check_invariants(&f);
    assert_int_equal(fx_remove(&f, 3), RSP_OK);
    assert_int_equal(fx_remove(&f, 5), RSP_OK);
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    assert_int_equal(fx_stats(&f).free_slots, 3);
    assert_int_equal(rsp__core_free_order(f.core, order, 8), 3);
    assert_int_equal(order[0], 1);
    assert_int_equal(order[1], 5);
    assert_int_equal(order[2], 3);
    fx_check_invariants(&f);
    touch(&f, 10, 10, RSP_LABEL_MAIN);
    touch(&f, 11, 11, RSP_LABEL_MAIN);
    assert_int_equal(fx_slot(&f, 10, 0), 1);
    assert_int_equal(fx_slot(&f, 11, 0), 5);
    assert_int_equal(fx_remove(&f, 2), RSP_OK);
    touch(&f, 12, 12, RSP_LABEL_MAIN);
    touch(&f, 13, 13, RSP_LABEL_MAIN);
    assert_int_equal(fx_slot(&f, 12, 0), 2);
    assert_int_equal(fx_slot(&f, 13, 0), 3);
    assert_int_equal(fx_stats(&f).free_slots, 0);
    fx_check_invariants(&f);
    fx_fini(&f);
}

/* A slot taken fresh and released again lies where it lay before it was
 * taken: the stack, the next slots handed out and the hash (which plan
 * digests carry, compared across ranks) equal a pool's that never took it,
 * though one holds it pushed and the other fresh. */
static void slot_released_onto_fresh_slots_equals_never_taken(void **state)
{
    (void)state;
    fx a, b;
    fx_init(&a, 7, true);
    fx_init(&b, 7, true);
    touch(&b, 1, 1, RSP_LABEL_MAIN); /* slot 1 */
    touch(&b, 2, 2, RSP_LABEL_MAIN); /* slot 2 */
    assert_int_equal(fx_reset(&b, 2, true), RSP_OK);
    assert_int_equal(fx_remove(&b, 1), RSP_OK);
    uint32_t oa[8], ob[8];
    assert_int_equal(rsp__core_free_order(a.core, oa, 8), 6);
    assert_int_equal(rsp__core_free_order(b.core, ob, 8), 6);
    assert_memory_equal(oa, ob, sizeof oa[0] * 6);
    assert_true(rsp__core_free_hash(a.core) == rsp__core_free_hash(b.core));
    fx_check_invariants(&a);
    fx_check_invariants(&b);
    for (rsp_rid r = 1; r <= 6; r++) {
        touch(&a, 10 + r, 20 + r, RSP_LABEL_MAIN);
        touch(&b, 10 + r, 20 + r, RSP_LABEL_MAIN);
        assert_int_equal(fx_slot(&a, 20 + r, 0), (int32_t)r);
        assert_int_equal(fx_slot(&b, 20 + r, 0), (int32_t)r);
        assert_true(rsp__core_free_hash(a.core) == rsp__core_free_hash(b.core));
    }
    fx_fini(&a);
    fx_fini(&b);
}

static void sink_is_never_handed_out(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 3, true);
    touch(&f, 1, 1, 0);
    touch(&f, 2, 2, 0);
    stepb b;
    sb_init(&b, 3);
    sb_row(&b, 3, 0, 1);
    rsp_admit_outcome out;
    assert_int_equal(fx_admit(&f, &b.s, &out), RSP_OK);
    assert_false(out.ok);
    assert_int_equal(rsp__core_slot_state(f.core, 0), RSP__SLOT_SINK);
    assert_int_not_equal(fx_slot(&f, 1, 0), 0);
    assert_int_not_equal(fx_slot(&f, 2, 0), 0);
    fx_fini(&f);
}

static void new_holding_has_no_state_and_reads_zeros(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    stepb b;
    sb_init(&b, 1);
    sb_row(&b, 7, 0, 4);
    fx_admit_ok(&f, &b.s);
    rsp_holding h;
    assert_int_equal(rsp__core_holding(f.core, 7, 0, &h, NULL), RSP_OK);
    assert_int_equal(h.index, 1);
    assert_false(h.has_state);
    assert_true(h.generation > 0);
    assert_true(rsp_test_store_slot_is_zero(f.store, 1));
    fx_fini(&f);
}

static void ingest_is_idempotent_and_keeps_holdings(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    assert_int_equal(fx_ingest(&f, 5), RSP_OK);
    assert_true(rsp__core_has_request(f.core, 5));
    assert_int_equal(fx_stats(&f).num_requests, 1);
    assert_int_equal(fx_ingest(&f, 5), RSP_OK);
    assert_int_equal(fx_stats(&f).num_requests, 1);
    touch(&f, 1, 5, 0);
    rsp_test_store_fill(f.store, 1, 0x5a);
    uint64_t gen = fx_gen(&f, 5, 0);
    /* Sent once per partition, maybe after a step already ran: no reset. */
    assert_int_equal(fx_ingest(&f, 5), RSP_OK);
    assert_int_equal(fx_slot(&f, 5, 0), 1);
    assert_true(fx_has_state(&f, 5, 0));
    assert_int_equal(fx_gen(&f, 5, 0), gen);
    assert_false(rsp_test_store_slot_is_zero(f.store, 1));
    assert_true(rsp__work_empty(&f.work));
    fx_fini(&f);
}

static void reset_keep_zeroes_and_clears_state(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    rsp_label_id d = fx_label(&f, "draft");
    touch(&f, 1, 9, 0);
    touch(&f, 2, 9, d);
    rsp_test_store_fill(f.store, 1, 0x11);
    rsp_test_store_fill(f.store, 2, 0x22);
    uint64_t g0 = fx_gen(&f, 9, 0), g1 = fx_gen(&f, 9, d);
    uint64_t pool_gen = fx_stats(&f).generation;
    assert_int_equal(fx_reset(&f, 9, false), RSP_OK);
    assert_int_equal(fx_slot(&f, 9, 0), 1);
    assert_int_equal(fx_slot(&f, 9, d), 2);
    assert_false(fx_has_state(&f, 9, 0));
    assert_false(fx_has_state(&f, 9, d));
    assert_true(rsp_test_store_slot_is_zero(f.store, 1));
    assert_true(rsp_test_store_slot_is_zero(f.store, 2));
    /* Each kept holding gets a new generation from the pool-wide counter. */
    assert_true(fx_gen(&f, 9, 0) > g0);
    assert_true(fx_gen(&f, 9, d) > g1);
    assert_int_not_equal(fx_gen(&f, 9, 0), fx_gen(&f, 9, d));
    assert_int_equal(fx_stats(&f).generation, pool_gen + 2);
    assert_int_equal(fx_stats(&f).held_slots, 2);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void reset_free_returns_slots_in_label_insertion_order(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id a = fx_label(&f, "a"), b = fx_label(&f, "b");
    /* Insertion order: b (slot 1), main (slot 2), a (slot 3). */
    touch(&f, 1, 4, b);
    touch(&f, 2, 4, 0);
    touch(&f, 3, 4, a);
    for (uint32_t s = 1; s <= 3; s++)
        rsp_test_store_fill(f.store, s, (uint8_t)(0x30 + s));
    assert_int_equal(fx_reset(&f, 4, true), RSP_OK);
    assert_true(rsp__core_has_request(f.core, 4));
    assert_int_equal(fx_slot(&f, 4, 0), -1);
    assert_int_equal(fx_stats(&f).num_holdings, 0);
    uint32_t order[8];
    rsp__core_free_order(f.core, order, 8);
    /* Pushed b, main, a: the next pops are a's, main's, b's slots. */
    assert_int_equal(order[0], 3);
    assert_int_equal(order[1], 2);
    assert_int_equal(order[2], 1);
    for (uint32_t s = 1; s <= 3; s++)
        assert_true(rsp_test_store_slot_is_zero(f.store, s));
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void remove_forgets_and_is_idempotent(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    touch(&f, 1, 3, 0);
    rsp_test_store_fill(f.store, 1, 0x77);
    assert_int_equal(fx_remove(&f, 3), RSP_OK);
    assert_false(rsp__core_has_request(f.core, 3));
    assert_true(rsp_test_store_slot_is_zero(f.store, 1));
    assert_int_equal(rsp__core_slot_state(f.core, 1), RSP__SLOT_FREE);
    rsp_error err = {0};
    assert_int_equal(rsp__core_holding(f.core, 3, 0, NULL, &err), RSP_ENOREQ);
    assert_int_equal(fx_remove(&f, 3), RSP_OK);
    assert_true(rsp__work_empty(&f.work));
    assert_int_equal(fx_stats(&f).num_requests, 0);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void reset_and_remove_of_unknown_rid_are_noops(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    touch(&f, 1, 3, 0);
    snap a, b;
    snap_take(&f, &a);
    assert_int_equal(fx_reset(&f, 77, false), RSP_OK);
    assert_int_equal(fx_reset(&f, 77, true), RSP_OK);
    assert_int_equal(fx_remove(&f, 77), RSP_OK);
    assert_true(rsp__work_empty(&f.work));
    snap_take(&f, &b);
    snap_assert_equal(&a, &b);
    fx_fini(&f);
}

static void holding_query_errors(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    touch(&f, 1, 3, 0);
    rsp_error err = {0};
    rsp_holding h;
    assert_int_equal(rsp__core_holding(f.core, 3, 5, &h, &err), RSP_ENOLABEL);
    assert_non_null(strstr(err.message, "label 5"));
    assert_int_equal(rsp__core_holding(f.core, 99, 0, &h, &err), RSP_ENOREQ);
    assert_non_null(strstr(err.message, "rid 99"));
    rsp_label_id d = fx_label(&f, "draft");
    assert_int_equal(rsp__core_holding(f.core, 3, d, &h, &err), RSP_ENOREQ);
    assert_non_null(strstr(err.message, "draft"));
    fx_fini(&f);
}

static void generation_is_pool_wide_and_moves_on_assignment(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    uint64_t g = fx_stats(&f).generation;
    touch(&f, 1, 1, 0);
    assert_int_equal(fx_gen(&f, 1, 0), g + 1);
    touch(&f, 2, 2, 0);
    assert_int_equal(fx_gen(&f, 2, 0), g + 2);
    /* Released and handed to another request: a stale plan sees a new gen. */
    assert_int_equal(fx_remove(&f, 1), RSP_OK);
    touch(&f, 3, 3, 0);
    assert_int_equal(fx_slot(&f, 3, 0), 1);
    assert_int_equal(fx_gen(&f, 3, 0), g + 3);
    assert_int_equal(fx_stats(&f).generation, g + 3);
    fx_fini(&f);
}

static void free_slots_read_zeros_after_any_release(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 6, true);
    rsp_label_id d = fx_label(&f, "draft");
    for (rsp_rid r = 1; r <= 2; r++) {
        touch(&f, 2 * r, r, 0);
        touch(&f, 2 * r + 1, r, d);
    }
    for (uint32_t s = 1; s <= 4; s++)
        rsp_test_store_fill_pattern(f.store, s, s);
    assert_int_equal(fx_reset(&f, 1, true), RSP_OK);
    fx_check_invariants(&f);
    assert_int_equal(fx_remove(&f, 2), RSP_OK);
    fx_check_invariants(&f);
    assert_int_equal(fx_stats(&f).free_slots, 5);
    fx_fini(&f);
}

static void stats_count_requests_and_holdings(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 8, true);
    rsp_label_id d = fx_label(&f, "draft");
    assert_int_equal(fx_ingest(&f, 1), RSP_OK);
    touch(&f, 1, 2, 0);
    touch(&f, 2, 2, d);
    touch(&f, 3, 3, 0);
    rsp_stats st = fx_stats(&f);
    assert_int_equal(st.max_slots, 8);
    assert_int_equal(st.usable_slots, 7);
    assert_int_equal(st.num_requests, 3);
    assert_int_equal(st.num_holdings, 3);
    assert_int_equal(st.held_slots, 3);
    assert_int_equal(st.free_slots, 4);
    assert_int_equal(st.pending_release, 0);
    fx_fini(&f);
}

static void many_labels_per_request_keep_insertion_order(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 16, true);
    rsp_label_id l[8];
    char name[16];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "b%d", i);
        l[i] = fx_label(&f, name);
    }
    /* More labels than fit inline in a request record. */
    for (int i = 0; i < 8; i++)
        touch(&f, (uint64_t)i, 5, l[7 - i]);
    for (int i = 0; i < 8; i++)
        assert_int_equal(fx_slot(&f, 5, l[7 - i]), i + 1);
    assert_int_equal(fx_reset(&f, 5, true), RSP_OK);
    uint32_t order[16];
    rsp__core_free_order(f.core, order, 16);
    for (int i = 0; i < 8; i++)
        assert_int_equal(order[i], 8 - i);
    /* The record is reused by another request without leaking state. */
    assert_int_equal(fx_remove(&f, 5), RSP_OK);
    touch(&f, 20, 6, 0);
    assert_int_equal(fx_stats(&f).num_holdings, 1);
    fx_check_invariants(&f);
    fx_fini(&f);
}

static void many_requests_grow_the_table(void **state)
{
    (void)state;
    fx f;
    fx_init(&f, 4, true);
    for (rsp_rid r = 0; r < 5000; r++)
        assert_int_equal(fx_ingest(&f, r * 7919), RSP_OK);
    assert_int_equal(fx_stats(&f).num_requests, 5000);
    for (rsp_rid r = 0; r < 5000; r += 2)
        assert_int_equal(fx_remove(&f, r * 7919), RSP_OK);
    for (rsp_rid r = 0; r < 5000; r++)
        assert_int_equal(rsp__core_has_request(f.core, r * 7919), r % 2 == 1);
    assert_int_equal(fx_stats(&f).num_requests, 2500);
    fx_fini(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fresh_pool_pops_ascending_from_one_with_sink),
        cmocka_unit_test(fresh_pool_pops_ascending_from_zero_without_sink),
        cmocka_unit_test(most_recently_released_slot_is_reused_first),
        cmocka_unit_test(fresh_pool_stack_and_hash_match_a_full_push_at_any_size),
        cmocka_unit_test(pool_filled_to_the_last_slot_reuses_in_release_order),
        cmocka_unit_test(slot_released_onto_fresh_slots_equals_never_taken),
        cmocka_unit_test(sink_is_never_handed_out),
        cmocka_unit_test(new_holding_has_no_state_and_reads_zeros),
        cmocka_unit_test(ingest_is_idempotent_and_keeps_holdings),
        cmocka_unit_test(reset_keep_zeroes_and_clears_state),
        cmocka_unit_test(reset_free_returns_slots_in_label_insertion_order),
        cmocka_unit_test(remove_forgets_and_is_idempotent),
        cmocka_unit_test(reset_and_remove_of_unknown_rid_are_noops),
        cmocka_unit_test(holding_query_errors),
        cmocka_unit_test(generation_is_pool_wide_and_moves_on_assignment),
        cmocka_unit_test(free_slots_read_zeros_after_any_release),
        cmocka_unit_test(stats_count_requests_and_holdings),
        cmocka_unit_test(many_labels_per_request_keep_insertion_order),
        cmocka_unit_test(many_requests_grow_the_table),
    };
    return cmocka_run_group_tests_name("core_slots", tests, NULL, NULL);
}
