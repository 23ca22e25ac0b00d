// MoveMeter: how much of the recent time (the wall clock's, or the process's
// CPU time with Options::move_clock) the allocating threads have spent moving
// pages (a request's share of the driver calls that unmap whole
// free pages of cached holes and map them under it, and of the waits for
// their old addresses), as an exponentially decayed fraction with a time
// constant of one second: a program that has spent a steady fraction r of its
// time moving pages reads r. The growth policy weighs it against
// Options::move_time_budget (Note [Move time budget] in docs/design.md).
// Times are nanoseconds of that clock, passed in (the caller reads the clock;
// tests pass their own).
// Thread-safety: plain data, guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_PLACE_MOVE_METER_H_
#define FRAGFREE_ALLOCATOR_PLACE_MOVE_METER_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fragfree {

class MoveMeter {
 public:
  static constexpr double kTimeConstantNs = 1e9;

  // `ns` more spent moving pages, ending at `now_ns`.
  void Add(double ns, int64_t now_ns) {
    decayed_ns_ = DecayedAt(now_ns) + ns;
    last_ns_ = std::max(last_ns_, now_ns);
  }
  // The fraction of recent time spent moving pages, at `now_ns`.
  double Fraction(int64_t now_ns) const {
    return DecayedAt(now_ns) / kTimeConstantNs;
  }

 private:
  double DecayedAt(int64_t now_ns) const {
    if (decayed_ns_ == 0.0 || now_ns <= last_ns_) return decayed_ns_;
    return decayed_ns_ * std::exp(-double(now_ns - last_ns_) / kTimeConstantNs);
  }

  double decayed_ns_ = 0.0;  // sum of move times, each decayed to last_ns_
  int64_t last_ns_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PLACE_MOVE_METER_H_
