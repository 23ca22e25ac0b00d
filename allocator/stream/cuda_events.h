// The CUDA event calls that fragfree's two event sources share: the engine's
// CudaEventSource (device 0's context, stream/cuda_event_source.h) and the
// pinned host allocator's CudaStreamEvents (the context of each stream,
// host/cuda_host.h). RecordPooledEvent takes an idle event from the caller's
// pool (or creates one, timing disabled) and records it; the others wrap
// cuEventQuery, cuEventSynchronize and cuStreamGetCaptureInfo.
// Thread-safety: stateless; pools belong to, and are guarded by, the callers.
// REQUIRES: the context the events belong to is current.
#ifndef FRAGFREE_ALLOCATOR_STREAM_CUDA_EVENTS_H_
#define FRAGFREE_ALLOCATOR_STREAM_CUDA_EVENTS_H_

#include "absl/status/statusor.h"
#include "allocator/phys/cuda_driver.h"
#include "allocator/stream/event_source.h"

namespace fragfree {

// Records an event from `idle` (a vector-like pool of CUevent) on `stream`; on
// failure the event goes back to the pool.
template <typename Pool>
absl::StatusOr<CUevent> RecordPooledEvent(const CudaDriver& cu, Pool& idle,
                                          StreamHandle stream) {
  CUevent event;
  if (!idle.empty()) {
    event = idle.back();
    idle.pop_back();
  } else {
    FF_CU_RETURN_IF_ERROR(cu, cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  }
  CUresult r = cu.cuEventRecord(event, reinterpret_cast<CUstream>(stream));
  if (r != CUDA_SUCCESS) {
    idle.push_back(event);
    return cu.ToStatus(r, "cuEventRecord", __FILE__, __LINE__);
  }
  return event;
}

// True once the work before the event has finished.
absl::StatusOr<bool> QueryCudaEvent(const CudaDriver& cu, EventId event);
absl::Status SynchronizeCudaEvent(const CudaDriver& cu, EventId event);
// True while the stream captures a CUDA graph (also when that capture was
// invalidated but not yet ended); false when the status cannot be read.
bool CudaStreamIsCapturing(const CudaDriver& cu, StreamHandle stream);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_STREAM_CUDA_EVENTS_H_
