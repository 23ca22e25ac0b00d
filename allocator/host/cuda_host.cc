// CudaPinningBackend and CudaStreamEvents: driver calls only (libcuda is
// dlopen'ed by CudaDriver), so this compiles against the CUDA headers and runs
// wherever a driver exists.
// Thread-safety: see cuda_host.h.
#include "allocator/host/cuda_host.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"
#include "allocator/stream/cuda_events.h"

namespace fragfree {

// --- CudaPinningBackend ------------------------------------------------------

CudaPinningBackend::CudaPinningBackend(const CudaDriver* cu, CUcontext context,
                                       Mode mode)
    : cu_(cu),
      context_(context),
      mode_(mode),
      page_size_(size_t(sysconf(_SC_PAGESIZE))) {}

absl::StatusOr<std::unique_ptr<CudaPinningBackend>> CudaPinningBackend::Create(
    Mode mode, int device) {
  absl::StatusOr<const CudaDriver*> loaded = CudaDriver::Get();
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<CUcontext> context = (*loaded)->RetainPrimaryContext(device);
  if (!context.ok()) return context.status();
  return std::unique_ptr<CudaPinningBackend>(
      new CudaPinningBackend(*loaded, *context, mode));
}

std::string CudaPinningBackend::name() const {
  return mode_ == Mode::kHostAlloc ? "cuda (cuMemHostAlloc)"
                                   : "cuda (mmap + cuMemHostRegister)";
}

absl::StatusOr<void*> CudaPinningBackend::Pin(size_t bytes) {
  CudaContextScope scope(*cu_, context_);
  if (mode_ == Mode::kHostAlloc) {
    void* p = nullptr;
    FF_CU_RETURN_IF_ERROR(*cu_, cuMemHostAlloc(&p, bytes,
                                               CU_MEMHOSTALLOC_PORTABLE |
                                                   CU_MEMHOSTALLOC_DEVICEMAP));
    return p;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("mmap of %s for pinning failed: %s", FormatBytes(bytes),
                        strerror(errno)));
  }
  CUresult r = cu_->cuMemHostRegister(
      p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
  if (r != CUDA_SUCCESS) {
    munmap(p, bytes);
    return cu_->ToStatus(r, "cuMemHostRegister", __FILE__, __LINE__);
  }
  return p;
}

absl::Status CudaPinningBackend::Unpin(void* ptr, size_t bytes) {
  CudaContextScope scope(*cu_, context_);
  if (mode_ == Mode::kHostAlloc) {
    FF_CU_RETURN_IF_ERROR(*cu_, cuMemFreeHost(ptr));
    return absl::OkStatus();
  }
  FF_CU_RETURN_IF_ERROR(*cu_, cuMemHostUnregister(ptr));
  if (munmap(ptr, bytes) != 0) {
    return absl::InternalError(absl::StrFormat(
        "munmap(%p, %d) after unregistering: %s", ptr, bytes, strerror(errno)));
  }
  return absl::OkStatus();
}

// --- CudaStreamEvents --------------------------------------------------------

absl::StatusOr<std::unique_ptr<CudaStreamEvents>> CudaStreamEvents::Create(
    int fallback_device) {
  absl::StatusOr<const CudaDriver*> loaded = CudaDriver::Get();
  if (!loaded.ok()) return loaded.status();
  absl::StatusOr<CUcontext> context =
      (*loaded)->RetainPrimaryContext(fallback_device);
  if (!context.ok()) return context.status();
  return std::unique_ptr<CudaStreamEvents>(
      new CudaStreamEvents(*loaded, *context));
}

CudaStreamEvents::~CudaStreamEvents() {
  for (auto& [context, events] : idle_) {
    CudaContextScope scope(*cu_, context);
    for (CUevent e : events) cu_->cuEventDestroy(e);
  }
}

absl::StatusOr<CUcontext> CudaStreamEvents::ContextOf(
    StreamHandle stream) const {
  CUcontext context = nullptr;
  // 0, CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2) mean "the
  // current context's": the caller's, or the fallback device's.
  if (stream <= 0x2) {
    if (cu_->cuCtxGetCurrent(&context) != CUDA_SUCCESS || context == nullptr) {
      context = fallback_;
    }
    return context;
  }
  FF_CU_RETURN_IF_ERROR(
      *cu_, cuStreamGetCtx(reinterpret_cast<CUstream>(stream), &context));
  return context;
}

absl::StatusOr<EventId> CudaStreamEvents::Record(StreamHandle stream) {
  absl::StatusOr<CUcontext> context = ContextOf(stream);
  if (!context.ok()) return context.status();
  CudaContextScope scope(*cu_, *context);
  absl::StatusOr<CUevent> event =
      RecordPooledEvent(*cu_, idle_[*context], stream);
  if (!event.ok()) return event.status();
  live_[*event] = *context;
  return EventId(reinterpret_cast<uintptr_t>(*event));
}

absl::StatusOr<bool> CudaStreamEvents::Query(EventId event) {
  return QueryCudaEvent(*cu_, event);
}

absl::Status CudaStreamEvents::Synchronize(EventId event) {
  return SynchronizeCudaEvent(*cu_, event);
}

void CudaStreamEvents::Release(EventId event) {
  CUevent e = reinterpret_cast<CUevent>(event);
  auto it = live_.find(e);
  if (it == live_.end()) return;
  idle_[it->second].push_back(e);
  live_.erase(it);
}

bool CudaStreamEvents::IsCapturing(StreamHandle stream) {
  return CudaStreamIsCapturing(*cu_, stream);
}

}  // namespace fragfree
