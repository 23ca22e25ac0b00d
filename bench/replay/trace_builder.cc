// Implementation of trace_builder.h.
// Thread-safety: see trace_builder.h.
#include "bench/replay/trace_builder.h"

#include "absl/strings/str_format.h"

namespace fragfree::replay {

absl::Status TraceBuilder::Alloc(uint64_t addr, uint64_t size, uint64_t stream,
                                 int64_t time_us, uint64_t line) {
  auto [it, inserted] = live_.try_emplace(addr);
  if (!inserted) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "alloc at address 0x%x, which is still live (allocated at line %d "
        "and not freed since)",
        addr, it->second.line));
  }
  const uint64_t id = trace_->num_ids++;
  it->second = Live{id, size, stream, line};
  trace_->events.push_back(Event{Op::kAlloc, id, size, stream, time_us, line});
  return absl::OkStatus();
}

absl::Status TraceBuilder::Free(uint64_t addr, int64_t time_us, uint64_t line) {
  auto it = live_.find(addr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "free of unknown address 0x%x (no live allocation there)", addr));
  }
  const Live live = it->second;
  live_.erase(it);
  trace_->events.push_back(
      Event{Op::kFree, live.id, live.size, live.stream, time_us, line});
  return absl::OkStatus();
}

void TraceBuilder::Finish() { trace_->never_freed = live_.size(); }

}  // namespace fragfree::replay
