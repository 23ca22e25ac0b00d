// Tests for bench/replay/native_policy.h: the rules of PyTorch's native caching
// allocator, each checked on a small hand-worked case, plus invariants under a
// random workload.
// Thread-safety: single-threaded tests.
#include "bench/replay/native_policy.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace fragfree::replay {
namespace {

PolicyConfig Capacity(uint64_t bytes) {
  PolicyConfig c;
  c.capacity_bytes = bytes;
  return c;
}

TEST(NativePolicyTest, SmallRequestsShareATwoMiBSegment) {
  NativePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 1000, 0));  // rounds to 1024
  ASSERT_TRUE(p.Alloc(1, 100, 0));   // 512, same segment
  EXPECT_EQ(p.reserved_bytes(), 2 * kMiB);
  EXPECT_EQ(p.segments(), 1u);
  EXPECT_EQ(p.figures().allocated_bytes, 1024u + 512u);
  p.Free(0);
  p.Free(1);
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
  EXPECT_EQ(p.reserved_bytes(), 2 * kMiB);  // cached, not released
  p.EmptyCache();
  EXPECT_EQ(p.reserved_bytes(), 0u);
}

TEST(NativePolicyTest, MidSizedRequestsGetTwentyMiBSegmentsAndSplit) {
  NativePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 5 * kMiB, 0));  // 20 MiB segment, 15 MiB remainder
  EXPECT_EQ(p.reserved_bytes(), 20 * kMiB);
  ASSERT_TRUE(p.Alloc(1, 5 * kMiB, 0));  // from the remainder
  ASSERT_TRUE(p.Alloc(2, 9 * kMiB, 0));  // 10 MiB left: fits
  EXPECT_EQ(p.reserved_bytes(), 20 * kMiB);
  ASSERT_TRUE(p.Alloc(3, 2 * kMiB, 0));  // 1 MiB left: a new segment
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
}

TEST(NativePolicyTest, LargeRemainderSplitsOnlyAboveOneMiB) {
  NativePolicy p(Capacity(kGiB));
  // 11 MiB + 512 -> a 12 MiB segment; remainder 1 MiB - 512 is not split, so
  // the whole 12 MiB counts as allocated.
  ASSERT_TRUE(p.Alloc(0, 11 * kMiB + 1, 0));
  EXPECT_EQ(p.reserved_bytes(), 12 * kMiB);
  EXPECT_EQ(p.figures().allocated_bytes, 12 * kMiB);
  // 12 MiB + 512 -> a 14 MiB segment; remainder 2 MiB - 512 > 1 MiB: split.
  ASSERT_TRUE(p.Alloc(1, 12 * kMiB + 1, 0));
  EXPECT_EQ(p.reserved_bytes(), 26 * kMiB);
  EXPECT_EQ(p.figures().allocated_bytes, 24 * kMiB + 512);
}

TEST(NativePolicyTest, BlocksAreReusedOnlyOnTheirStream) {
  NativePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 64 * kMiB, /*stream=*/1));
  p.Free(0);
  ASSERT_TRUE(p.Alloc(1, 64 * kMiB, /*stream=*/2));  // cannot take stream 1's
  EXPECT_EQ(p.reserved_bytes(), 128 * kMiB);
  ASSERT_TRUE(p.Alloc(2, 64 * kMiB, /*stream=*/1));  // takes its own back
  EXPECT_EQ(p.reserved_bytes(), 128 * kMiB);
}

TEST(NativePolicyTest, BestFitTakesTheSmallestBlockThatFits) {
  NativePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 40 * kMiB, 0));
  ASSERT_TRUE(p.Alloc(1, 30 * kMiB, 0));
  ASSERT_TRUE(p.Alloc(2, 50 * kMiB, 0));
  p.Free(0);
  p.Free(1);
  p.Free(2);
  // 29 MiB takes the 30 MiB block; the 1 MiB remainder is not > 1 MiB, so
  // the block is not split.
  ASSERT_TRUE(p.Alloc(3, 29 * kMiB, 0));
  EXPECT_EQ(p.figures().allocated_bytes, 30 * kMiB);
  EXPECT_EQ(p.reserved_bytes(), 120 * kMiB);
}

TEST(NativePolicyTest, FreeNeighboursCoalesce) {
  NativePolicy p(Capacity(kGiB));
  ASSERT_TRUE(p.Alloc(0, 2 * kMiB, 0));  // 20 MiB segment: [0 2][rem 18]
  ASSERT_TRUE(p.Alloc(1, 2 * kMiB, 0));  // [0 2][1 2][rem 16]
  ASSERT_TRUE(p.Alloc(2, 2 * kMiB, 0));  // [0][1][2][rem 14]
  p.Free(0);
  p.Free(2);  // merges with the remainder
  p.Free(1);  // merges both sides: the segment is one free block again
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
  ASSERT_TRUE(p.Alloc(3, 19 * kMiB, 0));
  EXPECT_EQ(p.reserved_bytes(), 20 * kMiB);
}

TEST(NativePolicyTest, OomRetryReleasesWholeCachedSegments) {
  NativePolicy p(Capacity(40 * kMiB));
  ASSERT_TRUE(p.Alloc(0, 24 * kMiB, /*stream=*/1));
  p.Free(0);  // a whole free segment on stream 1
  // Stream 2 cannot reuse it: cudaMalloc of 24 MiB fails (24 + 24 > 40), the
  // ladder releases the cached segment and retries.
  ASSERT_TRUE(p.Alloc(1, 24 * kMiB, /*stream=*/2));
  EXPECT_EQ(p.figures().alloc_retries, 1u);
  EXPECT_EQ(p.reserved_bytes(), 24 * kMiB);
  EXPECT_EQ(p.figures().unmaps, 1u);
  EXPECT_EQ(p.figures().peak_reserved_bytes, 24 * kMiB);
}

TEST(NativePolicyTest, SplitSegmentsAreNotReleasedSoTheRequestOoms) {
  NativePolicy p(Capacity(40 * kMiB));
  ASSERT_TRUE(p.Alloc(0, 2 * kMiB, 0));  // 20 MiB segment, 18 MiB free in it
  ASSERT_TRUE(p.Alloc(1, 20 * kMiB, 0));
  EXPECT_FALSE(p.Alloc(2, 20 * kMiB, 0));  // 18 MiB cached but unusable
  EXPECT_EQ(p.figures().ooms, 1u);
  EXPECT_EQ(p.figures().alloc_retries, 1u);
  EXPECT_EQ(p.reserved_bytes(), 40 * kMiB);
  EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
}

TEST(NativePolicyTest, OversizeBlocksFollowMaxSplitSize) {
  PytorchAllocConfig conf;
  conf.max_split_size = 100 * kMiB;
  NativePolicy p(Capacity(kGiB), conf);
  ASSERT_TRUE(p.Alloc(0, 200 * kMiB, 0));
  p.Free(0);
  // A request below max_split_size never takes an oversize block.
  ASSERT_TRUE(p.Alloc(1, 50 * kMiB, 0));
  EXPECT_EQ(p.reserved_bytes(), 250 * kMiB);
  // An oversize request takes an oversize block only within 20 MiB of it.
  ASSERT_TRUE(p.Alloc(2, 190 * kMiB, 0));
  EXPECT_EQ(p.reserved_bytes(), 250 * kMiB);
  p.Free(2);
  ASSERT_TRUE(p.Alloc(3, 170 * kMiB, 0));  // 200 >= 170 + 20: new segment
  EXPECT_EQ(p.reserved_bytes(), 420 * kMiB);
  // Oversize blocks are never split.
  EXPECT_EQ(p.figures().allocated_bytes, 50 * kMiB + 170 * kMiB);
}

TEST(NativePolicyTest, ReleaseAvailableCachedBlocksFreesOversizeFirst) {
  PytorchAllocConfig conf;
  conf.max_split_size = 100 * kMiB;
  NativePolicy p(Capacity(400 * kMiB), conf);
  ASSERT_TRUE(p.Alloc(0, 200 * kMiB, 0));
  ASSERT_TRUE(p.Alloc(1, 30 * kMiB, 0));
  p.Free(0);  // 200 MiB oversize cached
  // 180 MiB: the cached 200 MiB block is too big (>= 180 + 20); cudaMalloc
  // fails (230 + 180 > 400); release_available_cached_blocks frees the
  // oversize block; the retry succeeds without a full release.
  ASSERT_TRUE(p.Alloc(2, 180 * kMiB, 0));
  EXPECT_EQ(p.figures().alloc_retries, 0u);
  EXPECT_EQ(p.reserved_bytes(), 210 * kMiB);
}

TEST(NativePolicyTest, InvariantsHoldUnderARandomWorkload) {
  NativePolicy p(Capacity(2 * kGiB));
  std::mt19937_64 rng(42);
  std::vector<uint64_t> live;
  uint64_t next_id = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 100 < 55) {
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
    if (step % 500 == 0) {
      ASSERT_TRUE(p.CheckInvariants().ok())
          << step << ": " << p.CheckInvariants();
    }
  }
  for (uint64_t id : live) p.Free(id);
  ASSERT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
  EXPECT_EQ(p.figures().allocated_bytes, 0u);
  p.EmptyCache();
  EXPECT_EQ(p.reserved_bytes(), 0u);
  EXPECT_LE(p.figures().peak_reserved_bytes, 2 * kGiB);
}

}  // namespace
}  // namespace fragfree::replay
