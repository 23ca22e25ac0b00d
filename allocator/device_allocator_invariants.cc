// DeviceAllocator::CheckInvariants: a full recount of the engine's state
// against its bookkeeping (blocks, pages, stats, caches, reclaim index, slots).
// Thread-safety: see device_allocator.h.
#include <algorithm>

#include "absl/strings/str_format.h"
#include "allocator/device_allocator.h"

namespace fragfree {

absl::Status DeviceAllocator::CheckInvariants() const {
  MutexLock lock(&mu_);
  auto fail = [](std::string what) {
    return absl::InternalError("invariant violated: " + what);
  };
  int64_t allocated = 0, active = 0, mapped_pages = 0, live_blocks = 0;
  size_t queued_blocks = 0;
  for (const auto& arena : arenas_) {
    uintptr_t expect = arena->base();
    size_t free_blocks = 0, cached_blocks = 0, cached_bytes = 0;
    const Block* prev = nullptr;
    const bool paused = IsPausedArena(arena.get());
    if (paused && (arena->quick().enabled() || arena->quick().count() > 0)) {
      return fail("a paused arena caches blocks");
    }
    for (const Block* b = arena->first_block(); b != nullptr; b = b->next) {
      if (b->addr != expect) {
        return fail(absl::StrFormat("gap or overlap at 0x%x (expected 0x%x)",
                                    b->addr, expect));
      }
      if (b->prev != prev) return fail("broken prev link");
      if (b->size == 0 || b->size % kMinBlockSize != 0) {
        return fail("block size not a positive multiple of 512");
      }
      if (b->is_free()) {
        ++free_blocks;
        if (prev != nullptr && prev->is_free()) {
          return fail("two adjacent free blocks (missed coalescing)");
        }
      } else if (b->state == BlockState::kCached) {
        ++cached_blocks;
        cached_bytes += b->size;
        if (!arena->IsFullyMapped(b)) {
          return fail(absl::StrFormat("cached block 0x%x is not fully mapped",
                                      b->addr));
        }
        if (arena->HasPagesWithoutAccess(b)) {
          return fail(absl::StrFormat(
              "cached block 0x%x lies on a page without access", b->addr));
        }
      } else if (paused) {
        // A paused tag's live blocks keep their addresses, not their pages.
        active += int64_t(b->size);
        if (b->state == BlockState::kAllocated) {
          allocated += int64_t(b->size);
          ++live_blocks;
          const LiveEntry* it = live_.Find(b->addr);
          if (it == nullptr || it->block != b || it->arena != arena.get()) {
            return fail("paused allocated block missing from the live table");
          }
        }
      } else {
        if (!arena->IsFullyMapped(b)) {
          return fail(
              absl::StrFormat("live block 0x%x is not fully mapped", b->addr));
        }
        if (arena->HasPagesWithoutAccess(b)) {
          return fail(absl::StrFormat(
              "live block 0x%x lies on a page without access", b->addr));
        }
        active += int64_t(b->size);
        if (b->state == BlockState::kAllocated) {
          allocated += int64_t(b->size);
          ++live_blocks;
          const LiveEntry* it = live_.Find(b->addr);
          if (it == nullptr || it->block != b) {
            return fail("allocated block missing from the live table");
          }
          if (it->arena != arena.get() || it->requested != b->requested ||
              bool(it->has_uses) != (b->uses != nullptr) ||
              b->size != rounding_.Round(b->requested)) {
            return fail(absl::StrFormat(
                "live table entry of 0x%x differs from its block", b->addr));
          }
        }
      }
      expect = b->end();
      prev = b;
    }
    if (expect != arena->base() + arena->size()) {
      return fail("blocks do not reach the end of the arena");
    }
    if (free_blocks != arena->free_index().count()) {
      return fail("free index count differs from the free blocks");
    }
    if (cached_blocks != arena->quick().count() ||
        cached_bytes != arena->quick().bytes()) {
      return fail("quick cache differs from the cached blocks");
    }
    for (const Block* b = arena->first_block(); b != nullptr; b = b->next) {
      const bool reclaimable = b->is_free() && arena->ReclaimablePages(b) > 0;
      if (b->queued != reclaimable) {
        return fail(absl::StrFormat("block 0x%x is %sin the reclaim queue",
                                    b->addr, b->queued ? "" : "not "));
      }
      queued_blocks += reclaimable;
    }
    mapped_pages += int64_t(arena->mapped_pages());
  }
  // Arenas and slots: every arena is listed by its slot; retired slots are
  // either waiting for their arenas to empty or free (no arena left).
  size_t listed = 0;
  for (const StreamState& st : streams_) {
    for (const MetadataVector<Arena*>& list : st.arenas) listed += list.size();
  }
  if (listed != arenas_.size()) {
    return fail("arenas listed by slots differ from the arenas");
  }
  for (const auto& arena : arenas_) {
    const auto& list =
        streams_[arena->stream_slot()].arenas[int(arena->kind())];
    if (std::find(list.begin(), list.end(), arena.get()) == list.end()) {
      return fail("an arena is missing from its slot's list");
    }
  }
  for (uint32_t slot : retired_slots_) {
    if (!streams_[slot].retired) return fail("a live slot is listed retired");
  }
  for (uint32_t slot : free_slots_) {
    const StreamState& st = streams_[slot];
    bool has_arenas = false;
    for (const MetadataVector<Arena*>& list : st.arenas) {
      has_arenas |= !list.empty();
    }
    if (!st.retired || has_arenas) {
      return fail("a free slot is live or still has arenas");
    }
  }
  if (retired_slots_.size() + free_slots_.size() !=
      size_t(std::count_if(streams_.begin(), streams_.end(),
                           [](const StreamState& st) { return st.retired; }))) {
    return fail("retired slots are lost or listed twice");
  }
  size_t remainders = 0;
  for (const auto& arena : arenas_) remainders += arena->remainders().size();
  if (queued_blocks != reclaim_queue_.size() + remainders) {
    return fail("the reclaim queue holds blocks that are not candidates");
  }
  for (const Block* b = reclaim_queue_.front(); b != nullptr;
       b = ReclaimQueue::next(b)) {
    const Block* n = ReclaimQueue::next(b);
    if (b->free_seq == 0 || (n != nullptr && n->free_seq < b->free_seq)) {
      return fail("the reclaim queue is not oldest first");
    }
  }
  if (live_blocks != int64_t(live_.size())) {
    return fail("live table has entries that are not allocated blocks");
  }
  if (allocated != stats_.allocated_bytes.pool[kPoolAll].current) {
    return fail(absl::StrFormat("allocated_bytes %d != recount %d",
                                stats_.allocated_bytes.pool[kPoolAll].current,
                                allocated));
  }
  if (active != stats_.active_bytes.pool[kPoolAll].current) {
    return fail("active_bytes differs from the recount");
  }
  if (mapped_pages * int64_t(page_size_) !=
      stats_.reserved_bytes.pool[kPoolAll].current) {
    return fail(absl::StrFormat("reserved_bytes %d != mapped pages x page %d",
                                stats_.reserved_bytes.pool[kPoolAll].current,
                                mapped_pages * int64_t(page_size_)));
  }
  if (size_t(mapped_pages) + pages_.idle_pages() != pages_.created_pages()) {
    return fail("pages created != mapped + idle (a page was lost)");
  }
  int64_t segments[3] = {};
  for (const auto& arena : arenas_) {
    if (arena->mapped_pages() == 0) continue;
    ++segments[kPoolAll];
    ++segments[arena->kind() == ArenaKind::kSmall ? kPoolSmall : kPoolLarge];
  }
  for (int p = 0; p < 3; ++p) {
    const Stat& s = stats_.segment.pool[p];
    if (s.current != segments[p] || s.peak < s.current) {
      return fail(absl::StrFormat(
          "segment.%s current %d (peak %d) != arenas holding pages %d",
          kStatPoolNames[p], s.current, s.peak, segments[p]));
    }
  }
  if (pages_.idle_counts().peak < pages_.idle_pages()) {
    return fail("the idle pages' peak is below their count");
  }
  return absl::OkStatus();
}

}  // namespace fragfree
