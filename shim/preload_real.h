// The CUDA runtime's own entry points, as the LD_PRELOAD interposer calls them:
// "real" functions found with dlsym(RTLD_NEXT, name), or, when the runtime was
// loaded into a local scope (a Python extension's libcudart), in the first
// loaded libcudart.so*. libfragfree.so never links cudart; every function is
// resolved lazily on first use, so loading the library into a process that does
// not use CUDA touches nothing. A function that cannot be found is reported
// once on stderr and the caller returns kNoRuntime. Thread-safety:
// RealFn::get() is thread-safe (an atomic slot; two threads may resolve the
// same name at once and store the same pointer).
#ifndef FRAGFREE_SHIM_PRELOAD_REAL_H_
#define FRAGFREE_SHIM_PRELOAD_REAL_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

// Per-thread-default-stream variants (nvcc --default-stream per-thread); the
// runtime header declares them only in that mode, libcudart always exports
// them.
extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size,
                                 cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size,
                                         cudaMemPool_t pool,
                                         cudaStream_t stream);
}

namespace fragfree::preload {

// What an interposed function returns when the runtime function it must
// forward to does not exist in the process.
inline constexpr cudaError_t kNoRuntime = cudaErrorInitializationError;

// The address of `name` in the CUDA runtime, or nullptr (reported on stderr
// unless `optional`).
void* FindReal(const char* name, bool optional);

template <typename Fn>
class RealFn {
 public:
  explicit constexpr RealFn(const char* name, bool optional = false)
      : name_(name), optional_(optional) {}
  // The function, or nullptr when the runtime lacks it (looked up once).
  Fn get() {
    void* p = slot_.load(std::memory_order_acquire);
    if (p == nullptr) {
      p = FindReal(name_, optional_);
      if (p == nullptr) p = reinterpret_cast<void*>(kAbsent);
      slot_.store(p, std::memory_order_release);
    }
    if (reinterpret_cast<uintptr_t>(p) == kAbsent) return nullptr;
    return reinterpret_cast<Fn>(p);
  }

 private:
  static constexpr uintptr_t kAbsent = 1;  // looked up, not found
  const char* const name_;
  const bool optional_;
  std::atomic<void*> slot_{nullptr};
};

// Every runtime function the preload layer forwards to or calls itself.
#define FF_PRELOAD_REAL_FUNCTIONS(X) \
  X(cudaMalloc)                      \
  X(cudaFree)                        \
  X(cudaMallocAsync)                 \
  X(cudaFreeAsync)                   \
  X(cudaMallocAsync_ptsz)            \
  X(cudaFreeAsync_ptsz)              \
  X(cudaMallocFromPoolAsync)         \
  X(cudaMallocFromPoolAsync_ptsz)    \
  X(cudaMallocHost)                  \
  X(cudaHostAlloc)                   \
  X(cudaFreeHost)                    \
  X(cudaDeviceGetDefaultMemPool)     \
  X(cudaDeviceGetMemPool)            \
  X(cudaDeviceSetMemPool)            \
  X(cudaMemPoolGetAttribute)         \
  X(cudaMemPoolSetAttribute)         \
  X(cudaMemPoolTrimTo)               \
  X(cudaStreamCreate)                \
  X(cudaStreamCreateWithFlags)       \
  X(cudaStreamCreateWithPriority)    \
  X(cudaStreamDestroy)               \
  X(cudaStreamQuery)                 \
  X(cudaGetDevice)                   \
  X(cudaStreamIsCapturing)           \
  X(cudaStreamSynchronize)           \
  X(cudaThreadExchangeStreamCaptureMode)

struct RealCuda {
#define FF_DECLARE_REAL(name) RealFn<decltype(&::name)> name{#name};
  FF_PRELOAD_REAL_FUNCTIONS(FF_DECLARE_REAL)
#undef FF_DECLARE_REAL
  // CUDA 12.8+ only; without it a stream's device is the current device.
  RealFn<decltype(&::cudaStreamGetDevice)> cudaStreamGetDevice{
      "cudaStreamGetDevice", /*optional=*/true};
};

// The process's table (never destroyed).
RealCuda& Real();

}  // namespace fragfree::preload

#endif  // FRAGFREE_SHIM_PRELOAD_REAL_H_
