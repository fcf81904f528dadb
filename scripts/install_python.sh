#!/usr/bin/env bash
# Install the Python package with librsp, its fast path (rsp._fast) and the
# UCX transport (librsp_ucx, where UCX is found) bundled in it, offline,
# into a virtual environment:
#   scripts/install_python.sh [VENV]      (default: ./venv)
# The venv's Python is RSP_PYTHON (default: Debian's /usr/bin/python3, the
# one python3-torch is for, as CMake's RSP_PYTHON; python3 elsewhere).
# The venv is made with --system-site-packages when it does not exist, so
# Debian's python3-torch is visible in it. librsp and rsp._fast are built
# (Release) into build-python/, then `pip install --no-build-isolation
# --no-index ./python` copies them into the package (python/setup.py,
# RSP_BUNDLE_DIR): the installed package needs no RSP_LIBRARY. Missing
# Debian packages are installed when run as root (as scripts/stress.sh),
# python3-dev and python3-venv too.
# SPDX-License-Identifier: Apache-2.0
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

venv=${1:-$PWD/venv}
rsp_ensure_deps python3-dev python3-venv python3-setuptools python3-pip python3-wheel
python=${RSP_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
if [ ! -x "$venv/bin/python" ]; then
    echo "rsp: creating the virtual environment $venv"
    "$python" -m venv --system-site-packages "$venv"
fi
py=$venv/bin/python
# The fast path is built for the venv's interpreter (its base Python's headers).
base=$("$py" -c 'import sys; print(sys._base_executable)')
echo "rsp: building librsp and rsp._fast for $base into build-python/"
rsp_build build-python -DCMAKE_BUILD_TYPE=Release -DRSP_PYTHON="$base" \
    -DBUILD_TESTING=OFF -DRSP_BUILD_STRESS=OFF -DRSP_BUILD_BENCH=OFF
echo "rsp: pip install ./python into $venv (offline)"
# From a copy: pip builds in place and would leave build/ and *.egg-info in python/.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -r "$RSP_ROOT/python" "$tmp/python"
RSP_BUNDLE_DIR=$RSP_ROOT/build-python/src "$py" -m pip install --no-build-isolation \
    --no-index --quiet "$tmp/python"
(cd "$tmp" && env -u RSP_LIBRARY -u PYTHONPATH "$py" -c \
    'import rsp, rsp.pool; print("rsp: installed", rsp.__file__, "fast path:",
                                 rsp.pool._fast_enabled(), "UCX transport:", rsp.ucx.available())')
