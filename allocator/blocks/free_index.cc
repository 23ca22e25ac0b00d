#include "allocator/blocks/free_index.h"

#include "absl/base/attributes.h"

namespace fragfree {
namespace {
constexpr int kScanLimit = 16;
}  // namespace

// Inline: FindFit's only helper, called twice. kAllFit: every block of the
// bin is larger than `size` (a bin above the request's), so none is skipped
// and none ends the scan as an exact fit. The first exact fit ends the scan
// (it beats every block before it); otherwise the smallest, then lowest
// address, of the blocks scanned that fit. Which block wins is data: the
// choice is made with masks, not branches, which mispredicted about every
// other block.
template <bool kAllFit>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Block* FreeIndex::BestOf(
    Block* head, size_t size) const {
  Block* best = nullptr;
  size_t best_size = SIZE_MAX;
  uintptr_t best_addr = UINTPTR_MAX;
  int scanned = 0;
  for (Block* b = head; b != nullptr && scanned < kScanLimit;
       b = b->bin_next, ++scanned) {
    const size_t s = b->size;
    const uintptr_t a = b->addr;
    if (!kAllFit && s == size) return b;
    const bool better =
        (kAllFit || s > size) &
        ((s < best_size) | ((s == best_size) & (a < best_addr)));
    // All ones when `better` (masks: the compiler turns ?: back into jumps).
    const uint64_t m = uint64_t{0} - uint64_t{better};
    best = reinterpret_cast<Block*>((reinterpret_cast<uintptr_t>(b) & m) |
                                    (reinterpret_cast<uintptr_t>(best) & ~m));
    best_size = (s & m) | (best_size & ~m);
    best_addr = (a & m) | (best_addr & ~m);
  }
  return best;
}

Block* FreeIndex::FindFit(size_t size) const {
  uint32_t bin = BinOf(size);
  if (heads_[bin] != nullptr) {
    if (Block* b = BestOf<false>(heads_[bin], size)) return b;
  }
  int next = NextNonEmptyBin(bin + 1);
  if (next < 0) return nullptr;
  return BestOf<true>(heads_[next], size);
}

}  // namespace fragfree
