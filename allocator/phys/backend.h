// PhysicalBackend: the seam between fragfree's policy and the memory it
// manages.
//
// Contract (every implementation):
//  - Addresses and sizes passed in are multiples of Granularity() and sizes are
//  > 0.
//  - ReserveVa hands out address space only; nothing there is accessible until
//  a
//    handle is mapped with Map and made accessible with SetAccess.
//  - A handle is one piece of physical memory of the size it was created with.
//  It can
//    be mapped at one VA range at a time here, unmapped, and mapped again
//    elsewhere; its contents survive remapping.
//  - Create fails with ResourceExhausted when physical memory is exhausted (the
//  OOM
//    path: the caller reclaims and retries); every other failure is an error
//    status.
//  - Nothing here synchronises with the GPU: the caller unmaps only memory
//  whose last
//    use has completed.
// Implementations: CudaVmmBackend (driver VMM), HostBackend (memfd + mmap),
// SimulatedBackend (bookkeeping only, for replay), FaultInjectingBackend
// (decorator). Backends are MetadataObjects: `new` puts them on the metadata
// arena. Thread-safety: implementations are not thread-safe; the owning
// DeviceAllocator serialises calls under its lock.
#ifndef FRAGFREE_ALLOCATOR_PHYS_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/metadata_arena.h"

namespace fragfree {

// Opaque identity of one physical allocation; its meaning belongs to the
// backend.
struct PhysHandle {
  uint64_t value = 0;
};

// Device memory as the backend sees it, for reports.
struct DeviceMemoryInfo {
  size_t total_bytes = 0;  // device capacity
  size_t free_bytes = 0;   // free on the device right now (all processes)
};

class PhysicalBackend : public MetadataObject {
 public:
  virtual ~PhysicalBackend() = default;

  // Short name for messages: "cuda", "host", "simulated".
  virtual std::string Name() const = 0;
  // Mapping granularity in bytes (2 MiB on an H200).
  virtual size_t Granularity() const = 0;
  virtual DeviceMemoryInfo MemoryInfo() const = 0;

  [[nodiscard]] virtual absl::StatusOr<uintptr_t> ReserveVa(size_t size) = 0;
  [[nodiscard]] virtual absl::Status ReleaseVa(uintptr_t va, size_t size) = 0;
  [[nodiscard]] virtual absl::StatusOr<PhysHandle> Create(size_t size) = 0;
  [[nodiscard]] virtual absl::Status Release(PhysHandle handle) = 0;
  [[nodiscard]] virtual absl::Status Map(uintptr_t va, size_t size,
                                         PhysHandle handle) = 0;
  [[nodiscard]] virtual absl::Status Unmap(uintptr_t va, size_t size) = 0;
  // Makes [va, va+size) readable and writable by the device (and its peers).
  [[nodiscard]] virtual absl::Status SetAccess(uintptr_t va, size_t size) = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_BACKEND_H_
