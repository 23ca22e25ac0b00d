// The bucket advisor's FRAGFREE_CONF string is one Options::Parse accepts, with
// the same buckets, and the allocator's rounding then pads exactly as advised.
#include <random>

#include "allocator/obs/bucket_advisor.h"
#include "allocator/options.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

TEST(BucketConf, ParsesBackIntoTheSameBuckets) {
  std::mt19937_64 rng(5);
  std::vector<SizeCount> h;
  for (int i = 0; i < 3000; ++i) {
    h.push_back({size_t(rng() % (size_t{3} << 30)) + 1, rng() % 100 + 1});
  }
  h.push_back({1000, 10});
  for (size_t k : {1, 2, 8, 32}) {
    BucketAdvisorOptions o;
    o.num_buckets = k;
    BucketAdvice a = AdviseBuckets(h, o);
    absl::StatusOr<Options> parsed = Options::Parse(a.conf);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << " for " << a.conf;
    EXPECT_EQ(parsed->rounding.buckets, a.buckets) << a.conf;
    EXPECT_EQ(PaddingUnder(h, SizeRounding(parsed->rounding)), a.padding_bytes);
  }
}

}  // namespace
}  // namespace fragfree
