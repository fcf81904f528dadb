# Run with cmake -P (see CMakeLists.txt). Every step must succeed; the first
# failure stops the script with its output. SPDX-License-Identifier: Apache-2.0
cmake_minimum_required(VERSION 3.22)

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "install_consumer: ${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${RSP_WORK_DIR}/prefix)
file(REMOVE_RECURSE ${RSP_WORK_DIR})
file(MAKE_DIRECTORY ${RSP_WORK_DIR})

# 1. Install the current build tree into a fresh prefix.
step("cmake --install" ${CMAKE_COMMAND} --install ${RSP_BUILD_DIR} --prefix ${prefix})
foreach(f include/rsp/rsp.h ${RSP_LIBDIR}/librsp.a ${RSP_LIBDIR}/librsp.so
          ${RSP_LIBDIR}/pkgconfig/rsp.pc ${RSP_LIBDIR}/cmake/rsp/rspConfig.cmake
          ${RSP_LIBDIR}/cmake/rsp/rspConfigVersion.cmake ${RSP_LIBDIR}/cmake/rsp/rspTargets.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "install_consumer: ${f} was not installed under ${prefix}")
  endif()
endforeach()

# 2. find_package(rsp): configure, build and run the consumer (C, C++17, static).
set(build ${RSP_WORK_DIR}/consumer-cmake)
step("configure consumer (find_package)"
     ${CMAKE_COMMAND} -S ${RSP_CONSUMER_DIR} -B ${build} -G ${RSP_GENERATOR}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${RSP_C_COMPILER}
     -DCMAKE_CXX_COMPILER=${RSP_CXX_COMPILER} -DCMAKE_BUILD_TYPE=Release)
step("build consumer (find_package)" ${CMAKE_COMMAND} --build ${build})
foreach(exe consumer_c consumer_cxx consumer_static)
  step("run ${exe}" ${build}/${exe})
endforeach()

# 3. pkg-config: compile and link by hand with what rsp.pc says.
find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${prefix}/${RSP_LIBDIR}/pkgconfig)
step("pkg-config --cflags --libs rsp" ${PKG_CONFIG} --cflags --libs rsp)
string(STRIP "${step_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
step("pkg-config --modversion rsp" ${PKG_CONFIG} --modversion rsp)
step("compile consumer (pkg-config, C11)"
     ${RSP_C_COMPILER} -std=c11 -Wall -Wextra -Werror ${RSP_CONSUMER_DIR}/consumer.c ${flags}
     -Wl,-rpath,${prefix}/${RSP_LIBDIR} -o ${RSP_WORK_DIR}/consumer_pc_c)
step("compile consumer (pkg-config, C++17)"
     ${RSP_CXX_COMPILER} -std=c++17 -Wall -Wextra -Werror -I${RSP_CONSUMER_DIR}
     ${RSP_CONSUMER_DIR}/consumer.cpp ${flags} -Wl,-rpath,${prefix}/${RSP_LIBDIR}
     -o ${RSP_WORK_DIR}/consumer_pc_cxx)
step("run consumer_pc_c" ${RSP_WORK_DIR}/consumer_pc_c)
step("run consumer_pc_cxx" ${RSP_WORK_DIR}/consumer_pc_cxx)
message(STATUS "install_consumer: all steps passed")
