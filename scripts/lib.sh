#!/usr/bin/env bash
# Shared by scripts/test.sh and scripts/stress.sh: install what is missing,
# configure and build. Source it; do not run it.
# SPDX-License-Identifier: Apache-2.0

RSP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RSP_DEBS=(cmake make gcc g++ pkg-config python3 liburcu-dev libck-dev libcmocka-dev libdlpack-dev libucx-dev)
RSP_JOBS=${RSP_JOBS:-$(nproc 2>/dev/null || echo 2)}

# rsp_ensure_deps [extra-debs...]: install the Debian packages that are
# missing (as root), or print the exact command and fail. Without dpkg (not
# Debian) nothing is checked here; configure names what is missing.
rsp_ensure_deps() {
    local missing=() p
    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "rsp: no dpkg-query; not checking packages (configure reports what is missing)" >&2
        return 0
    fi
    for p in "${RSP_DEBS[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ]; then
        echo "rsp: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        # Try without refreshing the index first (fast, works offline with
        # a warm cache); refresh and retry only if that fails.
        # --no-remove: never make room by removing a package (an :arm64
        # library that is not multiarch-co-installable would replace the
        # host's).
        apt-get install -y --no-remove "${missing[@]}" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y --no-remove "${missing[@]}" >/dev/null; } ||
            { echo "rsp: apt-get install -y ${missing[*]} failed" >&2; return 1; }
    else
        echo "rsp: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
        return 1
    fi
}

# rsp_ensure_python_deps: Debian's python3-pytest and python3-torch (CPU)
# for the binding's tests (tests/python), and python3-dev, whose headers
# build the package's fast path (rsp._fast, python/CMakeLists.txt) so the
# suite runs on it too; installed without recommends (as root). Never
# fatal: without them python_binding is skipped (or runs on the ctypes
# path only), saying why.
rsp_ensure_python_deps() {
    local missing=() p
    command -v dpkg-query >/dev/null 2>&1 || return 0
    for p in python3-pytest python3-torch python3-dev; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "rsp: the Python binding's tests will be skipped; to run them: sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
        return 0
    fi
    echo "rsp: installing ${missing[*]} (the Python binding's tests; a minute or two)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends --no-remove "${missing[@]}" >/dev/null 2>&1 ||
        { apt-get update >/dev/null && apt-get install -y --no-install-recommends --no-remove "${missing[@]}" >/dev/null; } ||
        echo "rsp: apt-get install ${missing[*]} failed: the Python binding's tests will be skipped" >&2
    return 0
}

# rsp_ensure_aarch64_deps DEPS-DIR: what the aarch64 cross build
# (cmake/toolchain-aarch64.cmake) needs. Adds arm64 as a dpkg foreign
# architecture (as root), installs the cross compilers and the multiarch
# packages liburcu-dev:arm64 and libcmocka-dev:arm64, and unpacks Concurrency
# Kit's arm64 packages into DEPS-DIR/root: libck0 is not multiarch
# co-installable, so installing libck0:arm64 would remove the host's libck0.
# DEPS-DIR/pkgconfig/ck.pc then points at that copy; pass DEPS-DIR/pkgconfig
# as RSP_CROSS_PKG_CONFIG_PATH.
rsp_ensure_aarch64_deps() {
    local deps=$1 f
    if ! command -v dpkg >/dev/null 2>&1; then
        echo "rsp: the aarch64 build needs Debian's multiarch packages (no dpkg here)" >&2
        return 1
    fi
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        if [ "$(id -u)" -ne 0 ]; then
            echo "rsp: arm64 is not a dpkg architecture; run: sudo dpkg --add-architecture arm64 && sudo apt-get update" >&2
            return 1
        fi
        echo "rsp: adding arm64 as a dpkg foreign architecture"
        dpkg --add-architecture arm64 && apt-get update >/dev/null ||
            { echo "rsp: dpkg --add-architecture arm64 && apt-get update failed" >&2; return 1; }
    fi
    # libstdc++6:arm64: rsp-stress's C++ runtime, when run under qemu-user.
    rsp_ensure_deps gcc-aarch64-linux-gnu g++-aarch64-linux-gnu liburcu-dev:arm64 \
        libcmocka-dev:arm64 libstdc++6:arm64 || return 1
    # qemu-user runs the tests; without it the variant only builds.
    rsp_ensure_deps qemu-user ||
        echo "rsp: no qemu-user: the aarch64 tree is built but not tested" >&2
    [ -f "$deps/pkgconfig/ck.pc" ] && return 0
    echo "rsp: unpacking libck0:arm64 and libck-dev:arm64 into $deps"
    rm -rf "$deps" && mkdir -p "$deps/debs" "$deps/pkgconfig" || return 1
    # Root downloads as root (APT's _apt sandbox user cannot write here).
    (cd "$deps/debs" && apt-get -q -o APT::Sandbox::User="$(id -un)" download \
        libck0:arm64 libck-dev:arm64 >/dev/null) ||
        { echo "rsp: apt-get download libck0:arm64 libck-dev:arm64 failed" >&2; return 1; }
    for f in "$deps"/debs/*.deb; do
        dpkg-deb -x "$f" "$deps/root" || return 1
    done
    sed -e "s|^prefix=.*|prefix=$deps/root/usr|" -e 's|^includedir=.*|includedir=${prefix}/include|' \
        -e 's|^libdir=.*|libdir=${prefix}/lib/aarch64-linux-gnu|' \
        "$deps/root/usr/lib/aarch64-linux-gnu/pkgconfig/ck.pc" >"$deps/pkgconfig/ck.pc"
}

# rsp_build DIR [cmake args...]: configure and build into $RSP_ROOT/DIR.
# Configure output goes to DIR.configure.log (printed on failure); cmake
# re-configures incrementally, so calling this again is cheap. Compilers run
# through ccache when it is installed (it is not a dependency), unless
# RSP_CCACHE=0 or the caller set CMAKE_C_COMPILER_LAUNCHER themselves.
rsp_build() {
    local dir=$RSP_ROOT/$1 ccache= lang
    local launch=()
    shift
    if [ -z "${CMAKE_C_COMPILER_LAUNCHER:-}" ]; then
        if [ "${RSP_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
            ccache=ccache
        fi
        # Passed either way: RSP_CCACHE=0 also clears it in a tree that used it.
        for lang in C CXX CUDA; do
            launch+=("-DCMAKE_${lang}_COMPILER_LAUNCHER=$ccache")
        done
    fi
    if ! cmake -S "$RSP_ROOT" -B "$dir" "${launch[@]}" "$@" >"$dir.configure.log" 2>&1; then
        cat "$dir.configure.log" >&2
        echo "rsp: configure of $dir failed (log: $dir.configure.log)" >&2
        return 1
    fi
    cmake --build "$dir" -j "$RSP_JOBS"
}
