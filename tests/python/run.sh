#!/bin/sh
# run.sh PYTHON LIBRSP ABI_DUMP: the binding's pytest suite against LIBRSP.
# Exits 77 (ctest: skipped) with the reason when PYTHON lacks pytest or
# torch; scripts/test.sh installs both (python3-pytest, python3-torch).
# SPDX-License-Identifier: Apache-2.0
set -eu
py=$1
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v "$py" >/dev/null 2>&1; then
    echo "SKIPPED: no $py (set -DRSP_PYTHON=...)"; exit 77
fi
for m in pytest torch; do
    if ! "$py" -c "import $m" >/dev/null 2>&1; then
        echo "SKIPPED: $py cannot import $m (Debian: apt-get install python3-pytest python3-torch)"
        exit 77
    fi
done
export RSP_LIBRARY="$2" RSP_ABI_DUMP="$3" PYTHONPATH="$here/../../python"
# With rsp._fast built beside librsp (python/CMakeLists.txt): the suite on
# the fast path (RSP_PY_FAST=1: a module that does not load fails the run
# instead of falling back), then again on the ctypes path.
if ls "$(dirname "$2")"/_fast*.so >/dev/null 2>&1; then
    echo "rsp._fast built: the suite with RSP_PY_FAST=1, then RSP_PY_FAST=0"
    RSP_PY_FAST=1 "$py" -m pytest -q -p no:cacheprovider "$here"
fi
RSP_PY_FAST=0 exec "$py" -m pytest -q -p no:cacheprovider "$here"
