// FaultInjectingBackend: wraps any backend and makes chosen calls fail, so
// tests (and chaos runs) reach every error path: "fail the 3rd Map", "fail
// every Create with OOM", "fail SetAccess from now on". Calls are counted per
// operation; calls not listed in BackendOp pass through (ForwardingBackend).
// Thread-safety: not thread-safe (see backend.h).
#ifndef FRAGFREE_ALLOCATOR_PHYS_FAULT_INJECTING_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_FAULT_INJECTING_BACKEND_H_

#include <array>
#include <memory>

#include "allocator/phys/forwarding_backend.h"

namespace fragfree {

enum class BackendOp {
  kReserveVa,
  kReleaseVa,
  kCreate,
  kRelease,
  kMap,
  kUnmap,
  kSetAccess,
  kCount
};

class FaultInjectingBackend final : public ForwardingBackend {
 public:
  explicit FaultInjectingBackend(std::unique_ptr<PhysicalBackend> inner)
      : ForwardingBackend(std::move(inner)) {}

  // Fails calls of `op` numbered [first, first + count) (1-based, counted from
  // construction) with `status`. count < 0 means "and every later call".
  void FailCalls(BackendOp op, int64_t first, int64_t count,
                 absl::Status status);
  // Fails the next `count` calls of `op` (count < 0: until ClearFaults).
  void FailNext(BackendOp op, int64_t count, absl::Status status) {
    FailCalls(op, calls_[size_t(op)] + 1, count, std::move(status));
  }
  void ClearFaults();
  int64_t Calls(BackendOp op) const { return calls_[size_t(op)]; }
  int64_t FaultsInjected() const { return faults_injected_; }

  std::string Name() const override {
    return ForwardingBackend::Name() + "+faults";
  }
  absl::StatusOr<uintptr_t> ReserveVa(size_t size) override;
  absl::Status ReleaseVa(uintptr_t va, size_t size) override;
  absl::StatusOr<PhysHandle> Create(size_t size) override;
  absl::Status Release(PhysHandle handle) override;
  absl::Status Map(uintptr_t va, size_t size, PhysHandle handle) override;
  absl::Status Unmap(uintptr_t va, size_t size) override;
  absl::Status SetAccess(uintptr_t va, size_t size) override;
  // Sharing (docs/ipc.md) passes through uninjected: ForwardingBackend.

 private:
  struct Fault {
    int64_t first = 0;
    int64_t count = 0;
    absl::Status status;
  };
  // Counts the call and returns the injected failure, or OK.
  absl::Status Next(BackendOp op);

  std::array<int64_t, size_t(BackendOp::kCount)> calls_{};
  std::array<Fault, size_t(BackendOp::kCount)> faults_{};
  int64_t faults_injected_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_FAULT_INJECTING_BACKEND_H_
