// FreeIndex: the free blocks of one arena, for a good-fit search in O(1) time.
// Two-level segregated bins (TLSF): sizes below 16 KiB have one bin per 512 B;
// above, each power of two is split into 32 bins (a bin spans at most 3% of its
// sizes). FindFit takes the newest block of the request's own bin that fits
// (scanning at most 16), else the newest block of the next non-empty bin,
// found with a two-level bitmap: a fit within ~3% of the best, reading as few
// blocks as it can. See Note [Free index] in docs/design.md.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_BLOCKS_FREE_INDEX_H_
#define FRAGFREE_ALLOCATOR_BLOCKS_FREE_INDEX_H_

#include <algorithm>
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
  int NextNonEmptyBin(uint32_t from) const;  // first non-empty bin >= from
  // Where a list update stores the block before `next`: next->bin_prev, or,
  // past the end of the list, a slot no one reads. Whether a block is last in
  // its bin is a coin toss, so Insert and Remove select an address (a
  // conditional move) rather than branch on it.
  Block** LinkPrev(Block* next) {
    return next != nullptr ? &next->bin_prev : &no_next_;
  }

  std::array<Block*, kNumBins> heads_{};
  std::array<uint64_t, kNumBins / 64> bitmap_{};
  uint64_t summary_ = 0;  // bit i: bitmap_[i] != 0
  size_t count_ = 0;
  Block* no_next_ = nullptr;  // LinkPrev's sink: written, never read
};

// Both candidates are computed and one is selected by a mask (GCC compiles
// the ?: form to a branch): a request is below kLinearLimit about as often as
// not in a mixed workload, so a branch here mispredicts on a third of calls.
inline uint32_t FreeIndex::BinOf(size_t size) {
  const uint32_t linear = uint32_t(size >> 9);
  const int fl = Log2Floor(size | kLinearLimit);  // >= 14
  const uint32_t sl = uint32_t(size >> (fl - 5)) & 31;
  const uint32_t tlsf =
      std::min<uint32_t>(32 + uint32_t(fl - 14) * 32 + sl, kNumBins - 1);
  const uint32_t is_linear = -uint32_t{size < kLinearLimit};  // all ones or 0
  return (linear & is_linear) | (tlsf & ~is_linear);
}

inline void FreeIndex::Insert(Block* block) {
  FF_DCHECK(block->is_free() && block->size % 512 == 0 && block->size > 0,
            "FreeIndex::Insert of a bad block");
  uint32_t bin = BinOf(block->size);
  block->bin = uint16_t(bin);
  Block* const head = heads_[bin];
  block->bin_prev = nullptr;
  block->bin_next = head;
  *LinkPrev(head) = block;
  heads_[bin] = block;
  bitmap_[bin / 64] |= uint64_t{1} << (bin % 64);
  summary_ |= uint64_t{1} << (bin / 64);
  ++count_;
}

inline void FreeIndex::Remove(Block* block) {
  const uint32_t bin = block->bin;
  Block* const prev = block->bin_prev;
  Block* const next = block->bin_next;
  // A block first in its bin is its head.
  FF_CHECK((prev != nullptr) | (heads_[bin] == block),
           "FreeIndex::Remove of an unindexed block");
  *(prev != nullptr ? &prev->bin_next : &heads_[bin]) = next;
  *LinkPrev(next) = prev;
  block->bin_prev = block->bin_next = nullptr;
  // The bin's bit, and its word's summary bit, cleared when they empty.
  uint64_t& word = bitmap_[bin / 64];
  word &= ~(uint64_t{heads_[bin] == nullptr} << (bin % 64));
  summary_ &= ~(uint64_t{word == 0} << (bin / 64));
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
