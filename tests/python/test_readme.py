# python/README.md's example runs as written (against this build's librsp).
# SPDX-License-Identifier: Apache-2.0
import os
import re
import subprocess
import sys

import rsp
from conftest import PKG


def test_readme_example_runs():
    text = open(os.path.join(PKG, "README.md"), encoding="utf-8").read()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 20
    env = dict(os.environ, PYTHONPATH=PKG)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr


def test_python_md_examples_run():
    # docs/python.md's examples (checkpoints and swap, export and import,
    # the UCX transport, ordered posting, callbacks, counters), each a
    # fresh interpreter, as written
    path = os.path.join(PKG, "..", "docs", "python.md")
    blocks = re.findall(r"```python\n(.*?)```", open(path, encoding="utf-8").read(), re.S)
    assert len(blocks) == 6
    env = dict(os.environ, PYTHONPATH=PKG)
    for code in blocks:
        if "rsp.ucx" in code and not rsp.ucx.available():
            continue  # the UCX example needs librsp_ucx
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, code + r.stderr
