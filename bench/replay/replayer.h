// Replay: drives a trace through one policy and measures it: peak live and
// reserved bytes, per-call latency (steady clock around every Alloc/Free), and
// a timeline of live vs reserved bytes reduced to at most N points (each point
// the maximum over its stretch of events, so peaks survive the sampling).
// FindMinCapacity: the smallest capacity (to a granularity) at which the whole
// trace replays through fresh instances of a policy without an OOM.
// Thread-safety: functions over caller-owned objects; not thread-safe per
// policy.
#ifndef FRAGFREE_BENCH_REPLAY_REPLAYER_H_
#define FRAGFREE_BENCH_REPLAY_REPLAYER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/replay/policy.h"
#include "bench/replay/trace_event.h"

namespace fragfree::replay {

struct ReplayOptions {
  bool time_calls = true;         // measure every call (costs ~2 clock reads)
  size_t timeline_points = 2000;  // 0: no timeline
  bool stop_at_first_oom = false;
  bool check_invariants_every_event = false;  // tests only: very slow
};

struct TimelinePoint {
  uint64_t first_event = 0;     // index of the first event of the stretch
  uint64_t live_bytes = 0;      // max over the stretch
  uint64_t reserved_bytes = 0;  // max over the stretch
};

struct Latency {
  uint64_t p50_ns = 0;
  uint64_t p99_ns = 0;
  uint64_t max_ns = 0;
};

struct ReplayResult {
  std::string policy;
  uint64_t events = 0;  // events replayed (allocs + frees)
  uint64_t allocs = 0;
  uint64_t frees = 0;
  uint64_t peak_live_bytes = 0;  // requested bytes live, as the trace says
  uint64_t ooms = 0;
  int64_t first_oom_line = -1;  // trace line of the first failed alloc
  PolicyFigures figures;
  Latency all_calls;
  Latency alloc_calls;
  Latency free_calls;
  double seconds = 0;  // wall time of the replay loop
  std::vector<TimelinePoint> timeline;
  absl::Status invariant_error;  // first invariant failure (if checked)
  absl::Status policy_status;    // ReplayPolicy::status() after the replay
};

ReplayResult Replay(const Trace& trace, ReplayPolicy& policy,
                    const ReplayOptions& options);

// Peak of the sum of requested bytes live over the trace (every alloc served).
uint64_t PeakLiveBytes(const Trace& trace);

struct MinCapacity {
  bool found = false;  // false: not even `base.capacity_bytes` fits
  uint64_t bytes = 0;
  int replays = 0;  // replays the search ran
};

// Binary search over capacities that are multiples of `granularity` (and
// `base.capacity_bytes` itself). `known_fit`, if non-zero, is a capacity
// already known to fit (the peak reserved of an OOM-free replay at base
// capacity: a replay never reserving more than that behaves identically at that
// capacity).
absl::StatusOr<MinCapacity> FindMinCapacity(const Trace& trace,
                                            const PolicyFactory& factory,
                                            const PolicyConfig& base,
                                            uint64_t known_fit,
                                            uint64_t granularity = 2 * kMiB);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_REPLAYER_H_
