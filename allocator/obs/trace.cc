// TraceRing (trace.h). Thread-safety: the owner's lock.
#include "allocator/obs/trace.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

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
  // The ticks halfway through reading the Unix time: off by up to half the
  // time the read took, which a preemption can make milliseconds. So the
  // narrowest of three reads (readings are taken on resize and copy only).
  TraceClockReading best;
  uint64_t best_width = UINT64_MAX;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const uint64_t before = TraceTicks(tsc);
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t after = TraceTicks(tsc);
    if (after - before < best_width) {
      best_width = after - before;
      best.ticks = before + (after - before) / 2;
      best.unix_ns = int64_t(ts.tv_sec) * 1000000000 + int64_t(ts.tv_nsec);
    }
  }
  return best;
}

namespace {
// The ring starts this small and doubles as events arrive.
constexpr size_t kFirstEntries = 4096;
}  // namespace

void TraceRing::Resize(size_t capacity) {
  capacity_ = capacity;
  entries_.clear();
  entries_.shrink_to_fit();
  contexts_.clear();
  contexts_.shrink_to_fit();
  next_ = end_ = nullptr;
  written_ = 0;
  if (capacity > 0) {
    entries_.resize(std::min(capacity, kFirstEntries));
    next_ = entries_.data();
    end_ = entries_.data() + entries_.size();
  }
  tsc_ = TraceTscUsable();
  readings_.assign(1, TraceClockReading::Now(tsc_));
}

TraceEntry* TraceRing::Advance() {
  const size_t old = entries_.size();
  if (old < capacity_) {
    const size_t grown = old > capacity_ / 2 ? capacity_ : old * 2;
    try {
      entries_.resize(grown);
      if (!contexts_.empty()) contexts_.resize(grown, 0);
      end_ = entries_.data() + entries_.size();
      return entries_.data() + old;
    } catch (const std::bad_alloc&) {
      // No memory to grow: the ring stays this size.
      entries_.resize(old);
      if (!contexts_.empty()) contexts_.resize(old);
      capacity_ = old;
      end_ = entries_.data() + old;
    }
  }
  return entries_.data();
}

void TraceRing::SetContext(size_t index, uint32_t context) {
  if (contexts_.empty()) {
    try {
      contexts_.assign(entries_.size(), 0);
    } catch (const std::bad_alloc&) {
      return;  // the event keeps no context
    }
  }
  contexts_[index] = context;
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
    log.readings.assign(readings_.begin(), readings_.end());
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
  if (!contexts_.empty()) {
    const uint32_t* cbegin = contexts_.data();
    const size_t n = size_t(next - begin);
    log.contexts.reserve(log.entries.size());
    if (wrapped) log.contexts.assign(cbegin + n, cbegin + contexts_.size());
    log.contexts.insert(log.contexts.end(), cbegin, cbegin + n);
  }
  // Readings older than the one just before the oldest entry are not needed.
  const uint64_t oldest = log.entries.front().ticks();
  size_t drop = 0;
  while (drop + 2 < readings_.size() && readings_[drop + 1].ticks <= oldest) {
    ++drop;
  }
  readings_.erase(readings_.begin(), readings_.begin() + drop);
  log.readings.assign(readings_.begin(), readings_.end());
  return log;
}

}  // namespace fragfree
