/*
 * Shared by the tests/cuda suites: is there a GPU, and the visible skip.
 * SPDX-License-Identifier: Apache-2.0
 *
 * GPU-only tests call RSP_TEST_REQUIRE_GPU() first: without a usable CUDA
 * device (no driver, no GPU, or a build without CUDA) they print
 * "skipped: no CUDA device (<why>)" and report SKIPPED through cmocka, so a
 * CPU-only run never counts them as passed.
 */
#ifndef RSP_TESTS_CUDA_GPU_H
#define RSP_TESTS_CUDA_GPU_H

#include <stdbool.h>
#include <stdio.h>

#ifdef RSP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* True when CUDA device 0 can be used; otherwise why[] says why. Main
 * thread; the first call costs the CUDA runtime's start-up. */
static inline bool rsp_test_gpu(char *why, size_t n)
{
#ifdef RSP_HAVE_CUDA
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return false;
    }
    if (count == 0) {
        snprintf(why, n, "cudaGetDeviceCount found 0 devices");
        return false;
    }
    return true;
#else
    snprintf(why, n, "rsp built without CUDA");
    return false;
#endif
}

#define RSP_TEST_REQUIRE_GPU()                                                                     \
    do {                                                                                           \
        char rsp__why[160];                                                                        \
        if (!rsp_test_gpu(rsp__why, sizeof rsp__why)) {                                            \
            print_message("skipped: no CUDA device (%s)\n", rsp__why);                             \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* Register scenario fn twice, as "host: fn" and "cuda: fn", its state
 * pointing at the suite's `kind_host` / `kind_cuda` (rsp_device_kind
 * variables the suite defines); the CUDA half calls RSP_TEST_REQUIRE_GPU. */
#define RSP_TEST_BOTH(fn)                                                                          \
    {"host: " #fn, fn, NULL, NULL, &kind_host},                                                    \
    {                                                                                              \
        "cuda: " #fn, fn, NULL, NULL, &kind_cuda                                                   \
    }

/* Abort the test on a CUDA error, naming the call. */
#ifdef RSP_HAVE_CUDA
#define RSP_TEST_CUDA(call)                                                                        \
    do {                                                                                           \
        cudaError_t rsp__e = (call);                                                               \
        if (rsp__e != cudaSuccess)                                                                 \
            fail_msg("%s: %s", #call, cudaGetErrorString(rsp__e));                                 \
    } while (0)
#endif

#endif
