// Unit tests of StreamFences (allocator/stream/stream_fences.h) with the host
// event sources: frees are stamped with the stream's epoch, a fence covers
// every epoch up to its own and completes them in order, streams are
// independent, capturing streams are never fenced, and a retired stream counts
// every free as complete.
#include "allocator/stream/stream_fences.h"

#include "allocator/stream/host_event_source.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

StreamHandle Stream(uintptr_t n) { return StreamHandle(n); }

TEST(StreamFences, HostEventsCompleteAtTheNextPoll) {
  HostEventSource events;
  StreamFences fences(&events);
  const uint32_t s = fences.AddStream(Stream(1));
  EXPECT_EQ(fences.num_streams(), 1u);
  const uint64_t e1 = fences.StampFree(s);
  EXPECT_EQ(fences.StampFree(s), e1);  // same epoch until a fence
  EXPECT_FALSE(fences.IsComplete(s, e1));
  ASSERT_TRUE(fences.PollAndFence().ok());
  EXPECT_TRUE(fences.IsComplete(s, e1));
  EXPECT_EQ(fences.fences_recorded(), 1u);
  const uint64_t e2 = fences.StampFree(s);
  EXPECT_GT(e2, e1);
  EXPECT_FALSE(fences.IsComplete(s, e2));
  // No free since the last fence: no new fence.
  ASSERT_TRUE(fences.PollAndFence().ok());
  ASSERT_TRUE(fences.PollAndFence().ok());
  EXPECT_EQ(fences.fences_recorded(), 2u);
  EXPECT_TRUE(fences.IsComplete(s, e2));
}

TEST(StreamFences, FencesCompleteInOrderPerStream) {
  ManualEventSource events;
  StreamFences fences(&events);
  const uint32_t a = fences.AddStream(Stream(1));
  const uint32_t b = fences.AddStream(Stream(2));
  const uint64_t a1 = fences.StampFree(a);
  const uint64_t b1 = fences.StampFree(b);
  ASSERT_TRUE(fences.PollAndFence().ok());  // a fence on each, in flight
  EXPECT_EQ(events.records(), 2);
  EXPECT_FALSE(fences.IsComplete(a, a1));
  const uint64_t a2 = fences.StampFree(a);
  EXPECT_GT(a2, a1);
  ASSERT_TRUE(fences.PollAndFence().ok());  // a second fence on a only
  EXPECT_EQ(events.records_on(Stream(1)), 2);
  EXPECT_EQ(events.records_on(Stream(2)), 1);
  EXPECT_FALSE(fences.IsComplete(a, a1));
  events.CompleteAll();
  ASSERT_TRUE(fences.PollAndFence().ok());
  EXPECT_TRUE(fences.IsComplete(a, a1));
  EXPECT_TRUE(fences.IsComplete(a, a2));
  EXPECT_TRUE(fences.IsComplete(b, b1));
  EXPECT_EQ(fences.waits(), 0u);
}

TEST(StreamFences, WaitForBlocksOnlyForTheStreamAsked) {
  ManualEventSource events;
  StreamFences fences(&events);
  const uint32_t a = fences.AddStream(Stream(1));
  const uint32_t b = fences.AddStream(Stream(2));
  const uint64_t a1 = fences.StampFree(a);
  const uint64_t b1 = fences.StampFree(b);
  // Nothing fenced yet: WaitFor records the fence it then waits on.
  ASSERT_TRUE(fences.WaitFor(a, a1).ok());
  EXPECT_TRUE(fences.IsComplete(a, a1));
  EXPECT_EQ(fences.waits(), 1u);
  EXPECT_EQ(events.synchronizes(), 1);
  EXPECT_FALSE(fences.IsComplete(b, b1));
  // Already complete: no wait.
  ASSERT_TRUE(fences.WaitFor(a, a1).ok());
  EXPECT_EQ(fences.waits(), 1u);
  ASSERT_TRUE(fences.WaitAll().ok());
  EXPECT_TRUE(fences.IsComplete(b, b1));
}

TEST(StreamFences, CapturingStreamsAreNeitherFencedNorWaitedOn) {
  ManualEventSource events;
  StreamFences fences(&events);
  const uint32_t s = fences.AddStream(Stream(7));
  const uint64_t e = fences.StampFree(s);
  events.SetCapturing(Stream(7), true);
  ASSERT_TRUE(fences.PollAndFence().ok());
  EXPECT_EQ(events.records(), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(fences.WaitFor(s, e)));
  events.SetCapturing(Stream(7), false);
  ASSERT_TRUE(fences.PollAndFence().ok());
  EXPECT_EQ(events.records(), 1);
}

TEST(StreamFences, RetiredStreamCountsEveryFreeAsComplete) {
  ManualEventSource events;
  StreamFences fences(&events);
  const uint32_t s = fences.AddStream(Stream(3));
  const uint64_t e = fences.StampFree(s);
  ASSERT_TRUE(fences.Retire(s).ok());  // waits for the stream's work
  EXPECT_EQ(events.synchronizes(), 1);
  EXPECT_TRUE(fences.IsComplete(s, e));
  EXPECT_TRUE(fences.IsComplete(s, fences.StampFree(s) + 100));
  ASSERT_TRUE(fences.PollAndFence().ok());
  EXPECT_EQ(events.records_on(Stream(3)), 1);  // never fenced again
  // The slot, reused, starts over for its new stream.
  fences.ReuseSlot(s, Stream(4));
  EXPECT_EQ(fences.stream(s), Stream(4));
  const uint64_t e2 = fences.StampFree(s);
  EXPECT_FALSE(fences.IsComplete(s, e2));
}

}  // namespace
}  // namespace fragfree
