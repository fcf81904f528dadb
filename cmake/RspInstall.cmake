# Installation: the public headers, the shared and static libraries, rsp.pc
# and a CMake package (find_package(rsp) -> rsp::rsp, rsp::rsp_static).
# Included from the top-level CMakeLists.txt. SPDX-License-Identifier: Apache-2.0
include(CMakePackageConfigHelpers)

set(RSP_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/rsp
    CACHE STRING "Where rspConfig.cmake is installed, relative to the prefix")

# Consumers write #include <rsp/rsp.h> (C, C++) or <rsp/rsp.hpp> (the C++17 binding).
install(FILES ${PROJECT_SOURCE_DIR}/include/rsp/rsp.h ${PROJECT_SOURCE_DIR}/include/rsp/rsp_stats.h
              ${PROJECT_SOURCE_DIR}/include/rsp/rsp.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rsp COMPONENT rsp_dev)

# Exported names: rsp::rsp (shared) and rsp::rsp_static.
set_target_properties(rsp PROPERTIES EXPORT_NAME rsp)
set_target_properties(rsp_static PROPERTIES EXPORT_NAME rsp_static)
install(TARGETS rsp rsp_static EXPORT rspTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT rsp_runtime NAMELINK_COMPONENT rsp_dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT rsp_dev
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT rsp_runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT rspTargets NAMESPACE rsp:: DESTINATION ${RSP_INSTALL_CMAKEDIR} COMPONENT rsp_dev)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rspConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/rspConfig.cmake
                              INSTALL_DESTINATION ${RSP_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/rspConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/rspConfig.cmake ${PROJECT_BINARY_DIR}/rspConfigVersion.cmake
        DESTINATION ${RSP_INSTALL_CMAKEDIR} COMPONENT rsp_dev)

# rsp.pc is relocatable: paths are relative to the .pc file (${pcfiledir}),
# so `cmake --install build --prefix DIR` works for any DIR.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(RSP_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(RSP_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(RSP_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH rsp_pc_up /x/${CMAKE_INSTALL_LIBDIR}/pkgconfig /x)
  string(REGEX REPLACE "/$" "" rsp_pc_up "${rsp_pc_up}")
  set(RSP_PC_PREFIX "\${pcfiledir}/${rsp_pc_up}")
  set(RSP_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(RSP_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(RSP_PC_LIBS_PRIVATE "-lpthread")
if(RSP_HAVE_CUDA)
  # libstdc++: the guards of the kernels' launch stubs (kernels/CMakeLists.txt).
  string(APPEND RSP_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lstdc++")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/rsp.pc.in ${PROJECT_BINARY_DIR}/rsp.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/rsp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT rsp_dev)
