// The CUDA runtime's and driver's own entry points, as the LD_PRELOAD
// interposer calls them: "real" functions found with dlsym(RTLD_NEXT, name),
// or, when the library was loaded into a local scope (a Python extension's
// libcudart; the libcuda that libcudart dlopens), in the first loaded
// libcudart.so* (runtime) or libcuda.so* (driver). libfragfree.so never links
// cudart; every function is resolved lazily on first use, so loading the
// library into a process that does not use CUDA touches nothing. A function
// that cannot be found is reported once on stderr and the caller returns
// kNoRuntime. Thread-safety: RealFn::get() is thread-safe (an atomic slot; two
// threads may resolve the same name at once and store the same pointer).
#ifndef FRAGFREE_SHIM_PRELOAD_REAL_H_
#define FRAGFREE_SHIM_PRELOAD_REAL_H_

#include <cuda.h>
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

// cudaGetDriverEntryPoint[ByVersion] (and their _ptsz twins, which the runtime
// exports with the same signatures). Spelled out: the runtime header marks
// cudaGetDriverEntryPoint deprecated.
using GetDriverEntryPointFn = cudaError_t (*)(
    const char* symbol, void** funcPtr, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus);
using GetDriverEntryPointByVersionFn = cudaError_t (*)(
    const char* symbol, void** funcPtr, unsigned int cudaVersion,
    unsigned long long flags, cudaDriverEntryPointQueryResult* driverStatus);
// The driver's cuGetProcAddress before CUDA 12.0 (no symbol status).
using GetProcAddressV1Fn = CUresult (*)(const char* symbol, void** pfn,
                                        int cudaVersion, cuuint64_t flags);

}  // namespace fragfree::preload

namespace fragfree::preload {

// What an interposed function returns when the runtime (driver) function it
// must forward to does not exist in the process.
inline constexpr cudaError_t kNoRuntime = cudaErrorInitializationError;
inline constexpr CUresult kNoDriver = CUDA_ERROR_NOT_INITIALIZED;

enum class Lib { kRuntime, kDriver };

// The address of `name` in the CUDA runtime (or driver), or nullptr (reported
// on stderr unless `optional`).
void* FindReal(const char* name, bool optional, Lib lib = Lib::kRuntime);

template <typename Fn>
class RealFn {
 public:
  explicit constexpr RealFn(const char* name, bool optional = false,
                            Lib lib = Lib::kRuntime)
      : name_(name), optional_(optional), lib_(lib) {}
  // The function, or nullptr when the runtime lacks it (looked up once).
  Fn get() {
    void* p = slot_.load(std::memory_order_acquire);
    if (p == nullptr) {
      p = FindReal(name_, optional_, lib_);
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
  const Lib lib_;
  std::atomic<void*> slot_{nullptr};
};

// Every runtime function the preload layer forwards to or calls itself.
#define FF_PRELOAD_REAL_FUNCTIONS(X)     \
  X(cudaMalloc)                          \
  X(cudaFree)                            \
  X(cudaMallocAsync)                     \
  X(cudaFreeAsync)                       \
  X(cudaMallocAsync_ptsz)                \
  X(cudaFreeAsync_ptsz)                  \
  X(cudaMallocFromPoolAsync)             \
  X(cudaMallocFromPoolAsync_ptsz)        \
  X(cudaMallocHost)                      \
  X(cudaHostAlloc)                       \
  X(cudaFreeHost)                        \
  X(cudaDeviceGetDefaultMemPool)         \
  X(cudaDeviceGetMemPool)                \
  X(cudaDeviceSetMemPool)                \
  X(cudaMemPoolGetAttribute)             \
  X(cudaMemPoolSetAttribute)             \
  X(cudaMemPoolTrimTo)                   \
  X(cudaStreamCreate)                    \
  X(cudaStreamCreateWithFlags)           \
  X(cudaStreamCreateWithPriority)        \
  X(cudaStreamDestroy)                   \
  X(cudaStreamQuery)                     \
  X(cudaGetDevice)                       \
  X(cudaStreamIsCapturing)               \
  X(cudaStreamSynchronize)               \
  X(cudaThreadExchangeStreamCaptureMode) \
  X(cudaRuntimeGetVersion)               \
  X(cudaIpcGetMemHandle)                 \
  X(cudaIpcOpenMemHandle)                \
  X(cudaIpcCloseMemHandle)

struct RealCuda {
#define FF_DECLARE_REAL(name) RealFn<decltype(&::name)> name{#name};
  FF_PRELOAD_REAL_FUNCTIONS(FF_DECLARE_REAL)
#undef FF_DECLARE_REAL
  // CUDA 12.8+ only; without it a stream's device is the current device.
  RealFn<decltype(&::cudaStreamGetDevice)> cudaStreamGetDevice{
      "cudaStreamGetDevice", /*optional=*/true};
  RealFn<GetDriverEntryPointFn> cudaGetDriverEntryPoint{
      "cudaGetDriverEntryPoint"};
  RealFn<GetDriverEntryPointFn> cudaGetDriverEntryPoint_ptsz{
      "cudaGetDriverEntryPoint_ptsz"};
  RealFn<GetDriverEntryPointByVersionFn> cudaGetDriverEntryPointByVersion{
      "cudaGetDriverEntryPointByVersion"};
  RealFn<GetDriverEntryPointByVersionFn> cudaGetDriverEntryPointByVersion_ptsz{
      "cudaGetDriverEntryPointByVersion_ptsz"};
  // The driver's (libcuda) functions fragfree interposes
  // (preload_driver.cc). Not named after them: cuda.h defines some of those
  // names as macros.
  RealFn<decltype(&::cuMemGetAddressRange_v2)> driver_mem_get_address_range{
      "cuMemGetAddressRange_v2", false, Lib::kDriver};
  RealFn<decltype(&::cuPointerGetAttribute)> driver_pointer_get_attribute{
      "cuPointerGetAttribute", false, Lib::kDriver};
  RealFn<decltype(&::cuPointerGetAttributes)> driver_pointer_get_attributes{
      "cuPointerGetAttributes", false, Lib::kDriver};
  RealFn<GetProcAddressV1Fn> driver_get_proc_address_v1{"cuGetProcAddress",
                                                        false, Lib::kDriver};
  RealFn<decltype(&::cuGetProcAddress_v2)> driver_get_proc_address_v2{
      "cuGetProcAddress_v2", false, Lib::kDriver};
};

// The process's table (never destroyed).
RealCuda& Real();

// In an interposed function: returns what the runtime's own `name` returns
// for the arguments, or kNoRuntime when the process has none.
#define FF_FORWARD(name, ...)                                        \
  do {                                                               \
    auto real_fn_ = ::fragfree::preload::Real().name.get();          \
    return real_fn_ != nullptr ? real_fn_(__VA_ARGS__) : kNoRuntime; \
  } while (0)

}  // namespace fragfree::preload

#endif  // FRAGFREE_SHIM_PRELOAD_REAL_H_
