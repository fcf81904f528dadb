/*
 * The readers' checkpoint key index alone (src/publish/keys.c): the owner
 * (the main thread) inserts, moves and removes keys while readers of both
 * flavours look them up. One bucket (capacity 1) puts every key in one
 * chain, so removals at its head, middle and tail happen under readers
 * walking it. Run under TSan (the K1/K2 link orders, K3) and ASan (no node
 * freed while a section could reach it: G1/G2).
 * Worker threads record; the main thread asserts.
 * SPDX-License-Identifier: Apache-2.0
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "publish/keys.h"
#include "publish/publish.h"

/* Keys 1..STABLE are inserted first and never removed: every lookup of them
 * must find them, whatever the owner unlinks around them. Keys
 * STABLE + 1 .. STABLE + CHURN come and go. A key k's slot is always
 * k * 1000 + version (version < 1000). */
#define STABLE 8u
#define CHURN 56u
#define ROUNDS 300u
#define READERS 4

typedef struct reader {
    rsp__keys *k;
    bool qsbr;
    uint32_t *stop; /* main stores 1 (release) */
    uint32_t in;    /* the reader stores 1 after its first section (release) */
    rsp_status reg;
    uint64_t sections, found, bad_stable, bad_loc;
} reader;

static void *reader_main(void *arg)
{
    reader *r = arg;
    r->reg = r->qsbr ? rsp__reader_register_qsbr(NULL) : rsp__reader_register(NULL);
    if (r->reg != RSP_OK) {
        __atomic_store_n(&r->in, 1, __ATOMIC_RELEASE);
        return NULL;
    }
    while (!__atomic_load_n(r->stop, __ATOMIC_ACQUIRE)) {
        rsp__read_begin();
        for (uint64_t key = 1; key <= STABLE + CHURN; key++) {
            rsp_checkpoint_loc loc;
            rsp_status st = rsp__keys_lookup(r->k, key, &loc, NULL);
            if (st == RSP_OK) {
                r->found++;
                if (loc.key != key || loc.tier != RSP_TIER_HOST || loc.slot < 0 ||
                    (uint64_t)loc.slot / 1000 != key)
                    r->bad_loc++;
            } else if (st != RSP_ENOKEY || key <= STABLE) {
                r->bad_stable++;
            }
        }
        rsp__read_end();
        if (r->sections++ == 0)
            __atomic_store_n(&r->in, 1, __ATOMIC_RELEASE);
        if (r->qsbr)
            rsp__reader_quiescent(); /* nodes read before may go */
    }
    rsp__reader_unregister();
    return NULL;
}

static void set(rsp__keys *k, uint64_t key, uint32_t version)
{
    assert_int_equal(rsp__keys_reserve(k, 1, NULL), RSP_OK);
    rsp__keys_set(k, key, RSP_TIER_HOST, (uint32_t)(key * 1000 + version));
}

/* What the owner sees after a change, from a reader's side. */
static rsp_status lookup_now(const rsp__keys *k, uint64_t key, rsp_checkpoint_loc *loc)
{
    rsp__read_begin();
    rsp_status st = rsp__keys_lookup(k, key, loc, NULL);
    rsp__read_end();
    return st;
}

static void one_chain_under_readers_of_both_flavours(void **state)
{
    (void)state;
    rsp__publisher *pub = NULL;
    assert_int_equal(rsp__publisher_create(0, &pub, NULL), RSP_OK);
    rsp__keys *k = NULL;
    assert_int_equal(rsp__keys_create(pub, 1, &k, NULL), RSP_OK);
    for (uint64_t key = 1; key <= STABLE; key++)
        set(k, key, 0);
    uint32_t stop = 0;
    reader rd[READERS];
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++) {
        rd[i] = (reader){.k = k, .qsbr = i % 2 == 1, .stop = &stop};
        assert_int_equal(pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
    }
    /* Every reader is looking up before the owner starts (no timing). */
    for (int i = 0; i < READERS; i++)
        while (!__atomic_load_n(&rd[i].in, __ATOMIC_ACQUIRE))
            sched_yield();
    /* Each round: insert every churn key (newest at the head, stable keys
     * pushed to the tail), move every third (K3), then remove the odd ones
     * from the front, the even ones from the back. */
    for (uint32_t round = 0; round < ROUNDS; round++) {
        const uint32_t v = round % 1000;
        for (uint64_t key = STABLE + 1; key <= STABLE + CHURN; key++)
            set(k, key, v);
        for (uint64_t key = STABLE + 1; key <= STABLE + CHURN; key += 3)
            set(k, key, (v + 1) % 1000);
        /* The stable keys move too (every one, every round): a reader sees
         * the old or the new slot, both k * 1000 + something. */
        for (uint64_t key = 1; key <= STABLE; key++)
            set(k, key, v);
        assert_int_equal(rsp__keys_count(k), STABLE + CHURN);
        for (uint64_t key = STABLE + 1; key <= STABLE + CHURN; key += 2)
            rsp__keys_remove(k, key);
        for (uint64_t key = STABLE + CHURN; key > STABLE; key -= 2)
            rsp__keys_remove(k, key);
        rsp__keys_remove(k, 1000000); /* absent: nothing */
        assert_int_equal(rsp__keys_count(k), STABLE);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < READERS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < READERS; i++) {
        assert_int_equal(rd[i].reg, RSP_OK);
        assert_true(rd[i].sections > 0);
        assert_int_equal(rd[i].bad_stable, 0);
        assert_int_equal(rd[i].bad_loc, 0);
    }
    /* As the owner left it: the stable keys at their last version. */
    assert_int_equal(rsp__reader_register(NULL), RSP_OK);
    for (uint64_t key = 1; key <= STABLE + CHURN; key++) {
        rsp_checkpoint_loc loc;
        rsp_status st = lookup_now(k, key, &loc);
        if (key <= STABLE) {
            assert_int_equal(st, RSP_OK);
            assert_int_equal(loc.slot, (int32_t)(key * 1000 + (ROUNDS - 1) % 1000));
        } else {
            assert_int_equal(st, RSP_ENOKEY);
        }
    }
    rsp__reader_unregister();
    rsp__keys_clear(k);
    assert_int_equal(rsp__keys_count(k), 0);
    rsp__publisher_destroy(pub); /* frees the cleared nodes after its grace period */
    rsp__keys_destroy(k);
}

/* Past RSP__KEYS_MAX_BUCKETS the chains grow; a big capacity still works,
 * and a lookup outside a section is refused. */
static void big_capacity_and_refusals(void **state)
{
    (void)state;
    rsp__publisher *pub = NULL;
    assert_int_equal(rsp__publisher_create(0, &pub, NULL), RSP_OK);
    rsp__keys *k = NULL;
    assert_int_equal(rsp__keys_create(pub, UINT32_MAX, &k, NULL), RSP_OK);
    for (uint64_t key = 0; key < 1000; key++)
        set(k, key * 0x100000001ull, 1);
    assert_int_equal(rsp__keys_count(k), 1000);
    assert_int_equal(rsp__reader_register(NULL), RSP_OK);
    rsp_checkpoint_loc loc;
    rsp_error err = {0};
    assert_int_not_equal(rsp__keys_lookup(k, 0, &loc, &err), RSP_OK); /* outside a section */
    for (uint64_t key = 0; key < 1000; key++) {
        assert_int_equal(lookup_now(k, key * 0x100000001ull, &loc), RSP_OK);
        assert_int_equal(loc.key, key * 0x100000001ull);
    }
    assert_int_equal(lookup_now(k, 7, &loc), RSP_ENOKEY);
    rsp__read_begin();
    assert_int_equal(rsp__keys_lookup(NULL, 7, &loc, &err), RSP_ENOKEY); /* no index */
    assert_int_equal(err.status, RSP_ENOKEY);
    rsp__read_end();
    rsp__reader_unregister();
    rsp__keys_clear(k);
    rsp__publisher_destroy(pub);
    rsp__keys_destroy(k);
    rsp__keys_clear(NULL);
    rsp__keys_destroy(NULL);
    assert_int_equal(rsp__keys_count(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_chain_under_readers_of_both_flavours),
        cmocka_unit_test(big_capacity_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
