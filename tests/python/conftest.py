# pytest set-up for the Python binding's tests (tests/python/CMakeLists.txt
# runs them with RSP_LIBRARY naming the build's librsp and PYTHONPATH the
# package). SPDX-License-Identifier: Apache-2.0
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.normpath(os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, PKG)

torch = pytest.importorskip(
    "torch", reason="torch is not installed (Debian: apt-get install python3-torch); "
                    "the binding's tests need it")

import rsp  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "core_commit_check: needs the C core's check that a commit names what was "
                   "admitted (docs/semantics.md 9.2: RSP_EINVAL naming the first difference); "
                   "fails against a librsp without it")


def small_config(max_slots=8, layers=2, **kw):
    return rsp.PoolConfig(
        num_layers=layers,
        blocks=[rsp.BlockSpec("ssm", (4, 8), "float32"), rsp.BlockSpec("conv", (3, 5), "bfloat16")],
        max_slots=max_slots, **kw)


@pytest.fixture
def pool():
    """rsp's own Step API (rsp.Pool); the seed's class has tests of its own."""
    p = rsp.Pool("cpu", small_config())
    yield p
    p.cleanup()
