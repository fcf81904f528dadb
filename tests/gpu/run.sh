#!/usr/bin/env bash
# tests/gpu/run.sh: build rsp with the CUDA device, run the CUDA tests and
# the GPU benchmark on a machine with a GPU, print a short report.
# SPDX-License-Identifier: Apache-2.0
#
#   tests/gpu/run.sh               build into build-gpu, test, benchmark
#   tests/gpu/run.sh --fetch-deps  (on a machine with apt and a network)
#                                  download the .debs of liburcu, ck, cmocka
#                                  and pkgconf into build-gpu-deps/
#
# A GPU machine with no network and none of those libraries builds against
# build-gpu-deps/ (carry that folder with the working tree): the .debs are
# unpacked into build-gpu-deps/root, never into /. Budget: under 6 minutes
# on an H200 (build about 1-2, tests under 1, benchmark under 1, the
# checkpoint-tier figures (rsp-gpu-tiers) a few seconds).
# Environment: RSP_GPU_JOBS (build jobs, default nproc), RSP_GPU_OUT (a folder
# that receives the logs; default $OUT if set). For checking this script on a
# machine without a GPU: RSP_GPU_DRY=1 runs everything anyway (GPU tests then
# skip and count as failures), RSP_GPU_USE_DEBS=1 uses build-gpu-deps even
# when the system has the libraries.
# Exit: 0 all passed, 1 a build or test failure, 2 no GPU (nothing run).
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=$ROOT/build-gpu
DEPS=$ROOT/build-gpu-deps
JOBS=${RSP_GPU_JOBS:-$(nproc 2>/dev/null || echo 8)}
LOGS=${RSP_GPU_OUT:-${OUT:-$BUILD/logs}}
DEBS=(liburcu-dev liburcu8 libck-dev libck0 libcmocka-dev libcmocka0 pkgconf pkgconf-bin libpkgconf3)
START=$(date +%s)

if [ "${1:-}" = "--fetch-deps" ]; then
    mkdir -p "$DEPS" && cd "$DEPS" && apt-get download "${DEBS[@]}" && ls -1 "$DEPS"/*.deb
    exit $?
fi

say() { printf '[gpu %3ds] %s\n' $(($(date +%s) - START)) "$*"; }
mkdir -p "$LOGS" "$BUILD"

# ---- the GPU ---------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
elif [ "${RSP_GPU_DRY:-0}" = 1 ]; then
    GPU="none (RSP_GPU_DRY=1: checking the script only)"
else
    echo "tests/gpu/run.sh: skipped: no CUDA device (nvidia-smi finds no GPU)"
    exit 2
fi
say "GPU: $GPU; nvcc: $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

# ---- dependencies ----------------------------------------------------------
# Use the system's libraries when pkg-config finds them; otherwise unpack the
# carried .debs into a private root and point pkg-config, cmake and the
# loader at it.
CMAKE_EXTRA=()
if [ "${RSP_GPU_USE_DEBS:-0}" = 1 ] ||
    ! (command -v pkg-config >/dev/null 2>&1 && pkg-config --exists liburcu liburcu-memb ck cmocka); then
    if ! ls "$DEPS"/*.deb >/dev/null 2>&1; then
        echo "tests/gpu/run.sh: liburcu/ck/cmocka/pkg-config missing and no $DEPS/*.deb;" \
             "run tests/gpu/run.sh --fetch-deps where apt works and carry build-gpu-deps" >&2
        exit 1
    fi
    R=$DEPS/root
    rm -rf "$R" && mkdir -p "$R"
    for d in "$DEPS"/*.deb; do
        if command -v dpkg-deb >/dev/null 2>&1; then
            dpkg-deb -x "$d" "$R"
        else
            (t=$(mktemp -d) && cd "$t" && ar x "$d" && tar -xf data.tar.* -C "$R" && rm -rf "$t")
        fi || { echo "cannot unpack $d" >&2; exit 1; }
    done
    LIBDIR=$R/usr/lib/x86_64-linux-gnu
    [ -e "$R/usr/bin/pkg-config" ] || ln -sf pkgconf "$R/usr/bin/pkg-config"
    export PATH=$R/usr/bin:$PATH
    export LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PKG_CONFIG_LIBDIR=$LIBDIR/pkgconfig:$R/usr/share/pkgconfig
    export PKG_CONFIG_SYSROOT_DIR=$R
    # the .pc files name /usr/include and /usr/lib, which pkg-config would
    # drop as system paths: keep them (prefixed with the root) instead
    export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
    export CPATH=$R/usr/include:$R/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
    export LIBRARY_PATH=$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}
    CMAKE_EXTRA+=(-DPKG_CONFIG_EXECUTABLE=$R/usr/bin/pkgconf -DCMAKE_PREFIX_PATH=$R/usr)
    say "dependencies: unpacked $(ls "$DEPS"/*.deb | wc -l) carried .debs into $R"
fi

# ---- build -------------------------------------------------------------------
# Only what `ctest -L cuda` and the benchmark need: the whole suite is CI's job,
# and a module that is broken elsewhere must not hide the GPU's results.
say "configure + build (-DRSP_CUDA=ON, $JOBS jobs) into build-gpu"
if ! cmake -S "$ROOT" -B "$BUILD" -DRSP_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
        -DRSP_BUILD_STRESS=OFF -DRSP_BUILD_BENCH=OFF "${CMAKE_EXTRA[@]}" >"$LOGS/configure.log" 2>&1; then
    tail -40 "$LOGS/configure.log"
    say "FAILED: configure (log: $LOGS/configure.log)"
    exit 1
fi
CUDA_TARGETS=(test_cuda_kernels test_cuda_device test_cuda_ordering rsp-bench-gpu)
# The checkpoint tiers: their suite (label cuda) and the copy figures.
grep -q 'test_device_tiers' "$ROOT/tests/device/CMakeLists.txt" && CUDA_TARGETS+=(test_device_tiers)
grep -q 'rsp-gpu-tiers' "$ROOT/tests/cuda/CMakeLists.txt" && CUDA_TARGETS+=(rsp-gpu-tiers)
grep -q 'test_cuda_pool' "$ROOT/tests/cuda/CMakeLists.txt" &&
    [ -e "$ROOT/src/api.c" ] && CUDA_TARGETS+=(test_cuda_pool)
# Every test labelled cuda is built, or `ctest -L cuda` reports it "Not
# Run": the core suites' CUDA runs (tests/core/CMakeLists.txt:
# <suite>_cuda, the suite's own executable) and every other test by its
# name (rsp_add_test makes a target of that name).
while read -r t; do
    case " ${CUDA_TARGETS[*]} " in *" $t "*) ;; *) CUDA_TARGETS+=("$t") ;; esac
done < <(cd "$BUILD" && ctest -N -L cuda | sed -n 's/^ *Test *#[0-9]*: \([a-z0-9_]*\)$/\1/p' |
    sed 's/^\(test_core_[a-z0-9_]*\)_cuda$/\1/')
if ! cmake --build "$BUILD" -j "$JOBS" --target "${CUDA_TARGETS[@]}" >"$LOGS/build.log" 2>&1; then
    grep -E 'error' "$LOGS/build.log" | head -20
    say "FAILED: build of ${CUDA_TARGETS[*]} (log: $LOGS/build.log)"
    exit 1
fi
say "build done: ${CUDA_TARGETS[*]}"

# ---- tests ---------------------------------------------------------------------
# One at a time: the GPU tests measure free memory and must not share the GPU.
say "ctest -L cuda"
(cd "$BUILD" && timeout 240 ctest -L cuda --output-on-failure -j 1) >"$LOGS/ctest.log" 2>&1
CTEST_RC=$?
grep -E 'tests passed|tests failed|Failed|\*\*\*|Not Run' "$LOGS/ctest.log"
# Each suite's cmocka summary, from ctest's full log.
awk '/^[0-9]+\/[0-9]+ Testing: /{name=$3}
     /^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ test/{print "  " name ": " $0}' \
    "$BUILD"/Testing/Temporary/LastTest.log 2>/dev/null
# On a GPU machine nothing may skip for want of a device.
SKIPS=$(grep -c 'skipped: no CUDA device' "$BUILD"/Testing/Temporary/LastTest.log 2>/dev/null)
if [ "${SKIPS:-0}" != 0 ]; then
    say "FAILED: $SKIPS GPU test(s) skipped on a GPU machine"
    CTEST_RC=1
fi

# ---- benchmark -----------------------------------------------------------------
say "rsp-bench-gpu"
BENCH_RC=0
timeout 150 "$BUILD/bench/rsp-bench-gpu" >"$LOGS/bench.log" 2>&1 || BENCH_RC=$?
cat "$LOGS/bench.log"

# ---- checkpoint tiers ----------------------------------------------------------
# Device-tier D2D, host-tier H2D and D2H copies of a 1 MiB slot through the
# pool's work list, against cudaMemcpyAsync of the same bytes (figures only).
TIERS_RC=0
if [ -x "$BUILD/tests/cuda/rsp-gpu-tiers" ]; then
    say "rsp-gpu-tiers"
    timeout 60 "$BUILD/tests/cuda/rsp-gpu-tiers" >"$LOGS/tiers.log" 2>&1 || TIERS_RC=$?
    cat "$LOGS/tiers.log"
fi

# ---- report --------------------------------------------------------------------
echo
echo "==== tests/gpu/run.sh report ($(($(date +%s) - START)) s) ===="
echo "GPU:        $GPU"
echo "ctest -L cuda: $([ $CTEST_RC = 0 ] && echo PASSED || echo FAILED) ($(grep -E 'tests passed|tests failed' "$LOGS/ctest.log" | head -1))"
echo "benchmark:  $([ $BENCH_RC = 0 ] && echo ran || echo "exit $BENCH_RC")"
grep -E 'target' "$LOGS/bench.log" | sed 's/^/  /'
if [ -e "$LOGS/tiers.log" ]; then
    echo "tiers:      $([ $TIERS_RC = 0 ] && echo ran || echo "exit $TIERS_RC")"
    grep -E '^tiers:' "$LOGS/tiers.log" | sed 's/^/  /'
fi
echo "logs:       $LOGS"
[ $CTEST_RC = 0 ] && [ $BENCH_RC = 0 ] && [ $TIERS_RC = 0 ] && exit 0
exit 1
