// What the two models of PyTorch's allocator (native_policy, expandable_policy)
// share: the block of a segment (address, size, stream, neighbours, pool,
// allocated), BlockComparatorSize's key of a free block (stream, size,
// address), get_free_block's oversize rules (max_split_size), and the live
// allocations: allocation id -> block, with allocated bytes and their peak.
// Each model keeps its own pools, segments and retry ladder.
// Thread-safety: not thread-safe (each policy owns its blocks).
#ifndef FRAGFREE_BENCH_REPLAY_PYTORCH_BLOCKS_H_
#define FRAGFREE_BENCH_REPLAY_PYTORCH_BLOCKS_H_

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "bench/replay/pytorch_alloc_config.h"
#include "bench/replay/slot_pool.h"

namespace fragfree::replay {

// "No block": an empty neighbour link, an id with no allocation, a miss.
inline constexpr int32_t kNoBlock = -1;

// One block of a segment; blocks of a segment are linked in address order
// (block_links.h) and tile it.
struct PytorchBlock {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  int32_t prev = kNoBlock;  // neighbours inside the segment
  int32_t next = kNoBlock;
  bool small = false;  // which pool
  bool allocated = false;
};

// BlockComparatorSize: free blocks ordered by (stream, size, address), so a
// lower_bound finds the best fit on the request's stream.
struct SizeKey {
  uint64_t stream;
  uint64_t size;
  uint64_t addr;
  int32_t block;
  friend bool operator<(const SizeKey& a, const SizeKey& b) {
    return std::tie(a.stream, a.size, a.addr) <
           std::tie(b.stream, b.size, b.addr);
  }
};

template <typename Block>
SizeKey SizeKeyOf(const SlotPool<Block>& blocks, int32_t b) {
  const Block& blk = blocks[b];
  return SizeKey{blk.stream, blk.size, blk.addr, b};
}

// get_free_block's max_split_size rules: whether a free block of `block_size`
// bytes may not serve a (rounded) request of `size` bytes: an oversize block
// never serves a request that could split, and serves an oversize request
// only if it is less than max_non_split_rounding larger.
inline bool OversizeRefuses(uint64_t size, uint64_t block_size,
                            const PytorchAllocConfig& config) {
  const uint64_t max_split = config.max_split_size;
  if (size < max_split) return block_size >= max_split;
  return block_size >= size + config.max_non_split_rounding;
}

// The live allocations: which block serves each allocation id, and the bytes
// allocated (block sizes) with their peak.
class LiveBlocks {
 public:
  // Hands block `b` out as allocation `id`.
  template <typename Block>
  void HandOut(SlotPool<Block>& blocks, uint64_t id, int32_t b) {
    blocks[b].allocated = true;
    Add(id, b, blocks[b].size);
  }
  // Takes allocation `id` back; returns its block, now not allocated (the
  // caller merges it and puts it in a pool).
  template <typename Block>
  int32_t TakeBack(SlotPool<Block>& blocks, uint64_t id) {
    const int32_t b = by_id_[id];
    Remove(id, blocks[b].size);
    blocks[b].allocated = false;
    return b;
  }
  uint64_t allocated() const { return allocated_; }
  uint64_t peak_allocated() const { return peak_allocated_; }

 private:
  void Add(uint64_t id, int32_t b, uint64_t size) {
    if (id >= by_id_.size()) {
      by_id_.resize(std::max<size_t>(id + 1, by_id_.size() * 2), kNoBlock);
    }
    by_id_[id] = b;
    allocated_ += size;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
  }
  void Remove(uint64_t id, uint64_t size) {
    by_id_[id] = kNoBlock;
    allocated_ -= size;
  }

  std::vector<int32_t> by_id_;  // allocation id -> block, or kNoBlock
  uint64_t allocated_ = 0;
  uint64_t peak_allocated_ = 0;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_PYTORCH_BLOCKS_H_
