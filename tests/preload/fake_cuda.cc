// A fake CUDA driver (built as libcuda.so.99) for the host tests of the
// LD_PRELOAD interposer's driver functions (fake_cuda.h): range queries and
// pointer attributes for its own allocations (anything else is an invalid
// value, as for the real driver), cuGetProcAddress[_v2] over its own
// functions, and cuDriverGetVersion as a function fragfree never wraps.
// Thread-safety: one mutex guards all state.
#include "tests/preload/fake_cuda.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#undef cuGetProcAddress

extern "C" {
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                          cuuint64_t flags);
}

namespace {

struct State {
  std::mutex mu;
  std::map<std::string, int> calls;
  std::map<CUdeviceptr, size_t> allocs;  // by start
};
State& S() {
  static State* const s = new State();
  return *s;
}

void Count(const char* name) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().calls[name]++;
}

bool Find(CUdeviceptr p, CUdeviceptr* base, size_t* size) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().allocs.upper_bound(p);
  if (it == S().allocs.begin()) return false;
  --it;
  if (p >= it->first + it->second) return false;
  *base = it->first;
  *size = it->second;
  return true;
}

void* Lookup(const char* symbol, int version) {
  if (strcmp(symbol, "cuMemGetAddressRange") == 0) {
    return version >= 3020 ? reinterpret_cast<void*>(&cuMemGetAddressRange_v2)
                           : nullptr;
  }
  if (strcmp(symbol, "cuPointerGetAttribute") == 0) {
    return reinterpret_cast<void*>(&cuPointerGetAttribute);
  }
  if (strcmp(symbol, "cuPointerGetAttributes") == 0) {
    return reinterpret_cast<void*>(&cuPointerGetAttributes);
  }
  if (strcmp(symbol, "cuDriverGetVersion") == 0) {
    return reinterpret_cast<void*>(&cuDriverGetVersion);
  }
  if (strcmp(symbol, "cuGetProcAddress") == 0) {
    return version >= 12000 ? reinterpret_cast<void*>(&cuGetProcAddress_v2)
                            : reinterpret_cast<void*>(&cuGetProcAddress);
  }
  return nullptr;
}

}  // namespace

extern "C" {

int fake_driver_calls(const char* name) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().calls.find(name);
  return it == S().calls.end() ? 0 : it->second;
}

CUdeviceptr fake_driver_alloc(size_t size) {
  void* p = malloc(size);
  std::lock_guard<std::mutex> lock(S().mu);
  S().allocs[CUdeviceptr(p)] = size;
  return CUdeviceptr(p);
}

CUresult cuDriverGetVersion(int* version) {
  Count("cuDriverGetVersion");
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize,
                                 CUdeviceptr dptr) {
  Count("cuMemGetAddressRange_v2");
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!Find(dptr, &base, &size)) return CUDA_ERROR_NOT_FOUND;
  if (pbase != nullptr) *pbase = base;
  if (psize != nullptr) *psize = size;
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                               CUdeviceptr ptr) {
  Count("cuPointerGetAttribute");
  CUdeviceptr base = 0;
  size_t size = 0;
  if (data == nullptr || !Find(ptr, &base, &size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// As the real driver: never an error for an unknown pointer; every attribute
// gets its default (zero) then.
CUresult cuPointerGetAttributes(unsigned int numAttributes,
                                CUpointer_attribute* attributes, void** data,
                                CUdeviceptr ptr) {
  Count("cuPointerGetAttributes");
  CUdeviceptr base = 0;
  size_t size = 0;
  const bool known = Find(ptr, &base, &size);
  for (unsigned int i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) continue;
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *static_cast<CUdeviceptr*>(data[i]) = known ? base : 0;
        break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *static_cast<size_t*>(data[i]) = known ? size : 0;
        break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned int*>(data[i]) = known ? CU_MEMORYTYPE_DEVICE : 0;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                             cuuint64_t /*flags*/,
                             CUdriverProcAddressQueryResult* symbolStatus) {
  Count("cuGetProcAddress_v2");
  void* p = symbol != nullptr ? Lookup(symbol, cudaVersion) : nullptr;
  if (symbolStatus != nullptr) {
    *symbolStatus = p != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS
                                 : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  if (pfn != nullptr) *pfn = p;
  return p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                          cuuint64_t /*flags*/) {
  Count("cuGetProcAddress");
  void* p = symbol != nullptr ? Lookup(symbol, cudaVersion) : nullptr;
  if (pfn != nullptr) *pfn = p;
  return p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
