/*
 * Internal: the one clock and the one timeout rule of the library.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Every blocking call takes a relative timeout in ns: 0 polls once,
 * RSP_WAIT_FOREVER (UINT64_MAX) never times out. A waiter turns it into an
 * absolute deadline once (rsp__deadline), then asks before each sleep how
 * long is left (rsp__time_left), so spurious wake-ups never stretch the wait.
 * RSP__NO_DEADLINE is the one "forever" deadline. All of it is pure and
 * callable from any thread; each call is one clock_gettime at most.
 */
#ifndef RSP_UTIL_TIME_H
#define RSP_UTIL_TIME_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/** The deadline of a wait that never times out. */
#define RSP__NO_DEADLINE UINT64_MAX
/** RSP_WAIT_FOREVER of rsp.h (not included: this header builds alone). */
#define RSP__FOREVER UINT64_MAX

/** Monotonic clock in ns. */
static inline uint64_t rsp__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/** ns as a timespec (for futex and nanosleep). */
static inline struct timespec rsp__timespec_of(uint64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    return ts;
}

/** The absolute deadline of a wait of timeout_ns from now: RSP__NO_DEADLINE
 * for RSP_WAIT_FOREVER and for a timeout that would overflow the clock. */
static inline uint64_t rsp__deadline(uint64_t timeout_ns)
{
    if (timeout_ns == RSP__FOREVER)
        return RSP__NO_DEADLINE;
    uint64_t now = rsp__now_ns();
    return timeout_ns >= RSP__NO_DEADLINE - now ? RSP__NO_DEADLINE : now + timeout_ns;
}

/** Time left until `deadline`, for the next sleep: false once it has passed;
 * else *rel is NULL (no deadline: sleep until woken) or points at *ts, set
 * to what is left. */
static inline bool rsp__time_left(uint64_t deadline, struct timespec *ts,
                                  const struct timespec **rel)
{
    if (deadline == RSP__NO_DEADLINE) {
        *rel = NULL;
        return true;
    }
    uint64_t now = rsp__now_ns();
    if (now >= deadline)
        return false;
    *ts = rsp__timespec_of(deadline - now);
    *rel = ts;
    return true;
}

#endif
