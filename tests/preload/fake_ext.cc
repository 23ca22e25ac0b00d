// A stand-in for a Python extension module that links the CUDA runtime and is
// loaded with RTLD_LOCAL (so libcudart is not in the global scope and
// dlsym(RTLD_NEXT) from libfragfree.so cannot see it): fake_ext_run checks
// that fragfree still serves its cudaMalloc and forwards a foreign cudaFree to
// the runtime it finds among the loaded objects.
// Thread-safety: single-threaded test code.
#include "tests/preload/fake_cudart.h"

extern "C" __attribute__((visibility("default"))) int fake_ext_run(void) {
  void* p = nullptr;
  if (cudaMalloc(&p, 4096) != cudaSuccess || p == nullptr) return 1;
  if (fake_calls("cudaMalloc") != 0) return 2;  // fragfree served it
  if (cudaFree(p) != cudaSuccess) return 3;
  void* foreign = fake_device_alloc(64);
  if (cudaFree(foreign) != cudaSuccess) return 4;
  if (fake_calls("cudaFree") != 1) return 5;  // forwarded to the runtime
  return 0;
}
