// SizeHistogram: sampling rate (off, every request, 1 in N without lock-step on
// periodic workloads), exact totals per 512-byte key, the bound on distinct
// sizes (coarsening keeps counts, bytes and the largest size), reads that
// see every sample whenever they come, and Clear.
#include "allocator/obs/size_histogram.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace fragfree {
namespace {

uint64_t TotalCount(const std::vector<SizeCount>& h) {
  uint64_t n = 0;
  for (const SizeCount& e : h) n += e.count;
  return n;
}

uint64_t TotalBytes(const std::vector<SizeCount>& h) {
  uint64_t n = 0;
  for (const SizeCount& e : h) n += e.size * e.count;
  return n;
}

TEST(SizeHistogram, OffRecordsNothing) {
  SizeHistogram h(0);
  for (int i = 0; i < 100000; ++i) h.Note(1000 + i);
  EXPECT_EQ(h.info().samples, 0u);
  EXPECT_TRUE(h.Entries().empty());
}

TEST(SizeHistogram, EveryRequestIsExactPerKey) {
  SizeHistogram h(1);
  // Three sizes under one 512-byte key (1025..1536), one under another.
  h.Note(1100);
  h.Note(1200);
  h.Note(1536);
  h.Note(5000);
  const std::vector<SizeCount> e = h.Entries();
  EXPECT_EQ(h.info().samples, 4u);
  EXPECT_EQ(h.info().distinct_sizes, 2u);
  EXPECT_EQ(h.info().precision_bits, 0);
  EXPECT_EQ(TotalCount(e), 4u);
  EXPECT_EQ(TotalBytes(e), 1100u + 1200 + 1536 + 5000);
  EXPECT_EQ(e.back().size, 5000u);
  // The largest size of each key is kept as is.
  bool has_1536 = false;
  for (const SizeCount& s : e) has_1536 |= s.size == 1536;
  EXPECT_TRUE(has_1536);
}

TEST(SizeHistogram, SamplesOneInNAndScalesCounts) {
  SizeHistogram h(8);
  constexpr int kCalls = 80000;
  for (int i = 0; i < kCalls; ++i) h.Note(4096);
  const uint64_t samples = h.info().samples;
  EXPECT_GT(samples, uint64_t(kCalls / 8 * 0.9));
  EXPECT_LT(samples, uint64_t(kCalls / 8 * 1.1));
  const std::vector<SizeCount> e = h.Entries();
  EXPECT_EQ(TotalCount(e), samples * 8);  // an estimate of every request
  for (const SizeCount& s : e) EXPECT_EQ(s.size, 4096u);
}

TEST(SizeHistogram, FirstRequestIsSampled) {
  SizeHistogram h(1000);
  h.Note(777);
  EXPECT_EQ(h.info().samples, 1u);
}

TEST(SizeHistogram, PeriodicWorkloadIsNotSampledInLockStep) {
  // A "step" of 8 requests of 8 sizes repeated: sampling exactly every 8th
  // request would see one size only.
  SizeHistogram h(8);
  for (int step = 0; step < 2000; ++step) {
    for (int k = 1; k <= 8; ++k) h.Note(size_t(k) * 10000);
  }
  std::set<size_t> seen;
  for (const SizeCount& s : h.Entries()) seen.insert(s.size);
  EXPECT_EQ(seen.size(), 8u);
}

TEST(SizeHistogram, DistinctSizesStayBoundedAndTotalsAreKept) {
  SizeHistogram h(1, 256);
  uint64_t bytes = 0;
  size_t largest = 0;
  constexpr int kCalls = 50000;
  for (int i = 0; i < kCalls; ++i) {
    // Sizes from 512 B to ~100 MB, all distinct 512-byte keys.
    const size_t size = 512 * size_t(1 + (uint64_t(i) * 7919) % 200000) - 3;
    h.Note(size);
    bytes += size;
    largest = std::max(largest, size);
    ASSERT_LE(h.info().distinct_sizes, 256u);
  }
  const SizeHistogram::Info info = h.info();
  EXPECT_GT(info.precision_bits, 0);
  EXPECT_EQ(info.samples, uint64_t(kCalls));
  const std::vector<SizeCount> e = h.Entries();
  EXPECT_EQ(TotalCount(e), uint64_t(kCalls));
  EXPECT_EQ(TotalBytes(e), bytes);
  EXPECT_EQ(e.back().size, largest);
  // The advice over a coarsened histogram still covers the largest request.
  BucketAdvisorOptions o;
  o.num_buckets = 4;
  BucketAdvice a = AdviseBuckets(e, o);
  ASSERT_EQ(a.buckets.size(), 4u);
  EXPECT_GE(a.buckets.back(), largest);
}

TEST(SizeHistogram, ReadsSeeTheSameHistogramWhenever) {
  // Read after every request (each sample added at once) or only at the end
  // (samples added in batches): the same table, coarsenings included.
  SizeHistogram each(1, 128), batched(1, 128);
  for (int i = 0; i < 5000; ++i) {
    const size_t size = 512 * size_t(1 + (uint64_t(i) * 104729) % 90000) + 1;
    each.Note(size);
    ASSERT_EQ(each.info().samples, uint64_t(i) + 1);
    batched.Note(size);
  }
  const SizeHistogram::Info a = each.info(), b = batched.info();
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.distinct_sizes, b.distinct_sizes);
  EXPECT_EQ(a.precision_bits, b.precision_bits);
  EXPECT_GT(b.precision_bits, 0);
  const std::vector<SizeCount> ea = each.Entries(), eb = batched.Entries();
  ASSERT_EQ(ea.size(), eb.size());
  for (size_t i = 0; i < ea.size(); ++i) {
    EXPECT_EQ(ea[i].size, eb[i].size);
    EXPECT_EQ(ea[i].count, eb[i].count);
  }
}

TEST(SizeHistogram, ClearForgetsSamples) {
  SizeHistogram h(1, 128);
  for (int i = 1; i <= 1000; ++i) h.Note(size_t(i) * 512);
  EXPECT_GT(h.info().precision_bits, 0);
  h.Note(700);  // not yet read: pending, forgotten too
  h.Clear();
  EXPECT_EQ(h.info().samples, 0u);
  EXPECT_EQ(h.info().precision_bits, 0);
  EXPECT_TRUE(h.Entries().empty());
  h.Note(100);
  EXPECT_EQ(h.info().samples, 1u);
}

}  // namespace
}  // namespace fragfree
