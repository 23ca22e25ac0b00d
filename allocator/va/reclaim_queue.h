// Where reclaim looks for whole free pages, so that it visits only blocks it
// may use instead of scanning every free block. A free block holding at least
// one whole mapped page is in exactly one of:
//  - its arena's RemainderBins when its free_seq is 0 (a split remainder), or
//  - the device's ReclaimQueue otherwise (a hole), oldest free_seq first.
// Reclaim takes remainders first (arena by arena, largest first), then holes
// oldest first: the order the engine used when it sorted every candidate by
// free_seq. Arenas keep both current as blocks enter and leave their free
// index and as pages are unmapped. Intrusive (queue_prev/queue_next in Block),
// so no operation allocates. See Note [Where pages come from].
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_VA_RECLAIM_QUEUE_H_
#define FRAGFREE_ALLOCATOR_VA_RECLAIM_QUEUE_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "allocator/blocks/block.h"
#include "allocator/blocks/free_index.h"

namespace fragfree {

class ReclaimQueue {
 public:
  ReclaimQueue() = default;
  ReclaimQueue(const ReclaimQueue&) = delete;
  ReclaimQueue& operator=(const ReclaimQueue&) = delete;

  // Adds a block in free_seq order: a new hole (the newest free_seq) goes to
  // the back in O(1); any other (a failed request's block going back) is
  // placed by a walk from the back. REQUIRES: !block->queued, free_seq > 0.
  void Add(Block* block) {
    Block* after = tail_;
    while (after != nullptr && after->free_seq > block->free_seq) {
      after = after->queue_prev;
    }
    block->queue_prev = after;
    block->queue_next = after != nullptr ? after->queue_next : head_;
    if (block->queue_next != nullptr) {
      block->queue_next->queue_prev = block;
    } else {
      tail_ = block;
    }
    if (after != nullptr) {
      after->queue_next = block;
    } else {
      head_ = block;
    }
    block->queued = true;
    ++size_;
  }
  // REQUIRES: block is in this queue.
  void Remove(Block* block) {
    if (block->queue_prev != nullptr) {
      block->queue_prev->queue_next = block->queue_next;
    } else {
      head_ = block->queue_next;
    }
    if (block->queue_next != nullptr) {
      block->queue_next->queue_prev = block->queue_prev;
    } else {
      tail_ = block->queue_prev;
    }
    block->queue_prev = block->queue_next = nullptr;
    block->queued = false;
    --size_;
  }

  // Oldest first; a visitor may Remove the block it is given (take the next
  // one first).
  Block* front() const { return head_; }
  static Block* next(const Block* block) { return block->queue_next; }
  size_t size() const { return size_; }

 private:
  Block* head_ = nullptr;
  Block* tail_ = nullptr;
  size_t size_ = 0;
};

// One arena's queued remainders, binned by size like its FreeIndex; within a
// bin, newest first (the FreeIndex's order).
class RemainderBins {
 public:
  void Insert(Block* block) {
    const uint32_t bin = FreeIndex::BinOf(block->size);
    block->queue_prev = nullptr;
    block->queue_next = heads_[bin];
    if (heads_[bin] != nullptr) heads_[bin]->queue_prev = block;
    heads_[bin] = block;
    bitmap_[bin / 64] |= uint64_t{1} << (bin % 64);
    block->queued = true;
    ++size_;
  }
  // REQUIRES: block is in these bins, with the size it was inserted with.
  void Remove(Block* block) {
    const uint32_t bin = FreeIndex::BinOf(block->size);
    if (block->queue_prev != nullptr) {
      block->queue_prev->queue_next = block->queue_next;
    } else {
      heads_[bin] = block->queue_next;
    }
    if (block->queue_next != nullptr) {
      block->queue_next->queue_prev = block->queue_prev;
    }
    if (heads_[bin] == nullptr)
      bitmap_[bin / 64] &= ~(uint64_t{1} << (bin % 64));
    block->queue_prev = block->queue_next = nullptr;
    block->queued = false;
    --size_;
  }
  // Calls fn(Block*) from the largest bin down, until it returns false; fn may
  // Remove the block it is given.
  template <typename Fn>
  void ForEachLargestFirst(Fn&& fn) const {
    if (size_ == 0) return;
    for (int word = int(bitmap_.size()) - 1; word >= 0; --word) {
      for (uint64_t bits = bitmap_[word]; bits != 0;) {
        const int bit = 63 - __builtin_clzll(bits);
        bits &= ~(uint64_t{1} << bit);
        for (Block* b = heads_[word * 64 + bit]; b != nullptr;) {
          Block* next = b->queue_next;
          if (!fn(b)) return;
          b = next;
        }
      }
    }
  }
  size_t size() const { return size_; }

 private:
  std::array<Block*, FreeIndex::kNumBins> heads_{};
  std::array<uint64_t, FreeIndex::kNumBins / 64> bitmap_{};
  size_t size_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_VA_RECLAIM_QUEUE_H_
