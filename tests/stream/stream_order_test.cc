// Unit tests of StreamOrder (allocator/stream/stream_order.h) and
// DeferredFrees (deferred_frees.h) with the host event sources: default slots
// are made once and cached, retired slots are reused only after the owner's
// sweep reports them empty, deferred frees come back only when every event
// completed, in order, and a recording failure changes nothing.
#include "allocator/stream/stream_order.h"

#include <map>
#include <vector>

#include "allocator/stream/host_event_source.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

StreamHandle Stream(uintptr_t n) { return StreamHandle(n); }

TEST(StreamOrder, DefaultSlotsAreMadeOnceAndCached) {
  HostEventSource events;
  StreamOrder order(&events);
  EXPECT_EQ(order.CachedSlot(Stream(1)), StreamOrder::kNoSlot);
  bool created = false;
  const uint32_t a = order.DefaultSlot(Stream(1), &created);
  EXPECT_TRUE(created);
  EXPECT_EQ(order.CachedSlot(Stream(1)), a);
  const uint32_t b = order.DefaultSlot(Stream(2), &created);
  EXPECT_TRUE(created);
  EXPECT_NE(a, b);
  EXPECT_EQ(order.CachedSlot(Stream(1)), StreamOrder::kNoSlot);
  EXPECT_EQ(order.DefaultSlot(Stream(1), &created), a);
  EXPECT_FALSE(created);
  // A slot of its own (a graph pool's) for the same stream.
  const uint32_t c = order.NewSlot(Stream(1));
  EXPECT_NE(c, a);
  EXPECT_EQ(order.stream(c), Stream(1));
  EXPECT_EQ(order.num_slots(), 3u);
  EXPECT_EQ(order.live_slots(), 3u);
}

TEST(StreamOrder, RetiredSlotsAreReusedOnceSweptEmpty) {
  HostEventSource events;
  StreamOrder order(&events);
  bool created = false;
  const uint32_t a = order.DefaultSlot(Stream(1), &created);
  const uint32_t pool = order.NewSlot(Stream(1));
  order.DefaultSlot(Stream(2), &created);
  std::vector<uint32_t> retired;
  ASSERT_TRUE(
      order.Retire(Stream(1), [&](uint32_t s) { retired.push_back(s); }).ok());
  EXPECT_EQ(retired, (std::vector<uint32_t>{a, pool}));
  EXPECT_TRUE(order.retired(a) && order.retired(pool));
  EXPECT_EQ(order.CachedSlot(Stream(1)), StreamOrder::kNoSlot);
  // Retiring again touches nothing.
  ASSERT_TRUE(order.Retire(Stream(1), [&](uint32_t) { FAIL(); }).ok());
  // The pool's slot still holds memory: only `a` becomes free.
  order.MarkRetiredDirty();
  EXPECT_TRUE(order.retired_dirty());
  ASSERT_TRUE(order
                  .SweepRetired([&](uint32_t s, bool* holds) {
                    *holds = s == pool;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_FALSE(order.retired_dirty());
  EXPECT_EQ(order.retired_slots(), (MetadataVector<uint32_t>{pool}));
  EXPECT_EQ(order.free_slots(), (MetadataVector<uint32_t>{a}));
  EXPECT_EQ(order.live_slots(), 2u);
  // A new stream (even one reusing the handle value) gets the free slot.
  const uint32_t reused = order.DefaultSlot(Stream(1), &created);
  EXPECT_TRUE(created);
  EXPECT_EQ(reused, a);
  EXPECT_FALSE(order.retired(reused));
  EXPECT_EQ(order.num_slots(), 3u);
  // Sweeping is put off while retired slots remain.
  order.DeferSweep();
  EXPECT_TRUE(order.retired_dirty());
}

TEST(StreamOrder, SweepReportsTheFirstErrorAndGoesOn) {
  HostEventSource events;
  StreamOrder order(&events);
  const uint32_t a = order.NewSlot(Stream(1));
  const uint32_t b = order.NewSlot(Stream(1));
  ASSERT_TRUE(order.Retire(Stream(1), [](uint32_t) {}).ok());
  int calls = 0;
  absl::Status s = order.SweepRetired([&](uint32_t slot, bool* holds) {
    ++calls;
    *holds = slot == a;
    return slot == a ? absl::InternalError("unmap") : absl::OkStatus();
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(order.free_slots(), (MetadataVector<uint32_t>{b}));
}

TEST(DeferredFrees, ItemsComeBackWhenEveryEventCompletes) {
  ManualEventSource events;
  DeferredFrees<int> pending(&events);
  MetadataVector<StreamHandle> uses;
  AddStreamUse(&uses, Stream(1));
  AddStreamUse(&uses, Stream(2));
  AddStreamUse(&uses, Stream(1));
  EXPECT_EQ(uses.size(), 2u);
  UseEvents e1, e2;
  ASSERT_TRUE(RecordUseEvents(&events, uses, &e1).ok());
  EXPECT_EQ(e1.size(), 2u);
  pending.Add(1, std::move(e1));
  std::vector<int> ready;
  auto collect = [&](int item) { ready.push_back(item); };
  ASSERT_TRUE(pending.Collect(false, collect).ok());
  EXPECT_TRUE(ready.empty());
  events.CompleteAll();
  ASSERT_TRUE(RecordUseEvents(&events, uses, &e2).ok());
  pending.Add(2, std::move(e2));
  ASSERT_TRUE(pending.Collect(false, collect).ok());
  EXPECT_EQ(ready, (std::vector<int>{1}));
  EXPECT_EQ(pending.size(), 1u);
  // Waiting hands back the rest.
  ASSERT_TRUE(pending.Collect(true, collect).ok());
  EXPECT_EQ(ready, (std::vector<int>{1, 2}));
  EXPECT_TRUE(pending.empty());
}

TEST(DeferredFrees, CapturingStreamsGetNoEvent) {
  ManualEventSource events;
  events.SetCapturing(Stream(2), true);
  MetadataVector<StreamHandle> uses = {Stream(1), Stream(2)};
  UseEvents recorded;
  ASSERT_TRUE(RecordUseEvents(&events, uses, &recorded).ok());
  EXPECT_EQ(recorded.size(), 1u);
  EXPECT_EQ(events.records_on(Stream(2)), 0);
}

TEST(DeferredFrees, CollectIfWaitsOnlyForThePickedItems) {
  ManualEventSource events;
  DeferredFrees<int> pending(&events);
  for (int item = 1; item <= 3; ++item) {
    UseEvents e;
    ASSERT_TRUE(RecordUseEvents(&events, {Stream(1)}, &e).ok());
    pending.Add(item, std::move(e));
  }
  std::vector<int> ready;
  ASSERT_TRUE(pending
                  .CollectIf([](int item) { return item != 2; },
                             [&](int item) { ready.push_back(item); })
                  .ok());
  EXPECT_EQ(ready, (std::vector<int>{1, 3}));
  EXPECT_EQ(pending.size(), 1u);
  pending.Clear(/*wait=*/false);
  EXPECT_TRUE(pending.empty());
}

// Events that complete in the order they were recorded on each stream, as CUDA
// events do, and count the queries asked.
class InOrderEvents final : public EventSource {
 public:
  absl::StatusOr<EventId> Record(StreamHandle stream) override {
    stream_of_.push_back(stream);
    return EventId(stream_of_.size() - 1);
  }
  absl::StatusOr<bool> Query(EventId event) override {
    ++queries;
    return event < complete_below[stream_of_[event]];
  }
  absl::Status Synchronize(EventId) override { return absl::OkStatus(); }
  void Release(EventId) override {}
  bool IsCapturing(StreamHandle) override { return false; }
  // Events of a stream with ids below this have completed.
  std::map<StreamHandle, EventId> complete_below;
  int queries = 0;

 private:
  std::vector<StreamHandle> stream_of_;
};

TEST(DeferredFrees, APassStopsQueryingAStreamAtItsFirstIncompleteEvent) {
  InOrderEvents events;
  DeferredFrees<int> pending(&events);
  // Items 0..9 wait for stream 1, item 10 for stream 2.
  for (int item = 0; item <= 10; ++item) {
    UseEvents e;
    ASSERT_TRUE(RecordUseEvents(&events, {Stream(item < 10 ? 1 : 2)}, &e).ok());
    pending.Add(item, std::move(e));
  }
  events.complete_below[Stream(1)] = 3;  // items 0, 1, 2
  events.complete_below[Stream(2)] = 11;
  std::vector<int> ready;
  auto collect = [&](int item) { ready.push_back(item); };
  ASSERT_TRUE(pending.Collect(false, collect).ok());
  EXPECT_EQ(ready, (std::vector<int>{0, 1, 2, 10}));
  // Three complete, one not (item 3: items 4..9 are not asked), stream 2's.
  EXPECT_EQ(events.queries, 5);
  // The next pass starts again at item 3.
  events.complete_below[Stream(1)] = 10;
  ASSERT_TRUE(pending.Collect(false, collect).ok());
  EXPECT_EQ(ready.size(), 11u);
  EXPECT_TRUE(pending.empty());
}

// Queries that fail: an error to report (the item waits), or, for memory
// whose event context is gone, complete and counted.
class FailingQueries final : public EventSource {
 public:
  absl::StatusOr<EventId> Record(StreamHandle) override { return ++next_; }
  absl::StatusOr<bool> Query(EventId) override {
    return absl::UnavailableError("context destroyed");
  }
  absl::Status Synchronize(EventId) override { return absl::OkStatus(); }
  void Release(EventId) override { ++released; }
  bool IsCapturing(StreamHandle) override { return false; }
  int released = 0;

 private:
  EventId next_ = 0;
};

TEST(DeferredFrees, QueryErrorsAreReportedOrTakenAsComplete) {
  FailingQueries events;
  DeferredFrees<int> pending(&events);
  UseEvents e;
  ASSERT_TRUE(RecordUseEvents(&events, {Stream(1), Stream(2)}, &e).ok());
  pending.Add(7, std::move(e));
  std::vector<int> ready;
  auto collect = [&](int item) { ready.push_back(item); };
  EXPECT_EQ(pending.Collect(false, collect).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(ready.empty());
  int64_t errors = 0;
  using Q = DeferredFrees<int>::QueryErrors;
  ASSERT_TRUE(
      pending.Collect(false, collect, Q::kTreatAsComplete, &errors).ok());
  EXPECT_EQ(ready, (std::vector<int>{7}));
  EXPECT_EQ(errors, 2);
  EXPECT_EQ(events.released, 2);
}

// A recording failure releases what was recorded and leaves nothing.
class FailingSecondRecord final : public EventSource {
 public:
  absl::StatusOr<EventId> Record(StreamHandle) override {
    if (++records == 2) return absl::InternalError("record");
    return EventId(records);
  }
  absl::StatusOr<bool> Query(EventId) override { return true; }
  absl::Status Synchronize(EventId) override { return absl::OkStatus(); }
  void Release(EventId) override { ++released; }
  bool IsCapturing(StreamHandle) override { return false; }
  int records = 0;
  int released = 0;
};

TEST(DeferredFrees, ARecordingFailureLeavesNothing) {
  FailingSecondRecord events;
  UseEvents e;
  StreamHandle failed = 0;
  EXPECT_FALSE(
      RecordUseEvents(&events, {Stream(1), Stream(2)}, &e, &failed).ok());
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(failed, Stream(2));
  EXPECT_EQ(events.released, 1);
}

}  // namespace
}  // namespace fragfree
