// CudaVmmBackend: physical memory of one GPU through the driver's virtual
// memory management API: cuMemAddressReserve / cuMemCreate (pinned device
// memory) / cuMemMap / cuMemSetAccess (for the device and every peer that can
// access it) / cuMemUnmap / cuMemRelease. Each call runs with the device's
// primary context current (the one the CUDA runtime and PyTorch use).
// Sharing (docs/ipc.md): pages are created with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among their requested handle types
// (as PyTorch's expandable segments do), so Export can hand out a file
// descriptor (cuMemExportToShareableHandle, made once per handle and closed
// when it is released); Import is cuMemImportFromShareableHandle. When the
// driver refuses shareable handles (some containers, vGPU), the first Create
// falls back to plain handles for the process and CanExport says false.
// Thread-safety: not thread-safe (see backend.h).
#ifndef FRAGFREE_ALLOCATOR_PHYS_CUDA_VMM_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_CUDA_VMM_BACKEND_H_

#include <memory>

#include "allocator/base/metadata_arena.h"
#include "allocator/phys/backend.h"
#include "allocator/phys/cuda_driver.h"

namespace fragfree {

class CudaVmmBackend final : public PhysicalBackend {
 public:
  // An error when there is no driver, no such device, or no VMM support.
  static absl::StatusOr<std::unique_ptr<CudaVmmBackend>> Create(int device);

  std::string Name() const override { return "cuda"; }
  size_t Granularity() const override { return granularity_; }
  DeviceMemoryInfo MemoryInfo() const override;

  absl::StatusOr<uintptr_t> ReserveVa(size_t size) override;
  absl::Status ReleaseVa(uintptr_t va, size_t size) override;
  absl::StatusOr<PhysHandle> Create(size_t size) override;
  absl::Status Release(PhysHandle handle) override;
  absl::Status Map(uintptr_t va, size_t size, PhysHandle handle) override;
  absl::Status Unmap(uintptr_t va, size_t size) override;
  absl::Status SetAccess(uintptr_t va, size_t size) override;

  bool CanExport() const override { return exportable_; }
  absl::StatusOr<SharedPage> Export(PhysHandle handle) override;
  absl::StatusOr<PhysHandle> Import(int fd, uint64_t offset,
                                    size_t size) override;

  int device() const { return device_; }
  // Devices that may read and write this device's memory (itself first).
  const MetadataVector<int>& accessors() const { return accessors_; }

 private:
  CudaVmmBackend(const CudaDriver* driver, int device, CUcontext context,
                 size_t granularity, size_t total_bytes,
                 MetadataVector<int> accessors, bool rdma);

  const CudaDriver* driver_;
  const int device_;
  const CUcontext context_;
  const size_t granularity_;
  const size_t total_bytes_;
  const MetadataVector<int> accessors_;
  const bool rdma_;
  // Create asks for POSIX-fd-shareable handles (cleared for good when the
  // driver refuses them).
  bool exportable_ = true;
  MetadataMap<uint64_t, int> export_fds_;  // handle -> its exported fd
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_CUDA_VMM_BACKEND_H_
