# Finds fragfree's dependencies. All come from Debian packages (see README); nothing is downloaded here.
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
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
endif()
if(FRAGFREE_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(FRAGFREE_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

