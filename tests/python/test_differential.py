"""The seed's class against the Python original (differential.py), when
MSTAR_ANCHOR_DIR names a copy of it; skipped otherwise. Run in a process of
its own: the original's real `mstar` modules must not meet the stand-ins
rsp.seed.install_alias puts in sys.modules for other tests.
SPDX-License-Identifier: Apache-2.0
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(not os.environ.get("MSTAR_ANCHOR_DIR"),
                    reason="MSTAR_ANCHOR_DIR does not name a copy of the Python original "
                           "(docs/python.md, \"The original's own tests\")")
def test_the_seed_class_agrees_with_the_original_on_random_sequences():
    r = subprocess.run([sys.executable, os.path.join(HERE, "differential.py"), "--seeds", "60"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode == 77:
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0, r.stdout + r.stderr
