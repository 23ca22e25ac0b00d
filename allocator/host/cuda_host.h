// The CUDA side of pinned host memory (built with FRAGFREE_WITH_CUDA):
// CudaPinningBackend pins whole chunks through the driver, either with
// cuMemHostAlloc (what cudaHostAlloc does) or with mmap + cuMemHostRegister
// (PyTorch's pinned_use_cuda_host_register), always PORTABLE | DEVICEMAP so a
// chunk serves every context and cudaHostAlloc's default, portable and mapped
// flags. CudaStreamEvents is an EventSource that records each event in the
// context of the stream it is recorded on (cuStreamGetCtx), so pinned blocks
// used by streams of several devices are tracked correctly.
// Thread-safety: CudaPinningBackend is thread-safe (the driver is);
// CudaStreamEvents is called under the pinned allocator's lock.
#ifndef FRAGFREE_ALLOCATOR_HOST_CUDA_HOST_H_
#define FRAGFREE_ALLOCATOR_HOST_CUDA_HOST_H_

#include <memory>
#include <string>

#include "allocator/base/metadata_arena.h"
#include "allocator/host/pinning_backend.h"
#include "allocator/phys/cuda_driver.h"
#include "allocator/stream/event_source.h"

namespace fragfree {

class CudaPinningBackend final : public PinningBackend {
 public:
  enum class Mode { kHostAlloc, kRegister };
  // Pins through `device`'s primary context (any context can use the memory).
  static absl::StatusOr<std::unique_ptr<CudaPinningBackend>> Create(
      Mode mode, int device = 0);

  absl::StatusOr<void*> Pin(size_t bytes) override;
  absl::Status Unpin(void* ptr, size_t bytes) override;
  size_t granularity() const override { return page_size_; }
  std::string name() const override;
  bool is_cuda() const override { return true; }

 private:
  CudaPinningBackend(const CudaDriver* cu, CUcontext context, Mode mode);
  const CudaDriver* const cu_;
  const CUcontext context_;
  const Mode mode_;
  const size_t page_size_;
};

class CudaStreamEvents final : public EventSource {
 public:
  // `fallback_device`'s primary context serves the special streams (0,
  // cudaStreamLegacy, cudaStreamPerThread) when no context is current.
  static absl::StatusOr<std::unique_ptr<CudaStreamEvents>> Create(
      int fallback_device = 0);
  ~CudaStreamEvents() override;

  absl::StatusOr<EventId> Record(StreamHandle stream) override;
  absl::StatusOr<bool> Query(EventId event) override;
  absl::Status Synchronize(EventId event) override;
  void Release(EventId event) override;
  bool IsCapturing(StreamHandle stream) override;

 private:
  CudaStreamEvents(const CudaDriver* cu, CUcontext fallback)
      : cu_(cu), fallback_(fallback) {}
  absl::StatusOr<CUcontext> ContextOf(StreamHandle stream) const;

  const CudaDriver* const cu_;
  const CUcontext fallback_;
  MetadataMap<CUcontext, MetadataVector<CUevent>> idle_;  // pooled, per context
  MetadataMap<CUevent, CUcontext> live_;  // recorded, not yet released
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_HOST_CUDA_HOST_H_
