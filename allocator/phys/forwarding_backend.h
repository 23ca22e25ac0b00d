// ForwardingBackend: a PhysicalBackend that passes every call to the backend
// it owns, or to one it only borrows (a view of the engine's backend in other
// units: PageSizedBackend::View). Decorators (FaultInjectingBackend, the
// replay's CountingBackend) derive from it and override only the calls they
// change, so a method added to PhysicalBackend is forwarded here once, not by
// every decorator. Thread-safety: as the inner backend (see backend.h: not
// thread-safe).
#ifndef FRAGFREE_ALLOCATOR_PHYS_FORWARDING_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_FORWARDING_BACKEND_H_

#include <memory>
#include <string>
#include <utility>

#include "allocator/phys/backend.h"

namespace fragfree {

class ForwardingBackend : public PhysicalBackend {
 public:
  // REQUIRES: inner != nullptr.
  explicit ForwardingBackend(std::unique_ptr<PhysicalBackend> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}
  // Borrows `inner`, which must outlive this object.
  explicit ForwardingBackend(PhysicalBackend* inner) : inner_(inner) {}

  PhysicalBackend& inner() { return *inner_; }
  const PhysicalBackend& inner() const { return *inner_; }

  std::string Name() const override { return inner_->Name(); }
  size_t Granularity() const override { return inner_->Granularity(); }
  size_t DeviceGranularity() const override {
    return inner_->DeviceGranularity();
  }
  DeviceMemoryInfo MemoryInfo() const override { return inner_->MemoryInfo(); }
  absl::StatusOr<uintptr_t> ReserveVa(size_t size) override {
    return inner_->ReserveVa(size);
  }
  absl::Status ReleaseVa(uintptr_t va, size_t size) override {
    return inner_->ReleaseVa(va, size);
  }
  absl::StatusOr<PhysHandle> Create(size_t size) override {
    return inner_->Create(size);
  }
  absl::Status Release(PhysHandle handle) override {
    return inner_->Release(handle);
  }
  absl::Status Map(uintptr_t va, size_t size, PhysHandle handle) override {
    return inner_->Map(va, size, handle);
  }
  absl::Status Unmap(uintptr_t va, size_t size) override {
    return inner_->Unmap(va, size);
  }
  absl::Status SetAccess(uintptr_t va, size_t size) override {
    return inner_->SetAccess(va, size);
  }
  bool CanExport() const override { return inner_->CanExport(); }
  absl::StatusOr<SharedPage> Export(PhysHandle handle) override {
    return inner_->Export(handle);
  }
  absl::StatusOr<PhysHandle> Import(int fd, uint64_t offset,
                                    size_t size) override {
    return inner_->Import(fd, offset, size);
  }

 private:
  std::unique_ptr<PhysicalBackend> owned_;  // null when borrowed
  PhysicalBackend* const inner_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_FORWARDING_BACKEND_H_
