#!/usr/bin/env python3
"""rsp-bench's Python companion: the binding's step loop, as an engine's
runner calls it (admit + plan + addressing + commit, and the one-trip
step_next), at 1 / 64 / 256 rows of one label, on a CPU pool.

    RSP_LIBRARY=build/src/librsp.so PYTHONPATH=python /usr/bin/python3 bench/py_step.py [--quick]

Prints a table (median us per step) beside the same loop's pure C cost
measured by rsp-bench (not here: see docs/performance.md) and the Python
original's figures (docs/performance.md: 11 / 44 / 141 us at 1 / 64 / 256
rows, the older seed version). SPDX-License-Identifier: Apache-2.0
"""
import statistics
import sys
import time

import rsp


def make_pool(rows):
    cfg = rsp.PoolConfig(num_layers=1, blocks=[rsp.BlockSpec("ssm", (16,))],
                         max_slots=2 * rows + 8)
    return rsp.RecurrentStatePool("cpu", cfg)


def loop_three(pool, rows, steps):
    """admit, plan, addressing, commit: three round trips and a read."""
    ids = [f"req-{i}" for i in range(rows)]
    times = []
    for sid in range(1, steps + 1):
        t0 = time.perf_counter_ns()
        step = rsp.Step(sid, [(r, "main", 1) for r in ids])
        pool.admit(step)
        pool.plan(step)
        pool.addressing()
        pool.commit(step)
        times.append(time.perf_counter_ns() - t0)
    return times


def loop_next(pool, rows, steps):
    """step_next (commit the previous, admit and plan this one) and a read."""
    ids = [f"req-{i}" for i in range(rows)]
    times = []
    prev = None
    for sid in range(1, steps + 1):
        t0 = time.perf_counter_ns()
        step = rsp.Step(sid, [(r, "main", 1) for r in ids])
        pool.step_next(step, prev=prev)
        pool.addressing()
        prev = step
        times.append(time.perf_counter_ns() - t0)
    pool.commit(prev)
    return times


def main():
    quick = "--quick" in sys.argv
    steps = 300 if quick else 3000
    print(f"# rsp Python binding step loop, {steps} steps each, CPU pool, median us/step")
    print(f"{'rows':>5} {'admit+plan+commit':>18} {'step_next':>10} {'Python original':>16}")
    original = {1: 11, 64: 44, 256: 141}
    for rows in (1, 64, 256):
        res = []
        for fn in (loop_three, loop_next):
            pool = make_pool(rows)
            t = fn(pool, rows, steps)[steps // 10:]  # warm-up dropped
            pool.cleanup()
            res.append(statistics.median(t) / 1000)
        print(f"{rows:>5} {res[0]:>18.1f} {res[1]:>10.1f} {original[rows]:>16}")


if __name__ == "__main__":
    main()
