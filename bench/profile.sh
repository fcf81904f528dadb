#!/bin/sh
# Instructions per operation, rsp beside the baseline, counted by callgrind
# (independent of machine load, unlike the timings of rsp-bench).
#   bench/profile.sh [BUILD_DIR] [N]      (default: build, 2000)
# For each workload of rsp-bench-profile it runs callgrind twice (N
# operations and 0) and counts only the instructions executed inside the
# functions that do the work (--toggle-collect), so that idle spinning of
# the owner, the device worker and waiting clients is left out:
#   rsp:      the client calls (rsp_post, rsp_read_*, rsp_plan_*), the owner's
#             message handling (rsp__actor_drain: dequeue, handler, answer; or
#             rsp__actor_run_lent, the same work on a synchronous caller's
#             thread while the owner sleeps) and the host
#             device's job submission; ticket waits are left out (spinning).
#   baseline: its bl_* calls (lock, core, inline device work, unlock).
# SPDX-License-Identifier: Apache-2.0
set -eu
build=${1:-build}
n=${2:-2000}
bin="$build/bench/rsp-bench-profile"
if [ ! -x "$bin" ]; then
    echo "profile.sh: $bin not found; build the rsp-bench-profile target first" >&2
    exit 2
fi
command -v valgrind >/dev/null || { echo "profile.sh: valgrind not found" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# count MODE N FUNCS...: instructions collected inside FUNCS
count() {
    mode=$1; k=$2; shift 2
    set -- $(for f in "$@"; do printf -- '--toggle-collect=%s ' "$f"; done)
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$@" "$bin" "$mode" "$k" \
        >/dev/null 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
    grep -E '^(summary|totals):' "$tmp/cg" | head -1 | awk '{print $2}'
}

# per_op MODE UNIT FUNCS...
per_op() {
    mode=$1; unit=$2; shift 2
    full=$(count "$mode" "$n" "$@")
    base=$(count "$mode" 0 "$@")
    awk -v f="$full" -v b="$base" -v n="$n" -v m="$mode" -v u="$unit" \
        'BEGIN { printf "%-14s %10.0f instructions per %s\n", m, (f - b) / n, u }'
}

RSP_CLIENT="rsp_post rsp_read_begin rsp_read_end rsp_plan_live rsp_plan_addressing rsp_plan_live_addressing rsp_event_wait"
RSP_OWNER="rsp__actor_drain rsp__actor_run_lent"
echo "callgrind, N = $n operations (set-up and tear-down subtracted)"
per_op read-rsp read rsp_read_begin rsp_read_end rsp_plan_live rsp_plan_addressing
per_op read-live read rsp_read_begin rsp_read_end rsp_plan_live_addressing
per_op read-qsbr read rsp_read_begin rsp_read_end rsp_plan_live_addressing rsp_reader_quiescent
per_op read-rwlock read bl_read_begin bl_plan_addressing bl_read_end
per_op ingest-rsp "pair (2 messages)" $RSP_CLIENT $RSP_OWNER
per_op ingest-vector "pair (64 rids a message)" $RSP_CLIENT $RSP_OWNER
per_op ingest-mutex "pair (2 messages)" bl_ingest bl_remove
per_op step-rsp "256-row step" $RSP_CLIENT $RSP_OWNER
per_op step-onetrip "256-row step" $RSP_CLIENT $RSP_OWNER
per_op step-mutex "256-row step" bl_admit bl_plan bl_commit bl_read_begin bl_plan_addressing bl_read_end
per_op fork-rsp "256-row fork step" $RSP_CLIENT $RSP_OWNER
per_op fork-mutex "256-row fork step" bl_admit bl_plan bl_commit bl_read_begin bl_plan_addressing bl_read_end
per_op step-mutex-general "256-row step" bl_admit bl_plan bl_commit bl_read_begin bl_plan_addressing bl_read_end
per_op fork-mutex-general "256-row fork step" bl_admit bl_plan bl_commit bl_read_begin bl_plan_addressing bl_read_end
per_op ckpt-churn "take (evicting), owner only" $RSP_OWNER
per_op ckpt-lookup lookup rsp_read_begin rsp_read_end rsp_checkpoint_lookup
