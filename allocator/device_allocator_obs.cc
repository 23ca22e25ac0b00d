// DeviceAllocator's read side (device_allocator.h): statistics and the gauges
// computed when they are read, the trace ring, the request-size histogram,
// arena views, the facts of an OOM (obs/oom_facts.h) and what a bad pointer
// is. Thread-safety: see device_allocator.h.
#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"
#include "allocator/device_allocator.h"
#include "allocator/obs/oom_facts.h"

namespace fragfree {

absl::Status DeviceAllocator::OutOfMemory(size_t size, size_t rounded,
                                          StreamHandle stream,
                                          size_t pages_needed,
                                          std::string reason) {
  ++stats_.num_ooms;
  UpdateGaugesLocked(DeviceMemory::kRead);
  const DeviceMemoryInfo info{.total_bytes = size_t(stats_.device_total_bytes),
                              .free_bytes = size_t(stats_.device_free_bytes)};
  last_oom_ =
      OomFacts{.device = device_,
               .stream = stream,
               .requested_bytes = size,
               .rounded_bytes = rounded,
               .limit_bytes = limit_bytes_,
               .device_total_bytes = info.total_bytes,
               .device_free_bytes = info.free_bytes,
               .idle_bytes = IdleBytes(),
               .pages_needed = pages_needed,
               .device_granularity_bytes = backend_->DeviceGranularity(),
               .reason = std::move(reason)};
  AddStatsFacts(stats_, &last_oom_);
  trace_.RecordTagged(TraceAction::kOom, info.free_bytes, rounded, stream);
  return absl::ResourceExhaustedError(OomMessage(last_oom_));
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

void DeviceAllocator::UpdateFreeBlockGaugesLocked() {
  int64_t cached = 0, reclaimable = 0, largest = 0, free_blocks = 0;
  int64_t split[3] = {}, split_bytes[3] = {};
  for (const auto& arena : arenas_) {
    const int pool = StatPoolOf(arena->kind());
    // Only the free and cached blocks, through the arena's indexes (the
    // invariant check holds them to the blocks): O(those), not O(blocks).
    arena->ForEachFreeOrCached([&](const Block* b) {
      int64_t mapped = int64_t(arena->MappedBytes(b));
      if (mapped == 0) return;
      ++free_blocks;
      ++split[pool];
      split_bytes[pool] += mapped;
      cached += mapped;
      largest = std::max(largest, mapped);
      reclaimable += int64_t(arena->ReclaimablePages(b) * arena->page_size());
    });
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
}

void DeviceAllocator::UpdateGaugesLocked(DeviceMemory device_memory,
                                         FreeBlocks free_blocks) {
  if (free_blocks == FreeBlocks::kWalk) UpdateFreeBlockGaugesLocked();
  // Idle pages are counted as they move (PagePool::IdleCounts); with pages
  // of two sizes, the peak is the sum of each size's.
  stats_.idle_page_bytes = {};
  uint64_t created = 0, released = 0;
  ForEachDomain([&](const PageDomain& d) {
    const PagePool::IdleCounts& idle = d.pool().idle_counts();
    const int64_t page = int64_t(d.page_size());
    stats_.idle_page_bytes.current += int64_t(d.pool().idle_pages()) * page;
    stats_.idle_page_bytes.peak += int64_t(idle.peak) * page;
    stats_.idle_page_bytes.allocated += int64_t(idle.added) * page;
    stats_.idle_page_bytes.freed += int64_t(idle.removed) * page;
    created += d.pool().total_created();
    released += d.pool().total_released();
  });
  stats_.NoteHandles(created, released);
  stats_.fences_recorded = int64_t(order_.fences().fences_recorded());
  stats_.fence_waits = int64_t(order_.fences().waits());
  stats_.fence_wait_ns = CallTicksToNs(order_.fences().wait_ticks());
  stats_.alloc_cpu_ns = CallTicksToNs(call_ticks_);
  backend_->calls().CopyTo(&stats_);
  if (device_memory == DeviceMemory::kRead) {
    const DeviceMemoryInfo info = backend_->MemoryInfo();
    stats_.device_total_bytes = int64_t(info.total_bytes);
    stats_.device_free_bytes = int64_t(info.free_bytes);
  }
  stats_.memory_limit_bytes = int64_t(limit_bytes_);
  stats_.page_size = int64_t(page_size_);
  stats_.large_page_size = int64_t(large_route_size_);
  UpdateSleepGaugesLocked();
  stats_.Fold();  // "all" entries, for the copies handed out
}

DeviceStats DeviceAllocator::GetStats(DeviceMemory device_memory) {
  MutexLock lock(&mu_);
  UpdateGaugesLocked(device_memory);
  DeviceStats copy = stats_;
  if (device_memory == DeviceMemory::kSkip) {
    copy.device_total_bytes = copy.device_free_bytes = 0;
  }
  return copy;
}

namespace {
// The figures UpdateFreeBlockGaugesLocked counts from the free blocks.
bool CountedFromFreeBlocks(std::string_view key) {
  for (std::string_view prefix : {"inactive_split.", "inactive_split_bytes."}) {
    if (key.substr(0, prefix.size()) == prefix) return true;
  }
  for (std::string_view gauge :
       {"cached_free_bytes", "reclaimable_bytes", "largest_free_block",
        "total_free_va_mapped"}) {
    if (key == gauge) return true;
  }
  return false;
}
}  // namespace

std::optional<int64_t> DeviceAllocator::GetStat(std::string_view key) {
  MutexLock lock(&mu_);
  const bool device_memory =
      key == "device_free_bytes" || key == "device_total_bytes";
  UpdateGaugesLocked(
      device_memory ? DeviceMemory::kRead : DeviceMemory::kSkip,
      CountedFromFreeBlocks(key) ? FreeBlocks::kWalk : FreeBlocks::kSkip);
  return IntegerStat(stats_, key);
}

void DeviceAllocator::ResetPeakStats() {
  MutexLock lock(&mu_);
  // The peaks of gauges computed when read restart here.
  UpdateGaugesLocked(DeviceMemory::kSkip);
  stats_.ResetPeak();
  ForEachDomain([](PageDomain& d) { d.pool().ResetIdlePeak(); });
}

void DeviceAllocator::ResetAccumulatedStats() {
  MutexLock lock(&mu_);
  stats_.ResetAccumulated();
  ForEachDomain([](PageDomain& d) { d.pool().ResetIdleCounts(); });
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
  return it == nullptr ? 0 : it->block()->requested;
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
