// TraceRing: a bounded ring of allocator events (alloc, free_requested,
// free_completed, segment_map, segment_unmap, oom), in the vocabulary of
// PyTorch's memory snapshots so they can become `device_traces`. Off by
// default, and then a single predictable branch per call; when on, a record is
// a read of the CPU's cycle counter and four stores into a 32-byte entry (two
// per cache line). The counter becomes Unix-epoch microseconds only when the
// ring is copied out (TraceLog), by interpolating between readings of both
// clocks taken at Resize and at each copy, which are kept: an event gets the
// same time in every copy. The ring grows as events arrive, up to its
// capacity (PyTorch's default "keep everything" asks for sys.maxsize
// entries), and from then on the oldest entries are overwritten (and counted
// as dropped). A caller's context (obs/trace_context.h) goes into a side
// array made on first use. The ring is on the metadata arena; Copy() returns
// a copy on the caller's heap. Thread-safety: TraceRing is guarded by the
// owning DeviceAllocator's lock; TraceLog is a value type.
#ifndef FRAGFREE_ALLOCATOR_OBS_TRACE_H_
#define FRAGFREE_ALLOCATOR_OBS_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/base/call_clock.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/stream_handle.h"
#include "allocator/obs/trace_context.h"

namespace fragfree {

enum class TraceAction : uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentMap,
  kSegmentUnmap,
  kOom,
};
const char* TraceActionName(TraceAction action);

// The trace clock, in ticks that increase at a constant rate: with `tsc` the
// x86-64 TSC (TraceTscUsable), else CLOCK_MONOTONIC nanoseconds; elsewhere
// CallTicks (base/call_clock.h: the AArch64 virtual counter, or nanoseconds).
inline uint64_t TraceTicks(bool tsc) {
#if defined(__x86_64__)
  if (__builtin_expect(tsc, 1)) return CallTicks();
  return CallTicksSlow();
#else
  (void)tsc;
  return CallTicks();
#endif
}
// Whether the TSC runs at a constant rate, in step on every core: the CPU says
// it is invariant, or the kernel keeps time with it. Decided once.
bool TraceTscUsable();

// The trace clock and the Unix time (ns) read together.
struct TraceClockReading {
  uint64_t ticks = 0;
  int64_t unix_ns = 0;
  static TraceClockReading Now(bool tsc);
};

// One event as stored: 32 bytes.
struct TraceEntry {
  uint64_t stamp;  // TraceTicks() with its low 8 bits replaced by the action
  uintptr_t addr;  // for kOom: free device bytes, as PyTorch does
  uint64_t size;
  StreamHandle stream;

  TraceAction action() const { return TraceAction(stamp & 0xff); }
  uint64_t ticks() const { return stamp & ~uint64_t{0xff}; }
  static uint64_t Stamp(uint64_t ticks, TraceAction action) {
    return (ticks & ~uint64_t{0xff}) | uint64_t(action);
  }
};
static_assert(sizeof(TraceEntry) == 32);

// One event as snapshots give it.
struct TraceEvent {
  TraceAction action;
  uintptr_t addr;
  uint64_t size;
  StreamHandle stream;
  int64_t time_us;   // microseconds since the Unix epoch
  uint32_t context;  // the caller's tag (ff_set_trace_context), 0 = none
};

// The ring's events copied out, oldest first, with the clock readings that
// bracket them: from the last one taken before the oldest event to the one
// taken at the copy, in order.
struct TraceLog {
  std::vector<TraceEntry> entries;
  std::vector<uint32_t> contexts;  // parallel to entries; empty: all 0
  std::vector<TraceClockReading> readings;

  size_t size() const { return entries.size(); }
  bool empty() const { return entries.empty(); }
  // Calls f(const TraceEvent&) for each event, oldest first. Times are
  // interpolated between the two readings around the event (or the last two),
  // and never decrease.
  template <class F>
  void ForEach(F f) const;
};

class TraceRing {
 public:
  // capacity 0: off. Clears the ring and reads the clock.
  void Resize(size_t capacity);
  bool enabled() const { return next_ != nullptr; }
  // An event of the calling thread's own request (alloc, free_requested,
  // segment_map, oom): tagged with its context (obs/trace_context.h), read
  // only when the ring is on.
  void RecordTagged(TraceAction action, uintptr_t addr, uint64_t size,
                    StreamHandle stream) {
    if (__builtin_expect(next_ == nullptr, 1)) return;
    Record(action, addr, size, stream, CurrentTraceContext());
  }
  void RecordTagged(TraceAction first, TraceAction second, uintptr_t addr,
                    uint64_t size, StreamHandle stream) {
    if (__builtin_expect(next_ == nullptr, 1)) return;
    Record(first, second, addr, size, stream, CurrentTraceContext());
  }
  void Record(TraceAction action, uintptr_t addr, uint64_t size,
              StreamHandle stream, uint32_t context = 0) {
    if (__builtin_expect(next_ == nullptr, 1)) return;
    Store(action, TraceTicks(tsc_), addr, size, stream, context);
    ++written_;
  }
  // `first` then `second` at the same instant, with one clock read (a free
  // that completes at once; `context` goes to `first`).
  void Record(TraceAction first, TraceAction second, uintptr_t addr,
              uint64_t size, StreamHandle stream, uint32_t context = 0) {
    if (__builtin_expect(next_ == nullptr, 1)) return;
    const uint64_t ticks = TraceTicks(tsc_);
    Store(first, ticks, addr, size, stream, context);
    Store(second, ticks, addr, size, stream, 0);
    written_ += 2;
  }
  // The entries, oldest first, and the clock readings for them; reads the
  // clock, and keeps the reading for later copies.
  TraceLog Copy() const;
  uint64_t dropped() const {
    return written_ > capacity_ ? written_ - capacity_ : 0;
  }
  size_t capacity() const { return capacity_; }
  void Clear();

 private:
  void Store(TraceAction action, uint64_t ticks, uintptr_t addr, uint64_t size,
             StreamHandle stream, uint32_t context) {
    TraceEntry* e = next_;
    e->stamp = TraceEntry::Stamp(ticks, action);
    e->addr = addr;
    e->size = size;
    e->stream = stream;
    if (__builtin_expect(context != 0 || !contexts_.empty(), 0)) {
      SetContext(size_t(e - entries_.data()), context);
    }
    next_ = e + 1 == end_ ? Advance() : e + 1;
  }
  // Where the entry after the last one goes: a grown ring, or the start.
  TraceEntry* Advance();
  void SetContext(size_t index, uint32_t context);

  MetadataVector<TraceEntry> entries_;  // grows to capacity_
  size_t capacity_ = 0;
  TraceEntry* next_ = nullptr;  // nullptr: off
  TraceEntry* end_ = nullptr;   // entries_.data() + entries_.size()
  uint64_t written_ = 0;        // since Resize or Clear
  bool tsc_ = false;
  MetadataVector<uint32_t> contexts_;  // parallel to entries_ once used
  // At Resize, and at each Copy since the oldest entry was written.
  mutable MetadataVector<TraceClockReading> readings_;
};

template <class F>
void TraceLog::ForEach(F f) const {
  // Between two readings, time = a.unix_ns + (ticks - a.ticks) * rate: an event
  // lies between them, so the error is about that of the readings (well under
  // 1 us), and no later reading changes it.
  size_t k = 0;
  double ns_per_tick = 0;
  bool rate_known = false;
  int64_t last_us = INT64_MIN;
  for (const TraceEntry& e : entries) {
    const uint64_t ticks = e.ticks();
    while (k + 2 < readings.size() && ticks >= readings[k + 1].ticks) {
      ++k;
      rate_known = false;
    }
    int64_t ns = 0;
    if (!readings.empty()) {
      const TraceClockReading& a = readings[k];
      if (!rate_known && k + 1 < readings.size()) {
        const TraceClockReading& b = readings[k + 1];
        ns_per_tick = b.ticks > a.ticks ? double(b.unix_ns - a.unix_ns) /
                                              double(b.ticks - a.ticks)
                                        : 0;
        rate_known = true;
      }
      ns = a.unix_ns + int64_t(double(int64_t(ticks - a.ticks)) * ns_per_tick);
    }
    const int64_t us = ns >= 0 ? ns / 1000 : -((999 - ns) / 1000);
    // Counters read on different cores can be a few cycles apart.
    if (us > last_us) last_us = us;
    const uint32_t context =
        contexts.empty() ? 0 : contexts[size_t(&e - entries.data())];
    f(TraceEvent{e.action(), e.addr, e.size, e.stream, last_us, context});
  }
}

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_TRACE_H_
