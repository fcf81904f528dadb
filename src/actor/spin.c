/*
 * Waiting well: the adaptive spin budget (see spin.h).
 * SPDX-License-Identifier: Apache-2.0
 */
#include "spin.h"

uint64_t rsp__spin_budget(rsp__spin s, uint64_t cap_ns)
{
    if (s.skip)
        return 0;
    uint64_t b = 2 * (uint64_t)s.est_ns + RSP__SPIN_SLACK_NS;
    return b < cap_ns ? b : cap_ns;
}

rsp__spin rsp__spin_learn(rsp__spin s, uint64_t budget_ns, bool seen, uint64_t waited_ns,
                          uint64_t cap_ns)
{
    /* Every wait teaches the estimate, spun or not: a wait that slept is
     * how long the partner took (plus the wake-up), which is what the next
     * spin should cover. Weight 1/4: a few waits move it, one outlier does
     * not make it. */
    if (waited_ns > cap_ns)
        waited_ns = cap_ns;
    if (waited_ns > UINT32_MAX)
        waited_ns = UINT32_MAX;
    int64_t d = (int64_t)waited_ns - (int64_t)s.est_ns;
    s.est_ns = (uint32_t)((int64_t)s.est_ns + d / 4);
    if (budget_ns == 0) { /* backing off (or told not to spin) */
        if (s.skip)
            s.skip--;
        return s;
    }
    if (seen) {
        s.fails = 0;
        s.level = 0;
        return s;
    }
    if (++s.fails >= RSP__SPIN_FAILS) {
        s.fails = 0;
        s.skip = (uint16_t)(8u << s.level);
        if (s.level < RSP__SPIN_MAX_LEVEL)
            s.level++;
    }
    return s;
}
