// StreamOrder: everything that keeps one device's memory stream-ordered (what
// RMM's stream-ordered resource base does). It owns
//  - the slots: a small integer per (stream, owner) that arenas and fences are
//    keyed by. A stream's default slot is found through a map with the last
//    stream cached (the hot path is one compare); graph pools and region tags
//    get slots of their own (NewSlot);
//  - the fences (StreamFences): when memory freed on a stream may be
//    unmapped or handed to other streams;
//  - the frees deferred by record_stream (DeferredFrees of blocks);
//  - retired streams (cudaStreamDestroy): their slots stay until the owner
//    reports them empty (SweepRetired), then are reused by NewSlot. See Note
//    [Retired streams] in docs/design.md.
// What a slot holds (arenas, its graph pool or region tag) is the owner's.
// Everything here is on the metadata arena.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_STREAM_STREAM_ORDER_H_
#define FRAGFREE_ALLOCATOR_STREAM_STREAM_ORDER_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/metadata_containers.h"
#include "allocator/stream/deferred_frees.h"
#include "allocator/stream/event_source.h"
#include "allocator/stream/stream_fences.h"

namespace fragfree {

struct Block;  // allocator/blocks/block.h: only pointers are held here

class StreamOrder {
 public:
  static constexpr uint32_t kNoSlot = UINT32_MAX;

  explicit StreamOrder(EventSource* events)
      : fences_(events), pending_(events) {}
  // Deferred frees still waiting have their events released (not waited for).
  ~StreamOrder() { pending_.Clear(/*wait=*/false); }
  StreamOrder(const StreamOrder&) = delete;
  StreamOrder& operator=(const StreamOrder&) = delete;

  // ---- Slots ----
  // The default slot of the stream asked for last, if `stream` is it.
  uint32_t CachedSlot(StreamHandle stream) const {
    return stream == last_stream_ ? last_slot_ : kNoSlot;
  }
  // The default slot of `stream`, made (NewSlot) when it has none: *created.
  uint32_t DefaultSlot(StreamHandle stream, bool* created);
  // A new slot for `stream`, outside the default map (graph pools, region
  // tags): a retired slot the owner reported empty if any, else a new one.
  uint32_t NewSlot(StreamHandle stream);
  size_t num_slots() const { return retired_.size(); }
  size_t live_slots() const { return retired_.size() - free_slots_.size(); }
  StreamHandle stream(uint32_t slot) const { return fences_.stream(slot); }
  bool retired(uint32_t slot) const { return retired_[slot] != 0; }

  // ---- Fences ----
  StreamFences& fences() { return fences_; }
  const StreamFences& fences() const { return fences_; }

  // ---- Frees waiting for other streams (record_stream) ----
  DeferredFrees<Block*>& pending() { return pending_; }
  const DeferredFrees<Block*>& pending() const { return pending_; }

  // ---- Retired streams ----
  // `stream` is about to be destroyed: waits for its work on every live slot
  // of it (default, graph pools', tags'), marks them retired, calls
  // `on_retired` for each, and forgets its default slot. The first fence
  // error stops there (slots already retired stay so).
  absl::Status Retire(StreamHandle stream,
                      absl::FunctionRef<void(uint32_t slot)> on_retired);
  // Memory of a retired slot went back to its arena: SweepRetired has work.
  void MarkRetiredDirty() { retired_dirty_ = true; }
  bool retired_dirty() const { return retired_dirty_; }
  // Sweeping is put off (graph capture): dirty while retired slots remain.
  void DeferSweep() { retired_dirty_ = !retired_slots_.empty(); }
  // For each retired slot, `release` frees what it can and sets *holds when
  // the slot still has memory; a slot that holds none becomes free for
  // NewSlot. The first error `release` returns (the sweep goes on).
  absl::Status SweepRetired(
      absl::FunctionRef<absl::Status(uint32_t slot, bool* holds)> release);
  // Retired slots that still hold memory, and retired slots free for reuse.
  const MetadataVector<uint32_t>& retired_slots() const {
    return retired_slots_;
  }
  const MetadataVector<uint32_t>& free_slots() const { return free_slots_; }

 private:
  StreamFences fences_;
  DeferredFrees<Block*> pending_;
  MetadataFlatHashMap<StreamHandle, uint32_t> default_slot_;
  MetadataVector<uint8_t> retired_;  // by slot
  MetadataVector<uint32_t> retired_slots_;
  MetadataVector<uint32_t> free_slots_;
  bool retired_dirty_ = false;
  StreamHandle last_stream_ = 0;
  uint32_t last_slot_ = kNoSlot;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_STREAM_STREAM_ORDER_H_
