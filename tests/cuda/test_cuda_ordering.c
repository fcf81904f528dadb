/*
 * test_cuda_ordering: the CUDA ordering contract (ARCHITECTURE "Ordering
 * contract (CUDA)"), with a real forward kernel on the caller's streams.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Per step, as an engine drives the pool:
 *   plan    pool stream: BUFFER + UPLOAD of the step's addressing -> ready
 *   forward caller stream: wait(ready); a slow kernel reads slot_indices
 *           from the uploaded vector and writes its rows' slots -> done
 *   commit  pool stream: WAIT(done); post-fork COPY rows -> fork targets;
 *           ZERO the row of a request removed during the step
 * Steps overlap (plan k+1 is submitted before commit k; two caller streams
 * alternate), hundreds of times; after each batch every byte of every slot
 * is compared with a host model. A missing wait anywhere shows as a wrong
 * byte: a copy of stale bytes, a zero overwritten by the late forward, a
 * forward writing the slots of an older plan.
 *
 * GPU only: skipped visibly without one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "cuda/fixture.h"
#include "cuda/gpu.h"
#include "cuda/gpu_helpers.h"
#include "device/device.h"

#define SLOTS 64u    /* slot 0 is the sink, never touched */
#define PER_STEP 12u /* steps in flight per batch: 5 slots each */
#define BATCHES 30u
#define LAYERS 2u

typedef struct step_slots {
    uint32_t a[2]; /* forward rows, post-forked onto b */
    uint32_t b[2];
    uint32_t c; /* forward row of a request removed during the step */
} step_slots;

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static rsp__kgeom geom_of(rsp__device *dev, const rsp__layout *lay)
{
    rsp__kgeom g;
    memset(&g, 0, sizeof g);
    g.num_blocks = lay->num_blocks;
    g.num_layers = lay->num_layers;
    for (uint32_t b = 0; b < lay->num_blocks; b++)
        g.blocks[b] = (rsp__kblock){.base = rsp__device_block_base(dev, b),
                                    .slot_bytes = lay->blocks[b].slot_bytes,
                                    .layer_bytes = lay->blocks[b].layer_bytes};
    return g;
}

/* Every byte of every block equals the model: seed[s] == 0 means zeros,
 * otherwise the forward pattern of that seed. */
static void check_all(rsp__device *dev, const rsp__layout *lay, const uint64_t *seed,
                      uint32_t batch)
{
    assert_int_equal(rsp__device_sync(dev, NULL), RSP_OK);
    for (uint32_t b = 0; b < lay->num_blocks; b++) {
        uint8_t *img = malloc(lay->blocks[b].bytes);
        assert_non_null(img);
        RSP_TEST_CUDA(cudaMemcpy(img, rsp__device_block_base(dev, b), lay->blocks[b].bytes,
                                 cudaMemcpyDeviceToHost));
        for (uint32_t l = 0; l < lay->num_layers; l++)
            for (uint32_t s = 0; s < lay->max_slots; s++) {
                const uint8_t *p = img + rsp__layout_offset(lay, b, l, s);
                for (uint64_t i = 0; i < lay->blocks[b].slot_bytes; i++) {
                    const uint8_t want =
                        seed[s] ? rsp_test_forward_byte(seed[s], b, l, i) : (uint8_t)0;
                    if (p[i] != want)
                        fail_msg("batch %u: slot %u block %s layer %u byte %llu: got %u want "
                                 "%u (seed %llu)",
                                 batch, s, lay->blocks[b].name, l, (unsigned long long)i, p[i],
                                 want, (unsigned long long)seed[s]);
                }
            }
        free(img);
    }
}

static void forward_writes_then_post_forks_and_removals_see_them(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    rsp__layout lay;
    make_layout(&lay, LAYERS, SLOTS);
    rsp__device *dev = NULL;
    rsp_error err = {0};
    if (rsp__device_create(RSP_DEVICE_CUDA, 0, &lay, &dev, &err) != RSP_OK)
        fail_msg("create: %s", err.message);
    const rsp__kgeom geom = geom_of(dev, &lay);

    cudaStream_t streams[2];
    for (int i = 0; i < 2; i++)
        RSP_TEST_CUDA(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
    cudaEvent_t fwd_done[PER_STEP];
    for (uint32_t k = 0; k < PER_STEP; k++)
        RSP_TEST_CUDA(cudaEventCreateWithFlags(&fwd_done[k], cudaEventDisableTiming));

    uint64_t model[SLOTS] = {0};
    uint64_t rng = 12345;
    int32_t idx[PER_STEP][3];
    const bool has[3] = {true, true, true};

    for (uint32_t batch = 0; batch < BATCHES; batch++) {
        /* disjoint slots for the steps of this batch: 60 of slots 1..63 */
        uint32_t perm[SLOTS - 1];
        for (uint32_t i = 0; i < SLOTS - 1; i++)
            perm[i] = i + 1;
        for (uint32_t i = SLOTS - 2; i > 0; i--) {
            const uint32_t j = (uint32_t)(lcg(&rng) % (i + 1));
            const uint32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        step_slots st[PER_STEP];
        for (uint32_t k = 0; k < PER_STEP; k++) {
            const uint32_t *p = perm + 5 * k;
            st[k] = (step_slots){{p[0], p[1]}, {p[2], p[3]}, p[4]};
        }
        /* plan k+1 goes in before commit k: steps overlap on the device */
        for (uint32_t k = 0; k <= PER_STEP; k++) {
            if (k < PER_STEP) {
                const uint64_t seed = 1000u * (batch + 1) + k + 1;
                idx[k][0] = (int32_t)st[k].a[0];
                idx[k][1] = (int32_t)st[k].a[1];
                idx[k][2] = (int32_t)st[k].c;
                test_work t;
                tw_init(&t);
                tw_buffer(&t, k, 3);
                tw_upload(&t, k, idx[k], has, 3);
                rsp_event ready;
                assert_int_equal(rsp__device_submit(dev, &t.w, &ready, NULL), RSP_OK);
                void *d_idx = NULL;
                assert_int_equal(rsp__device_buffer(dev, k, &d_idx, NULL, NULL, NULL), RSP_OK);
                cudaStream_t s = streams[k % 2];
                RSP_TEST_CUDA(cudaStreamWaitEvent(s, (cudaEvent_t)ready.handle, 0));
                RSP_TEST_CUDA(rsp_test_forward_indexed(&geom, d_idx, 3, seed, 40, s));
                RSP_TEST_CUDA(cudaEventRecord(fwd_done[k], s));
                model[st[k].a[0]] = model[st[k].a[1]] = seed;
                model[st[k].b[0]] = model[st[k].b[1]] = seed;
                model[st[k].c] = 0;
            }
            if (k > 0) {
                const uint32_t j = k - 1;
                test_work t;
                tw_init(&t);
                tw_wait(&t, rsp_event_cuda((void *)fwd_done[j]));
                const rsp__copy c[2] = {{st[j].a[0], st[j].b[0]}, {st[j].a[1], st[j].b[1]}};
                tw_copy(&t, c, 2);
                tw_zero(&t, &st[j].c, 1);
                assert_int_equal(rsp__device_submit(dev, &t.w, NULL, NULL), RSP_OK);
            }
        }
        for (int i = 0; i < 2; i++)
            RSP_TEST_CUDA(cudaStreamSynchronize(streams[i]));
        check_all(dev, &lay, model, batch);
    }

    for (uint32_t k = 0; k < PER_STEP; k++)
        (void)cudaEventDestroy(fwd_done[k]);
    for (int i = 0; i < 2; i++)
        (void)cudaStreamDestroy(streams[i]);
    rsp__device_destroy(dev);
}

/* The other direction: slots zeroed and copied by the pool are what the
 * next forward reads. The forward's stream waits on the plan event only. */
static void plan_event_orders_pool_work_before_the_forward(void **state)
{
    (void)state;
    RSP_TEST_REQUIRE_GPU();
    rsp__layout lay;
    make_layout(&lay, LAYERS, 8);
    rsp__device *dev = NULL;
    assert_int_equal(rsp__device_create(RSP_DEVICE_CUDA, 0, &lay, &dev, NULL), RSP_OK);
    const rsp__kgeom geom = geom_of(dev, &lay);
    cudaStream_t s;
    RSP_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint64_t model[8] = {0};

    for (uint32_t i = 0; i < 200; i++) {
        /* the forward writes slot 1 with seed i+1; the pool then (ordered
         * after it) forks 1 -> 2 and zeroes 1 before the next plan's event:
         * the next forward writes 3 only, reading nothing back */
        const uint32_t one = 1, three = 3;
        RSP_TEST_CUDA(rsp_test_forward(&geom, &one, 1, i + 1, 5, s));
        cudaEvent_t done;
        RSP_TEST_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
        RSP_TEST_CUDA(cudaEventRecord(done, s));
        test_work t;
        tw_init(&t);
        tw_wait(&t, rsp_event_cuda((void *)done));
        const rsp__copy c = {1, 2};
        tw_copy(&t, &c, 1);
        tw_zero(&t, &one, 1);
        rsp_event ready;
        assert_int_equal(rsp__device_submit(dev, &t.w, &ready, NULL), RSP_OK);
        RSP_TEST_CUDA(cudaStreamWaitEvent(s, (cudaEvent_t)ready.handle, 0));
        RSP_TEST_CUDA(rsp_test_forward(&geom, &three, 1, 100000 + i, 5, s));
        (void)cudaEventDestroy(done); /* safe: destruction waits for nothing */
        model[2] = i + 1;
        model[1] = 0;
        model[3] = 100000 + i;
    }
    RSP_TEST_CUDA(cudaStreamSynchronize(s));
    check_all(dev, &lay, model, 0);
    (void)cudaStreamDestroy(s);
    rsp__device_destroy(dev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(forward_writes_then_post_forks_and_removals_see_them),
        cmocka_unit_test(plan_event_orders_pool_work_before_the_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
