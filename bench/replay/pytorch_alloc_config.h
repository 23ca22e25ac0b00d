// PyTorch's caching-allocator settings and size rules, as the native and
// expandable models use them (c10/core/AllocatorConfig.cpp and
// DeviceCachingAllocator's size helpers, PyTorch 2.11):
// round_size with roundup_power2_divisions, the small/large split, the segment
// size asked of cudaMalloc, and the subset of PYTORCH_CUDA_ALLOC_CONF that
// changes them. Thread-safety: pure functions over an immutable config.
#ifndef FRAGFREE_BENCH_REPLAY_PYTORCH_ALLOC_CONFIG_H_
#define FRAGFREE_BENCH_REPLAY_PYTORCH_ALLOC_CONFIG_H_

#include <array>
#include <cstdint>
#include <limits>
#include <string_view>

#include "absl/status/statusor.h"
#include "bench/replay/policy.h"

namespace fragfree::replay {

inline constexpr uint64_t kMinBlockSize = 512;      // kMinBlockSize
inline constexpr uint64_t kSmallSize = 1 * kMiB;    // largest small request
inline constexpr uint64_t kSmallBuffer = 2 * kMiB;  // small segment / page
// Large requests below this share one 20 MiB segment.
inline constexpr uint64_t kMinLargeAlloc = 10 * kMiB;
inline constexpr uint64_t kRoundLarge = 2 * kMiB;  // large segment rounding

struct PytorchAllocConfig {
  // Blocks this large are never split ("oversize"). Unlimited by default.
  uint64_t max_split_size = std::numeric_limits<uint64_t>::max();
  // An oversize block serves a request only if block < request + this.
  uint64_t max_non_split_rounding = 20 * kMiB;
  // Segment for 1..10 MiB requests; page size of large expandable segments.
  uint64_t large_segment_size = 20 * kMiB;
  // Divisions per power-of-two interval from 1 MiB (index 0, also everything
  // smaller) to 32 GiB and above (index 15). 0 or 1: plain 512-byte rounding.
  std::array<uint64_t, 16> roundup_power2_divisions{};
};

// Parses `key:value,...` with the keys max_split_size_mb,
// max_non_split_rounding_mb, large_segment_size_mb and roundup_power2_divisions
// (`N` or `[MB:N,...,>:N]`). expandable_segments and other PyTorch keys that do
// not change the models are accepted and ignored; unknown keys are errors.
absl::StatusOr<PytorchAllocConfig> ParsePytorchAllocConf(std::string_view conf);

// round_size(): the block size that serves a request.
uint64_t RoundSize(uint64_t size, const PytorchAllocConfig& config);
// roundup_power2_next_division() is fragfree::RoundUpPower2Division
// (allocator/base/units.h).
// get_allocation_size(): the segment cudaMalloc'd for a (rounded) request.
uint64_t AllocationSize(uint64_t rounded, const PytorchAllocConfig& config);
// Whether a (rounded) request belongs to the small pool.
inline bool IsSmallRequest(uint64_t rounded) { return rounded <= kSmallSize; }

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_PYTORCH_ALLOC_CONFIG_H_
