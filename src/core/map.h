/*
 * A u64 -> u32 map: open addressing, linear probing, backward-shift
 * deletion (no tombstones), load at most 1/2. The core's one hash map: the
 * rid table (rid -> request record) and the checkpoint key table (key ->
 * checkpoint record) are two of them. SPDX-License-Identifier: Apache-2.0
 *
 * Lowest module of src/core/ beside layout and work: calls nothing of the
 * core. Single caller at a time (the core's). Iterating it would give an
 * order that depends on the hashes: nothing on an allocation or release
 * path does (core_impl.h).
 */
#ifndef RSP_CORE_MAP_H
#define RSP_CORE_MAP_H

#include <stdbool.h>
#include <stdint.h>

#include <rsp/rsp.h>

#define RSP__MAP_EMPTY UINT32_MAX

typedef struct rsp__map_entry {
    uint64_t key;
    uint32_t val; /* RSP__MAP_EMPTY: the entry is empty */
} rsp__map_entry;

typedef struct rsp__map {
    rsp__map_entry *t;
    uint32_t size;  /* a power of two */
    uint32_t count; /* entries in use */
} rsp__map;

/* A 64-bit finaliser (murmur3's): the map's hash, plan digests. */
static inline uint64_t rsp__mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* An empty map with room for `n` entries (size: the power of two at least
 * 2n, 64 at least). RSP_ENOMEM: *m is empty (size 0), fini is still safe.
 * O(size). */
rsp_status rsp__map_init(rsp__map *m, uint64_t n);
void rsp__map_fini(rsp__map *m);

/* The entry of key, or the empty entry where it would go. Inline: the rid
 * table's probe is on every lookup without a hint. O(1) expected. */
static inline uint32_t rsp__map_probe(const rsp__map *m, uint64_t key)
{
    uint32_t mask = m->size - 1;
    uint32_t i = (uint32_t)rsp__mix64(key) & mask;
    while (m->t[i].val != RSP__MAP_EMPTY && m->t[i].key != key)
        i = (i + 1) & mask;
    return i;
}

/* The value of key, RSP__MAP_EMPTY when absent. O(1) expected. */
static inline uint32_t rsp__map_get(const rsp__map *m, uint64_t key)
{
    return m->t[rsp__map_probe(m, key)].val;
}

/* Grow the table (doubling) until count + more fit at load <= 1/2.
 * RSP_ENOMEM: nothing changed. O(size). Called by rsp__map_reserve. */
rsp_status rsp__map_grow(rsp__map *m, uint64_t more);

/* Room for `more` new keys, so that many rsp__map_put of new keys cannot
 * fail. RSP_ENOMEM: nothing changed. Inline: every ingest and admit with
 * a new rid asks. O(1), O(size) when it grows. */
static inline rsp_status rsp__map_reserve(rsp__map *m, uint64_t more)
{
    return ((uint64_t)m->count + more) * 2 <= m->size ? RSP_OK : rsp__map_grow(m, more);
}

/* Set key -> val (val != RSP__MAP_EMPTY). A new key needs room
 * (rsp__map_reserve). O(1) expected. */
static inline void rsp__map_put(rsp__map *m, uint64_t key, uint32_t val)
{
    uint32_t i = rsp__map_probe(m, key);
    m->count += m->t[i].val == RSP__MAP_EMPTY;
    m->t[i].key = key;
    m->t[i].val = val;
}

/* Set the empty entry i (from rsp__map_probe of key, with no change to
 * the map since) to key -> val: rsp__map_put without a second probe. A
 * new key needs room (rsp__map_reserve, before the probe: a growth moves
 * every entry). O(1). */
static inline void rsp__map_put_at(rsp__map *m, uint32_t i, uint64_t key, uint32_t val)
{
    m->count += m->t[i].val == RSP__MAP_EMPTY;
    m->t[i].key = key;
    m->t[i].val = val;
}

/* Remove key (absent: nothing happens). O(1) expected. */
void rsp__map_del(rsp__map *m, uint64_t key);

/* Remove the entry at i, which holds a key (i from rsp__map_probe, with no
 * change to the map since): rsp__map_del without a second probe. O(1)
 * expected. */
void rsp__map_del_at(rsp__map *m, uint32_t i);

#endif
