#include "allocator/blocks/free_index.h"

namespace fragfree {
namespace {
constexpr int kScanLimit = 16;
}  // namespace

// Each block read here is another cache line, the search's cost once
// thousands of blocks are free (Note [Free index] in docs/design.md): the
// first fit of the request's own bin, whose sizes are within ~3% of each
// other, and otherwise the first block of the next non-empty bin, all of
// whose blocks fit.
Block* FreeIndex::FindFit(size_t size) const {
  const uint32_t bin = BinOf(size);
  int scanned = 0;
  for (Block* b = heads_[bin]; b != nullptr && scanned < kScanLimit;
       b = b->bin_next, ++scanned) {
    if (b->size >= size) return b;
  }
  const int next = NextNonEmptyBin(bin + 1);
  return next < 0 ? nullptr : heads_[next];
}

}  // namespace fragfree
