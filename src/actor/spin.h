/*
 * Waiting well: how long a thread of the actor spins (PAUSE) before it
 * sleeps on a futex, learned per kind of wait. Pure logic on a plain value
 * (no clock, no threads), so tests/actor drives it with made-up timings.
 * SPDX-License-Identifier: Apache-2.0
 *
 * A futex wake-up costs the waker a syscall and the sleeper the wake-up
 * latency (5-10 us on a VM). Spinning avoids both, but only pays while the
 * partner runs on another core; on a shared core it holds the partner off
 * for the whole spin. So each kind of wait keeps:
 *
 *   est_ns  a moving estimate of how long this wait usually takes (every
 *           wait's duration, spun or slept, capped at the cap): the spin
 *           budget is 2 * est_ns + RSP__SPIN_SLACK_NS, at most the cap;
 *   fails   spins in a row that ran out before the event came;
 *   level / skip   after RSP__SPIN_FAILS failures in a row the partner
 *           evidently cannot answer while we spin (a shared core) or waits
 *           are long: the next 8 << level waits do not spin (the caller
 *           falls back to yield-then-futex), level grows up to
 *           RSP__SPIN_MAX_LEVEL, and one success puts it back to 0.
 *
 * The state packs into one 64-bit word, so threads that share a kind of
 * wait (the clients of one actor) load and store it with relaxed atomics:
 * an update lost to a race costs a slightly worse guess, nothing else.
 */
#ifndef RSP_ACTOR_SPIN_H
#define RSP_ACTOR_SPIN_H

#include <stdbool.h>
#include <stdint.h>

/* Floor of a budget, above twice the estimate: covers the clock's
 * granularity and the poll interval of the spin loop. */
#define RSP__SPIN_SLACK_NS 1000u
/* Failed spins in a row before spinning stops for a while. */
#define RSP__SPIN_FAILS 4u
/* Back-off after a run of failures: 8 << level waits without a spin
 * (8 to 1024). */
#define RSP__SPIN_MAX_LEVEL 7u

typedef struct rsp__spin {
    uint32_t est_ns; /* moving mean of recent waits, capped */
    uint8_t fails;   /* spins in a row that ran out */
    uint8_t level;   /* back-off exponent */
    uint16_t skip;   /* waits left without a spin */
} rsp__spin;

/* Pack / unpack the state into the word the actor keeps. */
static inline uint64_t rsp__spin_pack(rsp__spin s)
{
    return (uint64_t)s.est_ns | (uint64_t)s.fails << 32 | (uint64_t)s.level << 40 |
           (uint64_t)s.skip << 48;
}

static inline rsp__spin rsp__spin_unpack(uint64_t w)
{
    rsp__spin s = {(uint32_t)w, (uint8_t)(w >> 32), (uint8_t)(w >> 40), (uint16_t)(w >> 48)};
    return s;
}

/* How long to spin on the next wait of this kind, in ns, at most cap_ns;
 * 0: do not spin (backing off). O(1). */
uint64_t rsp__spin_budget(rsp__spin s, uint64_t cap_ns);

/*
 * The state after one wait: budget_ns is what rsp__spin_budget gave for it
 * (0: it did not spin), seen whether the spin saw the event, waited_ns how
 * long the wait took in all (spin, yields and sleep; capped at cap_ns
 * before it enters the estimate). O(1).
 */
rsp__spin rsp__spin_learn(rsp__spin s, uint64_t budget_ns, bool seen, uint64_t waited_ns,
                          uint64_t cap_ns);

#endif
