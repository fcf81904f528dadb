/*
 * Recording (rsp_pool_config.record_path): a run of every kind of answer
 * is recorded, read back record by record, and written again with one plan
 * digest changed. ctest then replays both with rsp-replay (tests/api/
 * CMakeLists.txt): the first all equal, the second naming message 5.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <rsp/rsp.h>

#include "pool_record.h" /* the file's form */

#define E NULL
#define OK(x) assert_int_equal((x), RSP_OK)
#define RUN "record_run.rsprec"
#define TAMPERED "record_tampered.rsprec"

static const rsp_block_config block = {
    .name = "conv", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {4}};

static rsp_pool_config config(const char *path)
{
    rsp_pool_config cfg;
    rsp_pool_config_init(&cfg);
    cfg.num_layers = 2;
    cfg.blocks = &block;
    cfg.num_blocks = 1;
    cfg.max_slots = 9;
    cfg.max_checkpoints = 2;
    cfg.record_path = path;
    return cfg;
}

/* The run rsp-replay checks: one message of most kinds, failures among
 * them. The numbers are the messages' places (5: the first commit). */
static void record_a_run(void **state)
{
    (void)state;
    rsp_pool_config cfg = config(RUN);
    rsp_pool *p;
    OK(rsp_pool_create(&cfg, &p, E));
    rsp_label_id draft;
    OK(rsp_label(p, "draft", &draft, E)); /* 1 */
    const rsp_rid rids[] = {1, 2, 3};
    OK(rsp_ingest_many(p, rids, 3, E)); /* 2 */
    rsp_row r1[] = {{.rid = 1, .label = RSP_LABEL_MAIN, .span = 1},
                    {.rid = 2, .label = RSP_LABEL_MAIN, .span = 1},
                    {.rid = 2, .label = draft, .span = 2},
                    {.rid = 3, .label = RSP_LABEL_MAIN, .span = 1}};
    rsp_step s1 = {.step_id = 1, .rows = r1, .num_rows = 4};
    rsp_step_outcome o;
    OK(rsp_step_next(p, &s1, NULL, NULL, &o, E)); /* 3 */
    assert_true(o.planned);
    rsp_holding h;
    OK(rsp_holding_get(p, 2, draft, &h, E)); /* 4 */
    rsp_host_fence *fence;
    OK(rsp_host_fence_create(&fence, E));
    rsp_host_fence_signal(fence, 1);
    rsp_event done = rsp_event_host(fence, 1);
    rsp_step s2 = {.step_id = 2, .rows = r1, .num_rows = 2};
    OK(rsp_step_next(p, &s2, &s1, &done, &o, E)); /* 5 */
    assert_true(o.committed && o.planned);
    rsp_event now = rsp_event_complete();
    OK(rsp_step_commit(p, &s2, &now, E));                                    /* 6 */
    OK(rsp_checkpoint_take(p, 9, 1, RSP_LABEL_MAIN, RSP_TIER_DEVICE, 0, E)); /* 7 */
    rsp_checkpoint_info ci;
    OK(rsp_checkpoint_query(p, 9, &ci, E));                                         /* 8 */
    OK(rsp_remove(p, 3, E));                                                        /* 9 */
    assert_int_equal(rsp_holding_get(p, 99, RSP_LABEL_MAIN, &h, NULL), RSP_ENOREQ); /* 10 */
    rsp_stats st;
    OK(rsp_stats_snapshot(p, &st, E)); /* 11 */
    rsp_pool_destroy(p);
    rsp_host_fence_destroy(fence);
}

/* Read RUN back: its head, then message and reply records in turn; write
 * TAMPERED, the same with message 5's plan digest changed. */
static void read_back_and_tamper(void **state)
{
    (void)state;
    FILE *in = fopen(RUN, "rb");
    FILE *out = fopen(TAMPERED, "wb");
    assert_non_null(in);
    assert_non_null(out);
    rsp__record_head h;
    assert_int_equal(fread(&h, sizeof h, 1, in), 1);
    assert_memory_equal(h.magic, RSP__RECORD_MAGIC, 8);
    assert_int_equal(h.num_blocks, 1);
    rsp_pool_config c;
    assert_int_equal(fread(&c, sizeof c, 1, in), 1);
    assert_int_equal(c.max_slots, 9);
    assert_null(c.record_path);
    rsp__record_block b;
    assert_int_equal(fread(&b, sizeof b, 1, in), 1);
    assert_string_equal(b.name, "conv");
    fwrite(&h, sizeof h, 1, out);
    fwrite(&c, sizeof c, 1, out);
    fwrite(&b, sizeof b, 1, out);
    uint32_t messages = 0;
    rsp_msg_kind kind = RSP_MSG_KIND_COUNT_;
    rsp__record_tag t;
    unsigned char buf[4096];
    while (fread(&t, sizeof t, 1, in) == 1) {
        assert_true(t.size <= sizeof buf);
        assert_int_equal(fread(buf, 1, t.size, in), t.size);
        if (t.tag == RSP__RECORD_MSG) {
            messages++;
            memcpy(&kind, buf, sizeof kind); /* the wire form starts with the message */
        } else {
            assert_int_equal(t.tag, RSP__RECORD_REPLY);
            assert_int_equal(t.size, sizeof(rsp_reply));
            if (messages == 5) {
                assert_int_equal(kind, RSP_MSG_STEP);
                buf[offsetof(rsp_reply, plan_digest)] ^= 1;
            }
        }
        fwrite(&t, sizeof t, 1, out);
        fwrite(buf, 1, t.size, out);
    }
    assert_int_equal(messages, 11); /* the destroy's shutdown is the actor's, not recorded */
    assert_int_equal(kind, RSP_MSG_STATS);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void an_unwritable_path_refuses_the_pool(void **state)
{
    (void)state;
    rsp_pool_config cfg = config("/nonexistent-dir/x.rsprec");
    rsp_pool *p = NULL;
    rsp_error err;
    assert_int_equal(rsp_pool_create(&cfg, &p, &err), RSP_EINVAL);
    assert_null(p);
    assert_non_null(strstr(err.message, "record_path"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record_a_run),
        cmocka_unit_test(read_back_and_tamper),
        cmocka_unit_test(an_unwritable_path_refuses_the_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
