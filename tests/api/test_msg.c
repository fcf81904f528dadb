/*
 * The wire form of a message (src/msg.h): what rsp_post writes into a
 * ticket's payload and the owner's handler decodes. Single-threaded.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "msg.h"

/* Encode m into a fresh block aligned as the actor's payloads are (for any
 * object), with a guard byte past the end; the caller frees *block. */
static const rsp_msg *round_trip(const rsp_msg *m, void **block, size_t *size)
{
    *size = rsp__msg_wire_size(m);
    assert_true(*size >= sizeof(rsp_msg));
    /* C11: an aligned_alloc size is a multiple of the alignment. */
    const size_t a = alignof(max_align_t);
    unsigned char *b = aligned_alloc(a, (*size + 1 + a - 1) / a * a);
    assert_non_null(b);
    b[*size] = 0x5a;
    rsp__msg_encode(m, b);
    assert_int_equal(b[*size], 0x5a); /* the encoder stays inside its size */
    *block = b;
    return rsp__msg_decode(b, *size);
}

/* Whether p points into [b, b + size). */
static bool inside(const void *p, const void *b, size_t size)
{
    return (const unsigned char *)p >= (const unsigned char *)b &&
           (const unsigned char *)p < (const unsigned char *)b + size;
}

static void step_arrays_are_copied_and_the_callers_may_change(void **state)
{
    (void)state;
    rsp_row rows[3] = {
        {.rid = 1, .span = 3},
        {.rid = 2, .span = 4, .label = 1, .fork_group = 513, .skip_post_forks = true},
        {.rid = 3}};
    rsp_fork pre[1] = {{0, 1, 0}};
    rsp_fork post[2] = {{1, 2, 0}, {2, 3, 65535}};
    int fence_stub;
    const rsp_msg_kind kinds[] = {RSP_MSG_ADMIT, RSP_MSG_PLAN, RSP_MSG_COMMIT};
    for (size_t k = 0; k < 3; k++) {
        rsp_msg m = {.kind = kinds[k],
                     .event = {.kind = RSP_EVENT_HOST_FENCE, .handle = &fence_stub, .value = 7},
                     .step = {.step_id = 9,
                              .rows = rows,
                              .num_rows = 3,
                              .pre_forks = pre,
                              .num_pre_forks = 1,
                              .post_forks = post,
                              .num_post_forks = 2,
                              .preplan = true,
                              .has_lease = true,
                              .lease = {.bucket_bs = 8, .bucket_id = 2, .lease_slot = 1}}};
        void *b;
        size_t size;
        const rsp_msg *d = round_trip(&m, &b, &size);
        /* The caller reuses its arrays as soon as rsp_post returns. */
        rows[0].rid = 77;
        pre[0].to = 5;
        post[1].from = 9;
        assert_ptr_equal(d, b);
        assert_int_equal(d->kind, kinds[k]);
        assert_int_equal(d->step.step_id, 9);
        assert_true(d->step.preplan && d->step.has_lease);
        assert_int_equal(d->step.lease.bucket_id, 2);
        /* The event travels as it was: the handle is the caller's object. */
        assert_ptr_equal(d->event.handle, &fence_stub);
        assert_int_equal(d->event.value, 7);
        assert_int_equal(d->step.num_rows, 3);
        assert_true(inside(d->step.rows, b, size));
        assert_true(inside(d->step.pre_forks, b, size));
        assert_true(inside(d->step.post_forks, b, size));
        assert_int_equal((uintptr_t)d->step.rows % alignof(rsp_row), 0);
        assert_int_equal((uintptr_t)d->step.pre_forks % alignof(rsp_fork), 0);
        assert_int_equal(d->step.rows[0].rid, 1);
        assert_int_equal(d->step.rows[1].span, 4);
        assert_int_equal(d->step.rows[1].label, 1);
        assert_int_equal(d->step.rows[2].rid, 3);
        assert_int_equal(d->step.num_pre_forks, 1);
        assert_int_equal(d->step.pre_forks[0].to, 1);
        assert_int_equal(d->step.num_post_forks, 2);
        assert_int_equal(d->step.post_forks[1].from, 2);
        assert_int_equal(d->step.post_forks[1].group, 65535); /* per-rid forks travel */
        assert_int_equal(d->step.rows[1].fork_group, 513);
        assert_true(d->step.rows[1].skip_post_forks);
        assert_false(d->step.rows[0].skip_post_forks);
        assert_null(d->label_name);
        free(b);
        rows[0].rid = 1;
        pre[0].to = 1;
        post[1].from = 2;
    }
}

/* The per-token fields sit in rsp_row's former tail padding: the row keeps
 * its size and they travel byte for byte, in a STEP's commit too. */
static void per_token_rows_travel_byte_exact(void **state)
{
    (void)state;
    _Static_assert(sizeof(rsp_row) == 24, "rsp_row keeps its 0.1 size");
    _Static_assert(offsetof(rsp_row, per_token_states) == 20 && offsetof(rsp_row, accepted) == 22,
                   "the per-token fields fill the former tail padding");
    rsp_row rows[2];
    memset(rows, 0, sizeof rows);
    rows[0] = (rsp_row){.rid = 1, .span = 5, .per_token_states = 1, .accepted = 4};
    rows[1] = (rsp_row){.rid = 2, .span = 1, .label = 1};
    rsp_row commit_rows[2];
    memcpy(commit_rows, rows, sizeof rows);
    commit_rows[0].accepted = 3;
    rsp_step commit = {.step_id = 8, .rows = commit_rows, .num_rows = 2};
    rsp_msg m = {.kind = RSP_MSG_STEP,
                 .event = {.kind = RSP_EVENT_COMPLETE},
                 .commit = &commit,
                 .step = {.step_id = 9, .rows = rows, .num_rows = 2}};
    void *b;
    size_t size;
    const rsp_msg *d = round_trip(&m, &b, &size);
    assert_memory_equal(d->step.rows, rows, sizeof rows);
    assert_memory_equal(d->commit->rows, commit_rows, sizeof commit_rows);
    assert_int_equal(d->commit->rows[0].accepted, 3);
    free(b);
}

static void empty_arrays_decode_as_null(void **state)
{
    (void)state;
    rsp_row rows[1] = {{.rid = 5}};
    rsp_msg m = {.kind = RSP_MSG_PLAN, .step = {.step_id = 4, .rows = rows, .num_rows = 1}};
    void *b;
    size_t size;
    const rsp_msg *d = round_trip(&m, &b, &size);
    assert_int_equal(d->step.rows[0].rid, 5);
    assert_null(d->step.pre_forks);
    assert_null(d->step.post_forks);
    free(b);

    rsp_msg e = {.kind = RSP_MSG_ADMIT, .step = {.step_id = 5}};
    d = round_trip(&e, &b, &size);
    assert_int_equal(size, sizeof(rsp_msg));
    assert_null(d->step.rows);
    assert_int_equal(d->step.num_rows, 0);
    free(b);
}

static void label_name_is_copied(void **state)
{
    (void)state;
    char name[8] = "draft";
    rsp_msg m = {.kind = RSP_MSG_LABEL, .label_name = name};
    void *b;
    size_t size;
    const rsp_msg *d = round_trip(&m, &b, &size);
    memcpy(name, "xxxxx", 6);
    assert_true(inside(d->label_name, b, size));
    assert_string_equal(d->label_name, "draft");
    assert_int_equal(d->step.num_rows, 0);
    free(b);
}

/* A kind carries only its own arrays: whatever else the caller left in the
 * message is neither copied nor followed by the owner. */
static void other_kinds_carry_no_arrays(void **state)
{
    (void)state;
    rsp_row rows[2] = {{.rid = 1}, {.rid = 2}};
    rsp_fork forks[1] = {{0, 1, 0}};
    const rsp_msg_kind kinds[] = {RSP_MSG_INGEST,   RSP_MSG_REMOVE,   RSP_MSG_RESET,
                                  RSP_MSG_ROLLBACK, RSP_MSG_STATS,    RSP_MSG_BARRIER,
                                  RSP_MSG_HOLDING,  RSP_MSG_SHUTDOWN, RSP_MSG_RELEASE};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        rsp_msg m = {.kind = kinds[k],
                     .rid = 42,
                     .label = 3,
                     .free = true,
                     .label_name = "stray",
                     .max_bs = 8,
                     .commit = &(rsp_step){.step_id = 5, .rows = rows, .num_rows = 2},
                     .step = {.step_id = 6,
                              .rows = rows,
                              .num_rows = 2,
                              .pre_forks = forks,
                              .num_pre_forks = 1,
                              .post_forks = forks,
                              .num_post_forks = 1}};
        void *b;
        size_t size;
        const rsp_msg *d = round_trip(&m, &b, &size);
        assert_int_equal(size, sizeof(rsp_msg));
        assert_int_equal(d->kind, kinds[k]);
        assert_int_equal(d->rid, 42);
        assert_int_equal(d->label, 3);
        assert_true(d->free);
        assert_int_equal(d->max_bs, 8);
        assert_int_equal(d->step.step_id, 6); /* ROLLBACK's one step field */
        assert_null(d->label_name);
        assert_null(d->step.rows);
        assert_null(d->step.pre_forks);
        assert_null(d->step.post_forks);
        assert_int_equal(d->step.num_rows, 0);
        assert_int_equal(d->step.num_pre_forks, 0);
        assert_int_equal(d->step.num_post_forks, 0);
        assert_null(d->commit); /* STEP's only */
        assert_null(d->rids);   /* no list given: num_rids 0 */
        assert_int_equal(d->num_rids, 0);
        free(b);
    }
}

/* STEP carries two declarations: the new step's arrays, then the commit's. */
static void a_step_message_carries_both_declarations(void **state)
{
    (void)state;
    rsp_row rows[3] = {{.rid = 1, .span = 1}, {.rid = 2, .span = 2}, {.rid = 3, .span = 3}};
    rsp_row prev[2] = {{.rid = 8, .span = 1}, {.rid = 9, .label = 2, .span = 1}};
    rsp_fork pre[1] = {{0, 1, 0}};
    rsp_fork post[2] = {{1, 0, 0}, {1, 2, 7}};
    rsp_step prev_decl = {
        .step_id = 3, .rows = prev, .num_rows = 2, .post_forks = post, .num_post_forks = 2};
    rsp_msg m = {
        .kind = RSP_MSG_STEP,
        .step = {.step_id = 4, .rows = rows, .num_rows = 3, .pre_forks = pre, .num_pre_forks = 1},
        .commit = &prev_decl,
        .event = rsp_event_complete(),
        .rids = (const rsp_rid[]){1, 2},
        .num_rids = 2};
    void *b;
    size_t size;
    const rsp_msg *d = round_trip(&m, &b, &size);
    /* The caller reuses the declaration and its arrays once posted. */
    rows[1].rid = 77;
    prev[1].rid = 77;
    post[1].group = 0;
    prev_decl.step_id = 99;
    prev_decl.num_rows = 0;
    assert_non_null(d->commit);
    assert_true(inside(d->commit, b, size));
    assert_int_equal((uintptr_t)d->commit % alignof(rsp_step), 0);
    assert_int_equal(d->step.step_id, 4);
    assert_int_equal(d->commit->step_id, 3);
    assert_int_equal(d->commit->num_rows, 2);
    assert_true(inside(d->step.rows, b, size) && inside(d->commit->rows, b, size));
    assert_true(inside(d->commit->post_forks, b, size));
    assert_int_equal((uintptr_t)d->commit->rows % alignof(rsp_row), 0);
    assert_int_equal((uintptr_t)d->commit->post_forks % alignof(rsp_fork), 0);
    assert_int_equal(d->step.rows[1].rid, 2);
    assert_int_equal(d->step.pre_forks[0].to, 1);
    assert_null(d->step.post_forks);
    assert_int_equal(d->commit->rows[1].rid, 9);
    assert_int_equal(d->commit->rows[1].label, 2);
    assert_null(d->commit->pre_forks);
    assert_int_equal(d->commit->num_post_forks, 2);
    assert_int_equal(d->commit->post_forks[1].group, 7);
    assert_int_equal(d->event.kind, RSP_EVENT_COMPLETE);
    assert_null(d->rids); /* not a lifecycle kind */
    free(b);

    /* Without a commit, nothing of one is copied or kept. */
    m.commit = NULL;
    d = round_trip(&m, &b, &size);
    assert_null(d->commit);
    assert_int_equal(d->step.num_rows, 3);
    free(b);
}

/* A STEP whose commit names the step's own rows (same array, same count)
 * carries them once: smaller, both decode to the same copy, and the
 * commit's other arrays are still its own. Anything less (the same array
 * with another count, or equal rows in another array) is copied twice. */
static void a_step_message_shares_the_rows_both_declarations_name(void **state)
{
    (void)state;
    rsp_row rows[3] = {{.rid = 1, .span = 1}, {.rid = 2, .span = 2}, {.rid = 3, .span = 3}};
    rsp_row again[3];
    memcpy(again, rows, sizeof rows);
    rsp_fork post[1] = {{1, 0, 0}};
    rsp_step prev_decl = {
        .step_id = 3, .rows = rows, .num_rows = 3, .post_forks = post, .num_post_forks = 1};
    rsp_msg m = {.kind = RSP_MSG_STEP,
                 .step = {.step_id = 4, .rows = rows, .num_rows = 3},
                 .commit = &prev_decl};
    void *b, *b2;
    size_t size, size2;
    const rsp_msg *d = round_trip(&m, &b, &size);
    rows[0].rid = 55; /* the caller's array is not followed after the post */
    assert_ptr_equal(d->commit->rows, d->step.rows);
    assert_true(inside(d->step.rows, b, size));
    assert_int_equal(d->commit->rows[0].rid, 1);
    assert_int_equal(d->commit->rows[2].span, 3);
    assert_int_equal(d->commit->num_post_forks, 1);
    assert_true(inside(d->commit->post_forks, b, size));
    assert_int_equal(d->commit->post_forks[0].from, 1);
    rows[0].rid = 1;

    prev_decl.rows = again; /* equal rows, another array: two copies */
    const rsp_msg *d2 = round_trip(&m, &b2, &size2);
    assert_int_equal(size2, size + sizeof rows);
    assert_ptr_not_equal(d2->commit->rows, d2->step.rows);
    assert_int_equal(d2->commit->rows[1].rid, 2);
    free(b2);

    prev_decl.rows = rows; /* the same array, fewer rows: two copies */
    prev_decl.num_rows = 2;
    d2 = round_trip(&m, &b2, &size2);
    assert_int_equal(size2, size + 2 * sizeof *rows);
    assert_ptr_not_equal(d2->commit->rows, d2->step.rows);
    assert_int_equal(d2->commit->num_rows, 2);
    assert_int_equal(d2->commit->rows[1].rid, 2);
    assert_int_equal(d2->step.num_rows, 3);
    free(b2);
    free(b);
}

/* INGEST, REMOVE, RESET with a list: the rids are copied. */
static void rid_lists_are_copied(void **state)
{
    (void)state;
    const rsp_msg_kind kinds[] = {RSP_MSG_INGEST, RSP_MSG_REMOVE, RSP_MSG_RESET};
    for (size_t k = 0; k < 3; k++) {
        rsp_rid rids[5] = {5, 4, 3, 2, UINT64_MAX};
        rsp_msg m = {.kind = kinds[k], .rids = rids, .num_rids = 5, .free = true};
        void *b;
        size_t size;
        const rsp_msg *d = round_trip(&m, &b, &size);
        rids[0] = 0;
        assert_int_equal(size, sizeof(rsp_msg) + 5 * sizeof(rsp_rid));
        assert_true(inside(d->rids, b, size));
        assert_int_equal((uintptr_t)d->rids % alignof(rsp_rid), 0);
        assert_int_equal(d->num_rids, 5);
        assert_int_equal(d->rids[0], 5);
        assert_int_equal(d->rids[4], UINT64_MAX);
        assert_true(d->free);
        free(b);
    }
}

/* Checkpoint declarations and restores travel with the step (ADMIT, PLAN,
 * COMMIT, STEP and STEP's commit), byte for byte, aligned, inside the wire
 * form, and the wire form is exactly as long as its arrays. */
static void step_checkpoints_and_restores_are_copied(void **state)
{
    (void)state;
    rsp_row rows[2] = {{.rid = 1, .span = 3}, {.rid = 2, .span = 1, .label = 1}};
    rsp_fork post[1] = {{0, 1, 0}};
    rsp_checkpoint_decl ck[2] = {{.rid = 1, .label = 0, .tier = RSP_TIER_HOST, .key = UINT64_MAX},
                                 {.rid = 2, .label = 1, .tier = RSP_TIER_DEVICE, .key = 7}};
    rsp_restore rs[3] = {{.rid = 1, .key = 0x1234567890abcdefull},
                         {.rid = 2, .label = 1, .key = 8},
                         {.rid = 3, .label = 2, .key = 9}};
    const rsp_checkpoint_decl ck0[2] = {ck[0], ck[1]};
    const rsp_restore rs0[3] = {rs[0], rs[1], rs[2]};
    rsp_step decl = {.step_id = 5,
                     .rows = rows,
                     .num_rows = 2,
                     .post_forks = post,
                     .num_post_forks = 1,
                     .checkpoints = ck,
                     .num_checkpoints = 2,
                     .restores = rs,
                     .num_restores = 3};
    const rsp_msg_kind kinds[] = {RSP_MSG_ADMIT, RSP_MSG_PLAN, RSP_MSG_COMMIT, RSP_MSG_STEP};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        rsp_msg m = {.kind = kinds[k], .step = decl};
        if (kinds[k] == RSP_MSG_STEP)
            m.commit = &decl; /* the commit's arrays travel too */
        void *b;
        size_t size;
        const rsp_msg *d = round_trip(&m, &b, &size);
        /* The caller reuses its arrays once rsp_post returns. */
        memset(ck, 0xee, sizeof ck);
        memset(rs, 0xee, sizeof rs);
        const rsp_step *steps[2] = {&d->step, d->commit};
        for (size_t i = 0; i < (d->commit ? 2u : 1u); i++) {
            const rsp_step *s = steps[i];
            assert_int_equal(s->num_checkpoints, 2);
            assert_int_equal(s->num_restores, 3);
            assert_true(inside(s->checkpoints, b, size) && inside(s->restores, b, size));
            assert_int_equal((uintptr_t)s->checkpoints % alignof(rsp_checkpoint_decl), 0);
            assert_int_equal((uintptr_t)s->restores % alignof(rsp_restore), 0);
            assert_memory_equal(s->checkpoints, ck0, sizeof ck0);
            assert_memory_equal(s->restores, rs0, sizeof rs0);
            assert_int_equal(s->post_forks[0].to, 1); /* the arrays before are intact */
            assert_int_equal(s->rows[1].label, 1);
        }
        /* No slack: the restores end the (last) declaration's arrays. */
        const rsp_step *last = d->commit ? d->commit : &d->step;
        assert_ptr_equal((const unsigned char *)(last->restores + 3), (unsigned char *)b + size);
        free(b);
        memcpy(ck, ck0, sizeof ck);
        memcpy(rs, rs0, sizeof rs);
    }

    /* Only restores, only checkpoints: the other is NULL. */
    rsp_msg m = {.kind = RSP_MSG_ADMIT, .step = decl};
    m.step.num_checkpoints = 0;
    void *b;
    size_t size;
    const rsp_msg *d = round_trip(&m, &b, &size);
    assert_null(d->step.checkpoints);
    assert_memory_equal(d->step.restores, rs0, sizeof rs0);
    free(b);
    m.step.num_checkpoints = 2;
    m.step.num_restores = 0;
    d = round_trip(&m, &b, &size);
    assert_null(d->step.restores);
    assert_memory_equal(d->step.checkpoints, ck0, sizeof ck0);
    free(b);
}

/* The checkpoint and swap kinds carry no array: their fields travel inside
 * the message, and a step the caller left in it is neither copied nor
 * followed. */
static void checkpoint_kinds_carry_their_fields_only(void **state)
{
    (void)state;
    rsp_restore rs[1] = {{.rid = 1, .key = 2}};
    rsp_checkpoint_decl ck[1] = {{.rid = 1, .key = 3}};
    const rsp_msg_kind kinds[] = {RSP_MSG_CHECKPOINT,     RSP_MSG_CHECKPOINT_DROP,
                                  RSP_MSG_CHECKPOINT_PIN, RSP_MSG_CHECKPOINT_QUERY,
                                  RSP_MSG_SWAP_OUT,       RSP_MSG_SWAP_IN};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        rsp_msg m = {.kind = kinds[k],
                     .rid = 42,
                     .label = 3,
                     .key = 0xfedcba9876543210ull,
                     .tier = RSP_TIER_HOST,
                     .after_step = 17,
                     .pin = true,
                     .step = {.step_id = 6,
                              .restores = rs,
                              .num_restores = 1,
                              .checkpoints = ck,
                              .num_checkpoints = 1}};
        void *b;
        size_t size;
        const rsp_msg *d = round_trip(&m, &b, &size);
        assert_int_equal(size, sizeof(rsp_msg));
        assert_int_equal(d->kind, kinds[k]);
        assert_int_equal(d->rid, 42);
        assert_int_equal(d->label, 3);
        assert_int_equal(d->key, 0xfedcba9876543210ull);
        assert_int_equal(d->tier, RSP_TIER_HOST);
        assert_int_equal(d->after_step, 17);
        assert_true(d->pin);
        assert_null(d->step.restores);
        assert_null(d->step.checkpoints);
        assert_int_equal(d->step.num_restores, 0);
        assert_int_equal(d->step.num_checkpoints, 0);
        free(b);
    }
}

/* A PLAN or STEP may end with a post stamp: it decodes as the same
 * message, arrays in place, and gives the stamp back; without one, 0. */
static void a_post_stamp_rides_after_the_arrays(void **state)
{
    (void)state;
    rsp_row rows[3] = {{.rid = 1, .span = 3}, {.rid = 2, .span = 1}, {.rid = 3}};
    rsp_step commit = {.step_id = 4, .rows = rows, .num_rows = 1};
    const rsp_msg msgs[] = {
        {.kind = RSP_MSG_PLAN, .step = {.step_id = 5, .rows = rows, .num_rows = 3}},
        {.kind = RSP_MSG_PLAN, .step = {.step_id = 6}}, /* no rows: the stamp alone */
        {.kind = RSP_MSG_STEP,
         .step = {.step_id = 7, .rows = rows + 1, .num_rows = 2},
         .commit = &commit},
    };
    for (size_t k = 0; k < sizeof msgs / sizeof msgs[0]; k++) {
        const rsp_msg *m = &msgs[k];
        const size_t plain = rsp__msg_wire_size(m);
        const size_t size = rsp__msg_stamped_size(plain);
        assert_true(size >= plain + sizeof(uint64_t) && size % 8 == 0);
        const size_t a = alignof(max_align_t);
        unsigned char *b = aligned_alloc(a, (size + a - 1) / a * a);
        assert_non_null(b);
        rsp__msg_encode(m, b);
        rsp__msg_stamp(b, size, 0x1122334455667788ull + k);
        uint64_t stamp = 0;
        const rsp_msg *d = rsp__msg_decode_stamped(b, size, &stamp);
        assert_true(stamp == 0x1122334455667788ull + k);
        assert_int_equal(d->kind, m->kind);
        assert_int_equal(d->step.step_id, m->step.step_id);
        assert_int_equal(d->step.num_rows, m->step.num_rows);
        for (uint32_t i = 0; i < d->step.num_rows; i++) {
            assert_true(inside(&d->step.rows[i], b, plain));
            assert_true(d->step.rows[i].rid == m->step.rows[i].rid);
        }
        if (m->commit) {
            assert_non_null(d->commit);
            assert_true(d->commit->rows[0].rid == 1);
        }
        /* The same message unstamped: no stamp. */
        rsp__msg_encode(m, b);
        uint64_t none = 1;
        d = rsp__msg_decode_stamped(b, plain, &none);
        assert_true(none == 0);
        assert_int_equal(d->step.num_rows, m->step.num_rows);
        free(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(step_arrays_are_copied_and_the_callers_may_change),
        cmocka_unit_test(per_token_rows_travel_byte_exact),
        cmocka_unit_test(empty_arrays_decode_as_null),
        cmocka_unit_test(label_name_is_copied),
        cmocka_unit_test(a_step_message_shares_the_rows_both_declarations_name),
        cmocka_unit_test(other_kinds_carry_no_arrays),
        cmocka_unit_test(a_step_message_carries_both_declarations),
        cmocka_unit_test(rid_lists_are_copied),
        cmocka_unit_test(step_checkpoints_and_restores_are_copied),
        cmocka_unit_test(checkpoint_kinds_carry_their_fields_only),
        cmocka_unit_test(a_post_stamp_rides_after_the_arrays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
