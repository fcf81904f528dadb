#!/usr/bin/env bash
# The whole test suite, three times:
#   build/        plain build (RSP_CUDA=AUTO: the CUDA device too when nvcc exists)
#   build-asan/   AddressSanitizer + UndefinedBehaviorSanitizer (RSP_CUDA=OFF)
#   build-tsan/   ThreadSanitizer (RSP_CUDA=OFF), with tests/tsan.supp if present
#   build-fuzz/   libFuzzer targets (clang, ASan+UBSan): the seed corpus
#                 replayed, then each target fuzzed for a bounded time
# Each runs `ctest --output-on-failure -j2`. A summary with timings follows;
# the exit status is non-zero if any build or test failed.
#
# Environment:
#   RSP_TEST_VARIANTS   variants to run, default "plain asan tsan fuzz"; "clang"
#                       adds a clang build (CC=clang, CXX=clang++) with ctest
#   RSP_FUZZ_SECONDS    fuzz variant: seconds per target (default 30: about a
#                       minute for both); scripts/fuzz.sh runs them longer
#   RSP_CTEST_ARGS      extra ctest arguments for every variant (e.g. -R core)
#   RSP_JOBS            parallel build jobs (default: nproc)
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rsp_ensure_deps || exit 1

variants=${RSP_TEST_VARIANTS:-plain asan tsan fuzz}
summary=()
failed=0
t_all=$SECONDS

# run_variant NAME DIR "ENV... [LAUNCHER...]" CMAKE-ARGS...: build DIR, then run
# `env ENV... [LAUNCHER...] ctest` in it.
run_variant() {
    local name=$1 dir=$2 envs=$3
    shift 3
    local t0=$SECONDS build_s test_s status=ok
    echo
    echo "=== rsp: $name: build $dir ==="
    if ! rsp_build "$dir" "$@"; then
        summary+=("$(printf '%-6s %-11s build FAILED after %4ds' "$name" "$dir" $((SECONDS - t0)))")
        failed=1
        return
    fi
    build_s=$((SECONDS - t0))
    echo "=== rsp: $name: ctest ($dir) ==="
    local t1=$SECONDS
    # shellcheck disable=SC2086  # envs and RSP_CTEST_ARGS are word lists on purpose
    if ! (cd "$RSP_ROOT/$dir" && env $envs ctest --output-on-failure -j2 ${RSP_CTEST_ARGS:-}); then
        status=FAILED
        failed=1
    fi
    test_s=$((SECONDS - t1))
    local failed_tests=
    if [ "$status" != ok ] && [ -f "$RSP_ROOT/$dir/Testing/Temporary/LastTestsFailed.log" ]; then
        # Lines read "N:name"; keep the names.
        failed_tests=" ($(cut -d: -f2 "$RSP_ROOT/$dir/Testing/Temporary/LastTestsFailed.log" | paste -sd' ' -))"
    fi
    summary+=("$(printf '%-6s %-11s build %4ds  ctest %4ds  %s%s' "$name" "$dir" "$build_s" "$test_s" "$status" "$failed_tests")")
}

# ThreadSanitizer (gcc 12) cannot map its shadow with the high ASLR entropy
# of recent kernels; running with randomisation off avoids that when the
# kernel lets us.
tsan_prefix=
if command -v setarch >/dev/null 2>&1 && setarch "$(uname -m)" -R true 2>/dev/null; then
    tsan_prefix="setarch $(uname -m) -R"
fi

tsan_opts="halt_on_error=1:second_deadlock_stack=1:history_size=4"
if [ -f "$RSP_ROOT/tests/tsan.supp" ]; then
    tsan_opts="$tsan_opts:suppressions=$RSP_ROOT/tests/tsan.supp"
fi

# The fuzz variant: scripts/fuzz.sh builds build-fuzz/, replays the seed
# corpus (ctest -L fuzz) and fuzzes each target for RSP_FUZZ_SECONDS from the
# seeds alone (a corpus grown by earlier runs would take longer to load). A
# finding fails the variant (kept under build-fuzz/findings/).
run_fuzz() {
    local t0=$SECONDS status=ok
    echo
    echo "=== rsp: fuzz: ${RSP_FUZZ_SECONDS:-30}s per target ==="
    if ! RSP_FUZZ_FRESH_CORPUS=1 "$RSP_ROOT/scripts/fuzz.sh" "${RSP_FUZZ_SECONDS:-30}"; then
        status=FAILED
        failed=1
    fi
    summary+=("$(printf '%-6s %-11s fuzz  %4ds  %s' fuzz build-fuzz $((SECONDS - t0)) "$status")")
}

for v in $variants; do
    case $v in
    plain) run_variant plain build "" -DRSP_CUDA=AUTO -DRSP_SANITIZE= ;;
    asan)
        run_variant asan build-asan \
            "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1" \
            -DRSP_CUDA=OFF -DRSP_SANITIZE=address
        ;;
    tsan)
        run_variant tsan build-tsan "TSAN_OPTIONS=$tsan_opts $tsan_prefix" \
            -DRSP_CUDA=OFF -DRSP_SANITIZE=thread
        ;;
    clang)
        run_variant clang build-clang "" -DRSP_CUDA=OFF -DRSP_SANITIZE= \
            -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
        ;;
    fuzz) run_fuzz ;;
    *)
        echo "rsp: unknown variant '$v' (plain, asan, tsan, clang, fuzz)" >&2
        failed=1
        ;;
    esac
done

echo
echo "=== rsp: test summary ($((SECONDS - t_all))s total) ==="
for line in "${summary[@]}"; do
    echo "  $line"
done
if [ "$failed" -ne 0 ]; then
    echo "rsp: FAILED"
    exit 1
fi
echo "rsp: all passed"
