// DeviceAllocator's CUDA graph pools (Note [Graph capture] in docs/design.md):
// begin/end allocating to a pool, and releasing it. Thread-safety: see
// device_allocator.h.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "allocator/device_allocator.h"

namespace fragfree {

DeviceAllocator::Pool* DeviceAllocator::FindPool(PoolId id) {
  for (auto& pool : pools_) {
    if (pool->id == id) return pool.get();
  }
  return nullptr;
}

absl::Status DeviceAllocator::BeginAllocateToPool(
    PoolId id, std::function<bool(StreamHandle)> filter) {
  MutexLock lock(&mu_);
  Pool* pool = FindPool(id);
  if (pool == nullptr) {
    pools_.push_back(std::make_unique<Pool>());
    pool = pools_.back().get();
    pool->id = id;
  }
  if (pool->capturing) {
    return absl::FailedPreconditionError(
        absl::StrFormat("graph pool (%d, %d) is already being allocated to",
                        id.first, id.second));
  }
  pool->filter = std::move(filter);
  pool->capturing = true;
  pool->released = false;
  ++capturing_;
  return absl::OkStatus();
}

absl::Status DeviceAllocator::EndAllocateToPool(PoolId id) {
  MutexLock lock(&mu_);
  Pool* pool = FindPool(id);
  if (pool == nullptr || !pool->capturing) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "endAllocateToPool for graph pool (%d, %d), which is not being "
        "allocated to",
        id.first, id.second));
  }
  pool->capturing = false;
  pool->filter = nullptr;
  --capturing_;
  // Retired arenas emptied during the capture can go now.
  if (order_.retired_dirty()) ReleaseRetiredArenas().IgnoreError();
  return absl::OkStatus();
}

absl::Status DeviceAllocator::ReleasePool(PoolId id) {
  MutexLock lock(&mu_);
  Pool* pool = FindPool(id);
  if (pool == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "releasePool for unknown graph pool (%d, %d)", id.first, id.second));
  }
  if (pool->capturing) {
    pool->capturing = false;
    pool->filter = nullptr;
    --capturing_;
  }
  // Its free pages may now move; live blocks stay until the program frees them.
  pool->released = true;
  // Its retired streams' empty arenas go now.
  if (!order_.retired_slots().empty()) ReleaseRetiredArenas().IgnoreError();
  return absl::OkStatus();
}

}  // namespace fragfree
