/*
 * Every wrapper of src/util/sync.h, once: compiled (not run) for aarch64 by
 * the sync_h_builds_for_aarch64 test, so a wrapper that only x86 accepts
 * fails here rather than on a Grace host.
 * SPDX-License-Identifier: Apache-2.0
 */
#include "util/sync.h"
#include "util/time.h"

uint32_t rsp_sync_portable(uint32_t *w, uint64_t *d, void **p);
uint32_t rsp_sync_portable(uint32_t *w, uint64_t *d, void **p)
{
    uint32_t a = rsp__load_relaxed_u32(w) + rsp__load_acquire_u32(w) + rsp__load_seq_cst_u32(w);
    uint64_t b = rsp__load_relaxed_u64(d) + rsp__load_acquire_u64(d) + rsp__load_seq_cst_u64(d);
    rsp__store_relaxed_u32(w, a);
    rsp__store_release_u32(w, a);
    rsp__store_relaxed_u64(d, b);
    rsp__store_release_u64(d, b);
    rsp__store_relaxed_ptr(p, rsp__load_relaxed_ptr(p));
    rsp__store_release_ptr(p, rsp__load_acquire_ptr(p));
    a += rsp__fetch_add_relaxed_u32(w, 1) + rsp__fetch_add_release_u32(w, 1) +
         rsp__fetch_add_acq_rel_u32(w, 1) + rsp__fetch_add_seq_cst_u32(w, 1) +
         rsp__fetch_add_u32(w, 1);
    b += rsp__fetch_add_relaxed_u64(d, 1) + rsp__fetch_add_release_u64(d, 1) +
         rsp__fetch_add_acq_rel_u64(d, 1) + rsp__fetch_add_seq_cst_u64(d, 1) +
         rsp__fetch_add_u64(d, 1);
    a += rsp__swap_relaxed_u32(w, 1) + rsp__swap_release_u32(w, 2) + rsp__swap_acq_rel_u32(w, 3) +
         rsp__swap_seq_cst_u32(w, 4) + rsp__swap_u32(w, 5);
    a += (uint32_t)rsp__cas_relaxed_u32(w, 1, 2) + (uint32_t)rsp__cas_release_u32(w, 2, 3) +
         (uint32_t)rsp__cas_acq_rel_u32(w, 3, 4) + (uint32_t)rsp__cas_seq_cst_u32(w, 4, 5) +
         (uint32_t)rsp__cas_u32(w, 5, 6);
    rsp__count_add_u64(d, b);
    rsp__fence_full();
    rsp__cpu_relax();
    if (a == 0) {
        rsp__futex_wait(w, 0, NULL);
        rsp__futex_wake_all(w);
    }
    return a + (uint32_t)rsp__now_ns();
}
