// Trace and Event: the normalised form every trace reader produces and every
// replay consumes. An allocation gets a dense id (its ordinal among the trace's
// allocations), so policies can index per-allocation state with a vector
// instead of a hash map. Thread-safety: plain value types.
#ifndef FRAGFREE_BENCH_REPLAY_TRACE_EVENT_H_
#define FRAGFREE_BENCH_REPLAY_TRACE_EVENT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace fragfree::replay {

enum class Op : uint8_t { kAlloc, kFree };

struct Event {
  Op op = Op::kAlloc;
  uint64_t id = 0;    // the n-th allocation of the trace has id n; its free too
  uint64_t size = 0;  // requested bytes (a free repeats its allocation's size)
  // Allocation stream (a free repeats it, as PyTorch does).
  uint64_t stream = 0;
  int64_t time_us = 0;  // as recorded (epoch or time of day, format-dependent)
  uint64_t line = 0;    // 1-based line of the source file
};

struct Trace {
  std::string path;    // as given by the user
  std::string format;  // "csv" or "rmm"
  std::vector<Event> events;
  uint64_t num_ids = 0;  // number of allocations (= one past the largest id)
  // Valid lines without an event (free_requested, ...).
  uint64_t ignored_lines = 0;
  uint64_t skipped_lines = 0;  // bad lines skipped under --lenient
  uint64_t never_freed = 0;    // allocations still live at the end of the trace
  // Human-readable notes for the user (first skipped lines, truncation hints).
  std::vector<std::string> warnings;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_TRACE_EVENT_H_
