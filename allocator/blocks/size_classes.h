// SizeRounding: request size -> block size. PyTorch-compatible by default:
// 512-byte minimum and multiples, optional `roundup_power2_divisions` (one
// value for every size, or one per power-of-two interval from 1 MiB to 64 GiB),
// plus fragfree's explicit buckets: a request up to the largest bucket rounds
// up to the smallest bucket that holds it. See docs/design.md, Note [Size
// rounding]. Thread-safety: immutable after construction; Round() is safe from
// any thread.
#ifndef FRAGFREE_ALLOCATOR_BLOCKS_SIZE_CLASSES_H_
#define FRAGFREE_ALLOCATOR_BLOCKS_SIZE_CLASSES_H_

#include <array>
#include <cstddef>
#include <vector>

namespace fragfree {

inline constexpr size_t kMinBlockSize = 512;
inline constexpr size_t kSmallRequestLimit = size_t{1}
                                             << 20;  // <= 1 MiB is "small"

struct RoundingConfig {
  // Divisions per power-of-two interval; index i covers [2^i MiB, 2^(i+1) MiB),
  // index 0 also everything below 2 MiB. 0 or 1 means "no power-of-two
  // rounding".
  std::array<size_t, 16> divisions{};
  // Sorted ascending, each a multiple of 512. Empty: no buckets.
  std::vector<size_t> buckets;
};

class SizeRounding {
 public:
  SizeRounding() = default;
  explicit SizeRounding(RoundingConfig config)
      : config_(std::move(config)), plain_(IsPlain(config_)) {}

  // The size of the block that serves a request of `size` bytes (> 0).
  size_t Round(size_t size) const {
    if (plain_) {  // the default: 512-byte multiples only
      return size < kMinBlockSize
                 ? kMinBlockSize
                 : (size + kMinBlockSize - 1) & ~(kMinBlockSize - 1);
    }
    return RoundConfigured(size);
  }
  const RoundingConfig& config() const { return config_; }

  // Index into RoundingConfig::divisions for a size.
  static size_t DivisionIndex(size_t size);

 private:
  static bool IsPlain(const RoundingConfig& config);
  size_t RoundConfigured(size_t size) const;

  RoundingConfig config_;
  bool plain_ = true;  // no buckets and no power-of-two divisions
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BLOCKS_SIZE_CLASSES_H_
