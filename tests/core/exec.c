/* In-test executor of core device work: emulated, or on the host or CUDA
 * device (exec.h). SPDX-License-Identifier: Apache-2.0 */
#include "core/exec.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/map.h"
#include "cuda/gpu.h"
#include "device/device.h"

typedef enum exec_mode { MODE_EMULATED = 0, MODE_HOST, MODE_CUDA } exec_mode;

typedef struct test_buffer {
    uint32_t capacity; /* 0: never created */
    uint32_t moves;
    /* Emulated: the buffer itself. Device: a host copy, refreshed from the
     * device by settle(). */
    int32_t *slots;
    bool *has_state;
    void *dev_slots; /* device: its pointer after the last BUFFER op (moves) */
} test_buffer;

/* A simulated forward recorded by fill / fill_pattern on the host device and
 * written later (flush_fills), possibly while the worker waits for it. */
typedef struct pending_fill {
    uint32_t slot;
    bool pattern;
    uint8_t byte;
    uint64_t seed;
} pending_fill;

/* Everything a device-backed store adds. Reached through a pointer so that
 * the const readers can bring the host view up to date (settle). */
typedef struct test_device {
    rsp__device *dev;
    /* Host: stands for the caller's forward-done event; raised by the main
     * thread after the forward's bytes are written. */
    rsp_host_fence *forward;
    uint64_t forward_value;
    /* Work was submitted since the last rsp__device_sync. */
    bool stale;
    /* The submitted copy of a list's ops (caller events rewritten). */
    rsp__op *ops;
    uint32_t cap_ops;
    pending_fill *fills; /* host only */
    uint32_t num_fills, cap_fills;
} test_device;

struct rsp_test_store {
    rsp__layout layout; /* the device keeps a pointer to it */
    exec_mode mode;
    /* Request slots. Emulated: the storage. Host: the device's blocks.
     * CUDA: a host copy, refreshed by settle(). */
    uint8_t *base[RSP_MAX_BLOCKS];
    /* Checkpoint slots (ids >= max_slots), per tier and block, laid out like
     * the request slots: [num_layers, tier size, slot]. Same three cases as
     * base[]: the heap, the host device's tiers, a host copy of the CUDA
     * device's tiers (NULL on the host device for a tier of no slots). */
    uint8_t *tier_base[RSP_TIER_COUNT_][RSP_MAX_BLOCKS];
    test_buffer *buffers;
    uint32_t num_buffers;
    rsp_test_store_counts counts;
    char error[256];
    test_device *dv; /* NULL when emulated */
};

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "exec: out of memory\n");
        abort();
    }
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "exec: out of memory\n");
        abort();
    }
    return p;
}

/* ------------------------------------------------------------------------ */
/* Mode selection and the visible skip without a GPU                        */
/* ------------------------------------------------------------------------ */

/* The mode RSP_TEST_DEVICE names; false if it names none. *out is written
 * on every path (MODE_EMULATED when false): cmocka's fail_msg, which mode_get
 * calls then, leaves the test or the process but is not declared noreturn,
 * so the compiler sees a path that returns *out. */
static bool mode_parse(exec_mode *out)
{
    const char *e = getenv("RSP_TEST_DEVICE");
    *out = MODE_EMULATED;
    if (!e || !*e || strcmp(e, "emulated") == 0)
        return true;
    if (strcmp(e, "host") == 0)
        *out = MODE_HOST;
    else if (strcmp(e, "cuda") == 0)
        *out = MODE_CUDA;
    else
        return false;
    return true;
}

static exec_mode mode_get(void)
{
    exec_mode m;
    if (!mode_parse(&m))
        fail_msg("RSP_TEST_DEVICE=%s: expected emulated, host or cuda", getenv("RSP_TEST_DEVICE"));
    return m;
}

const char *rsp_test_store_mode(void)
{
    static const char *const names[] = {"emulated", "host", "cuda"};
    return names[mode_get()];
}

static char no_gpu_why[160];

static void skip_no_gpu(void **state)
{
    (void)state;
    print_message("skipped: no CUDA device (%s)\n", no_gpu_why);
    skip();
}

/*
 * Every suite that compiles this file is linked with
 * -Wl,--wrap=_cmocka_run_group_tests (tests/core/CMakeLists.txt), so its
 * cmocka_run_group_tests call lands here first. Why: under
 * RSP_TEST_DEVICE=cuda without a GPU, every test must skip visibly, also
 * those that never create a store, and the suites stay unchanged. Otherwise
 * this only names the mode and runs the group as written.
 */
int __real__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown);
int __wrap__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown);
int __wrap__cmocka_run_group_tests(const char *group_name, const struct CMUnitTest *const tests,
                                   const size_t num_tests, CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown)
{
    exec_mode m;
    if (!mode_parse(&m)) {
        print_error("RSP_TEST_DEVICE=%s: expected emulated, host or cuda\n",
                    getenv("RSP_TEST_DEVICE"));
        return 1;
    }
    if (m != MODE_EMULATED)
        print_message("[ core executor: RSP_TEST_DEVICE=%s ]\n", rsp_test_store_mode());
    if (m != MODE_CUDA || rsp_test_gpu(no_gpu_why, sizeof no_gpu_why))
        return __real__cmocka_run_group_tests(group_name, tests, num_tests, group_setup,
                                              group_teardown);
    struct CMUnitTest *skipped = xcalloc(num_tests, sizeof *skipped);
    for (size_t i = 0; i < num_tests; i++)
        skipped[i] = (struct CMUnitTest){.name = tests[i].name, .test_func = skip_no_gpu};
    int rc = __real__cmocka_run_group_tests(group_name, skipped, num_tests, NULL, NULL);
    free(skipped);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* CUDA copies (only in CUDA builds)                                         */
/* ------------------------------------------------------------------------ */

#ifdef RSP_HAVE_CUDA
static void cuda_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    cudaError_t e = n ? cudaMemcpy(dst, src, n, kind) : cudaSuccess;
    /* A host-to-device cudaMemcpy from pageable memory may return before the
     * DMA lands; the pool stream does not order against it, so wait. */
    if (e == cudaSuccess && kind == cudaMemcpyHostToDevice)
        e = cudaDeviceSynchronize();
    if (e != cudaSuccess)
        fail_msg("exec: cudaMemcpy of %zu bytes: %s", n, cudaGetErrorString(e));
}
#endif

/* Host memory `src` -> device memory `dst` (host device: plain memory). */
static void to_device(exec_mode m, void *dst, const void *src, size_t n)
{
#ifdef RSP_HAVE_CUDA
    if (m == MODE_CUDA) {
        cuda_copy(dst, src, n, cudaMemcpyHostToDevice);
        return;
    }
#endif
    (void)m;
    memcpy(dst, src, n);
}

static void from_device(exec_mode m, void *dst, const void *src, size_t n)
{
#ifdef RSP_HAVE_CUDA
    if (m == MODE_CUDA) {
        cuda_copy(dst, src, n, cudaMemcpyDeviceToHost);
        return;
    }
#endif
    (void)m;
    if (n)
        memcpy(dst, src, n);
}

/* ------------------------------------------------------------------------ */
/* Store                                                                     */
/* ------------------------------------------------------------------------ */

/* The two checkpoint tiers as storages of the id space (core/layout.h). */
static const rsp__space tier_space[RSP_TIER_COUNT_] = {
    [RSP_TIER_DEVICE] = RSP__SPACE_DEVICE,
    [RSP_TIER_HOST] = RSP__SPACE_HOST,
};

/* Bytes of block b of tier t: [num_layers, tier size, slot_bytes]. */
static size_t tier_bytes(const rsp__layout *lay, int t, uint32_t b)
{
    uint32_t n = t == RSP_TIER_DEVICE ? lay->max_checkpoints : lay->max_host_checkpoints;
    return (size_t)((uint64_t)lay->num_layers * lay->blocks[b].slot_bytes * n);
}

/* Heap storage (emulated) or host copies (CUDA) of every block of the
 * three storages, zeroed. */
static void heap_blocks(rsp_test_store *s)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++) {
        s->base[b] = xcalloc(1, (size_t)s->layout.blocks[b].bytes);
        for (int t = 0; t < RSP_TIER_COUNT_; t++)
            s->tier_base[t][b] = xcalloc(1, tier_bytes(&s->layout, t, b));
    }
}

/* CUDA: copy every block of the three storages between the host copies and
 * the device (to_dev: host copy -> device). */
static void cuda_blocks(const rsp_test_store *s, bool to_dev)
{
    const rsp__device *dev = s->dv->dev;
    for (uint32_t b = 0; b < s->layout.num_blocks; b++) {
        void *dst = rsp__device_block_base(dev, b);
        size_t n = (size_t)s->layout.blocks[b].bytes;
        if (to_dev)
            to_device(s->mode, dst, s->base[b], n);
        else
            from_device(s->mode, s->base[b], dst, n);
        for (int t = 0; t < RSP_TIER_COUNT_; t++) {
            void *tier = rsp__device_space_base(dev, tier_space[t], b);
            n = tier_bytes(&s->layout, t, b);
            if (to_dev)
                to_device(s->mode, tier, s->tier_base[t][b], n);
            else
                from_device(s->mode, s->tier_base[t][b], tier, n);
        }
    }
}

rsp_test_store *rsp_test_store_new(const rsp__layout *layout)
{
    exec_mode m = mode_get();
    if (m == MODE_CUDA && !rsp_test_gpu(no_gpu_why, sizeof no_gpu_why))
        skip_no_gpu(NULL); /* before anything is allocated: skip() does not return */
    rsp_test_store *s = xcalloc(1, sizeof *s);
    s->layout = *layout;
    s->mode = m;
    if (m == MODE_EMULATED) {
        heap_blocks(s);
        return s;
    }
    s->dv = xcalloc(1, sizeof *s->dv);
    rsp_error err;
    memset(&err, 0, sizeof err);
    rsp_status st = rsp__device_create(m == MODE_HOST ? RSP_DEVICE_HOST : RSP_DEVICE_CUDA, 0,
                                       &s->layout, &s->dv->dev, &err);
    if (st != RSP_OK)
        fail_msg("exec: %s device create: %s", rsp_test_store_mode(), err.message);
    if (m == MODE_HOST) {
        if (rsp_host_fence_create(&s->dv->forward, &err) != RSP_OK)
            fail_msg("exec: rsp_host_fence_create: %s", err.message);
        for (uint32_t b = 0; b < layout->num_blocks; b++) {
            s->base[b] = rsp__device_block_base(s->dv->dev, b);
            for (int t = 0; t < RSP_TIER_COUNT_; t++)
                s->tier_base[t][b] = rsp__device_space_base(s->dv->dev, tier_space[t], b);
        }
    } else {
        heap_blocks(s);
    }
    return s;
}

void rsp_test_store_free(rsp_test_store *s)
{
    if (!s)
        return;
    if (s->dv) {
        /* Waits for everything queued; every WAIT of ours was raised. */
        rsp__device_destroy(s->dv->dev);
        rsp_host_fence_destroy(s->dv->forward);
        free(s->dv->ops);
        free(s->dv->fills);
        free(s->dv);
    }
    if (s->mode != MODE_HOST) /* the host device's blocks are its own */
        for (uint32_t b = 0; b < s->layout.num_blocks; b++) {
            free(s->base[b]);
            free(s->tier_base[RSP_TIER_DEVICE][b]);
            free(s->tier_base[RSP_TIER_HOST][b]);
        }
    for (uint32_t i = 0; i < s->num_buffers; i++) {
        free(s->buffers[i].slots);
        free(s->buffers[i].has_state);
    }
    free(s->buffers);
    free(s);
}

static bool bad(rsp_test_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool bad(rsp_test_store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof s->error, fmt, ap);
    va_end(ap);
    return false;
}

const char *rsp_test_store_error(const rsp_test_store *s)
{
    return s->error;
}

/* Slot ids this store holds: every id of the layout, in every mode. */
static uint32_t num_ids(const rsp_test_store *s)
{
    return s->layout.num_ids;
}

/* (block b, layer l) of slot id `slot`: request slots in base[], checkpoint
 * slots in tier_base[]. */
static uint8_t *mslot(const rsp_test_store *s, uint32_t b, uint32_t l, uint32_t slot)
{
    uint32_t idx;
    rsp__space sp = rsp__layout_space(&s->layout, slot, &idx);
    if (sp == RSP__SPACE_SLOTS)
        return s->base[b] + rsp__layout_offset(&s->layout, b, l, slot);
    if (slot >= num_ids(s))
        fail_msg("exec: slot id %u: the %s store holds ids below %u", slot, rsp_test_store_mode(),
                 num_ids(s));
    uint64_t n =
        sp == RSP__SPACE_DEVICE ? s->layout.max_checkpoints : s->layout.max_host_checkpoints;
    uint64_t sb = s->layout.blocks[b].slot_bytes;
    return s->tier_base[sp == RSP__SPACE_DEVICE ? RSP_TIER_DEVICE : RSP_TIER_HOST][b] +
           (uint64_t)l * n * sb + (uint64_t)idx * sb;
}

static const uint8_t *cslot(const rsp_test_store *s, uint32_t b, uint32_t l, uint32_t slot)
{
    return mslot(s, b, l, slot);
}

/* ------------------------------------------------------------------------ */
/* Simulated forwards                                                        */
/* ------------------------------------------------------------------------ */

/* The core's finaliser (core/map.h). */
static uint64_t mix(uint64_t x)
{
    return rsp__mix64(x);
}

/* Write one forward into host-visible storage (emulated heap, the host
 * device's blocks, or the CUDA host copy). */
static void write_fill(const rsp_test_store *s, const pending_fill *f)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++) {
            uint8_t *p = mslot(s, b, l, f->slot);
            uint64_t n = s->layout.blocks[b].slot_bytes;
            if (!f->pattern) {
                memset(p, f->byte, (size_t)n);
                continue;
            }
            for (uint64_t i = 0; i < n; i++)
                p[i] = (uint8_t)(mix(f->seed * 0x9e3779b97f4a7c15ull + ((uint64_t)b << 48) +
                                     ((uint64_t)l << 32) + i) |
                                 1u); /* never 0: a filled slot is never "zero" */
        }
}

/* ------------------------------------------------------------------------ */
/* Device view: wait for the device, then read it                            */
/* ------------------------------------------------------------------------ */

static void device_sync(const rsp_test_store *s)
{
    test_device *dv = s->dv;
    if (!dv->stale)
        return;
    rsp_error err;
    memset(&err, 0, sizeof err);
    if (rsp__device_sync(dv->dev, &err) != RSP_OK)
        fail_msg("exec: device sync: %s", err.message);
    dv->stale = false;
}

/* Host device: write the recorded forwards, after the device finished
 * everything queued (it may touch the same bytes). */
static void flush_fills(const rsp_test_store *s)
{
    test_device *dv = s->dv;
    if (!dv->num_fills)
        return;
    device_sync(s);
    for (uint32_t i = 0; i < dv->num_fills; i++)
        write_fill(s, &dv->fills[i]);
    dv->num_fills = 0;
}

/* Bring the host view up to date: wait for all queued work, then (CUDA)
 * download the blocks of the three storages, and copy every addressing
 * buffer from the device.
 * Logically const: only the cached view changes. */
static void settle(const rsp_test_store *s)
{
    test_device *dv = s->dv;
    if (!dv)
        return;
    flush_fills(s);
    if (!dv->stale)
        return;
    device_sync(s);
    if (s->mode == MODE_CUDA)
        cuda_blocks(s, false);
    for (uint32_t id = 0; id < s->num_buffers; id++) {
        test_buffer *tb = &s->buffers[id];
        if (!tb->capacity)
            continue;
        void *idx = NULL, *has = NULL;
        uint32_t cap = 0;
        rsp_error err;
        memset(&err, 0, sizeof err);
        if (rsp__device_buffer(dv->dev, id, &idx, &has, &cap, &err) != RSP_OK)
            fail_msg("exec: device buffer %u: %s", id, err.message);
        if (cap < tb->capacity)
            fail_msg("exec: device buffer %u holds %u entries, BUFFER ops asked for %u", id, cap,
                     tb->capacity);
        from_device(s->mode, tb->slots, idx, (size_t)tb->capacity * sizeof *tb->slots);
        from_device(s->mode, tb->has_state, has, (size_t)tb->capacity * sizeof *tb->has_state);
    }
}

/* ------------------------------------------------------------------------ */
/* Checking and executing a work list                                        */
/* ------------------------------------------------------------------------ */

static test_buffer *buffer_get(rsp_test_store *s, uint32_t id, bool create)
{
    if (id >= s->num_buffers) {
        if (!create)
            return NULL;
        uint32_t n = s->num_buffers ? s->num_buffers : 8;
        while (n <= id)
            n *= 2;
        test_buffer *nb = xrealloc(s->buffers, (size_t)n * sizeof *nb);
        memset(nb + s->num_buffers, 0, (size_t)(n - s->num_buffers) * sizeof *nb);
        s->buffers = nb;
        s->num_buffers = n;
    }
    return &s->buffers[id];
}

/* Is op i well formed, given the buffers as the ops before it left them? */
static bool check_op(rsp_test_store *s, const rsp__work *w, uint32_t i)
{
    const rsp__op *op = &w->ops[i];
    switch (op->kind) {
    case RSP__OP_WAIT:
    case RSP__OP_BUFFER: return true;
    case RSP__OP_ZERO:
        if ((uint64_t)op->first + op->count > w->num_slots)
            return bad(s, "op %u: ZERO slots [%u, +%u) past %u", i, op->first, op->count,
                       w->num_slots);
        for (uint32_t a = 0; a < op->count; a++)
            if (w->slots[op->first + a] >= num_ids(s))
                return bad(s, "op %u: ZERO slot %u out of range", i, w->slots[op->first + a]);
        return true;
    case RSP__OP_COPY: {
        if ((uint64_t)op->first + op->count > w->num_pairs)
            return bad(s, "op %u: COPY pairs [%u, +%u) past %u", i, op->first, op->count,
                       w->num_pairs);
        const rsp__copy *p = w->pairs + op->first;
        for (uint32_t a = 0; a < op->count; a++) {
            if (p[a].src >= num_ids(s) || p[a].dst >= num_ids(s))
                return bad(s, "op %u: COPY pair %u (%u -> %u) out of range", i, a, p[a].src,
                           p[a].dst);
            if (p[a].src == p[a].dst)
                return bad(s, "op %u: COPY pair %u copies slot %u onto itself", i, a, p[a].src);
            for (uint32_t c = 0; c < op->count; c++) {
                if (c != a && p[c].dst == p[a].dst)
                    return bad(s, "op %u: COPY destination %u appears twice", i, p[a].dst);
                if (p[c].src == p[a].dst)
                    return bad(s, "op %u: COPY slot %u is both source and destination", i,
                               p[a].dst);
            }
        }
        return true;
    }
    case RSP__OP_UPLOAD: {
        test_buffer *b = buffer_get(s, op->buffer, false);
        if (!b || b->capacity == 0)
            return bad(s, "op %u: UPLOAD into buffer %u that does not exist", i, op->buffer);
        if (op->count > b->capacity)
            return bad(s, "op %u: UPLOAD of %u entries into buffer %u of %u", i, op->count,
                       op->buffer, b->capacity);
        if (op->count && !op->slot_indices) /* has_state NULL: an index tensor's */
            return bad(s, "op %u: UPLOAD with NULL vectors", i);
        return true;
    }
    }
    return bad(s, "op %u: unknown kind %d", i, (int)op->kind);
}

/* BUFFER: grow the buffer's arrays (the storage when emulated, the host copy
 * on a device: both keep the old entries, as the devices do). */
static void buffer_grow(rsp_test_store *s, const rsp__op *op)
{
    test_buffer *b = buffer_get(s, op->buffer, true);
    if (op->capacity <= b->capacity)
        return;
    int32_t *ns = xcalloc(op->capacity, sizeof *ns);
    bool *nh = xcalloc(op->capacity, sizeof *nh);
    if (b->capacity) {
        memcpy(ns, b->slots, (size_t)b->capacity * sizeof *ns);
        memcpy(nh, b->has_state, (size_t)b->capacity * sizeof *nh);
        if (s->mode == MODE_EMULATED)
            b->moves++;
    }
    free(b->slots);
    free(b->has_state);
    b->slots = ns;
    b->has_state = nh;
    b->capacity = op->capacity;
}

static void zero_slot(rsp_test_store *s, uint32_t slot)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++)
            memset(mslot(s, b, l, slot), 0, (size_t)s->layout.blocks[b].slot_bytes);
}

static void copy_slot(rsp_test_store *s, uint32_t src, uint32_t dst)
{
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++)
            memcpy(mslot(s, b, l, dst), cslot(s, b, l, src),
                   (size_t)s->layout.blocks[b].slot_bytes);
}

/* Emulated: run one checked op on the heap storage. */
static void emulate_op(rsp_test_store *s, const rsp__work *w, const rsp__op *op)
{
    switch (op->kind) {
    case RSP__OP_WAIT:
    case RSP__OP_BUFFER: break; /* BUFFER: buffer_grow did it */
    case RSP__OP_ZERO:
        for (uint32_t a = 0; a < op->count; a++)
            zero_slot(s, w->slots[op->first + a]);
        break;
    case RSP__OP_COPY:
        /* Non-overlapping pairs: sequential copies equal one batched launch. */
        for (uint32_t a = 0; a < op->count; a++)
            copy_slot(s, w->pairs[op->first + a].src, w->pairs[op->first + a].dst);
        break;
    case RSP__OP_UPLOAD: {
        test_buffer *b = &s->buffers[op->buffer];
        if (op->count) {
            memcpy(b->slots, op->slot_indices, (size_t)op->count * sizeof *b->slots);
            if (op->has_state) /* NULL: a per-token index tensor, indices only */
                memcpy(b->has_state, op->has_state, (size_t)op->count * sizeof *b->has_state);
        }
        break;
    }
    }
}

/*
 * Device: queue ops[0 .. n) of w (all checked). A caller event becomes, on
 * the host device, a wait on our `forward` fence; when the recorded forwards
 * may be written while the worker waits there (nothing before the first
 * such WAIT touches slots, so the result equals writing them first), they
 * are written after the submit and the fence raised after them. On CUDA a
 * caller event becomes NULL (complete).
 */
static bool device_submit(rsp_test_store *s, const rsp__work *w, uint32_t n)
{
    test_device *dv = s->dv;
    if (n == 0)
        return true;
    if (n > dv->cap_ops) {
        dv->ops = xrealloc(dv->ops, (size_t)n * sizeof *dv->ops);
        dv->cap_ops = n;
    }
    memcpy(dv->ops, w->ops, (size_t)n * sizeof *dv->ops);
    uint64_t raise_to = 0;
    bool slot_op_before_wait = false;
    for (uint32_t i = 0; i < n; i++) {
        rsp__op *op = &dv->ops[i];
        if ((op->kind == RSP__OP_ZERO || op->kind == RSP__OP_COPY) && !raise_to)
            slot_op_before_wait = true;
        if (op->kind != RSP__OP_WAIT || !op->event.handle)
            continue;
        if (s->mode == MODE_CUDA) {
            op->event = (rsp_event){.handle = NULL, .value = 0};
            continue;
        }
        raise_to = ++dv->forward_value;
        op->event = rsp_event_host(dv->forward, raise_to);
    }
    bool defer = raise_to && !slot_op_before_wait && dv->num_fills;
    if (defer)
        device_sync(s); /* earlier work is done before the fills are written */
    else
        flush_fills(s);

    rsp__work sub = *w;
    sub.ops = dv->ops;
    sub.num_ops = n;
    sub.cap_ops = n;
    rsp_error err;
    memset(&err, 0, sizeof err);
    rsp_status st = rsp__device_submit(dv->dev, &sub, NULL, &err);
    if (st != RSP_OK) {
        if (raise_to)
            rsp_host_fence_signal(dv->forward, raise_to); /* nothing waits; keep it monotonic */
        return bad(s, "device submit: %s", err.message);
    }
    dv->stale = true;
    if (defer) {
        /* The worker may be held at the WAIT now: the forward "runs". */
        for (uint32_t i = 0; i < dv->num_fills; i++)
            write_fill(s, &dv->fills[i]);
        dv->num_fills = 0;
    }
    if (raise_to)
        rsp_host_fence_signal(dv->forward, raise_to);

    /* BUFFER ops took effect at submit: a changed pointer is a move. */
    for (uint32_t i = 0; i < n; i++) {
        if (dv->ops[i].kind != RSP__OP_BUFFER)
            continue;
        test_buffer *tb = &s->buffers[dv->ops[i].buffer];
        void *idx = NULL, *has = NULL;
        uint32_t cap = 0;
        if (rsp__device_buffer(dv->dev, dv->ops[i].buffer, &idx, &has, &cap, &err) != RSP_OK)
            return bad(s, "device buffer %u: %s", dv->ops[i].buffer, err.message);
        /* Only once the emulation would call it created (capacity > 0): a
         * device gives a capacity-0 BUFFER one entry, emulated gives none. */
        if (!tb->capacity)
            continue;
        if (tb->dev_slots && idx != tb->dev_slots)
            tb->moves++;
        tb->dev_slots = idx;
    }
    return true;
}

bool rsp_test_store_apply(rsp_test_store *s, const rsp__work *w)
{
    s->error[0] = '\0';
    uint32_t i = 0;
    bool ok = true;
    for (; i < w->num_ops; i++) {
        const rsp__op *op = &w->ops[i];
        if ((unsigned)op->kind <= RSP__OP_UPLOAD)
            s->counts.ops[op->kind]++;
        if (!check_op(s, w, i)) {
            ok = false;
            break;
        }
        if (op->kind == RSP__OP_BUFFER)
            buffer_grow(s, op);
        else if (op->kind == RSP__OP_ZERO)
            s->counts.slots_zeroed += op->count;
        else if (op->kind == RSP__OP_COPY)
            s->counts.pairs_copied += op->count;
        if (s->mode == MODE_EMULATED)
            emulate_op(s, w, op);
    }
    /* The checked prefix, as the emulation applied it. */
    if (s->dv && !device_submit(s, w, i))
        return false;
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Forwards and reads                                                        */
/* ------------------------------------------------------------------------ */

static void store_fill(rsp_test_store *s, const pending_fill *f)
{
    test_device *dv = s->dv;
    if (!dv) {
        write_fill(s, f);
        return;
    }
    if (s->mode == MODE_HOST) {
        /* Written at the next WAIT of a caller event, or before any read. */
        if (dv->num_fills == dv->cap_fills) {
            dv->cap_fills = dv->cap_fills ? dv->cap_fills * 2 : 16;
            dv->fills = xrealloc(dv->fills, (size_t)dv->cap_fills * sizeof *dv->fills);
        }
        dv->fills[dv->num_fills++] = *f;
        return;
    }
    /* CUDA: into the up-to-date host copy, then the whole blocks back. */
    settle(s);
    write_fill(s, f);
    cuda_blocks(s, true);
}

void rsp_test_store_fill(rsp_test_store *s, uint32_t slot, uint8_t byte)
{
    pending_fill f = {.slot = slot, .pattern = false, .byte = byte};
    store_fill(s, &f);
}

void rsp_test_store_fill_pattern(rsp_test_store *s, uint32_t slot, uint64_t seed)
{
    pending_fill f = {.slot = slot, .pattern = true, .seed = seed};
    store_fill(s, &f);
}

uint8_t *rsp_test_store_slot_ptr(rsp_test_store *s, uint32_t block, uint32_t layer, uint32_t slot)
{
    settle(s);
    return mslot(s, block, layer, slot);
}

bool rsp_test_store_slot_is_zero(const rsp_test_store *s, uint32_t slot)
{
    settle(s);
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++) {
            const uint8_t *p = cslot(s, b, l, slot);
            for (uint64_t i = 0; i < s->layout.blocks[b].slot_bytes; i++)
                if (p[i])
                    return false;
        }
    return true;
}

uint64_t rsp_test_store_checksum(const rsp_test_store *s, uint32_t slot)
{
    settle(s);
    uint64_t h = 0x243f6a8885a308d3ull;
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++) {
            const uint8_t *p = cslot(s, b, l, slot);
            for (uint64_t i = 0; i < s->layout.blocks[b].slot_bytes; i++)
                h = mix(h ^ p[i]) + i;
        }
    return h;
}

uint64_t rsp_test_store_zero_checksum(const rsp_test_store *s)
{
    uint64_t h = 0x243f6a8885a308d3ull;
    for (uint32_t b = 0; b < s->layout.num_blocks; b++)
        for (uint32_t l = 0; l < s->layout.num_layers; l++)
            for (uint64_t i = 0; i < s->layout.blocks[b].slot_bytes; i++)
                h = mix(h ^ 0) + i;
    return h;
}

static const test_buffer *cbuf(const rsp_test_store *s, uint32_t id)
{
    settle(s);
    return id < s->num_buffers ? &s->buffers[id] : NULL;
}

uint32_t rsp_test_store_buffer_capacity(const rsp_test_store *s, uint32_t id)
{
    const test_buffer *b = cbuf(s, id);
    return b ? b->capacity : 0;
}

const int32_t *rsp_test_store_buffer_slots(const rsp_test_store *s, uint32_t id)
{
    const test_buffer *b = cbuf(s, id);
    return b ? b->slots : NULL;
}

const bool *rsp_test_store_buffer_has_state(const rsp_test_store *s, uint32_t id)
{
    const test_buffer *b = cbuf(s, id);
    return b ? b->has_state : NULL;
}

uint32_t rsp_test_store_buffer_moves(const rsp_test_store *s, uint32_t id)
{
    const test_buffer *b = cbuf(s, id);
    return b ? b->moves : 0;
}

rsp_test_store_counts rsp_test_store_counts_get(const rsp_test_store *s)
{
    return s->counts;
}
