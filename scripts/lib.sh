#!/usr/bin/env bash
# Shared by scripts/test.sh and scripts/stress.sh: install what is missing,
# configure and build. Source it; do not run it.
# SPDX-License-Identifier: Apache-2.0

RSP_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RSP_DEBS=(cmake make gcc g++ pkg-config liburcu-dev libck-dev libcmocka-dev)
RSP_JOBS=${RSP_JOBS:-$(nproc 2>/dev/null || echo 2)}

# Install the Debian packages that are missing (as root), or print the command.
rsp_ensure_deps() {
    local missing=() p
    for p in "${RSP_DEBS[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ]; then
        echo "rsp: installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null ||
            { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >/dev/null; }
    else
        echo "rsp: missing packages; run: sudo apt-get install -y ${missing[*]}" >&2
        return 1
    fi
}

# rsp_build DIR [cmake args...]: configure (once) and build into $RSP_ROOT/DIR.
rsp_build() {
    local dir=$RSP_ROOT/$1
    shift
    cmake -S "$RSP_ROOT" -B "$dir" "$@" >"$dir.configure.log" 2>&1 ||
        { mkdir -p "$dir"; cat "$dir.configure.log"; return 1; }
    cmake --build "$dir" -j "$RSP_JOBS"
}
