// TraceRing: a bounded ring of allocator events (alloc, free_requested,
// free_completed, segment_map, segment_unmap, oom), in the vocabulary of
// PyTorch's memory snapshots so they can become `device_traces`. Off by
// default, and then a single predictable branch per call; when on, a record is
// a timestamp and five stores into preallocated memory. When full, the oldest
// entries are overwritten (and counted as dropped). The ring is on the
// metadata arena; Entries() returns a copy on the caller's heap.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_OBS_TRACE_H_
#define FRAGFREE_ALLOCATOR_OBS_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "allocator/base/metadata_arena.h"
#include "allocator/base/stream_handle.h"

namespace fragfree {

enum class TraceAction : uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentMap,
  kSegmentUnmap,
  kOom,
};
const char* TraceActionName(TraceAction action);

struct TraceEntry {
  uint64_t time_us;  // microseconds since the Unix epoch
  uintptr_t addr;    // for kOom: free device bytes, as PyTorch does
  uint64_t size;
  StreamHandle stream;
  uint32_t context;  // caller-supplied id (e.g. a Python stack), 0 = none
  TraceAction action;
};

class TraceRing {
 public:
  // capacity 0: off.
  void Resize(size_t capacity);
  bool enabled() const { return !entries_.empty(); }
  void Record(TraceAction action, uintptr_t addr, uint64_t size,
              StreamHandle stream, uint32_t context = 0) {
    if (__builtin_expect(entries_.empty(), 1)) return;
    Append(action, addr, size, stream, context);
  }
  // Oldest first.
  std::vector<TraceEntry> Entries() const;
  uint64_t dropped() const { return dropped_; }
  size_t capacity() const { return entries_.size(); }
  void Clear();

 private:
  void Append(TraceAction action, uintptr_t addr, uint64_t size,
              StreamHandle stream, uint32_t context);
  MetadataVector<TraceEntry> entries_;
  size_t next_ = 0;
  size_t count_ = 0;
  uint64_t dropped_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_TRACE_H_
