// Tests for bench/replay/pytorch_alloc_config.h: PyTorch's size rules and the
// PYTORCH_CUDA_ALLOC_CONF subset.
// Thread-safety: single-threaded tests.
#include "bench/replay/pytorch_alloc_config.h"

#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fragfree::replay {
namespace {

TEST(RoundSizeTest, DefaultIs512ByteMultiples) {
  const PytorchAllocConfig c;
  EXPECT_EQ(RoundSize(0, c), 512u);
  EXPECT_EQ(RoundSize(1, c), 512u);
  EXPECT_EQ(RoundSize(512, c), 512u);
  EXPECT_EQ(RoundSize(513, c), 1024u);
  EXPECT_EQ(RoundSize(5 * kMiB + 1, c), 5 * kMiB + 512);
}

TEST(RoundSizeTest, PowerOfTwoDivisions) {
  EXPECT_EQ(RoundUpPower2Division(1200, 4), 1280u);  // PyTorch's example
  EXPECT_EQ(RoundUpPower2Division(1024, 4), 1024u);  // powers of two unchanged
  EXPECT_EQ(RoundUpPower2Division(3, 4), 4u);        // step 0 -> next power
  PytorchAllocConfig c;
  c.roundup_power2_divisions.fill(4);
  // Only sizes above 512 * divisions use the divisions.
  EXPECT_EQ(RoundSize(1200, c), 1536u);
  // 5 MiB + 1 lies in [4, 8) MiB; 4 divisions -> steps of 1 MiB.
  EXPECT_EQ(RoundSize(5 * kMiB + 1, c), 6 * kMiB);
  EXPECT_EQ(RoundSize(1300 * kMiB, c), 1536 * kMiB);
}

TEST(AllocationSizeTest, SegmentSizes) {
  const PytorchAllocConfig c;
  EXPECT_EQ(AllocationSize(512, c), 2 * kMiB);
  EXPECT_EQ(AllocationSize(kMiB, c), 2 * kMiB);
  EXPECT_EQ(AllocationSize(kMiB + 512, c), 20 * kMiB);
  EXPECT_EQ(AllocationSize(10 * kMiB - 512, c), 20 * kMiB);
  EXPECT_EQ(AllocationSize(10 * kMiB, c), 10 * kMiB);
  EXPECT_EQ(AllocationSize(10 * kMiB + 512, c), 12 * kMiB);
  EXPECT_TRUE(IsSmallRequest(kMiB));
  EXPECT_FALSE(IsSmallRequest(kMiB + 512));
}

TEST(ParseConfTest, ParsesTheKeysThatMatter) {
  absl::StatusOr<PytorchAllocConfig> c = ParsePytorchAllocConf(
      "max_split_size_mb:200, roundup_power2_divisions:[256:1,512:2,>:8],"
      "expandable_segments:True");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_split_size, 200 * kMiB);
  EXPECT_EQ(c->max_non_split_rounding, 20 * kMiB);
  // 256 MB -> index 8 (and everything below, as the first entry); 512 -> 9;
  // '>' fills 10..15.
  EXPECT_EQ(c->roundup_power2_divisions[0], 1u);
  EXPECT_EQ(c->roundup_power2_divisions[8], 1u);
  EXPECT_EQ(c->roundup_power2_divisions[9], 2u);
  EXPECT_EQ(c->roundup_power2_divisions[10], 8u);
  EXPECT_EQ(c->roundup_power2_divisions[15], 8u);

  c = ParsePytorchAllocConf(
      "roundup_power2_divisions:4,large_segment_size_mb:64");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->roundup_power2_divisions[7], 4u);
  EXPECT_EQ(c->large_segment_size, 64 * kMiB);
  EXPECT_EQ(c->max_non_split_rounding, 64 * kMiB);  // follows the segment size

  c = ParsePytorchAllocConf("");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->max_split_size, UINT64_MAX);
}

TEST(ParseConfTest, RejectsBadInput) {
  for (const char* bad :
       {"nonsense:1", "max_split_size_mb", "max_split_size_mb:x",
        "max_split_size_mb:10", "roundup_power2_divisions:3",
        "roundup_power2_divisions:[100:2]", "roundup_power2_divisions:[256:2",
        "large_segment_size_mb:8", "max_split_size_mb:200 x"}) {
    EXPECT_FALSE(ParsePytorchAllocConf(bad).ok()) << bad;
  }
  EXPECT_THAT(
      std::string(ParsePytorchAllocConf("nonsense:1").status().message()),
      ::testing::HasSubstr("unrecognised key 'nonsense'"));
}

// Every error message, word for word.
TEST(ParseConfTest, ErrorMessagesExactly) {
  const std::pair<const char*, const char*> kCases[] = {
      {R"(max_split_size_mb)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: expected ':' after 'max_split_size_mb')"},
      {R"(max_split_size_mb:)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: no value for 'max_split_size_mb')"},
      {R"(max_split_size_mb:x)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: expected a number after ':')"},
      {R"(max_split_size_mb:10)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: max_split_size_mb must be >= the large segment size (20))"},
      {R"(max_split_size_mb:40,large_segment_size_mb:11)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: large_segment_size_mb must be an even number > 10)"},
      {R"(large_segment_size_mb:10)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: large_segment_size_mb must be an even number > 10)"},
      {R"(large_segment_size_mb:13)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: large_segment_size_mb must be an even number > 10)"},
      {R"(max_non_split_rounding_mb:q)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: expected a number after ':')"},
      {R"(roundup_power2_divisions:3)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions must be a power of 2)"},
      {R"(roundup_power2_divisions:x)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: expected a number after ':')"},
      {R"(roundup_power2_divisions:0)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions must be a power of 2)"},
      {R"(roundup_power2_divisions:[256:1)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: missing ']')"},
      {R"(roundup_power2_divisions:[256:3])",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions values must be powers of 2)"},
      {R"(roundup_power2_divisions:[300:2])",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions sizes must be powers of 2)"},
      {R"(roundup_power2_divisions:[256])",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: expected 'MB:divisions' in roundup_power2_divisions)"},
      {R"(roundup_power2_divisions:[x:2])",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: roundup_power2_divisions sizes must be powers of 2)"},
      {R"(roundup_power2_divisions:[>:y])",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: expected a number after ':')"},
      {R"(expandable_segments:True max_split_size_mb:40)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: expected ',' before 'max_split_size_mb')"},
      {R"(nonsense:1)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: unrecognised key 'nonsense')"},
      {R"(:)", R"(bad PYTORCH_CUDA_ALLOC_CONF: expected ':' after ':')"},
      {R"(,)", R"(bad PYTORCH_CUDA_ALLOC_CONF: expected ':' after ',')"},
      {R"(max_split_size_mb:40,,)",
       R"(bad PYTORCH_CUDA_ALLOC_CONF: expected ':' after ',')"},
  };
  for (const auto& [conf, message] : kCases) {
    absl::StatusOr<PytorchAllocConfig> c = ParsePytorchAllocConf(conf);
    ASSERT_FALSE(c.ok()) << conf;
    EXPECT_EQ(c.status().message(), message) << conf;
  }
}

// Blanks separate words like FRAGFREE_CONF's (allocator/base/config_tokens.h);
// ignored keys may take a word or a list.
TEST(ParseConfTest, AcceptsIgnoredKeysListsAndBlanks) {
  for (const char* good :
       {R"(large_segment_size_mb:12)",
        R"(roundup_power2_divisions:[256:2,>:4])",
        R"(roundup_power2_divisions:[256:2 >:4])",
        R"(expandable_segments:True)", R"(backend:[a,b])",
        R"(pinned_num_register_threads:8,garbage_collection_threshold:0.6)",
        R"(max_split_size_mb:40,)"}) {
    EXPECT_TRUE(ParsePytorchAllocConf(good).ok()) << good;
  }
  absl::StatusOr<PytorchAllocConfig> c =
      ParsePytorchAllocConf(" roundup_power2_divisions : [ 256:2 >:4 ] ");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->roundup_power2_divisions[8], 2u);
  EXPECT_EQ(c->roundup_power2_divisions[9], 4u);
}

}  // namespace
}  // namespace fragfree::replay
