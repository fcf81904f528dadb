# The ctypes mirror (python/rsp/_ffi.py) against the compiler's layout:
# sizeof and every field's offset of each mirrored struct, as printed by
# rsp-abi-dump (tests/python/abi_dump.c). SPDX-License-Identifier: Apache-2.0
import ctypes
import json
import os
import subprocess

import pytest

from rsp import _ffi as ffi


def test_every_mirrored_struct_matches_the_c_layout():
    exe = os.environ.get("RSP_ABI_DUMP")
    if not exe:
        pytest.skip("RSP_ABI_DUMP is not set (ctest sets it to the rsp-abi-dump program)")
    c = json.loads(subprocess.run([exe], check=True, capture_output=True, text=True).stdout)
    assert set(c) == set(ffi.STRUCTS), "abi_dump.c and _ffi.STRUCTS list different structs"
    for name, (size, offsets) in c.items():
        cls = ffi.STRUCTS[name]
        py = [getattr(cls, f).offset for f, *_ in cls._fields_]
        assert ctypes.sizeof(cls) == size, f"{name}: ctypes {ctypes.sizeof(cls)} bytes, C {size}"
        assert py == offsets, f"{name}: field offsets ctypes {py}, C {offsets}"


def test_pool_config_init_stamps_the_mirrors_size():
    cfg = ffi.PoolConfig()
    ffi.pool_config_init(ctypes.byref(cfg))
    assert cfg.struct_size == ctypes.sizeof(ffi.PoolConfig)
    assert cfg.sink and cfg.world_size == 1 and cfg.owner_cpu == -1
    # A size below any release's struct is refused, nothing written.
    other = ffi.PoolConfig()
    assert ffi.pool_config_init_size(ctypes.byref(other), 8) == ffi.EINVAL
    assert other.struct_size == 0 and not other.sink
