/* Array growth (util/mem.h). SPDX-License-Identifier: Apache-2.0 */
#include "util/mem.h"

#include <stdlib.h>

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
