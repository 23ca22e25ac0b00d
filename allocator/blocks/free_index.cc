#include "allocator/blocks/free_index.h"

#include "absl/base/attributes.h"

namespace fragfree {
namespace {
constexpr int kScanLimit = 16;
}  // namespace

// Inline: FindFit's only helper, called twice. kAllFit: every block of the
// bin is larger than `size` (a bin above the request's), so none is skipped
// and none ends the scan as an exact fit.
template <bool kAllFit>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Block* FreeIndex::BestOf(
    Block* head, size_t size) const {
  Block* best = nullptr;
  int scanned = 0;
  for (Block* b = head; b != nullptr && scanned < kScanLimit;
       b = b->bin_next, ++scanned) {
    if (!kAllFit && b->size < size) continue;
    if (best == nullptr || b->size < best->size ||
        (b->size == best->size && b->addr < best->addr)) {
      best = b;
      if (!kAllFit && b->size == size) break;
    }
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
