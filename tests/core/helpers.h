/*
 * Fixtures for the core suites: a core plus the in-test executor, step
 * builders, and state snapshots for "nothing changed" checks.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_TESTS_CORE_HELPERS_H
#define RSP_TESTS_CORE_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/core.h"
#include "core/exec.h"

#define FX_MAX_ROWS 128
#define FX_MAX_FORKS 16

/* Two blocks ("conv" f32 [3, 4], "ssm" bf16 [2, 5]) over two layers. */
typedef struct fx {
    rsp_pool_config cfg;
    rsp_block_config blocks[2];
    rsp__core *core;
    rsp_test_store *store;
    rsp__work work;
    rsp_error err;
    rsp__plan_out plan;
    rsp__stage_change stage; /* what the last commit or rollback did to the stage */
} fx;

void fx_init(fx *f, uint32_t max_slots, bool sink);
void fx_init_cfg(fx *f, const rsp_pool_config *cfg);
/* fx_init (sink on) with the checkpoint tiers: `device` and
 * `host` slots, demotion as given. */
void fx_init_ck(fx *f, uint32_t max_slots, uint32_t device, uint32_t host, bool demote);
void fx_fini(fx *f);
rsp_label_id fx_label(fx *f, const char *name);

/* When set, called with true right before and false right after each core
 * call of the fx_* operations below (not around their checks): the
 * allocation-failure suite arms its injection there. */
extern void (*fx_core_hook)(bool enter);

/* Each call clears the work list, runs the core op, checks and executes the
 * work on the store (asserting it is well formed), and returns the status.
 * On an error it asserts the work list is empty (errors emit nothing). */
rsp_status fx_ingest(fx *f, rsp_rid rid);
rsp_status fx_reset(fx *f, rsp_rid rid, bool free);
rsp_status fx_remove(fx *f, rsp_rid rid);
rsp_status fx_release(fx *f, rsp_rid rid, rsp_label_id label);
rsp_status fx_admit(fx *f, const rsp_step *s, rsp_admit_outcome *out);
/* Admit and assert ok. */
void fx_admit_ok(fx *f, const rsp_step *s);
rsp_status fx_rollback(fx *f, uint64_t step_id, const rsp_event *done);
rsp_status fx_plan(fx *f, const rsp_step *s);
rsp_status fx_commit(fx *f, const rsp_step *s, const rsp_event *done);
/* Checkpoints and swaps, the same way. */
rsp_status fx_checkpoint(fx *f, uint64_t key, rsp_rid rid, rsp_label_id label, rsp_tier tier,
                         uint64_t after_step);
rsp_status fx_ck_drop(fx *f, uint64_t key);
rsp_status fx_ck_pin(fx *f, uint64_t key, bool pin);
rsp_status fx_swap_out(fx *f, rsp_rid rid);
rsp_status fx_swap_in(fx *f, rsp_rid rid, rsp_admit_outcome *out);
/* The checkpoint under key (asserts it exists). */
rsp_checkpoint_info fx_ck(fx *f, uint64_t key);
bool fx_ck_has(fx *f, uint64_t key);
/* The last call's checkpoint report. */
const rsp__ckpt_report *fx_ck_report(fx *f);

/* admit + plan + commit, all asserted OK. */
void fx_run_step(fx *f, const rsp_step *s);

/* Holding of (rid, label): slot, or -1 when none. */
int32_t fx_slot(fx *f, rsp_rid rid, rsp_label_id label);
bool fx_has_state(fx *f, rsp_rid rid, rsp_label_id label);
uint64_t fx_gen(fx *f, rsp_rid rid, rsp_label_id label);
/* The addressing of label in the last plan (fails the test if absent). */
const rsp__label_plan *fx_plan_label(fx *f, rsp_label_id label);
rsp_stats fx_stats(fx *f);
/* Check slot accounting: sink + free + held + pending = max_slots, every
 * free slot reads zeros, free stack has no duplicates. */
void fx_check_invariants(fx *f);

/* A step under construction. */
typedef struct stepb {
    rsp_step s;
    rsp_row rows[FX_MAX_ROWS];
    rsp_fork pre[FX_MAX_FORKS];
    rsp_fork post[FX_MAX_FORKS];
    rsp_restore restores[FX_MAX_FORKS];
    rsp_checkpoint_decl takes[FX_MAX_FORKS];
} stepb;

void sb_init(stepb *b, uint64_t step_id);
void sb_row(stepb *b, rsp_rid rid, rsp_label_id label, int32_t span);
void sb_pad(stepb *b, rsp_rid rid, rsp_label_id label);
void sb_pre(stepb *b, rsp_label_id from, rsp_label_id to);
void sb_post(stepb *b, rsp_label_id from, rsp_label_id to);
/* The last row's fork_group; the last pre- / post-fork's group. */
void sb_group(stepb *b, uint16_t group);
void sb_pre_group(stepb *b, uint32_t group);
void sb_post_group(stepb *b, uint32_t group);
void sb_lease(stepb *b, uint32_t bucket_bs, uint32_t bucket_id, uint32_t lease_slot);
/* Start (rid, label) from key; take (rid, label) as key into tier at commit. */
void sb_restore(stepb *b, rsp_rid rid, rsp_label_id label, uint64_t key);
void sb_take(stepb *b, rsp_rid rid, rsp_label_id label, uint64_t key, rsp_tier tier);

/* Everything observable about the pool, for "unchanged" checks. */
#define SNAP_MAX_SLOTS 64
#define SNAP_MAX_RIDS 16
#define SNAP_MAX_KEYS 32
#define SNAP_MAX_CK_SLOTS 32
typedef struct snap {
    rsp_stats stats;
    uint32_t free_order[SNAP_MAX_SLOTS];
    uint32_t num_free;
    uint8_t slot_state[SNAP_MAX_SLOTS];
    uint64_t checksum[SNAP_MAX_SLOTS];
    bool has_req[SNAP_MAX_RIDS];
    rsp_holding hold[SNAP_MAX_RIDS][4];
    bool held[SNAP_MAX_RIDS][4];
    /* Checkpoints under keys 0..SNAP_MAX_KEYS-1, and the bytes of every
     * checkpoint slot (every store holds them). */
    bool ck_has[SNAP_MAX_KEYS];
    rsp_checkpoint_info ck[SNAP_MAX_KEYS];
    uint64_t ck_sum[SNAP_MAX_CK_SLOTS];
} snap;

/* Snapshot rids 0..SNAP_MAX_RIDS-1 under labels 0..3 (those that exist),
 * and keys 0..SNAP_MAX_KEYS-1. */
void snap_take(fx *f, snap *s);
void snap_assert_equal(const snap *a, const snap *b);

#endif
