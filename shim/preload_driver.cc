// The interposed address-range queries (docs/ipc.md, "Address ranges"): for a
// pointer inside a fragfree block (or a block opened from another process),
// cuMemGetAddressRange_v2 and cuPointerGetAttribute(s) with
// CU_POINTER_ATTRIBUTE_RANGE_START_ADDR / RANGE_SIZE answer the whole block,
// where the driver knows only the physical page (VMM handle) under the
// pointer. Everything else is the driver's answer, unchanged.
//
// Callers that do not bind these names through the dynamic linker are reached
// through the lookup functions, which hand out fragfree's wrappers for exactly
// these names and the driver's own functions for everything else:
// cuGetProcAddress / cuGetProcAddress_v2 (a program linked with libcuda) and
// the runtime's cudaGetDriverEntryPoint[ByVersion][_ptsz] (PyTorch's c10
// driver API, Triton, CCCL). cuMemGetAddressRange (v1) is the 32-bit ABI
// (CUdeviceptr_v1 is unsigned int): no fragfree address fits in it, so it is
// not interposed.
//
// Thread-safety: every function is thread-safe (the range lookup takes each
// device allocator's own lock; the real functions are atomic slots). Nothing
// here creates a device allocator or initialises CUDA.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "shim/preload.h"
#include "shim/preload_real.h"

// cuda.h maps cuGetProcAddress to cuGetProcAddress_v2; the unversioned
// symbol (CUDA 11.3's four-argument ABI) is defined below as well.
#undef cuGetProcAddress

#define FF_INTERPOSE extern "C" __attribute__((visibility("default")))

extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                          cuuint64_t flags);
cudaError_t cudaGetDriverEntryPoint_ptsz(
    const char* symbol, void** funcPtr, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** funcPtr, unsigned int cudaVersion,
    unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus);
}

namespace fragfree::preload {
namespace {

// The whole block under `ptr`, when fragfree handed it out.
bool Range(CUdeviceptr ptr, CUdeviceptr* base, size_t* size) {
  if (!Active()) return false;
  uintptr_t b = 0;
  size_t s = 0;
  if (BlockRange(uintptr_t(ptr), &b, &s) == nullptr) return false;
  *base = CUdeviceptr(b);
  *size = s;
  return true;
}

// Writes the range attribute `attribute` to `data`; false for other
// attributes.
bool PutRangeAttribute(CUpointer_attribute attribute, void* data,
                       CUdeviceptr base, size_t size) {
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
    *static_cast<CUdeviceptr*>(data) = base;
    return true;
  }
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
    *static_cast<size_t*>(data) = size;
    return true;
  }
  return false;
}

}  // namespace
}  // namespace fragfree::preload

using namespace fragfree::preload;  // NOLINT(build/namespaces): the C ABI edge

FF_INTERPOSE CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize,
                                              CUdeviceptr dptr) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (Range(dptr, &base, &size)) {
    if (pbase != nullptr) *pbase = base;
    if (psize != nullptr) *psize = size;
    return CUDA_SUCCESS;
  }
  auto real = Real().driver_mem_get_address_range.get();
  return real != nullptr ? real(pbase, psize, dptr) : kNoDriver;
}

FF_INTERPOSE CUresult cuPointerGetAttribute(void* data,
                                            CUpointer_attribute attribute,
                                            CUdeviceptr ptr) {
  CUdeviceptr base = 0;
  size_t size = 0;
  if (data != nullptr &&
      (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
       attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) &&
      Range(ptr, &base, &size)) {
    PutRangeAttribute(attribute, data, base, size);
    return CUDA_SUCCESS;
  }
  auto real = Real().driver_pointer_get_attribute.get();
  return real != nullptr ? real(data, attribute, ptr) : kNoDriver;
}

FF_INTERPOSE CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                             CUpointer_attribute* attributes,
                                             void** data, CUdeviceptr ptr) {
  auto real = Real().driver_pointer_get_attributes.get();
  if (real == nullptr) return kNoDriver;
  // The driver answers every attribute (the range with the page's); fragfree
  // then corrects the two range attributes.
  const CUresult r = real(numAttributes, attributes, data, ptr);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (r != CUDA_SUCCESS || attributes == nullptr || data == nullptr ||
      !Range(ptr, &base, &size)) {
    return r;
  }
  for (unsigned int i = 0; i < numAttributes; ++i) {
    if (data[i] != nullptr) {
      PutRangeAttribute(attributes[i], data[i], base, size);
    }
  }
  return r;
}

namespace fragfree::preload {
namespace {

// fragfree's wrapper for the driver function `symbol` (a base name, as
// cuGetProcAddress takes it) in the ABI of `cuda_version`, or nullptr when
// fragfree does not wrap it.
void* Wrapper(const char* symbol, int cuda_version) {
  if (symbol == nullptr) return nullptr;
  // cuMemGetAddressRange became 64-bit (_v2) in CUDA 3.2.
  if (strcmp(symbol, "cuMemGetAddressRange") == 0) {
    return cuda_version >= 3020
               ? reinterpret_cast<void*>(&::cuMemGetAddressRange_v2)
               : nullptr;
  }
  if (strcmp(symbol, "cuPointerGetAttribute") == 0) {
    return reinterpret_cast<void*>(&::cuPointerGetAttribute);
  }
  if (strcmp(symbol, "cuPointerGetAttributes") == 0) {
    return reinterpret_cast<void*>(&::cuPointerGetAttributes);
  }
  // So that lookups through a handed-out cuGetProcAddress are routed too.
  if (strcmp(symbol, "cuGetProcAddress") == 0) {
    return cuda_version >= 12000
               ? reinterpret_cast<void*>(&::cuGetProcAddress_v2)
               : reinterpret_cast<void*>(&::cuGetProcAddress);
  }
  return nullptr;
}

// After a successful lookup of `symbol` by the real function: fragfree's
// wrapper replaces the driver's function when it has one.
void Substitute(const char* symbol, int cuda_version, void** pfn) {
  if (!Active() || pfn == nullptr || *pfn == nullptr) return;
  if (void* w = Wrapper(symbol, cuda_version)) *pfn = w;
}

// The CUDA version cudaGetDriverEntryPoint asks the driver for: the
// runtime's own (0 when unknown).
int RuntimeVersion() {
  static std::atomic<int> version{-1};
  int v = version.load(std::memory_order_acquire);
  if (v >= 0) return v;
  v = 0;
  auto get = Real().cudaRuntimeGetVersion.get();
  if (get == nullptr || get(&v) != cudaSuccess) v = 0;
  version.store(v, std::memory_order_release);
  return v;
}

template <typename Real>
cudaError_t EntryPoint(Real real, const char* symbol, void** funcPtr,
                       unsigned long long flags,
                       cudaDriverEntryPointQueryResult* driverStatus) {
  if (real == nullptr) return kNoRuntime;
  const int version = RuntimeVersion();
  // Before CUDA 12.0 the function had no driverStatus argument: whatever is
  // in that register is not the caller's, so it is neither passed on nor
  // read.
  if (version < 12000) driverStatus = nullptr;
  const cudaError_t r = real(symbol, funcPtr, flags, driverStatus);
  if (r == cudaSuccess && (driverStatus == nullptr ||
                           *driverStatus == cudaDriverEntryPointSuccess)) {
    Substitute(symbol, version, funcPtr);
  }
  return r;
}

template <typename Real>
cudaError_t EntryPointByVersion(Real real, const char* symbol, void** funcPtr,
                                unsigned int cudaVersion,
                                unsigned long long flags,
                                cudaDriverEntryPointQueryResult* driverStatus) {
  if (real == nullptr) return kNoRuntime;
  const cudaError_t r = real(symbol, funcPtr, cudaVersion, flags, driverStatus);
  if (r == cudaSuccess && (driverStatus == nullptr ||
                           *driverStatus == cudaDriverEntryPointSuccess)) {
    Substitute(symbol, int(cudaVersion), funcPtr);
  }
  return r;
}

}  // namespace
}  // namespace fragfree::preload

FF_INTERPOSE CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult* symbolStatus) {
  auto real = Real().driver_get_proc_address_v2.get();
  if (real == nullptr) return kNoDriver;
  const CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS && (symbolStatus == nullptr ||
                            *symbolStatus == CU_GET_PROC_ADDRESS_SUCCESS)) {
    Substitute(symbol, cudaVersion, pfn);
  }
  return r;
}

FF_INTERPOSE CUresult cuGetProcAddress(const char* symbol, void** pfn,
                                       int cudaVersion, cuuint64_t flags) {
  auto real = Real().driver_get_proc_address_v1.get();
  if (real == nullptr) return kNoDriver;
  const CUresult r = real(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS) Substitute(symbol, cudaVersion, pfn);
  return r;
}

FF_INTERPOSE cudaError_t cudaGetDriverEntryPoint(
    const char* symbol, void** funcPtr, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint(Real().cudaGetDriverEntryPoint.get(), symbol, funcPtr,
                    flags, driverStatus);
}

FF_INTERPOSE cudaError_t cudaGetDriverEntryPoint_ptsz(
    const char* symbol, void** funcPtr, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPoint(Real().cudaGetDriverEntryPoint_ptsz.get(), symbol, funcPtr,
                    flags, driverStatus);
}

FF_INTERPOSE cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** funcPtr, unsigned int cudaVersion,
    unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPointByVersion(Real().cudaGetDriverEntryPointByVersion.get(),
                             symbol, funcPtr, cudaVersion, flags, driverStatus);
}

FF_INTERPOSE cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** funcPtr, unsigned int cudaVersion,
    unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus) {
  return EntryPointByVersion(Real().cudaGetDriverEntryPointByVersion_ptsz.get(),
                             symbol, funcPtr, cudaVersion, flags, driverStatus);
}
