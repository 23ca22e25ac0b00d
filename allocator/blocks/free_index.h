// FreeIndex: the free blocks of one arena, for best-fit search in O(1) time.
// Two-level segregated bins (TLSF): sizes below 16 KiB have one bin per 512 B;
// above, each power of two is split into 32 bins (a bin spans at most 3% of its
// sizes). FindFit scans the request's own bin for the best fit (smallest, then
// lowest address) and otherwise takes the best of the first few blocks of the
// next non-empty bin, found with a two-level bitmap. See Note [Free index] in
// docs/design.md.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_BLOCKS_FREE_INDEX_H_
#define FRAGFREE_ALLOCATOR_BLOCKS_FREE_INDEX_H_

#include <array>
#include <cstdint>

#include "allocator/blocks/block.h"

namespace fragfree {

class FreeIndex {
 public:
  static constexpr size_t kNumBins = 1152;

  // REQUIRES: block is free, its size a non-zero multiple of 512, not indexed.
  void Insert(Block* block);
  // REQUIRES: block is indexed.
  void Remove(Block* block);
  // A free block of at least `size` bytes, or nullptr. Does not remove it.
  Block* FindFit(size_t size) const;

  // The smallest-size block of at least `size` bytes for which pred(block)
  // holds, looking at no more than `max_scan` blocks, bins in ascending order
  // (the first bin with a match decides); nullptr if none was found.
  template <typename Pred>
  Block* FindFitIf(size_t size, Pred&& pred, int max_scan) const;

  size_t count() const { return count_; }
  // Calls fn(Block*) for free blocks from the largest bin down; stops when fn
  // returns false.
  template <typename Fn>
  void ForEachLargestFirst(Fn&& fn) const;

  static uint32_t BinOf(size_t size);

 private:
  Block* BestOf(Block* head, size_t size) const;
  int NextNonEmptyBin(uint32_t from) const;  // first non-empty bin >= from

  std::array<Block*, kNumBins> heads_{};
  std::array<uint64_t, kNumBins / 64> bitmap_{};
  uint64_t summary_ = 0;  // bit i: bitmap_[i] != 0
  size_t count_ = 0;
};

template <typename Pred>
Block* FreeIndex::FindFitIf(size_t size, Pred&& pred, int max_scan) const {
  int scanned = 0;
  for (int bin = NextNonEmptyBin(BinOf(size)); bin >= 0 && scanned < max_scan;
       bin = NextNonEmptyBin(uint32_t(bin) + 1)) {
    Block* best = nullptr;
    for (Block* b = heads_[bin]; b != nullptr && scanned < max_scan;
         b = b->bin_next, ++scanned) {
      if (b->size < size || (best != nullptr && b->size >= best->size)) {
        continue;
      }
      if (pred(b)) best = b;
    }
    if (best != nullptr) return best;
  }
  return nullptr;
}

template <typename Fn>
void FreeIndex::ForEachLargestFirst(Fn&& fn) const {
  for (int word = int(bitmap_.size()) - 1; word >= 0; --word) {
    uint64_t bits = bitmap_[word];
    while (bits != 0) {
      int bit = 63 - __builtin_clzll(bits);
      bits &= ~(uint64_t{1} << bit);
      for (Block* b = heads_[word * 64 + bit]; b != nullptr;) {
        Block* next = b->bin_next;  // fn may remove b
        if (!fn(b)) return;
        b = next;
      }
    }
  }
}

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BLOCKS_FREE_INDEX_H_
