/*
 * The readers' checkpoint key index (keys.h): liburcu's rculfhash, one
 * writer (the owner), lock-free readers of both flavours, removed nodes
 * freed by the publisher after a grace period of both.
 * SPDX-License-Identifier: Apache-2.0
 *
 * _LGPL_SOURCE stays undefined: cds_lfht_* are library calls
 * (liburcu-cds). The table is tied to the urcu-memb flavour, which liburcu
 * uses only to resize and to destroy; neither happens while readers run
 * (no CDS_LFHT_AUTO_RESIZE, destroy after the publisher's last grace
 * period), so a QSBR reader's lookup is as safe as a default one's: what
 * keeps a node alive is our grace period over both flavours (G1/G2).
 * cds_lfht_add and cds_lfht_del ask for a read-side lock against
 * concurrent removers; the owner is the only one, and it unlinks each node
 * before deferring its free, so its own traversals never meet a freed node.
 */
#include "publish/keys.h"

#include <stdlib.h>

#include <urcu/urcu-memb.h>

#include <urcu/rculfhash.h>

#include "util/assert.h"
#include "util/error.h"
#include "util/hb.h"
#include "util/sync.h"

#define NODE_ALIGN 64

typedef struct key_node {
    struct cds_lfht_node ht; /* the table's links (liburcu) */
    uint64_t key;            /* immutable while linked (K1) */
    uint64_t loc;            /* tier << 32 | slot: owner stores, readers load (K3) */
    rsp__deferred free;      /* the owner's free list link, then the retirement */
} __attribute__((aligned(NODE_ALIGN))) key_node;

struct rsp__keys {
    struct cds_lfht *ht;
    rsp__publisher *pub;  /* frees removed nodes after a grace period */
    rsp__deferred *spare; /* owner only: reserved nodes (rsp__keys_reserve) */
    uint32_t spare_len;   /* owner only */
    uint32_t count;       /* owner only: keys linked */
};

/* splitmix64's finalizer: the engine's keys may be sequential or share low
 * bits; the table buckets by the low bits and orders by their reverse. */
static unsigned long hash_key(uint64_t key)
{
    key ^= key >> 30;
    key *= 0xbf58476d1ce4e5b9ull;
    key ^= key >> 27;
    key *= 0x94d049bb133111ebull;
    key ^= key >> 31;
    return (unsigned long)key;
}

static int match_key(struct cds_lfht_node *node, const void *key)
{
    const key_node *n = caa_container_of(node, key_node, ht);
    rsp__hb_acquire(n); /* K2 (TSan mirror of K1) */
    return n->key == *(const uint64_t *)key;
}

static uint64_t loc_of(rsp_tier tier, uint32_t slot)
{
    return (uint64_t)tier << 32 | slot;
}

static void node_free(rsp__deferred *d)
{
    free(caa_container_of(d, key_node, free));
}

rsp_status rsp__keys_create(rsp__publisher *pub, uint32_t capacity, rsp__keys **out, rsp_error *err)
{
    rsp__keys *k = calloc(1, sizeof *k);
    if (!k)
        return rsp__fail(err, RSP_ENOMEM, "out of memory for the checkpoint key index");
    unsigned long buckets = 1;
    while (buckets < capacity && buckets < RSP__KEYS_MAX_BUCKETS)
        buckets <<= 1;
    /* init = min = max: every bucket allocated now, never resized. */
    k->ht = cds_lfht_new_flavor(buckets, buckets, buckets, 0, &urcu_memb_flavor, NULL);
    if (!k->ht) {
        free(k);
        return rsp__fail(err, RSP_ENOMEM, "cannot create the checkpoint key index (%lu buckets)",
                         buckets);
    }
    k->pub = pub;
    *out = k;
    return RSP_OK;
}

void rsp__keys_clear(rsp__keys *k)
{
    if (!k)
        return;
    struct cds_lfht_iter it;
    cds_lfht_first(k->ht, &it);
    for (struct cds_lfht_node *n; (n = cds_lfht_iter_get_node(&it)) != NULL;) {
        cds_lfht_next(k->ht, &it); /* before the delete: the iterator holds n's next */
        (void)cds_lfht_del(k->ht, n);
        rsp__publisher_defer(k->pub, &caa_container_of(n, key_node, ht)->free);
    }
    k->count = 0;
}

void rsp__keys_destroy(rsp__keys *k)
{
    if (!k)
        return;
    (void)cds_lfht_destroy(k->ht, NULL); /* empty: rsp__keys_clear ran */
    while (k->spare) {
        rsp__deferred *d = k->spare;
        k->spare = d->next;
        node_free(d);
    }
    free(k);
}

rsp_status rsp__keys_reserve(rsp__keys *k, uint32_t n, rsp_error *err)
{
    while (k->spare_len < n) {
        /* One cache line a node: links, key and loc in one miss. */
        key_node *node = aligned_alloc(NODE_ALIGN, sizeof *node);
        if (!node)
            return rsp__fail(err, RSP_ENOMEM, "out of memory for the checkpoint key index");
        cds_lfht_node_init(&node->ht);
        node->free.next = k->spare;
        node->free.fn = node_free;
        k->spare = &node->free;
        k->spare_len++;
    }
    return RSP_OK;
}

/* Owner: key's node, or NULL (the owner is the only writer: its own
 * lookups see every change it made). */
static key_node *find(const rsp__keys *k, uint64_t key)
{
    struct cds_lfht_iter it;
    cds_lfht_lookup(k->ht, hash_key(key), match_key, &key, &it);
    struct cds_lfht_node *n = cds_lfht_iter_get_node(&it);
    return n ? caa_container_of(n, key_node, ht) : NULL;
}

void rsp__keys_set(rsp__keys *k, uint64_t key, rsp_tier tier, uint32_t slot)
{
    key_node *n = find(k, key);
    if (n) {
        rsp__store_relaxed_u64(&n->loc, loc_of(tier, slot)); /* K3 */
        return;
    }
    RSP__ASSERT(k->spare_len > 0); /* the caller reserved one per new key */
    rsp__deferred *d = k->spare;
    k->spare = d->next;
    k->spare_len--;
    n = caa_container_of(d, key_node, free);
    n->key = key;
    rsp__store_relaxed_u64(&n->loc, loc_of(tier, slot));
    rsp__hb_release(n);                         /* K1 (TSan mirror) */
    cds_lfht_add(k->ht, hash_key(key), &n->ht); /* K1: full barrier, then linked */
    k->count++;
}

void rsp__keys_remove(rsp__keys *k, uint64_t key)
{
    key_node *n = find(k, key);
    if (!n)
        return;
    (void)cds_lfht_del(k->ht, &n->ht); /* unlinked before this returns (one writer) */
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
    struct cds_lfht_iter it;
    cds_lfht_lookup(k->ht, hash_key(key), match_key, &key, &it); /* K2 */
    struct cds_lfht_node *n = cds_lfht_iter_get_node(&it);
    if (!n)
        return err ? no_key(key, err) : RSP_ENOKEY;
    const uint64_t loc = rsp__load_relaxed_u64(&caa_container_of(n, key_node, ht)->loc); /* K3 */
    if (out)
        *out = (rsp_checkpoint_loc){
            .key = key, .tier = (rsp_tier)(loc >> 32), .slot = (int32_t)(uint32_t)loc};
    return RSP_OK;
}
