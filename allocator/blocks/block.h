// Block: one contiguous range of an arena's VA, either handed out (allocated),
// waiting for other streams to finish with it (pending), free, or freed but
// kept whole in a QuickCache (cached). Blocks of an arena tile its whole VA in
// address order (prev/next); free blocks are also linked into one FreeIndex
// bin (bin_prev/bin_next), and free blocks holding a whole mapped page into
// the reclaim index (queue_prev/queue_next: va/reclaim_queue.h). Adjacent free
// blocks are always coalesced, so two free blocks are never neighbours.
// Each block also records whether its neighbours are free (prev_free,
// next_free), so that freeing a block whose neighbours are in use never reads
// them: Note [Neighbour bits] in docs/design.md.
// Layout: 128 bytes, cache-line aligned; the first line holds what coalescing
// and bin searches read of other blocks, the second the block's own
// bookkeeping.
// Blocks, their chunks and their `uses` lists are on the metadata arena
// (base/metadata_arena.h), never on the program's heap.
// Thread-safety: plain data, guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_BLOCKS_BLOCK_H_
#define FRAGFREE_ALLOCATOR_BLOCKS_BLOCK_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <new>

#include "allocator/base/check.h"
#include "allocator/base/huge_pages.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/stream_handle.h"

namespace fragfree {

class Arena;

// kCached: freed, but kept whole in its arena's QuickCache for the next
// request of its size (blocks/quick_cache.h); free to the program and stats.
enum class BlockState : uint8_t { kFree, kAllocated, kPendingFree, kCached };

struct alignas(64) Block {
  // First cache line: read when the block is a neighbour or sits in a bin.
  uintptr_t addr = 0;
  size_t size = 0;
  Block* prev = nullptr;
  Block* next = nullptr;
  Block* bin_prev = nullptr;
  Block* bin_next = nullptr;
  // The owning stream's fence epoch when the block became free: its pages may
  // be unmapped once that epoch's fence has completed (stream/stream_fences.h).
  uint64_t free_epoch = 0;
  uint16_t bin = 0;  // FreeIndex bin while free
  BlockState state = BlockState::kFree;
  bool queued = false;  // in the reclaim index (va/reclaim_queue.h)
  // Invariant (va/arena.cc keeps it): prev_free == (prev && prev->is_free()),
  // next_free == (next && next->is_free()). Both false on a free block.
  bool prev_free = false;
  bool next_free = false;

  // Second cache line: the block's own bookkeeping.
  Arena* arena = nullptr;
  size_t requested = 0;  // the caller's size while allocated, else 0
  // Extra streams that used the block (record_stream) while allocated; empty
  // for nearly every block, so kept out of line.
  MetadataUniquePtr<MetadataVector<StreamHandle>> uses;
  uint64_t alloc_seq = 0;       // allocation order, for reports
  uint64_t free_seq = 0;        // when it last became free (same counter)
  Block* queue_prev = nullptr;  // reclaim index links
  Block* queue_next = nullptr;

  bool is_free() const { return state == BlockState::kFree; }
  uintptr_t end() const { return addr + size; }
  // Back to Block() by stores alone, reading nothing of the block (a memset
  // or `*this = Block()` becomes a `rep stos` or reads `uses`). REQUIRES:
  // uses is null. Names every field but `uses`.
  void Reset() {
    addr = 0;
    size = 0;
    prev = next = bin_prev = bin_next = nullptr;
    free_epoch = 0;
    bin = 0;
    state = BlockState::kFree;
    queued = false;
    prev_free = next_free = false;
    arena = nullptr;
    requested = 0;
    alloc_seq = free_seq = 0;
    queue_prev = queue_next = nullptr;
  }
};
static_assert(sizeof(Block) == 128, "Block is two cache lines");

// BlockPool: recycles Block objects so the hot path never allocates. Blocks
// come in chunks that double up to 2 MiB, on the metadata arena (huge-page
// backed where the kernel allows: base/huge_pages.h).
class BlockPool {
 public:
  BlockPool() = default;
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;
  ~BlockPool() {
    for (const Chunk& c : chunks_) {
      for (size_t i = 0; i < c.count; ++i) c.blocks[i].~Block();
      FreeHostTable(c.blocks, c.count * sizeof(Block));
    }
  }

  // A block in the default state. Pooled blocks hold no `uses` (Delete's
  // requirement), so the reset only stores: it reads nothing of the block.
  Block* New() {
    if (free_ == nullptr) Grow();
    Block* b = free_;
    free_ = b->next;
    b->Reset();
    return b;
  }
  // REQUIRES: b->uses is null (a free block). Writes only b->next: a block
  // that coalescing merged away is neither read again nor reset here (New
  // resets), so its second cache line is not touched.
  void Delete(Block* b) {
    FF_DCHECK(b->uses == nullptr, "BlockPool::Delete of a block with uses");
    b->next = free_;
    free_ = b;
  }

 private:
  static constexpr size_t kFirstChunk = 1024;
  static constexpr size_t kMaxChunk = kHugePageSize / sizeof(Block);
  struct Chunk {
    Block* blocks;
    size_t count;
  };
  void Grow() {
    const size_t count = chunks_.empty()
                             ? kFirstChunk
                             : std::min(chunks_.back().count * 2, kMaxChunk);
    Block* blocks =
        static_cast<Block*>(AllocateHostTable(count * sizeof(Block)));
    for (size_t i = 0; i < count; ++i) new (&blocks[i]) Block();
    chunks_.push_back({blocks, count});
    for (size_t i = count; i-- > 0;) {  // lowest address first out
      blocks[i].next = free_;
      free_ = &blocks[i];
    }
  }
  MetadataVector<Chunk> chunks_;
  Block* free_ = nullptr;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BLOCKS_BLOCK_H_
