// The bucket advisor through the C API on the host backend: the engine samples
// request sizes (bucket_sample:1 here), ff_bucket_advice_json advises from
// them, an OOM caused by fragmentation carries the concrete round_buckets
// string in its report, and ff_advise_sequence_buckets_json buckets a data
// loader's lengths; bad arguments are clear errors. Its own binary: the
// configuration is process-wide and set once.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fragfree/fragfree.h"
#include "gtest/gtest.h"

namespace {

struct Captured {
  std::vector<std::pair<ff_status_t, std::string>> errors;
};

void Capture(ff_status_t status, const char* message, void* arg) {
  static_cast<Captured*>(arg)->errors.emplace_back(status, message);
}

class CApiBucketTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(ff_init("backend:host,host_capacity_mb:16,host_granularity_kb:64,"
                      "bucket_sample:1,bucket_advice_k:3"),
              FF_OK)
        << ff_last_error();
  }
  void SetUp() override { ff_set_error_handler(Capture, &captured_); }
  void TearDown() override { ff_set_error_handler(nullptr, nullptr); }
  std::string LastMessage() const {
    return captured_.errors.empty() ? "" : captured_.errors.back().second;
  }
  Captured captured_;
};

std::string AdviceJson(int device, int k) {
  std::string json(ff_bucket_advice_json(device, k, nullptr, 0) + 1, '\0');
  json.resize(ff_bucket_advice_json(device, k, json.data(), json.size()));
  return json;
}

std::string SequenceJson(const std::vector<int64_t>& lengths, int k,
                         int multiple_of) {
  size_t n = ff_advise_sequence_buckets_json(lengths.data(), lengths.size(), k,
                                             multiple_of, nullptr, 0);
  if (n == 0) return "";
  std::string json(n + 1, '\0');
  json.resize(ff_advise_sequence_buckets_json(lengths.data(), lengths.size(), k,
                                              multiple_of, json.data(),
                                              json.size()));
  return json;
}

// Runs first (gtest keeps declaration order): the engine's histogram starts
// empty.
TEST_F(CApiBucketTest, AdviceFromObservedRequests) {
  // Before any request: no buckets, an empty conf string.
  std::string json = AdviceJson(0, 2);
  EXPECT_NE(json.find("\"buckets\":[]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"conf\":\"\""), std::string::npos) << json;

  // docs/oom.md's example: 1000 x10, 1100 x10, 5000 x1, K = 2.
  std::vector<void*> held;
  for (int i = 0; i < 10; ++i) held.push_back(ff_malloc(1000, 0, nullptr));
  for (int i = 0; i < 10; ++i) held.push_back(ff_malloc(1100, 0, nullptr));
  held.push_back(ff_malloc(5000, 0, nullptr));
  json = AdviceJson(0, 2);
  EXPECT_NE(json.find("\"buckets\":[1536,5120]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"conf\":\"round_buckets:[1536,5K]\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"padding_bytes\":9840"), std::string::npos) << json;
  EXPECT_NE(json.find("\"sample_every\":1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"samples\":21"), std::string::npos) << json;
  EXPECT_NE(json.find("\"device\":0"), std::string::npos) << json;
  // num_buckets <= 0: the bucket_advice_k option (3).
  EXPECT_NE(AdviceJson(0, 0).find("\"num_buckets\":3"), std::string::npos);
  // The buffer convention of ff_stats_json: truncated, full length returned.
  char small[16];
  const size_t need = ff_bucket_advice_json(0, 2, small, sizeof(small));
  EXPECT_EQ(need, json.size());
  EXPECT_EQ(strlen(small), sizeof(small) - 1);
  for (void* p : held) ASSERT_EQ(ff_free(p, 0), FF_OK);
  // A device never served reports an empty histogram without being created.
  EXPECT_NE(AdviceJson(7, 2).find("\"samples\":0"), std::string::npos);
  EXPECT_TRUE(captured_.errors.empty()) << LastMessage();

  EXPECT_EQ(ff_bucket_advice_json(0, 257, nullptr, 0), 0u);
  EXPECT_EQ(captured_.errors.back().first, FF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastMessage().find("num_buckets 257"), std::string::npos)
      << LastMessage();
}

TEST_F(CApiBucketTest, FragmentationOomCarriesTheRoundBucketsString) {
  // Varied small sizes fill the 16 MiB device; freeing every other one
  // strands free memory in partially used 64 KiB pages, so a 4 MiB request
  // finds no whole page: an OOM caused by fragmentation.
  const size_t sizes[] = {3000, 7000, 12000, 20000, 33000, 47000, 60000};
  std::vector<void*> held;
  size_t total = 0;
  for (size_t i = 0; total < (15u << 20) + (512u << 10); ++i) {
    const size_t size = sizes[i % 7];
    void* p = ff_malloc(size, 0, nullptr);
    ASSERT_NE(p, nullptr) << LastMessage();
    held.push_back(p);
    total += size;
  }
  for (size_t i = 0; i < held.size(); i += 2) {
    ASSERT_EQ(ff_free(held[i], 0), FF_OK);
  }
  EXPECT_EQ(ff_malloc(4 << 20, 0, nullptr), nullptr);
  ASSERT_FALSE(captured_.errors.empty());
  EXPECT_EQ(captured_.errors.back().first, FF_ERR_OOM);
  const std::string report = LastMessage();
  EXPECT_NE(report.find("Fragmentation"), std::string::npos) << report;
  EXPECT_NE(report.find("FRAGFREE_CONF=round_buckets:["), std::string::npos)
      << report;
  EXPECT_NE(report.find("observed requests"), std::string::npos) << report;
  // The advice in the report is the one the C API gives (K = 3).
  const std::string json = AdviceJson(0, 0);
  const size_t at = json.find("\"conf\":\"") + 8;
  const std::string conf = json.substr(at, json.find('"', at) - at);
  EXPECT_EQ(conf.rfind("round_buckets:[", 0), 0u) << json;
  EXPECT_NE(report.find("FRAGFREE_CONF=" + conf + " "), std::string::npos)
      << conf << "\n"
      << report;
  for (size_t i = 1; i < held.size(); i += 2) {
    ASSERT_EQ(ff_free(held[i], 0), FF_OK);
  }
  EXPECT_EQ(ff_check_invariants(0), FF_OK);
}

TEST_F(CApiBucketTest, SequenceBuckets) {
  // Short sentences and long documents: two buckets pad far less than one.
  std::vector<int64_t> lengths;
  for (int i = 0; i < 100; ++i) lengths.push_back(20 + i % 10);  // 20..29
  for (int i = 0; i < 10; ++i) lengths.push_back(500 + i * 10);  // 500..590
  const std::string json = SequenceJson(lengths, 2, 8);
  EXPECT_NE(json.find("\"lengths\":[32,592]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"sequences_per_bucket\":[100,10]"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"sequences\":110"), std::string::npos) << json;
  EXPECT_NE(json.find("\"multiple_of\":8"), std::string::npos) << json;
  EXPECT_TRUE(captured_.errors.empty()) << LastMessage();
  // No lengths: valid, no buckets.
  EXPECT_NE(SequenceJson({}, 4, 1).find("\"lengths\":[]"), std::string::npos);

  EXPECT_EQ(SequenceJson({10, -3}, 2, 8), "");
  EXPECT_NE(LastMessage().find("negative"), std::string::npos) << LastMessage();
  EXPECT_EQ(SequenceJson({10}, 0, 8), "");
  EXPECT_NE(LastMessage().find("num_buckets 0"), std::string::npos);
  EXPECT_EQ(SequenceJson({10}, 2, 0), "");
  EXPECT_NE(LastMessage().find("multiple_of 0"), std::string::npos);
  EXPECT_EQ(ff_advise_sequence_buckets_json(nullptr, 3, 2, 8, nullptr, 0), 0u);
  EXPECT_NE(LastMessage().find("NULL"), std::string::npos);
  EXPECT_EQ(captured_.errors.back().first, FF_ERR_INVALID_ARGUMENT);
}

}  // namespace
