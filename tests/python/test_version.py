# The package's version check at import (python/rsp/_ffi.py): its mirror
# follows rsp.h's version, and a librsp that cannot serve it is an
# ImportError naming both versions. SPDX-License-Identifier: Apache-2.0
import os
import re

import pytest

from rsp import _ffi as ffi

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include", "rsp",
                      "rsp.h")


def header_version():
    text = open(HEADER).read()
    return tuple(int(re.search(rf"^#define RSP_VERSION_{p} (\d+)$", text, re.M).group(1))
                 for p in ("MAJOR", "MINOR", "PATCH"))


def test_the_mirror_follows_the_headers_version():
    assert ffi.HEADER_VERSION == header_version()


def test_the_loaded_library_is_the_headers_version():
    major, minor, patch = header_version()
    ffi.lib.rsp_version_string.restype = ffi.ctypes.c_char_p
    assert ffi.lib.rsp_version() == major * 10000 + minor * 100 + patch
    assert ffi.lib.rsp_version_string().decode() == f"{major}.{minor}.{patch}"
    ffi._check_version(ffi.lib, major, minor)  # what the import ran: no error


@pytest.mark.parametrize("delta", [(0, 1), (1, 0)])
def test_a_library_that_cannot_serve_the_mirror_is_an_import_error(delta):
    major, minor, patch = header_version()
    want = (major + delta[0], minor + delta[1])
    with pytest.raises(ImportError) as e:
        ffi._check_version(ffi.lib, *want)
    msg = str(e.value)
    assert f"mirrors rsp {want[0]}.{want[1]}" in msg
    assert f"librsp {major}.{minor}.{patch}" in msg


def test_a_library_without_the_version_functions_is_an_import_error():
    class Old:
        _name = "/old/librsp.so"

    with pytest.raises(ImportError, match="/old/librsp.so has no rsp_version_check"):
        ffi._check_version(Old(), 0, 1)
