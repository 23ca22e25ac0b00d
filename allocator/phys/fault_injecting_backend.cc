// Implementation of fault_injecting_backend.h: each call is counted, then
// either fails with the injected status or goes to the inner backend.
// Thread-safety: see fault_injecting_backend.h.
#include "allocator/phys/fault_injecting_backend.h"

namespace fragfree {

void FaultInjectingBackend::FailCalls(BackendOp op, int64_t first,
                                      int64_t count, absl::Status status) {
  faults_[size_t(op)] = Fault{first, count, std::move(status)};
}

void FaultInjectingBackend::ClearFaults() { faults_ = {}; }

absl::Status FaultInjectingBackend::Next(BackendOp op) {
  int64_t n = ++calls_[size_t(op)];
  const Fault& f = faults_[size_t(op)];
  if (f.count == 0 || n < f.first) return absl::OkStatus();
  if (f.count > 0 && n >= f.first + f.count) return absl::OkStatus();
  ++faults_injected_;
  return f.status;
}

absl::StatusOr<uintptr_t> FaultInjectingBackend::ReserveVa(size_t size) {
  if (absl::Status s = Next(BackendOp::kReserveVa); !s.ok()) return s;
  return ForwardingBackend::ReserveVa(size);
}
absl::Status FaultInjectingBackend::ReleaseVa(uintptr_t va, size_t size) {
  if (absl::Status s = Next(BackendOp::kReleaseVa); !s.ok()) return s;
  return ForwardingBackend::ReleaseVa(va, size);
}
absl::StatusOr<PhysHandle> FaultInjectingBackend::Create(size_t size) {
  if (absl::Status s = Next(BackendOp::kCreate); !s.ok()) return s;
  return ForwardingBackend::Create(size);
}
absl::Status FaultInjectingBackend::Release(PhysHandle handle) {
  if (absl::Status s = Next(BackendOp::kRelease); !s.ok()) return s;
  return ForwardingBackend::Release(handle);
}
absl::Status FaultInjectingBackend::Map(uintptr_t va, size_t size,
                                        PhysHandle handle) {
  if (absl::Status s = Next(BackendOp::kMap); !s.ok()) return s;
  return ForwardingBackend::Map(va, size, handle);
}
absl::Status FaultInjectingBackend::Unmap(uintptr_t va, size_t size) {
  if (absl::Status s = Next(BackendOp::kUnmap); !s.ok()) return s;
  return ForwardingBackend::Unmap(va, size);
}
absl::Status FaultInjectingBackend::SetAccess(uintptr_t va, size_t size) {
  if (absl::Status s = Next(BackendOp::kSetAccess); !s.ok()) return s;
  return ForwardingBackend::SetAccess(va, size);
}

}  // namespace fragfree
