// Implementation of fragfree_policy.h.
// Thread-safety: see fragfree_policy.h.
#include "bench/replay/fragfree_policy.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <ostream>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "allocator/obs/snapshot.h"
#include "allocator/phys/forwarding_backend.h"
#include "allocator/phys/simulated_backend.h"
#include "bench/replay/lagging_event_source.h"

namespace fragfree::replay {

// A SimulatedBackend that keeps running totals the replay reads after every
// event: mapped bytes (reserved) and created handles (physical).
class CountingBackend final : public ForwardingBackend {
 public:
  CountingBackend(size_t capacity, size_t granularity)
      : ForwardingBackend(
            std::make_unique<SimulatedBackend>(capacity, granularity)) {}

  absl::StatusOr<PhysHandle> Create(size_t size) override {
    absl::StatusOr<PhysHandle> h = ForwardingBackend::Create(size);
    if (h.ok()) peak_physical_ = std::max(peak_physical_, physical());
    return h;
  }
  // A page mapped at a second address while its old one waits for a fence
  // (Note [Moving a page without waiting]) is counted once: reserved memory
  // is the physical memory mapped. The engine maps one page per call (a
  // page of its base size or of large_page_mb's).
  absl::Status Map(uintptr_t va, size_t size, PhysHandle handle) override {
    absl::Status s = ForwardingBackend::Map(va, size, handle);
    if (s.ok()) {
      if (handle_mappings_[handle.value]++ == 0) mapped_ += size;
      handle_at_[va] = {handle.value, size};
      peak_mapped_ = std::max(peak_mapped_, mapped_);
      ++map_calls_;
    }
    return s;
  }
  absl::Status Unmap(uintptr_t va, size_t size) override {
    absl::Status s = ForwardingBackend::Unmap(va, size);
    if (s.ok()) {
      for (uintptr_t at = va; at < va + size;) {
        auto it = handle_at_.find(at);
        if (it == handle_at_.end()) {
          at += Granularity();
          continue;
        }
        const auto [handle, bytes] = it->second;
        if (--handle_mappings_[handle] == 0) {
          handle_mappings_.erase(handle);
          mapped_ -= bytes;
        }
        handle_at_.erase(it);
        at += bytes;
      }
      ++unmap_calls_;
    }
    return s;
  }

  uint64_t mapped() const { return mapped_; }
  uint64_t peak_mapped() const { return peak_mapped_; }
  // Bytes of handles created and not released (mapped or idle).
  uint64_t physical() const {
    const DeviceMemoryInfo info = inner().MemoryInfo();
    return info.total_bytes - info.free_bytes;
  }
  uint64_t peak_physical() const { return peak_physical_; }
  uint64_t map_calls() const { return map_calls_; }
  uint64_t unmap_calls() const { return unmap_calls_; }

 private:
  absl::flat_hash_map<uint64_t, int> handle_mappings_;  // handle -> mappings
  // Page VA -> its handle and the bytes mapped there.
  absl::flat_hash_map<uintptr_t, std::pair<uint64_t, size_t>> handle_at_;
  uint64_t mapped_ = 0;
  uint64_t peak_mapped_ = 0;
  uint64_t peak_physical_ = 0;
  uint64_t map_calls_ = 0;
  uint64_t unmap_calls_ = 0;
};

absl::StatusOr<std::unique_ptr<FragfreePolicy>> FragfreePolicy::Create(
    const PolicyConfig& config, size_t trace_entries, uint64_t event_lag) {
  const uint64_t capacity = config.capacity_bytes / kPageBytes * kPageBytes;
  if (capacity == 0) {
    return absl::InvalidArgumentError(absl::StrCat("fragfree policy: capacity ",
                                                   config.capacity_bytes,
                                                   " is below one page"));
  }
  // Engine settings come from FRAGFREE_CONF, as in a real run; the backend and
  // its capacity are the replay's. The move time budget is off unless
  // FRAGFREE_CONF sets it: the replay's driver calls cost next to nothing and
  // its clock runs as fast as the machine replays, so the budget would measure
  // the replaying machine, not the trace (Note [Move time budget]).
  const char* conf = getenv("FRAGFREE_CONF");
  absl::StatusOr<Options> parsed =
      Options::Parse(absl::StrCat("move_time_budget:1,", conf ? conf : ""));
  if (!parsed.ok()) return parsed.status();
  Options options = *parsed;
  options.backend = "simulated";
  options.trace_entries = trace_entries;
  options.host_capacity_bytes = capacity;
  options.host_granularity_bytes = kPageBytes;
  auto backend = std::make_unique<CountingBackend>(capacity, kPageBytes);
  CountingBackend* counting = backend.get();
  auto clock = std::make_unique<uint64_t>(0);
  auto events = std::make_unique<LaggingEventSource>(event_lag, clock.get());
  const LaggingEventSource* lagging = events.get();
  absl::StatusOr<std::unique_ptr<DeviceAllocator>> engine =
      DeviceAllocator::Create(/*device=*/0, options, std::move(backend),
                              std::move(events));
  if (!engine.ok()) return engine.status();
  return std::unique_ptr<FragfreePolicy>(new FragfreePolicy(
      std::move(*engine), counting, std::move(clock), lagging));
}

FragfreePolicy::FragfreePolicy(std::unique_ptr<DeviceAllocator> engine,
                               CountingBackend* backend,
                               std::unique_ptr<uint64_t> clock,
                               const LaggingEventSource* events)
    : engine_(std::move(engine)),
      backend_(backend),
      clock_(std::move(clock)),
      events_(events) {}

FragfreePolicy::~FragfreePolicy() = default;

bool FragfreePolicy::WriteSnapshotPickle(std::ostream& out) const {
  return WriteSnapshot(SnapshotFormat::kPickle, 0, engine_->Arenas(),
                       engine_->Trace(), [&out](std::string_view s) {
                         return bool(out.write(s.data(), s.size()));
                       });
}

void FragfreePolicy::NoteError(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

bool FragfreePolicy::Alloc(uint64_t id, uint64_t size, uint64_t stream) {
  ++*clock_;
  // The engine answers nullptr for size 0; a replay still needs a distinct
  // live allocation, so ask for the smallest block instead.
  absl::StatusOr<void*> ptr =
      engine_->Malloc(std::max<uint64_t>(size, 1), stream);
  if (!ptr.ok()) {
    if (!absl::IsResourceExhausted(ptr.status())) NoteError(ptr.status());
    ++ooms_;
    return false;
  }
  if (id >= by_id_.size()) {
    by_id_.resize(std::max<size_t>(id + 1, by_id_.size() * 2), nullptr);
  }
  by_id_[id] = *ptr;
  return true;
}

void FragfreePolicy::Free(uint64_t id) {
  ++*clock_;
  absl::Status s = engine_->Free(by_id_[id]);
  by_id_[id] = nullptr;
  if (!s.ok()) NoteError(s);
}

uint64_t FragfreePolicy::reserved_bytes() const { return backend_->mapped(); }

PolicyFigures FragfreePolicy::figures() const {
  const DeviceStats stats = engine_->GetStats();
  PolicyFigures f;
  f.allocated_bytes =
      static_cast<uint64_t>(stats.allocated_bytes.pool[kPoolAll].current);
  f.peak_allocated_bytes =
      static_cast<uint64_t>(stats.allocated_bytes.pool[kPoolAll].peak);
  f.reserved_bytes = backend_->mapped();
  f.peak_reserved_bytes = backend_->peak_mapped();
  f.maps = static_cast<uint64_t>(stats.pages_mapped);
  f.unmaps = static_cast<uint64_t>(stats.pages_unmapped);
  f.remaps = static_cast<uint64_t>(stats.pages_remapped);
  f.alloc_retries = static_cast<uint64_t>(stats.num_alloc_retries);
  f.ooms = ooms_;
  f.extra = {
      {"peak_physical_bytes", backend_->peak_physical()},
      {"handles_created", static_cast<uint64_t>(stats.handles_created)},
      {"sync_all_streams", static_cast<uint64_t>(stats.num_sync_all_streams)},
      {"arenas", static_cast<uint64_t>(stats.num_arenas)},
      {"event_waits", events_->waits()},
  };
  return f;
}

void FragfreePolicy::EmptyCache() {
  if (absl::Status s = engine_->EmptyCache(); !s.ok()) NoteError(s);
}

absl::Status FragfreePolicy::CheckInvariants() const {
  if (!status_.ok()) return status_;
  if (absl::Status s = engine_->CheckInvariants(); !s.ok()) return s;
  const DeviceStats stats = engine_->GetStats();
  if (static_cast<uint64_t>(stats.mapped_bytes.current) != backend_->mapped()) {
    return absl::InternalError(
        absl::StrCat("engine says ", stats.mapped_bytes.current,
                     " bytes mapped, backend ", backend_->mapped()));
  }
  if (backend_->mapped() > backend_->physical()) {
    return absl::InternalError("more bytes mapped than handles created");
  }
  return absl::OkStatus();
}

}  // namespace fragfree::replay
