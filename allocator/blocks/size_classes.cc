// Implementation of size_classes.h: PyTorch's round_size with
// roundup_power2_divisions, and explicit buckets. Thread-safety: pure functions
// over an immutable config.
#include "allocator/blocks/size_classes.h"

#include <algorithm>

#include "allocator/base/units.h"

namespace fragfree {

size_t SizeRounding::DivisionIndex(size_t size) {
  if (size < 2 * kMiB) return 0;
  size_t index = size_t(Log2Floor(size) - Log2Floor(kMiB));
  return std::min<size_t>(index, 15);
}

bool SizeRounding::IsPlain(const RoundingConfig& config) {
  if (!config.buckets.empty()) return false;
  for (size_t d : config.divisions) {
    if (d > 1) return false;
  }
  return true;
}

size_t SizeRounding::RoundConfigured(size_t size) const {
  if (!config_.buckets.empty() && size <= config_.buckets.back()) {
    return *std::lower_bound(config_.buckets.begin(), config_.buckets.end(),
                             size);
  }
  if (size < kMinBlockSize) return kMinBlockSize;
  size_t divisions = config_.divisions[DivisionIndex(size)];
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    return RoundUpPower2Division(size, divisions);
  }
  return AlignUp(size, kMinBlockSize);
}

}  // namespace fragfree
