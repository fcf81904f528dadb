#!/usr/bin/env python3
# Run rsp-bench (argv[1:]) and check its --json output: exit status 0, every
# line one JSON object with the documented fields, every scenario present
# with its expected number of points (only the one named by --only, if
# given), "pin" (when present) one of none/split/shared. No timing assertion.
# SPDX-License-Identifier: Apache-2.0
import json
import subprocess
import sys

EXPECTED = {"rtt": 2, "ingest_remove": 8, "step": 32, "read": 4, "read_qsbr": 4, "zero_fork": 6,
            "create": 6, "ckpt_copy": 6, "ckpt_lookup": 4, "ckpt_churn": 2, "prefix_reuse": 2,
            "metrics": 2, "spec_accept": 3,
            "prefix_trace": 18, "guard": 4}
NUMBERS = ("median_ns", "p99_ns", "ops_per_s", "baseline_median_ns", "ratio")


def main():
    if len(sys.argv) < 2:
        print("usage: check_json.py RSP_BENCH [ARGS...]", file=sys.stderr)
        return 2
    proc = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"rsp-bench exited with {proc.returncode}", file=sys.stderr)
        return 1
    # --only SCENARIO: that scenario's points alone.
    expected = EXPECTED
    if "--only" in sys.argv[1:-1]:
        only = sys.argv[sys.argv.index("--only") + 1]
        expected = {only: EXPECTED.get(only, 0)}
    counts = {}
    failures = 0
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    for n, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            print(f"line {n}: not JSON ({e}): {line}", file=sys.stderr)
            failures += 1
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("bench"), str) \
                or not isinstance(obj.get("params"), dict):
            print(f"line {n}: missing bench/params: {line}", file=sys.stderr)
            failures += 1
            continue
        for key in NUMBERS:
            v = obj.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                print(f"line {n}: {key} missing or not a non-negative number: {line}",
                      file=sys.stderr)
                failures += 1
        if not obj.get("median_ns", 0) > 0:
            print(f"line {n}: median_ns is not positive: {line}", file=sys.stderr)
            failures += 1
        if obj.get("pin", "none") not in ("none", "split", "shared"):
            print(f"line {n}: pin is not none, split or shared: {line}", file=sys.stderr)
            failures += 1
        counts[obj["bench"]] = counts.get(obj["bench"], 0) + 1
        print(line)
    if counts != expected:
        print(f"scenario points {counts}, expected {expected}", file=sys.stderr)
        failures += 1
    print(f"{len(lines)} lines, {failures} problems")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
