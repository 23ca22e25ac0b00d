// PageSource (page_source.h): mapping pages under a block, reclaiming whole
// free pages, and giving back what a failed request took.
// Thread-safety: see page_source.h.
#include "allocator/place/page_source.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "allocator/base/call_clock.h"
#include "allocator/base/units.h"

namespace fragfree {

void PageSource::TraceRuns(TraceAction action, StreamHandle stream,
                           bool tagged) {
  for (const auto& [addr, bytes] : runs_) {
    if (tagged) {
      p_.trace->RecordTagged(action, addr, bytes, stream);
    } else {
      p_.trace->Record(action, addr, bytes, stream);
    }
  }
}

absl::Status PageSource::Reclaim(size_t want, bool wait, const Scope& scope,
                                 PageList* out,
                                 MetadataVector<MovedPage>* moved) {
  if (scope.capturing || out->size() >= want) return absl::OkStatus();
  absl::Status status;
  // Takes pages from `b`; false to stop (enough pages, or an error).
  auto take = [&](Arena* arena, Block* b) {
    // Pages of another size (the device's other PageSource) cannot serve.
    if (arena->pool() != p_.pool || !scope.may_move(arena)) return true;
    const uint32_t slot = arena->stream_slot();
    // Stream order makes a hole of the request's own stream safe to reuse at
    // once; only its old address must wait (Note [Moving a page without
    // waiting]).
    bool detach = false;
    if (!p_.fences->IsComplete(slot, b->free_epoch)) {
      if (p_.defer_unmap && slot == scope.slot) {
        detach = true;
      } else {
        if (!wait || p_.events->IsCapturing(arena->stream())) return true;
        status = p_.fences->WaitFor(slot, b->free_epoch);
        if (!status.ok()) return false;
      }
    }
    const size_t got_before = out->size();
    runs_.clear();
    moved_indices_.clear();
    VaRuns* runs = p_.trace->enabled() ? &runs_ : nullptr;
    MetadataVector<size_t>* indices =
        moved != nullptr ? &moved_indices_ : nullptr;
    status = detach ? arena->DetachFreePages(b, want - out->size(),
                                             b->free_epoch, out, runs, indices)
                    : arena->UnmapFreePages(b, want - out->size(), out, runs,
                                            indices);
    NoteMapped(arena, -int64_t(out->size() - got_before));
    for (size_t k = 0; moved != nullptr && k < moved_indices_.size(); ++k) {
      moved->push_back({arena, moved_indices_[k], (*out)[got_before + k]});
    }
    TraceRuns(TraceAction::kSegmentUnmap, arena->stream(), /*tagged=*/false);
    return status.ok() && out->size() < want;
  };
  p_.policy->ForEachReclaimable(*p_.arenas, *p_.queue, take);
  return status;
}

size_t PageSource::GiveUpPages(size_t bytes, const Scope& scope) {
  if (scope.capturing) return 0;
  // A page moved without waiting may still be mapped at its old address
  // (detached): those mappings go first, or its handle could not be released.
  if (!UnmapDetached().ok()) return 0;
  const size_t want = (bytes + p_.page_size - 1) / p_.page_size;
  const uint64_t released_before = p_.pool->total_released();
  const size_t idle = p_.pool->idle_pages();
  // A page the backend refuses to release stays idle (as in ReleaseIdle).
  p_.pool->ReleaseIdle(idle > want ? idle - want : 0).IgnoreError();
  size_t released = size_t(p_.pool->total_released() - released_before);
  if (released < want) {
    PageList pages;
    // Waited for, not detached: a released page must be unmapped everywhere.
    Scope waiting = scope;
    waiting.slot = kNoSlot;
    Reclaim(want - released, /*wait=*/true, waiting, &pages).IgnoreError();
    for (PageId p : pages) {
      if (p_.pool->ReleasePage(p).ok()) ++released;  // else it stays idle
    }
  }
  return released * p_.page_size;
}

absl::Status PageSource::CreateUpTo(size_t count, PageList* pages) {
  PageId page;
  while (pages->size() < count) {
    absl::Status created = p_.pool->CreatePage(&page);
    if (absl::IsResourceExhausted(created)) return absl::OkStatus();
    if (!created.ok()) return created;
    pages->push_back(page);
    created_pages_.push_back(page);
  }
  return absl::OkStatus();
}

size_t PageSource::RoomFor(size_t pages) const {
  // Above a lowered limit, what the pools hold over it goes too.
  return std::max(pages * p_.page_size, p_.pool->BytesOverLimit(pages));
}

bool PageSource::HoldsUnusedBytes(size_t bytes) const {
  const size_t want = (bytes + p_.page_size - 1) / p_.page_size;
  size_t pages = p_.pool->idle_pages();
  for (const Block* b = p_.queue->front(); pages < want && b != nullptr;
       b = ReclaimQueue::next(b)) {
    pages += b->arena->ReclaimablePages(b);
  }
  for (size_t i = 0; pages < want && i < p_.arenas->size(); ++i) {
    const Arena* arena = (*p_.arenas)[i].get();
    if (arena->pool() != p_.pool) continue;
    arena->remainders().ForEachLargestFirst([&](Block* b) {
      pages += arena->ReclaimablePages(b);
      return pages < want;
    });
  }
  return pages >= want;
}

void PageSource::MeterMoves(int64_t start_ns, int64_t settled_ns, size_t moved,
                            size_t count) {
  if (settled_ns == start_ns && moved == 0) return;
  const int64_t now_ns = int64_t(CallTicksSlow());
  double ns = double(settled_ns - start_ns);
  if (count > 0) {
    ns += double(now_ns - settled_ns) * double(moved) / double(count);
  }
  move_meter_.Add(ns, MeterNow(now_ns));
  p_.stats->NoteMoveTime(ns);
}

absl::Status PageSource::MapUnder(Block* block, size_t count,
                                  const Scope& scope, Request* request) {
  const int64_t start_ns = int64_t(CallTicksSlow());
  const bool settles = block->arena->AnyDetachedIn(block->addr, block->size);
  absl::Status settled = SettleDetached(block, scope);
  const int64_t settled_ns = settles ? int64_t(CallTicksSlow()) : start_ns;
  if (!settled.ok()) {
    MeterMoves(start_ns, settled_ns, /*moved=*/0, count);
    return settled;
  }
  PageList& pages = map_pages_;
  pages.clear();
  created_pages_.clear();
  moved_pages_.clear();
  PageId page;
  while (pages.size() < count && p_.pool->TakeIdle(&page)) {
    pages.push_back(page);
  }
  absl::Status status;
  GrowthFacts facts{.allocated_high_water = p_.stats->allocated_high_water(),
                    .allocated_bytes = p_.stats->allocated_bytes.All().current,
                    .active_high_water = p_.stats->active_high_water(),
                    .active_bytes = p_.stats->active_bytes.All().current,
                    .block_bytes = block->size,
                    .mapped_bytes = p_.stats->mapped_bytes.current,
                    .bytes_to_map = count * p_.page_size};
  bool reclaim_first = false;
  // Whether the move time budget alone made this request grow (counted
  // below, in the pages it creates).
  bool grows_for_budget = false;
  if (pages.size() < count && !scope.capturing) {
    facts.move_time_fraction = move_meter_.Fraction(MeterNow(start_ns));
    reclaim_first = p_.policy->ShouldReclaimFirst(facts);
    if (!reclaim_first && facts.move_time_fraction > 0) {
      GrowthFacts unmetered = facts;
      unmetered.move_time_fraction = 0;
      grows_for_budget = p_.policy->ShouldReclaimFirst(unmetered);
    }
  }
  if (reclaim_first) {
    status = p_.fences->PollAndFence();
    // Holes whose last use the GPU has not reached yet are waited for (their
    // stream's fence): on a GPU running behind the CPU, the holes freed this
    // step are exactly the ones whose pages the request needs. See Note
    // [Reclaim before grow].
    if (status.ok()) {
      status = Reclaim(count, /*wait=*/true, scope, &pages, &moved_pages_);
    }
  }
  // The other page size's unused pages: taken rather than grow when the
  // policy reclaims first (or that size is retired); their lying unused while
  // this size grows or takes them is the two sizes trading memory.
  // (A retired neighbour's pages go however few: nothing else will use them.)
  if (status.ok() && pages.size() < count && !scope.capturing &&
      neighbour_ != nullptr &&
      neighbour_->HoldsUnusedBytes(
          neighbour_->retired_ ? 1 : (count - pages.size()) * p_.page_size)) {
    if (!neighbour_->retired_) {
      request->traded_page_sizes |= reclaim_first;
      request->stranded_page_sizes |= grows_for_budget;
    }
    if (reclaim_first || neighbour_->retired_) {
      neighbour_->GiveUpPages(RoomFor(count - pages.size()), scope);
    }
  }
  // Until the limit or the device is full: reclaim below.
  if (status.ok()) status = CreateUpTo(count, &pages);
  // Under pressure: PyTorch's release_cached_blocks and retry, counted once
  // per request (Note [Retries and OOMs] in docs/stats.md).
  if (status.ok() && pages.size() < count && !scope.capturing) {
    if (!request->retried) ++p_.stats->num_alloc_retries;
    request->retried = true;
    status = p_.fences->PollAndFence();
    if (status.ok()) {
      status = Reclaim(count, /*wait=*/false, scope, &pages, &moved_pages_);
    }
    if (status.ok() && pages.size() < count) {
      if (!request->synced) ++p_.stats->num_sync_all_streams;
      request->synced = true;
      status = Reclaim(count, /*wait=*/true, scope, &pages, &moved_pages_);
    }
    // Pages of the other size that nothing uses make room for new ones.
    if (status.ok() && pages.size() < count && neighbour_ != nullptr) {
      if (neighbour_->GiveUpPages(RoomFor(count - pages.size()), scope) > 0) {
        status = CreateUpTo(count, &pages);
      }
    }
  }
  if (status.ok() && pages.size() < count) {
    status = absl::ResourceExhaustedError(absl::StrFormat(
        "%d more page(s) of %s were needed, and every whole free page has "
        "been reclaimed%s",
        count - pages.size(), FormatBytes(p_.page_size),
        scope.capturing ? " (except during CUDA graph capture, when "
                          "nothing is unmapped)"
                        : ""));
  }
  runs_.clear();
  if (status.ok()) {
    const size_t offered = pages.size();
    status = block->arena->MapPages(block, pages,
                                    p_.trace->enabled() ? &runs_ : nullptr);
    // Pages a failed undo left mapped are the arena's now (still reserved).
    NoteMapped(block->arena, int64_t(offered - pages.size()));
  }
  MeterMoves(start_ns, settled_ns, moved_pages_.size(), count);
  if (!status.ok()) {
    GiveBack(pages);
    return status;
  }
  NoteMapped(block->arena, int64_t(count));
  p_.stats->NoteRemapped(int64_t(moved_pages_.size()));
  // In pages of the stats' page_size (the base page), whatever this size.
  if (grows_for_budget) {
    p_.stats->NoteMoveBudgetPages(created_pages_.size() * p_.page_size /
                                  p_.base_page_size);
  }
  TraceRuns(TraceAction::kSegmentMap, block->arena->stream(), /*tagged=*/true);
  return absl::OkStatus();
}

void PageSource::GiveBack(const PageList& pages) {
  // Which of `pages` are new, moved or idle: looked up by id (MapPages removes
  // from the list a page its failed undo kept mapped under the block).
  PageList held(pages.begin(), pages.end());
  std::sort(held.begin(), held.end());
  auto is_held = [&](PageId p) {
    return std::binary_search(held.begin(), held.end(), p);
  };
  PageList special;  // new or moved
  // New pages go back to the device, the last made first (so the pool's ids
  // are as they were); one the backend refuses to release stays idle.
  for (size_t i = created_pages_.size(); i-- > 0;) {
    const PageId p = created_pages_[i];
    special.push_back(p);
    if (is_held(p)) p_.pool->ReleasePage(p).IgnoreError();
  }
  // Moved pages go back into the free blocks they came from, arena by arena
  // in index order; one that cannot be mapped there again is released.
  std::sort(moved_pages_.begin(), moved_pages_.end(),
            [](const MovedPage& a, const MovedPage& b) {
              return a.arena != b.arena ? a.arena < b.arena : a.index < b.index;
            });
  MetadataVector<std::pair<size_t, PageId>> run;
  PageList failed;
  int64_t moved_back = 0;
  for (size_t i = 0; i < moved_pages_.size();) {
    Arena* const arena = moved_pages_[i].arena;
    run.clear();
    for (; i < moved_pages_.size() && moved_pages_[i].arena == arena; ++i) {
      special.push_back(moved_pages_[i].page);
      if (!is_held(moved_pages_[i].page)) continue;
      run.emplace_back(moved_pages_[i].index, moved_pages_[i].page);
      ++moved_back;
    }
    runs_.clear();
    const size_t restored = arena->RestorePages(
        run, &failed, p_.trace->enabled() ? &runs_ : nullptr);
    NoteMapped(arena, int64_t(restored));
    TraceRuns(TraceAction::kSegmentMap, arena->stream(), /*tagged=*/false);
  }
  // Moved pages a failed undo left under the block were remapped there.
  p_.stats->NoteRemapped(int64_t(moved_pages_.size()) - moved_back);
  for (PageId p : failed) p_.pool->ReleasePage(p).IgnoreError();
  // Idle pages are idle again, in the order they were taken from the pool.
  std::sort(special.begin(), special.end());
  for (size_t i = pages.size(); i-- > 0;) {
    if (!std::binary_search(special.begin(), special.end(), pages[i])) {
      p_.pool->ReturnIdle(pages[i]);
    }
  }
  created_pages_.clear();
  moved_pages_.clear();
}

absl::StatusOr<bool> PageSource::FencePassed(uint32_t slot, uint64_t epoch) {
  if (p_.fences->IsComplete(slot, epoch)) return true;
  if (absl::Status s = p_.fences->WaitFor(slot, epoch); !s.ok()) return s;
  return true;
}

absl::Status PageSource::UnmapDetached(Arena* arena) {
  if (arena->detached_pages() == 0) return absl::OkStatus();
  const uint32_t slot = arena->stream_slot();
  return arena->UnmapAllDetached(
      [&](uint64_t epoch) { return FencePassed(slot, epoch); });
}

absl::Status PageSource::UnmapDetached() {
  for (const auto& arena : *p_.arenas) {
    if (absl::Status s = UnmapDetached(arena.get()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PageSource::SettleDetached(const Block* block,
                                        const Scope& scope) {
  // Old addresses elsewhere stay mapped until they are needed (Note [Moving a
  // page without waiting] in docs/design.md): only those under the block must
  // go before pages are mapped there.
  Arena* const arena = block->arena;
  if (!arena->AnyDetachedIn(block->addr, block->size)) return absl::OkStatus();
  if (!scope.capturing) {
    if (absl::Status s = p_.fences->PollAndFence(); !s.ok()) return s;
  }
  const uint32_t slot = arena->stream_slot();
  return arena->UnmapDetached(block->addr, block->size, [&](uint64_t epoch) {
    return FencePassed(slot, epoch);
  });
}

absl::Status PageSource::UnmapFree(Arena* arena, const Block* block,
                                   size_t max_pages) {
  PageList pages;
  runs_.clear();
  absl::Status status = arena->UnmapFreePages(
      block, max_pages, &pages, p_.trace->enabled() ? &runs_ : nullptr);
  NoteMapped(arena, -int64_t(pages.size()));
  for (PageId p : pages) p_.pool->ReturnIdle(p);
  TraceRuns(TraceAction::kSegmentUnmap, arena->stream(), /*tagged=*/false);
  return status;
}

}  // namespace fragfree
