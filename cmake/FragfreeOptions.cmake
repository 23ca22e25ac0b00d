# Every build option of fragfree, one line of documentation each.
option(FRAGFREE_WITH_CUDA "Build the CUDA driver VMM backend (needs CUDA toolkit headers; the driver is dlopen'd)" ON)
option(FRAGFREE_BUILD_TESTS "Build the GoogleTest suites (ctest -L host / -L gpu)" ON)
option(FRAGFREE_BUILD_BENCHMARKS "Build the Google Benchmark micro-benchmarks" ON)
option(FRAGFREE_BUILD_REPLAY "Build fragfree-replay (trace replay and fragmentation report)" ON)
set(FRAGFREE_SANITIZE "" CACHE STRING "Sanitizers to build with: '', 'address,undefined' or 'thread'")
# Sanitizer builds keep Debian's shared abseil (no second abseil build per suite).
if(FRAGFREE_SANITIZE)
  set(_ff_static_absl_default OFF)
else()
  set(_ff_static_absl_default ON)
endif()
option(FRAGFREE_STATIC_ABSEIL
  "Build abseil from source (PIC) and link it statically: libfragfree.so needs no abseil .so (cmake/FragfreeDeps.cmake)"
  ${_ff_static_absl_default})
if(FRAGFREE_SANITIZE)
  add_compile_options(-fsanitize=${FRAGFREE_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${FRAGFREE_SANITIZE})
endif()
# Shared libraries link with -Wl,--no-undefined, except under clang's
# sanitizers: clang links the sanitizer runtime into executables only, so a
# sanitized shared library gets its __asan_* / __tsan_* from the program.
set(FRAGFREE_NO_UNDEFINED -Wl,--no-undefined)
if(FRAGFREE_SANITIZE AND CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  set(FRAGFREE_NO_UNDEFINED "")
endif()
