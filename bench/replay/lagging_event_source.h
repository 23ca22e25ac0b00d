// LaggingEventSource: the replay's model of a GPU that runs behind the CPU. An
// event recorded now completes once `lag` more allocator calls have been made
// (the replay's clock, advanced by FragfreePolicy on every Alloc and Free), so
// that the engine sees what it sees on a real GPU: recent frees not yet
// covered by a completed fence. lag 0 completes every event at once (what the
// trace's free_completed says happened). Synchronize completes the event and
// counts a wait (a stall of the CPU until the GPU catches up).
// Thread-safety: not thread-safe (the replay is single-threaded).
#ifndef FRAGFREE_BENCH_REPLAY_LAGGING_EVENT_SOURCE_H_
#define FRAGFREE_BENCH_REPLAY_LAGGING_EVENT_SOURCE_H_

#include <cstdint>
#include <deque>

#include "allocator/stream/event_source.h"

namespace fragfree::replay {

class LaggingEventSource final : public EventSource {
 public:
  LaggingEventSource(uint64_t lag, const uint64_t* clock)
      : lag_(lag), clock_(clock) {}

  absl::StatusOr<EventId> Record(StreamHandle) override {
    done_at_.push_back(*clock_ + lag_);
    return first_ + done_at_.size() - 1;
  }
  absl::StatusOr<bool> Query(EventId event) override {
    return event < first_ || *clock_ >= DoneAt(event);
  }
  absl::Status Synchronize(EventId event) override {
    if (event >= first_ && *clock_ < DoneAt(event)) {
      ++waits_;
      // The GPU caught up to this event, hence to every earlier one.
      for (EventId e = first_; e <= event; ++e) DoneAt(e) = 0;
    }
    return absl::OkStatus();
  }
  void Release(EventId) override {
    // Ids stay valid; forget the oldest completed ones.
    while (!done_at_.empty() && done_at_.front() <= *clock_) {
      done_at_.pop_front();
      ++first_;
    }
  }
  bool IsCapturing(StreamHandle) override { return false; }
  // The program synchronized (`loss.item()`, torch.cuda.synchronize): every
  // event recorded so far is complete, and no allocator wait is counted.
  void CatchUp() {
    for (uint64_t& done_at : done_at_) done_at = 0;
  }

  // Synchronize calls that had to wait.
  uint64_t waits() const { return waits_; }

 private:
  uint64_t& DoneAt(EventId e) { return done_at_[e - first_]; }

  const uint64_t lag_;
  const uint64_t* const clock_;
  std::deque<uint64_t> done_at_;  // completion time of events first_, ...
  EventId first_ = 1;
  uint64_t waits_ = 0;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_LAGGING_EVENT_SOURCE_H_
