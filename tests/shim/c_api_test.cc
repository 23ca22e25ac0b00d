// The C API as a C or C++ program sees it, on the host backend: allocation and
// free, stats, every kind of bad input reported through the error handler with
// a message that says what was wrong, and nothing corrupted afterwards.
// Shutdown is tested last, in its own test binary (c_api_shutdown_test), since
// it is final.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <regex>
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

class CApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(ff_init("backend:host,host_capacity_mb:16,host_granularity_kb:64,"
                      "time_calls:True"),
              FF_OK)
        << ff_last_error();
  }
  void SetUp() override {
    captured_.errors.clear();
    ff_set_error_handler(Capture, &captured_);
  }
  void TearDown() override { ff_set_error_handler(nullptr, nullptr); }
  std::string LastMessage() const {
    return captured_.errors.empty() ? "" : captured_.errors.back().second;
  }
  Captured captured_;
};

TEST_F(CApiTest, AllocFreeAndStats) {
  ff_stream_t stream = reinterpret_cast<ff_stream_t>(0x10);
  void* p = ff_malloc(1 << 20, 0, stream);
  ASSERT_NE(p, nullptr) << ff_last_error();
  memset(p, 0xab, 1 << 20);
  EXPECT_EQ(ff_allocation_size(p, 0), size_t{1} << 20);
  ff_stats_t s;
  s.size = sizeof(s);
  ASSERT_EQ(ff_get_stats(0, &s), FF_OK);
  EXPECT_EQ(s.version, FF_STATS_VERSION);
  EXPECT_EQ(s.allocated_bytes[0].current, 1 << 20);
  EXPECT_GE(s.reserved_bytes[0].current, 1 << 20);
  EXPECT_GT(s.device_total_bytes, 0);
  // The same without the device's memory (no driver call): those two are 0.
  ff_stats_t a;
  a.size = sizeof(a);
  ASSERT_EQ(ff_get_allocator_stats(0, &a), FF_OK);
  EXPECT_EQ(a.device_total_bytes, 0);
  EXPECT_EQ(a.device_free_bytes, 0);
  EXPECT_EQ(a.allocated_bytes[0].current, s.allocated_bytes[0].current);
  EXPECT_EQ(a.reserved_bytes[0].current, s.reserved_bytes[0].current);
  EXPECT_EQ(a.cached_free_bytes, s.cached_free_bytes);
  char json[64];
  size_t need = ff_stats_json(0, json, sizeof(json));
  EXPECT_GT(need, sizeof(json));
  EXPECT_EQ(strlen(json), sizeof(json) - 1);
  std::string full(need + 1, '\0');
  ff_stats_json(0, full.data(), full.size());
  EXPECT_NE(full.find("\"allocated_bytes.all.current\":1048576"),
            std::string::npos);
  // One figure by its key, as ff_get_allocator_stats reads it (the device's
  // memory only for its own two keys).
  int64_t value = -1;
  ASSERT_EQ(ff_get_stat(0, "allocated_bytes.all.current", &value), FF_OK);
  EXPECT_EQ(value, 1 << 20);
  ASSERT_EQ(ff_get_stat(0, "reserved_bytes.all.peak", &value), FF_OK);
  EXPECT_EQ(value, a.reserved_bytes[0].peak);
  ASSERT_EQ(ff_get_stat(0, "device_total_bytes", &value), FF_OK);
  EXPECT_EQ(value, s.device_total_bytes);
  ASSERT_EQ(ff_get_stat(FF_DEVICE_DEFAULT, "num_ooms", &value), FF_OK);
  EXPECT_EQ(value, 0);
  EXPECT_EQ(ff_free(p, 0), FF_OK);
  EXPECT_EQ(ff_check_invariants(0), FF_OK);
  EXPECT_TRUE(captured_.errors.empty());
}

// The timing counters (docs/stats.md, "Where the time goes") count what was
// done: the engine calls, and one map call per page mapped.
TEST_F(CApiTest, TimingCountersCountCalls) {
  ff_stats_t before;
  before.size = sizeof(before);
  ASSERT_EQ(ff_get_stats(0, &before), FF_OK);
  ASSERT_EQ(ff_empty_cache(0), FF_OK);
  void* p = ff_malloc(3 << 16, 0, nullptr);  // three 64 KiB pages
  ASSERT_NE(p, nullptr) << ff_last_error();
  EXPECT_EQ(ff_free(p, 0), FF_OK);
  ff_stats_t after;
  after.size = sizeof(after);
  ASSERT_EQ(ff_get_stats(0, &after), FF_OK);
  EXPECT_EQ(after.alloc_cpu_calls - before.alloc_cpu_calls, 2);
  EXPECT_GT(after.alloc_cpu_ns, before.alloc_cpu_ns);
  EXPECT_EQ(after.map_calls - before.map_calls,
            after.pages_mapped - before.pages_mapped);
  EXPECT_GE(after.map_calls - before.map_calls, 3);
  EXPECT_GE(after.set_access_calls - before.set_access_calls, 1);
  EXPECT_GE(after.map_ns, before.map_ns);
  EXPECT_GE(after.create_calls, after.handles_created);
}

TEST_F(CApiTest, SizeZeroIsNullWithoutError) {
  EXPECT_EQ(ff_malloc(0, 0, nullptr), nullptr);
  EXPECT_EQ(ff_free(nullptr, 0), FF_OK);
  EXPECT_TRUE(captured_.errors.empty());
}

TEST_F(CApiTest, BadInputIsAClearErrorAndCorruptsNothing) {
  void* keep = ff_malloc(4096, 0, nullptr);
  memset(keep, 7, 4096);
  int local = 0;
  EXPECT_EQ(ff_free(&local, 0), FF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastMessage().find("not allocated by fragfree"), std::string::npos)
      << LastMessage();
  EXPECT_STREQ(ff_last_error(), LastMessage().c_str());

  void* p = ff_malloc(8192, 0, nullptr);
  ASSERT_EQ(ff_free(p, 0), FF_OK);
  EXPECT_EQ(ff_free(p, 0), FF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastMessage().find("double free"), std::string::npos)
      << LastMessage();

  EXPECT_EQ(ff_malloc(size_t{1} << 60, 0, nullptr), nullptr);
  EXPECT_EQ(captured_.errors.back().first, FF_ERR_OOM);
  EXPECT_NE(LastMessage().find("out of memory"), std::string::npos);

  EXPECT_EQ(ff_malloc(100, 3, nullptr), nullptr);
  EXPECT_EQ(captured_.errors.back().first, FF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastMessage().find("device 3 does not exist"), std::string::npos)
      << LastMessage();
  EXPECT_EQ(ff_malloc(100, -1, nullptr), nullptr);
  // A free on a device that does not exist is refused, and frees nothing.
  EXPECT_EQ(ff_free(keep, 3), FF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastMessage().find("device 3 does not exist"), std::string::npos)
      << LastMessage();
  EXPECT_EQ(ff_free(keep, 64), FF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastMessage().find("out of range"), std::string::npos)
      << LastMessage();

  EXPECT_EQ(ff_set_memory_fraction(2.0, 0), FF_ERR_INVALID_ARGUMENT);
  ff_stats_t small;
  small.size = 4;
  EXPECT_EQ(ff_get_stats(0, &small), FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ff_get_allocator_stats(0, &small), FF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastMessage().find("ff_get_allocator_stats"), std::string::npos)
      << LastMessage();
  int64_t value = 42;
  EXPECT_EQ(ff_get_stat(0, "allocated_bytes.all.largest", &value),
            FF_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastMessage().find("\"allocated_bytes.all.largest\""),
            std::string::npos)
      << LastMessage();
  EXPECT_EQ(ff_get_stat(0, "fragmentation.u_alloc", &value),
            FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ff_get_stat(0, nullptr, &value), FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ff_get_stat(0, "num_ooms", nullptr), FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(value, 42);  // untouched by a refused request

  // Configuration is fixed once memory is in use.
  EXPECT_EQ(ff_init("backend:host"), FF_ERR_STATE);

  unsigned char check[4096];
  memcpy(check, keep, 4096);
  for (unsigned char c : check) ASSERT_EQ(c, 7);
  EXPECT_EQ(ff_free(keep, 0), FF_OK);
  EXPECT_EQ(ff_check_invariants(0), FF_OK);
}

TEST_F(CApiTest, PyTorchEntryPointsAndHooks) {
  void* stream = reinterpret_cast<void*>(0x20);
  void* p = fragfree_malloc(3000, 0, stream);
  ASSERT_NE(p, nullptr);
  fragfree_record_stream(p, reinterpret_cast<void*>(0x30));
  fragfree_free(p, 3000, 0, stream);
  fragfree_empty_cache();
  fragfree_set_memory_fraction(1.0, 0);
  EXPECT_THROW(fragfree_malloc(size_t{1} << 60, 0, stream), std::runtime_error);
  try {
    fragfree_malloc(size_t{1} << 60, 0, stream);
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("CUDA out of memory.", 0), 0u)
        << e.what();
  }
  EXPECT_EQ(ff_check_invariants(0), FF_OK);
}

TEST_F(CApiTest, OomReportUsesTheProgramsHints) {
  ASSERT_EQ(ff_set_oom_hints(0, 4 << 20, 4 << 20, 8 << 20, 0,
                             FF_TECH_BF16_AUTOCAST | FF_TECH_FLASH_ATTENTION),
            FF_OK);
  std::vector<void*> held;
  // Fill the 16 MiB device, then ask for more than is left.
  for (int i = 0; i < 15; ++i) held.push_back(ff_malloc(1 << 20, 0, nullptr));
  EXPECT_EQ(ff_malloc(4 << 20, 0, nullptr), nullptr);
  const std::string report = LastMessage();
  EXPECT_EQ(report.rfind("CUDA out of memory.", 0), 0u) << report;
  EXPECT_NE(report.find("optimizer"), std::string::npos) << report;
  EXPECT_NE(report.find("arameters"), std::string::npos) << report;
  for (void* p : held) EXPECT_EQ(ff_free(p, 0), FF_OK);
  EXPECT_EQ(ff_set_oom_hints(99, 0, 0, 0, 0, 0), FF_ERR_INVALID_ARGUMENT);
  if (getenv("FRAGFREE_PRINT_OOM_REPORT")) printf("%s\n", report.c_str());
}

TEST_F(CApiTest, SnapshotAndHistory) {
  ASSERT_EQ(ff_record_history(0, 1, 1000), FF_OK);
  void* p = ff_malloc(5000, 0, nullptr);
  ASSERT_EQ(ff_free(p, 0), FF_OK);
  std::string json(ff_snapshot_json(0, nullptr, 0) + 1, '\0');
  ff_snapshot_json(0, json.data(), json.size());
  EXPECT_NE(json.find("\"action\":\"alloc\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"action\":\"free_completed\""), std::string::npos);
  ASSERT_EQ(ff_record_history(0, 0, 0), FF_OK);
  // A device fragfree never served reports empty, without being created.
  std::string other(ff_snapshot_json(5, nullptr, 0) + 1, '\0');
  ff_snapshot_json(5, other.data(), other.size());
  EXPECT_NE(other.find("\"segments\":[]"), std::string::npos) << other;
}

// ff_set_trace_context tags the calling thread's alloc and free_requested
// entries (the PyTorch adapter's handle for a Python stack); other entries and
// untagged calls carry no "context".
TEST_F(CApiTest, TraceContextTagsTheCallersEntries) {
  ASSERT_EQ(ff_record_history(0, 1, 1000), FF_OK);
  EXPECT_EQ(ff_set_trace_context(41), 0u);
  void* tagged = ff_malloc(5000, 0, nullptr);
  ASSERT_NE(tagged, nullptr) << ff_last_error();
  EXPECT_EQ(ff_set_trace_context(42), 41u);
  ASSERT_EQ(ff_free(tagged, 0), FF_OK);
  EXPECT_EQ(ff_set_trace_context(0), 42u);
  void* plain = ff_malloc(7000, 0, nullptr);
  ASSERT_EQ(ff_free(plain, 0), FF_OK);
  std::string json(ff_snapshot_json(0, nullptr, 0) + 1, '\0');
  json.resize(ff_snapshot_json(0, json.data(), json.size()));
  ASSERT_EQ(ff_record_history(0, 0, 0), FF_OK);
  auto entries = [&](const std::string& pattern) {
    const std::regex re(pattern);
    return std::distance(std::sregex_iterator(json.begin(), json.end(), re),
                         std::sregex_iterator());
  };
  // Entries are {...} without nested objects, so [^}]* stays in one entry.
  EXPECT_EQ(entries(R"("action":"alloc"[^}]*"size":5000,[^}]*"context":41})"),
            1)
      << json;
  EXPECT_EQ(
      entries(
          R"("action":"free_requested"[^}]*"size":5000,[^}]*"context":42})"),
      1)
      << json;
  // The untagged calls and the deferred free_completed carry none; a
  // segment_map made for the tagged alloc carries its tag.
  EXPECT_EQ(entries(R"("size":7000,[^}]*"context")"), 0) << json;
  EXPECT_EQ(entries(R"("action":"free_completed"[^}]*"context")"), 0) << json;
  EXPECT_EQ(entries(R"("context":(?!4[12]}))"), 0) << json;
}

}  // namespace
