// EventSource: how fragfree learns that work issued on a stream has finished.
// Record marks "everything issued on `stream` so far"; Query says whether that
// work is done without blocking; Synchronize blocks until it is. On a GPU these
// are CUDA events (cuda_event_source.h); on the host backend there is no device
// work, so events complete at once (HostEventSource) or when a test says so
// (ManualEventSource). Event sources are MetadataObjects: `new` puts them on
// the metadata arena.
// Thread-safety: implementations are called under the DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_STREAM_EVENT_SOURCE_H_
#define FRAGFREE_ALLOCATOR_STREAM_EVENT_SOURCE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/stream_handle.h"

namespace fragfree {

using EventId = uint64_t;

class EventSource : public MetadataObject {
 public:
  virtual ~EventSource() = default;
  [[nodiscard]] virtual absl::StatusOr<EventId> Record(StreamHandle stream) = 0;
  // True once the recorded work has completed.
  [[nodiscard]] virtual absl::StatusOr<bool> Query(EventId event) = 0;
  [[nodiscard]] virtual absl::Status Synchronize(EventId event) = 0;
  // The event will not be used again (it may be pooled).
  virtual void Release(EventId event) = 0;
  // True while `stream` is capturing a CUDA graph: no Record/Query/Synchronize
  // may be issued for it then.
  virtual bool IsCapturing(StreamHandle stream) = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_STREAM_EVENT_SOURCE_H_
