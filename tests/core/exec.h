/*
 * A tiny in-test executor for the core's device work (work.h). Shared by
 * tests/core/ and tests/core_random/ (include by path: "core/exec.h" from
 * tests/, compile tests/core/exec.c into the suite).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Where the work runs is chosen per process by the environment variable
 * RSP_TEST_DEVICE, so one suite runs on every device (ctest registers a
 * `<suite>_host` and, in CUDA builds, a `<suite>_cuda` entry):
 *   "emulated" (default, or unset): plain heap memory, each op applied at
 *              once by this file. The reference behaviour.
 *   "host":    the real host device (src/device/host*.c): its worker thread
 *              runs the work FIFO, after this file checked it.
 *   "cuda":    the CUDA device on ordinal 0 (kernels, pool stream). Without
 *              a usable GPU every test of the suite skips through cmocka's
 *              skip() and prints "skipped: no CUDA device (<why>)".
 * Any other value fails every test. The API below is the same in all modes.
 *
 * Storage follows rsp__layout exactly: block b is one region of
 * layout->blocks[b].bytes, and (block, layer, slot) lives at
 * rsp__layout_offset(layout, b, layer, slot). Checkpoint slot ids (past
 * max_slots: layout.h rsp__layout_space) live in a region per tier and
 * block, [num_layers, tier size, slot], in every mode: on the host device
 * the device's own tiers (rsp__device_space_base), on CUDA a host copy of
 * them (the device tier in device memory, the host tier in mapped pinned
 * memory). Zero-filled at creation, like the real devices. On a device,
 * reads (checksums, slot_ptr, buffers) first wait for everything submitted
 * (rsp__device_sync); on CUDA they read a host copy of all three storages
 * downloaded then, and a fill uploads all three back.
 *
 * Addressing buffers: BUFFER creates or grows buffer `id` (growth copies the
 * old entries into a new allocation and counts a "move"; on a device, a move
 * is the device's buffer pointer changing); UPLOAD copies the host vectors
 * into it. Buffers are looked up by id in a small array.
 *
 * apply() also checks the list is well formed and returns false (with a
 * message from rsp_test_store_error) on the first violation: a slot out of
 * range, a COPY op whose pairs overlap (a slot both source and destination,
 * or a destination twice), an UPLOAD into a buffer that does not exist or is
 * too short, an op index out of the work's arrays. Operations before the
 * violating op have been applied (on a device: submitted).
 *
 * Caller events in WAIT ops (the suites pass NULL or a dummy pointer that
 * stands for "the forward's done event"): on the host device a non-NULL
 * event becomes a wait on a host fence of this store, which the main thread
 * raises only after it has written the simulated forward (fill /
 * fill_pattern calls made since the last apply) while the device worker is
 * held at the WAIT: a device that ran past a WAIT would copy stale bytes.
 * On CUDA a caller event becomes the NULL event (complete); fills are
 * uploaded at once.
 *
 * Main test thread only (cmocka); allocation failure aborts (tests only);
 * a device error fails the test (fail_msg).
 */
#ifndef RSP_TESTS_CORE_EXEC_H
#define RSP_TESTS_CORE_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "core/layout.h"
#include "core/work.h"

typedef struct rsp_test_store rsp_test_store;

/* Storage for every block of `layout` (copied), all zeros, on the device
 * RSP_TEST_DEVICE names. cuda without a GPU: skip()s the calling test. */
rsp_test_store *rsp_test_store_new(const rsp__layout *layout);
void rsp_test_store_free(rsp_test_store *store);

/* Execute every op of `work` in order: WAIT is ignored (counted; on the
 * host device, see above), ZERO and COPY touch every layer of every block,
 * BUFFER/UPLOAD update the buffers. Returns false on the first malformed op
 * (see above). On a device the work is queued, not waited for. */
bool rsp_test_store_apply(rsp_test_store *store, const rsp__work *work);
/* Message of the last apply() that returned false ("" otherwise). */
const char *rsp_test_store_error(const rsp_test_store *store);

/* Simulate a forward writing slot: every byte of every layer of every block
 * of the slot becomes `byte`. */
void rsp_test_store_fill(rsp_test_store *store, uint32_t slot, uint8_t byte);
/* Like fill, but with a pattern derived from (seed, block, layer, offset), so
 * that a misplaced or partial copy changes the checksum. */
void rsp_test_store_fill_pattern(rsp_test_store *store, uint32_t slot, uint64_t seed);

/* True when every byte of the slot (all layers, all blocks) is zero. */
bool rsp_test_store_slot_is_zero(const rsp_test_store *store, uint32_t slot);
/* A position-sensitive hash of every byte of the slot (all layers, all
 * blocks, in layout order). Equal contents give equal checksums; an all-zero
 * slot always gives the same value (rsp_test_store_zero_checksum). */
uint64_t rsp_test_store_checksum(const rsp_test_store *store, uint32_t slot);
uint64_t rsp_test_store_zero_checksum(const rsp_test_store *store);
/* Start of (block, layer, slot): layout->blocks[block].slot_bytes bytes.
 * For reading: on CUDA it points into the host copy, so writes through it
 * never reach the device (use fill / fill_pattern). */
uint8_t *rsp_test_store_slot_ptr(rsp_test_store *store, uint32_t block, uint32_t layer,
                                 uint32_t slot);

/* Addressing buffer `id` as the executed work left it. capacity 0 and NULL
 * vectors when the buffer was never created. `moves` counts how often a
 * BUFFER op grew (reallocated) it: a leased buffer must stay at 0 moves. */
uint32_t rsp_test_store_buffer_capacity(const rsp_test_store *store, uint32_t id);
const int32_t *rsp_test_store_buffer_slots(const rsp_test_store *store, uint32_t id);
const bool *rsp_test_store_buffer_has_state(const rsp_test_store *store, uint32_t id);
uint32_t rsp_test_store_buffer_moves(const rsp_test_store *store, uint32_t id);

/* Totals over every apply(): ops of each kind (indexed by rsp__op_kind),
 * slots zeroed, pairs copied. */
typedef struct rsp_test_store_counts {
    uint64_t ops[RSP__OP_UPLOAD + 1];
    uint64_t slots_zeroed;
    uint64_t pairs_copied;
} rsp_test_store_counts;
rsp_test_store_counts rsp_test_store_counts_get(const rsp_test_store *store);

/* The mode this process runs in: "emulated", "host" or "cuda" (from
 * RSP_TEST_DEVICE; fails the test on any other value). */
const char *rsp_test_store_mode(void);

#endif
