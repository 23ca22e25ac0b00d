#include "allocator/stream/host_event_source.h"

namespace fragfree {

absl::StatusOr<EventId> ManualEventSource::Record(StreamHandle stream) {
  absl::MutexLock lock(&mu_);
  if (capturing_[stream]) {
    return absl::FailedPreconditionError("event recorded during capture");
  }
  ++records_;
  ++records_on_[stream];
  done_[++next_] = false;
  return next_;
}

absl::StatusOr<bool> ManualEventSource::Query(EventId event) {
  absl::MutexLock lock(&mu_);
  auto it = done_.find(event);
  if (it == done_.end()) return absl::NotFoundError("unknown event");
  return it->second;
}

absl::Status ManualEventSource::Synchronize(EventId event) {
  absl::MutexLock lock(&mu_);
  auto it = done_.find(event);
  if (it == done_.end()) return absl::NotFoundError("unknown event");
  ++synchronizes_;
  // Waiting on an event means its work (and all earlier work) finishes.
  for (auto& [id, done] : done_) {
    if (id <= event) done = true;
  }
  return absl::OkStatus();
}

void ManualEventSource::Release(EventId event) {
  absl::MutexLock lock(&mu_);
  done_.erase(event);
}

bool ManualEventSource::IsCapturing(StreamHandle stream) {
  absl::MutexLock lock(&mu_);
  return capturing_[stream];
}

void ManualEventSource::CompleteAll() {
  absl::MutexLock lock(&mu_);
  for (auto& [id, done] : done_) done = true;
}

void ManualEventSource::SetCapturing(StreamHandle stream, bool capturing) {
  absl::MutexLock lock(&mu_);
  capturing_[stream] = capturing;
}

int64_t ManualEventSource::records() const {
  absl::MutexLock lock(&mu_);
  return records_;
}

int64_t ManualEventSource::records_on(StreamHandle stream) const {
  absl::MutexLock lock(&mu_);
  auto it = records_on_.find(stream);
  return it == records_on_.end() ? 0 : it->second;
}

int64_t ManualEventSource::synchronizes() const {
  absl::MutexLock lock(&mu_);
  return synchronizes_;
}

}  // namespace fragfree
