#!/usr/bin/env bash
# The whole test suite: one tree per variant, each configured with
# -DRSP_WERROR=ON (warnings are errors here, never in a user's build), built,
# then tested with `ctest --output-on-failure -j2` (all of it, a subset, or
# nothing: see the table). A summary with timings follows; the exit status is
# non-zero if any build or test failed.
#
#   variant  tree            configure                          ctest
#   lint     -               scripts/check_format.sh and scripts/check_house.py (format,
#                            no module circle in src/core/, functions <= 80 lines)
#   plain    build/          RelWithDebInfo, RSP_CUDA=AUTO      all
#   asan     build-asan/     ASan + UBSan, RSP_CUDA=OFF         all
#   tsan     build-tsan/     TSan, RSP_CUDA=OFF (+tsan.supp)    all
#   release  build-release/  Release (-O3), RSP_CUDA=AUTO       -L core
#   debug    build-debug/    Debug (-O0), RSP_CUDA=OFF          -L core
#   clang    build-clang/    clang/clang++, RSP_CUDA=OFF        all
#   aarch64  build-aarch64/  aarch64 cross gcc, RSP_CUDA=OFF    all but install_consumer and
#                                                               the bench_*quick checks, under qemu;
#                                                               none without qemu-aarch64
#
# Environment:
#   RSP_TEST_VARIANTS   variants to run, in order (default: all of the above)
#   RSP_CTEST_ARGS      extra ctest arguments for every tree that runs ctest (e.g. -R core)
#   RSP_JOBS            parallel build jobs (default: nproc)
#   RSP_CCACHE=0        do not use ccache even when it is installed
#
# A new variant is one more case in the loop below: a call of run_variant.
# SPDX-License-Identifier: Apache-2.0
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rsp_ensure_deps || exit 1

variants=${RSP_TEST_VARIANTS:-lint plain asan tsan release debug clang aarch64 fuzz}
# The plain tree runs the Python binding's tests (tests/python).
case " $variants " in *" plain "*) rsp_ensure_python_deps ;; esac
summary=()
failed=0
t_all=$SECONDS

# run_variant NAME DIR ENVS CTEST CMAKE-ARGS...: configure DIR with
# -DRSP_WERROR=ON and CMAKE-ARGS, build it, then, unless CTEST is "none", run
# `env ENVS ctest --output-on-failure -j2 CTEST $RSP_CTEST_ARGS` in it. ENVS
# is a word list of VAR=value (and, after them, a launcher such as setarch);
# CTEST is "all" or a word list of ctest arguments (-L core, -E name).
run_variant() {
    local name=$1 dir=$2 envs=$3 sel=$4
    shift 4
    local t0=$SECONDS build_s test_s status=ok
    echo
    echo "=== rsp: $name: build $dir ==="
    if ! rsp_build "$dir" -DRSP_WERROR=ON "$@"; then
        summary+=("$(printf '%-8s %-14s build FAILED after %4ds' "$name" "$dir" $((SECONDS - t0)))")
        failed=1
        return
    fi
    build_s=$((SECONDS - t0))
    if [ "$sel" = none ]; then
        summary+=("$(printf '%-8s %-14s build %4ds  ctest    -  ok (build only)' "$name" "$dir" "$build_s")")
        return
    fi
    [ "$sel" = all ] && sel=
    echo "=== rsp: $name: ctest${sel:+ $sel} ($dir) ==="
    local t1=$SECONDS
    # shellcheck disable=SC2086  # envs, sel and RSP_CTEST_ARGS are word lists on purpose
    if ! (cd "$RSP_ROOT/$dir" && env $envs ctest --output-on-failure -j2 $sel ${RSP_CTEST_ARGS:-}); then
        status=FAILED
        failed=1
    fi
    test_s=$((SECONDS - t1))
    local failed_tests=
    if [ "$status" != ok ] && [ -f "$RSP_ROOT/$dir/Testing/Temporary/LastTestsFailed.log" ]; then
        # Lines read "N:name"; keep the names.
        failed_tests=" ($(cut -d: -f2 "$RSP_ROOT/$dir/Testing/Temporary/LastTestsFailed.log" | paste -sd' ' -))"
    fi
    summary+=("$(printf '%-8s %-14s build %4ds  ctest %4ds  %s%s%s' "$name" "$dir" "$build_s" "$test_s" "$status" "${sel:+ ($sel)}" "$failed_tests")")
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

# The lint variant: the house rules no compiler checks (seconds).
run_lint() {
    local t0=$SECONDS status=ok
    echo
    echo "=== rsp: lint: format and house rules ==="
    "$RSP_ROOT/scripts/check_format.sh" || status=FAILED
    python3 "$RSP_ROOT/scripts/check_house.py" || status=FAILED
    [ "$status" = ok ] || failed=1
    summary+=("$(printf '%-8s %-14s lint  %4ds  %s' lint - $((SECONDS - t0)) "$status")")
}

for v in $variants; do
    case $v in
    lint) run_lint ;;
    plain)
        run_variant plain build "" all \
            -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRSP_CUDA=AUTO -DRSP_SANITIZE=
        ;;
    asan)
        run_variant asan build-asan \
            "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1" \
            all -DRSP_CUDA=OFF -DRSP_SANITIZE=address
        ;;
    tsan)
        run_variant tsan build-tsan "TSAN_OPTIONS=$tsan_opts $tsan_prefix" all \
            -DRSP_CUDA=OFF -DRSP_SANITIZE=thread
        ;;
    fuzz) run_fuzz ;;
    release)
        # -O3: where gcc's flow-based warnings (maybe-uninitialized, ...)
        # appear; the kernels too. The core suites check the optimised core.
        run_variant release build-release "" "-L core" \
            -DCMAKE_BUILD_TYPE=Release -DRSP_CUDA=AUTO -DRSP_SANITIZE=
        ;;
    debug)
        run_variant debug build-debug "" "-L core" \
            -DCMAKE_BUILD_TYPE=Debug -DRSP_CUDA=OFF -DRSP_SANITIZE=
        ;;
    clang)
        if ! rsp_ensure_deps clang; then
            summary+=("$(printf '%-8s %-14s missing package clang (see above)' clang build-clang)")
            failed=1
            continue
        fi
        # The suite built by a second compiler; the Python package's suite
        # and the install check test the binding and packaging, which
        # plain covers, and would double the tree's time.
        run_variant clang build-clang "" "-E ^(python_binding|install_consumer)$" \
            -DRSP_CUDA=OFF -DRSP_SANITIZE= \
            -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
        ;;
    aarch64)
        # Compiles the atomics for a weakly ordered CPU; the tests run under
        # qemu-user (on this x86 host it runs them correctly but cannot show
        # reorderings). install_consumer and the benchmark checks
        # (bench_quick, bench_pin_quick) start target programs without the
        # emulator.
        if ! rsp_ensure_aarch64_deps "$RSP_ROOT/build-aarch64-deps"; then
            summary+=("$(printf '%-8s %-14s missing cross packages (see above)' aarch64 build-aarch64)")
            failed=1
            continue
        fi
        a64_ctest="-E ^(install_consumer|bench_quick|bench_pin_quick)$"
        command -v qemu-aarch64 >/dev/null 2>&1 || a64_ctest=none
        run_variant aarch64 build-aarch64 "" "$a64_ctest" \
            -DCMAKE_TOOLCHAIN_FILE="$RSP_ROOT/cmake/toolchain-aarch64.cmake" \
            -DRSP_CROSS_PKG_CONFIG_PATH="$RSP_ROOT/build-aarch64-deps/pkgconfig" \
            -DRSP_CUDA=OFF -DRSP_SANITIZE=
        ;;
    *)
        echo "rsp: unknown variant '$v' (lint, plain, asan, tsan, release, debug, clang, aarch64, fuzz)" >&2
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
