// The adapter's (csrc/) bookkeeping types for CUDA graph pools, MemPool and
// use_mem_pool: what a pool holds and the checkpoints cudagraph trees take.
// Thread-safety: plain data, guarded by FragfreeAllocator's pool mutex.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common.h"

namespace fragfree_native {

// Pool bookkeeping (CUDA graphs, MemPool, use_mem_pool).

struct AllocInfo {
  size_t size = 0;
  cudaStream_t stream = nullptr;
  DeviceIndex device = 0;
  MempoolId pool{0, 0};
};

struct FragfreePoolState;

struct PoolInfo {
  int use_count = 0;  // createOrIncrefPool + beginAllocateToPool - releasePool
  int lib_refs = 0;   // begin calls forwarded to libfragfree not yet released
  std::unordered_map<void*, AllocInfo> live;  // allocated, not freed
  // Freed by PyTorch but still allocated in libfragfree ("held"): the graph may
  // replay into it, or a live checkpoint may revive it. See MustHold.
  std::unordered_map<void*, AllocInfo> deferred;
  // Checkpoints handed out by getCheckpointState that are still alive.
  std::vector<std::weak_ptr<FragfreePoolState>> checkpoints;
};

struct PoolKey {
  DeviceIndex device;
  MempoolId id;
  bool operator<(const PoolKey& o) const {
    return std::tie(device, id) < std::tie(o.device, o.id);
  }
};

// The state getCheckpointState returns: the pool's live allocations.
struct FragfreePoolState : public cca::AllocatorState {
  DeviceIndex device = 0;
  MempoolId id{0, 0};
  std::vector<std::pair<void*, AllocInfo>> live;
  std::unordered_set<void*> ptrs;  // the keys of `live`
};

}  // namespace fragfree_native
