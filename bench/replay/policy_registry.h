// The policies fragfree-replay knows, by name, and how to build them.
// Thread-safety: pure functions; the factories they return build independent
// policies and may be called from any thread.
#ifndef FRAGFREE_BENCH_REPLAY_POLICY_REGISTRY_H_
#define FRAGFREE_BENCH_REPLAY_POLICY_REGISTRY_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/replay/policy.h"
#include "bench/replay/pytorch_alloc_config.h"

namespace fragfree::replay {

struct PolicyOptions {
  // Settings of the native and expandable models (--alloc-conf).
  PytorchAllocConfig pytorch;
  // fragfree: events its trace ring keeps (for --snapshot); 0 = no trace.
  size_t fragfree_trace_entries = 0;
  // fragfree: events complete this many allocator calls after they are
  // recorded (--event-lag; LaggingEventSource); 0 = at once.
  uint64_t fragfree_event_lag = 0;
};

// "native", "expandable", "fragfree": the default order of reports.
const std::vector<std::string>& AllPolicyNames();

absl::StatusOr<PolicyFactory> MakePolicyFactory(std::string_view name,
                                                const PolicyOptions& options);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_POLICY_REGISTRY_H_
