// Event sources for the host backend, where no device work exists.
// HostEventSource: every event is complete as soon as it is recorded.
// ManualEventSource: events complete only when the test calls
// Complete/CompleteAll (or when the allocator Synchronizes on one), so tests
// can hold a stream's work "in flight" and check that fragfree waits for it.
// Thread-safety: called under the DeviceAllocator's lock; ManualEventSource's
// test-facing methods take their own mutex.
#ifndef FRAGFREE_ALLOCATOR_STREAM_HOST_EVENT_SOURCE_H_
#define FRAGFREE_ALLOCATOR_STREAM_HOST_EVENT_SOURCE_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/stream/event_source.h"

namespace fragfree {

class HostEventSource final : public EventSource {
 public:
  absl::StatusOr<EventId> Record(StreamHandle) override { return ++next_; }
  absl::StatusOr<bool> Query(EventId) override { return true; }
  absl::Status Synchronize(EventId) override { return absl::OkStatus(); }
  void Release(EventId) override {}
  bool IsCapturing(StreamHandle) override { return false; }

 private:
  EventId next_ = 0;
};

class ManualEventSource final : public EventSource {
 public:
  absl::StatusOr<EventId> Record(StreamHandle stream) override;
  absl::StatusOr<bool> Query(EventId event) override;
  absl::Status Synchronize(EventId event) override;
  void Release(EventId event) override;
  bool IsCapturing(StreamHandle stream) override;

  // Test controls.
  void CompleteAll();
  void SetCapturing(StreamHandle stream, bool capturing);
  int64_t records() const;
  int64_t records_on(StreamHandle stream) const;
  int64_t synchronizes() const;

 private:
  mutable absl::Mutex mu_;
  EventId next_ ABSL_GUARDED_BY(mu_) = 0;
  MetadataMap<EventId, bool> done_ ABSL_GUARDED_BY(mu_);
  MetadataMap<StreamHandle, bool> capturing_ ABSL_GUARDED_BY(mu_);
  int64_t records_ ABSL_GUARDED_BY(mu_) = 0;
  MetadataMap<StreamHandle, int64_t> records_on_ ABSL_GUARDED_BY(mu_);
  int64_t synchronizes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_STREAM_HOST_EVENT_SOURCE_H_
