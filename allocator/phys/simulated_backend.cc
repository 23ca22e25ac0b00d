#include "allocator/phys/simulated_backend.h"

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"

namespace fragfree {

SimulatedBackend::SimulatedBackend(size_t capacity, size_t granularity)
    : capacity_(capacity),
      granularity_(granularity),
      next_va_(uintptr_t{1} << 44) {}

absl::StatusOr<uintptr_t> SimulatedBackend::ReserveVa(size_t size) {
  if (size == 0 || size % granularity_ != 0) {
    return absl::InvalidArgumentError("simulated backend: bad VA size");
  }
  uintptr_t va = next_va_;
  next_va_ += size + granularity_;  // a guard gap between reservations
  return va;
}

absl::Status SimulatedBackend::ReleaseVa(uintptr_t, size_t) {
  return absl::OkStatus();
}

absl::StatusOr<PhysHandle> SimulatedBackend::Create(size_t size) {
  if (size == 0 || size % granularity_ != 0) {
    return absl::InvalidArgumentError("simulated backend: bad handle size");
  }
  if (used_bytes_ + size > capacity_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "simulated backend: out of physical memory (%s of %s in use)",
        FormatBytes(used_bytes_), FormatBytes(capacity_)));
  }
  used_bytes_ += size;
  // The handle encodes its size so Release needs no table.
  return PhysHandle{(next_handle_++ << 24) | (size / granularity_)};
}

absl::Status SimulatedBackend::Release(PhysHandle handle) {
  size_t size = (handle.value & 0xFFFFFF) * granularity_;
  if (size == 0 || size > used_bytes_) {
    return absl::InvalidArgumentError("simulated backend: bad handle");
  }
  used_bytes_ -= size;
  return absl::OkStatus();
}

absl::Status SimulatedBackend::Map(uintptr_t va, size_t size, PhysHandle) {
  if (size == 0 || va % granularity_ || size % granularity_) {
    return absl::InvalidArgumentError("simulated backend: unaligned Map");
  }
  return absl::OkStatus();
}

absl::Status SimulatedBackend::Unmap(uintptr_t va, size_t size) {
  if (size == 0 || va % granularity_ || size % granularity_) {
    return absl::InvalidArgumentError("simulated backend: unaligned Unmap");
  }
  return absl::OkStatus();
}

absl::Status SimulatedBackend::SetAccess(uintptr_t, size_t) {
  return absl::OkStatus();
}

}  // namespace fragfree
