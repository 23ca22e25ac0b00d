// DeviceAllocator (device_allocator.h), the composition root of one device:
// creation and teardown, Malloc/Free (quick cache, placement policy, page
// source), empty_cache and the memory limit. The parts it joins: StreamOrder
// (stream/), PlacementPolicy and PageSource (place/), StatsBook and the trace
// (obs/), arenas and the page pool (va/). The engine's other sides are in
// device_allocator_streams.cc (slots, record_stream, retired streams),
// device_allocator_obs.cc (stats, views, OOM facts), _graph_pools.cc,
// _invariants.cc, _sleep.cc and _ipc.cc.
// Thread-safety: see device_allocator.h.
#include "allocator/device_allocator.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "allocator/base/check.h"
#include "allocator/base/units.h"
#include "allocator/phys/page_sized_backend.h"
#include "allocator/place/best_fit_policy.h"

namespace fragfree {
namespace {
constexpr size_t kMaxArenasPerStreamKind = 8;

// The placement policy the options name: a new policy is a new
// PlacementPolicy in allocator/place/ and a line here.
std::unique_ptr<PlacementPolicy> MakePlacementPolicy(const Options& options) {
  using R = BestFitPolicy::ReclaimFirst;
  const R reclaim =
      options.reclaim_before_grow == Options::Reclaim::kAlways  ? R::kAlways
      : options.reclaim_before_grow == Options::Reclaim::kNever ? R::kNever
                                                                : R::kAuto;
  return std::make_unique<BestFitPolicy>(reclaim, options.grow_slack,
                                         options.grow_for_pending_frees,
                                         options.move_time_budget);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceAllocator>> DeviceAllocator::Create(
    int device, const Options& options,
    std::unique_ptr<PhysicalBackend> backend,
    std::unique_ptr<EventSource> events) {
  if (backend == nullptr || events == nullptr) {
    return absl::InvalidArgumentError(
        "DeviceAllocator needs a backend and an event source");
  }
  absl::StatusOr<std::unique_ptr<PhysicalBackend>> paged =
      PageSizedBackend::Wrap(std::move(backend), options.page_size_bytes,
                             device);
  if (!paged.ok()) return paged.status();
  Options o = options;
  if (absl::Status s = PageSizedBackend::CheckMultiple(
          **paged, o.large_page_bytes, device, "large_page_mb", "none");
      !s.ok()) {
    // The default asks for large pages only where the page divides them.
    if (o.large_page_bytes != Options::kDefaultLargePageBytes) return s;
    o.large_page_bytes = 0;
  }
  return std::unique_ptr<DeviceAllocator>(
      new DeviceAllocator(device, o, std::move(*paged), std::move(events)));
}

DeviceAllocator::DeviceAllocator(int device, const Options& options,
                                 std::unique_ptr<PhysicalBackend> backend,
                                 std::unique_ptr<EventSource> events)
    : device_(device),
      options_(options),
      backend_(std::make_unique<TimedBackend>(std::move(backend))),
      events_(std::move(events)),
      rounding_(options.rounding),
      page_size_(backend_->Granularity()),
      order_(events_.get()),
      request_sizes_(options.bucket_sample),
      placement_(MakePlacementPolicy(options)),
      base_pages_(
          new PageDomain(backend_.get(), page_size_, &budget_, SourceParts())),
      large_pages_(options.large_page_bytes <= page_size_
                       ? nullptr
                       : new PageDomain(backend_.get(),
                                        options.large_page_bytes, &budget_,
                                        SourceParts())) {
  PrepareMutexSleep();  // not in the first step whose threads contend
  MutexLock lock(&mu_);
  if (large_pages_ != nullptr) {
    PageDomain::Neighbours(*base_pages_, *large_pages_);
    large_route_size_ = large_pages_->page_size();
  }
  limit_request_bytes_ = options.memory_limit_bytes;
  trace_.Resize(options.trace_entries);
  limit_fraction_ = options.memory_fraction;
  RecomputeLimit();
}

DeviceAllocator::~DeviceAllocator() {
  MutexLock lock(&mu_);
  // Whatever the program still holds goes with the allocator: wait for the
  // device, free every block, unmap every page, release every handle.
  order_.fences().WaitAll().IgnoreError();
  base_pages_->source().UnmapDetached().IgnoreError();
  DrainQuickCaches();
  order_.pending().Clear(/*wait=*/true);
  live_.Clear();
  PageList pages;
  for (auto& arena : arenas_) {
    for (Block* b = const_cast<Block*>(arena->first_block()); b != nullptr;
         b = b->next) {
      if (!b->is_free()) {
        b->uses.reset();  // Release takes blocks without uses
        b = arena->Release(b, 0);
      }
    }
    for (const Block* b = arena->first_block(); b != nullptr; b = b->next) {
      arena->UnmapFreePages(b, SIZE_MAX, &pages).IgnoreError();
    }
    for (PageId p : pages) DomainOf(arena.get()).pool().ReturnIdle(p);
    pages.clear();
    if (arena->mapped_pages() > 0 || arena->detached_pages() > 0) {
      // The backend refused to unmap (a CUDA context already torn down at
      // exit, a lost device): leak the arena rather than abort the process.
      fprintf(stderr,
              "fragfree: device %d: %zu page(s) could not be unmapped at "
              "shutdown; leaving them to the driver\n",
              device_, arena->mapped_pages());
      arena.release();
    }
  }
  arenas_.clear();
  ForEachDomain([](PageDomain& d) { d.pool().ReleaseIdle(0).IgnoreError(); });
}

PageSource::Parts DeviceAllocator::SourceParts() {
  return PageSource::Parts{
      .pool = nullptr,  // the domain's
      .fences = &order_.fences(),
      .events = events_.get(),
      .trace = &trace_,
      .stats = &stats_,
      .policy = placement_.get(),
      .arenas = &arenas_,
      .queue = nullptr,  // the domain's
      .page_size = 0,    // the domain's
      .base_page_size = page_size_,
      .defer_unmap = options_.defer_unmap,
      .meter_cpu_time = options_.move_clock == Options::MoveClock::kCpu};
}

void DeviceAllocator::RecomputeLimit() {
  DeviceMemoryInfo info = backend_->MemoryInfo();
  size_t limit = size_t(double(info.total_bytes) * limit_fraction_);
  if (limit_request_bytes_ != 0) limit = std::min(limit, limit_request_bytes_);
  limit_bytes_ = AlignDown(limit, page_size_);
  budget_.limit_bytes = limit_bytes_;
}

absl::StatusOr<Block*> DeviceAllocator::Place(uint32_t slot, ArenaKind kind,
                                              size_t size, size_t requested,
                                              bool searched) {
  MetadataVector<Arena*>& list = streams_[slot].arenas[int(kind)];
  if (!searched) {
    if (Block* b = placement_->Find(list, size, requested).block) return b;
  }
  // Cached blocks, coalesced, may make room before the stream grows an arena.
  bool drained = false;
  for (Arena* arena : list) drained |= DrainQuickCache(arena);
  if (drained) {
    if (Block* b = placement_->Find(list, size, requested).block) return b;
  }
  if (list.size() >= kMaxArenasPerStreamKind) {
    return absl::ResourceExhaustedError(
        "address space of this stream's arenas is exhausted");
  }
  PageDomain& domain = DomainFor(kind);
  const size_t page = domain.page_size();
  size_t va = std::max(options_.va_factor * limit_bytes_, 64 * page);
  va = std::max(va, AlignUp(size, page) * 2);
  absl::StatusOr<std::unique_ptr<Arena>> arena =
      Arena::Create(domain.backend(), &domain.pool(), &blocks_, &domain.queue(),
                    va, kind, slot, order_.stream(slot));
  if (!arena.ok()) return arena.status();
  // Graph pools' arenas keep no cache: their blocks stay put for replays.
  (*arena)->quick().set_enabled(kind == ArenaKind::kSmall &&
                                streams_[slot].pool == nullptr);
  list.push_back(arena->get());
  arenas_.push_back(std::move(*arena));
  stats_.num_arenas = int64_t(arenas_.size());
  Block* b = list.back()->Allocate(size, requested);
  if (b == nullptr) {
    return absl::ResourceExhaustedError("request larger than an arena");
  }
  return b;
}

absl::Status DeviceAllocator::PlaceAndMap(uint32_t slot, ArenaKind kind,
                                          size_t rounded, size_t size,
                                          StreamHandle stream, Block** inout,
                                          bool searched, bool report_oom) {
  Block* block = *inout;
  RequestState request;
  int room_step = 0;
  for (bool retried = false;; retried = true) {
    absl::Status status;
    size_t missing = 0;
    const size_t arenas_before = arenas_.size();
    if (block == nullptr) {
      absl::StatusOr<Block*> placed =
          Place(slot, kind, rounded, size, /*searched=*/searched && !retried);
      if (placed.ok()) {
        block = *placed;
      } else {
        status = placed.status();
      }
    }
    if (block != nullptr) {
      if (block->arena->NeedsMapping(block, &missing)) {
        status = MapUnder(block, missing, &request);
        if (request.stranded_page_sizes) RetireLargePages();
        if (request.traded_page_sizes) NoteTrade(rounded);
        request.stranded_page_sizes = request.traded_page_sizes = false;
      }
      if (status.ok()) {
        *inout = block;
        return absl::OkStatus();
      }
      // Back into the free block it was carved from, which keeps its place in
      // the reclaim order (the block object still holds its free_seq).
      block->arena->Release(block, block->free_epoch, block->free_seq);
      block = nullptr;
    }
    // An arena made for this attempt goes again (its VA released).
    for (size_t i = arenas_.size(); i-- > arenas_before;) {
      if (arenas_[i]->IsEmpty() && arenas_[i]->mapped_pages() == 0) {
        ReleaseArena(arenas_[i].get()).IgnoreError();
      }
    }
    if (!absl::IsResourceExhausted(status)) return status;
    absl::StatusOr<bool> room = MakeRoom(&room_step, &request);
    if (!room.ok()) return room.status();
    if (*room) continue;
    if (!report_oom) return status;
    return OutOfMemory(size, rounded, stream, missing,
                       std::string(status.message()));
  }
}

bool DeviceAllocator::DrainQuickCache(Arena* arena) {
  if (arena->quick().count() == 0) return false;
  arena->quick().Drain(
      [&](Block* b) { arena->Release(b, b->free_epoch, b->free_seq); });
  return true;
}

bool DeviceAllocator::DrainQuickCaches() {
  bool drained = false;
  for (auto& arena : arenas_) drained |= DrainQuickCache(arena.get());
  return drained;
}

absl::StatusOr<bool> DeviceAllocator::MakeRoom(int* step,
                                               RequestState* request) {
  if (*step == 0) {  // blocks held in quick caches, coalesced
    *step = 1;
    if (DrainQuickCaches()) return true;
  }
  if (*step == 1) {  // other streams' uses of freed blocks, waited for
    *step = 2;
    if (capturing_ == 0 && !order_.pending().empty()) {
      if (!request->synced) ++stats_.num_sync_all_streams;
      request->synced = true;
      if (absl::Status s = ProcessPending(/*wait=*/true); !s.ok()) return s;
      DrainQuickCaches();  // pending frees may land in the caches
      return true;
    }
  }
  return false;
}

absl::StatusOr<void*> DeviceAllocator::Malloc(size_t size,
                                              StreamHandle stream) {
  if (size == 0) return nullptr;
  MutexLock lock(&mu_);
  // Timed only with time_calls (two clock reads: Options::time_calls).
  ScopedCallTimer timer(options_.time_calls ? &call_ticks_ : nullptr);
  stats_.alloc_cpu_calls += options_.time_calls;
  request_sizes_.Note(size);
  if (size > limit_bytes_) {
    return OutOfMemory(size, size, stream, 0,
                       absl::StrFormat("the request is larger than the memory "
                                       "limit of the device (%s)",
                                       FormatBytes(limit_bytes_)));
  }
  const size_t rounded = rounding_.Round(size);
  if (!order_.pending().empty() && capturing_ == 0) {
    if (absl::Status s = ProcessPending(false); !s.ok()) return s;
  }
  // Retired arenas emptied since: their pages become idle, usable below.
  if (order_.retired_dirty()) ReleaseRetiredArenas().IgnoreError();
  uint32_t slot;
  if (const RegionTag tag = CurrentRegionTag(); tag != kNoRegionTag) {
    // Inside a region: the tag's own arenas (docs/sleep.md).
    absl::StatusOr<uint32_t> tagged = TaggedSlot(tag, stream);
    if (!tagged.ok()) return tagged.status();
    slot = *tagged;
  } else {
    slot = capturing_ == 0 ? SlotFor(stream) : SlotDuringCapture(stream);
  }
  ArenaKind kind =
      size <= kSmallRequestLimit ? ArenaKind::kSmall : ArenaKind::kLarge;
  // A whole number of large pages: no page of it partly used (Note [Large
  // pages]). The size compare first: a division only for blocks that large.
  if (kind == ArenaKind::kLarge && large_route_size_ != 0 &&
      rounded >= large_route_size_ && rounded % large_route_size_ == 0) {
    kind = ArenaKind::kLargePages;
  }
  // Fast path: a block of exactly this size that this stream freed recently,
  // taken without reading it.
  Block* block = nullptr;
  Arena* arena = nullptr;
  uintptr_t addr = 0;
  if (rounded <= QuickCache::kMaxBlockSize) {
    for (Arena* a : streams_[slot].arenas[int(kind)]) {
      if ((block = a->quick().Pop(rounded, &addr)) != nullptr) {
        arena = a;
        break;
      }
    }
  }
  if (block != nullptr) {
    live_.Prefetch(addr);
    block->requested = size;
  } else {
    // Common path: the stream's arena has a mapped fit.
    const Placed placed =
        placement_->Find(streams_[slot].arenas[int(kind)], rounded, size);
    block = placed.block;
    arena = placed.arena;
    // The live-table insert below misses the caches once thousands of blocks
    // are live: start it under the checks, stats and trace before it.
    if (block != nullptr) live_.Prefetch(block->addr);
    // Pages missing under the block are mapped; so is the access of pages a
    // failed undo kept without it (Arena::MapPages), before the block is used
    // (Arena::NeedsMapping, from what Find counted). A cached block (above)
    // never lies over such pages: it was handed out, so all its pages were
    // set up, and only pages mapped anew can lose access.
    if (block == nullptr || placed.missing > 0 ||
        arena->HasPagesWithoutAccess(block)) {
      const bool large_pages = kind == ArenaKind::kLargePages;
      absl::Status s = PlaceAndMap(slot, kind, rounded, size, stream, &block,
                                   /*searched=*/true, !large_pages);
      // Large pages the device or the limit cannot hold: the base pages may
      // still fit the request (no large page is made of scattered memory).
      if (large_pages && absl::IsResourceExhausted(s)) {
        block = nullptr;
        s = PlaceAndMap(slot, ArenaKind::kLarge, rounded, size, stream, &block,
                        /*searched=*/false);
      }
      if (!s.ok()) return s;
      arena = block->arena;
    }
    addr = block->addr;
  }
  block->alloc_seq = ++alloc_seq_;
  trace_.RecordTagged(TraceAction::kAlloc, addr, size, stream);
  // rounded == block->size
  stats_.NoteAlloc(StatPoolOf(arena->kind()), int64_t(rounded), int64_t(size));
  live_.Insert(LiveEntry(addr, block));
  return reinterpret_cast<void*>(addr);
}

void DeviceAllocator::NoteTrade(size_t bytes) {
  traded_bytes_ += bytes;
  // Not a one-off (a step's first gathers on a new stream): memory the size
  // of the most ever allocated has gone between the sizes.
  if (traded_bytes_ >= size_t(stats_.allocated_high_water())) {
    RetireLargePages();
  }
}

void DeviceAllocator::RetireLargePages() {
  if (large_route_size_ == 0) return;
  large_route_size_ = 0;
  large_pages_->source().Retire();
}

void DeviceAllocator::NotePagesMapped(const Arena* arena, int64_t pages) {
  base_pages_->source().NoteMapped(arena, pages);
}

bool DeviceAllocator::MayMove(const Arena* arena) const {
  const Pool* pool = streams_[arena->stream_slot()].pool;
  return pool == nullptr || pool->released;  // else a graph may replay
}

absl::Status DeviceAllocator::MapUnder(Block* block, size_t count,
                                       RequestState* request) {
  auto may_move = [&](const Arena* a) {
    mu_.AssertHeld();
    return MayMove(a);
  };
  return DomainOf(block->arena)
      .source()
      .MapUnder(block, count,
                {capturing_ > 0, may_move, block->arena->stream_slot()},
                request);
}

void DeviceAllocator::ReturnBlockToArena(Block* block) {
  ReturnBlockToArena(block, block->arena, block->addr, block->size,
                     block->requested);
}

// Inline: Free's path (the only caller outside this file's wrapper above).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void DeviceAllocator::ReturnBlockToArena(
    Block* block, Arena* arena, uintptr_t addr, size_t size, size_t requested,
    bool traced) {
  stats_.NoteReturned(StatPoolOf(arena->kind()), int64_t(size));
  if (!traced) {
    trace_.Record(TraceAction::kFreeCompleted, addr, requested,
                  arena->stream());
  }
  const uint64_t epoch = order_.fences().StampFree(arena->stream_slot());
  const uint64_t seq = ++alloc_seq_;
  if (arena->quick().Push(block, addr, size, epoch, seq)) return;
  arena->Release(block, epoch, seq);
  if (order_.retired(arena->stream_slot())) order_.MarkRetiredDirty();
}

absl::Status DeviceAllocator::Free(void* ptr, bool* owned) {
  return FreeLive(ptr, owned, nullptr);
}

absl::Status DeviceAllocator::FreeOnStream(void* ptr, StreamHandle stream,
                                           bool* owned) {
  return FreeLive(ptr, owned, &stream);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status DeviceAllocator::FreeLive(
    void* ptr, bool* owned, const StreamHandle* also_used_by) {
  if (owned != nullptr) *owned = ptr != nullptr;
  if (ptr == nullptr) return absl::OkStatus();
  // The live-table probe misses the caches once thousands of blocks are live:
  // start it before the lock (LiveTable::Prefetch needs none).
  ABSL_TS_UNCHECKED_READ(live_).Prefetch(reinterpret_cast<uintptr_t>(ptr));
  MutexLock lock(&mu_);
  // Timed only with time_calls (two clock reads: Options::time_calls).
  ScopedCallTimer timer(options_.time_calls ? &call_ticks_ : nullptr);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  LiveEntry* it = live_.Find(addr);
  if (it == nullptr && owned != nullptr) {
    *owned = false;  // another device's, perhaps: not this one's error
    return absl::OkStatus();
  }
  stats_.alloc_cpu_calls += options_.time_calls;
  if (it == nullptr) {
    ++stats_.invalid_frees;
    return absl::InvalidArgumentError(DescribeBadPointer(addr));
  }
  // The free reads both lines of the block (its own bookkeeping, then
  // coalescing): start both misses now, under the erase and the checks.
  __builtin_prefetch(it->block(), 1);
  __builtin_prefetch(reinterpret_cast<const char*>(it->block()) + 64, 1);
  if (also_used_by != nullptr) AddUse(it, *also_used_by);
  // Shared with other processes (docs/ipc.md), or used by other streams.
  if (ipc_ != nullptr || it->has_uses()) [[unlikely]] {
    return FreeSharedOrUsed(addr);
  }
  FreeEntry(it);
  return absl::OkStatus();
}

absl::Status DeviceAllocator::FreeSharedOrUsed(uintptr_t addr) {
  LiveEntry* it = live_.Find(addr);
  if (ipc_ != nullptr) {  // shared with other processes: docs/ipc.md
    absl::StatusOr<bool> deferred = IpcDeferFree(addr);
    if (!deferred.ok()) return deferred.status();
    if (*deferred) return absl::OkStatus();
    it = live_.Find(addr);
  }
  if (!it->has_uses()) {
    FreeEntry(it);
    return absl::OkStatus();
  }
  Block* const block = it->block();
  // Other streams used it: record their events first, so that a failure leaves
  // the block live and nothing changed.
  UseEvents events;
  if (absl::Status s = RecordUseEvents(events_.get(), *block->uses, &events);
      !s.ok()) {
    return s;
  }
  if (block->uses->empty()) {
    block->uses.reset();
    FreeEntry(it);
    return absl::OkStatus();
  }
  const size_t requested = block->requested;
  Arena* const arena = block->arena;
  live_.Erase(it);
  const size_t size = block->size;  // == Round(requested)
  stats_.NoteFree(StatPoolOf(arena->kind()), int64_t(size), int64_t(requested));
  // It becomes reusable once the other streams' work completes.
  trace_.RecordTagged(TraceAction::kFreeRequested, addr, requested,
                      arena->stream());
  block->state = BlockState::kPendingFree;
  block->uses.reset();
  order_.pending().Add(block, std::move(events));
  return absl::OkStatus();
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void DeviceAllocator::FreeEntry(
    LiveEntry* it) {
  const uintptr_t addr = it->addr;
  Block* const block = it->block();
  live_.Erase(it);  // before the block's fields: under their miss
  Arena* const arena = block->arena;
  const size_t requested = block->requested;
  const size_t size = block->size;  // == Round(requested)
  stats_.NoteFree(StatPoolOf(arena->kind()), int64_t(size), int64_t(requested));
  // Requested and completed at once: one clock read for both.
  trace_.RecordTagged(TraceAction::kFreeRequested, TraceAction::kFreeCompleted,
                      addr, requested, arena->stream());
  ReturnBlockToArena(block, arena, addr, size, requested, /*traced=*/true);
  // The last block of a retired stream's arena: release the arena (an error
  // leaves it for a later try; the Free itself succeeded).
  if (order_.retired_dirty()) ReleaseRetiredArenas().IgnoreError();
}

absl::Status DeviceAllocator::EmptyCache() {
  MutexLock lock(&mu_);
  if (capturing_ > 0)
    return absl::OkStatus();  // PyTorch's rule: not in capture
  if (absl::Status s = ProcessPending(/*wait=*/true); !s.ok()) return s;
  DrainQuickCaches();  // after pending frees, which may land in the caches
  if (absl::Status s = order_.fences().WaitAll(); !s.ok()) return s;
  if (absl::Status s = base_pages_->source().UnmapDetached(); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReleaseRetiredArenas(); !s.ok()) return s;
  auto may_move = [&](const Arena* a) {
    mu_.AssertHeld();
    return MayMove(a);
  };
  absl::Status status;
  ForEachDomain([&](PageDomain& d) {
    PageList pages;
    absl::Status s = d.source().Reclaim(
        SIZE_MAX, /*wait=*/true, {/*capturing=*/false, may_move}, &pages);
    for (PageId p : pages) d.pool().ReturnIdle(p);
    if (s.ok()) s = d.pool().ReleaseIdle(0);
    status.Update(s);
  });
  return status;
}

absl::Status DeviceAllocator::SetMemoryLimit(size_t bytes) {
  MutexLock lock(&mu_);
  limit_request_bytes_ = bytes;
  RecomputeLimit();
  return absl::OkStatus();
}

absl::Status DeviceAllocator::SetMemoryFraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory fraction %g is outside (0, 1]", fraction));
  }
  MutexLock lock(&mu_);
  limit_fraction_ = fraction;
  RecomputeLimit();
  return absl::OkStatus();
}

size_t DeviceAllocator::memory_limit() const {
  MutexLock lock(&mu_);
  return limit_bytes_;
}

}  // namespace fragfree
