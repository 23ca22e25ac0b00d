# cmake --install: libfragfree.so, the public headers, fragfree-replay, a
# package config so that find_package(fragfree) gives fragfree::fragfree, and
# fragfree.pc for pkg-config. Components: "fragfree" (library, headers, CMake
# config, fragfree.pc) and "replay" (fragfree-replay). abseil is linked
# statically and privately into libfragfree.so (cmake/FragfreeDeps.cmake), so
# neither the CMake config nor fragfree.pc names it: consumers need only
# libfragfree.so (tests/packaging/consumer_test.sh checks both ways).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS fragfree EXPORT fragfree-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT fragfree)
install(FILES shim/include/fragfree/fragfree.h allocator/obs/stat_fields.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fragfree COMPONENT fragfree)
if(TARGET fragfree-replay)
  install(TARGETS fragfree-replay RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT replay)
endif()
install(EXPORT fragfree-targets NAMESPACE fragfree::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fragfree COMPONENT fragfree)
configure_package_config_file(cmake/fragfree-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/fragfree-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fragfree)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/fragfree-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fragfree-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/fragfree-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fragfree COMPONENT fragfree)
# fragfree.pc: relative to its own folder (${pcfiledir}), so that the files
# work wherever --prefix puts them.
file(RELATIVE_PATH FRAGFREE_PC_TO_PREFIX
     /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" FRAGFREE_PC_TO_PREFIX "${FRAGFREE_PC_TO_PREFIX}")
configure_file(cmake/fragfree.pc.in ${CMAKE_CURRENT_BINARY_DIR}/fragfree.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fragfree.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT fragfree)
