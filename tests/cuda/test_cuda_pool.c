/*
 * test_cuda_pool: a whole pool on either device, driven as an engine drives
 * it, with a forward that writes slots after the commit and the removals
 * were already posted. Registered twice ("host: ..." runs everywhere,
 * "cuda: ..." needs a GPU), plus the creation rule for a CUDA pool on a
 * machine without one, which runs in CI.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Per step: admit (rows main of every live rid, post-fork main -> draft),
 * plan, take the plan's addressing; the forward reads device_slot_indices
 * after waiting for the plan's `ready` and writes its rows' slots with the
 * step's pattern. Every few steps a request is removed while its step is
 * in flight. The commit (and the removal) are posted before the forward has
 * written anything:
 *   host: the test writes the slots itself after posting, then signals the
 *         rsp_host_fence that is the step's forward_done;
 *   cuda: a slow kernel on the caller's stream, forward_done recorded after.
 * Then every byte of every slot is checked: each live request's main and
 * draft hold its last step's pattern, every other slot is zero. A post-fork
 * or a zeroing that ran before the forward finished leaves a wrong byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rsp/rsp.h>

#include "cuda/gpu.h"
#include "cuda/pattern.h"
#ifdef RSP_HAVE_CUDA
#include "cuda/gpu_helpers.h"
#endif

static rsp_device_kind kind_host = RSP_DEVICE_HOST;
static rsp_device_kind kind_cuda = RSP_DEVICE_CUDA;

#define LAYERS 2u
#define MAX_SLOTS 16u
#define LIVE 4u   /* requests per step */
#define STEPS 61u /* checks after every fifth step, the last at 60 */

static const rsp_block_config blocks[3] = {
    {.name = "conv", .dtype = RSP_DTYPE_BF16, .ndim = 2, .shape = {1, 3}},
    {.name = "ssm", .dtype = RSP_DTYPE_F32, .ndim = 1, .shape = {1025}},
    {.name = "tail", .dtype = RSP_DTYPE_U8, .ndim = 1, .shape = {7}},
};

static void config(rsp_pool_config *cfg, rsp_device_kind kind, int ordinal)
{
    rsp_pool_config_init(cfg);
    cfg->num_layers = LAYERS;
    cfg->blocks = blocks;
    cfg->num_blocks = 3;
    cfg->max_slots = MAX_SLOTS;
    cfg->device = kind;
    cfg->cuda_ordinal = ordinal;
}

#define OK(call)                                                                                   \
    do {                                                                                           \
        rsp_error e_ = {0};                                                                        \
        rsp_status s_ = (call);                                                                    \
        (void)e_;                                                                                  \
        if (s_ != RSP_OK)                                                                          \
            fail_msg("%s: %s", #call, e_.message);                                                 \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Runs everywhere                                                           */
/* ------------------------------------------------------------------------ */

static void cuda_pool_without_a_device_fails_creation_with_enodev(void **state)
{
    (void)state;
    char why[160];
    const bool gpu = rsp_test_gpu(why, sizeof why);
    /* no GPU (or no CUDA build): any ordinal; with one: an ordinal past it */
    rsp_pool_config cfg;
    config(&cfg, RSP_DEVICE_CUDA, gpu ? 4096 : 0);
    rsp_pool *pool = (rsp_pool *)&cfg;
    rsp_error err = {0};
    assert_int_equal(rsp_pool_create(&cfg, &pool, &err), RSP_ENODEV);
    assert_int_equal(err.status, RSP_ENODEV);
    assert_true(strlen(err.message) > 0);
    assert_null(pool);
    /* and nothing was left behind that stops a host pool */
    config(&cfg, RSP_DEVICE_HOST, 0);
    OK(rsp_pool_create(&cfg, &pool, &e_));
    rsp_pool_destroy(pool);
}

/* ------------------------------------------------------------------------ */
/* Both devices                                                              */
/* ------------------------------------------------------------------------ */

typedef struct forward {
    rsp_device_kind kind;
    rsp_host_fence *fence;
#ifdef RSP_HAVE_CUDA
    cudaStream_t stream;
    cudaEvent_t done[2];
#endif
} forward;

static void forward_init(forward *f, rsp_device_kind kind)
{
    memset(f, 0, sizeof *f);
    f->kind = kind;
    if (kind == RSP_DEVICE_HOST) {
        OK(rsp_host_fence_create(&f->fence, &e_));
        return;
    }
#ifdef RSP_HAVE_CUDA
    RSP_TEST_CUDA(cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking));
    for (int i = 0; i < 2; i++)
        RSP_TEST_CUDA(cudaEventCreateWithFlags(&f->done[i], cudaEventDisableTiming));
#endif
}

static void forward_fini(forward *f)
{
    if (f->kind == RSP_DEVICE_HOST) {
        rsp_host_fence_destroy(f->fence);
        return;
    }
#ifdef RSP_HAVE_CUDA
    (void)cudaStreamSynchronize(f->stream);
    for (int i = 0; i < 2; i++)
        (void)cudaEventDestroy(f->done[i]);
    (void)cudaStreamDestroy(f->stream);
#endif
}

/* The layer views of every block, for the forward and the checks. */
typedef struct views {
    rsp_block_view v[3][LAYERS];
    uint64_t slot_bytes[3];
} views;

static void views_get(rsp_pool *pool, views *vs)
{
    for (uint32_t b = 0; b < 3; b++) {
        for (uint32_t l = 0; l < LAYERS; l++)
            OK(rsp_pool_block(pool, blocks[b].name, l, &vs->v[b][l], &e_));
        vs->slot_bytes[b] = (uint64_t)vs->v[b][0].strides[0] * rsp_dtype_size(blocks[b].dtype);
    }
}

/* CUDA: enqueue the forward now (it reads the device vector after a delay);
 * returns forward_done. Host: nothing runs yet; forward_done is the fence
 * value `step`, signalled by forward_finish. */
static rsp_event forward_start(forward *f, const views *vs, const rsp_addressing *a, uint64_t step)
{
    if (f->kind == RSP_DEVICE_HOST)
        return rsp_event_host(f->fence, step);
#ifdef RSP_HAVE_CUDA
    rsp__kgeom g;
    memset(&g, 0, sizeof g);
    g.num_blocks = 3;
    g.num_layers = LAYERS;
    for (uint32_t b = 0; b < 3; b++)
        g.blocks[b] = (rsp__kblock){.base = vs->v[b][0].data,
                                    .slot_bytes = vs->slot_bytes[b],
                                    .layer_bytes = vs->slot_bytes[b] * MAX_SLOTS};
    RSP_TEST_CUDA(cudaStreamWaitEvent(f->stream, (cudaEvent_t)a->ready.handle, 0));
    RSP_TEST_CUDA(
        rsp_test_forward_indexed(&g, a->device_slot_indices, a->num_rows, step, 30, f->stream));
    cudaEvent_t done = f->done[step % 2];
    RSP_TEST_CUDA(cudaEventRecord(done, f->stream));
    return rsp_event_cuda((void *)done);
#else
    (void)vs;
    (void)a;
    fail_msg("CUDA forward without CUDA");
    return (rsp_event){0};
#endif
}

/* Host: wait for the plan, write the rows' slots, signal forward_done. */
static void forward_finish(forward *f, rsp_pool *pool, const views *vs, const rsp_addressing *a,
                           uint64_t step)
{
    if (f->kind != RSP_DEVICE_HOST)
        return;
    OK(rsp_event_wait(pool, &a->ready, RSP_WAIT_FOREVER, &e_));
    /* a forward takes time: room for a commit that did not wait to run first
     * (not a timed assertion: the bytes are right or wrong whatever the time) */
    const struct timespec nap = {0, 300000};
    nanosleep(&nap, NULL);
    const int32_t *idx = a->device_slot_indices;
    for (uint32_t r = 0; r < a->num_rows; r++)
        for (uint32_t b = 0; b < 3; b++)
            for (uint32_t l = 0; l < LAYERS; l++) {
                uint8_t *p = (uint8_t *)vs->v[b][l].data + (uint64_t)idx[r] * vs->slot_bytes[b];
                for (uint64_t i = 0; i < vs->slot_bytes[b]; i++)
                    p[i] = rsp_test_pattern(step, b, l, i);
            }
    rsp_host_fence_signal(f->fence, step);
}

/* Every byte of every slot against the model (want[s] = step pattern, 0 =
 * zeros). The caller has waited for the device work that matters. */
static void check_slots(rsp_device_kind kind, const views *vs, const uint64_t *want, uint64_t step)
{
    uint8_t *img = malloc(vs->slot_bytes[1] * MAX_SLOTS);
    assert_non_null(img);
    for (uint32_t b = 0; b < 3; b++)
        for (uint32_t l = 0; l < LAYERS; l++) {
            const size_t n = vs->slot_bytes[b] * MAX_SLOTS;
            if (kind == RSP_DEVICE_HOST) {
                memcpy(img, vs->v[b][l].data, n);
            } else {
#ifdef RSP_HAVE_CUDA
                RSP_TEST_CUDA(cudaDeviceSynchronize());
                RSP_TEST_CUDA(cudaMemcpy(img, vs->v[b][l].data, n, cudaMemcpyDeviceToHost));
#endif
            }
            for (uint32_t s = 0; s < MAX_SLOTS; s++)
                for (uint64_t i = 0; i < vs->slot_bytes[b]; i++) {
                    const uint8_t w = want[s] ? rsp_test_pattern(want[s], b, l, i) : 0;
                    const uint8_t got = img[s * vs->slot_bytes[b] + i];
                    if (got != w)
                        fail_msg("after step %llu: slot %u block %s layer %u byte %llu: got %u "
                                 "want %u (pattern of step %llu)",
                                 (unsigned long long)step, s, blocks[b].name, l,
                                 (unsigned long long)i, got, w, (unsigned long long)want[s]);
                }
        }
    free(img);
}

static void forward_then_post_forks_and_removals_keep_every_byte(void **state)
{
    const rsp_device_kind kind = *(const rsp_device_kind *)*state;
    if (kind == RSP_DEVICE_CUDA)
        RSP_TEST_REQUIRE_GPU();
    rsp_pool_config cfg;
    config(&cfg, kind, 0);
    rsp_pool *pool = NULL;
    OK(rsp_pool_create(&cfg, &pool, &e_));
    OK(rsp_reader_register(&e_));
    rsp_label_id draft;
    OK(rsp_label(pool, "draft", &draft, &e_));
    views vs;
    views_get(pool, &vs);
    forward fw;
    forward_init(&fw, kind);

    rsp_rid live[LIVE];
    uint64_t last_step[LIVE] = {0}; /* step whose pattern rid i's slots hold */
    rsp_rid next_rid = 100;
    for (uint32_t i = 0; i < LIVE; i++)
        live[i] = next_rid++;

    for (uint64_t step = 1; step <= STEPS; step++) {
        rsp_row rows[LIVE];
        for (uint32_t i = 0; i < LIVE; i++)
            rows[i] = (rsp_row){.rid = live[i], .label = RSP_LABEL_MAIN, .span = 1};
        const rsp_fork post = {RSP_LABEL_MAIN, draft, 0};
        const rsp_step st = {.step_id = step,
                             .rows = rows,
                             .num_rows = LIVE,
                             .post_forks = &post,
                             .num_post_forks = 1};
        rsp_admit_outcome out;
        OK(rsp_step_admit(pool, &st, &out, &e_));
        assert_true(out.ok);
        OK(rsp_step_plan(pool, &st, &e_));

        assert_int_equal(rsp_read_begin(), RSP_OK);
        const rsp_plan *plan = rsp_plan_ref(rsp_plan_live(pool));
        rsp_read_end();
        assert_non_null(plan);
        assert_int_equal(rsp_plan_step_id(plan), step);
        rsp_addressing a;
        OK(rsp_plan_addressing(plan, RSP_LABEL_MAIN, &a, &e_));
        assert_int_equal(a.num_rows, LIVE);

        if (step > 1 && (step - 1) % 5 == 0) {
            /* The plan's ready event comes after the previous commit's
             * device work (FIFO) and this plan copies nothing: once it
             * completes, the slots are as step - 1 left them. The model:
             * the slots of each request live since then hold its last
             * step's pattern, all others are zero. */
            OK(rsp_event_wait(pool, &a.ready, RSP_WAIT_FOREVER, &e_));
            uint64_t want[MAX_SLOTS] = {0};
            for (uint32_t i = 0; i < LIVE; i++) {
                if (!last_step[i])
                    continue;
                rsp_holding h;
                OK(rsp_holding_get(pool, live[i], RSP_LABEL_MAIN, &h, &e_));
                assert_true(h.has_state);
                want[h.index] = last_step[i];
                OK(rsp_holding_get(pool, live[i], draft, &h, &e_));
                assert_true(h.has_state);
                want[h.index] = last_step[i];
            }
            check_slots(kind, &vs, want, step - 1);
        }

        const rsp_event done = forward_start(&fw, &vs, &a, step);
        /* every third step, a request goes away while its step is in flight */
        const uint32_t victim = (uint32_t)(step % LIVE);
        const bool removing = step % 3 == 0;
        if (removing)
            OK(rsp_remove(pool, live[victim], &e_));
        rsp_msg m = {.kind = RSP_MSG_COMMIT, .step = st, .event = done};
        rsp_ticket *t = NULL;
        OK(rsp_post(pool, &m, &t, RSP_WAIT_FOREVER, &e_));
        forward_finish(&fw, pool, &vs, &a, step);
        rsp_reply reply;
        assert_int_equal(rsp_wait(t, RSP_WAIT_FOREVER, &reply), RSP_OK);
        rsp_plan_unref(plan);

        for (uint32_t i = 0; i < LIVE; i++)
            last_step[i] = step;
        if (removing) {
            live[victim] = next_rid++;
            last_step[victim] = 0;
        }
    }
    forward_fini(&fw);
    rsp_reader_unregister();
    rsp_pool_destroy(pool);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_pool_without_a_device_fails_creation_with_enodev),
        RSP_TEST_BOTH(forward_then_post_forks_and_removals_keep_every_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
