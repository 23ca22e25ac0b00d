// Unit tests of FRAGFREE_CONF parsing: every key, PyTorch's syntax, clear
// errors.
#include "allocator/options.h"

#include "gtest/gtest.h"

namespace fragfree {
namespace {

TEST(Options, DefaultsAndKeys) {
  Options o = *Options::Parse("");
  EXPECT_EQ(o.backend, BackendKind::kCuda);
  o = *Options::Parse(
      "backend:host, host_capacity_mb:64,host_granularity_kb:64,"
      "reclaim_before_grow:False,per_process_memory_fraction:0.5,"
      "memory_limit_mb:32,stats_at_exit:True,trace_entries:1000,"
      "snapshot_path:/tmp/a:b.pickle,va_factor:4");
  EXPECT_EQ(o.backend, BackendKind::kHost);
  EXPECT_EQ(o.host_capacity_bytes, 64u << 20);
  EXPECT_EQ(o.host_granularity_bytes, 64u << 10);
  EXPECT_EQ(o.reclaim_before_grow, Options::Reclaim::kNever);
  EXPECT_DOUBLE_EQ(o.memory_fraction, 0.5);
  EXPECT_EQ(o.memory_limit_bytes, 32u << 20);
  EXPECT_TRUE(o.stats_at_exit);
  EXPECT_EQ(o.trace_entries, 1000u);
  EXPECT_EQ(o.snapshot_path, "/tmp/a:b.pickle");
  EXPECT_EQ(o.va_factor, 4u);
}

TEST(Options, RoundupPower2DivisionsBothForms) {
  Options o = *Options::Parse("roundup_power2_divisions:4");
  for (size_t d : o.rounding.divisions) EXPECT_EQ(d, 4u);
  o = *Options::Parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
  EXPECT_EQ(o.rounding.divisions[0], 1u);
  EXPECT_EQ(o.rounding.divisions[8], 1u);
  EXPECT_EQ(o.rounding.divisions[9], 2u);
  EXPECT_EQ(o.rounding.divisions[10], 4u);
  EXPECT_EQ(o.rounding.divisions[15], 8u);
}

TEST(Options, Buckets) {
  Options o = *Options::Parse("round_buckets:[1M,4096,64K]");
  EXPECT_EQ(o.rounding.buckets, (std::vector<size_t>{4096, 64 << 10, 1 << 20}));
  EXPECT_FALSE(Options::Parse("round_buckets:[1000]").ok());
}

TEST(Options, BucketAdvisorKeys) {
  Options o = *Options::Parse("");
  EXPECT_EQ(o.bucket_sample, 8u);
  EXPECT_EQ(o.bucket_advice_k, 4u);
  o = *Options::Parse("bucket_sample:0,bucket_advice_k:16");
  EXPECT_EQ(o.bucket_sample, 0u);
  EXPECT_EQ(o.bucket_advice_k, 16u);
  EXPECT_EQ(Options::Parse("bucket_sample:1")->bucket_sample, 1u);
  for (const char* bad :
       {"bucket_sample:-1", "bucket_sample:often", "bucket_sample:2000000",
        "bucket_advice_k:0", "bucket_advice_k:257", "bucket_advice_k:x"}) {
    absl::StatusOr<Options> r = Options::Parse(bad);
    ASSERT_FALSE(r.ok()) << bad;
    const std::string key =
        std::string(bad).substr(0, std::string(bad).find(':'));
    EXPECT_NE(r.status().message().find("'" + key + "'"), std::string::npos)
        << r.status();
  }
  EXPECT_NE(Options::Parse("bucket_advice_k:0")
                .status()
                .message()
                .find("from 1 to 256"),
            std::string::npos);
}

TEST(Options, ErrorsNameTheKey) {
  absl::StatusOr<Options> o = Options::Parse("expandable_segmentz:True");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("unknown key 'expandable_segmentz'"),
            std::string::npos);
  o = Options::Parse("backend:tpu");
  EXPECT_NE(o.status().message().find("'backend'"), std::string::npos);
  EXPECT_FALSE(Options::Parse("per_process_memory_fraction:2").ok());
  EXPECT_FALSE(Options::Parse("roundup_power2_divisions:3").ok());
  EXPECT_FALSE(Options::Parse("host_capacity_mb").ok());
  EXPECT_FALSE(Options::Parse("reclaim_before_grow:maybe").ok());
  EXPECT_EQ(Options::Parse("reclaim_before_grow:auto")->reclaim_before_grow,
            Options::Reclaim::kAuto);
  EXPECT_FALSE(Options::Parse("grow_slack:-1").ok());
  EXPECT_FALSE(Options::Parse("roundup_power2_divisions:[256:1").ok());
}

}  // namespace
}  // namespace fragfree
