// Tests of the bucket advisor: hand-computed examples, agreement with brute
// force and with the plain O(K n^2) programme, agreement with SizeRounding (the
// advised padding is what the allocator's rounding then produces), quantile
// merging, and sequence-length buckets.
#include "allocator/obs/bucket_advisor.h"

#include <algorithm>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace fragfree {
namespace {

SizeRounding WithBuckets(std::vector<size_t> buckets) {
  RoundingConfig c;
  c.buckets = std::move(buckets);
  return SizeRounding(c);
}

TEST(BucketAdvisor, HandComputedExample) {
  // Sizes 1000 x10, 1100 x10, 5000 x1 round to the 512-byte keys 1024, 1536 and
  // 5120. With K = 2 the last bucket must be 5120 (it serves the largest
  // request), so the choice is the other one:
  //   {1024, 5120}: 10*(1024-1000) + 10*(5120-1100) + (5120-5000)
  //               = 240 + 40200 + 120 = 40560
  //   {1536, 5120}: 10*(1536-1000) + 10*(1536-1100) + (5120-5000)
  //               = 5360 + 4360 + 120 = 9840   <- best
  // PyTorch's default (512-byte multiples): 10*24 + 10*436 + 120 = 4720 bytes
  // of padding, but three block sizes instead of two.
  std::vector<SizeCount> h = {{1000, 10}, {1100, 10}, {5000, 1}};
  BucketAdvisorOptions o;
  o.num_buckets = 2;
  BucketAdvice a = AdviseBuckets(h, o);
  EXPECT_EQ(a.buckets, (std::vector<size_t>{1536, 5120}));
  EXPECT_EQ(a.padding_bytes, 9840u);
  EXPECT_EQ(a.default_padding_bytes, 4720u);
  EXPECT_EQ(a.requests, 21u);
  EXPECT_EQ(a.requested_bytes, 26000u);
  EXPECT_EQ(a.default_distinct_sizes, 3u);
  EXPECT_EQ(a.advised_distinct_sizes, 2u);
  EXPECT_TRUE(a.exact);
  EXPECT_EQ(a.conf, "round_buckets:[1536,5K]");
  EXPECT_EQ(PaddingUnder(h, WithBuckets(a.buckets)), a.padding_bytes);
}

TEST(BucketAdvisor, OneBucketAndManyBuckets) {
  std::vector<SizeCount> h = {{1000, 10}, {1100, 10}, {5000, 1}};
  BucketAdvisorOptions o;
  o.num_buckets = 1;
  BucketAdvice one = AdviseBuckets(h, o);
  EXPECT_EQ(one.buckets, (std::vector<size_t>{5120}));
  EXPECT_EQ(one.padding_bytes, 5120u * 21 - 26000);
  o.num_buckets = 10;  // more buckets than sizes: every size is a bucket
  BucketAdvice many = AdviseBuckets(h, o);
  EXPECT_EQ(many.buckets, (std::vector<size_t>{1024, 1536, 5120}));
  EXPECT_EQ(many.padding_bytes, many.default_padding_bytes);
  o.num_buckets = 0;
  EXPECT_TRUE(AdviseBuckets(h, o).buckets.empty());
  EXPECT_TRUE(AdviseBuckets({}, {}).conf.empty());
}

TEST(BucketAdvisor, ConfFormat) {
  EXPECT_EQ(FormatRoundBuckets({1536, 5120, 1 << 20, size_t{3} << 30,
                                (size_t{3} << 20) + 512}),
            "round_buckets:[1536,5K,1M,3G,3146240]");
  EXPECT_EQ(FormatSizeSuffix(64 << 10), "64K");
}

TEST(BucketAdvisor, LargeRequestsAboveMaxSizeKeepDefaultRounding) {
  std::vector<SizeCount> h = {{1000, 10}, {1100, 10}, {(64 << 20) + 1, 3}};
  BucketAdvisorOptions o;
  o.num_buckets = 1;
  o.max_size = 1 << 20;
  BucketAdvice a = AdviseBuckets(h, o);
  EXPECT_EQ(a.buckets, (std::vector<size_t>{1536}));
  EXPECT_EQ(a.unbucketed_requests, 3u);
  // 10*536 + 10*436 for the bucketed, 3*511 for the default-rounded.
  EXPECT_EQ(a.padding_bytes, 5360u + 4360 + 3 * 511);
  EXPECT_EQ(a.advised_distinct_sizes, 2u);
  EXPECT_EQ(PaddingUnder(h, WithBuckets(a.buckets)), a.padding_bytes);
}

std::vector<SizeCount> RandomHistogram(std::mt19937_64& rng, size_t n,
                                       size_t max_size) {
  std::uniform_int_distribution<size_t> size(1, max_size);
  std::uniform_int_distribution<uint64_t> count(1, 1000);
  std::vector<SizeCount> h;
  for (size_t i = 0; i < n; ++i) h.push_back({size(rng), count(rng)});
  return h;
}

// Least padding over all sets of at most k buckets that include the largest
// key, measured by SizeRounding itself.
uint64_t BruteForce(const std::vector<SizeCount>& h, size_t k) {
  std::vector<size_t> keys;
  for (const SizeCount& e : h) keys.push_back((e.size + 511) / 512 * 512);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const size_t n = keys.size();
  uint64_t best = std::numeric_limits<uint64_t>::max();
  for (uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
    if (size_t(__builtin_popcount(mask)) + 1 > k) continue;
    std::vector<size_t> b;
    for (size_t i = 0; i + 1 < n; ++i) {
      if (mask & (1u << i)) b.push_back(keys[i]);
    }
    b.push_back(keys.back());
    best = std::min(best, PaddingUnder(h, WithBuckets(b)));
  }
  return best;
}

TEST(BucketAdvisor, MatchesBruteForce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<SizeCount> h = RandomHistogram(rng, 1 + trial % 11, 8192);
    for (size_t k : {1, 2, 3, 5}) {
      BucketAdvisorOptions o;
      o.num_buckets = k;
      BucketAdvice a = AdviseBuckets(h, o);
      ASSERT_EQ(a.padding_bytes, BruteForce(h, k)) << "trial " << trial;
      ASSERT_EQ(PaddingUnder(h, WithBuckets(a.buckets)), a.padding_bytes);
    }
  }
}

// The plain O(K n^2) programme over 512-byte keys.
uint64_t PlainDp(const std::vector<SizeCount>& h, size_t k) {
  std::vector<std::pair<uint64_t, std::pair<uint64_t, uint64_t>>> pts;
  for (const SizeCount& e : h) {
    pts.push_back({(e.size + 511) / 512 * 512, {e.count, e.count * e.size}});
  }
  std::sort(pts.begin(), pts.end());
  std::vector<uint64_t> v, w{0}, s{0};
  for (const auto& p : pts) {
    if (!v.empty() && v.back() == p.first) {
      w.back() += p.second.first;
      s.back() += p.second.second;
    } else {
      v.push_back(p.first);
      w.push_back(w.back() + p.second.first);
      s.push_back(s.back() + p.second.second);
    }
  }
  const size_t n = v.size();
  k = std::min(k, n);
  const uint64_t inf = std::numeric_limits<uint64_t>::max();
  std::vector<std::vector<uint64_t>> dp(k + 1,
                                        std::vector<uint64_t>(n + 1, inf));
  dp[0][0] = 0;
  for (size_t layer = 1; layer <= k; ++layer) {
    for (size_t j = 1; j <= n; ++j) {
      for (size_t i = 0; i < j; ++i) {
        if (dp[layer - 1][i] == inf) continue;
        uint64_t c =
            dp[layer - 1][i] + v[j - 1] * (w[j] - w[i]) - (s[j] - s[i]);
        dp[layer][j] = std::min(dp[layer][j], c);
      }
    }
  }
  uint64_t best = inf;
  for (size_t layer = 1; layer <= k; ++layer)
    best = std::min(best, dp[layer][n]);
  return best;
}

TEST(BucketAdvisor, DivideAndConquerMatchesThePlainProgramme) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<SizeCount> h = RandomHistogram(rng, 300, 4 << 20);
    for (size_t k : {1, 4, 16, 40}) {
      BucketAdvisorOptions o;
      o.num_buckets = k;
      BucketAdvice a = AdviseBuckets(h, o);
      ASSERT_TRUE(a.exact);
      ASSERT_EQ(a.padding_bytes, PlainDp(h, k)) << "trial " << trial;
      ASSERT_LE(a.buckets.size(), k);
    }
  }
}

TEST(BucketAdvisor, MergesIntoQuantilesAboveMaxPoints) {
  std::mt19937_64 rng(3);
  std::vector<SizeCount> h = RandomHistogram(rng, 20000, 256 << 20);
  BucketAdvisorOptions o;
  o.num_buckets = 16;
  o.max_points = 500;
  BucketAdvice a = AdviseBuckets(h, o);
  EXPECT_FALSE(a.exact);
  EXPECT_LE(a.points, 500u);
  EXPECT_EQ(a.buckets.size(), 16u);
  EXPECT_TRUE(std::is_sorted(a.buckets.begin(), a.buckets.end()));
  for (size_t b : a.buckets) EXPECT_EQ(b % 512, 0u);
  // Still what the allocator's rounding gives, and no worse than one bucket.
  EXPECT_EQ(PaddingUnder(h, WithBuckets(a.buckets)), a.padding_bytes);
  o.num_buckets = 1;
  EXPECT_LT(a.padding_bytes, AdviseBuckets(h, o).padding_bytes);
  o.num_buckets = 16;
  o.max_points = 4096;
  BucketAdvice finer = AdviseBuckets(h, o);
  EXPECT_LE(finer.points, 4096u);
  EXPECT_EQ(PaddingUnder(h, WithBuckets(finer.buckets)), finer.padding_bytes);
}

TEST(BucketAdvisor, JsonHasTheFields) {
  BucketAdvisorOptions o;
  o.num_buckets = 2;
  std::string j =
      BucketAdviceToJson(AdviseBuckets({{1000, 10}, {1100, 10}, {5000, 1}}, o));
  EXPECT_NE(j.find("\"buckets\":[1536,5120]"), std::string::npos) << j;
  EXPECT_NE(j.find("\"conf\":\"round_buckets:[1536,5K]\""), std::string::npos);
  EXPECT_NE(j.find("\"padding_bytes\":9840"), std::string::npos);
}

TEST(SequenceBuckets, HandComputedExample) {
  // Lengths 100 x5, 120 x5, 500 x1 with two buckets: {120, 500} pads
  // 5*20 = 100 tokens; {100, 500} would pad 5*380 = 1900. Padding everything to
  // 500 (one shape): 5*400 + 5*380 = 3900.
  std::vector<LengthCount> h = {{100, 5}, {120, 5}, {500, 1}};
  SeqBucketAdvice a = AdviseSequenceBuckets(h, 2);
  EXPECT_EQ(a.lengths, (std::vector<size_t>{120, 500}));
  EXPECT_EQ(a.sequences_per_bucket, (std::vector<uint64_t>{10, 1}));
  EXPECT_EQ(a.padding_tokens, 100u);
  EXPECT_EQ(a.pad_to_max_padding_tokens, 3900u);
  EXPECT_EQ(a.tokens, 1600u);
  EXPECT_EQ(a.sequences, 11u);
  // Multiples of 8 (tensor cores): keys 104, 120, 504; {120, 504} pads
  // 5*20 + 0 + 4 = 104 tokens.
  SeqBucketAdvice m8 = AdviseSequenceBuckets(h, 2, 8);
  EXPECT_EQ(m8.lengths, (std::vector<size_t>{120, 504}));
  EXPECT_EQ(m8.padding_tokens, 104u);
  EXPECT_NE(SeqBucketAdviceToJson(a).find("\"lengths\":[120,500]"),
            std::string::npos);
}

}  // namespace
}  // namespace fragfree
