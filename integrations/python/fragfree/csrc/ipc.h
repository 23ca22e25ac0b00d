// IpcAdapter: PyTorch's shareIpcHandle / getIpcDevPtr on libfragfree's IPC C
// API (docs/ipc.md), so that torch.multiprocessing shares fragfree tensors.
// The producer's handle is PyTorch's expandable-segment handle (type 'e') with
// fragfree's trailer, and ShareableHandle.offset is the tensor's offset from
// the block's first page, as for expandable segments. The export ends with
// the block's free (FF_IPC_RELEASE_ON_FREE): PyTorch's own reference counting
// (CudaIPCSentData, the ref-counter file) keeps that free until every consumer
// released the tensor. The consumer maps each handle once (a cache of weak
// pointers keyed by the handle bytes, as PyTorch's native allocator does);
// the shared_ptr's deleter waits for the device and closes the mapping.
// Handles of cudaMalloc memory ('c', from a process on PyTorch's default
// allocator) are opened with cudaIpcOpenMemHandle.
// Thread-safety: the cache is guarded by mu_; deleters take it too, and close
// outside it.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "fragfree_api.h"

namespace fragfree_native {

class IpcAdapter {
 public:
  explicit IpcAdapter(const FragfreeApi& api) : api_(api) {}

  c10::cuda::CUDACachingAllocator::ShareableHandle Share(void* ptr) {
    TORCH_CHECK(api_.ipc_export != nullptr, "fragfree: ", api_.path,
                " has no IPC API (ff_ipc_export); rebuild libfragfree");
    ff_ipc_export_info_t info{};
    std::string handle(4096, '\0');
    for (int attempt = 0; attempt < 2; ++attempt) {
      const int rc = api_.ipc_export(ptr, FF_IPC_RELEASE_ON_FREE, handle.data(),
                                     handle.size(), &info);
      if (rc == 0) {
        handle.resize(info.handle_size);
        return {static_cast<ptrdiff_t>(info.page_offset), std::move(handle)};
      }
      if (info.handle_size <= handle.size()) break;  // not a size problem
      handle.assign(info.handle_size, '\0');
    }
    TORCH_CHECK(false,
                "fragfree: cannot share this CUDA tensor with another "
                "process: ",
                api_.LastError());
  }

  std::shared_ptr<void> Open(std::string handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(handle);
    if (it != cache_.end()) {
      if (std::shared_ptr<void> live = it->second.lock()) return live;
      cache_.erase(it);
    }
    const c10::DeviceIndex device = c10::cuda::current_device();
    std::shared_ptr<void> sp;
    if (IsCudaMallocHandle(handle)) {
      cudaIpcMemHandle_t h;
      memcpy(&h, handle.data() + handle.size() - CUDA_IPC_HANDLE_SIZE,
             CUDA_IPC_HANDLE_SIZE);
      void* p = nullptr;
      C10_CUDA_CHECK(
          cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
      sp = std::shared_ptr<void>(p, [this, handle, device](void* q) {
        Forget(handle);
        c10::cuda::CUDAGuard guard(device);
        C10_CUDA_CHECK_WARN(cudaIpcCloseMemHandle(q));
      });
    } else {
      TORCH_CHECK(api_.ipc_open != nullptr, "fragfree: ", api_.path,
                  " has no IPC API (ff_ipc_open); rebuild libfragfree");
      ff_ipc_mapping_t m{};
      TORCH_CHECK(api_.ipc_open(handle.data(), handle.size(), device, &m) == 0,
                  "fragfree: cannot open the CUDA tensor another process "
                  "shared: ",
                  api_.LastError());
      // PyTorch adds ShareableHandle.offset (from the first page) itself.
      sp = std::shared_ptr<void>(m.base, [this, handle, device](void* base) {
        Forget(handle);
        // cuMemUnmap does not wait for kernels still reading the pages.
        c10::cuda::CUDAGuard guard(device);
        C10_CUDA_CHECK_WARN(cudaDeviceSynchronize());
        if (api_.ipc_close(base) != 0) {
          TORCH_WARN("fragfree: closing a shared CUDA tensor failed: ",
                     api_.LastError());
        }
      });
    }
    cache_[handle] = sp;
    return sp;
  }

 private:
  // A cudaMalloc handle: PyTorch's 'c' type, or the bare 64 bytes older
  // PyTorch sent.
  static bool IsCudaMallocHandle(const std::string& h) {
    if (h.size() == CUDA_IPC_HANDLE_SIZE) return true;
    return h.size() == 2 + CUDA_IPC_HANDLE_SIZE && h[1] == 'c';
  }

  void Forget(const std::string& handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(handle);
    if (it != cache_.end() && it->second.expired()) cache_.erase(it);
  }

  const FragfreeApi& api_;
  std::mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<void>> cache_;
};

}  // namespace fragfree_native
