/*
 * The readers' checkpoint key index (keys.h): a fixed-capacity chained hash
 * table of rsp's own, one writer (the owner), lock-free readers of both
 * flavours, removed nodes freed by the publisher after a grace period of
 * both. SPDX-License-Identifier: Apache-2.0
 *
 * Why not liburcu's rculfhash (which this file used before): its creation
 * allocates the table and the bucket array with calloc and assert()s the
 * result (liburcu 0.13, src/rculfhash.c _cds_lfht_new,
 * rculfhash-internal.h __default_alloc_cds_lfht, rculfhash-mm-mmap.c /
 * -order.c alloc_bucket_table; Debian builds it with assertions on), so an
 * allocation failure aborted the process. Its memory-management plugin
 * (struct cds_lfht_mm_type) cannot help: the plugin must build the opaque
 * struct cds_lfht, whose layout is not public, and alloc_bucket_table
 * returns void. The capacity is known at create, so a fixed table is
 * enough: every allocation is ours and can fail cleanly.
 *
 * Shape: `mask + 1` bucket heads (a power of two >= capacity, at most
 * RSP__KEYS_MAX_BUCKETS), each a singly linked chain of nodes, newest
 * first. Links are the only words both sides touch:
 *   - every store of a link (a bucket head or a node's next) is a release
 *     store by the owner, the only writer (K1, and the unlink of G1);
 *   - every load of a link by a reader is an acquire load (K2): a reader
 *     that reaches a node through any link sees everything the owner wrote
 *     before that link's store, in particular the node's key and the loc
 *     it was linked with.
 * A node's key never changes while it is reachable; its loc may (K3, one
 * relaxed 64-bit word). An unlinked node keeps its next: a reader standing
 * on it walks on into the live chain (the classic RCU list removal), and
 * the node is freed only after a grace period of both flavours (G1/G2,
 * rsp__publisher_defer).
 */
#include "publish/keys.h"

#include <stddef.h>
#include <stdlib.h>

#include "util/assert.h"
#include "util/error.h"
#include "util/mem.h"
#include "util/sync.h"

#define NODE_ALIGN 64

typedef struct key_node {
    struct key_node *next; /* the chain: owner stores release, readers load acquire (K1/K2) */
    uint64_t key;          /* immutable while reachable (K1) */
    uint64_t loc;          /* tier << 32 | slot: owner stores, readers load (K3) */
    rsp__deferred free;    /* the owner's spare list link, then the retirement */
} __attribute__((aligned(NODE_ALIGN))) key_node;

struct rsp__keys {
    key_node **bucket;    /* mask + 1 chain heads; the array is immutable after create */
    uint64_t mask;        /* buckets - 1 */
    rsp__publisher *pub;  /* frees removed nodes after a grace period */
    rsp__deferred *spare; /* owner only: reserved nodes (rsp__keys_reserve) */
    uint32_t spare_len;   /* owner only */
    uint32_t count;       /* owner only: keys linked */
};

#define NODE_OF_FREE(d) ((key_node *)((char *)(d)-offsetof(key_node, free)))

/* splitmix64's finalizer: the engine's keys may be sequential or share low
 * bits; the table buckets by the low bits of the mix. */
static inline uint64_t hash_key(uint64_t key)
{
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return key;
}

static inline uint64_t loc_of(rsp_tier tier, uint32_t slot)
{
    return (uint64_t)tier << 32 | slot;
}

/* K2: a link as a reader loads it. */
static inline key_node *load_link(key_node *const *link)
{
    return rsp__load_acquire_ptr((void *const *)link);
}

/* K1, G1: the owner stores a link (the node it names, if any, is filled). */
static inline void store_link(key_node **link, key_node *n)
{
    rsp__store_release_ptr((void **)link, n);
}

static void node_free(rsp__deferred *d)
{
    free(NODE_OF_FREE(d));
}

rsp_status rsp__keys_create(rsp__publisher *pub, uint32_t capacity, rsp__keys **out, rsp_error *err)
{
    uint64_t buckets = 1;
    while (buckets < capacity && buckets < RSP__KEYS_MAX_BUCKETS)
        buckets <<= 1;
    rsp__keys *k = calloc(1, sizeof *k);
    /* Zero pages, touched lazily: the same cost at 16 buckets and 2^20. */
    key_node **bucket = rsp__lazy_calloc(buckets, sizeof *bucket);
    if (!k || !bucket) {
        free(k);
        rsp__lazy_free(bucket, buckets, sizeof *bucket);
        return rsp__fail(err, RSP_ENOMEM,
                         "out of memory for the checkpoint key index (%llu buckets)",
                         (unsigned long long)buckets);
    }
    k->bucket = bucket;
    k->mask = buckets - 1;
    k->pub = pub;
    *out = k;
    return RSP_OK;
}

void rsp__keys_clear(rsp__keys *k)
{
    if (!k)
        return;
    for (uint64_t b = 0; b <= k->mask && k->count; b++) {
        key_node *n = k->bucket[b]; /* the owner's own links: a plain read */
        if (!n)
            continue;
        store_link(&k->bucket[b], NULL); /* G1: the whole chain unlinked at once */
        while (n) {
            key_node *next = n->next; /* before the defer: it may free n at once */
            k->count--;
            n->free.fn = node_free;
            rsp__publisher_defer(k->pub, &n->free); /* G1/G2; n->next stays for readers */
            n = next;
        }
    }
    k->count = 0;
}

void rsp__keys_destroy(rsp__keys *k)
{
    if (!k)
        return;
    while (k->spare) {
        rsp__deferred *d = k->spare;
        k->spare = d->next;
        node_free(d);
    }
    rsp__lazy_free(k->bucket, k->mask + 1, sizeof *k->bucket);
    free(k);
}

rsp_status rsp__keys_reserve(rsp__keys *k, uint32_t n, rsp_error *err)
{
    while (k->spare_len < n) {
        /* One cache line a node: link, key and loc in one miss. */
        key_node *node = aligned_alloc(NODE_ALIGN, sizeof *node);
        if (!node)
            return rsp__fail(err, RSP_ENOMEM, "out of memory for the checkpoint key index");
        node->free.next = k->spare;
        node->free.fn = node_free;
        k->spare = &node->free;
        k->spare_len++;
    }
    return RSP_OK;
}

/* Owner: the link that names key's node, or the chain's terminating NULL
 * link. The owner is the only writer: plain reads of its own links. */
static key_node **find_link(const rsp__keys *k, uint64_t key)
{
    key_node **link = &k->bucket[hash_key(key) & k->mask];
    while (*link && (*link)->key != key)
        link = &(*link)->next;
    return link;
}

void rsp__keys_set(rsp__keys *k, uint64_t key, rsp_tier tier, uint32_t slot)
{
    key_node **link = find_link(k, key);
    if (*link) {
        rsp__store_relaxed_u64(&(*link)->loc, loc_of(tier, slot)); /* K3 */
        return;
    }
    RSP__ASSERT(k->spare_len > 0); /* the caller reserved one per new key */
    rsp__deferred *d = k->spare;
    k->spare = d->next;
    k->spare_len--;
    key_node *n = NODE_OF_FREE(d);
    key_node **head = &k->bucket[hash_key(key) & k->mask];
    n->next = *head; /* not reachable yet: plain stores */
    n->key = key;
    n->loc = loc_of(tier, slot);
    store_link(head, n); /* K1: the node whole, then linked */
    k->count++;
}

void rsp__keys_remove(rsp__keys *k, uint64_t key)
{
    key_node **link = find_link(k, key);
    key_node *n = *link;
    if (!n)
        return;
    store_link(link, n->next); /* G1: unlinked; n->next kept for readers on n */
    n->free.fn = node_free;
    rsp__publisher_defer(k->pub, &n->free); /* G1/G2 */
    k->count--;
}

uint32_t rsp__keys_count(const rsp__keys *k)
{
    return k ? k->count : 0;
}

/* A miss, out of the hit's path (a message costs a formatting). */
__attribute__((noinline, cold)) static rsp_status no_key(uint64_t key, rsp_error *err)
{
    return rsp__fail(err, RSP_ENOKEY, "rsp_checkpoint_lookup: no checkpoint under key %llu",
                     (unsigned long long)key);
}

rsp_status rsp__keys_lookup(const rsp__keys *k, uint64_t key, rsp_checkpoint_loc *out,
                            rsp_error *err)
{
    rsp_status st = rsp__read_section_check("rsp_checkpoint_lookup", err);
    if (__builtin_expect(st != RSP_OK, 0))
        return st;
    if (!k)
        return err ? no_key(key, err) : RSP_ENOKEY;
    const key_node *n = load_link(&k->bucket[hash_key(key) & k->mask]); /* K2 */
    while (n && n->key != key)
        n = load_link(&n->next); /* K2 */
    if (!n)
        return err ? no_key(key, err) : RSP_ENOKEY;
    const uint64_t loc = rsp__load_relaxed_u64(&n->loc); /* K3 */
    if (out)
        *out = (rsp_checkpoint_loc){
            .key = key, .tier = (rsp_tier)(loc >> 32), .slot = (int32_t)(uint32_t)loc};
    return RSP_OK;
}
