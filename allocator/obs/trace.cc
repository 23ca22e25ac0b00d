#include "allocator/obs/trace.h"

#include <time.h>

#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fragfree {

const char* TraceActionName(TraceAction action) {
  switch (action) {
    case TraceAction::kAlloc:
      return "alloc";
    case TraceAction::kFreeRequested:
      return "free_requested";
    case TraceAction::kFreeCompleted:
      return "free_completed";
    case TraceAction::kSegmentMap:
      return "segment_map";
    case TraceAction::kSegmentUnmap:
      return "segment_unmap";
    case TraceAction::kOom:
      return "oom";
  }
  return "unknown";
}

uint64_t TraceTicksSlow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000 + uint64_t(ts.tv_nsec);
}

bool TraceTscUsable() {
#if defined(__x86_64__)
  static const bool usable = [] {
    // CPUID 0x80000007 EDX bit 8: invariant TSC. Hypervisors often hide the
    // bit while the kernel, having checked the TSC, still keeps time with it.
    unsigned eax, ebx, ecx, edx;
    if (__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) && (edx & (1u << 8))) {
      return true;
    }
    FILE* f = fopen(
        "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        "re");
    if (f == nullptr) return false;
    char name[16] = {};
    const bool tsc =
        fgets(name, sizeof(name), f) != nullptr && strcmp(name, "tsc\n") == 0;
    fclose(f);
    return tsc;
  }();
  return usable;
#else
  return false;
#endif
}

TraceClockReading TraceClockReading::Now(bool tsc) {
  // The ticks halfway through reading the Unix time.
  const uint64_t before = TraceTicks(tsc);
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  const uint64_t after = TraceTicks(tsc);
  TraceClockReading r;
  r.ticks = before + (after - before) / 2;
  r.unix_ns = int64_t(ts.tv_sec) * 1000000000 + int64_t(ts.tv_nsec);
  return r;
}

void TraceRing::Resize(size_t capacity) {
  entries_.assign(capacity, TraceEntry{});
  entries_.shrink_to_fit();
  next_ = capacity > 0 ? entries_.data() : nullptr;
  end_ = entries_.data() + capacity;
  written_ = 0;
  tsc_ = TraceTscUsable();
  readings_.assign(1, TraceClockReading::Now(tsc_));
}

void TraceRing::Clear() {
  if (next_ != nullptr) next_ = entries_.data();
  written_ = 0;
  // Events from now on come after the last reading.
  if (readings_.size() > 1)
    readings_.erase(readings_.begin(), readings_.end() - 1);
}

TraceLog TraceRing::Copy() const {
  TraceLog log;
  if (readings_.empty()) return log;  // never resized
  readings_.push_back(TraceClockReading::Now(tsc_));
  if (written_ == 0) {
    readings_.erase(readings_.begin(), readings_.end() - 1);
    log.readings = readings_;
    return log;
  }
  // Once the ring has wrapped, the oldest entries run from next_ to the end.
  const TraceEntry* begin = entries_.data();
  const TraceEntry* next = next_;
  const TraceEntry* end = end_;
  const bool wrapped = written_ >= entries_.size();
  log.entries.reserve(wrapped ? entries_.size() : written_);
  if (wrapped) log.entries.assign(next, end);
  log.entries.insert(log.entries.end(), begin, next);
  // Readings older than the one just before the oldest entry are not needed.
  const uint64_t oldest = log.entries.front().ticks();
  size_t drop = 0;
  while (drop + 2 < readings_.size() && readings_[drop + 1].ticks <= oldest) {
    ++drop;
  }
  readings_.erase(readings_.begin(), readings_.begin() + drop);
  log.readings = readings_;
  return log;
}

}  // namespace fragfree
