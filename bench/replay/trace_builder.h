// TraceBuilder: turns address-keyed alloc/free records into a Trace of id-keyed
// events. A free pairs with the latest allocation at its address that is still
// live; an allocation at an address that is still live, and a free of an
// address with no live allocation, are errors (the caller decides whether to
// skip the line). Thread-safety: not thread-safe.
#ifndef FRAGFREE_BENCH_REPLAY_TRACE_BUILDER_H_
#define FRAGFREE_BENCH_REPLAY_TRACE_BUILDER_H_

#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "bench/replay/trace_event.h"

namespace fragfree::replay {

class TraceBuilder {
 public:
  explicit TraceBuilder(Trace* trace) : trace_(trace) {}

  // Both return InvalidArgument with a message (no file:line prefix) on a bad
  // record, leaving the trace unchanged.
  absl::Status Alloc(uint64_t addr, uint64_t size, uint64_t stream,
                     int64_t time_us, uint64_t line);
  absl::Status Free(uint64_t addr, int64_t time_us, uint64_t line);

  // Records how many allocations were never freed. Call once, at the end.
  void Finish();

 private:
  struct Live {
    uint64_t id;
    uint64_t size;
    uint64_t stream;
    uint64_t line;
  };
  Trace* trace_;
  absl::flat_hash_map<uint64_t, Live> live_;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_TRACE_BUILDER_H_
