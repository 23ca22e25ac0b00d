// TraceRing: what it keeps when it wraps, and times that are Unix-epoch
// microseconds, never decreasing.
#include "allocator/obs/trace.h"

#include <time.h>
#include <unistd.h>

#include <vector>

#include "gtest/gtest.h"

namespace fragfree {
namespace {

std::vector<TraceEvent> Events(const TraceLog& log) {
  std::vector<TraceEvent> out;
  log.ForEach([&out](const TraceEvent& e) { out.push_back(e); });
  return out;
}

int64_t UnixMicros() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

TEST(TraceRing, OffRecordsNothing) {
  TraceRing ring;
  EXPECT_FALSE(ring.enabled());
  ring.Record(TraceAction::kAlloc, 1, 2, 3);
  EXPECT_TRUE(ring.Copy().empty());
  ring.Resize(4);
  ring.Resize(0);
  ring.Record(TraceAction::kAlloc, 1, 2, 3);
  EXPECT_TRUE(ring.Copy().empty());
}

TEST(TraceRing, KeepsTheNewestOldestFirst) {
  for (int n : {0, 3, 4, 5, 9, 12}) {
    TraceRing ring;
    ring.Resize(4);
    for (int i = 0; i < n; ++i) {
      ring.Record(TraceAction(i % 6), 0x1000 + i, 100 + i, i % 2);
    }
    const std::vector<TraceEvent> events = Events(ring.Copy());
    const int kept = n < 4 ? n : 4;
    ASSERT_EQ(events.size(), size_t(kept)) << n;
    for (int j = 0; j < kept; ++j) {
      const int i = n - kept + j;
      EXPECT_EQ(events[j].action, TraceAction(i % 6));
      EXPECT_EQ(events[j].addr, uintptr_t(0x1000 + i));
      EXPECT_EQ(events[j].size, uint64_t(100 + i));
      EXPECT_EQ(events[j].stream, StreamHandle(i % 2));
    }
    EXPECT_EQ(ring.dropped(), uint64_t(n - kept));
  }
}

// PyTorch's _record_memory_history() asks for sys.maxsize entries: the ring
// grows as events arrive instead of allocating that up front, and still wraps
// at its capacity once it gets there.
TEST(TraceRing, GrowsToItsCapacityAndThenWraps) {
  TraceRing ring;
  ring.Resize(size_t{1} << 62);
  EXPECT_TRUE(ring.enabled());
  for (int i = 0; i < 20000; ++i) ring.Record(TraceAction::kAlloc, i, 1, 0);
  std::vector<TraceEvent> events = Events(ring.Copy());
  ASSERT_EQ(events.size(), 20000u);
  for (int i = 0; i < 20000; ++i) ASSERT_EQ(events[i].addr, uintptr_t(i));
  EXPECT_EQ(ring.dropped(), 0u);

  ring.Resize(10000);  // crosses the first growth step, then wraps
  for (int i = 0; i < 25000; ++i)
    ring.Record(TraceAction::kFreeRequested, i, 1, 0);
  events = Events(ring.Copy());
  ASSERT_EQ(events.size(), 10000u);
  for (int j = 0; j < 10000; ++j)
    ASSERT_EQ(events[j].addr, uintptr_t(15000 + j));
  EXPECT_EQ(ring.dropped(), 15000u);
}

// A caller's context goes with its entry through growth and wrapping; entries
// recorded without one (before or after) have none.
TEST(TraceRing, KeepsContextsWithTheirEntries) {
  TraceRing ring;
  ring.Resize(6000);
  for (int i = 0; i < 9000; ++i) {
    const uint32_t context = i % 3 == 0 && i > 100 ? uint32_t(i) : 0;
    if (i % 2 == 0) {
      ring.Record(TraceAction::kAlloc, i, 1, 0, context);
    } else {
      ring.Record(TraceAction::kFreeRequested, TraceAction::kFreeCompleted, i,
                  1, 0, context);
    }
  }
  const std::vector<TraceEvent> events = Events(ring.Copy());
  ASSERT_EQ(events.size(), 6000u);
  for (size_t j = 0; j < events.size(); ++j) {
    const TraceEvent& e = events[j];
    const int i = int(e.addr);
    const bool tagged =
        i % 3 == 0 && i > 100 && e.action != TraceAction::kFreeCompleted;
    EXPECT_EQ(e.context, tagged ? uint32_t(i) : 0u) << j;
  }
  TraceRing plain;
  plain.Resize(8);
  plain.Record(TraceAction::kAlloc, 1, 2, 3);
  EXPECT_TRUE(plain.Copy().contexts.empty());
}

TEST(TraceRing, ClearEmptiesIt) {
  TraceRing ring;
  ring.Resize(4);
  for (int i = 0; i < 6; ++i) ring.Record(TraceAction::kAlloc, i, 1, 0);
  ring.Clear();
  EXPECT_TRUE(ring.Copy().empty());
  ring.Record(TraceAction::kOom, 7, 1, 0);
  ASSERT_EQ(ring.Copy().size(), 1u);
  EXPECT_EQ(Events(ring.Copy())[0].addr, 7u);
}

TEST(TraceRing, TimesAreUnixMicrosecondsInOrder) {
  TraceRing ring;
  ring.Resize(1000);
  std::vector<int64_t> before, after;
  for (int i = 0; i < 20; ++i) {
    before.push_back(UnixMicros());
    ring.Record(TraceAction::kAlloc, i, 1, 0);
    after.push_back(UnixMicros());
    if (i % 5 == 4) usleep(2000);
  }
  for (int i = 0; i < 300; ++i)
    ring.Record(TraceAction::kFreeRequested, i, 1, 0);
  const std::vector<TraceEvent> events = Events(ring.Copy());
  ASSERT_EQ(events.size(), 320u);
  for (size_t i = 0; i < events.size(); ++i) {
    if (i < 20) {
      // Within the readings around it, give or take the interpolation.
      EXPECT_GE(events[i].time_us, before[i] - 2) << i;
      EXPECT_LE(events[i].time_us, after[i] + 2) << i;
    }
    if (i > 0) {
      EXPECT_GE(events[i].time_us, events[i - 1].time_us) << i;
    }
  }
}

TEST(TraceLog, TimesAreInterpolatedAndNeverDecrease) {
  // 1 ns a tick; the low 8 bits of each stamp hold the action.
  TraceLog log;
  log.readings = {{1000, 1700000000000000000},
                  {1000 + 256 * 100, 1700000000000000000 + 256 * 100}};
  for (uint64_t k : {1, 5, 4, 80, 2, 81}) {
    log.entries.push_back(
        {TraceEntry::Stamp(1000 + 256 * k, TraceAction::kOom), 0, 0, 0});
  }
  std::vector<int64_t> times;
  for (const TraceEvent& e : Events(log)) {
    EXPECT_EQ(e.action, TraceAction::kOom);
    times.push_back(e.time_us - 1700000000000000);
  }
  // Ticks 768 + 256 k from 1000: 24, 1048, 792, 20248, 280, 20504 ns.
  EXPECT_EQ(times, (std::vector<int64_t>{0, 1, 1, 20, 20, 20}));
}

TEST(TraceLog, EachStretchBetweenReadingsHasItsOwnRate) {
  // 1 ns a tick up to tick 100000, then 2 (ticks in multiples of 256).
  TraceLog log;
  log.readings = {{0, 1000000000}, {100000, 1000100000}, {200000, 1000300000}};
  for (uint64_t t : {51200, 99840, 150016, 250112}) {
    log.entries.push_back({TraceEntry::Stamp(t, TraceAction::kAlloc), 0, 0, 0});
  }
  std::vector<int64_t> times;
  for (const TraceEvent& e : Events(log)) times.push_back(e.time_us);
  EXPECT_EQ(times, (std::vector<int64_t>{1000051, 1000099, 1000200, 1000400}));
}

TEST(TraceRing, AnEventHasTheSameTimeInEveryCopy) {
  TraceRing ring;
  ring.Resize(64);
  std::vector<std::vector<TraceEvent>> copies;
  for (int round = 0; round < 40; ++round) {
    for (int i = 0; i < 5; ++i) {
      ring.Record(TraceAction::kAlloc, round * 5 + i, 1, 0);
    }
    if (round % 3 == 0) usleep(300);
    copies.push_back(Events(ring.Copy()));
    copies.push_back(Events(ring.Copy()));
  }
  // Event a (its addr) has one time, whichever copy holds it.
  std::vector<int64_t> time_of(200, -1);
  for (const std::vector<TraceEvent>& c : copies) {
    for (const TraceEvent& e : c) {
      if (time_of[e.addr] < 0) time_of[e.addr] = e.time_us;
      EXPECT_EQ(e.time_us, time_of[e.addr]) << "event " << e.addr;
    }
  }
}

}  // namespace
}  // namespace fragfree
