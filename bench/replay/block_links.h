// The doubly linked neighbour lists of the replay models' blocks (native and
// expandable: blocks of a segment in address order, linked by slot index):
// splitting a block's tail off into a new block, and absorbing a free
// neighbour. Block types need addr, size, prev and next, with kNone (-1) for
// "no neighbour". Pools and per-model fields are the callers'.
// Thread-safety: not thread-safe (each policy owns its blocks).
#ifndef FRAGFREE_BENCH_REPLAY_BLOCK_LINKS_H_
#define FRAGFREE_BENCH_REPLAY_BLOCK_LINKS_H_

#include <cstdint>

#include "bench/replay/slot_pool.h"

namespace fragfree::replay {

// Links block `b` right after `after`.
template <typename Block>
void LinkAfter(SlotPool<Block>& blocks, int32_t b, int32_t after) {
  Block& blk = blocks[b];
  blk.prev = after;
  blk.next = blocks[after].next;
  if (blk.next >= 0) blocks[blk.next].prev = b;
  blocks[after].next = b;
}

// Cuts `b` to its first `size` bytes; the rest becomes a new block (a copy of
// b's other fields) linked after it. Returns the new block.
template <typename Block>
int32_t SplitTail(SlotPool<Block>& blocks, int32_t b, uint64_t size) {
  const int32_t rest = blocks.New();
  blocks[rest] = blocks[b];
  blocks[rest].addr = blocks[b].addr + size;
  blocks[rest].size = blocks[b].size - size;
  blocks[b].size = size;
  LinkAfter(blocks, rest, b);
  return rest;
}

// Merges neighbour `src` (just before or just after `dst`) into `dst` and
// frees its slot.
template <typename Block>
void AbsorbNeighbour(SlotPool<Block>& blocks, int32_t dst, int32_t src) {
  Block& d = blocks[dst];
  const Block& s = blocks[src];
  if (d.prev == src) {  // [src dst]
    d.addr = s.addr;
    d.prev = s.prev;
    if (d.prev >= 0) blocks[d.prev].next = dst;
  } else {  // [dst src]
    d.next = s.next;
    if (d.next >= 0) blocks[d.next].prev = dst;
  }
  d.size += s.size;
  blocks.Delete(src);
}

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_BLOCK_LINKS_H_
