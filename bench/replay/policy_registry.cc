// Implementation of policy_registry.h.
// Thread-safety: see policy_registry.h.
#include "bench/replay/policy_registry.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/replay/expandable_policy.h"
#include "bench/replay/fragfree_policy.h"
#include "bench/replay/native_policy.h"

namespace fragfree::replay {

const std::vector<std::string>& AllPolicyNames() {
  static const auto* const kNames =
      new std::vector<std::string>{"native", "expandable", "fragfree"};
  return *kNames;
}

absl::StatusOr<PolicyFactory> MakePolicyFactory(std::string_view name,
                                                const PolicyOptions& options) {
  const PytorchAllocConfig pytorch = options.pytorch;
  if (name == "native") {
    return PolicyFactory([pytorch](const PolicyConfig& config)
                             -> absl::StatusOr<std::unique_ptr<ReplayPolicy>> {
      return std::make_unique<NativePolicy>(config, pytorch);
    });
  }
  if (name == "expandable") {
    return PolicyFactory([pytorch](const PolicyConfig& config)
                             -> absl::StatusOr<std::unique_ptr<ReplayPolicy>> {
      return std::make_unique<ExpandablePolicy>(config, pytorch);
    });
  }
  if (name == "fragfree") {
    const size_t trace_entries = options.fragfree_trace_entries;
    const uint64_t lag = options.fragfree_event_lag;
    return PolicyFactory([trace_entries, lag](const PolicyConfig& config)
                             -> absl::StatusOr<std::unique_ptr<ReplayPolicy>> {
      absl::StatusOr<std::unique_ptr<FragfreePolicy>> policy =
          FragfreePolicy::Create(config, trace_entries, lag);
      if (!policy.ok()) return policy.status();
      return std::unique_ptr<ReplayPolicy>(std::move(*policy));
    });
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", std::string(name), "' (want one of ",
                   absl::StrJoin(AllPolicyNames(), ", "), ")"));
}

}  // namespace fragfree::replay
