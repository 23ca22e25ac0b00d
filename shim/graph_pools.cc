// PyTorch's CUDA graph pool hooks, exported with the exact C++ types PyTorch's
// CUDAPluggableAllocator stores (torch/csrc/cuda/CUDAPluggableAllocator.h):
//   void(int, MempoolId_t, std::function<bool(cudaStream_t)>)   begin
//   void(int, MempoolId_t)                                       end, release
// MempoolId_t is std::pair<unsigned long long, unsigned long long>. The names
// have C linkage so Python can pass their addresses to
// set_begin_allocate_to_pool etc. No exception crosses this edge: errors go to
// the error handler. Thread-safety: as the C API.
#include <functional>
#include <utility>

#include "shim/runtime.h"

struct CUstream_st;
using ff_cuda_stream = CUstream_st*;
using ff_mempool_id = std::pair<unsigned long long, unsigned long long>;

namespace {
template <typename Fn>
void WithDevice(int device, Fn&& fn) {
  fragfree::Runtime& rt = fragfree::Runtime::Get();
  absl::StatusOr<fragfree::DeviceAllocator*> d = rt.Device(device);
  if (!d.ok()) {
    rt.Report(d.status());
    return;
  }
  rt.Report(fn(**d));
}
}  // namespace

extern "C" {

__attribute__((visibility("default"))) void fragfree_begin_allocate_to_pool(
    int device, ff_mempool_id pool,
    std::function<bool(ff_cuda_stream)> filter) {
  WithDevice(device, [&](fragfree::DeviceAllocator& d) {
    return d.BeginAllocateToPool(
        {pool.first, pool.second},
        [filter = std::move(filter)](fragfree::StreamHandle s) {
          return filter(reinterpret_cast<ff_cuda_stream>(s));
        });
  });
}

__attribute__((visibility("default"))) void fragfree_end_allocate_to_pool(
    int device, ff_mempool_id pool) {
  WithDevice(device, [&](fragfree::DeviceAllocator& d) {
    return d.EndAllocateToPool({pool.first, pool.second});
  });
}

__attribute__((visibility("default"))) void fragfree_release_pool(
    int device, ff_mempool_id pool) {
  WithDevice(device, [&](fragfree::DeviceAllocator& d) {
    return d.ReleasePool({pool.first, pool.second});
  });
}

}  // extern "C"
