// StreamOrder (stream_order.h): slots, retirement and the sweep of retired
// slots. Thread-safety: see stream_order.h.
#include "allocator/stream/stream_order.h"

namespace fragfree {

uint32_t StreamOrder::DefaultSlot(StreamHandle stream, bool* created) {
  auto [it, inserted] = default_slot_.try_emplace(stream, 0);
  if (inserted) it->second = NewSlot(stream);
  *created = inserted;
  last_stream_ = stream;
  last_slot_ = it->second;
  return it->second;
}

uint32_t StreamOrder::NewSlot(StreamHandle stream) {
  if (!free_slots_.empty()) {
    // A retired slot the owner reported empty: nothing refers to it.
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    fences_.ReuseSlot(slot, stream);
    retired_[slot] = 0;
    return slot;
  }
  const uint32_t slot = fences_.AddStream(stream);
  retired_.push_back(0);
  return slot;
}

absl::Status StreamOrder::Retire(
    StreamHandle stream, absl::FunctionRef<void(uint32_t slot)> on_retired) {
  for (uint32_t slot = 0; slot < num_slots(); ++slot) {
    if (fences_.stream(slot) != stream || retired(slot)) continue;
    if (absl::Status s = fences_.Retire(slot); !s.ok()) return s;
    retired_[slot] = 1;
    retired_slots_.push_back(slot);
    on_retired(slot);
  }
  default_slot_.erase(stream);
  if (last_stream_ == stream) last_slot_ = kNoSlot;
  return absl::OkStatus();
}

absl::Status StreamOrder::SweepRetired(
    absl::FunctionRef<absl::Status(uint32_t slot, bool* holds)> release) {
  retired_dirty_ = false;
  absl::Status status;
  size_t kept = 0;
  for (uint32_t slot : retired_slots_) {
    bool holds = false;
    if (absl::Status s = release(slot, &holds); !s.ok() && status.ok()) {
      status = s;
    }
    if (holds) {
      retired_slots_[kept++] = slot;
    } else {
      free_slots_.push_back(slot);
    }
  }
  retired_slots_.resize(kept);
  return status;
}

}  // namespace fragfree
