// Test controls of the fake CUDA driver (fake_cuda.cc), a stand-in for
// libcuda with which the LD_PRELOAD interposer's driver functions
// (shim/preload_driver.cc) are tested without a GPU: address-range queries
// for memory it "allocated", cuGetProcAddress for its own functions, and a
// call counter per function.
// Thread-safety: every function is thread-safe (one mutex inside).
#ifndef FRAGFREE_TESTS_PRELOAD_FAKE_CUDA_H_
#define FRAGFREE_TESTS_PRELOAD_FAKE_CUDA_H_

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

// How many times the fake driver's function `name` ran (its exported name,
// e.g. "cuMemGetAddressRange_v2").
int fake_driver_calls(const char* name);
// Memory "the driver" allocated: its range queries answer [p, p + size).
CUdeviceptr fake_driver_alloc(size_t size);

#ifdef __cplusplus
}
#endif

#endif  // FRAGFREE_TESTS_PRELOAD_FAKE_CUDA_H_
