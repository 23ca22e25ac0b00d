// BestFitPolicy: fragfree's placement policy (PlacementPolicy). A request
// takes the best fit among the stream's arenas, first arena first
// (Arena::Allocate: mapped-first best fit, Note [Mapped-first placement]).
// Growth: with reclaim_before_grow auto, a request grows freely up to
// (1 + grow_slack) x the most memory ever in use at once (active bytes with
// grow_for_pending_frees, else allocated bytes), and reclaims cached pages
// first past that, except while record_stream frees are pending (with
// grow_for_pending_frees: Note [Pending frees count as in use]) and while
// moving pages has taken more than move_time_budget of the recent time (wall
// clock or CPU time: Note [Move time budget]); True always reclaims first,
// False never. Reclaim order: split remainders first (arena by arena, largest
// first), then holes, oldest first (Note [Where pages come from]).
// Thread-safety: see placement_policy.h.
#ifndef FRAGFREE_ALLOCATOR_PLACE_BEST_FIT_POLICY_H_
#define FRAGFREE_ALLOCATOR_PLACE_BEST_FIT_POLICY_H_

#include "allocator/place/placement_policy.h"

namespace fragfree {

class BestFitPolicy final : public PlacementPolicy {
 public:
  // reclaim_before_grow (Options::reclaim_before_grow).
  enum class ReclaimFirst { kAuto, kAlways, kNever };
  // move_time_budget (Options::move_time_budget): 1 never grows for it.
  BestFitPolicy(ReclaimFirst reclaim_first, double grow_slack,
                bool grow_for_pending_frees, double move_time_budget = 1.0)
      : reclaim_first_(reclaim_first),
        grow_slack_(grow_slack),
        grow_for_pending_frees_(grow_for_pending_frees),
        move_time_budget_(move_time_budget) {}

  Placed Find(const MetadataVector<Arena*>& arenas, size_t size,
              size_t requested) const override {
    for (Arena* arena : arenas) {
      size_t missing;
      if (Block* b = arena->Allocate(size, requested, &missing)) {
        return {b, arena, missing};
      }
    }
    return {};
  }
  bool ShouldReclaimFirst(const GrowthFacts& facts) const override;
  void ForEachReclaimable(
      const MetadataVector<std::unique_ptr<Arena>>& arenas,
      const ReclaimQueue& queue,
      absl::FunctionRef<bool(Arena*, Block*)> visit) const override;

 private:
  const ReclaimFirst reclaim_first_;
  const double grow_slack_;
  const bool grow_for_pending_frees_;
  const double move_time_budget_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PLACE_BEST_FIT_POLICY_H_
