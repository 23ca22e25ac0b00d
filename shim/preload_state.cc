// The LD_PRELOAD interposer's shared state (see preload.h): served devices,
// ownership lookups, default memory pools, error mapping and the relaxed
// capture-mode guard. (Streams: preload_streams.cc.)
// Thread-safety: everything here is atomics; the engine locks inside.
#include <array>
#include <atomic>
#include <cstdio>
#include <string>

#include "shim/preload.h"
#include "shim/preload_real.h"
#include "shim/runtime.h"

namespace fragfree::preload {
namespace {

enum DeviceState : int { kUnknown = 0, kForward = 1 };

std::array<std::atomic<int>, kMaxDevices> device_state{};
std::atomic<int> max_served{0};

std::array<std::atomic<cudaMemPool_t>, kMaxDevices> default_pools{};
std::array<std::atomic<bool>, kMaxDevices> other_pool_current{};

// Ownership lookups scan devices [0, max_served).
DeviceAllocator* NoteServed(int device, DeviceAllocator* d) {
  int seen = max_served.load(std::memory_order_relaxed);
  while (seen < device + 1 &&
         !max_served.compare_exchange_weak(seen, device + 1,
                                           std::memory_order_acq_rel)) {
  }
  return d;
}

}  // namespace

DeviceAllocator* ExistingServed(int device) {
  return Runtime::Get().Existing(device);
}

int MaxServedDevice() { return max_served.load(std::memory_order_acquire); }

DeviceAllocator* Served(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  if (DeviceAllocator* d = Runtime::Get().Existing(device)) {
    // Created here or through the C API: either way ownership lookups must
    // see it.
    return max_served.load(std::memory_order_relaxed) > device
               ? d
               : NoteServed(device, d);
  }
  if (device_state[device].load(std::memory_order_acquire) == kForward) {
    return nullptr;
  }
  NoteEngineUse();
  absl::StatusOr<DeviceAllocator*> d = Runtime::Get().Device(device);
  if (!d.ok()) {
    if (device_state[device].exchange(kForward) != kForward) {
      fprintf(stderr,
              "fragfree: device %d is not served by fragfree, its CUDA memory "
              "calls go to the CUDA runtime: %s\n",
              device, std::string(d.status().message()).c_str());
    }
    return nullptr;
  }
  return NoteServed(device, *d);
}

DeviceAllocator* Owner(const void* ptr, int hint, int* device) {
  if (ptr == nullptr) return nullptr;
  Runtime& rt = Runtime::Get();
  if (DeviceAllocator* d = rt.Existing(hint)) {
    if (d->AllocationSize(ptr) > 0) {
      *device = hint;
      return d;
    }
  }
  const int n = MaxServedDevice();
  for (int i = 0; i < n; ++i) {
    if (i == hint) continue;
    DeviceAllocator* d = rt.Existing(i);
    if (d != nullptr && d->AllocationSize(ptr) > 0) {
      *device = i;
      return d;
    }
  }
  return nullptr;
}

DeviceAllocator* BlockRange(uintptr_t ptr, uintptr_t* base, size_t* size,
                            int* device) {
  if (ptr == 0) return nullptr;
  Runtime& rt = Runtime::Get();
  for (int i = 0; i < kMaxDevices; ++i) {
    DeviceAllocator* d = rt.Existing(i);
    if (d == nullptr) continue;
    absl::StatusOr<std::pair<uintptr_t, size_t>> r =
        d->AddressRange(reinterpret_cast<const void*>(ptr));
    if (!r.ok()) continue;
    *base = r->first;
    *size = r->second;
    if (device != nullptr) *device = i;
    return d;
  }
  return nullptr;
}

cudaMemPool_t DefaultPool(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  cudaMemPool_t pool = default_pools[device].load(std::memory_order_acquire);
  if (pool != nullptr) return pool;
  auto get = Real().cudaDeviceGetDefaultMemPool.get();
  if (get == nullptr || get(&pool, device) != cudaSuccess) return nullptr;
  default_pools[device].store(pool, std::memory_order_release);
  return pool;
}

void RememberDefaultPool(int device, cudaMemPool_t pool) {
  if (device < 0 || device >= kMaxDevices || pool == nullptr) return;
  default_pools[device].store(pool, std::memory_order_release);
}

bool IsDefaultPool(cudaMemPool_t pool, int* device) {
  if (pool == nullptr) return false;
  for (int i = 0; i < kMaxDevices; ++i) {
    if (default_pools[i].load(std::memory_order_acquire) == pool) {
      *device = i;
      return true;
    }
  }
  // A pool handle obtained some other way (the driver API): compare with the
  // current device's default pool.
  int current = -1;
  if (CurrentDevice(&current) != cudaSuccess) return false;
  if (DefaultPool(current) == pool) {
    *device = current;
    return true;
  }
  return false;
}

bool CurrentPoolIsDefault(int device) {
  if (device < 0 || device >= kMaxDevices) return true;
  return !other_pool_current[device].load(std::memory_order_acquire);
}

void SetCurrentPoolIsDefault(int device, bool is_default) {
  if (device < 0 || device >= kMaxDevices) return;
  other_pool_current[device].store(!is_default, std::memory_order_release);
}

cudaError_t ToCuda(const absl::Status& status) {
  if (status.ok()) return cudaSuccess;
  Runtime::Get().Report(status);
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
      return cudaErrorMemoryAllocation;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      return cudaErrorInvalidValue;
    case absl::StatusCode::kUnavailable:
      return cudaErrorNoDevice;
    case absl::StatusCode::kFailedPrecondition:
      return cudaErrorNotPermitted;
    default:
      return cudaErrorUnknown;
  }
}

RelaxedCapture::RelaxedCapture() {
  if (auto exchange = Real().cudaThreadExchangeStreamCaptureMode.get()) {
    swapped_ = exchange(&mode_) == cudaSuccess;
  }
}

RelaxedCapture::~RelaxedCapture() {
  if (swapped_) Real().cudaThreadExchangeStreamCaptureMode.get()(&mode_);
}

}  // namespace fragfree::preload
