#!/usr/bin/env bash
# Every C, header and CUDA file that git tracks is formatted as .clang-format
# says: clang-format --dry-run --Werror on each, listing what differs.
#   scripts/check_format.sh         check (exit 1 on a difference)
#   scripts/check_format.sh --fix   format the files in place
# The tree is formatted with Debian bookworm's clang-format (14); another
# version may disagree on a few lines. SPDX-License-Identifier: Apache-2.0
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rsp_ensure_deps clang-format || exit 1
cf=$(command -v clang-format-14 || command -v clang-format)
mapfile -t files < <(cd "$RSP_ROOT" && git ls-files '*.c' '*.h' '*.cu' '*.cpp' '*.hpp')
cd "$RSP_ROOT" || exit 1
if [ "${1:-}" = --fix ]; then
    "$cf" -i "${files[@]}"
    exit 0
fi
echo "rsp: format: $("$cf" --version | head -1), ${#files[@]} files"
if ! "$cf" --dry-run --Werror "${files[@]}" 2>/tmp/rsp-format.$$; then
    grep -E "^[^ ].*: error:" /tmp/rsp-format.$$ | sed 's/: error: code should be clang-formatted.*//' | sort | uniq -c |
        awk '{print "rsp: format: " $2 " (" $1 " places)"}'
    rm -f /tmp/rsp-format.$$
    echo "rsp: format: differs from .clang-format; run scripts/check_format.sh --fix" >&2
    exit 1
fi
rm -f /tmp/rsp-format.$$
echo "rsp: format: ok"
