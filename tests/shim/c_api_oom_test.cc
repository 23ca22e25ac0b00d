// A failed request through the C API on the simulated backend (the issue's
// reproduction): a 512 MiB device under a 1 GiB limit holds 300 MiB, and a
// second 300 MiB request fails. It must leave nothing behind: no idle page, no
// handle, the device's free memory as before. Its own binary: ff_init once per
// process. Thread-safety: single-threaded.
#include <string>

#include "fragfree/fragfree.h"
#include "gtest/gtest.h"

namespace {

ff_stats_t Stats() {
  ff_stats_t s;
  s.size = sizeof(s);
  EXPECT_EQ(ff_get_stats(0, &s), FF_OK);
  return s;
}

void Quiet(ff_status_t, const char*, void*) {}

TEST(FailedRequest, GivesBackEveryPageItCreated) {
  ASSERT_EQ(
      ff_init("backend:simulated,host_capacity_mb:512,memory_limit_mb:1024"),
      FF_OK)
      << ff_last_error();
  ff_set_error_handler(Quiet, nullptr);
  const auto stream = reinterpret_cast<ff_stream_t>(0x10);
  void* held = ff_malloc(300 << 20, 0, stream);
  ASSERT_NE(held, nullptr) << ff_last_error();
  const ff_stats_t before = Stats();
  EXPECT_EQ(ff_malloc(300 << 20, 0, stream), nullptr);
  EXPECT_NE(std::string(ff_last_error()).find("out of memory"),
            std::string::npos)
      << ff_last_error();
  const ff_stats_t after = Stats();
  EXPECT_EQ(after.idle_page_bytes.current, 0)
      << "pages created for the failed request stayed";
  EXPECT_EQ(after.handles_created - after.handles_released,
            before.handles_created - before.handles_released);
  EXPECT_EQ(after.handles_created - after.handles_released, 150);
  EXPECT_EQ(after.device_free_bytes, before.device_free_bytes);
  EXPECT_EQ(after.reserved_bytes[0].current, before.reserved_bytes[0].current);
  EXPECT_EQ(after.idle_page_bytes.peak, before.idle_page_bytes.peak);
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  EXPECT_EQ(after.num_alloc_retries, before.num_alloc_retries + 1);
  EXPECT_EQ(ff_check_invariants(0), FF_OK) << ff_last_error();
  ff_set_error_handler(nullptr, nullptr);
  EXPECT_EQ(ff_free(held, FF_DEVICE_OWNER), FF_OK);
}

}  // namespace
