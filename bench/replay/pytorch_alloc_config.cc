// Implementation of pytorch_alloc_config.h (mirrors
// c10/core/AllocatorConfig.cpp and DeviceCachingAllocator's size helpers).
// Thread-safety: pure functions.
#include "bench/replay/pytorch_alloc_config.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "allocator/base/config_tokens.h"
#include "allocator/base/units.h"
#include "bench/replay/csv_fields.h"

namespace fragfree::replay {
namespace {

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad PYTORCH_CUDA_ALLOC_CONF: ", std::string(what)));
}

bool IsIgnoredKey(std::string_view key) {
  static constexpr std::string_view kKeys[] = {
      "expandable_segments",
      "garbage_collection_threshold",
      "backend",
      "release_lock_on_cudamalloc",
      "release_lock_on_hipmalloc",
      "pinned_use_cuda_host_register",
      "pinned_use_hip_host_register",
      "pinned_num_register_threads",
      "pinned_use_background_threads",
      "pinned_reserve_segment_size_mb",
      "pinned_free_catch_all",
      "graph_capture_record_stream_reuse",
      "per_process_memory_fraction",
      "throw_on_cudamalloc_oom",
      "expandable_segments_reserve",
      "expandable_segments_reserve_by_class",
  };
  return std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
}

using Tokens = std::vector<std::string>;

// The number at t[at], else an error naming the token before it.
absl::Status Number(const Tokens& t, size_t at, uint64_t* out) {
  if (at >= t.size() || !ParseDecimalU64(t[at], out)) {
    return Bad(absl::StrCat("expected a number after '", t[at - 1], "'"));
  }
  return absl::OkStatus();
}

// One `MB:divisions` or `>:divisions` item of the list at t[i]; `first` and
// `last_index` carry PyTorch's fill rules across items.
absl::Status ParseDivisionItem(const Tokens& t, size_t& i, bool& first,
                               size_t& last_index,
                               std::array<uint64_t, 16>& div) {
  const std::string& bound = t[i];
  if (i + 1 >= t.size() || t[i + 1] != ":") {
    return Bad("expected 'MB:divisions' in roundup_power2_divisions");
  }
  uint64_t value = 0;
  if (absl::Status s = Number(t, i + 2, &value); !s.ok()) return s;
  if (value != 0 && !IsPowerOfTwo(value)) {
    return Bad("roundup_power2_divisions values must be powers of 2");
  }
  if (bound == ">") {
    std::fill(div.begin() + last_index + 1, div.end(), value);
  } else {
    uint64_t mb = 0;
    if (!ParseDecimalU64(bound, &mb) || !IsPowerOfTwo(mb)) {
      return Bad("roundup_power2_divisions sizes must be powers of 2");
    }
    const size_t index = std::min<size_t>(Log2Floor(mb), div.size() - 1);
    if (first) {
      std::fill(div.begin(), div.begin() + index, value);
      first = false;
    }
    div[index] = value;
    last_index = index;
  }
  i += 3;
  return absl::OkStatus();
}

// roundup_power2_divisions: `N`, or `[MB:N,...,>:N]`.
absl::Status ParseDivisions(const Tokens& t, size_t& i,
                            PytorchAllocConfig& config) {
  auto& div = config.roundup_power2_divisions;
  if (t[i] != "[") {
    uint64_t value = 0;
    if (absl::Status s = Number(t, i, &value); !s.ok()) return s;
    if (!IsPowerOfTwo(value)) {
      return Bad("roundup_power2_divisions must be a power of 2");
    }
    div.fill(value);
    ++i;
    return absl::OkStatus();
  }
  bool first = true;
  size_t last_index = 0;
  ++i;
  while (i < t.size() && t[i] != "]") {
    if (absl::Status s = ParseDivisionItem(t, i, first, last_index, div);
        !s.ok()) {
      return s;
    }
    if (i < t.size() && t[i] == ",") ++i;
  }
  if (i >= t.size()) return Bad("missing ']'");
  ++i;  // past ']'
  return absl::OkStatus();
}

// What the parse collects besides the config: settings that depend on others
// and are resolved once every key is read.
struct Pending {
  uint64_t max_split_mb = 0;
  bool non_split_rounding_set = false;
};

// The value of `key` from t[i] on (leaves i past it).
absl::Status ParseValue(const std::string& key, const Tokens& t, size_t& i,
                        PytorchAllocConfig& config, Pending& pending) {
  if (key == "roundup_power2_divisions") return ParseDivisions(t, i, config);
  if (key == "max_split_size_mb") return Number(t, i++, &pending.max_split_mb);
  if (key == "max_non_split_rounding_mb") {
    uint64_t mb = 0;
    if (absl::Status s = Number(t, i++, &mb); !s.ok()) return s;
    config.max_non_split_rounding = mb * kMiB;
    pending.non_split_rounding_set = true;
    return absl::OkStatus();
  }
  if (key == "large_segment_size_mb") {
    uint64_t mb = 0;
    if (absl::Status s = Number(t, i++, &mb); !s.ok()) return s;
    if (mb <= kMinLargeAlloc / kMiB || mb % 2 != 0) {
      return Bad("large_segment_size_mb must be an even number > 10");
    }
    config.large_segment_size = mb * kMiB;
    return absl::OkStatus();
  }
  if (IsIgnoredKey(key)) {  // a word, or a whole [...] list
    if (t[i] == "[") {
      while (i < t.size() && t[i] != "]") ++i;
    }
    ++i;
    return absl::OkStatus();
  }
  return Bad(absl::StrCat("unrecognised key '", key, "'"));
}

// The settings that depend on others: max_non_split_rounding defaults to the
// large segment size, and max_split_size may not be below it.
absl::Status Resolve(const Pending& pending, PytorchAllocConfig& config) {
  if (!pending.non_split_rounding_set) {
    config.max_non_split_rounding = config.large_segment_size;
  }
  if (pending.max_split_mb != 0) {
    if (pending.max_split_mb * kMiB < config.large_segment_size) {
      return Bad("max_split_size_mb must be >= the large segment size (20)");
    }
    config.max_split_size = pending.max_split_mb * kMiB;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PytorchAllocConfig> ParsePytorchAllocConf(
    std::string_view conf) {
  PytorchAllocConfig config;
  Pending pending;
  const Tokens t = TokenizeConfig(conf);
  size_t i = 0;
  while (i < t.size()) {
    const std::string& key = t[i];
    if (i + 1 >= t.size() || t[i + 1] != ":") {
      return Bad(absl::StrCat("expected ':' after '", key, "'"));
    }
    i += 2;
    if (i >= t.size()) return Bad(absl::StrCat("no value for '", key, "'"));
    if (absl::Status s = ParseValue(key, t, i, config, pending); !s.ok()) {
      return s;
    }
    if (i < t.size()) {
      if (t[i] != ",") {
        return Bad(absl::StrCat("expected ',' before '", t[i], "'"));
      }
      ++i;
    }
  }
  if (absl::Status s = Resolve(pending, config); !s.ok()) return s;
  return config;
}

uint64_t RoundSize(uint64_t size, const PytorchAllocConfig& config) {
  if (size < kMinBlockSize) return kMinBlockSize;
  const int log_size = Log2Floor(size);
  const int start = Log2Floor(kSmallSize);  // intervals start at 1 MiB
  size_t index = log_size > start ? static_cast<size_t>(log_size - start) : 0;
  index = std::min<size_t>(index, config.roundup_power2_divisions.size() - 1);
  const uint64_t divisions = config.roundup_power2_divisions[index];
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    return RoundUpPower2Division(size, divisions);
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

uint64_t AllocationSize(uint64_t rounded, const PytorchAllocConfig& config) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return config.large_segment_size;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace fragfree::replay
