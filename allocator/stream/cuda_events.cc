// Implementation of cuda_events.h. Thread-safety: see there.
#include "allocator/stream/cuda_events.h"

#include "allocator/phys/capture_relax.h"

namespace fragfree {

absl::StatusOr<bool> QueryCudaEvent(const CudaDriver& cu, EventId event) {
  RelaxCaptureIfArmed(cu);
  CUresult r = cu.cuEventQuery(reinterpret_cast<CUevent>(event));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return cu.ToStatus(r, "cuEventQuery", __FILE__, __LINE__);
}

absl::Status SynchronizeCudaEvent(const CudaDriver& cu, EventId event) {
  RelaxCaptureIfArmed(cu);
  FF_CU_RETURN_IF_ERROR(cu,
                        cuEventSynchronize(reinterpret_cast<CUevent>(event)));
  return absl::OkStatus();
}

bool CudaStreamIsCapturing(const CudaDriver& cu, StreamHandle stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cu.cuStreamGetCaptureInfo(reinterpret_cast<CUstream>(stream), &status,
                                nullptr, nullptr, nullptr, nullptr,
                                nullptr) != CUDA_SUCCESS) {
    return false;
  }
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

}  // namespace fragfree
