#!/usr/bin/env bash
# Shared by scripts/test.sh and scripts/stress.sh: install what is missing,
# configure and build. Source it; do not run it.
# SPDX-License-Identifier: Apache-2.0

RSP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RSP_DEBS=(cmake make gcc g++ pkg-config liburcu-dev libck-dev libcmocka-dev)
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
        apt-get install -y "${missing[@]}" >/dev/null 2>&1 ||
            { apt-get update >/dev/null && apt-get install -y "${missing[@]}" >/dev/null; } ||
            { echo "rsp: apt-get install -y ${missing[*]} failed" >&2; return 1; }
    else
        echo "rsp: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
        return 1
    fi
}

# rsp_build DIR [cmake args...]: configure and build into $RSP_ROOT/DIR.
# Configure output goes to DIR.configure.log (printed on failure); cmake
# re-configures incrementally, so calling this again is cheap.
rsp_build() {
    local dir=$RSP_ROOT/$1
    shift
    if ! cmake -S "$RSP_ROOT" -B "$dir" "$@" >"$dir.configure.log" 2>&1; then
        cat "$dir.configure.log" >&2
        echo "rsp: configure of $dir failed (log: $dir.configure.log)" >&2
        return 1
    fi
    cmake --build "$dir" -j "$RSP_JOBS"
}
