// The interposed memory-pool calls through which PyTorch's cudaMallocAsync
// backend reads and trims "its" pool (c10/cuda/CUDAMallocAsyncAllocator.cpp:
// cudaDeviceGetDefaultMemPool, cudaMemPoolGetAttribute for the reserved/used
// current/high attributes, cudaMemPoolSetAttribute to reset the highs,
// cudaMemPoolTrimTo in empty_cache), plus cudaDeviceGetMemPool and
// cudaDeviceSetMemPool so that a pool the program makes current is honoured.
// A device's default pool answers with the runtime's figures plus fragfree's
// (allocated bytes as "used", mapped bytes as "reserved"), so
// torch.cuda.memory_stats() and torch.cuda.empty_cache() reflect fragfree.
// Every call is forwarded to the runtime first; other pools are untouched.
// Thread-safety: thread-safe (engine calls lock inside the engine).
#include <cuda_runtime_api.h>

#include "shim/preload.h"
#include "shim/preload_real.h"
#include "shim/runtime.h"

#define FF_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace fragfree::preload {
namespace {

bool IsSizeAttribute(cudaMemPoolAttr attr) {
  return attr == cudaMemPoolAttrReservedMemCurrent ||
         attr == cudaMemPoolAttrReservedMemHigh ||
         attr == cudaMemPoolAttrUsedMemCurrent ||
         attr == cudaMemPoolAttrUsedMemHigh;
}

// The engine of the device whose default pool `pool` is, if fragfree serves it.
DeviceAllocator* EngineOfPool(cudaMemPool_t pool) {
  int device = -1;
  if (!IsDefaultPool(pool, &device)) return nullptr;
  return ExistingServed(device);
}

uint64_t FragfreeFigure(DeviceAllocator& d, cudaMemPoolAttr attr) {
  // One figure each, read without walking the arenas (GetStat): O(1).
  const char* key = nullptr;
  switch (attr) {
    case cudaMemPoolAttrReservedMemCurrent:
      key = "reserved_bytes.all.current";
      break;
    case cudaMemPoolAttrReservedMemHigh:
      key = "reserved_bytes.all.peak";
      break;
    case cudaMemPoolAttrUsedMemCurrent:
      key = "allocated_bytes.all.current";
      break;
    case cudaMemPoolAttrUsedMemHigh:
      key = "allocated_bytes.all.peak";
      break;
    default:
      return 0;
  }
  return uint64_t(d.GetStat(key).value_or(0));
}

}  // namespace
}  // namespace fragfree::preload

using fragfree::DeviceAllocator;
using namespace fragfree::preload;  // NOLINT(build/namespaces): the C ABI edge

FF_INTERPOSE cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool,
                                                     int device) {
  auto real = Real().cudaDeviceGetDefaultMemPool.get();
  if (real == nullptr) return kNoRuntime;
  cudaError_t err = real(memPool, device);
  if (err == cudaSuccess && Active()) {
    NoteCudaUse();
    RememberDefaultPool(device, *memPool);
  }
  return err;
}

FF_INTERPOSE cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* memPool,
                                              int device) {
  auto real = Real().cudaDeviceGetMemPool.get();
  if (real == nullptr) return kNoRuntime;
  cudaError_t err = real(memPool, device);
  // Learn the default pool's handle when it is the current one.
  if (err == cudaSuccess && Active() && CurrentPoolIsDefault(device)) {
    DefaultPool(device);
  }
  return err;
}

FF_INTERPOSE cudaError_t cudaDeviceSetMemPool(int device,
                                              cudaMemPool_t memPool) {
  auto real = Real().cudaDeviceSetMemPool.get();
  if (real == nullptr) return kNoRuntime;
  cudaError_t err = real(device, memPool);
  if (err == cudaSuccess && Active()) {
    NoteCudaUse();
    // cudaMallocAsync now allocates from memPool; fragfree serves it only
    // while the default pool is current.
    SetCurrentPoolIsDefault(device, DefaultPool(device) == memPool);
  }
  return err;
}

FF_INTERPOSE cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool,
                                                 cudaMemPoolAttr attr,
                                                 void* value) {
  auto real = Real().cudaMemPoolGetAttribute.get();
  if (real == nullptr) return kNoRuntime;
  cudaError_t err = real(memPool, attr, value);
  if (err != cudaSuccess || !Active() || !IsSizeAttribute(attr)) return err;
  NoteCudaUse();
  if (DeviceAllocator* d = EngineOfPool(memPool)) {
    // The runtime's pool holds only what fragfree forwarded (graph captures).
    *static_cast<uint64_t*>(value) += FragfreeFigure(*d, attr);
  }
  return err;
}

FF_INTERPOSE cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool,
                                                 cudaMemPoolAttr attr,
                                                 void* value) {
  auto real = Real().cudaMemPoolSetAttribute.get();
  if (real == nullptr) return kNoRuntime;
  cudaError_t err = real(memPool, attr, value);
  if (err != cudaSuccess || !Active()) return err;
  NoteCudaUse();
  // Setting a high-water mark (to 0, the only valid value) resets it to the
  // current value; fragfree resets all its peaks.
  if (attr == cudaMemPoolAttrReservedMemHigh ||
      attr == cudaMemPoolAttrUsedMemHigh) {
    if (DeviceAllocator* d = EngineOfPool(memPool)) d->ResetPeakStats();
  }
  return err;
}

FF_INTERPOSE cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool,
                                           size_t minBytesToKeep) {
  auto real = Real().cudaMemPoolTrimTo.get();
  if (real == nullptr) return kNoRuntime;
  cudaError_t err = real(memPool, minBytesToKeep);
  if (err != cudaSuccess || !Active()) return err;
  NoteCudaUse();
  // Trimming to zero (torch.cuda.empty_cache()) returns every free page to the
  // device. A partial trim keeps fragfree's cache: the engine releases all or
  // nothing.
  if (minBytesToKeep == 0) {
    if (DeviceAllocator* d = EngineOfPool(memPool)) {
      RelaxedCapture relaxed;
      return ToCuda(d->EmptyCache());
    }
  }
  return err;
}
