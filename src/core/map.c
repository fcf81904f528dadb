/* The core's u64 -> u32 map (map.h). SPDX-License-Identifier: Apache-2.0 */
#include "map.h"

#include <stdlib.h>

#include "util/assert.h"

/* A table of n entries (a power of two), all empty; NULL on ENOMEM. */
static rsp__map_entry *table_new(uint64_t n)
{
    rsp__map_entry *t = malloc((size_t)n * sizeof *t);
    for (uint64_t i = 0; t && i < n; i++)
        t[i].val = RSP__MAP_EMPTY;
    return t;
}

/* The size that holds n entries at load <= 1/2, from `from` (0: none
 * fits: more than 2^31 entries). */
static uint64_t size_for(uint64_t from, uint64_t n)
{
    uint64_t s = from < 64 ? 64 : from;
    while (n * 2 > s)
        s *= 2;
    return s > UINT32_MAX / 2 + 1 ? 0 : s;
}

rsp_status rsp__map_init(rsp__map *m, uint64_t n)
{
    m->t = NULL;
    m->size = m->count = 0;
    uint64_t s = size_for(64, n);
    rsp__map_entry *t = s ? table_new(s) : NULL;
    if (!t)
        return RSP_ENOMEM;
    m->t = t;
    m->size = (uint32_t)s;
    return RSP_OK;
}

void rsp__map_fini(rsp__map *m)
{
    free(m->t);
    m->t = NULL;
    m->size = m->count = 0;
}

rsp_status rsp__map_grow(rsp__map *m, uint64_t more)
{
    uint64_t n = (uint64_t)m->count + more;
    if (n * 2 <= m->size)
        return RSP_OK;
    uint64_t s = size_for(m->size, n);
    rsp__map_entry *t = s ? table_new(s) : NULL;
    if (!t)
        return RSP_ENOMEM;
    rsp__map_entry *old = m->t;
    uint32_t old_n = m->size;
    m->t = t;
    m->size = (uint32_t)s;
    for (uint32_t i = 0; i < old_n; i++)
        if (old[i].val != RSP__MAP_EMPTY)
            m->t[rsp__map_probe(m, old[i].key)] = old[i];
    free(old);
    return RSP_OK;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
void rsp__map_del(rsp__map *m, uint64_t key)
{
    uint32_t i = rsp__map_probe(m, key);
    if (m->t[i].val != RSP__MAP_EMPTY)
        rsp__map_del_at(m, i);
}

void rsp__map_del_at(rsp__map *m, uint32_t i)
{
    RSP__ASSERT(i < m->size && m->t[i].val != RSP__MAP_EMPTY);
    uint32_t mask = m->size - 1;
    m->t[i].val = RSP__MAP_EMPTY;
    m->count--;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (m->t[j].val == RSP__MAP_EMPTY)
            return;
        uint32_t home = (uint32_t)rsp__mix64(m->t[j].key) & mask;
        /* Move j back to i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            m->t[i] = m->t[j];
            m->t[j].val = RSP__MAP_EMPTY;
            i = j;
        }
    }
}
