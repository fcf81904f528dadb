#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan+UBSan) in build-fuzz/ and run each
# for a while, starting from its seed corpus:
#   scripts/fuzz.sh [seconds-per-target] [target...]
# Default 60 s per target, targets fuzz_api fuzz_config; 0 only builds and
# replays the seed corpus (ctest -L fuzz, also done before every run). New inputs go to
# build-fuzz/corpus/<target>/ (the seeds in tests/fuzz/corpus/ stay as they
# are); a crash, leak or timeout is kept under build-fuzz/findings/<target>/
# and the script exits non-zero. See docs/testing.md "Fuzzing".
#
# Environment:
#   RSP_FUZZ_JOBS         parallel fuzzing jobs per target (default 1)
#   RSP_FUZZ_ARGS         extra libFuzzer flags (e.g. -max_len=512)
#   RSP_FUZZ_FRESH_CORPUS 1: start from the seeds alone, in a temporary corpus
#                         (bounded time: loading a grown corpus takes a while)
#   RSP_JOBS              parallel build jobs (default: nproc)
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

seconds=${1:-60}
shift || true
targets=${*:-fuzz_api fuzz_config}
jobs=${RSP_FUZZ_JOBS:-1}

rsp_ensure_deps clang || exit 1
if ! command -v clang >/dev/null 2>&1; then
    echo "rsp: fuzzing needs clang (apt-get install -y clang)" >&2
    exit 1
fi
# libFuzzer's runtime is a package of its own on recent Debian releases.
fuzz_probe='int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n; }'
if ! echo "$fuzz_probe" | clang -x c - -fsanitize=fuzzer -o /dev/null 2>/dev/null; then
    rsp_ensure_deps "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev" || exit 1
fi
echo "=== rsp: fuzz: build build-fuzz ==="
# Only what the targets need: the library and tests/fuzz.
dir=$RSP_ROOT/build-fuzz
if ! CC=clang CXX=clang++ cmake -S "$RSP_ROOT" -B "$dir" -DRSP_FUZZ=ON -DRSP_WERROR=ON -DRSP_CUDA=OFF -DRSP_SANITIZE= \
    -DRSP_BUILD_STRESS=OFF -DRSP_BUILD_BENCH=OFF >"$dir.configure.log" 2>&1; then
    cat "$dir.configure.log" >&2
    echo "rsp: configure of $dir failed (log: $dir.configure.log)" >&2
    exit 1
fi
# shellcheck disable=SC2086  # targets is a word list
cmake --build "$dir" -j "$RSP_JOBS" --target $targets || exit 1

echo "=== rsp: fuzz: replay the seed corpus ==="
re=$(echo "$targets" | tr ' ' '|')
(cd "$dir" && ctest --output-on-failure -L fuzz -R "^($re)_corpus\$") || exit 1
[ "$seconds" -gt 0 ] || exit 0

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
parallel=
if [ "$jobs" -gt 1 ]; then
    parallel="-jobs=$jobs -workers=$jobs" # output goes to fuzz-N.log then
fi
status=0
for t in $targets; do
    bin=$RSP_ROOT/build-fuzz/tests/fuzz/$t
    corpus=$RSP_ROOT/build-fuzz/corpus/$t
    if [ "${RSP_FUZZ_FRESH_CORPUS:-0}" = 1 ]; then
        corpus=$(mktemp -d)
    fi
    findings=$RSP_ROOT/build-fuzz/findings/$t
    mkdir -p "$corpus" "$findings"
    marker=$(mktemp)
    echo "=== rsp: fuzz: $t for ${seconds}s (corpus $corpus + tests/fuzz/corpus/$t) ==="
    t0=$SECONDS
    # -max_len: fuzz_api decodes at most 200 calls; longer inputs only cost time.
    # shellcheck disable=SC2086  # RSP_FUZZ_ARGS is a word list on purpose
    "$bin" -max_total_time="$seconds" -print_final_stats=1 -timeout=30 -rss_limit_mb=4096 -max_len=1024 \
        -artifact_prefix="$findings/" $parallel ${RSP_FUZZ_ARGS:-} \
        "$corpus" "$RSP_ROOT/tests/fuzz/corpus/$t" 2>&1 |
        grep --line-buffered -E "^#[0-9]+[[:space:]]+(pulse|DONE|INITED)|^stat::|ERROR|SUMMARY|^fuzz_|Test unit|^    #[0-9]"
    rc=${PIPESTATUS[0]}
    echo "=== rsp: fuzz: $t: exit $rc after $((SECONDS - t0))s, corpus $(find "$corpus" -type f | wc -l) files ==="
    new=$(find "$findings" -type f -newer "$marker" -printf '%f ')
    rm -f "$marker"
    if [ "${RSP_FUZZ_FRESH_CORPUS:-0}" = 1 ]; then
        rm -rf "$corpus"
    fi
    if [ "$rc" -ne 0 ] || [ -n "$new" ]; then
        echo "rsp: fuzz: $t: FINDING (exit $rc; kept in $findings: $new)" >&2
        status=1
    fi
done
exit $status
