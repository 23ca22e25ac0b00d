// BestFitPolicy (best_fit_policy.h): growth and reclaim order.
// Thread-safety: see placement_policy.h.
#include "allocator/place/best_fit_policy.h"

#include <algorithm>

namespace fragfree {

bool BestFitPolicy::ShouldReclaimFirst(const GrowthFacts& facts) const {
  switch (reclaim_first_) {
    case ReclaimFirst::kAlways:
      return true;
    case ReclaimFirst::kNever:
      return false;
    case ReclaimFirst::kAuto:
      break;
  }
  // While blocks freed with record_stream wait for another stream, grow:
  // reclaiming would wait for the GPU or move pages every step, and a wait
  // lets the GPU retire those blocks, so the high-water mark below would never
  // reach what the program holds with the CPU running ahead. Note [Pending
  // frees count as in use].
  if (grow_for_pending_frees_ && facts.active_bytes > facts.allocated_bytes) {
    return false;
  }
  // Grow freely up to a little above the most memory the program has ever had
  // in use (counting pending frees' past peaks with grow_for_pending_frees);
  // past that, growing would only add cached (wasted) pages. Nothing is
  // pending here, so what is in use now is what is allocated.
  const double high_water = double(
      std::max<int64_t>(grow_for_pending_frees_ ? facts.active_high_water
                                                : facts.allocated_high_water,
                        facts.allocated_bytes + int64_t(facts.block_bytes)));
  const double mapped_after =
      double(facts.mapped_bytes) + double(facts.bytes_to_map);
  if (mapped_after <= (1.0 + grow_slack_) * high_water) return false;
  // Past the slack, pages move, unless moving them has taken more than its
  // share of the recent time: then the program's step waits on the driver
  // (tens of microseconds a page), and growing is what makes the next steps
  // need fewer moves. Note [Move time budget].
  return facts.move_time_fraction <= move_time_budget_;
}

void BestFitPolicy::ForEachReclaimable(
    const MetadataVector<std::unique_ptr<Arena>>& arenas,
    const ReclaimQueue& queue,
    absl::FunctionRef<bool(Arena*, Block*)> visit) const {
  // Split remainders first: the longer a hole has gone unused, the less likely
  // the next requests fit it, and a remainder is no hole yet.
  bool more = true;
  for (size_t i = 0; more && i < arenas.size(); ++i) {
    Arena* arena = arenas[i].get();
    arena->remainders().ForEachLargestFirst(
        [&](Block* b) { return more = visit(arena, b); });
  }
  for (Block* b = queue.front(); more && b != nullptr;) {
    Block* const next = ReclaimQueue::next(b);  // b may leave the queue
    more = visit(b->arena, b);
    b = next;
  }
}

}  // namespace fragfree
