// The LD_PRELOAD interposer's shared state (docs/preload.md): whether this
// process is preloaded, which devices fragfree serves, which streams it has
// seen (cudaFree waits for them), which memory pools are the devices' default
// pools (their statistics answer from fragfree), the pinned-host counters, and
// the mapping of fragfree errors to cudaError_t. The interposed cuda* functions
// live in preload_device.cc, preload_streams.cc, preload_pool.cc and
// preload_pinned.cc; the runtime queries every call asks in preload_queries.cc;
// the library constructor, fork and exit handling in preload.cc.
// Thread-safety: every function here is thread-safe. State is atomics, two
// std::mutex (stream registry, pinned table) and one std::shared_mutex
// (streams in use by cudaFree vs. cudaStreamDestroy); the fork handlers take
// all three around fork() so that a child never inherits a held lock. Lock
// order: stream-use lock, then registry, then pinned table, then the engine's.
#ifndef FRAGFREE_SHIM_PRELOAD_H_
#define FRAGFREE_SHIM_PRELOAD_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "absl/status/status.h"
#include "allocator/base/stream_handle.h"
#include "allocator/device_allocator.h"

namespace fragfree::preload {

// --- Process state (preload.cc) ---------------------------------------------

// True when this library was LD_PRELOAD'ed (LD_PRELOAD names libfragfree) and
// this process is not a fork child of a process that used fragfree. When
// false, every interposed function forwards to the CUDA runtime unchanged.
bool Active();
// Called before the first call into the engine (a fork child of this process
// will not use fragfree), and at the first interposed call: prints, once, what
// fragfree sees under the user's PYTORCH_CUDA_ALLOC_CONF.
void NoteCudaUse();
void NoteEngineUse();

// --- Devices (preload_state.cc) ----------------------------------------------

// The allocator serving `device`, created on first use; nullptr when fragfree
// cannot serve it (reported once), and the caller forwards to the runtime.
DeviceAllocator* Served(int device);
// The served device holding `ptr` as a live allocation (checked first on
// `hint`), or nullptr; *device is set when found.
DeviceAllocator* Owner(const void* ptr, int hint, int* device);
// Visits every device allocator fragfree created (for the exit summary).
template <typename Fn>
void ForEachServed(Fn&& fn);
int MaxServedDevice();  // one past the highest device index served
// When `ptr` lies inside a live fragfree block or an opened IPC block (any
// device fragfree created, through the interposer or the C API): the device
// allocator holding it, the block's start and size (and *device when not
// null). nullptr otherwise. Creates nothing.
DeviceAllocator* BlockRange(uintptr_t ptr, uintptr_t* base, size_t* size,
                            int* device = nullptr);

// --- Streams (preload_streams.cc) --------------------------------------------

// Stream handles as the engine sees them. cudaStreamLegacy (0x1) is normalised
// to 0 for stream-ordered calls; the engine's arena for cudaMalloc blocks uses
// kSyncArenaStream (the legacy stream under another handle) so that memory
// freed in stream order on stream 0 never serves a cudaMalloc at once.
inline constexpr StreamHandle kLegacyStream = 0;
inline constexpr StreamHandle kSyncArenaStream = 0x1;  // cudaStreamLegacy
inline constexpr StreamHandle kPerThreadStream = 0x2;  // cudaStreamPerThread

// The stream as a key: per_thread (a _ptsz call) maps 0 to cudaStreamPerThread;
// cudaStreamLegacy maps to 0.
StreamHandle Normalize(cudaStream_t stream, bool per_thread);
inline bool IsSpecialStream(StreamHandle s) { return s <= kPerThreadStream; }
// The device of `stream` (the current device for the special handles). A real
// stream not known yet is remembered as one that cudaFree waits for. Errors
// are the runtime's.
cudaError_t StreamDevice(StreamHandle stream, int* device);
// The engine is about to allocate on `stream` (after StreamDevice): it will
// keep an arena there, so cudaStreamDestroy retires the stream in the engine
// before destroying it.
void NoteEngineStream(StreamHandle stream);
// The streams a cudaFree on `device` must wait for: the known streams of the
// device that have work in flight (idle and capturing ones are skipped), plus
// both handles of the legacy default stream, whose event completes only after
// all prior work of every blocking stream. Call with ShareStreams() held until
// the events are recorded.
std::vector<StreamHandle> StreamsToFence(int device);
// Held (shared) by cudaFree from choosing its streams until the engine has
// recorded its events; cudaStreamDestroy holds it exclusively, so no stream is
// destroyed while fragfree queries or records on it.
std::shared_lock<std::shared_mutex> ShareStreams();

// --- Memory pools (preload_state.cc) -----------------------------------------

// The device's default pool (cached), or nullptr when the runtime fails.
cudaMemPool_t DefaultPool(int device);
void RememberDefaultPool(int device, cudaMemPool_t pool);
// True (with *device) when `pool` is a device's default pool.
bool IsDefaultPool(cudaMemPool_t pool, int* device);
// False after cudaDeviceSetMemPool made another pool current on `device`:
// cudaMallocAsync then allocates from that pool (forwarded).
bool CurrentPoolIsDefault(int device);
void SetCurrentPoolIsDefault(int device, bool is_default);

// --- Pinned host memory (preload_pinned.cc) ----------------------------------

struct PinnedCounters {
  int64_t allocs = 0;
  int64_t frees = 0;
  int64_t foreign_frees = 0;  // cudaFreeHost of memory not seen allocated
  int64_t bytes_allocated = 0;
  int64_t live_bytes = 0;
  int64_t peak_live_bytes = 0;
};
PinnedCounters GetPinnedCounters();

// --- Runtime queries (preload_queries.cc) ------------------------------------

// The calling thread's current device, as cudaGetDevice answers; kNoRuntime
// without a runtime.
cudaError_t CurrentDevice(int* device);
// True while `stream` is capturing a graph; an error for a bad stream.
// cudaErrorStreamCaptureImplicit (legacy stream while another stream
// captures) counts as capturing.
cudaError_t IsCapturing(StreamHandle stream, bool* capturing);

// --- Errors and capture (preload_state.cc) -----------------------------------

// Reports a fragfree error (handler or stderr) and maps it: out of memory →
// cudaErrorMemoryAllocation, bad pointer or argument → cudaErrorInvalidValue.
cudaError_t ToCuda(const absl::Status& status);

// Puts the calling thread in relaxed stream-capture mode for a scope, so that
// the preload layer's own runtime calls (stream queries and synchronizes) are
// legal while another thread captures a graph in global mode (as PyTorch does
// around cudaMalloc). Engine calls arm allocator/phys/capture_relax.h's
// RelaxCaptureScope instead, which switches only if the engine calls the
// driver.
class RelaxedCapture {
 public:
  RelaxedCapture();
  ~RelaxedCapture();
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool swapped_ = false;
};

// --- Fork (preload_state.cc, preload_pinned.cc) ------------------------------

void LockStateForFork();
void UnlockStateAfterFork();
// In the child after fork(): the locks LockStateForFork took, made anew.
void ResetStateLocksInForkChild();
void LockPinnedForFork();
void UnlockPinnedAfterFork();

// --- Implementation of the template above ------------------------------------

DeviceAllocator* ExistingServed(int device);
template <typename Fn>
void ForEachServed(Fn&& fn) {
  const int n = MaxServedDevice();
  for (int i = 0; i < n; ++i) {
    if (DeviceAllocator* d = ExistingServed(i)) fn(i, *d);
  }
}

}  // namespace fragfree::preload

#endif  // FRAGFREE_SHIM_PRELOAD_H_
