// TraceRing (trace.h). Thread-safety: the owner's lock.
#include "allocator/obs/trace.h"

#include <time.h>

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

void TraceRing::Resize(size_t capacity) {
  entries_.assign(capacity, TraceEntry{});
  entries_.shrink_to_fit();
  next_ = count_ = 0;
  dropped_ = 0;
}

void TraceRing::Clear() {
  next_ = count_ = 0;
  dropped_ = 0;
}

void TraceRing::Append(TraceAction action, uintptr_t addr, uint64_t size,
                       StreamHandle stream, uint32_t context) {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  TraceEntry& e = entries_[next_];
  e.time_us = uint64_t(ts.tv_sec) * 1000000 + uint64_t(ts.tv_nsec) / 1000;
  e.addr = addr;
  e.size = size;
  e.stream = stream;
  e.context = context;
  e.action = action;
  next_ = next_ + 1 == entries_.size() ? 0 : next_ + 1;
  if (count_ < entries_.size()) {
    ++count_;
  } else {
    ++dropped_;
  }
}

std::vector<TraceEntry> TraceRing::Entries() const {
  std::vector<TraceEntry> out;
  out.reserve(count_);
  size_t start = count_ < entries_.size() ? 0 : next_;
  for (size_t i = 0; i < count_; ++i) {
    out.push_back(entries_[(start + i) % entries_.size()]);
  }
  return out;
}

}  // namespace fragfree
