// The C API's device argument on two devices (the host backend emulating two,
// host_devices:2): FF_DEVICE_OWNER finds a pointer's device for ff_free,
// ff_record_stream, ff_allocation_size and PyTorch's record_stream entry point
// (which passes no device); FF_DEVICE_ALL reaches both devices;
// FF_DEVICE_DEFAULT is device 0. Its own binary: ff_init once per process.
// Thread-safety: single-threaded.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fragfree/fragfree.h"
#include "gtest/gtest.h"

namespace {

std::vector<std::string>* errors = nullptr;

void Capture(ff_status_t, const char* message, void*) {
  if (errors != nullptr) errors->push_back(message);
}

class TwoDevices : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(ff_init("backend:host,host_devices:2,host_capacity_mb:16,"
                      "host_granularity_kb:64"),
              FF_OK)
        << ff_last_error();
  }
  void SetUp() override {
    errors = &errors_;
    ff_set_error_handler(Capture, nullptr);
  }
  void TearDown() override {
    ff_set_error_handler(nullptr, nullptr);
    errors = nullptr;
  }
  static ff_stats_t Stats(int device) {
    ff_stats_t s;
    s.size = sizeof(s);
    EXPECT_EQ(ff_get_stats(device, &s), FF_OK);
    return s;
  }
  std::vector<std::string> errors_;
};

const auto kS1 = reinterpret_cast<ff_stream_t>(0x100);
const auto kS2 = reinterpret_cast<ff_stream_t>(0x200);

TEST_F(TwoDevices, TheHostBackendEmulatesTwoDevices) {
  EXPECT_EQ(ff_device_count(), 2);
  EXPECT_EQ(ff_malloc(1 << 20, 2, kS1), nullptr);
  ASSERT_EQ(errors_.size(), 1u);
  EXPECT_NE(errors_[0].find("host_devices"), std::string::npos) << errors_[0];
}

// The bug: PyTorch's record_stream entry point passed device -1, which
// ff_record_stream took as device 0: a block of device 1 got "not allocated by
// fragfree on device 0" (reported, and the use never recorded), so device 1
// reused its memory while the other stream still used it.
TEST_F(TwoDevices, RecordStreamGoesToTheDeviceThatOwnsThePointer) {
  const size_t size = 1 << 20;
  void* p = ff_malloc(size, 1, kS1);
  ASSERT_NE(p, nullptr) << ff_last_error();
  memset(p, 0x5a, size);
  EXPECT_EQ(ff_allocation_size(p, FF_DEVICE_OWNER), size);
  EXPECT_EQ(ff_allocation_size(p, 0), 0u);
  EXPECT_EQ(ff_allocation_size(p, 1), size);
  fragfree_record_stream(p, kS2);  // as PyTorch calls it: no device
  EXPECT_TRUE(errors_.empty()) << errors_.front();
  EXPECT_EQ(ff_record_stream(p, FF_DEVICE_OWNER, kS2), FF_OK)
      << ff_last_error();
  // The use was recorded on device 1: freed, the block waits for kS2's work
  // (active, no longer allocated) instead of going back at once.
  ASSERT_EQ(ff_free(p, FF_DEVICE_OWNER), FF_OK) << ff_last_error();
  const ff_stats_t s1 = Stats(1);
  EXPECT_EQ(s1.allocated_bytes[0].current, 0);
  EXPECT_EQ(s1.active_bytes[0].current, int64_t(size))
      << "record_stream did not reach device 1";
  EXPECT_EQ(Stats(0).active_bytes[0].current, 0);
  int64_t active = -1;  // one figure, from the device asked
  ASSERT_EQ(ff_get_stat(1, "active_bytes.all.current", &active), FF_OK);
  EXPECT_EQ(active, int64_t(size));
  ASSERT_EQ(ff_get_stat(0, "active_bytes.all.current", &active), FF_OK);
  EXPECT_EQ(active, 0);
  // A pointer no device owns is an error naming it, with the owner lookup.
  int local = 0;
  EXPECT_EQ(ff_record_stream(&local, FF_DEVICE_OWNER, kS2),
            FF_ERR_INVALID_ARGUMENT);
  ASSERT_FALSE(errors_.empty());
  EXPECT_NE(errors_.back().find("any device"), std::string::npos)
      << errors_.back();
  EXPECT_EQ(ff_check_invariants(FF_DEVICE_ALL), FF_OK) << ff_last_error();
}

// FF_DEVICE_OWNER's free (the native adapter's deleter) asks each device in
// turn to free the pointer if it is its own: device 0, asked first about a
// block of device 1, changes and counts nothing; a pointer no device owns, or
// one freed twice, is an error naming the owner lookup and counted nowhere.
TEST_F(TwoDevices, FreeByOwnerTouchesOnlyTheOwner) {
  void* a = ff_malloc(1 << 20, 0, kS1);
  void* b = ff_malloc(2 << 20, 1, kS1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const ff_stats_t before0 = Stats(0), before1 = Stats(1);
  ASSERT_EQ(ff_free(b, FF_DEVICE_OWNER), FF_OK) << ff_last_error();
  const ff_stats_t after0 = Stats(0), after1 = Stats(1);
  EXPECT_EQ(after0.allocated_bytes[0].current,
            before0.allocated_bytes[0].current);
  EXPECT_EQ(after0.invalid_frees, before0.invalid_frees);
  EXPECT_EQ(after1.allocated_bytes[0].current,
            before1.allocated_bytes[0].current - (2 << 20));
  EXPECT_EQ(after1.invalid_frees, before1.invalid_frees);
  EXPECT_TRUE(errors_.empty()) << errors_.front();
  for (void* bad : {b, static_cast<void*>(&errors_)}) {
    EXPECT_EQ(ff_free(bad, FF_DEVICE_OWNER), FF_ERR_INVALID_ARGUMENT);
    ASSERT_FALSE(errors_.empty());
    EXPECT_NE(errors_.back().find("any device"), std::string::npos)
        << errors_.back();
  }
  EXPECT_EQ(Stats(0).invalid_frees, before0.invalid_frees);
  EXPECT_EQ(Stats(1).invalid_frees, before1.invalid_frees);
  EXPECT_EQ(Stats(0).allocated_bytes[0].current,
            before0.allocated_bytes[0].current);
  ASSERT_EQ(ff_free(a, FF_DEVICE_OWNER), FF_OK) << ff_last_error();
  EXPECT_EQ(ff_check_invariants(FF_DEVICE_ALL), FF_OK) << ff_last_error();
}

TEST_F(TwoDevices, AllAndDefaultDevices) {
  void* a = ff_malloc(1 << 20, 0, kS1);
  void* b = ff_malloc(2 << 20, 1, kS1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(ff_free(a, FF_DEVICE_OWNER), FF_OK);
  ASSERT_EQ(ff_free(b, FF_DEVICE_OWNER), FF_OK);
  // A second malloc on each device completes device 1's pending free.
  ASSERT_EQ(ff_free(ff_malloc(512, 1, kS1), 1), FF_OK);
  EXPECT_GT(Stats(0).reserved_bytes[0].current, 0);
  EXPECT_GT(Stats(1).reserved_bytes[0].current, 0);
  ASSERT_EQ(ff_empty_cache(FF_DEVICE_ALL), FF_OK) << ff_last_error();
  EXPECT_EQ(Stats(0).reserved_bytes[0].current, 0);
  EXPECT_EQ(Stats(1).reserved_bytes[0].current, 0);
  // FF_DEVICE_DEFAULT describes device 0.
  void* c = ff_malloc(3 << 20, 1, kS1);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(Stats(FF_DEVICE_DEFAULT).allocated_bytes[0].current, 0);
  EXPECT_EQ(Stats(1).allocated_bytes[0].current, 3 << 20);
  char json[1 << 14];
  ASSERT_GT(ff_stats_json(FF_DEVICE_DEFAULT, json, sizeof(json)), 0u);
  EXPECT_NE(std::string(json).find("\"allocated_bytes.all.current\":0,"),
            std::string::npos);
  ASSERT_EQ(ff_free(c, FF_DEVICE_OWNER), FF_OK);
  EXPECT_TRUE(errors_.empty()) << errors_.front();
}

}  // namespace
