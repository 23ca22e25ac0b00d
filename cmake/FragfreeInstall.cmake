# cmake --install: libfragfree.so, the public headers, fragfree-replay and a
# package config so that find_package(fragfree) gives fragfree::fragfree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS fragfree EXPORT fragfree-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES shim/include/fragfree/fragfree.h allocator/obs/stat_fields.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fragfree)
if(TARGET fragfree-replay)
  install(TARGETS fragfree-replay RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT fragfree-targets NAMESPACE fragfree::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fragfree)
configure_package_config_file(cmake/fragfree-config.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/fragfree-config.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fragfree)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/fragfree-config-version.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/fragfree-config.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/fragfree-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/fragfree)
