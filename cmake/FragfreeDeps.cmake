# Finds fragfree's dependencies. All come from Debian packages (see README); nothing is downloaded here.
find_package(Threads REQUIRED)
# abseil. With FRAGFREE_STATIC_ABSEIL (the default; cmake/FragfreeOptions.cmake)
# it is compiled here, position-independent, from the source of the very
# version Debian installs (scripts/deps.sh puts Debian's source package, its
# patches applied, in ~/.cache/fragfree/src/: FRAGFREE_ABSEIL_SOURCE_DIR), and
# linked statically: libfragfree.so then needs only libc, libm, libstdc++ and
# libgcc_s at run time, and copied alone anywhere it still loads. The version
# script and --exclude-libs,ALL (shim/CMakeLists.txt) keep every abseil symbol
# hidden. Only the targets fragfree uses are built (EXCLUDE_FROM_ALL).
# Debian's own static archives (libabsl_*.a) cannot be used for this: they are
# compiled for executables (-fPIE), with local-exec TLS (R_X86_64_TPOFF32 in
# sysinfo.cc.o, cordz_functions.cc.o, raw_hash_set.cc.o) and PC-relative
# references to libstdc++'s vtables and typeinfos (cord.cc.o, int128.cc.o,
# statusor.cc.o, about 15 more), which no shared object can hold: the link
# fails with "recompile with -fPIC".
# Without the static build (OFF, or the source is missing) fragfree links
# Debian's shared abseil as before, and libfragfree.so needs its ~30 .so files.
# _ff_absl_targets(DIR OUT): every target defined under the build directory DIR.
function(_ff_absl_targets dir out)
  get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(_sub IN LISTS _subdirs)
    _ff_absl_targets("${_sub}" _more)
    list(APPEND _targets ${_more})
  endforeach()
  set(${out} ${_targets} PARENT_SCOPE)
endfunction()
set(FRAGFREE_ABSEIL_SOURCE_DIR "" CACHE PATH
    "abseil's source tree for FRAGFREE_STATIC_ABSEIL (default: the one scripts/deps.sh unpacked)")
set(FRAGFREE_ABSEIL_STATIC_BUILT OFF)
if(FRAGFREE_STATIC_ABSEIL)
  set(_ff_absl_src "${FRAGFREE_ABSEIL_SOURCE_DIR}")
  if(NOT _ff_absl_src)
    # scripts/deps.sh: ~/.cache/fragfree/src/abseil-<Debian version of libabsl-dev>
    file(GLOB _ff_absl_candidates "$ENV{HOME}/.cache/fragfree/src/abseil-*/CMakeLists.txt")
    list(SORT _ff_absl_candidates)
    list(REVERSE _ff_absl_candidates)
    if(_ff_absl_candidates)
      list(GET _ff_absl_candidates 0 _ff_absl_cml)
      get_filename_component(_ff_absl_src "${_ff_absl_cml}" DIRECTORY)
    endif()
  endif()
  if(_ff_absl_src AND EXISTS "${_ff_absl_src}/absl/base/config.h")
    set(ABSL_PROPAGATE_CXX_STD ON CACHE BOOL "" FORCE)
    set(ABSL_ENABLE_INSTALL OFF CACHE BOOL "" FORCE)
    set(ABSL_BUILD_TESTING OFF CACHE BOOL "" FORCE)
    # Hidden visibility for abseil's own targets only (variables seen by the
    # subdirectory, unset again after it).
    set(CMAKE_CXX_VISIBILITY_PRESET hidden)
    set(CMAKE_VISIBILITY_INLINES_HIDDEN ON)
    set(_ff_system "")
    if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.25)
      set(_ff_system SYSTEM)  # its headers warn under fragfree's -Wextra otherwise
    endif()
    add_subdirectory("${_ff_absl_src}" "${CMAKE_BINARY_DIR}/_deps/abseil" EXCLUDE_FROM_ALL ${_ff_system})
    unset(CMAKE_CXX_VISIBILITY_PRESET)
    unset(CMAKE_VISIBILITY_INLINES_HIDDEN)
    set(FRAGFREE_ABSEIL_STATIC_BUILT ON)
    # fragfree compiles against the installed headers (/usr/include/absl, as with
    # the shared abseil, so its compile commands do not change) when they are
    # the same files as the source's: the same Debian version and patches.
    # Checked here, header by header; otherwise the source's headers are used.
    set(_ff_absl_same_headers OFF)
    if(EXISTS /usr/include/absl/base/config.h)
      set(_ff_absl_same_headers ON)
      file(GLOB_RECURSE _ff_absl_headers RELATIVE "${_ff_absl_src}/absl"
           "${_ff_absl_src}/absl/*.h" "${_ff_absl_src}/absl/*.inc")
      foreach(_ff_header IN LISTS _ff_absl_headers)
        if(NOT EXISTS "/usr/include/absl/${_ff_header}")
          continue()  # tests' headers, not installed
        endif()
        file(SHA1 "${_ff_absl_src}/absl/${_ff_header}" _ff_a)
        file(SHA1 "/usr/include/absl/${_ff_header}" _ff_b)
        if(NOT _ff_a STREQUAL _ff_b)
          set(_ff_absl_same_headers OFF)
          message(STATUS "fragfree: /usr/include/absl/${_ff_header} differs from the source's: "
                         "compiling against the source's headers")
          break()
        endif()
      endforeach()
    endif()
    if(_ff_absl_same_headers)
      _ff_absl_targets("${CMAKE_BINARY_DIR}/_deps/abseil" _ff_absl_built)
      foreach(_ff_target IN LISTS _ff_absl_built)
        set_property(TARGET ${_ff_target} PROPERTY INTERFACE_INCLUDE_DIRECTORIES "")
        set_property(TARGET ${_ff_target} PROPERTY INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "")
      endforeach()
    endif()
    message(STATUS "fragfree: abseil built statically (PIC) from ${_ff_absl_src}")
  else()
    message(WARNING "fragfree: FRAGFREE_STATIC_ABSEIL is ON but abseil's source was not found "
                    "(FRAGFREE_ABSEIL_SOURCE_DIR, or ~/.cache/fragfree/src/abseil-*: run "
                    "'. scripts/deps.sh && ff_install_deps' once). Linking Debian's shared abseil: "
                    "libfragfree.so will need its .so files, and packaging_ldd_test fails.")
  endif()
endif()
if(NOT FRAGFREE_ABSEIL_STATIC_BUILT)
  find_package(absl REQUIRED)
endif()
find_package(ZLIB REQUIRED)
if(FRAGFREE_WITH_CUDA)
  # Only the headers are needed: libcuda is opened at run time with dlopen, so the same binary
  # runs (host backend only) on machines without a driver.
  find_path(FRAGFREE_CUDA_INCLUDE_DIR cuda.h
            HINTS $ENV{CUDA_HOME}/include /usr/local/cuda/include)
  if(NOT FRAGFREE_CUDA_INCLUDE_DIR)
    message(FATAL_ERROR "FRAGFREE_WITH_CUDA=ON but cuda.h was not found; install the CUDA toolkit "
                        "or configure with -DFRAGFREE_WITH_CUDA=OFF")
  endif()
  # The toolkit's root (above include/): where the GPU tests and benchmarks look for nvcc and cudart.
  get_filename_component(FRAGFREE_CUDA_ROOT ${FRAGFREE_CUDA_INCLUDE_DIR} DIRECTORY)
endif()
if(FRAGFREE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(FRAGFREE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

