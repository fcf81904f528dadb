/*
 * The baseline: the same core (src/core) driven directly by the calling
 * threads behind one pthread_mutex, the design of the Python original (a lock
 * around the pool's state). Plans are read under a pthread_rwlock.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Fair and competent on purpose:
 * - Same core, same config, same step declarations as the pool under test.
 * - A default (normal) pthread_mutex: the adaptive (spinning) kind was tried
 *   and was not faster here (ingest_remove, 1-8 threads on 2 cores).
 * - Device work runs synchronously in the calling thread, under the mutex,
 *   straight onto heap storage (memset / memcpy per layer and block, like
 *   the host device's worker does), with no thread hop: for a lock-based
 *   design that is the fastest honest executor. Sending the work to the host
 *   device and waiting for it would add a hop the lock design does not need.
 * - The published plan is copied once per plan (host vectors), like the
 *   pool's publication, and read under a writer-preferring rwlock (glibc's
 *   default prefers readers, which would starve the publisher under 8
 *   spinning readers and make the baseline look better than it is: its
 *   plans would stop changing).
 *
 * Threads: every function may be called from any thread concurrently.
 */
#ifndef RSP_BENCH_BASELINE_H
#define RSP_BENCH_BASELINE_H

#include <rsp/rsp.h>

typedef struct bl_pool bl_pool;

/* Core + storage (64-byte aligned, zeroed) + locks. */
rsp_status bl_create(const rsp_pool_config *cfg, bl_pool **out, rsp_error *err);
void bl_destroy(bl_pool *p);
/* The core's same-declaration path on (the default) or off: off, every
 * step takes the general path (rsp-bench-profile's *-general modes). */
void bl_set_fast(bl_pool *p, bool on);

/* Each: lock, core call, execute its work list, unlock. */
rsp_status bl_label(bl_pool *p, const char *name, rsp_label_id *out, rsp_error *err);
rsp_status bl_ingest(bl_pool *p, rsp_rid rid, rsp_error *err);
rsp_status bl_remove(bl_pool *p, rsp_rid rid, rsp_error *err);
rsp_status bl_admit(bl_pool *p, const rsp_step *step, rsp_admit_outcome *out, rsp_error *err);
/* Plan, execute (pre-forks, uploads), then publish under the write lock. */
rsp_status bl_plan(bl_pool *p, const rsp_step *step, rsp_error *err);
rsp_status bl_commit(bl_pool *p, const rsp_step *step, const rsp_event *forward_done,
                     rsp_error *err);

/* Read side, mirroring rsp_read_begin / rsp_plan_addressing / rsp_read_end:
 * take the read lock, copy the published addressing of `label` into *out
 * (RSP_ENOPLAN when nothing is published or the label was not planned),
 * release the lock. The pointers in *out are valid until bl_read_end. */
void bl_read_begin(bl_pool *p);
rsp_status bl_plan_addressing(bl_pool *p, rsp_label_id label, rsp_addressing *out);
void bl_read_end(bl_pool *p);

#endif
