// The ff_host_* C API (fragfree.h, "Pinned host memory") and the preload
// hooks: the process-wide PinnedHostAllocator, made on first use from the
// Runtime's options (backend) and FRAGFREE_HOST_CONF (tuning).
// Thread-safety: every function is thread-safe; creation is serialised by a
// mutex, then the allocator is read through an atomic pointer.
#include "shim/host_api.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "allocator/base/json.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/mutex.h"
#include "allocator/phys/backend_registry.h"
#include "allocator/stream/host_event_source.h"
#include "fragfree/fragfree.h"
#include "shim/runtime.h"
#ifdef FRAGFREE_WITH_CUDA
#include "allocator/host/cuda_host.h"
#endif

namespace fragfree {
namespace {

std::atomic<PinnedHostAllocator*> host_allocator{nullptr};
std::atomic<bool> host_is_cuda{false};
HostConf host_conf;  // written once, before host_allocator is published

Mutex& CreationMutex() {
  static Mutex* const mu = MetadataNew<Mutex>();
  return *mu;
}

absl::StatusOr<PinnedHostAllocator*> Make() {
  // DeviceCount loads FRAGFREE_CONF (reporting a bad key) and, on the cuda
  // backend, the driver, which pinning needs anyway.
  Runtime& rt = Runtime::Get();
  if (absl::StatusOr<int> n = rt.DeviceCount(); !n.ok()) return n.status();
  const Options options = rt.options();
  const char* text = std::getenv("FRAGFREE_HOST_CONF");
  absl::StatusOr<HostConf> conf = HostConf::Parse(text != nullptr ? text : "");
  if (!conf.ok()) return conf.status();
  std::unique_ptr<PinningBackend> backend;
  std::unique_ptr<EventSource> events;
  if (!FindBackend(options.backend)->emulated) {
#ifdef FRAGFREE_WITH_CUDA
    auto b = CudaPinningBackend::Create(
        conf->register_pages ? CudaPinningBackend::Mode::kRegister
                             : CudaPinningBackend::Mode::kHostAlloc);
    if (!b.ok()) return b.status();
    auto e = CudaStreamEvents::Create();
    if (!e.ok()) return e.status();
    backend = std::move(*b);
    events = std::move(*e);
#else
    return NoCudaBuildError("emulated pinned memory");
#endif
  } else {
    backend = std::make_unique<EmulatedPinningBackend>(conf->emulation);
    events = std::make_unique<HostEventSource>();
  }
  host_conf = *conf;
  host_is_cuda.store(backend->is_cuda());
  return new PinnedHostAllocator(std::move(backend), std::move(events),
                                 conf->pinned);
}

std::string ToJson(const PinnedStats& s, const PinnedHostAllocator* a) {
  MetadataArenaInfo meta = MetadataArena::Info();
  return absl::StrFormat(
      "{\"pinned_bytes\": %d, \"peak_pinned_bytes\": %d, \"live_bytes\": %d, "
      "\"peak_live_bytes\": %d, \"requested_bytes\": %d, \"pending_bytes\": "
      "%d, \"chunks\": %d, \"pin_calls\": %d, \"unpin_calls\": %d, "
      "\"pin_failures\": %d, \"allocs\": %d, \"frees\": %d, "
      "\"allocs_without_pin\": %d, \"events_recorded\": %d, "
      "\"event_errors\": %d, \"chunk_bytes\": %d, \"release_after_ms\": %d, "
      "\"backend\": %s, \"metadata\": %s, \"metadata_bytes\": %d, "
      "\"metadata_why_not_jemalloc\": %s}",
      s.pinned_bytes, s.peak_pinned_bytes, s.live_bytes, s.peak_live_bytes,
      s.requested_bytes, s.pending_bytes, s.chunks, s.pin_calls, s.unpin_calls,
      s.pin_failures, s.allocs, s.frees, s.allocs_without_pin,
      s.events_recorded, s.event_errors,
      a != nullptr ? a->options().chunk_bytes : 0,
      a != nullptr ? a->options().release_after_ms : 0,
      JsonQuote(a != nullptr ? a->backend().name() : "none (not used yet)"),
      JsonQuote(meta.backend), meta.live_bytes, JsonQuote(meta.why_not));
}

}  // namespace

absl::StatusOr<PinnedHostAllocator*> HostAllocator() {
  if (PinnedHostAllocator* a = host_allocator.load(std::memory_order_acquire)) {
    return a;
  }
  MutexLock lock(&CreationMutex());
  if (PinnedHostAllocator* a = host_allocator.load(std::memory_order_acquire)) {
    return a;
  }
  absl::StatusOr<PinnedHostAllocator*> made = Make();
  if (made.ok()) host_allocator.store(*made, std::memory_order_release);
  return made;
}

PinnedHostAllocator* ExistingHostAllocator() {
  return host_allocator.load(std::memory_order_acquire);
}

std::vector<HostSegmentView> HostSegments() {
  PinnedHostAllocator* a = ExistingHostAllocator();
  return a != nullptr ? a->Segments() : std::vector<HostSegmentView>();
}

HostConf HostAllocatorConf() {
  if (ExistingHostAllocator() != nullptr) return host_conf;
  const char* text = std::getenv("FRAGFREE_HOST_CONF");
  absl::StatusOr<HostConf> conf = HostConf::Parse(text != nullptr ? text : "");
  return conf.ok() ? *conf : HostConf();
}

bool ServePinnedHostAlloc(void** ptr, size_t size, unsigned int flags,
                          int* cuda_error) {
  constexpr unsigned int kWriteCombined = 0x04;  // cudaHostAllocWriteCombined
  if (ptr == nullptr || size == 0 || (flags & kWriteCombined) != 0) {
    return false;
  }
  // serve_preload:False forwards without ever making the pool.
  static const bool serve = HostAllocatorConf().serve_preload;
  static std::atomic<bool> unavailable{false};  // reported once, then forward
  if (!serve || unavailable.load(std::memory_order_relaxed)) return false;
  absl::StatusOr<PinnedHostAllocator*> a = HostAllocator();
  if (!a.ok()) {
    if (!unavailable.exchange(true)) {
      Runtime::Get().Report(absl::Status(
          a.status().code(),
          absl::StrFormat("pinned pool unavailable, cudaHostAlloc is "
                          "forwarded to the CUDA runtime: %s",
                          a.status().message())));
    }
    return false;
  }
  absl::StatusOr<void*> p = (*a)->Allocate(size);
  if (!p.ok()) {
    Runtime::Get().Report(p.status());
    *cuda_error = absl::IsResourceExhausted(p.status()) ? 2 : 1;
    return true;
  }
  *ptr = *p;
  *cuda_error = 0;
  return true;
}

bool ServePinnedHostFree(void* ptr, int* cuda_error) {
  PinnedHostAllocator* a = ExistingHostAllocator();
  if (a == nullptr || ptr == nullptr || !a->Owns(ptr)) return false;
  absl::Status s = a->RecordStream(ptr, /*legacy default stream=*/0);
  if (s.ok()) s = a->Free(ptr);
  *cuda_error = s.ok() ? 0 : 1;
  if (!s.ok()) Runtime::Get().Report(s);
  return true;
}

}  // namespace fragfree

using fragfree::PinnedHostAllocator;
using fragfree::Runtime;

extern "C" {

void* ff_host_malloc(size_t size) {
  if (size == 0) return nullptr;
  absl::StatusOr<PinnedHostAllocator*> a = fragfree::HostAllocator();
  if (!a.ok()) {
    Runtime::Get().Report(a.status());
    return nullptr;
  }
  absl::StatusOr<void*> p = (*a)->Allocate(size);
  if (!p.ok()) {
    Runtime::Get().Report(p.status());
    return nullptr;
  }
  return *p;
}

ff_status_t ff_host_free(void* ptr) {
  if (ptr == nullptr) return FF_OK;
  PinnedHostAllocator* a = fragfree::ExistingHostAllocator();
  if (a == nullptr) {
    return Runtime::Get().Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_host_free: %p is not a fragfree pinned allocation (none has been "
        "made)",
        ptr)));
  }
  return Runtime::Get().Report(a->Free(ptr));
}

ff_status_t ff_host_record_stream(void* ptr, ff_stream_t stream) {
  PinnedHostAllocator* a = fragfree::ExistingHostAllocator();
  if (a == nullptr || ptr == nullptr) {
    return Runtime::Get().Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_host_record_stream: %p is not a fragfree pinned allocation", ptr)));
  }
  return Runtime::Get().Report(
      a->RecordStream(ptr, reinterpret_cast<fragfree::StreamHandle>(stream)));
}

ff_status_t ff_host_empty_cache(void) {
  PinnedHostAllocator* a = fragfree::ExistingHostAllocator();
  if (a == nullptr) return FF_OK;
  return Runtime::Get().Report(a->EmptyCache());
}

ff_status_t ff_host_stats(ff_host_stats_t* out) {
  if (out == nullptr || out->size < sizeof(ff_host_stats_t)) {
    return Runtime::Get().Report(absl::InvalidArgumentError(
        "ff_host_stats: out is NULL or out->size < sizeof(ff_host_stats_t)"));
  }
  PinnedHostAllocator* a = fragfree::ExistingHostAllocator();
  const fragfree::PinnedStats s =
      a != nullptr ? a->stats() : fragfree::PinnedStats();
  const fragfree::MetadataArenaInfo meta = fragfree::MetadataArena::Info();
  const uint32_t size = out->size;
  memset(out, 0, sizeof(ff_host_stats_t));
  out->size = size;
  out->version = FF_HOST_STATS_VERSION;
  out->pinned_bytes = s.pinned_bytes;
  out->peak_pinned_bytes = s.peak_pinned_bytes;
  out->live_bytes = s.live_bytes;
  out->peak_live_bytes = s.peak_live_bytes;
  out->requested_bytes = s.requested_bytes;
  out->pending_bytes = s.pending_bytes;
  out->chunks = s.chunks;
  out->pin_calls = s.pin_calls;
  out->unpin_calls = s.unpin_calls;
  out->pin_failures = s.pin_failures;
  out->allocs = s.allocs;
  out->frees = s.frees;
  out->allocs_without_pin = s.allocs_without_pin;
  out->events_recorded = s.events_recorded;
  out->metadata_bytes = meta.live_bytes;
  out->metadata_on_jemalloc = meta.jemalloc ? 1 : 0;
  out->cuda = a != nullptr && fragfree::host_is_cuda.load() ? 1 : 0;
  return FF_OK;
}

size_t ff_host_stats_json(char* buf, size_t len) {
  PinnedHostAllocator* a = fragfree::ExistingHostAllocator();
  std::string json =
      fragfree::ToJson(a != nullptr ? a->stats() : fragfree::PinnedStats(), a);
  if (buf != nullptr && len > 0) {
    size_t n = std::min(len - 1, json.size());
    memcpy(buf, json.data(), n);
    buf[n] = '\0';
  }
  return json.size();
}

size_t ff_host_allocation_size(const void* ptr) {
  PinnedHostAllocator* a = fragfree::ExistingHostAllocator();
  return a != nullptr && ptr != nullptr ? a->AllocationSize(ptr) : 0;
}

}  // extern "C"
