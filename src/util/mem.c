/* Array growth (util/mem.h). SPDX-License-Identifier: Apache-2.0 */
#include "util/mem.h"

#include <stdlib.h>
#include <sys/mman.h>

rsp_status rsp__grow_slow(void **arr, uint32_t *cap, uint64_t need, size_t size)
{
    if (need <= *cap)
        return RSP_OK;
    if (need > UINT32_MAX / 2)
        return RSP_ENOMEM;
    uint64_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    if ((uint64_t)n > SIZE_MAX / size)
        return RSP_ENOMEM;
    void *p = realloc(*arr, (size_t)n * size);
    if (!p)
        return RSP_ENOMEM;
    *arr = p;
    *cap = (uint32_t)n;
    return RSP_OK;
}

void *rsp__lazy_calloc(uint64_t n, size_t size)
{
    if (size && n > (uint64_t)(SIZE_MAX / 2) / size)
        return NULL;
    uint64_t bytes = n * size;
    if (bytes < RSP__LAZY_MIN)
        return calloc(n ? (size_t)n : 1, size ? size : 1);
    void *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void rsp__lazy_free(void *p, uint64_t n, size_t size)
{
    if (!p)
        return;
    if (n * size < RSP__LAZY_MIN) /* as it was allocated: it did not overflow */
        free(p);
    else
        munmap(p, (size_t)(n * size));
}
