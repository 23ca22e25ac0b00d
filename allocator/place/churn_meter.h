// ChurnMeter: how much of what the program allocates is served by moving
// pages from one stream's cached holes to another stream's new blocks
// (reclaim across streams), measured over windows of allocation volume, and
// the growth slack that follows from it (Note [Churn-adaptive slack] in
// docs/design.md).
//
// A window closes once the program has allocated at least its allocated
// high-water mark (and at least kMinWindowBytes) since the window opened. If
// more than `churn_limit` of the window's allocated bytes came from moved
// pages, the slack doubles (up to `max_slack`): the program's streams keep
// taking turns with the same memory (a side stream prefetching while the main
// one computes), each stream's arenas hold their own holes, and every move
// costs an unmap and a map on the critical path. Moves within one stream
// (sizes that change) do not count: there the holes are the stream's own and
// a small slack keeps memory tight. Below a quarter of the limit it
// halves, down to `base_slack`. Under a memory cap nothing changes: creating
// pages past the cap is refused and the request reclaims anyway.
//
// The meter reads the cumulative allocated-bytes counter the engine already
// keeps, so the allocation fast path pays nothing for it.
// Thread-safety: none of its own; used under the owning DeviceAllocator's
// lock.
#ifndef FRAGFREE_ALLOCATOR_PLACE_CHURN_METER_H_
#define FRAGFREE_ALLOCATOR_PLACE_CHURN_METER_H_

#include <algorithm>
#include <cstdint>

namespace fragfree {

class ChurnMeter {
 public:
  static constexpr int64_t kMinWindowBytes = int64_t{64} << 20;

  ChurnMeter(double base_slack, double max_slack, double churn_limit)
      : base_(base_slack),
        max_(std::max(base_slack, max_slack)),
        limit_(churn_limit),
        slack_(base_slack) {}

  // Called before a growth decision. `allocated_total` is the cumulative
  // bytes ever allocated (it restarts when accumulated stats are reset),
  // `high_water` the most bytes ever allocated at once.
  void Update(int64_t allocated_total, int64_t high_water) {
    if (allocated_total < window_start_) {  // accumulated stats were reset
      window_start_ = allocated_total;
      moved_ = 0;
      return;
    }
    const int64_t volume = allocated_total - window_start_;
    if (volume < std::max(high_water, kMinWindowBytes)) return;
    const double churn = double(moved_) / double(volume);
    if (churn > limit_) {
      slack_ = std::min(max_, std::max(2 * slack_, kFirstStep));
    } else if (churn < limit_ / 4) {
      slack_ = std::max(base_, slack_ / 2);
    }
    window_start_ = allocated_total;
    moved_ = 0;
  }
  // Bytes of pages moved from cached holes under new blocks.
  void NoteMoved(int64_t bytes) { moved_ += bytes; }
  // The growth slack now: between base_slack and max_slack.
  double slack() const { return slack_; }

 private:
  // The first doubling from a zero base.
  static constexpr double kFirstStep = 0.03;
  const double base_;
  const double max_;
  const double limit_;
  double slack_;
  int64_t window_start_ = 0;
  int64_t moved_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PLACE_CHURN_METER_H_
