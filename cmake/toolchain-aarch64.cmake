# Cross build for 64-bit Arm Linux (aarch64) with Debian's cross compilers
# (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu) and the arm64 development
# packages of the dependencies (multiarch: liburcu-dev:arm64,
# libcmocka-dev:arm64). scripts/test.sh's `aarch64` variant uses it:
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
#         -DRSP_CUDA=OFF [-DRSP_CROSS_PKG_CONFIG_PATH=<dir with ck.pc>]
#
# Concurrency Kit's libck0 cannot be installed for two architectures at once
# (installing libck0:arm64 removes the host's libck0), so scripts/lib.sh
# unpacks the arm64 packages into build-aarch64-deps/ instead and passes the
# folder holding their ck.pc as RSP_CROSS_PKG_CONFIG_PATH.
# SPDX-License-Identifier: Apache-2.0
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(RSP_CROSS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${RSP_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${RSP_CROSS_TRIPLET}-g++)

# pkg-config reads the arm64 .pc files only, never the host's, plus the
# folders in RSP_CROSS_PKG_CONFIG_PATH first. try_compile reads this file
# again, in the same process but without the cache, so PKG_CONFIG_PATH is
# set only when the folders are known (a PKG_CONFIG_PATH of the caller's
# is otherwise left as it is: keep host folders out of it).
set(RSP_CROSS_PKG_CONFIG_PATH "" CACHE STRING
    "Folders (':'-separated) searched for arm64 .pc files before the multiarch folder")
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${RSP_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig")
if(RSP_CROSS_PKG_CONFIG_PATH)
  set(ENV{PKG_CONFIG_PATH} "${RSP_CROSS_PKG_CONFIG_PATH}")
endif()
unset(ENV{PKG_CONFIG_SYSROOT_DIR})

# Programs (pkg-config, nvcc) come from the host; libraries and headers from
# the target's multiarch folders, which the cross compiler searches itself.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# Run the target's programs (ctest, try_run) under qemu-user when it is
# there. The loader must come from the same glibc as libc.so.6: with the
# multiarch libc6:arm64 installed (liburcu8:arm64 pulls it in), libraries
# resolve to /lib/aarch64-linux-gnu, so the root is `/`; mixing in the cross
# toolchain's ld.so (-L /usr/aarch64-linux-gnu, a different glibc build)
# hangs the first pthread_create.
find_program(RSP_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(RSP_QEMU_AARCH64)
  if(EXISTS /lib/ld-linux-aarch64.so.1)
    set(CMAKE_CROSSCOMPILING_EMULATOR ${RSP_QEMU_AARCH64} -L /)
  else()
    set(CMAKE_CROSSCOMPILING_EMULATOR ${RSP_QEMU_AARCH64} -L /usr/${RSP_CROSS_TRIPLET})
  endif()
endif()
