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

#include "allocator/base/check.h"
#include "allocator/base/units.h"
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
  static constexpr size_t kLinearLimit = 32 * 512;  // 16 KiB
  template <bool kAllFit>
  Block* BestOf(Block* head, size_t size) const;
  int NextNonEmptyBin(uint32_t from) const;  // first non-empty bin >= from

  std::array<Block*, kNumBins> heads_{};
  std::array<uint64_t, kNumBins / 64> bitmap_{};
  uint64_t summary_ = 0;  // bit i: bitmap_[i] != 0
  size_t count_ = 0;
};

inline uint32_t FreeIndex::BinOf(size_t size) {
  if (size < kLinearLimit) return uint32_t(size >> 9);
  int fl = Log2Floor(size);  // >= 14
  uint32_t sl = uint32_t(size >> (fl - 5)) & 31;
  uint32_t bin = 32 + uint32_t(fl - 14) * 32 + sl;
  return bin < kNumBins ? bin : uint32_t(kNumBins - 1);
}

inline void FreeIndex::Insert(Block* block) {
  FF_DCHECK(block->is_free() && block->size % 512 == 0 && block->size > 0,
            "FreeIndex::Insert of a bad block");
  uint32_t bin = BinOf(block->size);
  block->bin = uint16_t(bin);
  block->bin_prev = nullptr;
  block->bin_next = heads_[bin];
  if (heads_[bin] != nullptr) heads_[bin]->bin_prev = block;
  heads_[bin] = block;
  bitmap_[bin / 64] |= uint64_t{1} << (bin % 64);
  summary_ |= uint64_t{1} << (bin / 64);
  ++count_;
}

inline void FreeIndex::Remove(Block* block) {
  uint32_t bin = block->bin;
  if (block->bin_prev != nullptr) {
    block->bin_prev->bin_next = block->bin_next;
  } else {
    FF_CHECK(heads_[bin] == block, "FreeIndex::Remove of an unindexed block");
    heads_[bin] = block->bin_next;
  }
  if (block->bin_next != nullptr) block->bin_next->bin_prev = block->bin_prev;
  block->bin_prev = block->bin_next = nullptr;
  if (heads_[bin] == nullptr) {
    bitmap_[bin / 64] &= ~(uint64_t{1} << (bin % 64));
    if (bitmap_[bin / 64] == 0) summary_ &= ~(uint64_t{1} << (bin / 64));
  }
  --count_;
}

inline int FreeIndex::NextNonEmptyBin(uint32_t from) const {
  if (from >= kNumBins) return -1;
  uint32_t word = from / 64;
  uint64_t bits = bitmap_[word] & (~uint64_t{0} << (from % 64));
  if (bits != 0) return int(word * 64 + __builtin_ctzll(bits));
  uint64_t words = word + 1 < 64 ? summary_ & (~uint64_t{0} << (word + 1)) : 0;
  if (words == 0) return -1;
  word = uint32_t(__builtin_ctzll(words));
  return int(word * 64 + __builtin_ctzll(bitmap_[word]));
}

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
