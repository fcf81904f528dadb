/*
 * Internal: the one rounding rule and the one array growth rule.
 * SPDX-License-Identifier: Apache-2.0
 */
#ifndef RSP_UTIL_MEM_H
#define RSP_UTIL_MEM_H

#include <stddef.h>
#include <stdint.h>

#include <rsp/rsp.h>

/** n rounded up to a multiple of a (a power of two). Pure, O(1). The caller
 * keeps n at most SIZE_MAX - a (every use sizes an object it then allocates,
 * bounded far below that). */
static inline size_t rsp__align_up(size_t n, size_t a)
{
    return (n + a - 1) & ~(a - 1);
}

/**
 * Grow the array *arr of elements of `size` bytes so that `need` of them fit
 * (*cap is its capacity in elements). Capacity doubles from 16, so appends
 * cost O(1) amortised and a warm array never allocates again. RSP_ENOMEM
 * (array and capacity unchanged) when realloc fails or `need` exceeds
 * UINT32_MAX / 2 elements; RSP_OK with nothing done when it already fits.
 * Whatever thread owns the array; O(need) on growth, O(1) otherwise.
 */
rsp_status rsp__grow_slow(void **arr, uint32_t *cap, uint64_t need, size_t size);
static inline rsp_status rsp__grow(void **arr, uint32_t *cap, uint64_t need, size_t size)
{
    /* Inline: a step reserves ~20 arrays that all fit already. */
    return need <= *cap ? RSP_OK : rsp__grow_slow(arr, cap, need, size);
}

/**
 * A zero-filled array of n elements of `size` bytes that costs the same to
 * allocate and free for any n: from RSP__LAZY_MIN bytes up an anonymous
 * mapping (the kernel hands out zero pages on first touch; calloc would
 * too the first time, but glibc raises its mapping threshold up to 32 MiB
 * after freeing one such block, and from then on serves and memsets arrays
 * below it from the heap, which a pool created after another's destroy
 * paid in full), below it calloc. NULL when out of memory or n * size is
 * absurd. Free with rsp__lazy_free(p, n, size), same n and size. Any
 * thread; O(1) plus the pages later touched.
 */
void *rsp__lazy_calloc(uint64_t n, size_t size);
void rsp__lazy_free(void *p, uint64_t n, size_t size);
#define RSP__LAZY_MIN ((uint64_t)256 << 10)

#endif
