// The interposed pinned-host calls: cudaMallocHost, cudaHostAlloc and
// cudaFreeHost. fragfree's pinned pool (shim/host_api.h: large chunks pinned
// once, docs/host.md) serves them when it takes the call; otherwise (pool off
// with serve_preload:False, write-combined, no pool) they go to the CUDA
// runtime. Either way they are counted (allocations, frees, live and peak
// bytes; GetPinnedCounters feeds the exit summary).
// Thread-safety: the live table is guarded by a std::mutex that the fork
// handlers hold across fork(); no lock is held while calling the runtime.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>

#include "allocator/base/metadata_containers.h"
#include "shim/host_api.h"
#include "shim/preload.h"
#include "shim/preload_real.h"

#define FF_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace fragfree::preload {
namespace {

struct PinnedTable {
  std::mutex mu;
  MetadataFlatHashMap<void*, size_t> live;  // guarded by mu
  PinnedCounters counters;                  // guarded by mu
};
PinnedTable& Pinned() {
  static PinnedTable* const table = MetadataNew<PinnedTable>();
  return *table;
}

void NoteAlloc(void* ptr, size_t size) {
  PinnedTable& t = Pinned();
  std::lock_guard<std::mutex> lock(t.mu);
  t.live[ptr] = size;
  t.counters.allocs++;
  t.counters.bytes_allocated += int64_t(size);
  t.counters.live_bytes += int64_t(size);
  t.counters.peak_live_bytes =
      std::max(t.counters.peak_live_bytes, t.counters.live_bytes);
}

// Takes ptr out of the live table before the runtime frees it (so that a
// concurrent allocation reusing the address is recorded afresh); -1 if absent.
int64_t TakeLive(void* ptr) {
  PinnedTable& t = Pinned();
  std::lock_guard<std::mutex> lock(t.mu);
  auto it = t.live.find(ptr);
  if (it == t.live.end()) return -1;
  const int64_t size = int64_t(it->second);
  t.live.erase(it);
  return size;
}

void NoteFree(void* ptr, int64_t size, bool freed) {
  PinnedTable& t = Pinned();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!freed) {
    if (size >= 0) t.live[ptr] = size_t(size);  // still allocated
    return;
  }
  if (size < 0) {
    t.counters.foreign_frees++;
    return;
  }
  t.counters.frees++;
  t.counters.live_bytes -= size;
}

// The pinned-allocation hook. host_alloc: cudaHostAlloc(flags), else
// cudaMallocHost.
cudaError_t PinnedAlloc(void** ptr, size_t size, unsigned int flags,
                        bool host_alloc) {
  cudaError_t err;
  int pool_error = cudaSuccess;
  if (Active() && ServePinnedHostAlloc(ptr, size, flags, &pool_error)) {
    err = cudaError_t(pool_error);
  } else if (host_alloc) {
    auto real = Real().cudaHostAlloc.get();
    err = real != nullptr ? real(ptr, size, flags) : kNoRuntime;
  } else {
    auto real = Real().cudaMallocHost.get();
    err = real != nullptr ? real(ptr, size) : kNoRuntime;
  }
  if (err == cudaSuccess && Active() && ptr != nullptr && *ptr != nullptr) {
    NoteCudaUse();
    NoteAlloc(*ptr, size);
  }
  return err;
}

// The pinned-free hook.
cudaError_t PinnedFree(void* ptr) {
  auto real = Real().cudaFreeHost.get();
  if (real == nullptr) return kNoRuntime;
  if (!Active() || ptr == nullptr) return real(ptr);
  const int64_t size = TakeLive(ptr);
  int pool_error = cudaSuccess;
  cudaError_t err = ServePinnedHostFree(ptr, &pool_error)
                        ? cudaError_t(pool_error)
                        : real(ptr);
  NoteFree(ptr, size, err == cudaSuccess);
  return err;
}

}  // namespace

PinnedCounters GetPinnedCounters() {
  PinnedTable& t = Pinned();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.counters;
}

void LockPinnedForFork() { Pinned().mu.lock(); }
void UnlockPinnedAfterFork() { Pinned().mu.unlock(); }

}  // namespace fragfree::preload

FF_INTERPOSE cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return fragfree::preload::PinnedAlloc(ptr, size, 0, /*host_alloc=*/false);
}

FF_INTERPOSE cudaError_t cudaHostAlloc(void** pHost, size_t size,
                                       unsigned int flags) {
  return fragfree::preload::PinnedAlloc(pHost, size, flags,
                                        /*host_alloc=*/true);
}

FF_INTERPOSE cudaError_t cudaFreeHost(void* ptr) {
  return fragfree::preload::PinnedFree(ptr);
}
