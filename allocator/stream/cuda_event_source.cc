// Implementation of cuda_event_source.h. Thread-safety: see there.
#include "allocator/stream/cuda_event_source.h"

#include "allocator/stream/cuda_events.h"

namespace fragfree {

absl::StatusOr<std::unique_ptr<CudaEventSource>> CudaEventSource::Create(
    int device) {
  absl::StatusOr<const CudaDriver*> loaded = CudaDriver::Get();
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<CUcontext> context = (*loaded)->RetainPrimaryContext(device);
  if (!context.ok()) return context.status();
  return std::unique_ptr<CudaEventSource>(
      new CudaEventSource(*loaded, *context));
}

CudaEventSource::~CudaEventSource() {
  CudaContextScope guard(*driver_, context_);
  for (CUevent e : idle_) driver_->cuEventDestroy(e);
}

absl::StatusOr<EventId> CudaEventSource::Record(StreamHandle stream) {
  CudaContextScope guard(*driver_, context_);
  absl::StatusOr<CUevent> event = RecordPooledEvent(*driver_, idle_, stream);
  if (!event.ok()) return event.status();
  return EventId(reinterpret_cast<uintptr_t>(*event));
}

absl::StatusOr<bool> CudaEventSource::Query(EventId event) {
  return QueryCudaEvent(*driver_, event);
}

absl::Status CudaEventSource::Synchronize(EventId event) {
  return SynchronizeCudaEvent(*driver_, event);
}

void CudaEventSource::Release(EventId event) {
  idle_.push_back(reinterpret_cast<CUevent>(event));
}

bool CudaEventSource::IsCapturing(StreamHandle stream) {
  return CudaStreamIsCapturing(*driver_, stream);
}

}  // namespace fragfree
