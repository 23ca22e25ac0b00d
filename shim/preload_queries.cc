// The two runtime questions the LD_PRELOAD interposer asks on every
// stream-ordered call — the calling thread's current device and whether a
// stream is capturing a graph — answered through the CUDA driver where the
// driver can answer, which costs a quarter of the runtime's call
// (docs/preload.md, "What a call costs"). The driver's answer is taken only
// when it succeeds (or reports an implicit capture); any other result goes to
// the runtime, which then answers exactly as it would have alone: it creates
// the context a first call needs, and its errors are its own.
// The driver is asked only when the engine's devices are CUDA's (the `cuda`
// backend): with an emulated backend the runtime may be a test's stand-in
// (tests/preload), whose stream handles the driver never made.
// Thread-safety: the driver table is resolved once (a function-local static)
// and read-only after; nothing else is shared.
#include <cuda.h>

#include "allocator/phys/backend_registry.h"
#include "allocator/phys/cuda_driver.h"
#include "shim/preload.h"
#include "shim/preload_real.h"
#include "shim/runtime.h"

namespace fragfree::preload {
namespace {

// nullptr without a usable driver or on an emulated backend: every question
// then goes to the runtime.
const CudaDriver* Driver() {
  static const CudaDriver* const driver = []() -> const CudaDriver* {
    Runtime& rt = Runtime::Get();
    // DeviceCount loads FRAGFREE_CONF (options() alone would not).
    if (!rt.DeviceCount().ok() || FindBackend(rt.options().backend)->emulated) {
      return nullptr;
    }
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
