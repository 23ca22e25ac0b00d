#include "allocator/stream/stream_fences.h"

#include "allocator/base/check.h"

namespace fragfree {

StreamFences::~StreamFences() {
  for (PerStream& s : streams_) {
    for (const Fence& f : s.in_flight) events_->Release(f.event);
  }
}

uint32_t StreamFences::AddStream(StreamHandle stream) {
  PerStream s;
  s.handle = stream;
  streams_.push_back(std::move(s));
  return uint32_t(streams_.size() - 1);
}

void StreamFences::ReuseSlot(uint32_t slot, StreamHandle stream) {
  PerStream& s = streams_[slot];
  FF_CHECK(s.retired, "StreamFences::ReuseSlot of a live stream");
  for (const Fence& f : s.in_flight) events_->Release(f.event);
  s = PerStream();
  s.handle = stream;
}

absl::Status StreamFences::Poll(PerStream& s) {
  while (!s.in_flight.empty()) {
    absl::StatusOr<bool> done = events_->Query(s.in_flight.front().event);
    if (!done.ok()) return done.status();
    if (!*done) break;
    s.completed = s.in_flight.front().epoch;
    events_->Release(s.in_flight.front().event);
    s.in_flight.pop_front();
  }
  return absl::OkStatus();
}

absl::Status StreamFences::RecordFence(PerStream& s) {
  absl::StatusOr<EventId> event = events_->Record(s.handle);
  if (!event.ok()) return event.status();
  s.in_flight.push_back(Fence{s.epoch, *event});
  ++s.epoch;
  s.unfenced = false;
  ++fences_recorded_;
  return absl::OkStatus();
}

absl::Status StreamFences::PollAndFence() {
  for (PerStream& s : streams_) {
    if (s.retired || events_->IsCapturing(s.handle)) continue;
    if (absl::Status st = Poll(s); !st.ok()) return st;
    if (s.unfenced) {
      if (absl::Status st = RecordFence(s); !st.ok()) return st;
      if (absl::Status st = Poll(s); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

absl::Status StreamFences::WaitFor(uint32_t slot, uint64_t epoch) {
  PerStream& s = streams_[slot];
  if (s.completed >= epoch) return absl::OkStatus();
  if (events_->IsCapturing(s.handle)) {
    return absl::FailedPreconditionError(
        "cannot wait for a stream that is capturing a CUDA graph");
  }
  if (s.epoch <= epoch) {
    if (absl::Status st = RecordFence(s); !st.ok()) return st;
  }
  while (s.completed < epoch) {
    const Fence f = s.in_flight.front();
    ++waits_;
    absl::Status st;
    {
      ScopedCallTimer timer(&wait_ticks_);
      st = events_->Synchronize(f.event);
    }
    if (!st.ok()) return st;
    s.completed = f.epoch;
    events_->Release(f.event);
    s.in_flight.pop_front();
  }
  return absl::OkStatus();
}

absl::Status StreamFences::Retire(uint32_t slot) {
  PerStream& s = streams_[slot];
  if (s.retired) return absl::OkStatus();
  if (absl::Status st = WaitFor(slot, s.epoch); !st.ok()) return st;
  s.retired = true;
  s.unfenced = false;
  s.completed = UINT64_MAX;
  return absl::OkStatus();
}

absl::Status StreamFences::WaitAll() {
  for (uint32_t slot = 0; slot < streams_.size(); ++slot) {
    PerStream& s = streams_[slot];
    if (s.retired || (!s.unfenced && s.in_flight.empty())) continue;
    if (absl::Status st = WaitFor(slot, s.epoch - (s.unfenced ? 0 : 1));
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

}  // namespace fragfree
