// StatsBook: the one place a device's statistics are counted. It is the
// DeviceStats the engine hands out (GetStats copies it), plus the operations
// that move its counters as memory changes hands, so that each counter has one
// writer: allocations and frees (NoteAlloc, NoteFree, NoteReturned), pages
// mapped and unmapped (NotePages: reserved bytes, segments, page counts),
// pages moved from one free block to a request (NoteRemapped) and the time
// that took (NoteMoveTime; NoteMoveBudgetPages), and the page
// handles the device's page pool created and released (NoteHandles: the pool
// counts them, the book copies its totals). Gauges computed when read are set
// by the engine's UpdateGaugesLocked, which also folds the "all" entries
// (StatArray: between folds, read "all" through All()). Key meanings:
// docs/stats.md.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_OBS_STATS_BOOK_H_
#define FRAGFREE_ALLOCATOR_OBS_STATS_BOOK_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "allocator/obs/stats.h"

namespace fragfree {

class StatsBook : public DeviceStats {
 public:
  // A block of `bytes` (the caller asked for `requested`) was handed out.
  void NoteAlloc(int pool, int64_t bytes, int64_t requested) {
    allocation.Increase(pool, 1);
    allocated_bytes.Increase(pool, bytes);
    active.Increase(pool, 1);
    active_bytes.Increase(pool, bytes);
    requested_bytes.Increase(pool, requested);
  }
  // The program freed it (it stays active until its last use is done).
  void NoteFree(int pool, int64_t bytes, int64_t requested) {
    allocation.Decrease(pool, 1);
    allocated_bytes.Decrease(pool, bytes);
    requested_bytes.Decrease(pool, requested);
  }
  // Its last use is done: back in its arena (or quick cache).
  void NoteReturned(int pool, int64_t bytes) {
    active.Decrease(pool, 1);
    active_bytes.Decrease(pool, bytes);
  }
  // `pages` of `page_size` were just mapped into (> 0) or unmapped from (< 0)
  // an arena of `pool` that now holds `mapped_now` pages. A segment is an
  // arena holding mapped pages (PyTorch: a cudaMalloc).
  void NotePages(int pool, size_t mapped_now, int64_t pages, size_t page_size) {
    const int64_t bytes = pages * int64_t(page_size);
    const size_t before = size_t(int64_t(mapped_now) - pages);
    if (before == 0 && mapped_now > 0) segment.Increase(pool, 1);
    if (before > 0 && mapped_now == 0) segment.Decrease(pool, 1);
    if (pages > 0) {
      reserved_bytes.Increase(pool, bytes);
      mapped_bytes.Increase(bytes);
      pages_mapped += pages;
      num_device_alloc += pages;
    } else if (pages < 0) {
      reserved_bytes.Decrease(pool, -bytes);
      mapped_bytes.Decrease(-bytes);
      pages_unmapped += -pages;
      num_device_free += -pages;
    }
  }
  // `pages` unmapped from free blocks now lie under a request's block.
  void NoteRemapped(int64_t pages) { pages_remapped += pages; }
  // Time spent moving pages, as the move time budget meters it, and pages a
  // request created because moves had spent that budget (docs/design.md, Note
  // [Move time budget]).
  void NoteMoveTime(double ns) { move_ns += int64_t(ns); }
  void NoteMoveBudgetPages(size_t pages) {
    move_budget_pages += int64_t(pages);
  }
  // The page pool's totals of handles created and released.
  void NoteHandles(uint64_t created, uint64_t released) {
    handles_created = int64_t(created);
    handles_released = int64_t(released);
  }
  // Restarts the peaks at the current values; the high waters below keep
  // theirs.
  void ResetPeak() {
    allocated_high_water_ = allocated_high_water();
    active_high_water_ = active_high_water();
    DeviceStats::ResetPeak();
  }
  // Most bytes ever allocated at once (ResetPeak leaves it).
  int64_t allocated_high_water() const {
    return std::max(allocated_high_water_, allocated_bytes.pool[kPoolAll].peak);
  }
  // Most bytes ever active at once: allocated, or freed by the program while
  // another stream's recorded use of them may still be running.
  int64_t active_high_water() const {
    return std::max(active_high_water_, active_bytes.pool[kPoolAll].peak);
  }

 private:
  // The high waters before the last ResetPeak; the peaks hold them since.
  int64_t allocated_high_water_ = 0;
  int64_t active_high_water_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_STATS_BOOK_H_
