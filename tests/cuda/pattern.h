/*
 * The byte a test "forward" writes at (seed, block, layer, offset); never 0,
 * so a slot that should be zero never passes by accident. Shared by C tests
 * and the CUDA test kernels (gpu_helpers.cu), so host and GPU agree.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_TESTS_CUDA_PATTERN_H
#define RSP_TESTS_CUDA_PATTERN_H

#include <stdint.h>

#ifdef __CUDACC__
#define RSP_TEST_HD __host__ __device__
#else
#define RSP_TEST_HD
#endif

static inline RSP_TEST_HD uint8_t rsp_test_pattern(uint64_t seed, uint32_t block, uint32_t layer,
                                                   uint64_t offset)
{
    uint64_t x =
        seed * 0x9e3779b97f4a7c15ull + block * 0x100000001b3ull + layer * 0x1000193ull + offset;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (uint8_t)(1 + x % 255);
}

#endif
