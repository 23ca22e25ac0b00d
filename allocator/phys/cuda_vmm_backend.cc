#include "allocator/phys/cuda_vmm_backend.h"

#include <unistd.h>

#include "absl/strings/str_format.h"

namespace fragfree {
namespace {
CUmemAllocationProp DeviceProp(int device, bool rdma) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.allocFlags.gpuDirectRDMACapable = rdma ? 1 : 0;
  return prop;
}
}  // namespace

absl::StatusOr<std::unique_ptr<CudaVmmBackend>> CudaVmmBackend::Create(
    int device) {
  absl::StatusOr<const CudaDriver*> loaded = CudaDriver::Get();
  if (!loaded.ok()) return loaded.status();
  const CudaDriver& cu = **loaded;
  int count = 0;
  FF_CU_RETURN_IF_ERROR(cu, cuDeviceGetCount(&count));
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragfree: device %d does not exist (this process sees %d CUDA "
        "device(s))",
        device, count));
  }
  CUdevice dev;
  FF_CU_RETURN_IF_ERROR(cu, cuDeviceGet(&dev, device));
  int vmm = 0;
  FF_CU_RETURN_IF_ERROR(
      cu,
      cuDeviceGetAttribute(
          &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  if (!vmm) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fragfree: device %d does not support CUDA virtual memory management",
        device));
  }
  int rdma = 0;
  FF_CU_RETURN_IF_ERROR(
      cu,
      cuDeviceGetAttribute(
          &rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
          dev));
  CUcontext context;
  FF_CU_RETURN_IF_ERROR(cu, cuDevicePrimaryCtxRetain(&context, dev));
  CUmemAllocationProp prop = DeviceProp(device, rdma != 0);
  size_t granularity = 0;
  FF_CU_RETURN_IF_ERROR(
      cu, cuMemGetAllocationGranularity(&granularity, &prop,
                                        CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  size_t total = 0;
  FF_CU_RETURN_IF_ERROR(cu, cuDeviceTotalMem(&total, dev));
  MetadataVector<int> accessors = {device};
  for (int peer = 0; peer < count; ++peer) {
    if (peer == device) continue;
    CUdevice peer_dev;
    FF_CU_RETURN_IF_ERROR(cu, cuDeviceGet(&peer_dev, peer));
    int can = 0;
    FF_CU_RETURN_IF_ERROR(cu, cuDeviceCanAccessPeer(&can, peer_dev, dev));
    if (can) accessors.push_back(peer);
  }
  return std::unique_ptr<CudaVmmBackend>(
      new CudaVmmBackend(&cu, device, context, granularity, total,
                         std::move(accessors), rdma != 0));
}

CudaVmmBackend::CudaVmmBackend(const CudaDriver* driver, int device,
                               CUcontext context, size_t granularity,
                               size_t total_bytes,
                               MetadataVector<int> accessors, bool rdma)
    : driver_(driver),
      device_(device),
      context_(context),
      granularity_(granularity),
      total_bytes_(total_bytes),
      accessors_(std::move(accessors)),
      rdma_(rdma) {}

DeviceMemoryInfo CudaVmmBackend::MemoryInfo() const {
  DeviceMemoryInfo info{total_bytes_, 0};
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return info;
  size_t free = 0, total = 0;
  if (driver_->cuMemGetInfo(&free, &total) == CUDA_SUCCESS) {
    info.free_bytes = free;
  }
  return info;
}

absl::StatusOr<uintptr_t> CudaVmmBackend::ReserveVa(size_t size) {
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  CUdeviceptr ptr = 0;
  FF_CU_RETURN_IF_ERROR(*driver_,
                        cuMemAddressReserve(&ptr, size, granularity_, 0, 0));
  return uintptr_t(ptr);
}

absl::Status CudaVmmBackend::ReleaseVa(uintptr_t va, size_t size) {
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  FF_CU_RETURN_IF_ERROR(*driver_, cuMemAddressFree(CUdeviceptr(va), size));
  return absl::OkStatus();
}

absl::StatusOr<PhysHandle> CudaVmmBackend::Create(size_t size) {
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  CUmemAllocationProp prop = DeviceProp(device_, rdma_);
  CUmemGenericAllocationHandle handle;
  if (exportable_) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    const CUresult r = driver_->cuMemCreate(&handle, size, &prop, 0);
    if (r == CUDA_SUCCESS) return PhysHandle{uint64_t(handle)};
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
      return driver_->ToStatus(r, "cuMemCreate", __FILE__, __LINE__);
    }
    // Shareable handles refused (not supported here): plain ones from now on.
    exportable_ = false;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  }
  FF_CU_RETURN_IF_ERROR(*driver_, cuMemCreate(&handle, size, &prop, 0));
  return PhysHandle{uint64_t(handle)};
}

absl::Status CudaVmmBackend::Release(PhysHandle handle) {
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  FF_CU_RETURN_IF_ERROR(
      *driver_, cuMemRelease(CUmemGenericAllocationHandle(handle.value)));
  // The exported fd is closed only once the handle is gone, so that a
  // consumer's pidfd_getfd never finds the number reused while it may ask.
  if (auto it = export_fds_.find(handle.value); it != export_fds_.end()) {
    close(it->second);
    export_fds_.erase(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedPage> CudaVmmBackend::Export(PhysHandle handle) {
  if (auto it = export_fds_.find(handle.value); it != export_fds_.end()) {
    return SharedPage{it->second, 0};
  }
  if (!exportable_) {
    return absl::FailedPreconditionError(
        "cuda backend: this driver refused POSIX-fd shareable handles "
        "(cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), so "
        "fragfree memory cannot be shared with other processes here");
  }
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  int fd = -1;
  FF_CU_RETURN_IF_ERROR(*driver_,
                        cuMemExportToShareableHandle(
                            &fd, CUmemGenericAllocationHandle(handle.value),
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  export_fds_[handle.value] = fd;
  return SharedPage{fd, 0};
}

absl::StatusOr<PhysHandle> CudaVmmBackend::Import(int fd, uint64_t offset,
                                                  size_t size) {
  if (fd < 0 || offset != 0 || size == 0 || size % granularity_ != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cuda backend: Import(fd %d, offset %d, size %d): an exported CUDA "
        "handle is a whole file (offset 0) of a granularity multiple",
        fd, offset, size));
  }
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  CUmemGenericAllocationHandle handle;
  FF_CU_RETURN_IF_ERROR(*driver_,
                        cuMemImportFromShareableHandle(
                            &handle, reinterpret_cast<void*>(uintptr_t(fd)),
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  return PhysHandle{uint64_t(handle)};
}

absl::Status CudaVmmBackend::Map(uintptr_t va, size_t size, PhysHandle handle) {
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  FF_CU_RETURN_IF_ERROR(
      *driver_, cuMemMap(CUdeviceptr(va), size, 0,
                         CUmemGenericAllocationHandle(handle.value), 0));
  return absl::OkStatus();
}

absl::Status CudaVmmBackend::Unmap(uintptr_t va, size_t size) {
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  FF_CU_RETURN_IF_ERROR(*driver_, cuMemUnmap(CUdeviceptr(va), size));
  return absl::OkStatus();
}

absl::Status CudaVmmBackend::SetAccess(uintptr_t va, size_t size) {
  CudaContextScope context(*driver_, context_);
  if (!context.status().ok()) return context.status();
  CUmemAccessDesc desc[16];
  size_t n = 0;
  for (int dev : accessors_) {
    if (n == 16) break;
    desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc[n].location.id = dev;
    desc[n].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ++n;
  }
  FF_CU_RETURN_IF_ERROR(*driver_,
                        cuMemSetAccess(CUdeviceptr(va), size, desc, n));
  return absl::OkStatus();
}

}  // namespace fragfree
