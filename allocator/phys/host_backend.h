// HostBackend: the VMM calls emulated on the host, so the whole policy runs
// (and is tested) on machines without a GPU. Physical memory is one memfd of
// `capacity` bytes carved into granules; VA is reserved with mmap(PROT_NONE);
// Map places the memfd's pages at a VA with MAP_FIXED|MAP_SHARED, so data
// written through one mapping is still there after the handle is unmapped and
// mapped elsewhere. Like the driver, memory is inaccessible after Map until
// SetAccess. Misuse the driver would reject (mapping over a mapping, unmapping
// what is not mapped, releasing a mapped handle) is an error status here too.
// Sharing (docs/ipc.md): a page exports as (the memfd, its offset); an
// imported page keeps its own duplicate of the exporter's memfd, so Map places
// the other process's memory (MAP_SHARED) and Release closes that descriptor.
// Thread-safety: not thread-safe (see backend.h).
#ifndef FRAGFREE_ALLOCATOR_PHYS_HOST_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_HOST_BACKEND_H_

#include <memory>

#include "allocator/base/metadata_arena.h"
#include "allocator/phys/backend.h"

namespace fragfree {

class HostBackend final : public PhysicalBackend {
 public:
  // REQUIRES: granularity is a power-of-two multiple of the OS page size and
  // capacity a multiple of granularity.
  static absl::StatusOr<std::unique_ptr<HostBackend>> Create(
      size_t capacity, size_t granularity);
  ~HostBackend() override;

  std::string Name() const override { return "host"; }
  size_t Granularity() const override { return granularity_; }
  DeviceMemoryInfo MemoryInfo() const override;

  absl::StatusOr<uintptr_t> ReserveVa(size_t size) override;
  absl::Status ReleaseVa(uintptr_t va, size_t size) override;
  absl::StatusOr<PhysHandle> Create(size_t size) override;
  absl::Status Release(PhysHandle handle) override;
  absl::Status Map(uintptr_t va, size_t size, PhysHandle handle) override;
  absl::Status Unmap(uintptr_t va, size_t size) override;
  absl::Status SetAccess(uintptr_t va, size_t size) override;

  bool CanExport() const override { return true; }
  absl::StatusOr<SharedPage> Export(PhysHandle handle) override;
  absl::StatusOr<PhysHandle> Import(int fd, uint64_t offset,
                                    size_t size) override;

 private:
  struct HandleInfo {
    size_t offset;  // in the memfd
    size_t size;
    int mappings = 0;    // VA ranges it is mapped at now
    int import_fd = -1;  // imported: this process's duplicate of the file
  };
  HostBackend(int fd, size_t capacity, size_t granularity);
  absl::Status CheckAligned(const char* call, uintptr_t va, size_t size) const;
  // First fit over free granule slots; returns the slot index or -1.
  ptrdiff_t FindFreeSlots(size_t count) const;

  const int fd_;
  const size_t capacity_;
  const size_t granularity_;
  MetadataVector<bool> slot_used_;
  MetadataMap<uint64_t, HandleInfo> handles_;
  uint64_t next_handle_ = 1;
  MetadataMap<uintptr_t, size_t> reservations_;  // va -> size
  MetadataMap<uintptr_t, uint64_t> mappings_;    // va -> handle id
  size_t used_bytes_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_HOST_BACKEND_H_
