// A fake CUDA runtime (built as libcudart.so.99) for the host tests of the
// LD_PRELOAD interposer: the runtime functions libfragfree.so forwards to or
// calls, implemented on host memory with call counters (fake_cudart.h). It
// lets CI check the interposer's routing (what fragfree serves, what reaches
// the runtime) without a GPU.
// Thread-safety: one mutex guards all state; thread-local capture mode.
#include "tests/preload/fake_cudart.h"

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size,
                                 cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size,
                                         cudaMemPool_t pool,
                                         cudaStream_t stream);
}

namespace {

struct State {
  std::mutex mu;
  std::map<std::string, int> calls;
  std::set<void*> device_live;
  std::set<void*> host_live;
  std::map<uintptr_t, int> stream_device;  // created streams
  std::set<uintptr_t> capturing;
  std::set<uintptr_t> busy;
  bool implicit_capture = false;
  bool no_device = false;
  int device = 0;
  std::map<int, cudaMemPool_t> current_pool;
  uintptr_t next_handle = 0x10000;
  std::set<void*> ipc_opened;  // pointers cudaIpcOpenMemHandle returned
};
State& S() {
  static State* const s = new State();
  return *s;
}
// Fork-safe like a real runtime's bookkeeping: the lock is held across fork().
__attribute__((constructor)) void RegisterForkHandlers() {
  pthread_atfork([] { S().mu.lock(); }, [] { S().mu.unlock(); },
                 [] { S().mu.unlock(); });
}

thread_local cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;

void Count(const char* name) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().calls[name]++;
}

cudaMemPool_t DefaultPoolOf(int device) {
  return reinterpret_cast<cudaMemPool_t>(uintptr_t{0x7000} + 16 * device);
}

bool IsSpecial(cudaStream_t s) { return reinterpret_cast<uintptr_t>(s) <= 2; }

// The stream's device, or -1 when the handle is not a stream.
int DeviceOf(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (IsSpecial(s)) return S().device;
  auto it = S().stream_device.find(reinterpret_cast<uintptr_t>(s));
  return it == S().stream_device.end() ? -1 : it->second;
}

cudaError_t DeviceAlloc(const char* name, void** p, size_t size) {
  Count(name);
  if (p == nullptr) return cudaErrorInvalidValue;
  if (size == 0) {
    *p = nullptr;
    return cudaSuccess;
  }
  *p = malloc(size);
  std::lock_guard<std::mutex> lock(S().mu);
  S().device_live.insert(*p);
  return cudaSuccess;
}

cudaError_t DeviceFree(const char* name, void* p) {
  Count(name);
  if (p == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().device_live.erase(p) == 0) return cudaErrorInvalidValue;
  free(p);
  return cudaSuccess;
}

// (Calls between the fake's own exported functions would go through
// libfragfree.so's interposers, so shared code lives here.)
cudaStream_t NewStreamOnCurrentDevice() {
  std::lock_guard<std::mutex> lock(S().mu);
  uintptr_t h = S().next_handle;
  S().next_handle += 0x100;
  S().stream_device[h] = S().device;
  return reinterpret_cast<cudaStream_t>(h);
}

}  // namespace

extern "C" {

int fake_calls(const char* name) {
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().calls.find(name);
  return it == S().calls.end() ? 0 : it->second;
}

void* fake_device_alloc(size_t size) {
  void* p = malloc(size);
  std::lock_guard<std::mutex> lock(S().mu);
  S().device_live.insert(p);
  return p;
}

cudaStream_t fake_stream_create(int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  uintptr_t h = S().next_handle;
  S().next_handle += 0x100;
  S().stream_device[h] = device;
  return reinterpret_cast<cudaStream_t>(h);
}

void fake_set_capturing(cudaStream_t stream, int capturing) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (capturing) {
    S().capturing.insert(reinterpret_cast<uintptr_t>(stream));
  } else {
    S().capturing.erase(reinterpret_cast<uintptr_t>(stream));
  }
}

void fake_set_implicit_capture(int on) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().implicit_capture = on != 0;
}

void fake_set_device(int device) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().device = device;
}

void fake_set_no_device(int on) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().no_device = on != 0;
}

cudaMemPool_t fake_pool_create(void) {
  std::lock_guard<std::mutex> lock(S().mu);
  uintptr_t h = S().next_handle;
  S().next_handle += 0x100;
  return reinterpret_cast<cudaMemPool_t>(h);
}

cudaError_t cudaGetDevice(int* device) {
  Count("cudaGetDevice");
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().no_device) return cudaErrorNoDevice;
  *device = S().device;
  return cudaSuccess;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  Count("cudaStreamGetDevice");
  int d = DeviceOf(stream);
  if (d < 0) return cudaErrorInvalidResourceHandle;
  *device = d;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                  cudaStreamCaptureStatus* status) {
  Count("cudaStreamIsCapturing");
  if (DeviceOf(stream) < 0) return cudaErrorInvalidResourceHandle;
  std::lock_guard<std::mutex> lock(S().mu);
  if (stream == nullptr && S().implicit_capture) {
    return cudaErrorStreamCaptureImplicit;
  }
  *status = S().capturing.count(reinterpret_cast<uintptr_t>(stream))
                ? cudaStreamCaptureStatusActive
                : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  Count("cudaThreadExchangeStreamCaptureMode");
  cudaStreamCaptureMode old = capture_mode;
  capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Count("cudaStreamSynchronize");
  if (DeviceOf(stream) < 0) return cudaErrorInvalidResourceHandle;
  std::lock_guard<std::mutex> lock(S().mu);
  S().busy.erase(reinterpret_cast<uintptr_t>(stream));  // its work is done
  return cudaSuccess;
}

void fake_set_busy(cudaStream_t stream, int busy) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (busy) {
    S().busy.insert(reinterpret_cast<uintptr_t>(stream));
  } else {
    S().busy.erase(reinterpret_cast<uintptr_t>(stream));
  }
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  Count("cudaStreamCreate");
  *stream = NewStreamOnCurrentDevice();
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  Count("cudaStreamCreateWithFlags");
  *stream = NewStreamOnCurrentDevice();
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int,
                                         int) {
  Count("cudaStreamCreateWithPriority");
  *stream = NewStreamOnCurrentDevice();
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Count("cudaStreamQuery");
  if (DeviceOf(stream) < 0) return cudaErrorInvalidResourceHandle;
  std::lock_guard<std::mutex> lock(S().mu);
  return S().busy.count(reinterpret_cast<uintptr_t>(stream)) ? cudaErrorNotReady
                                                             : cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Count("cudaStreamDestroy");
  std::lock_guard<std::mutex> lock(S().mu);
  return S().stream_device.erase(reinterpret_cast<uintptr_t>(stream))
             ? cudaSuccess
             : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaMalloc(void** p, size_t size) {
  return DeviceAlloc("cudaMalloc", p, size);
}
cudaError_t cudaFree(void* p) { return DeviceFree("cudaFree", p); }
cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t) {
  return DeviceAlloc("cudaMallocAsync", p, size);
}
cudaError_t cudaMallocAsync_ptsz(void** p, size_t size, cudaStream_t) {
  return DeviceAlloc("cudaMallocAsync_ptsz", p, size);
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  return DeviceFree("cudaFreeAsync", p);
}
cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t) {
  return DeviceFree("cudaFreeAsync_ptsz", p);
}
cudaError_t cudaMallocFromPoolAsync(void** p, size_t size, cudaMemPool_t,
                                    cudaStream_t) {
  return DeviceAlloc("cudaMallocFromPoolAsync", p, size);
}
cudaError_t cudaMallocFromPoolAsync_ptsz(void** p, size_t size, cudaMemPool_t,
                                         cudaStream_t) {
  return DeviceAlloc("cudaMallocFromPoolAsync_ptsz", p, size);
}

cudaError_t cudaMallocHost(void** p, size_t size) {
  Count("cudaMallocHost");
  *p = malloc(size);
  std::lock_guard<std::mutex> lock(S().mu);
  S().host_live.insert(*p);
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int) {
  Count("cudaHostAlloc");
  *p = malloc(size);
  std::lock_guard<std::mutex> lock(S().mu);
  S().host_live.insert(*p);
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  Count("cudaFreeHost");
  std::lock_guard<std::mutex> lock(S().mu);
  if (p != nullptr && S().host_live.erase(p) == 0) return cudaErrorInvalidValue;
  free(p);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  Count("cudaDeviceGetDefaultMemPool");
  *pool = DefaultPoolOf(device);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  Count("cudaDeviceGetMemPool");
  std::lock_guard<std::mutex> lock(S().mu);
  auto it = S().current_pool.find(device);
  *pool = it == S().current_pool.end() ? DefaultPoolOf(device) : it->second;
  return cudaSuccess;
}
cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool) {
  Count("cudaDeviceSetMemPool");
  std::lock_guard<std::mutex> lock(S().mu);
  S().current_pool[device] = pool;
  return cudaSuccess;
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr attr,
                                    void* value) {
  Count("cudaMemPoolGetAttribute");
  switch (attr) {
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemCurrent:
    case cudaMemPoolAttrUsedMemHigh:
      *static_cast<uint64_t*>(value) = FAKE_POOL_BYTES;
      return cudaSuccess;
    default:
      *static_cast<uint64_t*>(value) = 0;
      return cudaSuccess;
  }
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) {
  Count("cudaMemPoolSetAttribute");
  return cudaSuccess;
}
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) {
  Count("cudaMemPoolTrimTo");
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  Count("cudaRuntimeGetVersion");
  *version = 13000;
  return cudaSuccess;
}

// As the real runtime: the driver's cuGetProcAddress, found in the driver
// library itself (dlsym on its handle, which LD_PRELOAD does not reach).
static cudaError_t DriverEntryPoint(const char* symbol, void** funcPtr,
                                    int version,
                                    cudaDriverEntryPointQueryResult* status) {
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*);
  void* driver = dlopen(FAKE_DRIVER_SONAME, RTLD_LAZY | RTLD_NOLOAD);
  GetProc get =
      driver != nullptr
          ? reinterpret_cast<GetProc>(dlsym(driver, "cuGetProcAddress_v2"))
          : nullptr;
  if (get == nullptr) return cudaErrorInitializationError;
  CUdriverProcAddressQueryResult r = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  get(symbol, funcPtr, version, 0, &r);
  if (status != nullptr) {
    *status = r == CU_GET_PROC_ADDRESS_SUCCESS
                  ? cudaDriverEntryPointSuccess
                  : cudaDriverEntryPointSymbolNotFound;
  }
  return cudaSuccess;
}
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr,
                                    unsigned long long,
                                    cudaDriverEntryPointQueryResult* status) {
  Count("cudaGetDriverEntryPoint");
  return DriverEntryPoint(symbol, funcPtr, 13000, status);
}
cudaError_t cudaGetDriverEntryPoint_ptsz(
    const char* symbol, void** funcPtr, unsigned long long,
    cudaDriverEntryPointQueryResult* status) {
  Count("cudaGetDriverEntryPoint_ptsz");
  return DriverEntryPoint(symbol, funcPtr, 13000, status);
}
cudaError_t cudaGetDriverEntryPointByVersion(
    const char* symbol, void** funcPtr, unsigned int version,
    unsigned long long, cudaDriverEntryPointQueryResult* status) {
  Count("cudaGetDriverEntryPointByVersion");
  return DriverEntryPoint(symbol, funcPtr, int(version), status);
}
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char* symbol, void** funcPtr, unsigned int version,
    unsigned long long, cudaDriverEntryPointQueryResult* status) {
  Count("cudaGetDriverEntryPointByVersion_ptsz");
  return DriverEntryPoint(symbol, funcPtr, int(version), status);
}

// Legacy IPC of the fake's own device memory, within one process: the handle
// is "FAKEIPC" and the pointer.
static constexpr char kFakeIpc[8] = "FAKEIPC";
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
  Count("cudaIpcGetMemHandle");
  std::lock_guard<std::mutex> lock(S().mu);
  if (S().device_live.count(devPtr) == 0) return cudaErrorInvalidValue;
  memset(handle, 0, sizeof(*handle));
  memcpy(handle->reserved, kFakeIpc, sizeof(kFakeIpc));
  memcpy(handle->reserved + 8, &devPtr, sizeof(devPtr));
  return cudaSuccess;
}
cudaError_t cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle,
                                 unsigned int) {
  Count("cudaIpcOpenMemHandle");
  if (memcmp(handle.reserved, kFakeIpc, sizeof(kFakeIpc)) != 0) {
    return cudaErrorInvalidValue;
  }
  void* p = nullptr;
  memcpy(&p, handle.reserved + 8, sizeof(p));
  std::lock_guard<std::mutex> lock(S().mu);
  S().ipc_opened.insert(p);
  *devPtr = p;
  return cudaSuccess;
}
cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  Count("cudaIpcCloseMemHandle");
  std::lock_guard<std::mutex> lock(S().mu);
  return S().ipc_opened.erase(devPtr) == 1 ? cudaSuccess
                                           : cudaErrorInvalidValue;
}

}  // extern "C"
