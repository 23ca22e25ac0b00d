// QuickCache: one arena's recently freed small blocks, kept whole (neither
// coalesced nor in the free index) per exact size, so that the next request of
// that size on the arena's stream takes one back in O(1) without touching the
// free index, the neighbours or the pages. A cached block is free to the
// program and the stats (state kCached; snapshots show it as free) but holds
// its memory for its size only, so the cache is small (kDepth blocks per size
// up to kMaxBlockSize, kMaxBytes per arena) and the engine drains it,
// releasing each block as an ordinary free would have, before anything that
// must see all free memory: growing into a new arena, failing a request for
// memory, empty_cache, retiring the stream. Stream order makes same-stream
// reuse safe, as for any free block of the arena. See Note [Quick cache] in
// docs/design.md. Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_BLOCKS_QUICK_CACHE_H_
#define FRAGFREE_ALLOCATOR_BLOCKS_QUICK_CACHE_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "allocator/blocks/block.h"
#include "allocator/blocks/size_classes.h"

namespace fragfree {

class QuickCache {
 public:
  static constexpr size_t kMaxBlockSize = size_t{64} << 10;
  static constexpr uint32_t kDepth = 7;  // two cache lines per size
  static constexpr size_t kMaxBytes = size_t{16} << 20;

  // Off (the default) for arenas whose blocks must not be held back (graph
  // pools).
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }

  // Takes `block` (at `block_addr`, of `size` bytes; allocated or pending,
  // just freed, uses null) if there is room, making it kCached with the free's
  // fence epoch and free_seq; false leaves it to the caller. Only writes the
  // block (a free need not wait for its cache line).
  bool Push(Block* block, uintptr_t block_addr, size_t size,
            uint64_t free_epoch, uint64_t free_seq) {
    // Size first: nearly every free is above kMaxBlockSize (a well predicted
    // branch), while whether the arena has its cache enabled varies from one
    // free to the next with the arena's kind.
    if (size > kMaxBlockSize || !enabled_ || bytes_ + size > kMaxBytes) {
      return false;
    }
    Class& c = classes_[size / kMinBlockSize - 1];
    if (c.count == kDepth) return false;
    c.entries[c.count++] = {block, block_addr};
    bytes_ += size;
    ++count_;
    block->state = BlockState::kCached;
    block->requested = 0;
    block->free_epoch = free_epoch;
    block->free_seq = free_seq;
    return true;
  }
  // The most recently cached block of exactly `size` bytes, now kAllocated
  // (the caller sets `requested`), and its address in *addr; or nullptr.
  // Only writes the block.
  Block* Pop(size_t size, uintptr_t* addr) {
    if (size > kMaxBlockSize || count_ == 0) return nullptr;
    Class& c = classes_[size / kMinBlockSize - 1];
    if (c.count == 0) return nullptr;
    const Entry e = c.entries[--c.count];
    bytes_ -= size;
    --count_;
    e.block->state = BlockState::kAllocated;
    *addr = e.addr;
    return e.block;
  }
  // Empties the cache, calling release(block) for each block (still kCached).
  template <typename Fn>
  void Drain(Fn&& release) {
    if (count_ == 0) return;
    for (Class& c : classes_) {
      while (c.count > 0) release(c.entries[--c.count].block);
    }
    bytes_ = count_ = 0;
  }

  // Calls fn(const Block*) for every cached block (still kCached).
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    size_t left = count_;
    for (size_t k = 0; left > 0 && k < classes_.size(); ++k) {
      const Class& c = classes_[k];
      for (uint32_t i = 0; i < c.count; ++i) fn(c.entries[i].block);
      left -= c.count;
    }
  }

  size_t count() const { return count_; }
  size_t bytes() const { return bytes_; }

 private:
  struct Entry {
    Block* block;
    uintptr_t addr;  // block->addr, so that taking a block needs no read of it
  };
  struct alignas(64) Class {
    Entry entries[kDepth];
    uint32_t count = 0;
  };
  std::array<Class, kMaxBlockSize / kMinBlockSize> classes_{};
  size_t bytes_ = 0;
  size_t count_ = 0;
  bool enabled_ = false;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BLOCKS_QUICK_CACHE_H_
