// StreamFences: when may memory freed on a stream be unmapped or handed to
// other streams? Each stream has an epoch counter. A free is stamped with the
// stream's current epoch (an integer read: no CUDA call on the hot path). A
// fence is an event recorded on the stream; it covers every epoch up to its
// own, and once it completes those frees' last uses are known to be done.
// Fences are recorded only on slow paths (reclaim, empty_cache), and waited on
// only under memory pressure. See Note [Lazy fences] in docs/design.md.
// Per-stream state and fence queues are on the metadata arena.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_STREAM_STREAM_FENCES_H_
#define FRAGFREE_ALLOCATOR_STREAM_STREAM_FENCES_H_

#include "allocator/base/call_clock.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/stream/event_source.h"

namespace fragfree {

class StreamFences {
 public:
  explicit StreamFences(EventSource* events) : events_(events) {}
  ~StreamFences();

  // Registers a stream and returns its slot.
  uint32_t AddStream(StreamHandle stream);
  // Gives retired `slot` to a new stream, as AddStream would a new slot.
  // REQUIRES: the slot is retired and nothing stamped on it is still in use.
  void ReuseSlot(uint32_t slot, StreamHandle stream);
  size_t num_streams() const { return streams_.size(); }
  StreamHandle stream(uint32_t slot) const { return streams_[slot].handle; }

  // The epoch a free made now belongs to; marks the stream as needing a fence.
  uint64_t StampFree(uint32_t slot) {
    streams_[slot].unfenced = true;
    return streams_[slot].epoch;
  }
  bool IsComplete(uint32_t slot, uint64_t epoch) const {
    return streams_[slot].completed >= epoch;
  }
  // Queries in-flight fences (never blocks) and records a fence on every stream
  // with unfenced frees. Skips streams that are capturing a graph.
  absl::Status PollAndFence();
  // Blocks until frees of `slot` stamped up to `epoch` are complete.
  absl::Status WaitFor(uint32_t slot, uint64_t epoch);
  // Blocks until every stamped free of every stream is complete.
  absl::Status WaitAll();
  // The stream is about to be destroyed: waits for all work issued on it, then
  // never touches its handle again; every free stamped on it, before or after,
  // counts as complete.
  absl::Status Retire(uint32_t slot);

  uint64_t fences_recorded() const { return fences_recorded_; }
  uint64_t waits() const { return waits_; }
  // CallTicks spent blocked in those waits (CallTicksToNs converts).
  uint64_t wait_ticks() const { return wait_ticks_; }
  EventSource* events() const { return events_; }

 private:
  struct Fence {
    uint64_t epoch;
    EventId event;
  };
  struct PerStream {
    StreamHandle handle;
    uint64_t epoch = 1;      // stamped on frees now
    uint64_t completed = 0;  // every free stamped <= this is done
    bool unfenced = false;   // frees stamped since the last fence
    bool retired = false;    // handle destroyed: never used again
    MetadataDeque<Fence> in_flight;
  };
  absl::Status Poll(PerStream& s);
  absl::Status RecordFence(PerStream& s);

  EventSource* const events_;
  MetadataVector<PerStream> streams_;
  uint64_t fences_recorded_ = 0;
  uint64_t waits_ = 0;
  uint64_t wait_ticks_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_STREAM_STREAM_FENCES_H_
