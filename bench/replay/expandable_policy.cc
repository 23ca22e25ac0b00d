// Implementation of expandable_policy.h. Function names follow
// DeviceCachingAllocator's expandable-segment paths (find_expandable_block,
// map_block, unmap_block, ...) so the two can be read side by side.
// Thread-safety: see expandable_policy.h.
#include "bench/replay/expandable_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "bench/replay/block_links.h"

namespace fragfree::replay {

ExpandablePolicy::ExpandablePolicy(const PolicyConfig& config,
                                   const PytorchAllocConfig& alloc_config)
    : config_(config), alloc_config_(alloc_config) {}

uint64_t ExpandablePolicy::ExpandableSize(int32_t b) const {
  const Block& blk = blocks_[b];
  if (blk.next != kNone && !blocks_[blk.next].mapped) {
    return blk.size + blocks_[blk.next].size;
  }
  return blk.size;
}

bool ExpandablePolicy::Alloc(uint64_t id, uint64_t orig_size, uint64_t stream) {
  const uint64_t size = RoundSize(orig_size, alloc_config_);
  const bool small = IsSmallRequest(size);
  Pool& pool = small ? small_ : large_;
  int32_t b = GetFreeBlock(pool, stream, size);
  if (b == kNone) {
    b = TryAllocateExpandableBlock(pool, stream, size, small);
    // release_available_cached_blocks skips expandable blocks: next rung.
    if (b == kNone) {
      ReleaseCachedBlocks();
      ++retries_;
      b = TryAllocateExpandableBlock(pool, stream, size, small);
    }
    if (b == kNone) {
      ++ooms_;
      return false;
    }
  }
  if (blocks_[b].size - size >= kMinBlockSize) {  // should_split
    pool.blocks.insert(SizeKeyOf(SplitTail(blocks_, b, size)));
  }
  live_.HandOut(blocks_, id, b);
  return true;
}

void ExpandablePolicy::Free(uint64_t id) {
  FreeBlock(live_.TakeBack(blocks_, id));
}

int32_t ExpandablePolicy::GetFreeBlock(Pool& pool, uint64_t stream,
                                       uint64_t size) {
  auto it = pool.blocks.lower_bound(SizeKey{stream, size, 0, kNone});
  if (it == pool.blocks.end() || it->stream != stream) return kNone;
  // Rank by expandable size: prefer a block that does not sit before unmapped
  // space, so the segment can keep growing there.
  auto next = std::next(it);
  while (next != pool.blocks.end() && next->stream == stream &&
         ExpandableSize(next->block) < ExpandableSize(it->block)) {
    it = next++;
  }
  if (OversizeRefuses(size, it->size, alloc_config_)) return kNone;
  const int32_t b = it->block;
  pool.blocks.erase(it);
  return b;
}

int32_t ExpandablePolicy::FindExpandableBlock(Pool& pool, uint64_t stream,
                                              uint64_t size, bool small) {
  auto has_room = [&](int32_t c) {
    uint64_t bytes = 0;
    while (bytes < size && Allocatable(c)) {
      bytes += blocks_[c].size;
      c = blocks_[c].next;
    }
    return bytes >= size;
  };
  for (auto it = pool.unmapped.lower_bound(AddrKey{stream, 0, kNone});
       it != pool.unmapped.end() && it->stream == stream; ++it) {
    int32_t c = it->block;
    // A free block right before the unmapped range can be part of the run.
    if (Allocatable(blocks_[c].prev)) c = blocks_[c].prev;
    if (has_room(c)) return c;
  }
  // A new segment: 9/8 of device memory in VA, all unmapped.
  Segment seg;
  seg.page = small ? kSmallBuffer : alloc_config_.large_segment_size;
  const uint64_t total = config_.device_total_bytes;
  const uint64_t pages = (total + total / 8 + seg.page - 1) / seg.page;
  seg.size = pages * seg.page;
  seg.base = next_va_;
  seg.live = true;
  next_va_ += seg.size + kGiB;  // a gap, as separate reservations would have
  const int32_t seg_index = static_cast<int32_t>(segments_.size());
  segments_.push_back(seg);
  ++live_segments_;
  const int32_t b = blocks_.New();
  Block& blk = blocks_[b];
  blk.addr = seg.base;
  blk.size = seg.size;
  blk.stream = stream;
  blk.small = small;
  blk.segment = seg_index;
  pool.unmapped.insert(AddrKeyOf(b));
  return b;
}

int32_t ExpandablePolicy::TryAllocateExpandableBlock(Pool& pool,
                                                     uint64_t stream,
                                                     uint64_t size,
                                                     bool small) {
  int32_t c = FindExpandableBlock(pool, stream, size, small);
  // c is one of: unmapped -> ...; free -> unmapped -> ...
  if (!blocks_[c].mapped && !MapBlock(c, std::min(blocks_[c].size, size))) {
    return kNone;
  }
  while (blocks_[c].size < size) {
    // Invariant: free -> unmapped -> ...; map part of the unmapped block, which
    // merges it with the free block before it.
    const uint64_t remaining = size - blocks_[c].size;
    const int32_t next = blocks_[c].next;
    if (next == kNone || blocks_[next].mapped || blocks_[next].allocated) {
      return kNone;  // cannot happen: FindExpandableBlock checked the run
    }
    if (!MapBlock(next, std::min(remaining, blocks_[next].size))) return kNone;
    c = next;
  }
  pool.blocks.erase(SizeKeyOf(c));
  return c;
}

bool ExpandablePolicy::MapBlock(int32_t b, uint64_t size) {
  // An unmapped block starts on a page boundary; map whole pages from there.
  const uint64_t page = segments_[blocks_[b].segment].page;
  const uint64_t pages = (size + page - 1) / page;
  const uint64_t bytes = pages * page;
  if (mapped_ + bytes > config_.capacity_bytes) return false;  // cuMemCreate
  mapped_ += bytes;
  peak_mapped_ = std::max(peak_mapped_, mapped_);
  ++map_calls_;
  pages_mapped_ += pages;
  Pool& pool = PoolOf(b);
  pool.unmapped.erase(AddrKeyOf(b));
  blocks_[b].mapped = true;
  if (bytes < blocks_[b].size) {
    const int32_t rem = SplitTail(blocks_, b, bytes);
    blocks_[rem].mapped = false;
    pool.unmapped.insert(AddrKeyOf(rem));
  }
  TryMerge(b, blocks_[b].prev);
  TryMerge(b, blocks_[b].next);
  pool.blocks.insert(SizeKeyOf(b));
  return true;
}

void ExpandablePolicy::UnmapBlock(int32_t b) {
  const Segment& seg = segments_[blocks_[b].segment];
  const uint64_t start = blocks_[b].addr - seg.base;
  const uint64_t end = start + blocks_[b].size;
  const uint64_t first_page = (start + seg.page - 1) / seg.page;
  const uint64_t end_page = end / seg.page;
  if (first_page >= end_page) return;  // no whole page inside
  Pool& pool = PoolOf(b);
  pool.blocks.erase(SizeKeyOf(b));
  const uint64_t unmap_addr = seg.base + first_page * seg.page;
  const uint64_t unmap_size = (end_page - first_page) * seg.page;
  const uint64_t before = unmap_addr - blocks_[b].addr;
  const uint64_t after = blocks_[b].size - before - unmap_size;
  if (before > 0) {  // prev? -> before_free -> b
    const int32_t f = blocks_.New();
    Block& fb = blocks_[f];
    const Block& blk = blocks_[b];
    fb.addr = blk.addr;
    fb.size = before;
    fb.stream = blk.stream;
    fb.small = blk.small;
    fb.segment = blk.segment;
    fb.mapped = true;
    fb.prev = blk.prev;
    fb.next = b;
    if (fb.prev != kNone) blocks_[fb.prev].next = f;
    blocks_[b].prev = f;
    pool.blocks.insert(SizeKeyOf(f));
  }
  if (after > 0) {  // b -> after_free -> next?
    const int32_t f = blocks_.New();
    Block& fb = blocks_[f];
    const Block& blk = blocks_[b];
    fb.addr = unmap_addr + unmap_size;
    fb.size = after;
    fb.stream = blk.stream;
    fb.small = blk.small;
    fb.segment = blk.segment;
    fb.mapped = true;
    LinkAfter(blocks_, f, b);
    pool.blocks.insert(SizeKeyOf(f));
  }
  blocks_[b].addr = unmap_addr;
  blocks_[b].size = unmap_size;
  blocks_[b].mapped = false;
  TryMerge(b, blocks_[b].prev);
  TryMerge(b, blocks_[b].next);
  pool.unmapped.insert(AddrKeyOf(b));
  mapped_ -= unmap_size;
  ++unmap_calls_;
  pages_unmapped_ += end_page - first_page;
}

void ExpandablePolicy::ReleaseCachedBlocks() {
  for (Pool* pool : {&large_, &small_}) {
    std::vector<int32_t> to_unmap;
    to_unmap.reserve(pool->blocks.size());
    for (const SizeKey& key : pool->blocks) to_unmap.push_back(key.block);
    for (int32_t b : to_unmap) {
      UnmapBlock(b);
      const Block& blk = blocks_[b];
      if (!blk.mapped && blk.prev == kNone && blk.next == kNone) {
        // release_expandable_segment: the whole VA is one unmapped block.
        pool->unmapped.erase(AddrKeyOf(b));
        segments_[blk.segment].live = false;
        --live_segments_;
        blocks_.Delete(b);
      }
    }
  }
}

void ExpandablePolicy::FreeBlock(int32_t b) {
  TryMerge(b, blocks_[b].prev);
  TryMerge(b, blocks_[b].next);
  PoolOf(b).blocks.insert(SizeKeyOf(b));
}

void ExpandablePolicy::TryMerge(int32_t dst, int32_t src) {
  if (src == kNone || blocks_[src].allocated ||
      blocks_[src].mapped != blocks_[dst].mapped) {
    return;
  }
  Pool& pool = PoolOf(src);
  if (blocks_[src].mapped) {
    pool.blocks.erase(SizeKeyOf(src));
  } else {
    pool.unmapped.erase(AddrKeyOf(src));
  }
  AbsorbNeighbour(blocks_, dst, src);
}

PolicyFigures ExpandablePolicy::figures() const {
  PolicyFigures f;
  f.allocated_bytes = live_.allocated();
  f.peak_allocated_bytes = live_.peak_allocated();
  f.reserved_bytes = mapped_;
  f.peak_reserved_bytes = peak_mapped_;
  f.maps = pages_mapped_;  // handles: what map cost scales with
  f.unmaps = pages_unmapped_;
  f.alloc_retries = retries_;
  f.ooms = ooms_;
  f.extra = {{"map_calls", map_calls_},
             {"unmap_calls", unmap_calls_},
             {"segments", live_segments_}};
  return f;
}

absl::Status ExpandablePolicy::CheckInvariants() const {
  uint64_t mapped = 0;
  uint64_t allocated = 0;
  size_t free_mapped = 0;
  size_t unmapped = 0;
  size_t live_blocks = 0;
  uint64_t heads = 0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& blk = blocks_[i];
    if (!blocks_.in_use(int32_t(i))) continue;
    ++live_blocks;
    const int32_t b = static_cast<int32_t>(i);
    const Segment& seg = segments_[blk.segment];
    const Pool& pool = blk.small ? small_ : large_;
    if (!seg.live) return absl::InternalError("block in a released segment");
    if (blk.mapped) mapped += blk.size;
    if (blk.allocated) {
      allocated += blk.size;
      if (!blk.mapped) return absl::InternalError("allocated unmapped block");
    } else if (blk.mapped) {
      ++free_mapped;
      if (!pool.blocks.contains(SizeKeyOf(b))) {
        return absl::InternalError(
            absl::StrCat("free block ", b, " unindexed"));
      }
    } else {
      ++unmapped;
      if ((blk.addr - seg.base) % seg.page != 0 || blk.size % seg.page != 0) {
        return absl::InternalError("unmapped block not page-aligned");
      }
      if (!pool.unmapped.contains(AddrKeyOf(b))) {
        return absl::InternalError(absl::StrCat("unmapped ", b, " unindexed"));
      }
    }
    if (blk.prev == kNone) {
      ++heads;
      if (blk.addr != seg.base) return absl::InternalError("segment head");
      uint64_t covered = 0;
      for (int32_t c = b; c != kNone; c = blocks_[c].next) {
        covered += blocks_[c].size;
      }
      if (covered != seg.size) {
        return absl::InternalError("blocks do not tile their segment");
      }
    }
    if (blk.next != kNone) {
      const Block& n = blocks_[blk.next];
      if (!blocks_.in_use(blk.next) || n.prev != b ||
          n.addr != blk.addr + blk.size || n.segment != blk.segment) {
        return absl::InternalError(absl::StrCat("bad link after block ", b));
      }
      if (!blk.allocated && !n.allocated && blk.mapped == n.mapped) {
        return absl::InternalError(absl::StrCat("unmerged blocks at ", b));
      }
    }
  }
  if (mapped != mapped_) {
    return absl::InternalError(
        absl::StrCat("mapped ", mapped_, " but blocks add up to ", mapped));
  }
  if (allocated != live_.allocated()) {
    return absl::InternalError("allocated bytes do not add up");
  }
  if (free_mapped != small_.blocks.size() + large_.blocks.size() ||
      unmapped != small_.unmapped.size() + large_.unmapped.size()) {
    return absl::InternalError("index holds stale blocks");
  }
  if (heads != live_segments_) {
    return absl::InternalError("segment count does not add up");
  }
  if (live_blocks + blocks_.free_slots() != blocks_.size()) {
    return absl::InternalError("block slots leaked");
  }
  if (mapped_ > config_.capacity_bytes) {
    return absl::InternalError("mapped exceeds capacity");
  }
  return absl::OkStatus();
}

}  // namespace fragfree::replay
