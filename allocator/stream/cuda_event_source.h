// CudaEventSource: EventSource over CUDA events (cuEventCreate with timing
// disabled), pooled so that recording costs one cuEventRecord. Runs with the
// device's primary context current. IsCapturing asks cuStreamGetCaptureInfo.
// The object and its pool are on the metadata arena.
// Thread-safety: called under the DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_STREAM_CUDA_EVENT_SOURCE_H_
#define FRAGFREE_ALLOCATOR_STREAM_CUDA_EVENT_SOURCE_H_

#include <memory>

#include "allocator/base/metadata_arena.h"
#include "allocator/phys/cuda_driver.h"
#include "allocator/stream/event_source.h"

namespace fragfree {

class CudaEventSource final : public EventSource {
 public:
  static absl::StatusOr<std::unique_ptr<CudaEventSource>> Create(int device);
  ~CudaEventSource() override;

  absl::StatusOr<EventId> Record(StreamHandle stream) override;
  absl::StatusOr<bool> Query(EventId event) override;
  absl::Status Synchronize(EventId event) override;
  void Release(EventId event) override;
  bool IsCapturing(StreamHandle stream) override;

 private:
  CudaEventSource(const CudaDriver* driver, CUcontext context)
      : driver_(driver), context_(context) {}
  const CudaDriver* driver_;
  CUcontext context_;
  MetadataVector<CUevent> idle_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_STREAM_CUDA_EVENT_SOURCE_H_
