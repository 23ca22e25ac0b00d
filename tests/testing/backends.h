// Test fixtures shared by the suites: backends to run the engine on (host
// emulation everywhere, the CUDA driver where a GPU exists) and a way to write
// and read memory on each (plain memcpy on the host, cuMemcpy on a GPU).
// Thread-safety: test-only helpers, single-threaded unless a test says
// otherwise.
#ifndef FRAGFREE_TESTS_TESTING_BACKENDS_H_
#define FRAGFREE_TESTS_TESTING_BACKENDS_H_

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "allocator/device_allocator.h"
#include "allocator/phys/host_backend.h"
#include "allocator/stream/host_event_source.h"
#ifdef FRAGFREE_WITH_CUDA
#include "allocator/phys/cuda_vmm_backend.h"
#include "allocator/stream/cuda_event_source.h"
#endif

namespace fragfree::testing {

// Reads and writes bytes of allocated memory, wherever it lives.
class MemoryAccess {
 public:
  virtual ~MemoryAccess() = default;
  virtual void Write(void* dst, const void* src, size_t n) = 0;
  virtual void Read(void* dst, const void* src, size_t n) = 0;
};

class HostAccess final : public MemoryAccess {
 public:
  void Write(void* dst, const void* src, size_t n) override {
    memcpy(dst, src, n);
  }
  void Read(void* dst, const void* src, size_t n) override {
    memcpy(dst, src, n);
  }
};

struct TestDevice {
  std::unique_ptr<DeviceAllocator> allocator;
  std::unique_ptr<MemoryAccess> access;
  size_t page_size = 0;
  size_t capacity = 0;
  std::vector<StreamHandle> streams;  // usable streams (host: opaque tags)
};

// The engine on the host backend with `capacity` bytes in pages of `page`
// bytes.
inline TestDevice MakeHostDevice(size_t capacity, size_t page,
                                 Options options = Options()) {
  TestDevice d;
  auto backend = HostBackend::Create(capacity, page);
  if (!backend.ok()) abort();
  options.backend = "host";
  d.allocator = std::move(*DeviceAllocator::Create(
      0, options, std::move(*backend), std::make_unique<HostEventSource>()));
  d.access = std::make_unique<HostAccess>();
  d.page_size = page;
  d.capacity = capacity;
  d.streams = {0, 0x1000, 0x2000};
  return d;
}

#ifdef FRAGFREE_WITH_CUDA
class CudaAccess final : public MemoryAccess {
 public:
  explicit CudaAccess(const CudaDriver* cu) : cu_(cu) {}
  void Write(void* dst, const void* src, size_t n) override {
    if (cu_->cuMemcpyHtoD(CUdeviceptr(dst), src, n) != CUDA_SUCCESS) abort();
  }
  void Read(void* dst, const void* src, size_t n) override {
    if (cu_->cuMemcpyDtoH(dst, CUdeviceptr(src), n) != CUDA_SUCCESS) abort();
  }

 private:
  const CudaDriver* cu_;
};

// The engine on GPU 0 with a memory limit of `limit` bytes; an error when there
// is no GPU.
inline absl::StatusOr<TestDevice> MakeCudaDevice(size_t limit) {
  auto backend = CudaVmmBackend::Create(0);
  if (!backend.ok()) return backend.status();
  auto events = CudaEventSource::Create(0);
  if (!events.ok()) return events.status();
  const CudaDriver* cu = *CudaDriver::Get();
  // The test itself issues driver calls (streams, copies): make device 0's
  // primary context current, as the CUDA runtime would.
  absl::StatusOr<CUcontext> ctx = cu->RetainPrimaryContext(0);
  if (!ctx.ok()) return ctx.status();
  if (cu->cuCtxSetCurrent(*ctx) != CUDA_SUCCESS) {
    return absl::InternalError("cannot make the primary context current");
  }
  TestDevice d;
  d.page_size = (*backend)->Granularity();
  Options options;
  options.memory_limit_bytes = limit;
  d.allocator = std::move(*DeviceAllocator::Create(
      0, options, std::move(*backend), std::move(*events)));
  d.access = std::make_unique<CudaAccess>(cu);
  d.capacity = d.allocator->memory_limit();
  d.streams = {0};
  for (int i = 0; i < 2; ++i) {
    CUstream s;
    if (cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      return absl::InternalError("cuStreamCreate failed");
    }
    d.streams.push_back(reinterpret_cast<StreamHandle>(s));
  }
  return d;
}
#endif

}  // namespace fragfree::testing

#endif  // FRAGFREE_TESTS_TESTING_BACKENDS_H_
