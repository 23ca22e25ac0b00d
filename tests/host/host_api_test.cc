// The ff_host_* C API and the preload hooks, on the emulated pinning backend
// (ctest runs this with FRAGFREE_CONF=backend:host and FRAGFREE_HOST_CONF=
// chunk_mb:4,emulate_populate:False): sizes, errors and their codes and
// messages, record_stream, stats (struct and JSON), empty_cache.
// Thread-safety: single-threaded; the runtime is process-wide, so the tests
// share one pinned allocator and compare stats before and after.
#include "shim/host_api.h"

#include <cstring>
#include <string>
#include <vector>

#include "fragfree/fragfree.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;

struct Captured {
  std::vector<ff_status_t> codes;
  std::string last;
};

class HostApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ff_set_error_handler(
        [](ff_status_t code, const char* message, void* arg) {
          auto* c = static_cast<Captured*>(arg);
          c->codes.push_back(code);
          c->last = message;
        },
        &captured_);
  }
  void TearDown() override { ff_set_error_handler(nullptr, nullptr); }
  static ff_host_stats_t Stats() {
    ff_host_stats_t s;
    s.size = sizeof(s);
    EXPECT_EQ(ff_host_stats(&s), FF_OK);
    return s;
  }
  Captured captured_;
};

TEST_F(HostApiTest, MallocFreeAndStats) {
  void* p = ff_host_malloc(1 << 20);
  ASSERT_NE(p, nullptr) << captured_.last;
  memset(p, 1, 1 << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
  EXPECT_EQ(ff_host_allocation_size(p), size_t{1} << 20);
  ff_host_stats_t s = Stats();
  EXPECT_EQ(s.version, FF_HOST_STATS_VERSION);
  EXPECT_EQ(s.cuda, 0);
  EXPECT_GE(s.pinned_bytes, 4 << 20);  // chunk_mb:4
  EXPECT_GE(s.live_bytes, 1 << 20);
  EXPECT_GE(s.pin_calls, 1);
  EXPECT_GT(s.metadata_bytes, 0);
  void* q = ff_host_malloc(1000);
  EXPECT_EQ(Stats().pin_calls, s.pin_calls) << "served from the same chunk";
  EXPECT_EQ(ff_host_free(p), FF_OK);
  EXPECT_EQ(ff_host_free(q), FF_OK);
  EXPECT_EQ(ff_host_free(nullptr), FF_OK);
  EXPECT_TRUE(captured_.codes.empty()) << captured_.last;
}

TEST_F(HostApiTest, SizeZeroIsNullWithoutError) {
  EXPECT_EQ(ff_host_malloc(0), nullptr);
  EXPECT_TRUE(captured_.codes.empty());
}

TEST_F(HostApiTest, ErrorsHaveCodesAndMessages) {
  int on_stack = 0;
  EXPECT_EQ(ff_host_free(&on_stack), FF_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(captured_.last, HasSubstr("not a fragfree pinned allocation"));
  void* p = ff_host_malloc(4096);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ff_host_free(static_cast<char*>(p) + 8), FF_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(captured_.last, HasSubstr("interior pointer"));
  EXPECT_EQ(ff_host_free(p), FF_OK);
  EXPECT_EQ(ff_host_free(p), FF_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(captured_.last, HasSubstr("double free"));
  EXPECT_THAT(std::string(ff_last_error()), HasSubstr("double free"));
  EXPECT_EQ(ff_host_record_stream(p, reinterpret_cast<ff_stream_t>(0x10)),
            FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ff_host_malloc(size_t{1} << 62), nullptr);
  EXPECT_EQ(captured_.codes.back(), FF_ERR_INVALID_ARGUMENT);
  ff_host_stats_t small;
  small.size = 8;
  EXPECT_EQ(ff_host_stats(&small), FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ff_host_stats(nullptr), FF_ERR_INVALID_ARGUMENT);
}

TEST_F(HostApiTest, RecordStreamRecordsAnEventAtFree) {
  const int64_t events = Stats().events_recorded;
  void* p = ff_host_malloc(100000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(ff_host_record_stream(p, reinterpret_cast<ff_stream_t>(0x10)),
            FF_OK);
  EXPECT_EQ(ff_host_free(p), FF_OK);
  ff_host_stats_t s = Stats();
  EXPECT_EQ(s.events_recorded, events + 1);
  EXPECT_EQ(s.pending_bytes, 0) << "host events complete at once";
}

TEST_F(HostApiTest, EmptyCacheUnpinsFreeChunks) {
  void* p = ff_host_malloc(10 << 20);  // a chunk of its own
  ASSERT_NE(p, nullptr);
  const int64_t pinned = Stats().pinned_bytes;
  EXPECT_EQ(ff_host_free(p), FF_OK);
  EXPECT_EQ(ff_host_empty_cache(), FF_OK);
  ff_host_stats_t s = Stats();
  EXPECT_LE(s.pinned_bytes, pinned - (10 << 20));
  EXPECT_GE(s.unpin_calls, 1);
}

TEST_F(HostApiTest, StatsJson) {
  size_t n = ff_host_stats_json(nullptr, 0);
  ASSERT_GT(n, 0u);
  std::string json(n + 1, '\0');
  EXPECT_EQ(ff_host_stats_json(json.data(), json.size()), n);
  json.resize(n);
  for (const char* key : {"\"pinned_bytes\"", "\"pin_calls\"", "\"chunks\"",
                          "\"live_bytes\"", "\"backend\": \"emulated",
                          "\"metadata\"", "\"chunk_bytes\": 4194304"}) {
    EXPECT_THAT(json, HasSubstr(key));
  }
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  char tiny[4];
  EXPECT_EQ(ff_host_stats_json(tiny, sizeof(tiny)), n);
  EXPECT_EQ(strlen(tiny), 3u);
}

// Snapshots carry the pinned pool as "host_segments": each chunk, tiled by
// its blocks, a live allocation among them with its requested size.
TEST_F(HostApiTest, SnapshotHasHostSegments) {
  void* p = ff_host_malloc(10000);
  ASSERT_NE(p, nullptr);
  std::string json(ff_snapshot_json(0, nullptr, 0) + 1, '\0');
  json.resize(ff_snapshot_json(0, json.data(), json.size()));
  const size_t at = json.find("\"host_segments\":[{\"address\":");
  ASSERT_NE(at, std::string::npos) << json;
  const std::string block =
      "{\"address\":" + std::to_string(reinterpret_cast<uintptr_t>(p)) +
      ",\"size\":" +
      std::to_string(fragfree::PinnedHostAllocator::RoundSize(10000)) +
      ",\"requested_size\":10000,\"state\":\"active_allocated\","
      "\"frames\":[]}";
  EXPECT_THAT(json.substr(at), HasSubstr(block));
  EXPECT_THAT(json.substr(at), HasSubstr("\"total_size\":4194304"));
  ASSERT_EQ(ff_host_free(p), FF_OK);
  std::string after(ff_snapshot_json(0, nullptr, 0) + 1, '\0');
  after.resize(ff_snapshot_json(0, after.data(), after.size()));
  EXPECT_THAT(after, ::testing::Not(HasSubstr("active_allocated")));
}

TEST_F(HostApiTest, PreloadHooks) {
  void* p = nullptr;
  int err = -1;
  // Write-combined memory and size 0 are left to the CUDA runtime.
  EXPECT_FALSE(fragfree::ServePinnedHostAlloc(&p, 4096, 0x04, &err));
  EXPECT_FALSE(fragfree::ServePinnedHostAlloc(&p, 0, 0, &err));
  // cudaHostAllocDefault / Portable / Mapped are served from the pool.
  for (unsigned flags : {0u, 1u, 2u, 3u}) {
    ASSERT_TRUE(fragfree::ServePinnedHostAlloc(&p, 4096, flags, &err));
    EXPECT_EQ(err, 0);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(ff_host_allocation_size(p), 4096u);
    ASSERT_TRUE(fragfree::ServePinnedHostFree(p, &err));
    EXPECT_EQ(err, 0);
  }
  // Freed twice: still the pool's pointer, so an error, not a forward.
  ASSERT_TRUE(fragfree::ServePinnedHostFree(p, &err));
  EXPECT_EQ(err, 1);
  // Memory the pool did not hand out is forwarded to cudaFreeHost.
  int on_stack = 0;
  EXPECT_FALSE(fragfree::ServePinnedHostFree(&on_stack, &err));
  EXPECT_FALSE(fragfree::ServePinnedHostFree(nullptr, &err));
}

}  // namespace
