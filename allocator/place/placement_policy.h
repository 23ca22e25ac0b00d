// PlacementPolicy: the decisions of placement and of where pages come from,
// behind one interface, so that a new policy is one new file (a class
// implementing this; DeviceAllocator's MakePlacementPolicy picks it from the
// options):
//  - the arena search: which free block of a stream's arenas a request gets;
//  - the growth policy: whether a request that needs pages reclaims cached
//    pages before it creates new ones (Note [Reclaim before grow]);
//  - the reclaim order: which free blocks give up their whole pages first
//    (Note [Where pages come from]).
// The mechanics (mapping, undoing a failed request, fences) are PageSource's
// (page_source.h) and the engine's; a policy only chooses.
// Thread-safety: called under the owning DeviceAllocator's lock; a policy keeps
// no state of its own beyond its options.
#ifndef FRAGFREE_ALLOCATOR_PLACE_PLACEMENT_POLICY_H_
#define FRAGFREE_ALLOCATOR_PLACE_PLACEMENT_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/blocks/block.h"
#include "allocator/va/arena.h"
#include "allocator/va/reclaim_queue.h"

namespace fragfree {

// What the growth policy weighs for one request that needs pages.
struct GrowthFacts {
  int64_t allocated_high_water = 0;  // most bytes ever allocated at once
  int64_t allocated_bytes = 0;       // allocated now
  // Allocated, or freed while another stream's recorded use may be running.
  int64_t active_high_water = 0;
  int64_t active_bytes = 0;
  size_t block_bytes = 0;    // the request's block
  int64_t mapped_bytes = 0;  // mapped now
  size_t bytes_to_map = 0;   // the pages the request lacks
  // Of the recent time (wall clock or process CPU time: Options::move_clock),
  // the fraction spent moving pages (place/move_meter.h).
  double move_time_fraction = 0.0;
};

// A block placed by PlacementPolicy::Find, with what the caller needs next
// without reading the block's second cache line or counting its pages again.
struct Placed {
  Block* block = nullptr;  // nullptr: nothing fits
  Arena* arena = nullptr;  // block->arena
  size_t missing = 0;      // arena->UnmappedPages(block)
};

class PlacementPolicy : public MetadataObject {
 public:
  virtual ~PlacementPolicy() = default;
  // A free block of `size` bytes (the caller's `requested`) carved from one of
  // `arenas` (a stream's arenas of one kind), or a null block when none fits.
  virtual Placed Find(const MetadataVector<Arena*>& arenas, size_t size,
                      size_t requested) const = 0;
  // Whether to reclaim cached pages before creating new ones.
  virtual bool ShouldReclaimFirst(const GrowthFacts& facts) const = 0;
  // Visits the free blocks that hold whole mapped pages, in the order their
  // pages should be reclaimed, until `visit` returns false. `arenas` is every
  // arena of the device, `queue` its reclaim queue; `visit` may take the
  // block out of the queue.
  virtual void ForEachReclaimable(
      const MetadataVector<std::unique_ptr<Arena>>& arenas,
      const ReclaimQueue& queue,
      absl::FunctionRef<bool(Arena*, Block*)> visit) const = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PLACE_PLACEMENT_POLICY_H_
