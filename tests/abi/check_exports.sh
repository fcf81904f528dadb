#!/bin/sh
# check_exports.sh NM LIBRSP HEADER MAJOR MINOR: librsp.so's dynamic symbols
# follow src/librsp.map's rule (docs/abi.md): every defined one is a
# function of HEADER, rsp_ by name, bound to a version node RSP_MAJOR.m
# with m <= MINOR; and every function HEADER declares is exported.
# Prints each violation; exits 1 if there is any.
# SPDX-License-Identifier: Apache-2.0
set -eu
nm=$1 lib=$2 header=$3 major=$4 minor=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nm" -D --defined-only "$lib" >"$tmp/nm"
grep -oE 'RSP_API [^(]*[^A-Za-z0-9_]rsp_[A-Za-z0-9_]*\(' "$header" | sed 's/.*[^A-Za-z0-9_]\(rsp_[A-Za-z0-9_]*\)($/\1/' |
    sort -u >"$tmp/declared"
bad=0
: >"$tmp/exported"
while read -r _addr type sym; do
    case $sym in
    RSP_*)
        # A version node's own (absolute) symbol.
        if [ "$type" = A ]; then echo "$sym" >>"$tmp/nodes"; continue; fi ;;
    esac
    name=${sym%%@*}
    ver=${sym#"$name"}
    ver=${ver#@}
    ver=${ver#@}
    case $name in
    rsp__*) echo "internal symbol exported: $sym"; bad=1 ;;
    rsp_*) ;;
    *) echo "exported symbol not named rsp_: $sym"; bad=1 ;;
    esac
    if [ -z "$ver" ]; then
        echo "exported symbol without a version node: $sym"; bad=1
    else
        m=${ver#RSP_"$major".}
        case $m in
        "$ver" | "" | *[!0-9]*)
            echo "$sym: version node $ver is not RSP_$major.<minor>"; bad=1 ;;
        *)
            if [ "$m" -gt "$minor" ]; then
                echo "$sym: version node $ver is newer than this release ($major.$minor)"; bad=1
            fi ;;
        esac
    fi
    echo "$name" >>"$tmp/exported"
done <"$tmp/nm"
sort -u "$tmp/exported" -o "$tmp/exported"
for f in $(comm -23 "$tmp/declared" "$tmp/exported"); do
    echo "declared in the header but not exported: $f (add it to src/librsp.map)"; bad=1
done
for f in $(comm -13 "$tmp/declared" "$tmp/exported"); do
    echo "exported but not declared with RSP_API in the header: $f"; bad=1
done
if [ "$bad" = 0 ]; then
    echo "abi_exports: $(wc -l <"$tmp/exported") functions, all versioned, all in the header"
fi
exit "$bad"
