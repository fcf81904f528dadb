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
exec "$py" -m pytest -q -p no:cacheprovider "$here"
