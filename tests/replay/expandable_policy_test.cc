// Tests for bench/replay/expandable_policy.h: PyTorch's expandable segments,
// each rule on a small hand-worked case (pages of 2 MiB small / 20 MiB large),
// plus invariants under a random workload.
// Thread-safety: single-threaded tests.
#include "bench/replay/expandable_policy.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fragfree::replay {
namespace {

PolicyConfig Capacity(uint64_t bytes) {
  PolicyConfig c;
  c.capacity_bytes = bytes;
  c.device_total_bytes = 141 * kGiB;
  return c;
}

TEST(ExpandablePolicyTest, MapsWholePagesOnDemandAndGrowsAtTheEnd) {
  ExpandablePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 1000, 0));  // small segment, one 2 MiB page
  EXPECT_EQ(p.reserved_bytes(), 2 * kMiB);
  ASSERT_TRUE(p.Alloc(1, 5 * kMiB, 0));  // large segment, one 20 MiB page
  EXPECT_EQ(p.reserved_bytes(), 22 * kMiB);
  ASSERT_TRUE(p.Alloc(2, 5 * kMiB, 0));  // [5, 10) of the same page
  EXPECT_EQ(p.reserved_bytes(), 22 * kMiB);
  // 30 MiB: the free [10, 20) plus one more page at the end -> [10, 40).
  ASSERT_TRUE(p.Alloc(3, 30 * kMiB, 0));
  EXPECT_EQ(p.reserved_bytes(), 42 * kMiB);
  EXPECT_EQ(p.figures().maps, 3u);
  EXPECT_EQ(p.segments(), 2u);
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
}

TEST(ExpandablePolicyTest, OneSegmentPerStreamAndPool) {
  ExpandablePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 5 * kMiB, 1));
  ASSERT_TRUE(p.Alloc(1, 5 * kMiB, 2));
  ASSERT_TRUE(p.Alloc(2, 5 * kMiB, 1));
  EXPECT_EQ(p.segments(), 2u);
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);
}

TEST(ExpandablePolicyTest, FreeKeepsPagesEmptyCacheUnmapsWholeFreePages) {
  ExpandablePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 5 * kMiB, 0));   // A = [0, 5)
  ASSERT_TRUE(p.Alloc(1, 30 * kMiB, 0));  // B = [5, 35), pages 0 and 1
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);
  p.Free(0);
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);  // free does not unmap
  p.EmptyCache();  // [0, 5) and [35, 40) hold no whole page
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);
  EXPECT_EQ(p.figures().unmaps, 0u);
  p.Free(1);
  p.EmptyCache();
  EXPECT_EQ(p.reserved_bytes(), 0u);
  EXPECT_EQ(p.segments(), 0u);  // fully unmapped segments are released
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
}

TEST(ExpandablePolicyTest, UnmapKeepsPartialEdgePages) {
  ExpandablePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 10 * kMiB, 0));  // [0, 10)
  ASSERT_TRUE(p.Alloc(1, 50 * kMiB, 0));  // [10, 60): pages 0..2
  ASSERT_TRUE(p.Alloc(2, 5 * kMiB, 0));   // [60, 65): page 3
  p.Free(1);
  p.EmptyCache();
  // The hole [10, 60) holds pages 1 [20, 40) and 2 [40, 60) whole; page 0 is
  // shared with A and page 3 with C, so they stay mapped.
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);
  EXPECT_EQ(p.figures().unmaps, 2u);  // pages, not calls
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
  // The hole's unmapped middle is mapped again on demand.
  ASSERT_TRUE(p.Alloc(3, 45 * kMiB, 0));
  EXPECT_EQ(p.reserved_bytes(), 80 * kMiB);
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
}

TEST(ExpandablePolicyTest, OomRetryUnmapsOtherStreamsPages) {
  ExpandablePolicy p(Capacity(40 * kMiB));
  ASSERT_TRUE(p.Alloc(0, 40 * kMiB, /*stream=*/1));
  p.Free(0);
  ASSERT_TRUE(p.Alloc(1, 20 * kMiB, /*stream=*/2));
  EXPECT_EQ(p.figures().alloc_retries, 1u);
  EXPECT_EQ(p.reserved_bytes(), 20 * kMiB);
  EXPECT_EQ(p.segments(), 1u);
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
}

TEST(ExpandablePolicyTest, OomWhenNoWholePageIsFree) {
  ExpandablePolicy p(Capacity(40 * kMiB));
  ASSERT_TRUE(p.Alloc(0, 30 * kMiB, 0));  // [0, 30), 10 MiB free mapped
  EXPECT_FALSE(p.Alloc(1, 15 * kMiB, 0));
  EXPECT_EQ(p.figures().ooms, 1u);
  ASSERT_TRUE(p.Alloc(2, 10 * kMiB, 0));  // fits the mapped tail
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
}

TEST(ExpandablePolicyTest, BestFitPrefersBlocksNotBeforeUnmappedSpace) {
  ExpandablePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 12 * kMiB, 0));  // P = [0, 12)
  ASSERT_TRUE(p.Alloc(1, 8 * kMiB, 0));   // Q = [12, 20)
  ASSERT_TRUE(p.Alloc(2, 14 * kMiB, 0));  // R = [20, 34), free [34, 40)
  p.Free(1);                              // free [12, 20), before R
  // 5 MiB: [34, 40) is the smaller block, but it sits before unmapped space
  // (expandable size: huge), so [12, 20) (expandable size 8 MiB) wins.
  ASSERT_TRUE(p.Alloc(3, 5 * kMiB, 0));
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);
  // 7 MiB: free are [17, 20) and [34, 40): it grows from [34, 40) into a new
  // page. (Had the 5 MiB taken [34, 40), [12, 20) would serve this.)
  ASSERT_TRUE(p.Alloc(4, 7 * kMiB, 0));
  EXPECT_EQ(p.reserved_bytes(), 60 * kMiB);
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
}

TEST(ExpandablePolicyTest, InvariantsHoldUnderARandomWorkload) {
  ExpandablePolicy p(Capacity(2 * kGiB));
  std::mt19937_64 rng(7);
  std::vector<uint64_t> live;
  uint64_t next_id = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 100 < 52) {
      const uint64_t size =
          rng() % 4 == 0 ? rng() % (64 * kMiB) : rng() % (2 * kMiB);
      if (p.Alloc(next_id, size, rng() % 3)) live.push_back(next_id);
      ++next_id;
    } else {
      const size_t i = rng() % live.size();
      p.Free(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 997 == 0) p.EmptyCache();
    if (step % 500 == 0) {
      ASSERT_TRUE(p.CheckInvariants().ok())
          << step << ": " << p.CheckInvariants();
    }
  }
  for (uint64_t id : live) p.Free(id);
  p.EmptyCache();
  ASSERT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
  EXPECT_EQ(p.reserved_bytes(), 0u);
  EXPECT_EQ(p.segments(), 0u);
}

}  // namespace
}  // namespace fragfree::replay
