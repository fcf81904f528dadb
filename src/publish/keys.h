/*
 * The readers' checkpoint key index: key -> (tier, slot) in a fixed-capacity
 * chained hash table of rsp's own (keys.c), written by the owner only, read
 * without a lock by registered readers of either flavour
 * (rsp_checkpoint_lookup). SPDX-License-Identifier: Apache-2.0
 *
 * Knows nothing of checkpoints beyond the pair it stores: the owner (pool.c)
 * tells it what the core's report says changed.
 *
 * Synchronisation table:
 *
 *   operation                        | thread
 *   ---------------------------------+-------------------------------------
 *   rsp__keys_create / _destroy      | one thread (create before the owner
 *                                    | starts; destroy after the publisher's)
 *   rsp__keys_clear                  | one thread, after the owner stopped,
 *                                    | before rsp__publisher_destroy
 *   rsp__keys_reserve, _set, _remove | the owner thread only (one writer)
 *   rsp__keys_count                  | the owner thread
 *   rsp__keys_lookup                 | registered reader, inside a section
 *
 * Pairs (docs/ordering.md):
 *   K1/K2  a new key. Owner K1: fills the node (next, key, loc), then
 *          links it at its chain's head with a release store. Reader K2:
 *          in a section, acquire loads of the head and of each next it
 *          follows, then reads key and loc. Every link store is the
 *          owner's and a release, so a reader that reaches a node by any
 *          link finds it whole; it finds it or not at all.
 *   K3     a key that moved (replaced, demoted): the owner stores loc
 *          (one relaxed 64-bit store of tier and slot together), readers
 *          load it relaxed: each sees the old or the new pair, never half of
 *          each. Relaxed is enough: loc names a slot, the bytes behind it
 *          are ordered by the pool's device stream, not by memory.
 *   G1/G2  a removed key's node: the owner unlinks it (a release store of
 *          its predecessor's link: the node's own next stays, so a reader
 *          on it walks on into the live chain), the publisher frees it
 *          after a grace period of both flavours (rsp__publisher_defer),
 *          so no section that could have found it is still open.
 *
 * Buckets are sized once, at creation, for the pool's checkpoint capacity
 * (a power of two >= max_checkpoints + max_host_checkpoints, at most
 * RSP__KEYS_MAX_BUCKETS; past it chains grow): never resized, so no grace
 * period of the table's own. Every allocation is rsp's and fails cleanly
 * (RSP_ENOMEM): the bucket array at create, one node a new key at reserve.
 * (Not liburcu's rculfhash: its creation assert()s its callocs, so a
 * failure would abort the process. keys.c says why its memory-management
 * plugin could not help.)
 */
#ifndef RSP_PUBLISH_KEYS_H
#define RSP_PUBLISH_KEYS_H

#include <rsp/rsp.h>

#include "publish/publish.h"

typedef struct rsp__keys rsp__keys;

/* Buckets at most (8 MiB of chain heads); past it chains grow. */
#define RSP__KEYS_MAX_BUCKETS (1u << 20)

/* An index for up to `capacity` keys (> 0) whose removed nodes pub frees
 * after a grace period. RSP_ENOMEM, nothing left allocated (two
 * allocations: the index, and its bucket array by rsp__lazy_calloc). Any
 * thread. Cost: O(1) (8 bytes a bucket of zero pages, touched lazily). */
rsp_status rsp__keys_create(rsp__publisher *pub, uint32_t capacity, rsp__keys **out,
                            rsp_error *err);

/* Unlink every key and hand its node to the publisher (freed by the grace
 * period of rsp__publisher_destroy). After the owner stopped. NULL: no-op.
 * O(buckets) (up to the last non-empty one) + O(keys). */
void rsp__keys_clear(rsp__keys *k);

/* Free the table and the spare nodes (empty: rsp__keys_clear ran, and the
 * publisher's destroy freed the linked nodes after its grace period).
 * NULL: no-op. */
void rsp__keys_destroy(rsp__keys *k);

/* Owner: have nodes for n new keys ready, so that the rsp__keys_set calls
 * after a core change cannot fail. RSP_ENOMEM, nothing changed. O(n)
 * mallocs at most (nodes are kept for reuse). */
rsp_status rsp__keys_reserve(rsp__keys *k, uint32_t n, rsp_error *err);

/* Owner: key is stored at (tier, slot): a known key moves in place (K3), a
 * new one takes a reserved node (K1; the caller reserved one per new key).
 * O(1) expected: one walk of the key's chain, one link. */
void rsp__keys_set(rsp__keys *k, uint64_t key, rsp_tier tier, uint32_t slot);

/* Owner: key is gone (G1/G2). A key not in the index: nothing. O(1)
 * expected: one walk of the key's chain. */
void rsp__keys_remove(rsp__keys *k, uint64_t key);

/* Owner: keys in the index. O(1). */
uint32_t rsp__keys_count(const rsp__keys *k);

/* Reader: RSP_OK and *out (out may be NULL); RSP_ENOKEY (k NULL: a pool
 * without checkpoints; or not in the index); RSP_ENOTREG / RSP_EINVAL
 * outside a read section. Registered reader of either flavour. Cost: a hash,
 * inline acquire loads along the key's chain (at most 1 + load factor
 * <= 1 nodes expected: the head's cache line and one a node), a relaxed
 * load; a message only on failure with err set (pass NULL to probe
 * cheaply). */
rsp_status rsp__keys_lookup(const rsp__keys *k, uint64_t key, rsp_checkpoint_loc *out,
                            rsp_error *err);

#endif
