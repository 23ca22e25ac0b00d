// SimulatedBackend: physical memory as numbers only. Addresses are never
// backed, so nothing may dereference them; every call is a few arithmetic
// operations. Used by fragfree-replay (millions of events, binary searches over
// capacity) and by benchmarks that measure the policy without the OS's mmap
// cost. It enforces the same contract as the real backends (alignment,
// capacity). Thread-safety: not thread-safe (see backend.h).
#ifndef FRAGFREE_ALLOCATOR_PHYS_SIMULATED_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_SIMULATED_BACKEND_H_

#include "allocator/phys/backend.h"

namespace fragfree {

class SimulatedBackend final : public PhysicalBackend {
 public:
  // REQUIRES: granularity is a power of two; capacity a multiple of it.
  SimulatedBackend(size_t capacity, size_t granularity);

  std::string Name() const override { return "simulated"; }
  size_t Granularity() const override { return granularity_; }
  DeviceMemoryInfo MemoryInfo() const override {
    return {capacity_, capacity_ - used_bytes_};
  }

  absl::StatusOr<uintptr_t> ReserveVa(size_t size) override;
  absl::Status ReleaseVa(uintptr_t va, size_t size) override;
  absl::StatusOr<PhysHandle> Create(size_t size) override;
  absl::Status Release(PhysHandle handle) override;
  absl::Status Map(uintptr_t va, size_t size, PhysHandle handle) override;
  absl::Status Unmap(uintptr_t va, size_t size) override;
  absl::Status SetAccess(uintptr_t va, size_t size) override;

 private:
  const size_t capacity_;
  const size_t granularity_;
  size_t used_bytes_ = 0;
  uintptr_t next_va_;
  uint64_t next_handle_ = 1;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_SIMULATED_BACKEND_H_
