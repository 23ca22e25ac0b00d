// PhysicalBackend: the seam between fragfree's policy and the memory it
// manages.
//
// Contract (every implementation):
//  - Addresses and sizes passed in are multiples of Granularity() and sizes are
//  > 0.
//  - ReserveVa hands out address space only; nothing there is accessible until
//  a
//    handle is mapped with Map and made accessible with SetAccess.
//  - Unmap(va, size) may cover several adjacent mappings, each wholly (as
//    cuMemUnmap does); never part of one.
//  - A handle is one piece of physical memory of the size it was created with.
//    It can be mapped, unmapped and mapped again elsewhere; its contents
//    survive remapping. It may be mapped at several VA ranges at once (as
//    cuMemMap allows): the engine does so only while a moved page's old
//    address waits for its stream's fence (Note [Moving a page without
//    waiting] in docs/design.md). Release needs it unmapped everywhere.
//  - Create fails with ResourceExhausted when physical memory is exhausted (the
//  OOM
//    path: the caller reclaims and retries); every other failure is an error
//    status.
//  - Nothing here synchronises with the GPU: the caller unmaps only memory
//  whose last
//    use has completed.
// Implementations: CudaVmmBackend (driver VMM), HostBackend (memfd + mmap),
// SimulatedBackend (bookkeeping only, for replay), FaultInjectingBackend
// (decorator). Sharing pages with other processes (allocator/ipc,
// docs/ipc.md) is an optional capability: CanExport / Export / Import, whose
// defaults say "not supported". Backends are MetadataObjects: `new` puts them
// on the metadata arena. Thread-safety: implementations are not thread-safe;
// the owning DeviceAllocator serialises calls under its lock.
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

// One page as another process can import it: a POSIX file descriptor owned by
// the backend (open until the handle is released) and the page's offset in
// that file (0 for CUDA's exported handles).
struct SharedPage {
  int fd = -1;
  uint64_t offset = 0;
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
  // The engine's page in bytes: every handle it creates and every range it
  // reserves, maps or unmaps is a multiple of it.
  virtual size_t Granularity() const = 0;
  // The device's own mapping granularity (2 MiB on an H200), which
  // Granularity() is a multiple of: the alignment and size unit the device
  // itself needs, all that a handle imported from another process (whose
  // pages may be smaller than this engine's) must meet.
  virtual size_t DeviceGranularity() const { return Granularity(); }
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

  // ---- Sharing with other processes (docs/ipc.md) ----
  // Whether handles this backend creates can be exported as file descriptors.
  virtual bool CanExport() const { return false; }
  // The shareable form of `handle` (created here, not imported). The fd stays
  // the backend's: made once per handle, closed when the handle is released.
  [[nodiscard]] virtual absl::StatusOr<SharedPage> Export(PhysHandle handle) {
    (void)handle;
    return absl::UnimplementedError(Name() +
                                    " backend: pages cannot be exported");
  }
  // A handle for a page another process exported: `fd` is this process's
  // descriptor for it (the caller keeps it and may close it after), `offset`
  // and `size` the page's place in that file. Map, SetAccess, Unmap and
  // Release work on it as on a created handle; Release drops only this
  // process's reference.
  [[nodiscard]] virtual absl::StatusOr<PhysHandle> Import(int fd,
                                                          uint64_t offset,
                                                          size_t size) {
    (void)fd, (void)offset, (void)size;
    return absl::UnimplementedError(Name() +
                                    " backend: pages cannot be imported");
  }
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_BACKEND_H_
