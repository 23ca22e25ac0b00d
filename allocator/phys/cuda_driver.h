// CudaDriver: the CUDA driver entry points fragfree uses, opened at run time
// with dlopen("libcuda.so.1") and resolved with cuGetProcAddress, so that
// libfragfree.so loads (and the host backend works) on machines without a
// driver, and so that no link-time dependency on libcuda exists.
// FF_CU_RETURN_IF_ERROR turns a CUresult into an absl::Status naming the call,
// the file:line and cuGetErrorName's text. Thread-safety: Get() initialises
// once (thread-safe); the table is read-only after.
#ifndef FRAGFREE_ALLOCATOR_PHYS_CUDA_DRIVER_H_
#define FRAGFREE_ALLOCATOR_PHYS_CUDA_DRIVER_H_

#include <cuda.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fragfree {

#define FF_CUDA_DRIVER_FUNCTIONS(X)                               \
  X(cuInit)                                                       \
  X(cuGetErrorName)                                               \
  X(cuGetErrorString)                                             \
  X(cuDeviceGet)                                                  \
  X(cuDeviceGetCount)                                             \
  X(cuDeviceGetAttribute)                                         \
  X(cuDeviceTotalMem)                                             \
  X(cuDeviceCanAccessPeer)                                        \
  X(cuDevicePrimaryCtxRetain)                                     \
  X(cuCtxGetCurrent)                                              \
  X(cuCtxSetCurrent)                                              \
  X(cuCtxGetDevice)                                               \
  X(cuMemGetInfo)                                                 \
  X(cuMemAddressReserve)                                          \
  X(cuMemAddressFree)                                             \
  X(cuMemCreate)                                                  \
  X(cuMemRelease)                                                 \
  X(cuMemMap)                                                     \
  X(cuMemUnmap)                                                   \
  X(cuMemSetAccess)                                               \
  X(cuMemGetAllocationGranularity)                                \
  /* sharing pages with other processes (docs/ipc.md) */          \
  X(cuMemExportToShareableHandle)                                 \
  X(cuMemImportFromShareableHandle)                               \
  X(cuEventCreate)                                                \
  X(cuEventDestroy)                                               \
  X(cuEventRecord)                                                \
  X(cuEventQuery)                                                 \
  X(cuEventSynchronize)                                           \
  X(cuStreamGetCaptureInfo)                                       \
  X(cuStreamIsCapturing)                                          \
  X(cuThreadExchangeStreamCaptureMode)                            \
  X(cuStreamSynchronize)                                          \
  X(cuStreamCreate)                                               \
  X(cuStreamDestroy)                                              \
  X(cuMemcpyHtoD)                                                 \
  X(cuMemcpyDtoH)                                                 \
  X(cuMemsetD8Async)                                              \
  /* backups of paused memory (allocator/sleep/backup_cuda.cc) */ \
  X(cuMemcpyDtoHAsync)                                            \
  X(cuMemcpyHtoDAsync)                                            \
  /* pinned host memory (allocator/host/cuda_host.cc) */          \
  X(cuMemHostAlloc)                                               \
  X(cuMemFreeHost)                                                \
  X(cuMemHostRegister)                                            \
  X(cuMemHostUnregister)                                          \
  X(cuStreamGetCtx)                                               \
  X(cuMemAlloc)                                                   \
  X(cuMemFree)

struct CudaDriver {
#define FF_DECLARE_MEMBER(name) decltype(&::name) name = nullptr;
  FF_CUDA_DRIVER_FUNCTIONS(FF_DECLARE_MEMBER)
#undef FF_DECLARE_MEMBER

  // The process-wide table; an error when libcuda cannot be opened or cuInit
  // fails (no GPU, no driver). The error is remembered and returned again.
  static absl::StatusOr<const CudaDriver*> Get();

  // "cuMemMap failed at file.cc:12: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  // CUDA_ERROR_OUT_OF_MEMORY becomes ResourceExhausted, everything else
  // Internal.
  absl::Status ToStatus(CUresult result, const char* call, const char* file,
                        int line) const;
  // `device`'s primary context, retained (cuDeviceGet +
  // cuDevicePrimaryCtxRetain; fragfree never releases it: the process uses it).
  absl::StatusOr<CUcontext> RetainPrimaryContext(int device) const;
};

// Makes `context` current on the calling thread for a scope and restores the
// caller's context after, so the program's current device never changes under
// it. status() says whether the switch worked.
class CudaContextScope {
 public:
  CudaContextScope(const CudaDriver& cu, CUcontext context);
  ~CudaContextScope();
  CudaContextScope(const CudaContextScope&) = delete;
  CudaContextScope& operator=(const CudaContextScope&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  const CudaDriver& cu_;
  CUcontext previous_ = nullptr;
  bool switched_ = false;
  absl::Status status_;
};

}  // namespace fragfree

#define FF_CU_RETURN_IF_ERROR(driver, call)                               \
  do {                                                                    \
    CUresult ff_cu_result_ = (driver).call;                               \
    if (ff_cu_result_ != CUDA_SUCCESS)                                    \
      return (driver).ToStatus(ff_cu_result_, #call, __FILE__, __LINE__); \
  } while (0)

#endif  // FRAGFREE_ALLOCATOR_PHYS_CUDA_DRIVER_H_
