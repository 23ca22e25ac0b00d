// The two runtime questions the LD_PRELOAD interposer asks on every
// stream-ordered call — the calling thread's current device and whether a
// stream is capturing a graph — answered through the CUDA driver where the
// driver can answer, which costs a quarter of the runtime's call
// (docs/preload.md, "What a call costs"). The driver's answer is taken only
// when it succeeds (or reports an implicit capture); any other result goes to
// the runtime, which then answers exactly as it would have alone: it creates
// the context a first call needs, and its errors are its own.
// Thread-safety: the driver table is resolved once (a function-local static)
// and read-only after; nothing else is shared.
#include <cuda.h>

#include "allocator/phys/cuda_driver.h"
#include "shim/preload.h"
#include "shim/preload_real.h"

namespace fragfree::preload {
namespace {

// nullptr without a usable driver (host tests with the fake runtime): every
// question then goes to the runtime.
const CudaDriver* Driver() {
  static const CudaDriver* const driver = [] {
    absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
    return cu.ok() ? *cu : nullptr;
  }();
  return driver;
}

}  // namespace

cudaError_t CurrentDevice(int* device) {
  if (const CudaDriver* cu = Driver()) {
    // The current context's device is the runtime's current device whenever
    // a context is current (the runtime keeps its device's primary context
    // current, and honours one the program made current); with none, the
    // runtime's own default applies.
    CUdevice current;
    if (cu->cuCtxGetDevice(&current) == CUDA_SUCCESS) {
      *device = current;
      return cudaSuccess;
    }
  }
  auto get_device = Real().cudaGetDevice.get();
  return get_device != nullptr ? get_device(device) : kNoRuntime;
}

cudaError_t IsCapturing(StreamHandle stream, bool* capturing) {
  if (const CudaDriver* cu = Driver()) {
    // Handle 0 is the legacy stream here (Normalize): named so, it means
    // that whichever default-stream variant the driver resolved.
    CUstream s = stream == kLegacyStream ? CU_STREAM_LEGACY
                                         : reinterpret_cast<CUstream>(stream);
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult r = cu->cuStreamIsCapturing(s, &status);
    if (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
      *capturing = r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
      return cudaSuccess;
    }
  }
  auto is_capturing = Real().cudaStreamIsCapturing.get();
  if (is_capturing == nullptr) return kNoRuntime;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t err =
      is_capturing(reinterpret_cast<cudaStream_t>(stream), &status);
  if (err == cudaErrorStreamCaptureImplicit) {
    *capturing = true;
    return cudaSuccess;
  }
  *capturing = status != cudaStreamCaptureStatusNone;
  return err;
}

}  // namespace fragfree::preload
