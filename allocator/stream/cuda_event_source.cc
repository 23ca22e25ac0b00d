#include "allocator/stream/cuda_event_source.h"

namespace fragfree {

absl::StatusOr<std::unique_ptr<CudaEventSource>> CudaEventSource::Create(
    int device) {
  absl::StatusOr<const CudaDriver*> loaded = CudaDriver::Get();
  if (!loaded.ok()) return loaded.status();
  const CudaDriver& cu = **loaded;
  CUdevice dev;
  FF_CU_RETURN_IF_ERROR(cu, cuDeviceGet(&dev, device));
  CUcontext context;
  FF_CU_RETURN_IF_ERROR(cu, cuDevicePrimaryCtxRetain(&context, dev));
  return std::unique_ptr<CudaEventSource>(new CudaEventSource(&cu, context));
}

CudaEventSource::~CudaEventSource() {
  CudaContextScope guard(*driver_, context_);
  for (CUevent e : idle_) driver_->cuEventDestroy(e);
}

absl::StatusOr<EventId> CudaEventSource::Record(StreamHandle stream) {
  CudaContextScope guard(*driver_, context_);
  CUevent event;
  if (!idle_.empty()) {
    event = idle_.back();
    idle_.pop_back();
  } else {
    FF_CU_RETURN_IF_ERROR(*driver_,
                          cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  }
  CUresult r =
      driver_->cuEventRecord(event, reinterpret_cast<CUstream>(stream));
  if (r != CUDA_SUCCESS) {
    idle_.push_back(event);
    return driver_->ToStatus(r, "cuEventRecord", __FILE__, __LINE__);
  }
  return EventId(reinterpret_cast<uintptr_t>(event));
}

absl::StatusOr<bool> CudaEventSource::Query(EventId event) {
  CUresult r = driver_->cuEventQuery(reinterpret_cast<CUevent>(event));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return driver_->ToStatus(r, "cuEventQuery", __FILE__, __LINE__);
}

absl::Status CudaEventSource::Synchronize(EventId event) {
  FF_CU_RETURN_IF_ERROR(*driver_,
                        cuEventSynchronize(reinterpret_cast<CUevent>(event)));
  return absl::OkStatus();
}

void CudaEventSource::Release(EventId event) {
  idle_.push_back(reinterpret_cast<CUevent>(event));
}

bool CudaEventSource::IsCapturing(StreamHandle stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (driver_->cuStreamGetCaptureInfo(reinterpret_cast<CUstream>(stream),
                                      &status, nullptr, nullptr, nullptr,
                                      nullptr, nullptr) != CUDA_SUCCESS) {
    return false;
  }
  return status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

}  // namespace fragfree
