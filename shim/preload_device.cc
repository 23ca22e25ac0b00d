// The interposed CUDA runtime functions for device memory (docs/preload.md):
// cudaMalloc, cudaFree, cudaMallocAsync, cudaFreeAsync and
// cudaMallocFromPoolAsync (with their per-thread-default-stream _ptsz
// variants). Fragfree serves what it can; pointers it did
// not allocate, graph-capture allocations, other pools and unserved devices go
// to the runtime's own functions.
//
// cudaFree's contract (nothing issued before it, on any stream, may still use
// the memory once it can be reused) is kept without a device synchronize: the
// block is recorded on every busy stream fragfree knows on the device (those
// passed to its allocation calls and every non-blocking stream created through
// the runtime) plus the legacy default stream, which covers all blocking
// streams; the engine reuses it only after events on those streams complete.
// cudaFreeAsync(ptr, s) frees in stream order on s.
//
// Thread-safety: every function is thread-safe (the engine and the preload
// state lock internally); no lock is held while calling into the runtime.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>

#include "allocator/phys/capture_relax.h"
#include "shim/oom.h"
#include "shim/preload.h"
#include "shim/preload_real.h"

#define FF_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace fragfree::preload {
namespace {

// The served device that owns `ptr`, or nullptr (then forward). The current
// device is asked only when several devices are served.
DeviceAllocator* FindOwner(const void* ptr, int* device) {
  if (MaxServedDevice() == 0) return nullptr;
  int hint = 0;
  if (MaxServedDevice() > 1 && CurrentDevice(&hint) != cudaSuccess) hint = 0;
  return Owner(ptr, hint, device);
}

// cudaMallocAsync and friends. pool_device >= 0: an explicit allocation from
// that device's default pool; -1: the current pool of the stream's device.
template <typename Forward>
cudaError_t StreamOrderedMalloc(void** ptr, size_t size, cudaStream_t stream,
                                bool per_thread, int pool_device,
                                Forward&& forward) {
  if (!Active() || ptr == nullptr || size == 0) return forward();
  NoteCudaUse();
  const StreamHandle s = Normalize(stream, per_thread);
  bool capturing = false;
  cudaError_t err = IsCapturing(s, &capturing);
  if (err != cudaSuccess) return err;
  // A graph owns what is allocated during its capture: the runtime serves it.
  if (capturing) return forward();
  int device = -1;
  err = StreamDevice(s, &device);
  if (err != cudaSuccess) return err;
  if (pool_device >= 0 ? pool_device != device
                       : !CurrentPoolIsDefault(device)) {
    return forward();
  }
  DeviceAllocator* d = Served(device);
  if (d == nullptr) return forward();
  NoteEngineStream(s);
  RelaxCaptureScope relaxed;
  absl::StatusOr<void*> p = d->Malloc(size, s);
  // Out of memory: the whole report (and its files) goes with the error.
  if (!p.ok()) return ToCuda(OomStatus(*d, p.status()));
  *ptr = *p;
  return cudaSuccess;
}

// StreamOrderedFree's path for all but the common case.
template <typename Forward>
cudaError_t StreamOrderedFreeSlow(void* ptr, StreamHandle s,
                                  Forward&& forward) {
  int device = -1;
  DeviceAllocator* d = FindOwner(ptr, &device);
  if (d == nullptr) return forward();
  bool capturing = false;
  cudaError_t err = IsCapturing(s, &capturing);
  if (err != cudaSuccess) return err;
  if (capturing) {
    // CUDA accepts only graph allocations here; fragfree memory is not one.
    static std::atomic<bool> told{false};
    if (!told.exchange(true)) {
      fprintf(stderr,
              "fragfree: cudaFreeAsync(%p) on a capturing stream: the memory "
              "was allocated outside the graph (CUDA requires a graph "
              "allocation here); refused with cudaErrorInvalidValue, the "
              "memory stays allocated\n",
              ptr);
    }
    return cudaErrorInvalidValue;
  }
  int stream_device = -1;
  err = StreamDevice(s, &stream_device);
  if (err != cudaSuccess) return err;
  if (stream_device != device) {
    // The engine's events belong to the owner's device: wait for the stream.
    auto sync = Real().cudaStreamSynchronize.get();
    if (sync == nullptr) return kNoRuntime;
    RelaxedCapture relaxed;
    err = sync(reinterpret_cast<cudaStream_t>(s));
    if (err != cudaSuccess) return err;
  } else if (absl::Status st = d->RecordStream(ptr, s); !st.ok()) {
    return ToCuda(st);
  }
  RelaxCaptureScope relaxed;
  return ToCuda(d->Free(ptr));
}

// cudaFreeAsync: stream-ordered on `stream`. If it is not the allocation
// stream, the block waits for an event on it before any reuse.
template <typename Forward>
cudaError_t StreamOrderedFree(void* ptr, cudaStream_t stream, bool per_thread,
                              Forward&& forward) {
  if (!Active() || ptr == nullptr) return forward();
  NoteCudaUse();
  const StreamHandle s = Normalize(stream, per_thread);
  // The common case, a block of the stream's own device on a stream that is
  // not capturing: one lock and one probe. Anything else (another device's
  // block, not fragfree's, capture, a failed query) takes the path below,
  // which asks again and answers as it always has.
  bool capturing = true;
  int stream_device = -1;
  if (IsCapturing(s, &capturing) == cudaSuccess && !capturing &&
      StreamDevice(s, &stream_device) == cudaSuccess &&
      stream_device < MaxServedDevice()) {  // a device FindOwner would ask
    if (DeviceAllocator* d = ExistingServed(stream_device)) {
      bool owned = false;
      RelaxCaptureScope relaxed;
      absl::Status st = d->FreeOnStream(ptr, s, &owned);
      if (owned) return ToCuda(st);
    }
  }
  return StreamOrderedFreeSlow(ptr, s, std::forward<Forward>(forward));
}

}  // namespace
}  // namespace fragfree::preload

using fragfree::DeviceAllocator;
using fragfree::RelaxCaptureScope;
using fragfree::StreamHandle;
using namespace fragfree::preload;  // NOLINT(build/namespaces): the C ABI edge

FF_INTERPOSE cudaError_t cudaMalloc(void** devPtr, size_t size) {
  auto forward = [&] { FF_FORWARD(cudaMalloc, devPtr, size); };
  if (!Active() || devPtr == nullptr || size == 0) return forward();
  NoteCudaUse();
  int device = -1;
  // No device (or no driver): the runtime gives the program its own answer.
  if (CurrentDevice(&device) != cudaSuccess) return forward();
  DeviceAllocator* d = Served(device);
  if (d == nullptr) return forward();
  RelaxCaptureScope relaxed;
  absl::StatusOr<void*> p = d->Malloc(size, kSyncArenaStream);
  // Out of memory: the whole report (and its files) goes with the error.
  if (!p.ok()) return ToCuda(OomStatus(*d, p.status()));
  *devPtr = *p;
  return cudaSuccess;
}

FF_INTERPOSE cudaError_t cudaFree(void* devPtr) {
  auto forward = [&] { FF_FORWARD(cudaFree, devPtr); };
  // cudaFree(NULL) is the classic "create the context now" call.
  if (!Active() || devPtr == nullptr) return forward();
  NoteCudaUse();
  int device = -1;
  DeviceAllocator* d = FindOwner(devPtr, &device);
  if (d == nullptr) return forward();
  // No stream is known: the memory waits for every busy stream fragfree has
  // seen on the device and for the legacy default stream (which covers all
  // blocking streams). The engine ignores the stream the block was allocated
  // on, so both handles of the legacy stream are recorded.
  RelaxedCapture relaxed;
  auto streams_alive = ShareStreams();
  for (StreamHandle s : StreamsToFence(device)) {
    if (absl::Status st = d->RecordStream(devPtr, s); !st.ok()) {
      return ToCuda(st);
    }
  }
  return ToCuda(d->Free(devPtr));
}

FF_INTERPOSE cudaError_t cudaMallocAsync(void** devPtr, size_t size,
                                         cudaStream_t hStream) {
  return StreamOrderedMalloc(
      devPtr, size, hStream, /*per_thread=*/false, -1,
      [&] { FF_FORWARD(cudaMallocAsync, devPtr, size, hStream); });
}

FF_INTERPOSE cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size,
                                              cudaStream_t hStream) {
  return StreamOrderedMalloc(
      devPtr, size, hStream, /*per_thread=*/true, -1,
      [&] { FF_FORWARD(cudaMallocAsync_ptsz, devPtr, size, hStream); });
}

FF_INTERPOSE cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return StreamOrderedFree(devPtr, hStream, /*per_thread=*/false,
                           [&] { FF_FORWARD(cudaFreeAsync, devPtr, hStream); });
}

FF_INTERPOSE cudaError_t cudaFreeAsync_ptsz(void* devPtr,
                                            cudaStream_t hStream) {
  return StreamOrderedFree(devPtr, hStream, /*per_thread=*/true, [&] {
    FF_FORWARD(cudaFreeAsync_ptsz, devPtr, hStream);
  });
}

FF_INTERPOSE cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size,
                                                 cudaMemPool_t memPool,
                                                 cudaStream_t stream) {
  auto forward = [&] {
    FF_FORWARD(cudaMallocFromPoolAsync, ptr, size, memPool, stream);
  };
  int pool_device = -1;
  if (!Active() || !IsDefaultPool(memPool, &pool_device)) return forward();
  return StreamOrderedMalloc(ptr, size, stream, /*per_thread=*/false,
                             pool_device, forward);
}

FF_INTERPOSE cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size,
                                                      cudaMemPool_t memPool,
                                                      cudaStream_t stream) {
  auto forward = [&] {
    FF_FORWARD(cudaMallocFromPoolAsync_ptsz, ptr, size, memPool, stream);
  };
  int pool_device = -1;
  if (!Active() || !IsDefaultPool(memPool, &pool_device)) return forward();
  return StreamOrderedMalloc(ptr, size, stream, /*per_thread=*/true,
                             pool_device, forward);
}
