// DeviceAllocator's side of stream ordering (device_allocator.h; the
// ordering itself is allocator/stream/stream_order.h): the arenas of each
// slot, record_stream, frees waiting for other streams, retiring a stream and
// releasing its arenas once they empty. Thread-safety: see device_allocator.h.
#include <algorithm>

#include "allocator/base/check.h"
#include "allocator/device_allocator.h"

namespace fragfree {

uint32_t DeviceAllocator::NewSlot(StreamHandle stream, const Pool* pool) {
  return InitSlot(order_.NewSlot(stream), pool);
}

uint32_t DeviceAllocator::InitSlot(uint32_t slot, const Pool* pool) {
  if (slot == streams_.size()) {
    streams_.emplace_back();
  } else {
    streams_[slot] = StreamState();  // a retired slot, reused
  }
  streams_[slot].pool = pool;
  stats_.num_streams = int64_t(order_.live_slots());
  return slot;
}

uint32_t DeviceAllocator::SlotForSlow(StreamHandle stream) {
  bool created = false;
  const uint32_t slot = order_.DefaultSlot(stream, &created);
  return created ? InitSlot(slot, nullptr) : slot;
}

uint32_t DeviceAllocator::SlotDuringCapture(StreamHandle stream) {
  for (auto& pool : pools_) {
    if (!pool->capturing || !pool->filter || !pool->filter(stream)) continue;
    auto [it, inserted] = pool->slots.try_emplace(stream, 0);
    if (inserted) it->second = NewSlot(stream, pool.get());
    return it->second;
  }
  return SlotFor(stream);
}

absl::Status DeviceAllocator::ProcessPending(bool wait) {
  return order_.pending().Collect(wait, [&](Block* block) {
    mu_.AssertHeld();
    ReturnBlockToArena(block);
  });
}

absl::Status DeviceAllocator::RecordStream(void* ptr, StreamHandle stream) {
  MutexLock lock(&mu_);
  LiveEntry* it = live_.Find(reinterpret_cast<uintptr_t>(ptr));
  if (it == nullptr) {
    return absl::InvalidArgumentError(
        "record_stream: " +
        DescribeBadPointer(reinterpret_cast<uintptr_t>(ptr)));
  }
  AddUse(it, stream);
  return absl::OkStatus();
}

void DeviceAllocator::AddUse(LiveEntry* it, StreamHandle stream) {
  Block* block = it->block();
  if (stream == block->arena->stream()) return;
  if (block->uses == nullptr) {
    block->uses = MakeMetadataUnique<MetadataVector<StreamHandle>>();
    it->set_has_uses();
  }
  AddStreamUse(block->uses.get(), stream);
}

absl::Status DeviceAllocator::RetireStream(StreamHandle stream) {
  MutexLock lock(&mu_);
  if (events_->IsCapturing(stream)) {
    return absl::FailedPreconditionError(
        "a stream that is capturing a CUDA graph cannot be retired");
  }
  // Every live slot of this handle: the default one, graph pools', tags'.
  if (absl::Status s = order_.Retire(stream,
                                     [&](uint32_t slot) {
                                       mu_.AssertHeld();
                                       for (const auto& list :
                                            streams_[slot].arenas) {
                                         for (Arena* arena : list) {
                                           // Never reused: its cached blocks
                                           // go back (so that the arena can
                                           // empty) and no more are cached.
                                           DrainQuickCache(arena);
                                           arena->quick().set_enabled(false);
                                         }
                                       }
                                     });
      !s.ok()) {
    return s;
  }
  for (auto& pool : pools_) pool->slots.erase(stream);
  ForgetTaggedStream(stream);
  // Its work is done: uses recorded for it need no event any more.
  live_.ForEach([&](LiveEntry& entry) {
    if (!entry.has_uses()) return;
    auto& uses = *entry.block()->uses;
    uses.erase(std::remove(uses.begin(), uses.end(), stream), uses.end());
  });
  // Its empty arenas go now; the others when their last block is freed. A
  // failure to unmap leaves them for a later try: the stream is retired.
  ReleaseRetiredArenas().IgnoreError();
  return absl::OkStatus();
}

absl::Status DeviceAllocator::ReleaseRetiredArenas() {
  // During graph capture nothing is unmapped: retried after it ends.
  if (capturing_ > 0) {
    order_.DeferSweep();
    return absl::OkStatus();
  }
  absl::Status status = order_.SweepRetired([&](uint32_t slot, bool* holds) {
    mu_.AssertHeld();
    StreamState& st = streams_[slot];
    absl::Status first;
    // A graph pool's memory stays with it until the pool is released.
    if (st.pool == nullptr || st.pool->released) {
      for (MetadataVector<Arena*>& list : st.arenas) {
        for (size_t i = list.size(); i-- > 0;) {
          // Cached blocks are free to the program: back to the arena first.
          DrainQuickCache(list[i]);
          if (!list[i]->IsEmpty()) continue;
          if (absl::Status s = ReleaseArena(list[i]); !s.ok() && first.ok()) {
            first = s;
          }
        }
      }
    }
    for (const MetadataVector<Arena*>& list : st.arenas) {
      *holds |= !list.empty();
    }
    return first;
  });
  stats_.num_streams = int64_t(order_.live_slots());
  return status;
}

absl::Status DeviceAllocator::ReleaseArena(Arena* arena) {
  FF_CHECK(arena->IsEmpty(), "ReleaseArena of an arena in use");
  PageSource& source = DomainOf(arena).source();
  absl::Status status = source.UnmapDetached(arena);
  if (status.ok()) {
    status = source.UnmapFree(arena, arena->first_block(), SIZE_MAX);
  }
  if (!status.ok() || arena->mapped_pages() > 0 ||
      arena->detached_pages() > 0) {
    return status;
  }
  MetadataVector<Arena*>& list =
      streams_[arena->stream_slot()].arenas[int(arena->kind())];
  list.erase(std::find(list.begin(), list.end(), arena));
  auto it = std::find_if(arenas_.begin(), arenas_.end(),
                         [&](const auto& a) { return a.get() == arena; });
  arenas_.erase(it);  // ~Arena releases the VA
  stats_.num_arenas = int64_t(arenas_.size());
  return absl::OkStatus();
}

}  // namespace fragfree
