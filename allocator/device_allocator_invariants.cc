// DeviceAllocator::CheckInvariants: a full recount of the engine's state
// against its bookkeeping (blocks, pages, stats, caches, reclaim index, slots).
// Thread-safety: see device_allocator.h.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"
#include "allocator/device_allocator.h"

namespace fragfree {

// What the walk over every arena's blocks counts, checked against the stats.
struct DeviceAllocator::InvariantRecount {
  int64_t allocated = 0, active = 0, mapped_bytes = 0, live_blocks = 0;
  size_t queued_blocks = 0;
};

namespace {

absl::Status Fail(std::string what) {
  return absl::InternalError("invariant violated: " + what);
}

// One arena's free and cached blocks, checked against its indexes.
struct ArenaTally {
  size_t free_blocks = 0, free_bytes = 0, cached_blocks = 0, cached_bytes = 0;
};

// Whether `b` starts where its predecessor ended, links back to it, has a
// valid size and knows which of its neighbours are free.
absl::Status CheckBlockLayout(const Block* b, uintptr_t expect,
                              const Block* prev) {
  if (b->addr != expect) {
    return Fail(absl::StrFormat("gap or overlap at 0x%x (expected 0x%x)",
                                b->addr, expect));
  }
  if (b->prev != prev) return Fail("broken prev link");
  const bool prev_free = prev != nullptr && prev->is_free();
  const bool next_free = b->next != nullptr && b->next->is_free();
  if (b->prev_free != prev_free || b->next_free != next_free) {
    return Fail(absl::StrFormat(
        "block 0x%x's neighbour bits (prev_free %d, next_free %d) disagree "
        "with its neighbours",
        b->addr, b->prev_free, b->next_free));
  }
  if (b->size == 0 || b->size % kMinBlockSize != 0) {
    return Fail("block size not a positive multiple of 512");
  }
  return absl::OkStatus();
}

// Whether the (`what`: cached or live) block `b` lies on mapped, accessible
// pages only.
absl::Status CheckBlockMapped(const Arena& arena, const Block* b,
                              const char* what) {
  if (!arena.IsFullyMapped(b)) {
    return Fail(
        absl::StrFormat("%s block 0x%x is not fully mapped", what, b->addr));
  }
  if (arena.HasPagesWithoutAccess(b)) {
    return Fail(absl::StrFormat("%s block 0x%x lies on a page without access",
                                what, b->addr));
  }
  return absl::OkStatus();
}

// Whether every detached page (Note [Moving a page without waiting]) is a
// whole page inside a free block and not mapped in the arena's tables.
absl::Status CheckDetachedPages(const Arena& arena) {
  for (const auto& [index, epoch] : arena.detached()) {
    const uintptr_t addr = arena.base() + index * arena.page_size();
    const Block* b = arena.BlockContaining(addr);
    if (arena.IsPageMapped(index) || b == nullptr || !b->is_free() ||
        addr + arena.page_size() > b->end()) {
      return Fail(absl::StrFormat(
          "detached page 0x%x is mapped or not inside a free block", addr));
    }
  }
  return absl::OkStatus();
}

// Whether the blocks (ending at `end`) cover the arena and agree with its free
// index and quick cache.
absl::Status CheckArenaTally(const Arena& arena, uintptr_t end,
                             const ArenaTally& tally) {
  if (end != arena.base() + arena.size()) {
    return Fail("blocks do not reach the end of the arena");
  }
  if (tally.free_blocks != arena.free_index().count()) {
    return Fail("free index count differs from the free blocks");
  }
  if (tally.cached_blocks != arena.quick().count() ||
      tally.cached_bytes != arena.quick().bytes()) {
    return Fail("quick cache differs from the cached blocks");
  }
  // The stats' walk over the indexes meets every free and cached block once.
  size_t visited = 0, visited_bytes = 0;
  bool other = false;
  arena.ForEachFreeOrCached([&](const Block* b) {
    ++visited;
    visited_bytes += b->size;
    other |= !b->is_free() && b->state != BlockState::kCached;
  });
  if (other || visited != tally.free_blocks + tally.cached_blocks ||
      visited_bytes != tally.free_bytes + tally.cached_bytes) {
    return Fail("the free index and quick cache do not hold the free blocks");
  }
  return absl::OkStatus();
}

// Whether exactly the free blocks holding a reclaimable page are flagged
// queued; counts them into *queued_blocks.
absl::Status CheckReclaimFlags(const Arena& arena, size_t* queued_blocks) {
  for (const Block* b = arena.first_block(); b != nullptr; b = b->next) {
    const bool reclaimable = b->is_free() && arena.ReclaimablePages(b) > 0;
    if (b->queued != reclaimable) {
      return Fail(absl::StrFormat("block 0x%x is %sin the reclaim queue",
                                  b->addr, b->queued ? "" : "not "));
    }
    *queued_blocks += reclaimable;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DeviceAllocator::CheckInvariants() const {
  MutexLock lock(&mu_);
  InvariantRecount recount;
  for (const auto& arena : arenas_) {
    if (absl::Status s = CheckArena(*arena, &recount); !s.ok()) return s;
  }
  if (absl::Status s = CheckSlots(); !s.ok()) return s;
  if (absl::Status s = CheckReclaimQueue(recount.queued_blocks); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckStatsRecount(recount); !s.ok()) return s;
  return CheckSegmentsAndPages();
}

// Whether one arena's blocks tile it, agree with its indexes and caches, and
// (live ones) with the live table; counts them into *recount.
absl::Status DeviceAllocator::CheckArena(const Arena& arena,
                                         InvariantRecount* recount) const {
  uintptr_t expect = arena.base();
  ArenaTally tally;
  const Block* prev = nullptr;
  const bool paused = IsPausedArena(&arena);
  if (paused && (arena.quick().enabled() || arena.quick().count() > 0)) {
    return Fail("a paused arena caches blocks");
  }
  for (const Block* b = arena.first_block(); b != nullptr; b = b->next) {
    if (absl::Status s = CheckBlockLayout(b, expect, prev); !s.ok()) return s;
    if (b->is_free()) {
      ++tally.free_blocks;
      tally.free_bytes += b->size;
      if (prev != nullptr && prev->is_free()) {
        return Fail("two adjacent free blocks (missed coalescing)");
      }
    } else if (b->state == BlockState::kCached) {
      ++tally.cached_blocks;
      tally.cached_bytes += b->size;
      if (absl::Status s = CheckBlockMapped(arena, b, "cached"); !s.ok()) {
        return s;
      }
    } else if (absl::Status s = CheckLiveBlock(arena, b, paused, recount);
               !s.ok()) {
      return s;
    }
    expect = b->end();
    prev = b;
  }
  if (absl::Status s = CheckArenaTally(arena, expect, tally); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckReclaimFlags(arena, &recount->queued_blocks);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckDetachedPages(arena); !s.ok()) return s;
  recount->mapped_bytes += int64_t(arena.mapped_pages() * arena.page_size());
  return absl::OkStatus();
}

// Whether live (active or allocated) block `b` is mapped (unless its tag is
// paused) and its live table entry matches it; counts it into *recount.
absl::Status DeviceAllocator::CheckLiveBlock(const Arena& arena, const Block* b,
                                             bool paused,
                                             InvariantRecount* recount) const {
  if (paused) {
    // A paused tag's live blocks keep their addresses, not their pages.
    recount->active += int64_t(b->size);
    if (b->state == BlockState::kAllocated) {
      recount->allocated += int64_t(b->size);
      ++recount->live_blocks;
      const LiveEntry* it = live_.Find(b->addr);
      if (it == nullptr || it->block() != b || b->arena != &arena) {
        return Fail("paused allocated block missing from the live table");
      }
    }
    return absl::OkStatus();
  }
  if (absl::Status s = CheckBlockMapped(arena, b, "live"); !s.ok()) return s;
  recount->active += int64_t(b->size);
  if (b->state == BlockState::kAllocated) {
    recount->allocated += int64_t(b->size);
    ++recount->live_blocks;
    const LiveEntry* it = live_.Find(b->addr);
    if (it == nullptr || it->block() != b) {
      return Fail("allocated block missing from the live table");
    }
    if (b->arena != &arena || it->has_uses() != (b->uses != nullptr) ||
        b->size != rounding_.Round(b->requested)) {
      return Fail(absl::StrFormat(
          "live table entry of 0x%x differs from its block", b->addr));
    }
  }
  return absl::OkStatus();
}

// Arenas and slots: every arena is listed by its slot; retired slots are
// either waiting for their arenas to empty or free (no arena left).
absl::Status DeviceAllocator::CheckSlots() const {
  size_t listed = 0;
  for (const StreamState& st : streams_) {
    for (const MetadataVector<Arena*>& list : st.arenas) listed += list.size();
  }
  if (listed != arenas_.size()) {
    return Fail("arenas listed by slots differ from the arenas");
  }
  for (const auto& arena : arenas_) {
    const auto& list =
        streams_[arena->stream_slot()].arenas[int(arena->kind())];
    if (std::find(list.begin(), list.end(), arena.get()) == list.end()) {
      return Fail("an arena is missing from its slot's list");
    }
  }
  for (uint32_t slot : order_.retired_slots()) {
    if (!order_.retired(slot)) return Fail("a live slot is listed retired");
  }
  for (uint32_t slot : order_.free_slots()) {
    const StreamState& st = streams_[slot];
    bool has_arenas = false;
    for (const MetadataVector<Arena*>& list : st.arenas) {
      has_arenas |= !list.empty();
    }
    if (!order_.retired(slot) || has_arenas) {
      return Fail("a free slot is live or still has arenas");
    }
  }
  size_t retired = 0;
  for (uint32_t slot = 0; slot < order_.num_slots(); ++slot) {
    retired += order_.retired(slot) ? 1 : 0;
  }
  if (order_.num_slots() != streams_.size()) {
    return Fail("the engine's slots differ from the stream order's");
  }
  if (order_.retired_slots().size() + order_.free_slots().size() != retired) {
    return Fail("retired slots are lost or listed twice");
  }
  return absl::OkStatus();
}

// Whether the reclaim queue (and the remainder bins) hold exactly the
// `queued_blocks` flagged queued, oldest first.
absl::Status DeviceAllocator::CheckReclaimQueue(size_t queued_blocks) const {
  size_t remainders = 0;
  for (const auto& arena : arenas_) remainders += arena->remainders().size();
  size_t queued = remainders;
  absl::Status status;
  ForEachDomain([&](const PageDomain& d) {
    queued += d.queue().size();
    for (const Block* b = d.queue().front(); b != nullptr;
         b = ReclaimQueue::next(b)) {
      const Block* n = ReclaimQueue::next(b);
      if (b->free_seq == 0 || (n != nullptr && n->free_seq < b->free_seq)) {
        status.Update(Fail("the reclaim queue is not oldest first"));
      }
      if (!d.Owns(b->arena)) {
        status.Update(Fail("a reclaim queue holds another page size's block"));
      }
    }
  });
  if (queued_blocks != queued) {
    return Fail("the reclaim queue holds blocks that are not candidates");
  }
  return status;
}

// Whether the live table, the byte stats and the page pool agree with the
// recount.
absl::Status DeviceAllocator::CheckStatsRecount(
    const InvariantRecount& recount) const {
  if (recount.live_blocks != int64_t(live_.size())) {
    return Fail("live table has entries that are not allocated blocks");
  }
  if (recount.allocated != stats_.allocated_bytes.All().current) {
    return Fail(absl::StrFormat("allocated_bytes %d != recount %d",
                                stats_.allocated_bytes.All().current,
                                recount.allocated));
  }
  if (recount.active != stats_.active_bytes.All().current) {
    return Fail("active_bytes differs from the recount");
  }
  if (recount.mapped_bytes != stats_.reserved_bytes.All().current) {
    return Fail(absl::StrFormat("reserved_bytes %d != mapped pages' bytes %d",
                                stats_.reserved_bytes.All().current,
                                recount.mapped_bytes));
  }
  absl::Status status;
  size_t created_bytes = 0;
  ForEachDomain([&](const PageDomain& d) {
    size_t mapped = 0;
    for (const auto& arena : arenas_) {
      if (d.Owns(arena.get())) mapped += arena->mapped_pages();
    }
    if (mapped + d.pool().idle_pages() != d.pool().created_pages()) {
      status.Update(Fail(absl::StrFormat(
          "pages of %s created != mapped + idle (a page was lost)",
          FormatBytes(d.page_size()))));
    }
    created_bytes += d.pool().created_pages() * d.page_size();
  });
  if (status.ok() && created_bytes != budget_.created_bytes) {
    status = Fail("the memory budget does not count the pages created");
  }
  return status;
}

// Whether the segment stats count the arenas holding pages, and the idle
// pages' peak is at least their count.
absl::Status DeviceAllocator::CheckSegmentsAndPages() const {
  int64_t segments[3] = {};
  for (const auto& arena : arenas_) {
    if (arena->mapped_pages() == 0) continue;
    ++segments[kPoolAll];
    ++segments[arena->kind() == ArenaKind::kSmall ? kPoolSmall : kPoolLarge];
  }
  for (int p = 0; p < 3; ++p) {
    const Stat s =
        p == kPoolAll ? stats_.segment.All() : stats_.segment.pool[p];
    if (s.current != segments[p] || s.peak < s.current) {
      return Fail(absl::StrFormat(
          "segment.%s current %d (peak %d) != arenas holding pages %d",
          kStatPoolNames[p], s.current, s.peak, segments[p]));
    }
  }
  bool below = false;
  ForEachDomain([&](const PageDomain& d) {
    below |= d.pool().idle_counts().peak < d.pool().idle_pages();
  });
  if (below) return Fail("the idle pages' peak is below their count");
  return absl::OkStatus();
}

}  // namespace fragfree
