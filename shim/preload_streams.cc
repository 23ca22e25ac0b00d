// The LD_PRELOAD interposer's knowledge of streams (see preload.h) and the
// interposed stream calls that maintain it: cudaStreamCreate,
// cudaStreamCreateWithFlags, cudaStreamCreateWithPriority, cudaStreamDestroy.
//
// The registry remembers, per real stream: its device; whether cudaFree must
// wait for it (non-blocking streams created through the runtime, and streams
// passed to fragfree's allocation calls; blocking streams are covered by the
// legacy default stream); and whether the engine allocated on it.
// cudaStreamDestroy of a stream the registry knows first makes sure nothing
// will use the handle once it is gone: the engine retires it (waits for the
// work issued on it, stops recording fences there, and releases its arenas
// once they are empty), and a stream cudaFree waits for is waited for now if
// busy (cudaFree will not know it any more); then the stream is forgotten and
// destroyed for real.
//
// Thread-safety: the registry is guarded by a std::mutex, with a per-thread
// one-entry cache (the last stream's device) validated by a generation counter
// that every removal bumps. A std::shared_mutex keeps streams alive while
// cudaFree uses them (shared) against cudaStreamDestroy (exclusive). The fork
// handlers hold both across fork(). Lock order: in_use, then mu.
#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <vector>

#include "allocator/base/metadata_containers.h"
#include "shim/preload.h"
#include "shim/preload_real.h"

#define FF_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace fragfree::preload {
namespace {

struct StreamInfo {
  int device = -1;
  bool fence = false;   // cudaFree waits for it
  bool engine = false;  // the engine allocated on it: retired when destroyed
};

struct StreamRegistry {
  std::shared_mutex in_use;  // see ShareStreams()
  std::mutex mu;
  MetadataFlatHashMap<StreamHandle, StreamInfo> streams;  // guarded by mu
  std::atomic<uint64_t> generation{1};
};
StreamRegistry& Registry() {
  static StreamRegistry* const registry = MetadataNew<StreamRegistry>();
  return *registry;
}

struct StreamCache {
  StreamHandle stream = 0;
  int device = -1;
  uint64_t generation = 0;
  bool engine = false;
};
thread_local StreamCache stream_cache;

// The device of a stream the registry does not know (runtime errors as is).
cudaError_t QueryDevice(StreamHandle stream, int* device) {
  if (auto get = Real().cudaStreamGetDevice.get()) {
    return get(reinterpret_cast<cudaStream_t>(stream), device);
  }
  return CurrentDevice(device);
}

void RegisterCreated(StreamHandle stream, unsigned int flags) {
  int device = -1;
  // A new stream's device resolves unless the runtime is broken; then the
  // stream is simply not remembered.
  if (QueryDevice(stream, &device) != cudaSuccess) return;
  StreamInfo info;
  info.device = device;
  info.fence = (flags & cudaStreamNonBlocking) != 0;
  StreamRegistry& reg = Registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.streams[stream] = info;
}

// What the registry knows of `stream`; false when it is not known.
bool Lookup(StreamHandle stream, StreamInfo* info) {
  StreamRegistry& reg = Registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.streams.find(stream);
  if (it == reg.streams.end()) return false;
  *info = it->second;
  return true;
}

void Forget(StreamHandle stream) {
  StreamRegistry& reg = Registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.streams.erase(stream);
  reg.generation.fetch_add(1, std::memory_order_acq_rel);
}

// cudaStreamDestroy of a known stream, before the real destroy (under the
// exclusive stream-use lock): nothing may use the handle afterwards. The
// engine retires a stream it allocated on: it waits for the work issued on it
// (so memory freed on it is reusable by other streams, and its arenas can be
// released) and never touches the handle again. cudaFree waits for a busy
// stream only while the registry knows it, so a stream it waits for is
// waited for now if busy: work issued on it before a later cudaFree still
// completes before that memory is reused. An error keeps the stream alive
// (and known): the caller returns it without destroying.
cudaError_t RetireBeforeDestroy(StreamHandle stream, const StreamInfo& info) {
  if (info.engine) {
    if (DeviceAllocator* d = ExistingServed(info.device)) {
      RelaxedCapture relaxed;
      absl::Status st = d->RetireStream(stream);
      // A capturing stream: the engine cannot wait for it (nor may the
      // program destroy it during the capture).
      if (absl::IsFailedPrecondition(st)) {
        return cudaErrorStreamCaptureUnsupported;
      }
      if (!st.ok()) return ToCuda(st);
    }
  }
  if (info.fence) {
    auto query = Real().cudaStreamQuery.get();
    auto sync = Real().cudaStreamSynchronize.get();
    auto cuda = reinterpret_cast<cudaStream_t>(stream);
    // An error (a handle already destroyed elsewhere) is the runtime's to
    // report: the real destroy answers it.
    if (query != nullptr && sync != nullptr &&
        query(cuda) == cudaErrorNotReady) {
      sync(cuda);
    }
  }
  return cudaSuccess;
}

// The creation calls: forwarded; a new stream is registered.
template <typename Create>
cudaError_t CreateStream(cudaStream_t* out, unsigned int flags,
                         Create&& create) {
  if (!Active() || out == nullptr) return create();
  NoteCudaUse();
  cudaError_t err = create();
  if (err == cudaSuccess) {
    RegisterCreated(Normalize(*out, /*per_thread=*/false), flags);
  }
  return err;
}

std::vector<StreamHandle> FenceCandidates(int device) {
  StreamRegistry& reg = Registry();
  std::vector<StreamHandle> out;
  std::lock_guard<std::mutex> lock(reg.mu);
  for (const auto& [stream, info] : reg.streams) {
    if (info.device == device && info.fence) out.push_back(stream);
  }
  return out;
}

}  // namespace

StreamHandle Normalize(cudaStream_t stream, bool per_thread) {
  StreamHandle s = reinterpret_cast<StreamHandle>(stream);
  if (s == 0 && per_thread) return kPerThreadStream;
  if (s == reinterpret_cast<StreamHandle>(cudaStreamLegacy)) {
    return kLegacyStream;
  }
  return s;
}

cudaError_t StreamDevice(StreamHandle stream, int* device) {
  if (IsSpecialStream(stream)) return CurrentDevice(device);
  StreamRegistry& reg = Registry();
  const uint64_t generation = reg.generation.load(std::memory_order_acquire);
  if (stream_cache.generation == generation && stream_cache.stream == stream) {
    *device = stream_cache.device;
    return cudaSuccess;
  }
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.streams.find(stream);
    if (it != reg.streams.end()) {
      *device = it->second.device;
      stream_cache = {stream, *device, generation, it->second.engine};
      return cudaSuccess;
    }
  }
  cudaError_t err = QueryDevice(stream, device);
  if (err != cudaSuccess) return err;
  bool engine = false;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    StreamInfo& info = reg.streams[stream];
    if (info.device < 0) {  // new: seen in an allocation call
      info.device = *device;
      info.fence = true;
    }
    engine = info.engine;
  }
  stream_cache = {stream, *device, generation, engine};
  return cudaSuccess;
}

void NoteEngineStream(StreamHandle stream) {
  if (IsSpecialStream(stream)) return;
  StreamRegistry& reg = Registry();
  const uint64_t generation = reg.generation.load(std::memory_order_acquire);
  if (stream_cache.generation == generation && stream_cache.stream == stream &&
      stream_cache.engine) {
    return;
  }
  std::lock_guard<std::mutex> lock(reg.mu);
  auto it = reg.streams.find(stream);
  if (it == reg.streams.end()) return;  // StreamDevice registers it first
  it->second.engine = true;
  stream_cache = {stream, it->second.device, generation, true};
}

std::vector<StreamHandle> StreamsToFence(int device) {
  std::vector<StreamHandle> out;
  auto query = Real().cudaStreamQuery.get();
  for (StreamHandle s : FenceCandidates(device)) {
    bool capturing = false;
    // A capturing stream runs nothing yet (the engine skips it too), and
    // querying it would invalidate the capture.
    if (IsCapturing(s, &capturing) != cudaSuccess || capturing) continue;
    if (query != nullptr &&
        query(reinterpret_cast<cudaStream_t>(s)) == cudaSuccess) {
      continue;  // idle: everything issued on it so far has completed
    }
    out.push_back(s);
  }
  out.push_back(kLegacyStream);
  out.push_back(kSyncArenaStream);
  return out;
}

std::shared_lock<std::shared_mutex> ShareStreams() {
  return std::shared_lock<std::shared_mutex>(Registry().in_use);
}

void LockStateForFork() {
  Registry().in_use.lock();
  Registry().mu.lock();
}

void UnlockStateAfterFork() {
  Registry().mu.unlock();
  Registry().in_use.unlock();
}

void ResetStateLocksInForkChild() {
  // The child's only thread has a new kernel thread id, and glibc's rwlock
  // takes a write unlock from a thread other than the writer for a read
  // unlock: unlocking here would corrupt `in_use` and hang the next fork (a
  // shell script that runs a program that forks). The child is single-threaded
  // and nothing else holds the locks: make them anew, unlocked.
  StreamRegistry& reg = Registry();
  new (&reg.in_use) std::shared_mutex();
  new (&reg.mu) std::mutex();
}

}  // namespace fragfree::preload

using fragfree::StreamHandle;
using namespace fragfree::preload;  // NOLINT(build/namespaces): the C ABI edge

FF_INTERPOSE cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  return CreateStream(pStream, cudaStreamDefault, [&] {
    auto real = Real().cudaStreamCreate.get();
    return real != nullptr ? real(pStream) : kNoRuntime;
  });
}

FF_INTERPOSE cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream,
                                                   unsigned int flags) {
  return CreateStream(pStream, flags, [&] {
    auto real = Real().cudaStreamCreateWithFlags.get();
    return real != nullptr ? real(pStream, flags) : kNoRuntime;
  });
}

FF_INTERPOSE cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream,
                                                      unsigned int flags,
                                                      int priority) {
  return CreateStream(pStream, flags, [&] {
    auto real = Real().cudaStreamCreateWithPriority.get();
    return real != nullptr ? real(pStream, flags, priority) : kNoRuntime;
  });
}

FF_INTERPOSE cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto real = Real().cudaStreamDestroy.get();
  if (real == nullptr) return kNoRuntime;
  const StreamHandle s = Normalize(stream, /*per_thread=*/false);
  if (!Active() || IsSpecialStream(s)) return real(stream);
  // No cudaFree may query or record on the stream while it goes away.
  std::unique_lock<std::shared_mutex> no_users(Registry().in_use);
  StreamInfo info;
  if (Lookup(s, &info)) {
    if (cudaError_t err = RetireBeforeDestroy(s, info); err != cudaSuccess) {
      return err;
    }
    Forget(s);
  }
  return real(stream);
}
