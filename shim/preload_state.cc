// The LD_PRELOAD interposer's shared state (see preload.h): served devices,
// ownership lookups, the registry of seen streams, default memory pools, error
// mapping and the relaxed capture-mode guard.
// Thread-safety: devices and pools are atomics; the stream registry is guarded
// by a std::mutex (held across fork() by the fork handlers) with a per-thread
// one-entry cache validated by a generation counter that cudaStreamDestroy
// bumps.
#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "shim/preload.h"
#include "shim/preload_real.h"
#include "shim/runtime.h"

namespace fragfree::preload {
namespace {

enum DeviceState : int { kUnknown = 0, kForward = 1 };

std::array<std::atomic<int>, kMaxDevices> device_state{};
std::atomic<int> max_served{0};

struct StreamRegistry {
  std::mutex mu;
  absl::flat_hash_map<StreamHandle, int> device_of;  // guarded by mu
  std::atomic<uint64_t> generation{1};
};
StreamRegistry& Streams() {
  static StreamRegistry* const registry = new StreamRegistry();
  return *registry;
}

struct StreamCache {
  StreamHandle stream = 0;
  int device = -1;
  uint64_t generation = 0;
};
thread_local StreamCache stream_cache;

std::array<std::atomic<cudaMemPool_t>, kMaxDevices> default_pools{};
std::array<std::atomic<bool>, kMaxDevices> other_pool_current{};

cudaError_t CurrentDevice(int* device) {
  auto get_device = Real().cudaGetDevice.get();
  if (get_device == nullptr) return kNoRuntime;
  return get_device(device);
}

}  // namespace

DeviceAllocator* ExistingServed(int device) {
  return Runtime::Get().Existing(device);
}

int MaxServedDevice() { return max_served.load(std::memory_order_acquire); }

DeviceAllocator* Served(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  if (DeviceAllocator* d = Runtime::Get().Existing(device)) return d;
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
  int seen = max_served.load(std::memory_order_relaxed);
  while (seen < device + 1 &&
         !max_served.compare_exchange_weak(seen, device + 1,
                                           std::memory_order_acq_rel)) {
  }
  return *d;
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

StreamHandle Normalize(cudaStream_t stream, bool per_thread) {
  StreamHandle s = reinterpret_cast<StreamHandle>(stream);
  if (s == 0 && per_thread) return kPerThreadStream;
  if (s == reinterpret_cast<StreamHandle>(cudaStreamLegacy)) {
    return kLegacyStream;
  }
  return s;
}

cudaError_t StreamDevice(StreamHandle stream, int* device) {
  if (IsSpecialStream(stream)) return CurrentDevice(device);
  StreamRegistry& reg = Streams();
  const uint64_t generation = reg.generation.load(std::memory_order_acquire);
  if (stream_cache.generation == generation && stream_cache.stream == stream) {
    *device = stream_cache.device;
    return cudaSuccess;
  }
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.device_of.find(stream);
    if (it != reg.device_of.end()) {
      *device = it->second;
      stream_cache = {stream, it->second, generation};
      return cudaSuccess;
    }
  }
  cudaError_t err;
  if (auto get = Real().cudaStreamGetDevice.get()) {
    err = get(reinterpret_cast<cudaStream_t>(stream), device);
  } else {
    err = CurrentDevice(device);
  }
  if (err != cudaSuccess) return err;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    reg.device_of.emplace(stream, *device);
  }
  stream_cache = {stream, *device, generation};
  return cudaSuccess;
}

std::vector<StreamHandle> SeenStreams(int device) {
  StreamRegistry& reg = Streams();
  std::vector<StreamHandle> out;
  std::lock_guard<std::mutex> lock(reg.mu);
  for (const auto& [stream, dev] : reg.device_of) {
    if (dev == device) out.push_back(stream);
  }
  return out;
}

std::vector<StreamHandle> StreamsToFence(int device) {
  std::vector<StreamHandle> out;
  auto query = Real().cudaStreamQuery.get();
  for (StreamHandle s : SeenStreams(device)) {
    bool capturing = false;
    // A capturing stream runs nothing yet (the engine skips it too), and
    // querying it would invalidate the capture.
    if (IsCapturing(s, &capturing) != cudaSuccess || capturing) continue;
    if (query != nullptr &&
        query(reinterpret_cast<cudaStream_t>(s)) == cudaSuccess) {
      continue;  // idle: everything issued on it so far has completed
    }
    out.push_back(s);
  }
  out.push_back(kLegacyStream);
  out.push_back(kSyncArenaStream);
  return out;
}

void ForgetStream(StreamHandle stream) {
  if (IsSpecialStream(stream)) return;
  StreamRegistry& reg = Streams();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (reg.device_of.erase(stream) > 0) {
    reg.generation.fetch_add(1, std::memory_order_acq_rel);
  }
}

cudaError_t IsCapturing(StreamHandle stream, bool* capturing) {
  auto is_capturing = Real().cudaStreamIsCapturing.get();
  if (is_capturing == nullptr) return kNoRuntime;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err =
      is_capturing(reinterpret_cast<cudaStream_t>(stream), &status);
  if (err == cudaErrorStreamCaptureImplicit) {
    *capturing = true;
    return cudaSuccess;
  }
  *capturing = status != cudaStreamCaptureStatusNone;
  return err;
}

void LockStateForFork() { Streams().mu.lock(); }
void UnlockStateAfterFork() { Streams().mu.unlock(); }

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
