// Implementation of native_policy.h. Function names follow
// DeviceCachingAllocator's so the two can be read side by side.
// Thread-safety: see native_policy.h.
#include "bench/replay/native_policy.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "bench/replay/block_links.h"

namespace fragfree::replay {

NativePolicy::NativePolicy(const PolicyConfig& config,
                           const PytorchAllocConfig& alloc_config)
    : config_(config), alloc_config_(alloc_config) {}

bool NativePolicy::Alloc(uint64_t id, uint64_t orig_size, uint64_t stream) {
  const uint64_t size = RoundSize(orig_size, alloc_config_);
  const bool small = IsSmallRequest(size);
  Pool& pool = small ? small_pool_ : large_pool_;
  int32_t b = GetFreeBlock(pool, stream, size);
  if (b == kNone) {
    const uint64_t alloc_size = AllocationSize(size, alloc_config_);
    b = AllocBlock(alloc_size, stream, small, /*is_retry=*/false);
    if (b == kNone && ReleaseAvailableCachedBlocks(pool, stream, size)) {
      b = AllocBlock(alloc_size, stream, small, /*is_retry=*/false);
    }
    if (b == kNone && ReleaseCachedBlocks()) {
      b = AllocBlock(alloc_size, stream, small, /*is_retry=*/true);
    }
    if (b == kNone) {
      ++ooms_;
      return false;
    }
  }
  if (ShouldSplit(blocks_[b], size)) {
    // The allocation takes the front; the remainder stays free in the pool.
    pool.insert(KeyOf(SplitTail(blocks_, b, size)));
  }
  live_.HandOut(blocks_, id, b);
  return true;
}

void NativePolicy::Free(uint64_t id) { FreeBlock(live_.TakeBack(blocks_, id)); }

int32_t NativePolicy::GetFreeBlock(Pool& pool, uint64_t stream, uint64_t size) {
  auto it = pool.lower_bound(Key{stream, size, 0, kNone});
  if (it == pool.end() || it->stream != stream) return kNone;
  if (OversizeRefuses(size, it->size, alloc_config_)) return kNone;
  const int32_t b = it->block;
  pool.erase(it);
  return b;
}

int32_t NativePolicy::AllocBlock(uint64_t alloc_size, uint64_t stream,
                                 bool small, bool is_retry) {
  if (is_retry) ++retries_;
  if (reserved_ + alloc_size > config_.capacity_bytes) return kNone;
  const int32_t b = blocks_.New();
  Block& blk = blocks_[b];
  blk.addr = next_addr_;
  blk.size = alloc_size;
  blk.stream = stream;
  blk.small = small;
  next_addr_ += (alloc_size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  reserved_ += alloc_size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++segment_allocs_;
  return b;
}

bool NativePolicy::ReleaseAvailableCachedBlocks(Pool& pool, uint64_t stream,
                                                uint64_t size) {
  const uint64_t max_split = alloc_config_.max_split_size;
  if (max_split == std::numeric_limits<uint64_t>::max()) return false;
  const uint64_t key_size = std::max(size, max_split);
  auto it = pool.lower_bound(Key{stream, key_size, 0, kNone});
  if (it != pool.end() && it->stream == stream) {
    ReleaseBlock(it->block);
    return true;
  }
  // No single block is large enough: free oversize blocks of this stream,
  // largest first.
  if (it == pool.begin()) return false;
  --it;
  uint64_t released = 0;
  std::vector<int32_t> victims;
  while (released < key_size && it->size >= max_split && it->stream == stream) {
    victims.push_back(it->block);
    released += it->size;
    if (it == pool.begin()) break;
    --it;
  }
  if (released < key_size) {
    // PyTorch releases the ones it visited even when they are not enough.
    for (int32_t v : victims) ReleaseBlock(v);
    return false;
  }
  for (int32_t v : victims) ReleaseBlock(v);
  return true;
}

bool NativePolicy::ReleaseCachedBlocks() {
  std::vector<int32_t> whole;
  for (const Pool* pool : {&large_pool_, &small_pool_}) {
    for (const Key& key : *pool) {
      const Block& blk = blocks_[key.block];
      if (blk.prev == kNone && blk.next == kNone) whole.push_back(key.block);
    }
  }
  for (int32_t b : whole) ReleaseBlock(b);
  return true;
}

void NativePolicy::ReleaseBlock(int32_t b) {
  const Block& blk = blocks_[b];
  if (blk.prev != kNone || blk.next != kNone) return;  // part of a segment
  PoolOf(b).erase(KeyOf(b));
  reserved_ -= blk.size;
  ++segment_frees_;
  blocks_.Delete(b);
}

bool NativePolicy::ShouldSplit(const Block& block, uint64_t size) const {
  const uint64_t remaining = block.size - size;
  if (block.small) return remaining >= kMinBlockSize;
  return size < alloc_config_.max_split_size && remaining > kSmallSize;
}

void NativePolicy::FreeBlock(int32_t b) {
  TryMerge(b, blocks_[b].prev);
  TryMerge(b, blocks_[b].next);
  PoolOf(b).insert(KeyOf(b));
}

void NativePolicy::TryMerge(int32_t dst, int32_t src) {
  if (src == kNone || blocks_[src].allocated) return;
  PoolOf(src).erase(KeyOf(src));
  AbsorbNeighbour(blocks_, dst, src);
}

PolicyFigures NativePolicy::figures() const {
  PolicyFigures f;
  f.allocated_bytes = live_.allocated();
  f.peak_allocated_bytes = live_.peak_allocated();
  f.reserved_bytes = reserved_;
  f.peak_reserved_bytes = peak_reserved_;
  f.maps = segment_allocs_;
  f.unmaps = segment_frees_;
  f.alloc_retries = retries_;
  f.ooms = ooms_;
  f.extra = {{"segments", segments()}};
  return f;
}

absl::Status NativePolicy::CheckInvariants() const {
  uint64_t reserved = 0;
  uint64_t allocated = 0;
  size_t free_blocks = 0;
  size_t live_blocks = 0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& blk = blocks_[i];
    if (!blocks_.in_use(int32_t(i))) continue;
    ++live_blocks;
    const int32_t b = static_cast<int32_t>(i);
    if (blk.allocated) {
      allocated += blk.size;
    } else {
      ++free_blocks;
      const Pool& pool = blk.small ? small_pool_ : large_pool_;
      auto it = pool.find(KeyOf(b));
      if (it == pool.end() || it->block != b) {
        return absl::InternalError(
            absl::StrCat("free block ", b, " missing from its pool"));
      }
    }
    if (blk.next != kNone) {
      const Block& n = blocks_[blk.next];
      if (!blocks_.in_use(blk.next) || n.prev != b ||
          n.addr != blk.addr + blk.size || n.stream != blk.stream ||
          n.small != blk.small) {
        return absl::InternalError(absl::StrCat("bad link after block ", b));
      }
      if (!blk.allocated && !n.allocated) {
        return absl::InternalError(
            absl::StrCat("adjacent free blocks not merged at ", b));
      }
    }
    if (blk.prev == kNone) {  // segment head: add up the segment
      for (int32_t c = b; c != kNone; c = blocks_[c].next) {
        reserved += blocks_[c].size;
      }
    }
  }
  if (reserved != reserved_) {
    return absl::InternalError(absl::StrCat(
        "reserved ", reserved_, " but segments add up to ", reserved));
  }
  if (allocated != live_.allocated()) {
    return absl::InternalError(absl::StrCat(
        "allocated ", live_.allocated(), " but blocks add up to ", allocated));
  }
  if (free_blocks != small_pool_.size() + large_pool_.size()) {
    return absl::InternalError("pools hold blocks that are not free");
  }
  if (live_blocks + blocks_.free_slots() != blocks_.size()) {
    return absl::InternalError("block slots leaked");
  }
  if (reserved_ > config_.capacity_bytes) {
    return absl::InternalError("reserved exceeds capacity");
  }
  return absl::OkStatus();
}

}  // namespace fragfree::replay
