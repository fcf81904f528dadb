/*
 * rsp: recurrent state pool for LLM inference engines.
 * SPDX-License-Identifier: Apache-2.0
 *
 * One pool owns the fixed-size recurrent state (Mamba, Mamba-2, gated delta
 * nets, ...) of every request of one model partition. It hands out slots per
 * (request, label), zeroes what it releases, forks slots for beams and
 * drafts, and tells the kernels, step by step, which slot each batch row
 * reads and writes. The behaviour contract is docs/semantics.md; the design
 * is docs/design.md; who may call what from which thread is docs/ordering.md.
 *
 * Threads, in one table (details at each function):
 *
 *   function group                 | callable from            | blocks?
 *   -------------------------------+--------------------------+------------------
 *   rsp_pool_create / _close /     | any one thread           | yes (joins)
 *   _close_timed / _destroy        |                          |
 *   rsp_pool_info, rsp_pool_block  | any thread               | no (immutable)
 *   rsp_post                       | any thread, concurrently | no (or timeout)
 *   rsp_wait, sync wrappers        | the thread owning ticket,| yes (or timeout)
 *                                  | never in a read section  |
 *   rsp_ticket_forget              | the thread owning ticket | no
 *   rsp_stats_peek                 | any thread               | no (atomics)
 *   rsp_read_*, rsp_plan_*,        | registered reader thread | no (RCU read)
 *   rsp_checkpoint_lookup          |                          |
 *   rsp_event_host / _cuda         | any thread               | no (pure)
 *   rsp_plan_wait, _wait_step      | any thread, not in a     | yes (or timeout)
 *                                  | read section             |
 *   rsp_host_fence_*               | any thread               | wait only
 *
 * After fork() without exec(), rsp does not survive in the child (its
 * threads and liburcu's state stay in the parent): every function that
 * touches a pool, a plan, a ticket, a host fence or the reader state answers
 * RSP_EFORKED in the child; those without a status do nothing (a pointer
 * result is NULL, a value 0, a bool false). The pure helpers keep working:
 * rsp_strerror, rsp_dtype_size, rsp_pool_config_init, rsp_shard_shapes,
 * rsp_event_host, rsp_event_cuda, rsp_event_complete, rsp_stats_fields.
 *
 * Plain data only: no atomics and no library types, so this header compiles
 * as C11 and as C++17.
 */
#ifndef RSP_RSP_H
#define RSP_RSP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rsp_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RSP_API __attribute__((visibility("default")))
#else
#define RSP_API
#endif

/* A 0.1 name kept as an alias of its 0.2 name (docs/abi.md, "Names"): a
 * use warns, naming the new call, in C and C++ with gcc and clang; other
 * compilers (or RSP_NO_DEPRECATED defined before this header) see a plain
 * declaration. The alias stays exported for the whole 0.x series. */
#if defined(__GNUC__) && !defined(RSP_NO_DEPRECATED)
#define RSP_DEPRECATED(use) __attribute__((deprecated("use " use)))
#else
#define RSP_DEPRECATED(use)
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * The version of this header (semantic: docs/abi.md). The top-level
 * CMakeLists.txt reads these three lines for project(VERSION), so they are
 * the one place the version is written; the shared library's SOVERSION is
 * RSP_VERSION_MAJOR. A program asks the library it loaded for its own with
 * rsp_version() and checks the two agree with RSP_VERSION_CHECK (both at
 * the end of this header).
 */
#define RSP_VERSION_MAJOR 0
#define RSP_VERSION_MINOR 3
#define RSP_VERSION_PATCH 0
/** The three as one number, MAJOR * 10000 + MINOR * 100 + PATCH (0.3.0: 300). */
#define RSP_VERSION (RSP_VERSION_MAJOR * 10000 + RSP_VERSION_MINOR * 100 + RSP_VERSION_PATCH)

/* ------------------------------------------------------------------------ */
/* Status and errors                                                         */
/* ------------------------------------------------------------------------ */

/** Every fallible call returns one of these. RSP_OK is zero. */
typedef enum rsp_status {
    RSP_OK = 0,
    RSP_EINVAL,       /**< a field of a config, message or argument is invalid */
    RSP_ENOLABEL,     /**< unknown label id or name */
    RSP_EDUPROW,      /**< the same (rid, label) appears twice with span > 0 */
    RSP_EORDER,       /**< step out of order (not admitted, not planned, id went back) */
    RSP_ESTAGED,      /**< a stage already exists (second preplan) */
    RSP_ENOREQ,       /**< query about a request that does not exist */
    RSP_ENOPLAN,      /**< addressing asked for a label the step did not plan */
    RSP_ECAPACITY,    /**< more rows than a leased buffer holds, or too many steps in flight */
    RSP_ESHUTDOWN,    /**< the pool is shutting down or shut down */
    RSP_EFULL,        /**< the inbox is full (bounded by credits) */
    RSP_EAGAIN,       /**< poll: the ticket is not answered yet */
    RSP_ETIMEDOUT,    /**< a timed wait expired */
    RSP_ENOMEM,       /**< out of host or device memory */
    RSP_EDEVICE,      /**< the device failed (CUDA error string in the message); also: the
                           pool is broken (device work failed after its state changed, see
                           "Messages"), for that message and every later one */
    RSP_ENODEV,       /**< the requested device does not exist or is not built in */
    RSP_ENOTREG,      /**< reader thread not registered with rsp_reader_register */
    RSP_EFORKED,      /**< called in a child after fork() without exec() */
    RSP_ENOKEY,       /**< no checkpoint is stored under that key */
    RSP_EPINNED,      /**< the checkpoint is pinned (a step restoring from it, or the caller) */
    RSP_STATUS_COUNT_ /**< not a status; keeps the table honest */
} rsp_status;

/** Longest message, terminating NUL included. */
#define RSP_ERROR_MAX 256

/**
 * Details of a failure. Every function that can fail takes an optional
 * `rsp_error *err` (NULL = not interested); on failure it receives the status
 * and a message naming what was wrong. On success it is left untouched.
 */
typedef struct rsp_error {
    rsp_status status;
    char message[RSP_ERROR_MAX];
} rsp_error;

/** Static name of a status ("RSP_EINVAL: invalid argument"). Any thread, O(1). */
RSP_API const char *rsp_strerror(rsp_status status);

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */
/* ------------------------------------------------------------------------ */

#define RSP_MAX_DIMS 8
#define RSP_MAX_BLOCKS 32
#define RSP_MAX_LABELS 64
#define RSP_NAME_MAX 32 /**< longest block or label name, NUL included */

typedef enum rsp_dtype {
    RSP_DTYPE_F32 = 0,
    RSP_DTYPE_F16,
    RSP_DTYPE_BF16,
    RSP_DTYPE_F64,
    RSP_DTYPE_I8,
    RSP_DTYPE_U8,
    RSP_DTYPE_I32,
    RSP_DTYPE_I64,
    RSP_DTYPE_COUNT_
} rsp_dtype;

/** Bytes per element of a dtype; 0 for an invalid one. Any thread, O(1). */
RSP_API size_t rsp_dtype_size(rsp_dtype dtype);

/** One named block of per-slot state, e.g. "conv" [4, 8192] or "ssm" [64, 128, 16]. */
typedef struct rsp_block_config {
    const char *name; /**< unique, 1..RSP_NAME_MAX-1 chars */
    rsp_dtype dtype;
    uint32_t ndim;                     /**< 1..RSP_MAX_DIMS */
    int64_t shape[RSP_MAX_DIMS];       /**< unsharded; every dim > 0 */
    uint32_t num_shard_dims;           /**< axes split across tensor-parallel ranks */
    uint32_t shard_dims[RSP_MAX_DIMS]; /**< each < ndim */
} rsp_block_config;

typedef enum rsp_device_kind {
    RSP_DEVICE_HOST = 0, /**< heap memory + a device worker thread (CI) */
    RSP_DEVICE_CUDA      /**< cudaMalloc storage, one pool stream, kernels/ */
} rsp_device_kind;

/** Where a checkpoint lives (docs/checkpoints.md). */
typedef enum rsp_tier {
    RSP_TIER_DEVICE = 0, /**< the pool's device memory (host device: host memory) */
    RSP_TIER_HOST,       /**< host memory (pinned on a CUDA pool) */
    RSP_TIER_COUNT_      /**< not a tier */
} rsp_tier;

/** A checkpoint the pool evicted to make room (rsp_pool_config.on_checkpoint_evict). */
typedef struct rsp_checkpoint_event {
    uint64_t key;
    rsp_tier tier; /**< the tier it left */
    bool demoted;  /**< true: it moved to the host tier and is still stored under key;
                        false: it is gone */
} rsp_checkpoint_event;

/** A failure nobody would otherwise see (rsp_pool_config.on_error); defined
 * with the messages below. */
typedef struct rsp_failure rsp_failure;

typedef struct rsp_pool_config {
    /**
     * sizeof(rsp_pool_config) of the caller's header, stamped by
     * rsp_pool_config_init; the library reads only that many bytes, so a
     * newer library serves an older caller's smaller struct (its later
     * fields take their defaults). Set by the init call, never by hand
     * (docs/abi.md). 0 (a config that skipped the init) is RSP_EINVAL.
     */
    uint32_t struct_size;
    uint32_t num_layers;            /**< recurrent layers only, > 0 */
    const rsp_block_config *blocks; /**< copied at creation */
    uint32_t num_blocks;            /**< 1..RSP_MAX_BLOCKS */
    uint32_t max_slots;             /**< including the sink */
    bool sink;                      /**< slot 0 reserved as the pad target */
    uint32_t world_size;            /**< tensor-parallel group size, >= 1 */
    uint32_t rank;                  /**< < world_size */
    rsp_device_kind device;
    int cuda_ordinal;            /**< RSP_DEVICE_CUDA only */
    uint32_t inbox_capacity;     /**< messages queued at most; 0 = default (4096); <= 2^20 */
    uint32_t max_inflight_steps; /**< admitted, not finished; 0 = default (4) */
    bool ordered; /**< ordered posting: slot-changing messages carry msg.seq (see rsp_post) */
    uint64_t reorder_timeout_ns; /**< ordered: longest wait for a missing seq; 0 = 1 s */
    /**
     * Optional (NULL: none): called for each message whose failure no
     * caller reads (fire-and-forget, or a ticket given up with
     * rsp_ticket_forget before its answer), on the owner thread (or on the
     * thread of a synchronous call that found the owner asleep and ran in
     * its role, docs/design.md), after the message was handled, with
     * on_error_ctx. It must not block or call the
     * pool (the owner handles nothing else while it runs; a call that waits
     * for the owner deadlocks); copy what it needs, the failure lives for
     * the call only. Each such failure is also counted (rsp_stats.posts_failed).
     * Also called for each checkpoint take declared in a step that its
     * commit had to skip (the commit stands; counted in
     * rsp_stats.checkpoints_skipped instead).
     */
    void (*on_error)(void *ctx, const rsp_failure *failure);
    void *on_error_ctx;
    /**
     * The CPU the pool's owner thread is pinned to, as an engine gives the
     * owner a core of its own; -1 (rsp_pool_config_init's default): not
     * pinned. A CPU that is not one of the machine's, or that the process
     * may not use (its cpuset), is RSP_EINVAL naming it, nothing created.
     * Cost: none per message; the owner then never runs elsewhere (nor do
     * its messages: no synchronous call runs in its role), so give
     * it a CPU that nothing busy shares (a shared one makes every round
     * trip a context switch, see docs/performance.md). rsp_pool_info's
     * owner_cpu says where it is pinned.
     */
    int owner_cpu;
    /**
     * Checkpoints (docs/checkpoints.md): slots of their own, apart from the
     * request slots, so that checkpoints never make an admit fail, nor the
     * reverse. max_checkpoints on the device tier, max_host_checkpoints in
     * host memory (pinned on a CUDA pool); 0 and 0 (the default): none.
     * Slot ids: request slots [0, max_slots), then the device tier, then
     * the host tier; their sum must fit int32.
     */
    uint32_t max_checkpoints;
    uint32_t max_host_checkpoints;
    /** A device-tier checkpoint evicted for room moves to the host tier
     * (evicting the host tier's least recently used unpinned one if needed)
     * instead of being dropped. */
    bool checkpoint_demote;
    /**
     * Optional (NULL: none): called on the owner thread (or a synchronous
     * caller's in its role, as on_error), with
     * on_checkpoint_evict_ctx, for every checkpoint evicted to make room, so
     * an engine can prune its prefix tree. Same rules as on_error: it must
     * not block or call the pool. Evictions are counted too
     * (rsp_stats.checkpoints_evicted, checkpoints_demoted).
     */
    void (*on_checkpoint_evict)(void *ctx, const rsp_checkpoint_event *event);
    void *on_checkpoint_evict_ctx;
    /* Fields past RSP_POOL_CONFIG_SIZE_0_1 (0.3 on): an older caller's
     * struct leaves them at their defaults. */
    /**
     * Optional (NULL: none): record every message the owner handles, with
     * its reply, to this file (created or truncated at rsp_pool_create;
     * unwritable: RSP_EINVAL, nothing created). Messages keep their wire
     * form (sequence numbers, step declarations, their outcomes; no slot
     * bytes, events as handles only), in the order the owner handled
     * them; the file is flushed whenever the owner goes idle and at
     * close. `rsp-replay FILE` replays it into a fresh pool and checks
     * every answer and plan digest (docs/guide.md). A write that fails
     * stops the recording (said on stderr), not the pool. Read at
     * creation only.
     */
    const char *record_path;
    /**
     * Which checkpoint a full tier evicts or demotes (docs/checkpoints.md,
     * "Value"): RSP_CHECKPOINT_LRU (0, the default) the least recently
     * used unpinned one; RSP_CHECKPOINT_VALUE the unpinned one of lowest
     * score = recency + checkpoint_value_weight x f x value / bytes, where
     * recency counts the tier's uses, value is what rsp_checkpoint_value
     * set (0 until then) and f = 1 + floor(log2(restores from it)), 1
     * before its second restore. Another value: RSP_EINVAL naming it.
     */
    uint32_t checkpoint_policy;
    /** RSP_CHECKPOINT_VALUE: how many uses a unit of value per byte is
     * worth; finite, >= 0 (else RSP_EINVAL). 0 evicts exactly as LRU. */
    double checkpoint_value_weight;
    /**
     * Guard mode, for debugging an engine's kernels (docs/semantics.md 9.6,
     * docs/guide.md "Debugging"); false (the default): off, nothing checked,
     * nothing costs. On: at each commit, once its forward_done has fired,
     * the pool checks that the forward wrote no slot it did not address:
     * free slots still zero, and held slots no in-flight step addresses
     * unchanged since the previous commit's check (a checksum per slot,
     * block and layer); writes into the sink are allowed. Each slot found
     * is reported through on_error (failure->guard names it) and counted
     * (rsp_pool_dump's "guard"); nothing else changes. Cost: at every
     * commit the owner waits for forward_done and the device, and checksums
     * every free and unaddressed held slot (docs/performance.md "Guard
     * mode"); messages behind the commit wait for the forward too, so a
     * host-fence forward_done must fire without the caller waiting for any
     * later answer of the pool. Memory: 8 bytes per slot, block and
     * layer.
     */
    bool guard;
} rsp_pool_config;

/* A call rsp_pool_config_init(cfg) is the macro at the end of this header,
 * which stamps struct_size with the caller's sizeof; the function itself
 * fills 0.1's layout, what a program built against 0.1.0 calls (docs/abi.md). */
/** Defaults: sink on, world_size 1, rank 0, host device, zero sizes. Any thread. */
RSP_API void rsp_pool_config_init(rsp_pool_config *cfg);

/**
 * Narrow every block's sharded axes for (world_size, rank), writing the local
 * shapes to out[num_blocks]. Recomputed from the unsharded shapes each time,
 * so it is harmless to call twice. Any thread, O(blocks * dims).
 */
RSP_API rsp_status rsp_shard_shapes(const rsp_pool_config *cfg, int64_t (*out)[RSP_MAX_DIMS],
                                    rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Pool                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct rsp_pool rsp_pool;

/**
 * Validate cfg, allocate and zero the storage on the chosen device, start the
 * owner thread (and the host device worker). Nothing is left allocated on
 * failure. Any thread; cost: the allocation and zeroing of total_bytes.
 */
RSP_API rsp_status rsp_pool_create(const rsp_pool_config *cfg, rsp_pool **out, rsp_error *err);

/**
 * Destroy the pool, saying whether it did. Stop accepting posts (later posts
 * get RSP_ESHUTDOWN), answer every message still queued, release threads
 * blocked in rsp_plan_wait (they return RSP_ESHUTDOWN) and wait until they
 * have left, wait for reader references and the device, free everything,
 * join the pool's threads. Call once, from one thread, after every other
 * thread stopped posting. NULL is a no-op (RSP_OK). The storage of a pool
 * with live DLPack exports (rsp_pool_block_dlpack, device addressing
 * vectors) stays until the last export's deleter frees it.
 *
 * Waiting for the device includes every forward_done event given to the
 * pool (commit, rollback): the device runs nothing after such a WAIT until
 * the event completes, so an event that is never signalled (a host fence
 * whose forward was abandoned) hangs destroy. Signal it first, or use
 * rsp_pool_close_timed, which says which steps it would wait for.
 *
 * Refused, with nothing destroyed and the pool still usable:
 * RSP_EINVAL inside a read section (rsp_read_begin): destroy waits for a
 * grace period, i.e. for the caller's own section; end it, then call again.
 * In a forked child: RSP_EFORKED, and the pool is left as it is (its
 * threads do not exist in the child; exec or exit reclaims the memory).
 *
 * Plan waiters: a thread blocked in rsp_plan_wait when this is called is
 * woken and waited for (destroy returns after it has left the pool). A call
 * of rsp_plan_wait (or of anything else on the pool) that is not ordered
 * before this call, i.e. that may start while destroy runs, is a use after
 * free like any other: to stop such threads first, post RSP_MSG_SHUTDOWN
 * (later rsp_plan_wait calls return RSP_ESHUTDOWN at once) and join them.
 * Any one thread; cost: joins the owner, the device worker and the plan
 * reclaimer, one grace period, and waits as above.
 */
RSP_API rsp_status rsp_pool_close(rsp_pool *pool, rsp_error *err);

/** Step ids rsp_close_report names at most. */
#define RSP_CLOSE_REPORT_MAX 64

/** What rsp_pool_close_timed found. */
typedef struct rsp_close_report {
    bool closed;            /**< the pool was destroyed */
    uint32_t forward_waits; /**< forward_done waits not yet run (timeout) */
    uint32_t num_steps;     /**< entries of step_ids: min(forward_waits, the max) */
    uint64_t step_ids[RSP_CLOSE_REPORT_MAX]; /**< their steps, oldest first */
} rsp_close_report;

/**
 * rsp_pool_close, bounded: before any teardown it waits, up to timeout_ns
 * in all, for everything rsp_pool_close would wait for, in this order: a
 * barrier (every message posted before the call handled), the device's
 * run of every forward_done wait given to it, the plan references taken
 * with rsp_plan_ref (the calling thread's own included), and a grace
 * period (another thread's read section, or an online QSBR reader that is
 * not quiescent). When all of them are through it destroys the pool as
 * rsp_pool_close (which then has only finite work to wait for, given the
 * caller rule below) and returns RSP_OK with out->closed true. Otherwise
 * it returns RSP_ETIMEDOUT and destroys nothing (the pool stays usable:
 * release what is held and call again, or keep using it); err names what
 * was still held at the timeout ("1 plan reference held", the forward_done
 * waits and the oldest step, a late owner, an open read section: once one
 * wait is late the later ones are only looked at, not waited for), and out
 * names the steps whose forward_done the device still waits for (commit or
 * rollback order). After RSP_MSG_SHUTDOWN the barrier is refused, and
 * messages still queued then are not covered. Refusals as rsp_pool_close
 * (RSP_EINVAL inside a read section, RSP_EFORKED). NULL pool: RSP_OK,
 * nothing done. Same caller rule as rsp_pool_close. out may be NULL. Cost:
 * a barrier, one device event wait, a poll (every 1 ms) of the reference
 * count while one is held, a grace period run by the pool's reclaimer
 * thread, then rsp_pool_close.
 */
RSP_API rsp_status rsp_pool_close_timed(rsp_pool *pool, uint64_t timeout_ns, rsp_close_report *out,
                                        rsp_error *err);

/** rsp_pool_close(pool, NULL), ignoring its status (inside a read section or
 * in a forked child it destroys nothing; rsp_pool_close says so). */
RSP_API void rsp_pool_destroy(rsp_pool *pool);

/** Immutable facts about a pool. */
typedef struct rsp_pool_info {
    uint32_t num_layers;
    uint32_t num_blocks;
    uint32_t max_slots;
    uint32_t usable_slots; /**< max_slots - (sink ? 1 : 0) */
    bool sink;
    int32_t pad_index;    /**< RSP_SINK_SLOT with the sink, RSP_NO_SLOT without */
    uint64_t slot_bytes;  /**< all layers, all blocks of one slot */
    uint64_t total_bytes; /**< slot_bytes * max_slots */
    rsp_device_kind device;
    int32_t owner_cpu; /**< the CPU the owner thread is pinned to, -1: not pinned */
} rsp_pool_info;

#define RSP_SINK_SLOT 0
#define RSP_NO_SLOT (-1)

/** Fill *out. Any thread, O(1). */
RSP_API rsp_status rsp_pool_info_get(const rsp_pool *pool, rsp_pool_info *out, rsp_error *err);

/** A contiguous [max_slots, *shape] view of one block of one layer. */
typedef struct rsp_block_view {
    void *data; /**< host or device pointer, per the pool's device */
    rsp_dtype dtype;
    uint32_t ndim;                     /**< 1 + block ndim */
    int64_t shape[RSP_MAX_DIMS + 1];   /**< [max_slots, *local shape] */
    int64_t strides[RSP_MAX_DIMS + 1]; /**< in elements, row-major */
} rsp_block_view;

/**
 * The view of block `name` at `layer`. Unknown name or layer out of range:
 * RSP_EINVAL, *out untouched. Any thread, O(blocks).
 */
RSP_API rsp_status rsp_pool_block(const rsp_pool *pool, const char *name, uint32_t layer,
                                  rsp_block_view *out, rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Identity and the step declaration                                         */
/* ------------------------------------------------------------------------ */

typedef uint64_t rsp_rid;
typedef uint32_t rsp_label_id;

/** "main" is interned at creation and is always id 0. */
#define RSP_LABEL_MAIN 0u

/** One row (segment) of a step: (rid, label, span). */
typedef struct rsp_row {
    rsp_rid rid;
    rsp_label_id label;
    int32_t span;         /**< tokens this step; <= 0 reserves nothing */
    bool padding;         /**< a replay's dummy row: reserves nothing, addresses pad_index */
    bool skip_post_forks; /**< commit only: this rid's post-forks are not applied (a
                               rejected draft); admit and plan ignore it */
    uint16_t fork_group;  /**< forks of group 0 and of this group apply to this rid;
                               in a step with a grouped fork, every non-padding row of
                               one rid carries the same group (else RSP_EINVAL) */
    /* The two fields below sit in what was tail padding (sizeof stays 24):
     * zero-fill rows (designated initializers, calloc, memset). */
    uint8_t per_token_states; /**< 1: the forward writes the state after each of the
                                   span tokens into an output slot of its own, and the
                                   commit keeps the accepted one (see "Per-token
                                   states"); 0: as before; anything else RSP_EINVAL */
    uint8_t resv_;            /**< reserved, ignored */
    uint16_t accepted;        /**< commit only, per_token_states rows: the accepted
                                   count a, 0 .. span; admit and plan ignore it */
} rsp_row;

/** Copy the `from` label's slot onto the `to` label's slot of the same rid. */
typedef struct rsp_fork {
    rsp_label_id from;
    rsp_label_id to;
    uint32_t group; /**< 0: every rid of the step; g (<= UINT16_MAX): only the rids
                         whose rows carry fork_group g */
} rsp_fork;

/** Take a checkpoint of (rid, label) under key at this step's commit: the
 * state the step's forward left (after forward_done, before post-forks).
 * (rid, label) must be a row of the step with span > 0. */
typedef struct rsp_checkpoint_decl {
    rsp_rid rid;
    rsp_label_id label;
    rsp_tier tier; /**< the tier to store it in */
    uint64_t key;
} rsp_checkpoint_decl;

/** Start (rid, label) from the checkpoint under key: the plan copies it into the
 * row's slot before the forward (and before the pre-forks), has_state true.
 * (rid, label) must be a row of the step with span > 0; a missing key is
 * RSP_ENOKEY at admit, nothing changed. */
typedef struct rsp_restore {
    rsp_rid rid;
    rsp_label_id label;
    uint64_t key;
} rsp_restore;

/** A CUDA-graph lease: buffers keyed (bucket_id, lease_slot, label) never move. */
typedef struct rsp_lease {
    uint32_t bucket_bs; /**< the graph bucket's batch size */
    uint32_t bucket_id;
    uint32_t lease_slot;
} rsp_lease;

/**
 * One batched forward. The same declaration is passed to admit, plan and
 * commit. Arrays are read during the call (or copied by rsp_post) only.
 * Sizes: at most max(8192, 2 x max_slots) rows per label, the same bound on
 * lease.bucket_bs, and at most RSP_MAX_LABELS^2 entries per fork list;
 * beyond that RSP_EINVAL, nothing changed (a row with state addresses a slot
 * of its own, so a longer batch is only padding).
 */
typedef struct rsp_step {
    uint64_t step_id; /**< chosen by the caller, increasing */
    const rsp_row *rows;
    uint32_t num_rows;
    const rsp_fork *pre_forks; /**< applied at plan, before the forward */
    uint32_t num_pre_forks;
    const rsp_fork *post_forks; /**< applied at commit, after the forward */
    uint32_t num_post_forks;
    bool capture; /**< graph warm-up: reserves, copies, commits nothing */
    bool preplan; /**< plan stages instead of going live */
    bool has_lease;
    rsp_lease lease;
    const rsp_checkpoint_decl *checkpoints; /**< taken at commit */
    uint32_t num_checkpoints;
    const rsp_restore *restores; /**< copied in at plan */
    uint32_t num_restores;
} rsp_step;

/** What rsp_checkpoint_query answers. */
typedef struct rsp_checkpoint_info {
    uint64_t key;
    rsp_tier tier;
    int32_t slot;       /**< its slot id (request slots come first, then each tier) */
    uint64_t bytes;     /**< every block, every layer: the pool's slot_bytes */
    uint32_t pins;      /**< steps in flight restoring from it */
    uint32_t user_pins; /**< rsp_checkpoint_pin count */
    uint64_t last_use;  /**< the pool's use clock at its last take, restore or pin */
} rsp_checkpoint_info;

/** Result of admit. Pool full is an outcome (ok = false), not an error. */
typedef struct rsp_admit_outcome {
    bool ok;
    rsp_rid rid; /**< failure: the (rid, label) that found no slot */
    rsp_label_id label;
    uint32_t slots_short; /**< failure: how many more slots the step needed */
    uint32_t usable;      /**< usable_slots of the pool */
    uint32_t free;        /**< free slots at the time of the failure */
} rsp_admit_outcome;

/** A request's holding of one label. */
typedef struct rsp_holding {
    int32_t index;       /**< slot id */
    bool has_state;      /**< false: the slot reads as zeros */
    uint64_t generation; /**< pool-wide counter value at the last assignment, fork or reset */
} rsp_holding;

/**
 * A monotonic timeline, the host device's event (functions at the end of
 * this header): signalling value v completes every wait for a value <= v.
 */
typedef struct rsp_host_fence rsp_host_fence;

/** What an rsp_event's handle is. Each device waits on its own kind only. */
typedef enum rsp_event_kind {
    RSP_EVENT_NONE = 0,   /**< no event: "already complete"; handle must be NULL */
    RSP_EVENT_HOST_FENCE, /**< handle: an rsp_host_fence *, value: the point to reach */
    RSP_EVENT_CUDA,       /**< handle: a cudaEvent_t; value unused */
    RSP_EVENT_COMPLETE,   /**< "the forward is already complete": handle NULL; every
                               device accepts it (rsp_event_complete) */
    RSP_EVENT_KIND_COUNT_ /**< not a kind */
} rsp_event_kind;

/**
 * A point on a device timeline that work can wait for. Build one with
 * rsp_event_host / rsp_event_cuda; a zeroed one ({0}) is "already complete".
 * handle == NULL means "already complete" whatever the kind, except as the
 * forward_done of a commit whose rows wrote: there it is "no event given"
 * (RSP_EINVAL) and rsp_event_complete() says "complete" explicitly. A pool refuses
 * (RSP_EINVAL, nothing changed) an event it cannot wait on: the host device
 * waits on host fences only, the CUDA device on CUDA events only; a non-NULL
 * handle of kind RSP_EVENT_NONE, or an unknown kind, is refused by both.
 *
 * A host fence carries a tag, checked wherever a pool or rsp_host_fence_wait
 * receives one: a pointer to some other object (a CUDA event labelled as a
 * host fence, a stray struct) and a fence whose memory was freed but not yet
 * reused are refused with RSP_EINVAL. Not caught: a pointer to unmapped
 * memory (it faults), freed memory reused by a new fence, and a CUDA event
 * handle that is not a live event (the CUDA runtime reports that one when the
 * device waits, breaking the pool).
 */
typedef struct rsp_event {
    rsp_event_kind kind;
    void *handle;
    uint64_t value;
} rsp_event;

/** {RSP_EVENT_HOST_FENCE, fence, value}. Any thread, O(1), touches nothing. */
RSP_API rsp_event rsp_event_host(rsp_host_fence *fence, uint64_t value);
/** {RSP_EVENT_CUDA, cuda_event (a cudaEvent_t), 0}. Any thread, O(1). */
RSP_API rsp_event rsp_event_cuda(void *cuda_event);
/**
 * {RSP_EVENT_COMPLETE, NULL, 0}: the caller says the step's forward has
 * already finished writing its slots (it waited for it, or ran none that
 * wrote), so the pool's device need not wait. A commit whose rows wrote
 * needs a forward_done (see rsp_step_commit): this is the explicit "done".
 * Every device accepts it. Any thread, O(1), touches nothing.
 */
RSP_API rsp_event rsp_event_complete(void);

/* ------------------------------------------------------------------------ */
/* Counters                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * Gauges and counters, one field each of RSP_STATS_FIELDS (rsp_stats.h,
 * where each is documented). Each field is read atomically, the set is not
 * a snapshot unless obtained with RSP_MSG_STATS (handled by the owner).
 */
typedef struct rsp_stats {
#define RSP__STATS_FIELD(bits, name, kind, source, help) uint##bits##_t name;
    RSP_STATS_FIELDS(RSP__STATS_FIELD)
} rsp_stats;

/** rsp_stats as release 0.1 had it (RSP_STATS_FIELDS_0_1): the type of
 * rsp_reply.stats, whose place in rsp_reply is frozen (docs/abi.md). */
typedef struct rsp_stats_0_1 {
    RSP_STATS_FIELDS_0_1(RSP__STATS_FIELD)
#undef RSP__STATS_FIELD
} rsp_stats_0_1;

/** Whether a field only grows (a Prometheus counter) or goes both ways. */
typedef enum rsp_metric_kind { RSP_METRIC_GAUGE = 0, RSP_METRIC_COUNTER = 1 } rsp_metric_kind;

/** One field of rsp_stats, for a program that walks them (an exporter). */
typedef struct rsp_stats_field {
    const char *name;     /**< the field's name, "free_slots" */
    const char *metric;   /**< its Prometheus name: "rsp_free_slots", "rsp_commits_total" */
    const char *help;     /**< one line: what it counts */
    uint32_t offset;      /**< offsetof(rsp_stats, name) */
    uint32_t bits;        /**< 32 or 64: uint32_t or uint64_t */
    rsp_metric_kind kind; /**< counter or gauge */
} rsp_stats_field;

/**
 * The fields of this library's rsp_stats, in layout order: a static table
 * of *count entries (count may be NULL), from the one list of
 * RSP_STATS_FIELDS. A caller built against an older header reads only the
 * fields its struct has (offset + bits / 8 <= its sizeof). Any thread,
 * O(1); pure (also in a forked child).
 */
RSP_API const rsp_stats_field *rsp_stats_fields(uint32_t *count);

/** Read the counters without a message (out NULL: RSP_EINVAL). Any
 * thread, O(1), lock-free; each field is exact on its own, the set is not a
 * snapshot (rsp_stats_snapshot is). The gauges (free_slots ... generation,
 * checkpoints_*, swapped_slots) are refreshed by the owner before it
 * answers any message that has a waiter and at the end of each batch it
 * drains: after an answer they include every message handled before it;
 * fire-and-forget messages show there once the owner's batch ends
 * (messages_handled may run a batch ahead). */
RSP_API rsp_status rsp_stats_peek(const rsp_pool *pool, rsp_stats *out, rsp_error *err);
/** 0.1's name of rsp_stats_peek. */
RSP_API rsp_status rsp_pool_counters(const rsp_pool *pool, rsp_stats *out, rsp_error *err)
    RSP_DEPRECATED("rsp_stats_peek");

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */
/* ------------------------------------------------------------------------ */

typedef enum rsp_msg_kind {
    RSP_MSG_INGEST = 0, /**< rid, or the list rids[num_rids] */
    RSP_MSG_REMOVE,     /**< rid, or the list rids[num_rids] */
    RSP_MSG_RESET,      /**< rid or rids[num_rids], free */
    RSP_MSG_ADMIT,      /**< step -> reply.admit */
    RSP_MSG_ROLLBACK,   /**< step.step_id, event (forward done, optional) */
    RSP_MSG_PLAN,       /**< step -> reply.plan_step_id, _staged, _digest */
    RSP_MSG_CLEAR_PREPLAN,
    RSP_MSG_COMMIT,              /**< step, event (forward done) */
    RSP_MSG_BUILD_GRAPH_BUFFERS, /**< max_bs, max_seq_len */
    RSP_MSG_STATS,               /**< -> reply.stats (a consistent snapshot) */
    RSP_MSG_BARRIER,             /**< answered once everything posted before it is handled */
    RSP_MSG_LABEL,               /**< label_name -> reply.label (interned) */
    RSP_MSG_HOLDING,             /**< rid, label -> reply.holding */
    RSP_MSG_SHUTDOWN,            /**< owner stops; later posts get RSP_ESHUTDOWN */
    RSP_MSG_RELEASE,             /**< rid, label: give back that one slot (rsp_release) */
    RSP_MSG_STEP, /**< [commit with event, if commit], then admit + plan step -> reply.committed,
                       .admit, .planned, .plan_step_id, _staged, _digest (rsp_step_next) */
    RSP_MSG_CHECKPOINT,       /**< rid, label, key, tier, after_step (rsp_checkpoint_take) */
    RSP_MSG_CHECKPOINT_DROP,  /**< key (rsp_checkpoint_drop) */
    RSP_MSG_CHECKPOINT_PIN,   /**< key, pin (true: pin, false: unpin) (rsp_checkpoint_pin) */
    RSP_MSG_CHECKPOINT_QUERY, /**< key -> reply.checkpoint (rsp_checkpoint_query) */
    RSP_MSG_SWAP_OUT,         /**< rid (rsp_swap_out) */
    RSP_MSG_SWAP_IN,          /**< rid -> reply.admit (pool full: ok false) (rsp_swap_in) */
    RSP_MSG_EXPORT,           /**< key: an rsp_export_open's object (posted by it only) */
    RSP_MSG_EXPORT_CLOSE,     /**< key: an open export (posted by rsp_export_close only) */
    RSP_MSG_IMPORT,           /**< key: an import's begin, commit or abort (rsp_import_*) */
    RSP_MSG_CHECKPOINT_VALUE, /**< key, value (rsp_checkpoint_value) */
    RSP_MSG_DUMP,             /**< sent by rsp_pool_dump only (rsp_post refuses it) */
    RSP_MSG_KIND_COUNT_
} rsp_msg_kind;

/** Rids one INGEST, REMOVE or RESET message may list (rsp_msg.num_rids): beyond it
 * RSP_EINVAL, nothing queued. */
#define RSP_MAX_MSG_RIDS 65536u

/** One request to the owner. Only the fields of its kind are read. */
typedef struct rsp_msg {
    rsp_msg_kind kind;
    rsp_rid rid;
    rsp_label_id label;
    bool free;
    const char *label_name;
    rsp_step step;
    rsp_event event; /**< COMMIT, ROLLBACK; STEP with a commit: the commit's forward_done */
    uint32_t max_bs;
    uint32_t max_seq_len;
    uint64_t seq; /**< ordered pools: 1, 2, 3, ... per pool (see rsp_post); else ignored */
    /** INGEST, REMOVE, RESET: with num_rids > 0 the message names these rids instead
     * of rid (distinct, at most RSP_MAX_MSG_RIDS; copied by rsp_post). One owner
     * turn, one answer, all or nothing: see rsp_ingest_many. */
    const rsp_rid *rids;
    uint32_t num_rids;
    /** STEP: commit this step (the previous one) first, with event as its
     * forward_done; NULL: no commit. Copied by rsp_post, arrays included.
     * See rsp_step_next. */
    const rsp_step *commit;
    /** CHECKPOINT, CHECKPOINT_DROP, _PIN, _QUERY: the checkpoint's key.
     * EXPORT, EXPORT_CLOSE, IMPORT: the library's export or import object
     * (rsp_export_open, rsp_export_close and rsp_import_* fill it; rsp_post
     * refuses any other value). rsp_msg does not grow: an older program's
     * smaller struct would be read past its end. */
    uint64_t key;
    /** CHECKPOINT: the tier to store it in (a valid rsp_tier, else RSP_EINVAL). */
    rsp_tier tier;
    /* One field for two kinds: rsp_msg does not grow (rsp_post copies the
     * caller's struct, and an older program's is the older size). */
    union {
        /** CHECKPOINT: 0 = the slot as the device queue has it now; else a
         * committed step's id: the state that step's forward left. */
        uint64_t after_step;
        /** CHECKPOINT_VALUE: what restoring the checkpoint saves (the
         * caller's unit: tokens, FLOPs). */
        uint64_t value;
    };
    /** CHECKPOINT_PIN: true pins (one more caller pin), false unpins. */
    bool pin;
} rsp_msg;

/** A failure reported to rsp_pool_config.on_error. */
struct rsp_failure {
    rsp_status status;
    rsp_msg_kind kind;   /**< the message that failed */
    uint64_t step_id;    /**< its step (ADMIT, ROLLBACK, PLAN, COMMIT), else 0; STEP: the
                              commit's (msg->commit) when it has one and it was not done,
                              else the new step's (msg->step) */
    bool has_step;       /**< whether kind names a step */
    const char *message; /**< why; valid during the call only */
    /** A checkpoint take declared in step step_id that its commit skipped:
     * the take's key (has_checkpoint_key true); else 0 and false. Appended
     * (a callback reads a prefix: docs/abi.md). */
    uint64_t checkpoint_key;
    bool has_checkpoint_key;
    /** A guard mode finding (kind COMMIT or STEP, status RSP_EDEVICE): the
     * slot and who held it; NULL for every other failure. Valid during the
     * call only. */
    const struct rsp_guard_violation *guard;
};

/** The owner's answer. */
typedef struct rsp_reply {
    rsp_error error; /**< error.status == RSP_OK on success */
    rsp_admit_outcome admit;
    uint64_t plan_step_id;
    bool plan_staged;
    uint64_t plan_digest; /**< PLAN, STEP: the published plan's rsp_plan_digest */
    bool committed;       /**< STEP: msg->commit was committed (it stands whatever followed) */
    bool planned;         /**< STEP: msg->step was admitted and planned (plan_* are set) */
    rsp_label_id label;
    rsp_holding holding;
    rsp_stats_0_1 stats;            /**< STATS: 0.1's fields (every field: rsp_stats_snapshot) */
    rsp_checkpoint_info checkpoint; /**< CHECKPOINT_QUERY */
} rsp_reply;

typedef struct rsp_ticket rsp_ticket;

/**
 * Queue msg for the owner. The message is validated first (invalid: refused
 * with its status and a message naming the field; nothing is queued) and
 * every array it points at is copied, so the caller may reuse them once this
 * returns. Messages posted by one thread are handled in the order posted.
 *
 * ticket: receives a ticket to pass to rsp_wait (or rsp_ticket_forget)
 * exactly once; NULL posts fire-and-forget (the reply is dropped; a failure
 * is counted in rsp_stats.posts_failed and reported to
 * rsp_pool_config.on_error).
 * timeout_ns: how long to wait for inbox credit when full: 0 = return
 * RSP_EFULL at once, UINT64_MAX = wait forever; a finite wait that expires
 * returns RSP_ETIMEDOUT. Nothing is queued in either case.
 *
 * COMMIT, ROLLBACK and STEP with a commit: msg->event (forward_done) is
 * checked here (a kind the pool's device cannot wait on, or a host fence
 * whose tag does not match: RSP_EINVAL, nothing queued). A host fence is referenced before this
 * returns and until the pool's device has run its wait on it, so the caller
 * may destroy its handle at once; the reference is dropped if the post is
 * refused. A CUDA event cannot be referenced: it must stay valid until the
 * message has been handled (its answer, or any later answer of the pool).
 *
 * Any thread, concurrently. Cost: one wait-free enqueue plus a copy of the
 * message's arrays; a futex wake if the owner sleeps. Inside a read section
 * it never waits for credit (timeout_ns is taken as 0: see rsp_read_begin).
 *
 * Ordered posting (rsp_pool_config.ordered). Every rank hands out the same
 * slot ids only when every rank's pool sees the slot-changing messages in
 * one order: use ordered mode, or post them from one thread. In an ordered
 * pool every message except RSP_MSG_STATS, RSP_MSG_HOLDING,
 * RSP_MSG_CHECKPOINT_QUERY, RSP_MSG_BARRIER and RSP_MSG_SHUTDOWN (the
 * exempt kinds) carries msg->seq, numbered 1, 2,
 * 3, ... per pool without gaps (e.g. from one counter shared by the
 * posting threads, the same sequence on every rank); one without (seq 0)
 * is RSP_EINVAL here, nothing queued, and so are the synchronous wrappers
 * of those kinds (rsp_label, rsp_ingest, ...: they carry no seq; post the
 * message). The owner handles numbered messages in number order, whatever
 * thread posted them and whenever they arrived: an early one waits (it keeps
 * its inbox credit, so waiting messages are bounded by inbox_capacity; the
 * message the owner waits for gets in even when the inbox is full). STATS,
 * HOLDING and BARRIER may carry a number too (they then wait their turn
 * like the others; SHUTDOWN's is ignored: it is always the last message);
 * without one they are handled when they arrive: a BARRIER without a
 * number is answered once everything that arrived before it was handled or
 * waits for a missing number. A number already handled, or one that
 * duplicates a waiting message, is answered RSP_EORDER naming it (nothing
 * changed; a waiting duplicate is answered when its number comes up). A
 * missing number that has not arrived within reorder_timeout_ns of the
 * first later one breaks the pool: every waiting message is answered
 * RSP_ETIMEDOUT "waiting for message N", and every later message
 * RSP_EDEVICE naming the missing number (the ranks can no longer agree).
 * Messages still waiting when the pool shuts down are answered
 * RSP_ESHUTDOWN, naming the number they waited for. In an unordered pool
 * seq is ignored. Plans carry a digest to check agreement
 * (rsp_plan_digest).
 *
 * A pool breaks when device work fails after the message had already
 * changed its state (out of host or device memory, or a CUDA error, in the
 * device submit or the plan's allocation; bad input is always refused
 * before anything changes). The pool can then no longer keep its slots and the device in
 * step: that message and every later one are answered RSP_EDEVICE, naming
 * the message whose device work failed, plan waiters get RSP_ESHUTDOWN, and
 * only rsp_pool_destroy (and the lock-free readers) remain useful.
 */
RSP_API rsp_status rsp_post(rsp_pool *pool, const rsp_msg *msg, rsp_ticket **ticket,
                            uint64_t timeout_ns, rsp_error *err);

#define RSP_WAIT_POLL 0u
#define RSP_WAIT_FOREVER UINT64_MAX

/**
 * Wait for a ticket's answer. Returns the status of the operation (also in
 * reply->error) and consumes the ticket; or RSP_EAGAIN (poll) / RSP_ETIMEDOUT
 * (timed) and leaves the ticket valid. reply may be NULL.
 * Called by the thread that holds the ticket; cost: a spin for about as long
 * as this thread's answers usually take (learned; at most 50 us; none while
 * the owner shares this thread's CPU or such spins keep failing), then a
 * futex wait if needed.
 * Inside a read section only RSP_WAIT_POLL is allowed: any other timeout is
 * RSP_EINVAL and the ticket stays valid (see rsp_read_begin).
 */
RSP_API rsp_status rsp_wait(rsp_ticket *ticket, uint64_t timeout_ns, rsp_reply *reply);

/**
 * Give a ticket up without waiting for its answer (instead of rsp_wait):
 * the ticket is freed at once if answered, else by the owner once it
 * answers, and must not be used again. A failure answered after the forget
 * is counted (rsp_stats.posts_failed) and reported (on_error) like a
 * fire-and-forget one; one answered before it is dropped with the ticket.
 * NULL: a no-op; in a forked child it does nothing. The thread holding the
 * ticket, instead of its rsp_wait. O(1), never blocks.
 */
RSP_API void rsp_ticket_forget(rsp_ticket *ticket);

/*
 * Synchronous wrappers: rsp_post (waiting forever for credit), then rsp_wait
 * forever. They return the operation's status; err receives its message.
 * Any thread, concurrently, but never inside a read section (RSP_EINVAL,
 * nothing posted: see rsp_read_begin). When the owner thread is asleep
 * (and the pool is not ordered, its owner not pinned with owner_cpu, and
 * RSP_INLINE_CALLS was not 0 at creation), the call takes the owner's role
 * and does the owner's work on the calling thread: first what the inbox
 * holds (so this thread's earlier posts come first), then its own message;
 * on_error and on_checkpoint_evict may then run on this thread. Cost: that
 * work, with no hand-off; otherwise the post and a round trip to the owner
 * (a futex wait if the answer is not there within a short spin); plus the
 * owner-side cost named at each. Every one may also fail with
 * RSP_EINVAL/RSP_ENOLABEL (validation, nothing posted), RSP_ESHUTDOWN,
 * RSP_ENOMEM (copying the message) and RSP_EDEVICE (a broken pool).
 */

/** Intern a label name (idempotent: an existing name gets its id) -> *out.
 * RSP_EINVAL: empty or longer than RSP_NAME_MAX - 1; RSP_ECAPACITY: past
 * RSP_MAX_LABELS. Owner: O(labels). */
RSP_API rsp_status rsp_label(rsp_pool *pool, const char *name, rsp_label_id *out, rsp_error *err);
/** Make sure request rid exists (idempotent: an existing rid and its holdings
 * are left as they are). Owner: O(1) expected (a hash). */
RSP_API rsp_status rsp_ingest(rsp_pool *pool, rsp_rid rid, rsp_error *err);
/** reset(rid, free = true), then forget rid (docs/semantics.md 3). A slot an
 * in-flight step addresses is zeroed and freed when that step ends. Unknown
 * rid: RSP_OK, nothing happens. Owner: O(holdings). */
RSP_API rsp_status rsp_remove(rsp_pool *pool, rsp_rid rid, rsp_error *err);
/** Give back rid's slot of label (a finished beam, a rejected draft branch)
 * and keep the request and its other labels: the slot is zeroed and pushed
 * on the free stack like any release, after the end of every in-flight step
 * that pins it (its rows address it, or its forks write into it). Unknown
 * rid, or no slot under label: RSP_OK, nothing happens. RSP_ENOLABEL: label
 * not interned, nothing posted. Owner: O(holdings). */
RSP_API rsp_status rsp_release(rsp_pool *pool, rsp_rid rid, rsp_label_id label, rsp_error *err);
/** Zero every slot rid holds: free = false keeps the holdings (has_state
 * false), free = true returns the slots to the free stack. While a planned,
 * uncommitted step's forward may write a slot, its zero waits for that
 * forward; a step planned after the reset keeps its write. Unknown rid:
 * RSP_OK, nothing happens. Owner: O(holdings). */
RSP_API rsp_status rsp_reset(rsp_pool *pool, rsp_rid rid, bool free, rsp_error *err);
/** Reserve the slots of a step (docs/semantics.md 4.1; per-rid forks:
 * docs/semantics.md 8.2). A full pool is RSP_OK with out->ok false (nothing
 * changed; out says who found no slot and how many are short). Errors:
 * RSP_EDUPROW, RSP_EINVAL (e.g. one rid's rows in two fork groups), RSP_EORDER
 * (id went back, or is the id of a committed step; a rolled-back id may be
 * retried; or a row names a holding whose bytes an in-flight step's post-forks
 * replace at its commit: commit that step first, docs/semantics.md 9.1),
 * RSP_ECAPACITY (too many steps in flight). A request may be in several
 * in-flight steps: a plan's has_state counts the writes of steps admitted
 * before it and still in flight (docs/semantics.md 9.1). Owner:
 * O(rows + rids * forks). */
RSP_API rsp_status rsp_step_admit(rsp_pool *pool, const rsp_step *step, rsp_admit_outcome *out,
                                  rsp_error *err);
/** Undo an admitted step (slots it reserved are freed and zeroed once
 * forward_done completes; its stage is dropped). Unknown or finished step:
 * RSP_OK, nothing happens. forward_done may be NULL when no forward ran;
 * one the device could never wait for is RSP_EINVAL, nothing changed.
 * Newest first: while a step admitted later and still in flight names a
 * slot this step writes or allocates, RSP_EORDER naming that step, nothing
 * changed. Owner: O(rows + pinned slots). */
RSP_API rsp_status rsp_step_rollback(rsp_pool *pool, uint64_t step_id,
                                     const rsp_event *forward_done, rsp_error *err);
/** Plan an admitted step: publish its live plan (pre-forks queued first), or
 * with step->preplan its staged plan. RSP_EORDER (not admitted / already
 * planned; or its forks would read or write a slot of another planned,
 * uncommitted step, or its rows address a slot that step's post-forks touch:
 * commit that step first; nothing changed), RSP_ESTAGED (a stage exists),
 * RSP_ECAPACITY (a leased buffer too small or held by another in-flight step). Owner: O(rows +
 * labels + forks), plus the copy of the addressing into the plan. */
RSP_API rsp_status rsp_step_plan(rsp_pool *pool, const rsp_step *step, rsp_error *err);
/** Drop the staged plan, if any (RSP_OK either way): the message
 * RSP_MSG_CLEAR_PREPLAN. Owner: O(labels). */
RSP_API rsp_status rsp_step_unstage(rsp_pool *pool, rsp_error *err);
/** 0.1's name of rsp_step_unstage. */
RSP_API rsp_status rsp_clear_preplan(rsp_pool *pool, rsp_error *err)
    RSP_DEPRECATED("rsp_step_unstage");
/** Finish a planned step (a capture: an admitted one): post-forks and the
 * zeroing of slots released during it are queued behind forward_done, the
 * event recorded after the step's forward. A step whose rows wrote (a row
 * with span > 0 that is not padding; not a capture) must name one: NULL or
 * an empty event there is RSP_EINVAL (nothing queued); rsp_event_complete()
 * says the forward has already finished. NULL is accepted when no row
 * wrote. RSP_EORDER: not in flight or not planned; a forward_done the
 * device could never wait for: RSP_EINVAL, nothing changed. The
 * declaration must be the admitted one (rows, spans, forks, checkpoint
 * takes, restores; skip_post_forks is the commit's choice): otherwise
 * RSP_EINVAL naming the first difference, nothing changed. The step's plan
 * leaves rsp_plan_of_step with the commit. The pool's device waits for forward_done
 * (so does rsp_pool_destroy): it must be signalled eventually.
 * Owner: O(rows + pinned slots + rids * forks). */
RSP_API rsp_status rsp_step_commit(rsp_pool *pool, const rsp_step *step,
                                   const rsp_event *forward_done, rsp_error *err);
/** What rsp_step_next did (the fields of RSP_MSG_STEP's reply). */
typedef struct rsp_step_outcome {
    bool committed;          /**< prev was committed: it stands, whatever followed */
    rsp_admit_outcome admit; /**< step's admit; ok false: the pool is full, nothing planned */
    bool planned;            /**< step was admitted and planned: the plan_* fields are set */
    uint64_t plan_step_id;
    bool plan_staged;     /**< step->preplan: the plan was staged, not published live */
    uint64_t plan_digest; /**< rsp_plan_digest of the published plan */
} rsp_step_outcome;
/**
 * One round trip a step: commit prev (the previous step's declaration as
 * given to its admit; NULL: no commit) with prev_done as its forward_done,
 * then admit step, then plan it, in one owner turn with no other message
 * between (RSP_MSG_STEP; docs/semantics.md 4.7). What
 * rsp_step_commit + rsp_step_admit + rsp_step_plan do, at one round trip
 * instead of three. In order:
 *  - the commit, with rsp_step_commit's errors: it fails -> that error,
 *    naming prev's step id, and nothing else is done (out->committed false);
 *  - the admit: step must be new, not in flight (RSP_EORDER otherwise);
 *    rsp_step_admit's errors; a full pool is RSP_OK with out->admit.ok
 *    false and nothing planned. Either way the commit stands;
 *  - the plan: refused (rsp_step_plan's errors, e.g. RSP_ESTAGED,
 *    RSP_ECAPACITY, RSP_EORDER) -> the admit is rolled back (step is not in
 *    flight and its fresh slots are back on the free stack in their order,
 *    as rsp_step_rollback leaves them; rids the admit ingested stay), the
 *    error names the plan, and the commit stands.
 * RSP_OK with out->planned: step's plan is published (staged with
 * step->preplan): rsp_plan_wait_step(step->step_id) returns and
 * rsp_plan_of_step finds it. Refused before anything is posted (RSP_EINVAL,
 * RSP_ENOLABEL): either declaration invalid, prev_done an event the
 * pool's device cannot wait on, or missing while prev's rows wrote (use
 * rsp_event_complete()), step->step_id not above prev->step_id. out may be
 * NULL; on an error it still says what was done. Pipelined use: post
 * RSP_MSG_STEP yourself, fire-and-forget (failures go to on_error) or
 * keeping the ticket to wait for later, and read the plan with
 * rsp_plan_wait_step / rsp_plan_of_step: the fast path for a caller with
 * other work to overlap. Any thread, never inside a read section (as
 * every wrapper); an ordered pool needs the message posted with its seq.
 * Cost: one round trip, or none when it runs in the sleeping owner's role
 * (the synchronous wrappers above); owner: rsp_step_commit's +
 * rsp_step_admit's + rsp_step_plan's.
 */
RSP_API rsp_status rsp_step_next(rsp_pool *pool, const rsp_step *step, const rsp_step *prev,
                                 const rsp_event *prev_done, rsp_step_outcome *out, rsp_error *err);
/**
 * The vector forms of rsp_ingest, rsp_remove and rsp_reset: each of
 * rids[0 .. n) as the single form would, in list order, in one owner turn
 * with no other message between, and one answer (an engine admits a batch
 * of arrivals a step). All or nothing: the list is checked as a whole
 * first, and a rid listed twice (RSP_EINVAL naming the rid and both
 * indices) or too little memory for all of them (RSP_ENOMEM) refuses the
 * whole message with nothing changed. A rid an in-flight step names is
 * handled as by the single form (the zeroing and freeing of a slot that
 * step addresses wait for its end). n == 0: RSP_OK, nothing posted;
 * n > RSP_MAX_MSG_RIDS or rids NULL: RSP_EINVAL, nothing posted. To post
 * one yourself: RSP_MSG_INGEST / _REMOVE / _RESET with msg.rids and
 * msg.num_rids. Any thread, never inside a read section. Cost: one round
 * trip and a copy of the list; owner: O(n + the holdings of the listed
 * rids).
 */
RSP_API rsp_status rsp_ingest_many(rsp_pool *pool, const rsp_rid *rids, uint32_t n, rsp_error *err);
RSP_API rsp_status rsp_remove_many(rsp_pool *pool, const rsp_rid *rids, uint32_t n, rsp_error *err);
RSP_API rsp_status rsp_reset_many(rsp_pool *pool, const rsp_rid *rids, uint32_t n, bool free,
                                  rsp_error *err);
/** Leased addressing buffers created from now on hold at least max_bs
 * rows; existing ones never move. 1 <= max_bs <= max(8192, 2 x max_slots),
 * else RSP_EINVAL naming the bound, nothing changed. Owner: O(1). */
RSP_API rsp_status rsp_build_graph_buffers(rsp_pool *pool, uint32_t max_bs, uint32_t max_seq_len,
                                           rsp_error *err);
/** A consistent snapshot of every counter and gauge -> *out (out NULL:
 * RSP_EINVAL): the message RSP_MSG_STATS, answered by the owner between
 * two messages. Owner: O(1). For a lock-free read use rsp_stats_peek. */
RSP_API rsp_status rsp_stats_snapshot(rsp_pool *pool, rsp_stats *out, rsp_error *err);
/** 0.1's name of rsp_stats_snapshot. */
RSP_API rsp_status rsp_stats_get(rsp_pool *pool, rsp_stats *out, rsp_error *err)
    RSP_DEPRECATED("rsp_stats_snapshot");

/*
 * Checkpoints (docs/checkpoints.md; rules: docs/semantics.md 8.4 to
 * 8.9). Synchronous wrappers of the CHECKPOINT* and SWAP_*
 * messages, with the common rules of the wrappers above (any thread, never
 * inside a read section, RSP_ESHUTDOWN, RSP_ENOMEM, RSP_EDEVICE). On a
 * failure nothing changed. The key set they change is what
 * rsp_checkpoint_lookup finds (published before the answer).
 */

/**
 * Take a checkpoint of rid's slot of label under key, in tier: a copy of
 * the slot queued on the pool's device stream after every copy and forward
 * wait queued before it. after_step 0: the slot as the device queue has it
 * now; a committed step's id: the state that step's forward left (a
 * checkpoint of a step in flight is declared in the step,
 * rsp_step.checkpoints). A key that exists is replaced when it is not
 * pinned (counted as a drop). A full tier evicts its least recently used
 * unpinned checkpoint (demoted to the host tier with checkpoint_demote),
 * reported to on_checkpoint_evict and counted.
 * Errors: RSP_EINVAL (tier not a tier, or a tier of size 0); RSP_ENOLABEL;
 * RSP_ENOREQ (rid holds no slot of label); RSP_EORDER (after_step in
 * flight or not yet admitted, or the slot pinned by a planned step: the
 * message names the step); RSP_EPINNED (key exists and is pinned);
 * RSP_ECAPACITY (the tier holds only pinned checkpoints).
 * Owner: O(1) + the evictions; device: one slot copy (two with a demotion).
 */
RSP_API rsp_status rsp_checkpoint_take(rsp_pool *pool, uint64_t key, rsp_rid rid,
                                       rsp_label_id label, rsp_tier tier, uint64_t after_step,
                                       rsp_error *err);
/** Drop the checkpoint under key and free its slot (counted as a drop, not
 * reported as an eviction). RSP_ENOKEY (no such key), RSP_EPINNED (pinned by
 * a step in flight or the caller). Owner: O(1). */
RSP_API rsp_status rsp_checkpoint_drop(rsp_pool *pool, uint64_t key, rsp_error *err);
/** Pin key: a pinned checkpoint is never evicted, replaced or dropped. Pins
 * count (pin twice, unpin twice) and mark it used (LRU). RSP_ENOKEY.
 * Owner: O(1). */
RSP_API rsp_status rsp_checkpoint_pin(rsp_pool *pool, uint64_t key, rsp_error *err);
/** Undo one rsp_checkpoint_pin. RSP_ENOKEY; RSP_EINVAL when the caller has
 * no pin on key (nothing changed). Owner: O(1). */
RSP_API rsp_status rsp_checkpoint_unpin(rsp_pool *pool, uint64_t key, rsp_error *err);
/** What is stored under key -> *out (tier, slot, bytes, pins, user pins,
 * last use; out NULL: RSP_EINVAL, nothing posted). RSP_ENOKEY.
 * Owner: O(1). */
RSP_API rsp_status rsp_checkpoint_query(rsp_pool *pool, uint64_t key, rsp_checkpoint_info *out,
                                        rsp_error *err);
/**
 * Swap request rid out: every label's state is copied to host-tier slots
 * and its request slots are released (zeroed and freed as any release). It
 * stays a request: rsp_swap_in brings it back; rsp_remove or
 * rsp_reset(free = true / false) drops the saved state; a step row naming
 * it is RSP_EORDER until then. A request that holds no slot (ingested, not
 * yet admitted, or every label released) is swapped out too: it takes no
 * host slot and no copy, its step rows are RSP_EORDER until rsp_swap_in,
 * which gives it back nothing (out->ok true), so that an engine's swap out
 * and swap in of a preempted request are the same two calls whatever it
 * holds. Errors, each with nothing changed: RSP_ECAPACITY on a pool
 * without a host tier (max_host_checkpoints 0), for every rid, a request
 * without holdings included (the message says so); RSP_ENOREQ (unknown
 * rid); RSP_EORDER (already swapped out, or a slot pinned by a step in
 * flight: the message names it); RSP_ECAPACITY (the host tier cannot hold
 * its labels even after evicting every unpinned checkpoint; nothing
 * evicted). Owner: O(holdings) + evictions; device: a copy a label.
 */
RSP_API rsp_status rsp_swap_out(rsp_pool *pool, rsp_rid rid, rsp_error *err);
/**
 * Bring a swapped-out rid back into fresh request slots, all labels or
 * none: a pool without enough free slots is RSP_OK with out->ok false and
 * out naming the label and how many slots are short (as admit; nothing
 * changed; out NULL: RSP_EINVAL, nothing posted). The slots get has_state
 * as they had it and new generations; the host-tier slots are freed.
 * Errors: RSP_ENOREQ; RSP_EORDER (not swapped out). Owner: O(holdings);
 * device: a copy a label.
 */
RSP_API rsp_status rsp_swap_in(rsp_pool *pool, rsp_rid rid, rsp_admit_outcome *out, rsp_error *err);
/** Answered once every message posted before it (by any thread whose post
 * returned) has been handled; device work they queued may still run.
 * Owner: O(1). */
RSP_API rsp_status rsp_barrier(rsp_pool *pool, rsp_error *err);
/** rid's holding of label -> *out (out NULL: RSP_EINVAL). RSP_ENOREQ: unknown
 * rid, or it holds nothing under label. Owner: O(1). */
RSP_API rsp_status rsp_holding_get(rsp_pool *pool, rsp_rid rid, rsp_label_id label,
                                   rsp_holding *out, rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Reading plans (partition threads)                                         */
/* ------------------------------------------------------------------------ */

/**
 * Register / unregister the calling thread as a plan reader (RCU). Once per
 * thread, before its first rsp_read_begin; unregister before the thread
 * exits. Cost: a mutex inside liburcu, not for hot paths.
 */
RSP_API rsp_status rsp_reader_register(rsp_error *err);
RSP_API void rsp_reader_unregister(void);

/**
 * Register the calling thread as a QSBR reader (liburcu's quiescent-state
 * flavour), for a thread with a natural loop (a partition thread, once per
 * step). Its read sections (rsp_read_begin/end) cost a thread-local
 * increment and decrement; in exchange a plan it read stays valid (its host
 * vectors readable) until the thread announces a quiescent state
 * (rsp_reader_quiescent), goes offline (rsp_reader_offline) or unregisters,
 * not merely until rsp_read_end. Rules:
 *
 * - Call rsp_reader_quiescent once per loop, outside any read section. A
 *   QSBR reader that never announces quiescence (and is not offline) holds
 *   back every grace period: the owner's retired plans pile up to the
 *   retired cap (256 a pool), then the owner itself waits for that thread's
 *   quiescent state and handles no message until it comes.
 * - Around anything that blocks (a wait, a sleep, I/O), go offline
 *   (rsp_reader_offline) and online again after (rsp_reader_online). An
 *   online QSBR reader counts as inside a read section for the waits on the
 *   owner (see rsp_read_begin): they return RSP_EINVAL there, nothing posted;
 *   rsp_pool_close returns RSP_EINVAL and rsp_pool_destroy does nothing, as
 *   inside a section. An offline reader may not read: rsp_read_begin
 *   returns RSP_EINVAL.
 * - Unregister (rsp_reader_unregister) before the thread exits (a thread
 *   that exits registered is unregistered by a key destructor).
 *
 * A thread is a default or a QSBR reader, not both: RSP_EINVAL (nothing
 * changed) when the thread is registered as the other kind; RSP_OK when it
 * is already a QSBR reader. Registration leaves the thread online. Cost: a
 * mutex inside liburcu, not for hot paths. Plans read by default and QSBR
 * readers alike are reclaimed only after both kinds' grace periods.
 */
RSP_API rsp_status rsp_reader_register_qsbr(rsp_error *err);
/**
 * QSBR readers: announce a quiescent state (every plan this thread read
 * before may now be reclaimed), go offline (a lasting quiescent state:
 * grace periods do not wait for the thread; it may not read until
 * online), come back online. RSP_OK; RSP_ENOTREG when the thread is not a
 * registered reader; RSP_EINVAL inside a read section (nothing changed: the
 * section's plans would lose their protection); RSP_EFORKED. On a default
 * reader, and quiescent/offline on an offline reader, online on an online
 * one: RSP_OK, nothing done (code that calls them works under either
 * flavour). Calling thread. Cost: quiescent a few ns (liburcu-qsbr's
 * quiescent state: a load, a store, a fence); offline/online about the same.
 */
RSP_API rsp_status rsp_reader_quiescent(void);
RSP_API rsp_status rsp_reader_offline(void);
RSP_API rsp_status rsp_reader_online(void);

/**
 * An RCU read-side section. Plans obtained inside it stay valid until the
 * matching rsp_read_end (a QSBR reader's: until its next quiescent state,
 * see rsp_reader_register_qsbr). Nestable (up to 2^24 - 1 deep, then
 * RSP_EINVAL). Registered threads only
 * (otherwise RSP_ENOTREG; an offline QSBR reader: RSP_EINVAL). Cost: a few
 * ns (liburcu-memb's read lock for the outermost section of a default
 * reader; a thread-local increment for a QSBR reader).
 *
 * A section does not block the owner while it is short, but the owner caps
 * the plans it has retired (docs/ordering.md): past the cap it waits for a
 * grace period, i.e. for every open section to end. So a thread inside a
 * section (of any pool) must not wait for an owner: the synchronous
 * wrappers, rsp_wait with a timeout other than RSP_WAIT_POLL and
 * rsp_plan_wait with a non-zero timeout return RSP_EINVAL there ("called
 * inside a read section: end it (or take rsp_plan_ref) first"), nothing
 * posted; rsp_post does not wait for credit there (RSP_EFULL when the inbox
 * is full); rsp_pool_close answers RSP_EINVAL (rsp_pool_destroy does
 * nothing). Keep sections short; hold a reference (rsp_plan_ref), not a
 * section, across a wait.
 */
RSP_API rsp_status rsp_read_begin(void);
/** The words for a status rsp_read_begin just returned on this thread:
 * RSP_ENOTREG ("the calling thread is not registered: call
 * rsp_reader_register first"), RSP_EINVAL (the thread is an offline QSBR
 * reader, or its sections are nested 2^24 - 1 deep, the message saying
 * which), RSP_EFORKED. Returns status; err (may be NULL) gets the message,
 * and RSP_OK leaves it alone. Call it before the thread's next read-side
 * call (it reads the thread's reader state). The calling thread; a refusal
 * formats the message, RSP_OK costs nothing. */
RSP_API rsp_status rsp_read_explain(rsp_status status, rsp_error *err);
/** 0.1's form: rsp_read_begin, then rsp_read_explain of its status. */
RSP_API rsp_status rsp_read_begin_err(rsp_error *err)
    RSP_DEPRECATED("rsp_read_begin and rsp_read_explain");
/**
 * End the innermost read section of the calling thread: RSP_OK. Without an
 * open section (an unbalanced end) nothing changes and it returns
 * RSP_EINVAL; debug (NDEBUG undefined) and sanitizer builds of the library
 * also print a line on stderr, since callers often drop this status. The
 * nesting count is never corrupted. RSP_EFORKED in a forked child. Cost: a
 * few ns.
 */
RSP_API rsp_status rsp_read_end(void);

/** An immutable published plan. */
typedef struct rsp_plan rsp_plan;

/** The live / staged plan, or NULL if none. Inside a read section only. O(1). */
RSP_API const rsp_plan *rsp_plan_live(const rsp_pool *pool);
RSP_API const rsp_plan *rsp_plan_staged(const rsp_pool *pool);

/** Step id of a plan; whether it is a staged plan. O(1). */
RSP_API uint64_t rsp_plan_step_id(const rsp_plan *plan);
RSP_API bool rsp_plan_is_staged(const rsp_plan *plan);

/**
 * A 64-bit digest of the plan, for ranks to compare (e.g. an all-gather per
 * step): a hash of the step id, whether it is staged, each planned label's
 * id and row count and every row's slot index and has_state in row order,
 * the free stack after the plan (its order included), and the pool-wide
 * generation. Two pools that handled the same messages in the same order
 * give equal digests; different digests mean the ranks' slot assignment or
 * free stack differ from this step on. Not covered: the slots' contents,
 * leased buffer ids, the padding past num_rows, labels' names, requests
 * holding slots that this plan does not address (they show only through
 * the free stack and the generation). A hash: equal digests of different
 * plans are possible (about 2^-64 per pair). 0 for NULL. Any holder, O(1).
 */
RSP_API uint64_t rsp_plan_digest(const rsp_plan *plan);

/** Where one label's rows live this step (docs/semantics.md 4.4). */
typedef struct rsp_addressing {
    rsp_label_id label;
    uint64_t step_id;
    bool staged;
    uint32_t num_rows;           /**< rows of this label in the step */
    uint32_t length;             /**< vector length (>= num_rows; graph bucket) */
    const int32_t *slot_indices; /**< host copy, [length]; lives as long as the plan */
    const bool *has_state;       /**< host copy, [length]; as long as the plan */
    const uint64_t *generations; /**< host, [num_rows]; as long as the plan */
    void *device_slot_indices;   /**< device int32 [length]; host memory on the host device.
                                      Valid only while the step is in flight (see below) */
    void *device_has_state;      /**< device bool [length]; same lifetime */
    rsp_event ready;             /**< wait for it before reading the device vectors */
} rsp_addressing;

/**
 * The addressing of `label` in `plan`. A label the step did not plan:
 * RSP_ENOPLAN with a message naming the planned labels; a label that was not
 * interned when the plan was built: RSP_ENOLABEL. Any reader,
 * O(1) (a per-label index in the plan).
 *
 * Lifetimes differ. The host copies (slot_indices, has_state, generations)
 * live as long as the plan (the read section, or a reference). The device
 * vectors are the pool's addressing buffers, reused by later steps (and, for
 * a buffer that grows, freed): they hold this plan's rows only while its
 * step is in flight, i.e. until its commit or rollback is posted; a
 * referenced plan keeps its host copies, not its device vectors.
 */
RSP_API rsp_status rsp_plan_addressing(const rsp_plan *plan, rsp_label_id label,
                                       rsp_addressing *out, rsp_error *err);

/**
 * The live plan's addressing of `label` in one call: rsp_plan_addressing of
 * rsp_plan_live, for the partition thread's hot loop. RSP_OK; RSP_ENOPLAN
 * when there is no live plan yet or the live plan does not address the
 * label (the message says which); RSP_ENOLABEL, as rsp_plan_addressing;
 * RSP_ENOTREG (thread not registered); RSP_EINVAL (pool or out NULL, or
 * called outside a read section); RSP_EFORKED. *out is written only on
 * RSP_OK, with the lifetimes of rsp_plan_addressing (the host copies live as
 * long as the read section; take rsp_plan_live and rsp_plan_ref to keep
 * them longer). Registered reader inside a read section. O(1): no scan of
 * the labels, one struct copy.
 */
RSP_API rsp_status rsp_plan_live_addressing(const rsp_pool *pool, rsp_label_id label,
                                            rsp_addressing *out, rsp_error *err);
/** 0.1's name of rsp_plan_live_addressing. */
RSP_API rsp_status rsp_live_addressing(const rsp_pool *pool, rsp_label_id label,
                                       rsp_addressing *out, rsp_error *err)
    RSP_DEPRECATED("rsp_plan_live_addressing");

/** Where a checkpoint is, as a reader sees it (rsp_checkpoint_lookup). */
typedef struct rsp_checkpoint_loc {
    uint64_t key;
    rsp_tier tier;
    int32_t slot; /**< its slot id (request slots first, then the device tier, then host) */
} rsp_checkpoint_loc;

/**
 * Whether a checkpoint is stored under key, without a message: the key
 * index the owner publishes (a lock-free hash table for readers, rsp's own).
 * RSP_OK and *out (out may be NULL: presence only); RSP_ENOKEY: not
 * stored (or not yet: a take is in the index from when the owner queued
 * its copy, before its answer); RSP_EINVAL (pool NULL, or called outside
 * a read section); RSP_ENOTREG (thread not registered); RSP_EFORKED. The
 * answer is as of the lookup: the owner may evict or drop the key right
 * after. The bytes are those the take copied for device work queued on the
 * pool's stream after the lookup, as long as the checkpoint stays; pin it
 * (rsp_checkpoint_pin, or a step restoring it) to keep it. Registered
 * reader (default or QSBR) inside a read section. Cost: O(1), a hash and
 * one bucket's walk (about the cost of one cache miss a node).
 */
RSP_API rsp_status rsp_checkpoint_lookup(const rsp_pool *pool, uint64_t key,
                                         rsp_checkpoint_loc *out, rsp_error *err);

/** Keep a plan alive past the read section (take inside it). Any thread, O(1):
 * two atomic increments (unref: decrements), the plan's count and the
 * pool's count of references held (striped per thread; what
 * rsp_pool_close_timed waits for and names). In a forked child: ref
 * returns NULL, unref does nothing. */
RSP_API const rsp_plan *rsp_plan_ref(const rsp_plan *plan);
RSP_API void rsp_plan_unref(const rsp_plan *plan);

/**
 * Block until the live plan of a step with id >= step_id is published (or the
 * timeout; RSP_ETIMEDOUT; RSP_ESHUTDOWN once the pool shuts down or breaks,
 * or is being destroyed: rsp_pool_close wakes a blocked waiter and waits for
 * it to return before it frees the pool). Does not need a registered thread.
 * Any thread, but inside a read section only with timeout 0 (else
 * RSP_EINVAL: see rsp_read_begin). Cost: two loads when the step is there;
 * otherwise a mutex on entry and exit around a futex wait.
 */
RSP_API rsp_status rsp_plan_wait(rsp_pool *pool, uint64_t step_id, uint64_t timeout_ns,
                                 rsp_error *err);

/**
 * The live plan of step step_id while that step is in flight (its plan
 * published, its commit or rollback not yet handled), else NULL: not
 * planned yet, staged only, finished, or called outside a read section.
 * Several steps' plans are readable at once (max_inflight_steps), so a
 * partition thread running step N's forward reads step N's plan while step
 * N + 1 is already live (rsp_plan_live gives the newest). Registered reader
 * inside a read section; the plan lives as long as the section (or a
 * reference). Cost: O(steps in flight), one dependent load each.
 */
RSP_API const rsp_plan *rsp_plan_of_step(const rsp_pool *pool, uint64_t step_id);
/** 0.1's name of rsp_plan_of_step. */
RSP_API const rsp_plan *rsp_plan_get(const rsp_pool *pool, uint64_t step_id)
    RSP_DEPRECATED("rsp_plan_of_step");

/**
 * Block until step step_id's live plan is published: RSP_OK, after which
 * rsp_plan_of_step(pool, step_id) in a read section finds it while the step is
 * in flight. RSP_ENOPLAN, with a message saying why, when the step ended
 * without a plan to read: rolled back (before or after it was planned),
 * refused by the owner at admit (an error, or admit's ok false), committed
 * without a live plan (a capture), or committed after its plan was
 * published ("committed": a step's plan is readable only while it is in
 * flight, so a waiter that comes after the commit gets RSP_ENOPLAN, not the
 * plan). The pool remembers the last 64 finished steps for this; a step
 * neither in flight nor among them (not admitted yet, or finished long
 * ago) is waited for. A step refused by rsp_post's own validation never
 * reached the owner and is waited for too. RSP_ETIMEDOUT, RSP_ESHUTDOWN and
 * the read-section rule as rsp_plan_wait (timeout 0: poll). Any thread, no
 * registration. Cost: a mutex and O(steps in flight + 64) per check, a
 * futex wait between checks.
 */
RSP_API rsp_status rsp_plan_wait_step(rsp_pool *pool, uint64_t step_id, uint64_t timeout_ns,
                                      rsp_error *err);

/* ------------------------------------------------------------------------ */
/* DLPack exports                                                            */
/* ------------------------------------------------------------------------ */

/* DLPack's managed tensor (dlpack/dlpack.h, DLPack >= 0.6; Debian's
 * libdlpack-dev). rsp.h needs only the name. */
struct DLManagedTensor;

/**
 * Block `name` of `layer` as a DLPack tensor [max_slots, *local shape]
 * (rsp_pool_block's view: same memory, dtype, row-major strides), on
 * kDLCPU for a host-device pool, kDLCUDA (cuda_ordinal) for a CUDA pool.
 * The export holds the pool's storage: it stays valid after
 * rsp_pool_close (which then frees everything else) until the consumer
 * calls its deleter, on any thread; the last deleter frees the storage.
 * A consumer takes it without a copy (torch.utils.dlpack.from_dlpack and
 * its kin). Errors as rsp_pool_block; RSP_ENOMEM; *out is set on RSP_OK
 * only. Any thread while the pool is open. Cost: one small allocation.
 */
RSP_API rsp_status rsp_pool_block_dlpack(rsp_pool *pool, const char *name, uint32_t layer,
                                         struct DLManagedTensor **out, rsp_error *err);

/** Which vector of an rsp_addressing rsp_addressing_dlpack exports. */
typedef enum rsp_dlpack_part {
    RSP_DLPACK_SLOT_INDICES = 0,    /**< host copy: int32 [length], kDLCPU */
    RSP_DLPACK_HAS_STATE,           /**< host copy: uint8 [length] (0/1), kDLCPU */
    RSP_DLPACK_DEVICE_SLOT_INDICES, /**< the device vector: int32 [length] */
    RSP_DLPACK_DEVICE_HAS_STATE,    /**< the device vector: uint8 [length] */
} rsp_dlpack_part;

/**
 * One vector of an addressing (from rsp_plan_addressing or
 * rsp_plan_live_addressing) as a DLPack tensor. has_state is exported as uint8
 * (DLPack 0.6 has no bool; it is C's one-byte bool, so a consumer may view
 * it as bool). Host parts are copied into the export (4 or 1 bytes a
 * row), so the tensor depends on neither the plan nor the pool and is
 * valid until deleted. Device parts share the pool's addressing buffer
 * and hold the pool's storage like a block export: the memory stays
 * allocated until the deleter, but holds this step's rows only while the
 * step is in flight (rsp_addressing). RSP_EINVAL: NULL arguments, an
 * unknown part, a vector the addressing does not have. RSP_ENOMEM. Any
 * thread; the addressing is read during the call only (inside the read
 * section that produced it). Cost: one allocation and, for host parts,
 * the copy.
 */
RSP_API rsp_status rsp_addressing_dlpack(rsp_pool *pool, const rsp_addressing *a,
                                         rsp_dlpack_part part, struct DLManagedTensor **out,
                                         rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Host device timelines                                                     */
/* ------------------------------------------------------------------------ */

/*
 * rsp_host_fence (declared with rsp_event): a backend on the host device
 * creates one, passes rsp_event_host(fence, v) as forward_done, and signals
 * v when its forward has finished writing slots. In a forked child every
 * function below does nothing (RSP_EFORKED where it returns a status, 0 for
 * the value).
 */

/** A new fence at value 0. RSP_EINVAL (out NULL), RSP_ENOMEM, RSP_EFORKED.
 * Any thread, one malloc. */
RSP_API rsp_status rsp_host_fence_create(rsp_host_fence **out, rsp_error *err);
/**
 * Drop the caller's handle. A commit or rollback that names the fence keeps
 * it alive from its rsp_post (which takes a reference before it returns)
 * until the pool's device has run its wait on it (like a CUDA event
 * destroyed while a stream waits on it), so the fence may be destroyed right
 * after the post; threads blocked in rsp_host_fence_wait on it must have
 * returned. Any thread. NULL, or a pointer that is not a live fence (its tag
 * does not match), is a no-op.
 */
RSP_API void rsp_host_fence_destroy(rsp_host_fence *fence);
/** Raise the timeline to value (never lowers it) and wake waiters. Any thread;
 * a futex wake if someone sleeps. NULL or not a live fence: a no-op. */
RSP_API void rsp_host_fence_signal(rsp_host_fence *fence, uint64_t value);
/** Current value (0 for NULL or not a live fence). Any thread, O(1). */
RSP_API uint64_t rsp_host_fence_value(const rsp_host_fence *fence);
/** Wait until the value reaches `value`; RSP_ETIMEDOUT otherwise; RSP_EINVAL
 * for NULL or a pointer that is not a live fence. Any thread; a short spin,
 * then a futex wait. */
RSP_API rsp_status rsp_host_fence_wait(const rsp_host_fence *fence, uint64_t value,
                                       uint64_t timeout_ns);
/** Wait for an event of the pool's device kind: a host fence on the host
 * device, a CUDA event (cudaEventSynchronize / polling) on the CUDA device.
 * A kind the pool's device cannot wait on: RSP_EINVAL. Any thread. */
RSP_API rsp_status rsp_event_wait(const rsp_pool *pool, const rsp_event *event, uint64_t timeout_ns,
                                  rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Metrics: Prometheus text and latency histograms                           */
/* ------------------------------------------------------------------------ */

/**
 * The pool's metrics in the Prometheus text exposition format (0.0.4):
 * every field of rsp_stats_fields (rsp_stats_peek's values: lock-free, not
 * a snapshot) as a counter or gauge, rsp_steps_in_flight, the gauge
 * rsp_holdings{label="<label's name>"} for every label interned (as of
 * the owner's last settle, like the CORE fields), then, while latency
 * histograms are on (rsp_metrics_latency) or once they have counted, the
 * histograms rsp_owner_seconds (the owner's time per message, labelled
 * by kind), rsp_post_to_plan_seconds and rsp_device_lag_seconds
 * (docs/semantics.md 9.7). Each sample carries the labels pool="<name>"
 * (NULL or "": "rsp"; a backslash, quote or newline escaped as the format
 * says) and rank="<rank>".
 *
 * Written like snprintf: at most size bytes into buf, NUL-terminated when
 * size > 0, and *needed (if not NULL) set to the whole text's length
 * without the NUL. buf NULL with size 0 asks the size (RSP_OK). A text
 * that did not fit is RSP_ECAPACITY naming the size it needs, buf holding
 * its cut start; call again with *needed + 1 bytes. Any thread; no
 * message, no allocation; O(metrics + labels + kinds * buckets).
 */
RSP_API rsp_status rsp_metrics_text(rsp_pool *pool, const char *name, char *buf, size_t size,
                                    size_t *needed, rsp_error *err);

/**
 * Turn the latency histograms on or off (off at creation); power-of-two
 * buckets from 1 us to about 1 s. On: the owner reads the monotonic clock
 * before and after each message it handles and counts the time in its
 * kind's histogram (two clock reads, three relaxed stores); rsp_post
 * stamps each PLAN and STEP with the clock, and the owner counts the time
 * from that stamp to the end of the handling that published its plan
 * (rsp_post_to_plan_seconds); a commit or rollback naming a forward_done
 * keeps the clock of its handling's start, and the owner counts the time
 * to when it sees that commit's device work done (rsp_device_lag_seconds:
 * one clock read per look that finds some done). Off: no clock is read;
 * each message costs a few relaxed loads and branches. What was counted
 * stays across off and on. Any thread, O(1).
 */
RSP_API rsp_status rsp_metrics_latency(rsp_pool *pool, bool on, rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Per-token states (speculative decoding, docs/semantics.md 9.3)            */
/* ------------------------------------------------------------------------ */

/** The largest span of a row with per_token_states (output slots a row asks for). */
#define RSP_SPEC_MAX_TOKENS 64

/**
 * One label's per-token state indices in a plan: what a kernel written for
 * vLLM's speculative state indices reads. `indices` is [length][width]
 * int32, row-major, the rows in the order of rsp_addressing's vectors: for
 * entry i, indices[i * width] is the initial state's slot (slot_indices[i],
 * read with has_state[i]) and indices[i * width + t], t = 1 .. span, the
 * output slot for the state after token t of a per_token_states row. Every
 * other entry (a plain row's tail, a short row's tail, pad rows) is the
 * pad index (the sink). width = 1 + the largest per-token span among the
 * label's rows (1 when it has none); under a lease, once the key (bucket_id,
 * lease_slot, label) has an index tensor, its fixed width (below).
 *
 * Under a lease the device copy is a CUDA-graph-stable buffer: created by
 * the key's first plan whose rows of the label ask for per-token states
 * (a capture's dummy rows included), length rows of width 1 + the largest
 * span asked then, never moved or resized, and rewritten by every later
 * plan of the key (uploaded on the pool's stream right after the key's
 * slot_indices, the tail rows pads); a per-token row wider than it is
 * RSP_ECAPACITY. Without a lease there is no buffer: device_indices is the
 * host copy on the host device and NULL on a CUDA device.
 */
typedef struct rsp_spec_indices {
    rsp_label_id label;
    uint64_t step_id;
    uint32_t num_rows;      /**< as rsp_addressing */
    uint32_t length;        /**< as rsp_addressing */
    uint32_t width;         /**< 1 + K */
    const int32_t *indices; /**< host copy, [length * width]; lives as long as the plan */
    void *device_indices;   /**< device int32 [length * width]: under a lease the key's
                                 tensor buffer, valid while the step is in flight (as
                                 device_slot_indices); else the host copy on the host
                                 device and NULL on a CUDA device */
    rsp_event ready;        /**< the plan's ready event */
} rsp_spec_indices;

/**
 * The per-token state indices of `label` in `plan` (a live, staged or
 * referenced plan). Errors as rsp_plan_addressing (RSP_ENOPLAN, RSP_ENOLABEL,
 * RSP_EINVAL for NULL arguments). Any reader holding the plan (a read
 * section or a reference), O(1): one struct fill.
 */
RSP_API rsp_status rsp_plan_spec_indices(const rsp_plan *plan, rsp_label_id label,
                                         rsp_spec_indices *out, rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Export and import: moving state between pools (docs/semantics.md 9.4,    */
/* docs/transfer.md)                                                         */
/* ------------------------------------------------------------------------ */

/** The header's format version (rsp_xfer_header.format). */
#define RSP_XFER_FORMAT 1u

/** Which storage a region is: request slots or a checkpoint tier. */
typedef enum rsp_region_space {
    RSP_REGION_SLOTS = 0,
    RSP_REGION_DEVICE_TIER,
    RSP_REGION_HOST_TIER,
} rsp_region_space;

/** One allocation of the pool's storage: [num_layers, count, *local shape]
 * of one block. A transport registers each once per pool. */
typedef struct rsp_region {
    void *base;             /**< host or device address (memory) */
    uint64_t length;        /**< bytes */
    rsp_device_kind memory; /**< RSP_DEVICE_HOST or RSP_DEVICE_CUDA memory */
    uint32_t block;         /**< the block's index in the config */
    rsp_region_space space;
} rsp_region;

/** Bytes inside a region: what a transport reads or writes. */
typedef struct rsp_extent {
    uint32_t region; /**< index into rsp_pool_regions' list */
    uint32_t reserved;
    uint64_t offset;
    uint64_t length;
} rsp_extent;

/** One block of the layout as an export describes it (unsharded). */
typedef struct rsp_xfer_block {
    char name[RSP_NAME_MAX];
    uint32_t dtype; /**< rsp_dtype */
    uint32_t ndim;
    int64_t shape[RSP_MAX_DIMS]; /**< unsharded */
    uint32_t shard_mask;         /**< bit d: axis d is split across ranks */
    uint32_t reserved;
} rsp_xfer_block;

/** One exported holding. */
typedef struct rsp_xfer_holding {
    char label[RSP_NAME_MAX]; /**< the label's name (ids are per pool) */
    uint64_t generation;      /**< the exporter's */
    bool has_state;
} rsp_xfer_holding;

/** What an export carries: a request's holdings or a checkpoint. */
typedef enum rsp_xfer_what { RSP_XFER_REQUEST = 0, RSP_XFER_CHECKPOINT = 1 } rsp_xfer_what;

/**
 * An export's header: plain data, sent between processes as its bytes
 * (both ends little-endian with this header's ABI). The importer checks
 * format and layout against its pool (rsp_import_begin).
 */
typedef struct rsp_xfer_header {
    uint32_t format;           /**< RSP_XFER_FORMAT */
    uint32_t what;             /**< rsp_xfer_what */
    uint64_t fingerprint;      /**< hash of num_layers and blocks[] (rsp_xfer_header_fingerprint) */
    uint32_t world_size, rank; /**< the exporter's */
    uint32_t target_world_size, target_rank; /**< the rank whose share the extents hold */
    rsp_rid rid;                             /**< RSP_XFER_REQUEST */
    uint64_t key;                            /**< RSP_XFER_CHECKPOINT */
    uint64_t tag;                            /**< the caller's (e.g. the token position) */
    uint32_t num_layers, num_blocks;
    rsp_xfer_block blocks[RSP_MAX_BLOCKS];
    uint32_t num_holdings; /**< a checkpoint: 1 (label "" ) */
    rsp_xfer_holding holdings[RSP_MAX_LABELS];
} rsp_xfer_header;

/** What to export. Fill with rsp_export_spec_init (it stamps struct_size). */
typedef struct rsp_export_spec {
    uint32_t struct_size;
    rsp_xfer_what what;
    rsp_rid rid;                /**< RSP_XFER_REQUEST */
    uint64_t labels;            /**< bit l: label id l; 0: every holding the rid has */
    uint64_t key;               /**< RSP_XFER_CHECKPOINT */
    uint64_t tag;               /**< copied into the header */
    uint32_t target_world_size; /**< 0: the pool's world_size */
    uint32_t target_rank;       /**< < target_world_size */
    uint64_t timeout_ns;        /**< how long to wait for steps in flight (RSP_ETIMEDOUT) */
} rsp_export_spec;

/** Defaults: a request, every holding, the pool's own sharding, wait
 * forever; struct_size stamped with the caller's sizeof. */
static inline void rsp_export_spec_init(rsp_export_spec *s)
{
    rsp_export_spec zero;
    memset(&zero, 0, sizeof zero);
    *s = zero;
    s->struct_size = (uint32_t)sizeof *s;
    s->timeout_ns = UINT64_MAX;
}

typedef struct rsp_export rsp_export;
typedef struct rsp_import rsp_import;

/**
 * The pool's storage as regions, in a fixed order (per space: request
 * slots, device tier, host tier; per block in config order; a tier of no
 * slots has none): at most 3 x num_blocks. *count gets how many there are;
 * up to cap are written. Any thread (immutable after create), O(regions).
 */
RSP_API rsp_status rsp_pool_regions(const rsp_pool *pool, rsp_region *out, uint32_t cap,
                                    uint32_t *count, rsp_error *err);

/** The fingerprint of a header's layout part (num_layers, num_blocks,
 * blocks[]): FNV-1a over their bytes. Any thread, O(blocks). */
RSP_API uint64_t rsp_xfer_header_fingerprint(const rsp_xfer_header *h);

/**
 * Open an export: pins what it names (no step may write it; release,
 * reset, remove and swap-out of it are RSP_EPINNED; a checkpoint gets one
 * caller pin) until rsp_export_close. A request addressed by a step in
 * flight is waited for (its commit, then its forward) up to
 * spec->timeout_ns: RSP_ETIMEDOUT naming the step, nothing pinned. Returns
 * once the bytes are final. RSP_ENOREQ (no such rid, or it lacks a label
 * asked for), RSP_ENOKEY, RSP_EORDER (swapped out), RSP_EPINNED (being
 * imported), RSP_EINVAL (spec). A synchronous call (not in a read
 * section); O(holdings x blocks x layers).
 */
RSP_API rsp_status rsp_export_open(rsp_pool *pool, const rsp_export_spec *spec, rsp_export **out,
                                   rsp_error *err);
/** The export's header (valid until close). Any thread, O(1). */
RSP_API const rsp_xfer_header *rsp_export_header(const rsp_export *exp);
/** The export's extents in this pool's regions, in the order of
 * docs/design.md "Export and import" (valid until close). Any thread, O(1). */
RSP_API const rsp_extent *rsp_export_extents(const rsp_export *exp, uint32_t *count);
/** Unpin and free. NULL: a no-op. Close every export, and commit or abort
 * every import, before rsp_pool_close: they name the pool. Synchronous. */
RSP_API rsp_status rsp_export_close(rsp_export *exp, rsp_error *err);

/**
 * Begin an import of h (any source rank's header) as request rid (or
 * checkpoint key h->key): checks the format and the layout (RSP_EINVAL
 * naming the first difference), that every label is interned here
 * (RSP_ENOLABEL), that rid holds none of them and is not swapped
 * (RSP_EINVAL, RSP_EORDER), then gives rid a zeroed slot per holding,
 * which nothing may address until the commit (RSP_EPINNED). Pool full:
 * RSP_ECAPACITY, nothing changed. A checkpoint (rid unused) gets one
 * zeroed slot of the device tier (the host tier when the device tier has
 * none; a full tier evicts as a take does), under no key until the
 * commit: RSP_EINVAL (no checkpoint slots), RSP_EPINNED (h->key stored
 * and pinned), RSP_ECAPACITY (every checkpoint of the tier pinned). seq:
 * the message's number in an ordered pool, else 0. Synchronous: returns
 * once the device has run all work queued before (a freed slot's zeroing
 * may wait behind a forward still running), so the transport may write
 * at once. Any thread but the owner's; a round trip to the owner plus
 * that wait.
 */
RSP_API rsp_status rsp_import_begin(rsp_pool *pool, const rsp_xfer_header *h, rsp_rid rid,
                                    uint64_t seq, rsp_import **out, rsp_error *err);
/**
 * The extents of this pool that receive source rank src_rank's share (a
 * source of src_world_size ranks; its rsp_export_extents for this pool's
 * world size and rank lists the same lengths in the same order). *count
 * gets how many; up to cap are written. Any thread, O(extents).
 */
RSP_API rsp_status rsp_import_extents(const rsp_import *imp, uint32_t src_world_size,
                                      uint32_t src_rank, rsp_extent *out, uint32_t cap,
                                      uint32_t *count, rsp_error *err);
/** Make the import visible (has_state as exported, new generations; a
 * checkpoint: stored under its key, replacing an unpinned one, or
 * RSP_EPINNED) and free imp. seq as in begin. A failure leaves imp open
 * (commit again, or abort it). */
RSP_API rsp_status rsp_import_commit(rsp_import *imp, uint64_t seq, rsp_error *err);
/** Zero and free what begin reserved, and free imp. NULL: a no-op. */
RSP_API rsp_status rsp_import_abort(rsp_import *imp, uint64_t seq, rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Checkpoints ranked by value (docs/checkpoints.md, "Value")               */
/* ------------------------------------------------------------------------ */

/** rsp_pool_config.checkpoint_policy. */
typedef enum rsp_checkpoint_policy {
    RSP_CHECKPOINT_LRU = 0,   /**< evict the least recently used unpinned checkpoint */
    RSP_CHECKPOINT_VALUE = 1, /**< evict the lowest recency + weight x f x value / bytes */
    RSP_CHECKPOINT_POLICY_COUNT_
} rsp_checkpoint_policy;

/**
 * Set what restoring the checkpoint under key saves (the caller's
 * estimate, in a unit of its choice: tokens, FLOPs), the value the
 * RSP_CHECKPOINT_VALUE policy ranks it by. Not a use (its recency stays);
 * a take starts at value 0, so set it right after the take (for a take
 * declared in a step: after the commit, posted fire-and-forget in order
 * behind it). Under RSP_CHECKPOINT_LRU it is stored and ranks nothing.
 * RSP_ENOKEY (no such key). Message RSP_MSG_CHECKPOINT_VALUE; ordered
 * pools: it carries seq (post it). Owner: O(log checkpoints of its tier).
 */
RSP_API rsp_status rsp_checkpoint_value(rsp_pool *pool, uint64_t key, uint64_t value,
                                        rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Guard mode and the state dump (docs/semantics.md 9.6)                     */
/* ------------------------------------------------------------------------ */

/**
 * One slot that a forward wrote without addressing it, found by guard mode
 * (rsp_pool_config.guard) at the commit of step_id and handed to on_error
 * as rsp_failure.guard. The writer is a forward that ran before that
 * commit's check: usually step_id's own, or one in flight beside it.
 */
typedef struct rsp_guard_violation {
    uint32_t slot; /**< the request slot written */
    bool held;     /**< true: a holding's slot that no in-flight step addresses,
                        changed since the previous check; false: a free slot, not zero */
    rsp_rid rid;   /**< held: its holder */
    rsp_label_id label;
    uint64_t step_id; /**< the commit whose check found it */
    uint32_t block;   /**< the first (block, layer) that differs, in block order */
    uint32_t layer;
    uint32_t regions; /**< (block, layer) regions of the slot that differ */
} rsp_guard_violation;

/**
 * The pool's state as JSON, for bug reports and debuggers: labels, slot
 * counts and the generation, requests and their holdings (slot, has_state,
 * generation), the free stack (top first, then the never-used range),
 * pending slots, checkpoints per tier (most recently used first), steps in
 * flight (phase, the slots they pin, fresh allocations, restores pinned)
 * and the stage; the format is in docs/guide.md "Debugging". Consistent:
 * taken in one owner turn (a message, RSP_MSG_DUMP); changes nothing.
 *
 * Size negotiation as snprintf: *needed (may be NULL) receives the bytes
 * the text needs, its NUL included. buf NULL with size 0 asks only the
 * size (RSP_OK). A buffer too small is RSP_ECAPACITY naming both sizes,
 * buf[0] = '\0'; the state may grow between two calls, so ask with room
 * to spare. buf NULL with size > 0: RSP_EINVAL. Any thread but a read
 * section's; waits for the owner. O(requests + holdings + released slots
 * + checkpoints + pins).
 */
RSP_API rsp_status rsp_pool_dump(rsp_pool *pool, char *buf, size_t size, size_t *needed,
                                 rsp_error *err);

/* ------------------------------------------------------------------------ */
/* Struct sizes (docs/abi.md)                                                */
/* ------------------------------------------------------------------------ */

/** Where release 0.1.0's rsp_pool_config (the first) ends, its last field
 * included: the smallest struct_size any caller can have. */
#define RSP_POOL_CONFIG_SIZE_0_1                                                                   \
    (offsetof(rsp_pool_config, on_checkpoint_evict_ctx) + sizeof(void *))

/**
 * rsp_pool_config_init for a struct of `size` bytes, the caller's
 * sizeof(rsp_pool_config): writes the defaults into those bytes only and
 * stamps struct_size = size. A size below RSP_POOL_CONFIG_SIZE_0_1 writes
 * nothing (RSP_EINVAL); one above this library's struct zeroes the bytes
 * the library does not know (a newer header's fields, at their defaults
 * only if zero is their default: the newer header's init says). NULL:
 * RSP_EINVAL. rsp_pool_config_init(cfg) is this call with the caller's
 * sizeof (the macro below). Any thread, O(size), touches nothing else.
 */
RSP_API rsp_status rsp_pool_config_init_size(rsp_pool_config *cfg, size_t size);

/**
 * rsp_stats_peek and rsp_stats_snapshot for a struct of `size` bytes, the
 * caller's sizeof(rsp_stats): the library writes min(size, its own) bytes,
 * so an older caller's smaller struct gets the fields it has. The fields
 * past 0.1's (RSP_STATS_FIELDS_0_1) of a snapshot are read as
 * rsp_stats_peek reads them, right after the owner's answer: each exact,
 * the set after every message handled before the snapshot. size below
 * sizeof(rsp_stats_0_1): RSP_EINVAL. The names without _size are macros
 * over these with the caller's sizeof; the exported functions of those
 * names write 0.1's struct (what a 0.1 or 0.2 program calls).
 */
RSP_API rsp_status rsp_stats_peek_size(const rsp_pool *pool, rsp_stats *out, size_t size,
                                       rsp_error *err);
RSP_API rsp_status rsp_stats_snapshot_size(rsp_pool *pool, rsp_stats *out, size_t size,
                                           rsp_error *err);
#define rsp_stats_peek(pool, out, err) rsp_stats_peek_size((pool), (out), sizeof *(out), (err))
#define rsp_stats_snapshot(pool, out, err)                                                         \
    rsp_stats_snapshot_size((pool), (out), sizeof *(out), (err))

/* A caller's rsp_pool_config_init(cfg) passes its own struct's size, so a
 * newer library never writes past an older caller's struct. (A pointer to
 * the function, `&rsp_pool_config_init`, still names the exported one.) */
#define rsp_pool_config_init(cfg) rsp_pool_config_init_size((cfg), sizeof(rsp_pool_config))

/* ------------------------------------------------------------------------ */
/* Version (the macros are at the top of this header)                        */
/* ------------------------------------------------------------------------ */

/** The library's version, as RSP_VERSION encodes it (the header the library
 * was built from). Any thread, O(1), also in a forked child. */
RSP_API uint32_t rsp_version(void);
/** The library's RSP_VERSION_MAJOR, _MINOR, _PATCH. Any thread, O(1). */
RSP_API uint32_t rsp_version_major(void);
RSP_API uint32_t rsp_version_minor(void);
RSP_API uint32_t rsp_version_patch(void);
/** The library's version as "MAJOR.MINOR.PATCH" (static). Any thread, O(1). */
RSP_API const char *rsp_version_string(void);

/**
 * Whether this library serves a program built against the header of
 * version major.minor: RSP_OK when the library's major is the same and its
 * minor is the same or newer (a newer library keeps every struct and
 * function of an older minor release of its major: docs/abi.md).
 * Otherwise RSP_EINVAL with a message naming both versions ("rsp: this
 * program was built against rsp 0.2 but loaded librsp 0.1.0; ..."). A
 * binding calls it once, at load or before its first pool (rsp.hpp at
 * pool creation, the Python package at import); C programs use
 * RSP_VERSION_CHECK. Changes nothing. Any thread, O(1) (formats the
 * message on a refusal), also in a forked child.
 */
RSP_API rsp_status rsp_version_check(uint32_t major, uint32_t minor, rsp_error *err);

/** rsp_version_check against the header this code is compiled with. */
#define RSP_VERSION_CHECK(err) rsp_version_check(RSP_VERSION_MAJOR, RSP_VERSION_MINOR, (err))

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RSP_RSP_H */
