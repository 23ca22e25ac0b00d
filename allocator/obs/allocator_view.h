// Read-only views of the allocator's state (arenas, blocks, mapped pages; the
// pinned pool's chunks) that the engine and the pinned pool hand to reports
// and snapshots, so obs/ never touches live structures. Thread-safety: value
// types.
#ifndef FRAGFREE_ALLOCATOR_OBS_ALLOCATOR_VIEW_H_
#define FRAGFREE_ALLOCATOR_OBS_ALLOCATOR_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/base/stream_handle.h"
#include "allocator/blocks/block.h"

namespace fragfree {

struct BlockView {
  uintptr_t addr;
  size_t size;
  size_t requested;
  BlockState state;
  uint64_t alloc_seq;
};

struct ArenaView {
  uintptr_t base;
  size_t va_size;
  size_t page_size;
  StreamHandle stream;
  bool small;           // serves requests <= 1 MiB
  uint64_t pool_id[2];  // CUDA graph pool ({0,0}: the default pool)
  size_t mapped_pages;
  std::vector<BlockView> blocks;  // tiling the VA
  std::vector<bool> page_mapped;  // up to the last mapped page
  std::string tag;                // region tag ("" untagged: docs/sleep.md)
  bool paused = false;            // the tag is paused: live blocks unmapped
};

// A chunk of pinned host memory (the pinned pool) and the blocks that tile
// it: a snapshot's "host_segments".
struct HostSegmentView {
  uintptr_t base;
  size_t size;
  std::vector<BlockView> blocks;  // kAllocated, kPendingFree or kFree
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_ALLOCATOR_VIEW_H_
