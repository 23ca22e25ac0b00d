// TimedBackend: a decorator that counts the calls that change the device's
// memory (Create, Release, Map, Unmap, SetAccess) and the CPU time spent in
// them, for the allocator's stats (docs/stats.md, "Where the time goes"). The
// DeviceAllocator wraps whatever backend it is given in one. Thread-safety: as
// every backend (backend.h): calls are serialised by the owner's lock, which
// also guards reading calls().
#ifndef FRAGFREE_ALLOCATOR_PHYS_TIMED_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_TIMED_BACKEND_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "allocator/base/call_clock.h"
#include "allocator/phys/forwarding_backend.h"

namespace fragfree {

// Per kind of call: how many, and their CallTicks summed.
struct BackendCallCounts {
  enum Kind { kCreate, kRelease, kMap, kUnmap, kSetAccess, kKinds };
  uint64_t calls[kKinds] = {};
  uint64_t ticks[kKinds] = {};

  // Writes the counts and times (ns) into the stats fields of the same names
  // (FF_TIMING_FIELDS, allocator/obs/stat_fields.h). A template, so that this
  // layer needs not know DeviceStats.
  template <typename Stats>
  void CopyTo(Stats* s) const {
    s->create_calls = int64_t(calls[kCreate]);
    s->create_ns = CallTicksToNs(ticks[kCreate]);
    s->release_calls = int64_t(calls[kRelease]);
    s->release_ns = CallTicksToNs(ticks[kRelease]);
    s->map_calls = int64_t(calls[kMap]);
    s->map_ns = CallTicksToNs(ticks[kMap]);
    s->unmap_calls = int64_t(calls[kUnmap]);
    s->unmap_ns = CallTicksToNs(ticks[kUnmap]);
    s->set_access_calls = int64_t(calls[kSetAccess]);
    s->set_access_ns = CallTicksToNs(ticks[kSetAccess]);
  }
};

class TimedBackend : public ForwardingBackend {
 public:
  explicit TimedBackend(std::unique_ptr<PhysicalBackend> inner)
      : ForwardingBackend(std::move(inner)) {}

  const BackendCallCounts& calls() const { return counts_; }

  absl::StatusOr<PhysHandle> Create(size_t size) override {
    Timer t(this, BackendCallCounts::kCreate);
    return inner().Create(size);
  }
  absl::Status Release(PhysHandle handle) override {
    Timer t(this, BackendCallCounts::kRelease);
    return inner().Release(handle);
  }
  absl::Status Map(uintptr_t va, size_t size, PhysHandle handle) override {
    Timer t(this, BackendCallCounts::kMap);
    return inner().Map(va, size, handle);
  }
  absl::Status Unmap(uintptr_t va, size_t size) override {
    Timer t(this, BackendCallCounts::kUnmap);
    return inner().Unmap(va, size);
  }
  absl::Status SetAccess(uintptr_t va, size_t size) override {
    Timer t(this, BackendCallCounts::kSetAccess);
    return inner().SetAccess(va, size);
  }

 private:
  class Timer : public ScopedCallTimer {
   public:
    Timer(TimedBackend* b, BackendCallCounts::Kind kind)
        : ScopedCallTimer(&b->counts_.ticks[kind]) {
      ++b->counts_.calls[kind];
    }
  };
  BackendCallCounts counts_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_TIMED_BACKEND_H_
