// DeferredFrees<Item>: memory freed while other streams may still use it
// (record_stream). Free records an event on each stream that used the memory
// (RecordUseEvents); the item is handed back (Collect) only once every one of
// its events has completed, so no stream ever reuses memory another stream's
// queued work still reads or writes. Items wait in the order they were freed,
// so the events of one stream wait in the order they were recorded: a pass
// stops querying a stream at its first event not yet complete, as PyTorch's
// allocator does (a later one on that stream cannot be complete). The device
// engine holds its blocks here (StreamOrder), the pinned host pool its
// allocations' addresses (host/pinned_allocator.h): one mechanism for both.
// Items and their event lists are on the metadata arena.
// Thread-safety: guarded by the owner's lock; the EventSource is called under
// it.
#ifndef FRAGFREE_ALLOCATOR_STREAM_DEFERRED_FREES_H_
#define FRAGFREE_ALLOCATOR_STREAM_DEFERRED_FREES_H_

#include <algorithm>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/stream/event_source.h"

namespace fragfree {

// Adds `stream` to a list of streams that used some memory, once.
inline void AddStreamUse(MetadataVector<StreamHandle>* uses,
                         StreamHandle stream) {
  if (std::find(uses->begin(), uses->end(), stream) == uses->end()) {
    uses->push_back(stream);
  }
}

// An event recorded on a stream that used some memory.
struct UseEvent {
  EventId event;
  StreamHandle stream;
};
using UseEvents = MetadataVector<UseEvent>;

// Records an event on every stream of `uses` that is not capturing a graph
// (a capturing stream is re-checked when the item is collected). On failure
// the events recorded are released, *failed (optional) names the stream, and
// *events is left empty: nothing changed.
inline absl::Status RecordUseEvents(EventSource* events,
                                    const MetadataVector<StreamHandle>& uses,
                                    UseEvents* out,
                                    StreamHandle* failed = nullptr) {
  for (StreamHandle s : uses) {
    if (events->IsCapturing(s)) continue;
    absl::StatusOr<EventId> e = events->Record(s);
    if (!e.ok()) {
      for (const UseEvent& recorded : *out) events->Release(recorded.event);
      out->clear();
      if (failed != nullptr) *failed = s;
      return e.status();
    }
    out->push_back(UseEvent{*e, s});
  }
  return absl::OkStatus();
}

template <typename Item>
class DeferredFrees {
 public:
  // What a failed Query means: an error to report (the item waits and the
  // pass stops there), or an event whose context is gone, so no work of it can
  // be in flight (counted, and taken as complete).
  enum class QueryErrors { kReport, kTreatAsComplete };

  explicit DeferredFrees(EventSource* events) : events_(events) {}
  DeferredFrees(const DeferredFrees&) = delete;
  DeferredFrees& operator=(const DeferredFrees&) = delete;

  // `item` waits for `events` (each completed event is released here). Items
  // are added in the order their events were recorded.
  void Add(Item item, UseEvents events) {
    pending_.push_back(Entry{item, std::move(events)});
  }
  bool empty() const { return pending_.empty(); }
  size_t size() const { return pending_.size(); }
  template <typename F>
  void ForEach(F&& f) const {
    for (const Entry& e : pending_) f(e.item);
  }

  // Hands every item whose events have all completed to `ready`, in the order
  // they were added; with `wait`, waits for each event first. The first error
  // (kReport) leaves that item and every later one waiting. *query_errors
  // (kTreatAsComplete) counts the failed queries.
  absl::Status Collect(bool wait, absl::FunctionRef<void(Item)> ready,
                       QueryErrors errors = QueryErrors::kReport,
                       int64_t* query_errors = nullptr) {
    size_t kept = 0;
    absl::Status status;
    // Streams with an event found incomplete in this pass: their later events
    // are not queried (stream order). Past kBusyStreams, streams are queried
    // as before: more queries, the same answer.
    StreamHandle busy[kBusyStreams] = {};
    size_t busy_count = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      Entry& p = pending_[i];
      bool done = status.ok();
      while (done && !p.events.empty()) {
        const UseEvent e = p.events.back();
        if (wait) {
          status = events_->Synchronize(e.event);
          done = status.ok();
        } else if (std::find(busy, busy + busy_count, e.stream) !=
                   busy + busy_count) {
          done = false;
        } else {
          absl::StatusOr<bool> q = events_->Query(e.event);
          if (!q.ok() && errors == QueryErrors::kTreatAsComplete) {
            if (query_errors != nullptr) ++*query_errors;
            q = true;
          }
          if (!q.ok()) status = q.status();
          done = q.ok() && *q;
          if (q.ok() && !done && busy_count < kBusyStreams) {
            busy[busy_count++] = e.stream;
          }
        }
        if (!done) break;
        events_->Release(e.event);
        p.events.pop_back();
      }
      if (done && p.events.empty()) {
        ready(p.item);
      } else if (kept++ != i) {  // (a self-move would empty the events)
        pending_[kept - 1] = std::move(p);
      }
    }
    pending_.resize(kept);
    return status;
  }

  // Waits for the events of the items `pick` selects and hands those items to
  // `ready`; the others keep waiting. The first error stops before any item is
  // handed back.
  absl::Status CollectIf(absl::FunctionRef<bool(Item)> pick,
                         absl::FunctionRef<void(Item)> ready) {
    for (Entry& p : pending_) {
      if (!pick(p.item)) continue;
      while (!p.events.empty()) {
        if (absl::Status s = events_->Synchronize(p.events.back().event);
            !s.ok()) {
          return s;
        }
        events_->Release(p.events.back().event);
        p.events.pop_back();
      }
    }
    size_t kept = 0;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (pick(pending_[i].item)) {
        ready(pending_[i].item);
      } else if (kept++ != i) {
        pending_[kept - 1] = std::move(pending_[i]);
      }
    }
    pending_.resize(kept);
    return absl::OkStatus();
  }

  // Forgets every item, releasing its events; with `wait`, waits for each
  // first (errors ignored: used at teardown).
  void Clear(bool wait) {
    for (Entry& p : pending_) {
      for (const UseEvent& e : p.events) {
        if (wait) events_->Synchronize(e.event).IgnoreError();
        events_->Release(e.event);
      }
    }
    pending_.clear();
  }

 private:
  static constexpr size_t kBusyStreams = 8;
  struct Entry {
    Item item;
    UseEvents events;
  };
  EventSource* const events_;
  MetadataVector<Entry> pending_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_STREAM_DEFERRED_FREES_H_
