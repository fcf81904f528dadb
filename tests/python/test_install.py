# `pip install ./python` works offline into a venv (Debian's setuptools, no
# index), and the installed package finds librsp through RSP_LIBRARY.
# SPDX-License-Identifier: Apache-2.0
import os
import shutil
import subprocess
import sys

import pytest

from conftest import PKG


def _venv_and_sources(tmp_path):
    """A venv that sees the system's packages (Debian's torch) and a copy of
    the package's sources (building writes build/ and *.egg-info beside
    them); skips where Python has no venv module."""
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"no venv module here: {r.stderr.strip()[:200]}")
    src = tmp_path / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    return venv, str(venv / "bin" / "python"), src


def test_pip_install_offline(tmp_path):
    venv, py, src = _venv_and_sources(tmp_path)
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


def test_pip_install_bundles_librsp_and_fast_path(tmp_path):
    """RSP_BUNDLE_DIR (scripts/install_python.sh) copies the build's librsp and
    rsp._fast into the package: the installed package runs with neither
    RSP_LIBRARY nor the build tree, on its fast path when the build made one."""
    lib = os.environ.get("RSP_LIBRARY")
    if not lib:
        pytest.skip("RSP_LIBRARY does not name a build's librsp")
    build_src = os.path.dirname(os.path.abspath(lib))
    has_fast = any(f.startswith("_fast") and f.endswith(".so") for f in os.listdir(build_src))
    has_ucx = os.path.isfile(os.path.join(build_src, "librsp_ucx.so"))
    venv, py, src = _venv_and_sources(tmp_path)
    env = dict(os.environ, RSP_BUNDLE_DIR=build_src)
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--quiet", str(src)], capture_output=True, text=True, timeout=240,
                       cwd=str(tmp_path), env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    pkg = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages" / "rsp"
    assert (pkg / "librsp.so").is_file() and not (pkg / "librsp.so").is_symlink()
    assert (pkg / "librsp_ucx.so").is_file() == has_ucx
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RSP_LIBRARY", "RSP_UCX_LIBRARY", "RSP_PY_FAST",
                        "LD_LIBRARY_PATH")}
    code = ("import rsp, rsp.pool, rsp._ffi as f; "
            "p = rsp.Pool('cpu', rsp.PoolConfig(1, [rsp.BlockSpec('s', (4,))], 4)); "
            "p.ingest_request('a'); s = rsp.Step(1, [('a', 'main', 1)]); p.step_next(s); "
            "print(f.lib._name, rsp.pool._fast_enabled(), rsp.ucx.available(), "
            "p.addressing('main').slot_indices.tolist())")
    r = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    name, fast, ucx, slots = r.stdout.split(maxsplit=3)
    assert name == str(pkg / "librsp.so")
    assert fast == str(has_fast)
    assert ucx == str(has_ucx)  # the bundled librsp_ucx loads over the bundled librsp
    assert slots.strip() == "[1]"

    # A directory without librsp is refused with a message, nothing installed.
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--quiet", "--force-reinstall", "--no-deps", str(src)],
                       capture_output=True, text=True, timeout=240, cwd=str(tmp_path),
                       env=dict(os.environ, RSP_BUNDLE_DIR=str(empty)))
    assert r.returncode != 0
    assert "no librsp.so there" in r.stdout + r.stderr
