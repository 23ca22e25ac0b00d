// Unit tests of the policy layer: size rounding (PyTorch's rules, buckets) and
// the free index (best fit, bins, removal).
#include "allocator/policy/free_index.h"
#include "allocator/policy/size_classes.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

TEST(SizeRounding, PyTorchDefaults) {
  SizeRounding r;
  EXPECT_EQ(r.Round(1), 512u);
  EXPECT_EQ(r.Round(512), 512u);
  EXPECT_EQ(r.Round(513), 1024u);
  EXPECT_EQ(r.Round(3 * 1048576 + 1), 3 * 1048576 + 512u);
}

TEST(SizeRounding, PowerOfTwoDivisions) {
  // PyTorch's own example: 1200 with 4 divisions rounds to 1280.
  EXPECT_EQ(SizeRounding::RoundUpPower2Division(1200, 4), 1280u);
  EXPECT_EQ(SizeRounding::RoundUpPower2Division(1024, 4), 1024u);
  RoundingConfig c;
  c.divisions.fill(4);
  SizeRounding r(c);
  // Below 512 * divisions, plain 512 rounding applies.
  EXPECT_EQ(r.Round(1200), 1536u);
  EXPECT_EQ(r.Round(5 << 20), 5u << 20);
  EXPECT_EQ(r.Round((5 << 20) + 1), 6u << 20);
}

TEST(SizeRounding, BucketsRoundUpToTheNextBucket) {
  RoundingConfig c;
  c.buckets = {4096, 1 << 20, 8 << 20};
  SizeRounding r(c);
  EXPECT_EQ(r.Round(1), 4096u);
  EXPECT_EQ(r.Round(4097), 1u << 20);
  EXPECT_EQ(r.Round(8 << 20), 8u << 20);
  EXPECT_EQ(r.Round((8 << 20) + 1), (8u << 20) + 512);  // above: default rule
}

TEST(SizeRounding, DivisionIndex) {
  EXPECT_EQ(SizeRounding::DivisionIndex(1000), 0u);
  EXPECT_EQ(SizeRounding::DivisionIndex(3 << 20), 1u);
  EXPECT_EQ(SizeRounding::DivisionIndex(size_t{1} << 40), 15u);
}

TEST(FreeIndex, BinsAreMonotonic) {
  uint32_t last = 0;
  for (size_t s = 512; s < (size_t{1} << 40); s += s / 7 + 512) {
    uint32_t b = FreeIndex::BinOf((s + 511) / 512 * 512);
    EXPECT_GE(b, last);
    last = b;
  }
}

TEST(FreeIndex, FindsTheBestFit) {
  FreeIndex index;
  Block blocks[4];
  size_t sizes[4] = {8192, 4096, 1 << 20, 4608};
  for (int i = 0; i < 4; ++i) {
    blocks[i].size = sizes[i];
    blocks[i].addr = 0x10000 * (i + 1);
    index.Insert(&blocks[i]);
  }
  EXPECT_EQ(index.FindFit(4000), &blocks[1]);
  EXPECT_EQ(index.FindFit(4097), &blocks[3]);
  EXPECT_EQ(index.FindFit(5000), &blocks[0]);
  EXPECT_EQ(index.FindFit(9000), &blocks[2]);
  EXPECT_EQ(index.FindFit(2 << 20), nullptr);
  index.Remove(&blocks[1]);
  EXPECT_EQ(index.FindFit(4000), &blocks[3]);
  EXPECT_EQ(index.count(), 3u);
  // Largest first.
  std::vector<size_t> seen;
  index.ForEachLargestFirst([&](Block* b) {
    seen.push_back(b->size);
    return true;
  });
  EXPECT_EQ(seen, (std::vector<size_t>{1 << 20, 8192, 4608}));
}

TEST(FreeIndex, PrefersLowerAddressAmongEqualSizes) {
  FreeIndex index;
  Block a, b;
  a.size = b.size = 65536;
  a.addr = 0x9000000;
  b.addr = 0x1000000;
  index.Insert(&a);
  index.Insert(&b);
  EXPECT_EQ(index.FindFit(65536), &b);
}

}  // namespace
}  // namespace fragfree
