# `pip install ./python` works offline into a venv (Debian's setuptools, no
# index), and the installed package finds librsp through RSP_LIBRARY.
# SPDX-License-Identifier: Apache-2.0
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PKG


def test_pip_install_offline(tmp_path):
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"no venv module here: {r.stderr.strip()[:200]}")
    py = str(venv / "bin" / "python")
    # From a copy: building writes build/ and *.egg-info beside the sources.
    src = tmp_path / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--quiet", str(src)], capture_output=True, text=True, timeout=240,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import rsp; p = rsp.RecurrentStatePool('cpu', rsp.PoolConfig(1, "
            "[rsp.BlockSpec('s', (4,))], 4)); print(p.num_free_slots, rsp.__file__)")
    r = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    free, path = r.stdout.split()
    assert free == "3" and path.startswith(str(venv))
