// DeviceAllocator (device_allocator.h): creation, placement and mapping,
// Malloc/Free, reclaim, streams, limits, stats. Graph pools are in
// device_allocator_graph_pools.cc, CheckInvariants in
// device_allocator_invariants.cc. Thread-safety: see device_allocator.h.
#include "allocator/device_allocator.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "allocator/base/check.h"
#include "allocator/base/units.h"

namespace fragfree {
namespace {
constexpr size_t kMaxArenasPerStreamKind = 8;

int PoolOf(ArenaKind kind) {
  return kind == ArenaKind::kSmall ? kPoolSmall : kPoolLarge;
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
  return std::unique_ptr<DeviceAllocator>(new DeviceAllocator(
      device, options, std::move(backend), std::move(events)));
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
      fences_(events_.get()),
      pages_(backend_.get(), 0),
      request_sizes_(options.bucket_sample) {
  MutexLock lock(&mu_);
  limit_request_bytes_ = options.memory_limit_bytes;
  trace_.Resize(options.trace_entries);
  limit_fraction_ = options.memory_fraction;
  RecomputeLimit();
}

DeviceAllocator::~DeviceAllocator() {
  MutexLock lock(&mu_);
  // Whatever the program still holds goes with the allocator: wait for the
  // device, free every block, unmap every page, release every handle.
  fences_.WaitAll().IgnoreError();
  DrainQuickCaches();
  for (PendingFree& p : pending_) {
    for (EventId e : p.events) {
      events_->Synchronize(e).IgnoreError();
      events_->Release(e);
    }
  }
  pending_.clear();
  live_.Clear();
  PageList pages;
  for (auto& arena : arenas_) {
    for (Block* b = const_cast<Block*>(arena->first_block()); b != nullptr;
         b = b->next) {
      if (!b->is_free()) b = arena->Release(b, 0);
    }
    for (const Block* b = arena->first_block(); b != nullptr; b = b->next) {
      arena->UnmapFreePages(b, SIZE_MAX, &pages).IgnoreError();
    }
    for (PageId p : pages) pages_.ReturnIdle(p);
    pages.clear();
    if (arena->mapped_pages() > 0) {
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
  pages_.ReleaseIdle(0).IgnoreError();
}

void DeviceAllocator::RecomputeLimit() {
  DeviceMemoryInfo info = backend_->MemoryInfo();
  size_t limit = size_t(double(info.total_bytes) * limit_fraction_);
  if (limit_request_bytes_ != 0) limit = std::min(limit, limit_request_bytes_);
  limit_bytes_ = AlignDown(limit, page_size_);
  pages_.set_limit_bytes(limit_bytes_);
}

uint32_t DeviceAllocator::NewSlot(StreamHandle stream, const Pool* pool) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    // A retired slot whose arenas are all released: nothing refers to it.
    slot = free_slots_.back();
    free_slots_.pop_back();
    fences_.ReuseSlot(slot, stream);
    streams_[slot] = StreamState();
  } else {
    slot = fences_.AddStream(stream);
    streams_.emplace_back();
  }
  streams_[slot].pool = pool;
  stats_.num_streams = int64_t(streams_.size() - free_slots_.size());
  return slot;
}

uint32_t DeviceAllocator::SlotForSlow(StreamHandle stream) {
  auto [it, inserted] = slot_of_.try_emplace(stream, 0);
  if (inserted) it->second = NewSlot(stream, nullptr);
  last_stream_ = stream;
  last_slot_ = it->second;
  return it->second;
}

uint32_t DeviceAllocator::SlotDuringCapture(StreamHandle stream) {
  for (auto& pool : pools_) {
    if (!pool->capturing || !pool->filter || !pool->filter(stream)) continue;
    auto [it, inserted] = pool->slots.try_emplace(stream, 0);
    if (inserted) it->second = NewSlot(stream, pool.get());
    return it->second;
  }
  return SlotFor(stream);
}

absl::StatusOr<Block*> DeviceAllocator::Place(uint32_t slot, ArenaKind kind,
                                              size_t size, size_t requested) {
  MetadataVector<Arena*>& list = streams_[slot].arenas[int(kind)];
  for (Arena* arena : list) {
    if (Block* b = arena->Allocate(size, requested)) return b;
  }
  // Cached blocks, coalesced, may make room before the stream grows an arena.
  bool drained = false;
  for (Arena* arena : list) drained |= DrainQuickCache(arena);
  for (Arena* arena : list) {
    if (!drained) break;
    if (Block* b = arena->Allocate(size, requested)) return b;
  }
  if (list.size() >= kMaxArenasPerStreamKind) {
    return absl::ResourceExhaustedError(
        "address space of this stream's arenas is exhausted");
  }
  size_t va = std::max(options_.va_factor * limit_bytes_, 64 * page_size_);
  va = std::max(va, AlignUp(size, page_size_) * 2);
  absl::StatusOr<std::unique_ptr<Arena>> arena =
      Arena::Create(backend_.get(), &pages_, &blocks_, &reclaim_queue_, va,
                    kind, slot, fences_.stream(slot));
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
                                          StreamHandle stream, Block** inout) {
  Block* block = *inout;
  RequestState request;
  for (bool retried = false;; retried = true) {
    absl::Status status;
    size_t missing = 0;
    const size_t arenas_before = arenas_.size();
    if (block == nullptr) {
      absl::StatusOr<Block*> placed = Place(slot, kind, rounded, size);
      if (placed.ok()) {
        block = *placed;
      } else {
        status = placed.status();
      }
    }
    if (block != nullptr) {
      missing = block->arena->UnmappedPages(block);
      if (missing > 0 || block->arena->HasPagesWithoutAccess(block)) {
        status = MapUnder(block, missing, &request);
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
    // Blocks held in quick caches, coalesced, may make room.
    if (!retried && DrainQuickCaches()) continue;
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

absl::StatusOr<void*> DeviceAllocator::Malloc(size_t size,
                                              StreamHandle stream) {
  if (size == 0) return nullptr;
  MutexLock lock(&mu_);
  ScopedCallTimer timer(&call_ticks_);
  ++stats_.alloc_cpu_calls;
  request_sizes_.Note(size);
  if (size > limit_bytes_) {
    return OutOfMemory(size, size, stream, 0,
                       absl::StrFormat("the request is larger than the memory "
                                       "limit of the device (%s)",
                                       FormatBytes(limit_bytes_)));
  }
  const size_t rounded = rounding_.Round(size);
  if (!pending_.empty() && capturing_ == 0) {
    if (absl::Status s = ProcessPending(false); !s.ok()) return s;
  }
  // Retired arenas emptied since: their pages become idle, usable below.
  if (retired_dirty_) ReleaseRetiredArenas().IgnoreError();
  uint32_t slot;
  if (const RegionTag tag = CurrentRegionTag(); tag != kNoRegionTag) {
    // Inside a region: the tag's own arenas (docs/sleep.md).
    absl::StatusOr<uint32_t> tagged = TaggedSlot(tag, stream);
    if (!tagged.ok()) return tagged.status();
    slot = *tagged;
  } else {
    slot = capturing_ == 0 ? SlotFor(stream) : SlotDuringCapture(stream);
  }
  const ArenaKind kind =
      size <= kSmallRequestLimit ? ArenaKind::kSmall : ArenaKind::kLarge;
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
    block->requested = size;
  } else {
    // Common path: the stream's arena has a mapped fit.
    for (Arena* a : streams_[slot].arenas[int(kind)]) {
      if ((block = a->Allocate(rounded, size)) != nullptr) break;
    }
    // Pages missing under the block are mapped; so is the access of pages a
    // failed undo kept without it (Arena::MapPages), before the block is used.
    // A cached block (above) never lies over such pages: it was handed out,
    // so all its pages were set up, and only pages mapped anew can lose access.
    if (block == nullptr || block->arena->UnmappedPages(block) > 0 ||
        block->arena->HasPagesWithoutAccess(block)) {
      if (absl::Status s =
              PlaceAndMap(slot, kind, rounded, size, stream, &block);
          !s.ok()) {
        return s;
      }
    }
    arena = block->arena;
    addr = block->addr;
  }
  block->alloc_seq = ++alloc_seq_;
  live_.Insert(LiveEntry{addr, block, arena, size, 0});
  trace_.RecordTagged(TraceAction::kAlloc, addr, size, stream);
  const int pool = PoolOf(arena->kind());
  const int64_t bytes = int64_t(rounded);  // == block->size
  stats_.allocation.Increase(pool, 1);
  stats_.allocated_bytes.Increase(pool, bytes);
  stats_.active.Increase(pool, 1);
  stats_.active_bytes.Increase(pool, bytes);
  stats_.requested_bytes.Increase(pool, int64_t(size));
  allocated_high_water_ = std::max(
      allocated_high_water_, stats_.allocated_bytes.pool[kPoolAll].current);
  return reinterpret_cast<void*>(addr);
}

void DeviceAllocator::NotePagesMapped(const Arena* arena, int64_t pages) {
  const int pool = PoolOf(arena->kind());
  const int64_t bytes = pages * int64_t(page_size_);
  // A segment is an arena holding mapped pages (PyTorch: a cudaMalloc).
  const size_t now = arena->mapped_pages();
  const size_t before = size_t(int64_t(now) - pages);
  if (before == 0 && now > 0) stats_.segment.Increase(pool, 1);
  if (before > 0 && now == 0) stats_.segment.Decrease(pool, 1);
  if (pages > 0) {
    stats_.reserved_bytes.Increase(pool, bytes);
    stats_.mapped_bytes.Increase(bytes);
    stats_.pages_mapped += pages;
    stats_.num_device_alloc += pages;
  } else if (pages < 0) {
    stats_.reserved_bytes.Decrease(pool, -bytes);
    stats_.mapped_bytes.Decrease(-bytes);
    stats_.pages_unmapped += -pages;
    stats_.num_device_free += -pages;
  }
}

absl::Status DeviceAllocator::Reclaim(size_t want, bool wait, PageList* out,
                                      MetadataVector<MovedPage>* moved) {
  // During graph capture nothing is unmapped and no event is touched.
  if (capturing_ > 0) return absl::OkStatus();
  // Candidates: free blocks holding whole mapped pages, in arenas whose pages
  // may move: split remainders first (arena by arena, largest first), then
  // holes, oldest first: the longer a hole has gone unused, the less likely
  // the next requests fit it. See Note [Where pages come from].
  const size_t before = out->size();
  absl::Status status;
  // Takes pages from `b`; false to stop (enough pages, or an error).
  auto take = [&](Arena* arena, Block* b) {
    const uint32_t slot = arena->stream_slot();
    if (!fences_.IsComplete(slot, b->free_epoch)) {
      if (!wait || events_->IsCapturing(arena->stream())) return true;
      status = fences_.WaitFor(slot, b->free_epoch);
      if (!status.ok()) return false;
    }
    const size_t got_before = out->size();
    runs_.clear();
    moved_indices_.clear();
    status = arena->UnmapFreePages(
        b, want - out->size(), out, trace_.enabled() ? &runs_ : nullptr,
        moved != nullptr ? &moved_indices_ : nullptr);
    NotePagesMapped(arena, -int64_t(out->size() - got_before));
    for (size_t k = 0; moved != nullptr && k < moved_indices_.size(); ++k) {
      moved->push_back({arena, moved_indices_[k], (*out)[got_before + k]});
    }
    for (const auto& [addr, bytes] : runs_) {
      trace_.Record(TraceAction::kSegmentUnmap, addr, bytes, arena->stream());
    }
    return status.ok() && out->size() < want;
  };
  auto may_move = [&](const Arena* arena) {
    const Pool* pool = streams_[arena->stream_slot()].pool;
    return pool == nullptr || pool->released;  // else a graph may replay
  };
  bool more = out->size() < want;
  for (size_t i = 0; more && i < arenas_.size(); ++i) {
    Arena* arena = arenas_[i].get();
    if (!may_move(arena)) continue;
    arena->remainders().ForEachLargestFirst(
        [&](Block* b) { return more = take(arena, b); });
  }
  for (Block* b = reclaim_queue_.front(); more && b != nullptr;) {
    Block* const next = ReclaimQueue::next(b);  // b may leave the queue
    if (may_move(b->arena)) more = take(b->arena, b);
    b = next;
  }
  stats_.pages_remapped += int64_t(out->size() - before);
  return status;
}

bool DeviceAllocator::ShouldReclaimFirst(const Block* block,
                                         size_t count) const {
  switch (options_.reclaim_before_grow) {
    case Options::Reclaim::kAlways:
      return true;
    case Options::Reclaim::kNever:
      return false;
    case Options::Reclaim::kAuto:
      break;
  }
  // Grow freely up to a little above the most memory the program has ever had
  // allocated; past that, growing would only add cached (wasted) pages.
  const double allocated_high_water = double(std::max<int64_t>(
      allocated_high_water_,
      stats_.allocated_bytes.pool[kPoolAll].current + int64_t(block->size)));
  const double mapped_after =
      double(stats_.mapped_bytes.current) + double(count * page_size_);
  return mapped_after > (1.0 + options_.grow_slack) * allocated_high_water;
}

absl::Status DeviceAllocator::MapUnder(Block* block, size_t count,
                                       RequestState* request) {
  PageList& pages = map_pages_;  // reused: no allocation per map
  pages.clear();
  created_pages_.clear();
  moved_pages_.clear();
  PageId page;
  while (pages.size() < count && pages_.TakeIdle(&page)) pages.push_back(page);
  absl::Status status;
  if (pages.size() < count && capturing_ == 0 &&
      ShouldReclaimFirst(block, count)) {
    status = fences_.PollAndFence();
    // Holes whose last use the GPU has not reached yet are waited for (their
    // stream's fence): on a GPU running behind the CPU, the holes freed this
    // step are exactly the ones whose pages the request needs. See Note
    // [Reclaim before grow].
    if (status.ok()) {
      status = Reclaim(count, /*wait=*/true, &pages, &moved_pages_);
    }
  }
  while (status.ok() && pages.size() < count) {
    absl::Status created = pages_.CreatePage(&page);
    if (created.ok()) {
      pages.push_back(page);
      created_pages_.push_back(page);
      ++stats_.handles_created;
    } else if (absl::IsResourceExhausted(created)) {
      break;  // the limit or the device is full: reclaim below
    } else {
      status = created;
    }
  }
  // Under pressure: PyTorch's release_cached_blocks and retry, counted once
  // per request (Note [Retries and OOMs] in docs/stats.md).
  if (status.ok() && pages.size() < count && capturing_ == 0) {
    if (!request->retried) ++stats_.num_alloc_retries;
    request->retried = true;
    status = fences_.PollAndFence();
    if (status.ok()) {
      status = Reclaim(count, /*wait=*/false, &pages, &moved_pages_);
    }
    if (status.ok() && pages.size() < count) {
      if (!request->synced) ++stats_.num_sync_all_streams;
      request->synced = true;
      status = Reclaim(count, /*wait=*/true, &pages, &moved_pages_);
    }
  }
  if (status.ok() && pages.size() < count) {
    status = absl::ResourceExhaustedError(absl::StrFormat(
        "%d more page(s) of %s were needed, and every whole free page has "
        "been reclaimed%s",
        count - pages.size(), FormatBytes(page_size_),
        capturing_ > 0 ? " (except during CUDA graph capture, when nothing "
                         "is unmapped)"
                       : ""));
  }
  runs_.clear();
  if (status.ok()) {
    const size_t offered = pages.size();
    status = block->arena->MapPages(block, pages,
                                    trace_.enabled() ? &runs_ : nullptr);
    // Pages a failed undo left mapped are the arena's now (still reserved).
    NotePagesMapped(block->arena, int64_t(offered - pages.size()));
  }
  if (!status.ok()) {
    GiveBack(pages);
    return status;
  }
  NotePagesMapped(block->arena, int64_t(count));
  for (const auto& [addr, bytes] : runs_) {
    trace_.RecordTagged(TraceAction::kSegmentMap, addr, bytes,
                        block->arena->stream());
  }
  return absl::OkStatus();
}

void DeviceAllocator::GiveBack(const PageList& pages) {
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
    if (is_held(p)) pages_.ReleasePage(p).IgnoreError();
  }
  stats_.handles_released = int64_t(pages_.total_released());
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
    const size_t restored =
        arena->RestorePages(run, &failed, trace_.enabled() ? &runs_ : nullptr);
    NotePagesMapped(arena, int64_t(restored));
    for (const auto& [addr, bytes] : runs_) {
      trace_.Record(TraceAction::kSegmentMap, addr, bytes, arena->stream());
    }
  }
  stats_.pages_remapped -= moved_back;  // unmapped, but mapped nowhere else
  for (PageId p : failed) pages_.ReleasePage(p).IgnoreError();
  // Idle pages are idle again, in the order they were taken from the pool.
  std::sort(special.begin(), special.end());
  for (size_t i = pages.size(); i-- > 0;) {
    if (!std::binary_search(special.begin(), special.end(), pages[i])) {
      pages_.ReturnIdle(pages[i]);
    }
  }
  stats_.handles_released = int64_t(pages_.total_released());
  created_pages_.clear();
  moved_pages_.clear();
}

void DeviceAllocator::ReturnBlockToArena(Block* block) {
  ReturnBlockToArena(block, block->arena, block->addr, block->size,
                     block->requested);
}

void DeviceAllocator::ReturnBlockToArena(Block* block, Arena* arena,
                                         uintptr_t addr, size_t size,
                                         size_t requested, bool traced) {
  const int pool = PoolOf(arena->kind());
  stats_.active.Decrease(pool, 1);
  stats_.active_bytes.Decrease(pool, int64_t(size));
  if (!traced) {
    trace_.Record(TraceAction::kFreeCompleted, addr, requested,
                  arena->stream());
  }
  const uint64_t epoch = fences_.StampFree(arena->stream_slot());
  const uint64_t seq = ++alloc_seq_;
  if (arena->quick().Push(block, addr, size, epoch, seq)) return;
  arena->Release(block, epoch, seq);
  if (streams_[arena->stream_slot()].retired) retired_dirty_ = true;
}

absl::Status DeviceAllocator::ReleaseArena(Arena* arena) {
  FF_CHECK(arena->IsEmpty(), "ReleaseArena of an arena in use");
  PageList pages;
  runs_.clear();
  absl::Status status =
      arena->UnmapFreePages(arena->first_block(), SIZE_MAX, &pages,
                            trace_.enabled() ? &runs_ : nullptr);
  NotePagesMapped(arena, -int64_t(pages.size()));
  for (PageId p : pages) pages_.ReturnIdle(p);
  for (const auto& [addr, bytes] : runs_) {
    trace_.Record(TraceAction::kSegmentUnmap, addr, bytes, arena->stream());
  }
  if (!status.ok() || arena->mapped_pages() > 0) return status;
  MetadataVector<Arena*>& list =
      streams_[arena->stream_slot()].arenas[int(arena->kind())];
  list.erase(std::find(list.begin(), list.end(), arena));
  auto it = std::find_if(arenas_.begin(), arenas_.end(),
                         [&](const auto& a) { return a.get() == arena; });
  arenas_.erase(it);  // ~Arena releases the VA
  stats_.num_arenas = int64_t(arenas_.size());
  return absl::OkStatus();
}

absl::Status DeviceAllocator::ReleaseRetiredArenas() {
  // During graph capture nothing is unmapped: retried after it ends.
  if (capturing_ > 0) {
    retired_dirty_ = !retired_slots_.empty();
    return absl::OkStatus();
  }
  retired_dirty_ = false;
  absl::Status status;
  size_t kept = 0;
  for (uint32_t slot : retired_slots_) {
    StreamState& st = streams_[slot];
    // A graph pool's memory stays with it until the pool is released.
    if (st.pool == nullptr || st.pool->released) {
      for (MetadataVector<Arena*>& list : st.arenas) {
        for (size_t i = list.size(); i-- > 0;) {
          // Cached blocks are free to the program: back to the arena first.
          DrainQuickCache(list[i]);
          if (!list[i]->IsEmpty()) continue;
          if (absl::Status s = ReleaseArena(list[i]); !s.ok() && status.ok()) {
            status = s;
          }
        }
      }
    }
    bool has_arenas = false;
    for (const MetadataVector<Arena*>& list : st.arenas) {
      has_arenas |= !list.empty();
    }
    if (has_arenas) {
      retired_slots_[kept++] = slot;
    } else {
      free_slots_.push_back(slot);
    }
  }
  retired_slots_.resize(kept);
  stats_.num_streams = int64_t(streams_.size() - free_slots_.size());
  return status;
}

absl::Status DeviceAllocator::Free(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  MutexLock lock(&mu_);
  ScopedCallTimer timer(&call_ticks_);
  ++stats_.alloc_cpu_calls;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  LiveEntry* it = live_.Find(addr);
  if (it == nullptr) {
    ++stats_.invalid_frees;
    return absl::InvalidArgumentError(DescribeBadPointer(addr));
  }
  if (ipc_ != nullptr) {  // shared with other processes: docs/ipc.md
    absl::StatusOr<bool> deferred = IpcDeferFree(addr);
    if (!deferred.ok()) return deferred.status();
    if (*deferred) return absl::OkStatus();
    it = live_.Find(addr);
  }
  const LiveEntry entry = *it;
  Block* const block = entry.block;
  // Releasing reads the block (coalescing); start that miss now, under the
  // bookkeeping below, for both of its lines. A cached block is only written.
  __builtin_prefetch(block, 1);
  __builtin_prefetch(reinterpret_cast<const char*>(block) + 64, 1);
  // Other streams used it: record their events first, so that a failure leaves
  // the block live and nothing changed.
  MetadataVector<EventId> events;
  if (entry.has_uses) {
    for (StreamHandle s : *block->uses) {
      if (events_->IsCapturing(s)) continue;  // re-checked when processed
      absl::StatusOr<EventId> e = events_->Record(s);
      if (!e.ok()) {
        for (EventId recorded : events) events_->Release(recorded);
        return e.status();
      }
      events.push_back(*e);
    }
  }
  live_.Erase(it);
  Arena* const arena = entry.arena;
  const size_t requested = entry.requested;
  const size_t size = rounding_.Round(requested);  // == block->size
  const int pool = PoolOf(arena->kind());
  stats_.allocation.Decrease(pool, 1);
  stats_.allocated_bytes.Decrease(pool, int64_t(size));
  stats_.requested_bytes.Decrease(pool, int64_t(requested));
  if (!entry.has_uses || block->uses->empty()) {
    // Requested and completed at once: one clock read for both.
    trace_.RecordTagged(TraceAction::kFreeRequested,
                        TraceAction::kFreeCompleted, addr, requested,
                        arena->stream());
    if (entry.has_uses) block->uses.reset();
    ReturnBlockToArena(block, arena, addr, size, requested, /*traced=*/true);
    // The last block of a retired stream's arena: release the arena (an error
    // leaves it for a later try; the Free itself succeeded).
    if (retired_dirty_) ReleaseRetiredArenas().IgnoreError();
    return absl::OkStatus();
  }
  // It becomes reusable once the other streams' work completes.
  trace_.RecordTagged(TraceAction::kFreeRequested, addr, requested,
                      arena->stream());
  block->state = BlockState::kPendingFree;
  block->uses.reset();
  pending_.push_back(PendingFree{block, std::move(events)});
  return absl::OkStatus();
}

absl::Status DeviceAllocator::ProcessPending(bool wait) {
  size_t kept = 0;
  absl::Status status;
  for (size_t i = 0; i < pending_.size(); ++i) {
    PendingFree& p = pending_[i];
    bool done = status.ok();
    while (done && !p.events.empty()) {
      EventId e = p.events.back();
      if (wait) {
        status = events_->Synchronize(e);
        done = status.ok();
      } else {
        absl::StatusOr<bool> q = events_->Query(e);
        if (!q.ok()) status = q.status();
        done = q.ok() && *q;
      }
      if (!done) break;
      events_->Release(e);
      p.events.pop_back();
    }
    if (done && p.events.empty()) {
      ReturnBlockToArena(p.block);
    } else {
      pending_[kept++] = std::move(p);
    }
  }
  pending_.resize(kept);
  return status;
}

absl::Status DeviceAllocator::RecordStream(void* ptr, StreamHandle stream) {
  MutexLock lock(&mu_);
  LiveEntry* it = live_.Find(reinterpret_cast<uintptr_t>(ptr));
  if (it == nullptr) {
    return absl::InvalidArgumentError(
        "record_stream: " +
        DescribeBadPointer(reinterpret_cast<uintptr_t>(ptr)));
  }
  Block* block = it->block;
  if (stream == it->arena->stream()) return absl::OkStatus();
  if (block->uses == nullptr) {
    block->uses = MakeMetadataUnique<MetadataVector<StreamHandle>>();
    it->has_uses = 1;
  }
  if (std::find(block->uses->begin(), block->uses->end(), stream) ==
      block->uses->end()) {
    block->uses->push_back(stream);
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::RetireStream(StreamHandle stream) {
  MutexLock lock(&mu_);
  if (events_->IsCapturing(stream)) {
    return absl::FailedPreconditionError(
        "a stream that is capturing a CUDA graph cannot be retired");
  }
  // Every live slot of this handle: the default one and graph pools' ones.
  for (uint32_t slot = 0; slot < fences_.num_streams(); ++slot) {
    if (fences_.stream(slot) != stream || streams_[slot].retired) continue;
    if (absl::Status s = fences_.Retire(slot); !s.ok()) return s;
    streams_[slot].retired = true;
    retired_slots_.push_back(slot);
    for (const auto& list : streams_[slot].arenas) {
      for (Arena* arena : list) {
        // Never reused: its cached blocks go back (so that the arena can
        // empty and be released) and no more are cached.
        DrainQuickCache(arena);
        arena->quick().set_enabled(false);
      }
    }
  }
  slot_of_.erase(stream);
  for (auto& pool : pools_) pool->slots.erase(stream);
  ForgetTaggedStream(stream);
  if (last_stream_ == stream) last_slot_ = UINT32_MAX;
  // Its work is done: uses recorded for it need no event any more.
  live_.ForEach([&](LiveEntry& entry) {
    if (!entry.has_uses) return;
    auto& uses = *entry.block->uses;
    uses.erase(std::remove(uses.begin(), uses.end(), stream), uses.end());
  });
  // Its empty arenas go now; the others when their last block is freed. A
  // failure to unmap leaves them for a later try: the stream is retired.
  ReleaseRetiredArenas().IgnoreError();
  return absl::OkStatus();
}

absl::Status DeviceAllocator::EmptyCache() {
  MutexLock lock(&mu_);
  if (capturing_ > 0)
    return absl::OkStatus();  // PyTorch's rule: not in capture
  if (absl::Status s = ProcessPending(/*wait=*/true); !s.ok()) return s;
  DrainQuickCaches();  // after pending frees, which may land in the caches
  if (absl::Status s = fences_.WaitAll(); !s.ok()) return s;
  if (absl::Status s = ReleaseRetiredArenas(); !s.ok()) return s;
  PageList pages;
  if (absl::Status s = Reclaim(SIZE_MAX, /*wait=*/true, &pages); !s.ok()) {
    for (PageId p : pages) pages_.ReturnIdle(p);
    return s;
  }
  stats_.pages_remapped -= int64_t(pages.size());  // released, not remapped
  for (PageId p : pages) pages_.ReturnIdle(p);
  uint64_t released_before = pages_.total_released();
  absl::Status s = pages_.ReleaseIdle(0);
  stats_.handles_released += int64_t(pages_.total_released() - released_before);
  return s;
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

absl::Status DeviceAllocator::OutOfMemory(size_t size, size_t rounded,
                                          StreamHandle stream,
                                          size_t pages_needed,
                                          std::string reason) {
  ++stats_.num_ooms;
  UpdateGaugesLocked();
  OomFacts& o = last_oom_;
  o = OomFacts();
  o.device = device_;
  o.stream = stream;
  o.requested_bytes = size;
  o.rounded_bytes = rounded;
  o.limit_bytes = limit_bytes_;
  DeviceMemoryInfo info = backend_->MemoryInfo();
  o.device_total_bytes = info.total_bytes;
  o.device_free_bytes = info.free_bytes;
  o.mapped_bytes = size_t(stats_.mapped_bytes.current);
  o.allocated_bytes = size_t(stats_.allocated_bytes.pool[kPoolAll].current);
  o.active_bytes = size_t(stats_.active_bytes.pool[kPoolAll].current);
  o.cached_bytes = size_t(stats_.cached_free_bytes);
  o.reclaimable_bytes = size_t(stats_.reclaimable_bytes);
  o.idle_bytes = pages_.idle_pages() * page_size_;
  o.pages_needed = pages_needed;
  o.reason = std::move(reason);
  trace_.RecordTagged(TraceAction::kOom, info.free_bytes, rounded, stream);
  return absl::ResourceExhaustedError(absl::StrFormat(
      "fragfree: out of memory on device %d: tried to allocate %s (%s after "
      "rounding). fragfree holds %s of pages for %s in live allocations "
      "(%s cached, %s reclaimable); memory limit %s, device has %s total and "
      "%s free. %s.",
      device_, FormatBytes(size), FormatBytes(rounded),
      FormatBytes(o.mapped_bytes), FormatBytes(o.allocated_bytes),
      FormatBytes(o.cached_bytes), FormatBytes(o.reclaimable_bytes),
      FormatBytes(o.limit_bytes), FormatBytes(o.device_total_bytes),
      FormatBytes(o.device_free_bytes), o.reason));
}

std::string DeviceAllocator::DescribeBadPointer(uintptr_t addr) const {
  for (const auto& arena : arenas_) {
    if (!arena->Contains(addr)) continue;
    const Block* b = arena->BlockContaining(addr);
    if (b == nullptr) break;
    if (b->is_free() || b->state == BlockState::kCached) {
      return absl::StrFormat(
          "pointer 0x%x on device %d is not a live allocation: it lies in "
          "fragfree's free memory (a double free, or a pointer that was "
          "never returned by fragfree)",
          addr, device_);
    }
    if (b->state == BlockState::kPendingFree) {
      return absl::StrFormat(
          "pointer 0x%x on device %d was already freed (double free)", addr,
          device_);
    }
    return absl::StrFormat(
        "pointer 0x%x on device %d points inside the live allocation at 0x%x "
        "(%s), not to its start",
        addr, device_, b->addr, FormatBytes(b->requested));
  }
  return absl::StrFormat(
      "pointer 0x%x was not allocated by fragfree on device %d", addr, device_);
}

void DeviceAllocator::UpdateGaugesLocked() {
  int64_t cached = 0, reclaimable = 0, largest = 0, free_blocks = 0;
  int64_t split[3] = {}, split_bytes[3] = {};
  for (const auto& arena : arenas_) {
    const int pool = PoolOf(arena->kind());
    for (const Block* b = arena->first_block(); b != nullptr; b = b->next) {
      if (!b->is_free() && b->state != BlockState::kCached) continue;
      int64_t mapped = int64_t(arena->MappedBytes(b));
      if (mapped == 0) continue;
      ++free_blocks;
      ++split[pool];
      split_bytes[pool] += mapped;
      cached += mapped;
      largest = std::max(largest, mapped);
      reclaimable += int64_t(arena->ReclaimablePages(b) * page_size_);
    }
  }
  stats_.cached_free_bytes = cached;
  stats_.reclaimable_bytes = reclaimable;
  stats_.largest_free_block = largest;
  stats_.total_free_va_mapped = free_blocks;
  // PyTorch's inactive_split: free blocks inside mapped memory. Computed from
  // the arenas when read, so their peak is the highest value read.
  split[kPoolAll] = split[kPoolSmall] + split[kPoolLarge];
  split_bytes[kPoolAll] = split_bytes[kPoolSmall] + split_bytes[kPoolLarge];
  for (int p = 0; p < 3; ++p) {
    for (auto [stat, value] :
         {std::pair{&stats_.inactive_split.pool[p], split[p]},
          std::pair{&stats_.inactive_split_bytes.pool[p], split_bytes[p]}}) {
      stat->current = value;
      stat->peak = std::max(stat->peak, value);
    }
  }
  // Idle pages are counted as they move (PagePool::IdleCounts).
  const PagePool::IdleCounts& idle = pages_.idle_counts();
  const int64_t page = int64_t(page_size_);
  stats_.idle_page_bytes.current = int64_t(pages_.idle_pages()) * page;
  stats_.idle_page_bytes.peak = int64_t(idle.peak) * page;
  stats_.idle_page_bytes.allocated = int64_t(idle.added) * page;
  stats_.idle_page_bytes.freed = int64_t(idle.removed) * page;
  stats_.handles_released = int64_t(pages_.total_released());
  stats_.fences_recorded = int64_t(fences_.fences_recorded());
  stats_.fence_waits = int64_t(fences_.waits());
  stats_.fence_wait_ns = CallTicksToNs(fences_.wait_ticks());
  stats_.alloc_cpu_ns = CallTicksToNs(call_ticks_);
  backend_->calls().CopyTo(&stats_);
  DeviceMemoryInfo info = backend_->MemoryInfo();
  stats_.device_total_bytes = int64_t(info.total_bytes);
  stats_.device_free_bytes = int64_t(info.free_bytes);
  stats_.memory_limit_bytes = int64_t(limit_bytes_);
  stats_.page_size = int64_t(page_size_);
  UpdateSleepGaugesLocked();
}

DeviceStats DeviceAllocator::GetStats() {
  MutexLock lock(&mu_);
  UpdateGaugesLocked();
  return stats_;
}

void DeviceAllocator::ResetPeakStats() {
  MutexLock lock(&mu_);
  UpdateGaugesLocked();  // the peaks of gauges computed when read restart here
  stats_.ResetPeak();
  pages_.ResetIdlePeak();
}

void DeviceAllocator::ResetAccumulatedStats() {
  MutexLock lock(&mu_);
  stats_.ResetAccumulated();
  pages_.ResetIdleCounts();
  request_sizes_.Clear();
}

void DeviceAllocator::SetTraceEntries(size_t entries) {
  MutexLock lock(&mu_);
  trace_.Resize(entries);
}

TraceLog DeviceAllocator::Trace() const {
  MutexLock lock(&mu_);
  return trace_.Copy();
}

OomFacts DeviceAllocator::last_oom() const {
  MutexLock lock(&mu_);
  return last_oom_;
}

std::vector<SizeCount> DeviceAllocator::RequestSizes(
    SizeHistogram::Info* info) const {
  MutexLock lock(&mu_);
  if (info != nullptr) *info = request_sizes_.info();
  return request_sizes_.Entries();
}

size_t DeviceAllocator::AllocationSize(const void* ptr) const {
  MutexLock lock(&mu_);
  const LiveEntry* it = live_.Find(reinterpret_cast<uintptr_t>(ptr));
  return it == nullptr ? 0 : size_t(it->requested);
}

std::vector<ArenaView> DeviceAllocator::Arenas() const {
  MutexLock lock(&mu_);
  std::vector<ArenaView> out;
  for (const auto& arena : arenas_) {
    ArenaView v;
    v.base = arena->base();
    v.va_size = arena->size();
    v.page_size = arena->page_size();
    v.stream = arena->stream();
    v.small = arena->kind() == ArenaKind::kSmall;
    const Pool* pool = streams_[arena->stream_slot()].pool;
    v.pool_id[0] = pool ? pool->id.first : 0;
    v.pool_id[1] = pool ? pool->id.second : 0;
    v.mapped_pages = arena->mapped_pages();
    if (const RegionTag tag = streams_[arena->stream_slot()].tag;
        tag != kNoRegionTag) {
      v.tag = RegionTagName(tag);
      v.paused = sleep_.IsPaused(tag);
    }
    for (const Block* b = arena->first_block(); b != nullptr; b = b->next) {
      // A cached block is free memory to everyone outside the engine.
      const BlockState state =
          b->state == BlockState::kCached ? BlockState::kFree : b->state;
      v.blocks.push_back({b->addr, b->size, b->requested, state, b->alloc_seq});
    }
    for (size_t p = 0; p < arena->mapped_end(); ++p) {
      v.page_mapped.push_back(arena->IsPageMapped(p));
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace fragfree
