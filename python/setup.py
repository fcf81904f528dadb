# The package's build step: pyproject.toml holds the metadata; this file only
# bundles a built librsp (and rsp._fast) into the package when asked, so that
# one install gives a package that needs no RSP_LIBRARY and runs its fast path.
# SPDX-License-Identifier: Apache-2.0
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyBundle(build_py):
    """With RSP_BUNDLE_DIR naming the directory that holds a built librsp.so
    (a CMake build tree's src/, where rsp._fast and librsp_ucx are built
    too), copy the library, the fast-path module and the UCX transport (when
    built) into the package. The package looks for
    librsp in its own directory first (_ffi._candidates) and for rsp._fast in
    the package, so the installed copy is self-contained. Without the variable
    the package is pure Python and finds librsp through RSP_LIBRARY or the
    system's library path."""

    def run(self):
        super().run()
        src = os.environ.get("RSP_BUNDLE_DIR")
        if not src:
            return
        lib = os.path.join(src, "librsp.so")
        if not os.path.isfile(lib):
            raise SystemExit(f"RSP_BUNDLE_DIR={src}: no librsp.so there (build it first: "
                             "cmake --build <dir> --target rsp)")
        dest = os.path.join(self.build_lib, "rsp")
        # copy() follows the librsp.so -> .so.0 -> .so.0.x.y links: one real file.
        shutil.copy(lib, os.path.join(dest, "librsp.so"))
        for mod in glob.glob(os.path.join(src, "_fast*.so")):
            shutil.copy(mod, dest)
        # The UCX transport, where the build made it (rsp.ucx looks beside librsp).
        ucx = os.path.join(src, "librsp_ucx.so")
        if os.path.isfile(ucx):
            shutil.copy(ucx, os.path.join(dest, "librsp_ucx.so"))


setup(cmdclass={"build_py": BuildPyBundle})
