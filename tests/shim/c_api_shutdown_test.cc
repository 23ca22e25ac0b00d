// After ff_shutdown every call fails with FF_ERR_STATE and says why; nothing
// crashes. (Its own binary: shutdown is final for the process.)
#include <string>

#include "fragfree/fragfree.h"
#include "gtest/gtest.h"

TEST(CApiShutdown, CallsAfterShutdownAreClearErrors) {
  ASSERT_EQ(ff_init("backend:host,host_capacity_mb:8,host_granularity_kb:64"),
            FF_OK);
  void* p = ff_malloc(1000, 0, nullptr);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(ff_shutdown(), FF_OK);
  ff_set_error_handler([](ff_status_t, const char*, void*) {}, nullptr);
  EXPECT_EQ(ff_malloc(1000, 0, nullptr), nullptr);
  EXPECT_NE(std::string(ff_last_error()).find("after ff_shutdown"),
            std::string::npos)
      << ff_last_error();
  EXPECT_EQ(ff_free(p, 0), FF_ERR_STATE);
  EXPECT_EQ(ff_empty_cache(0), FF_ERR_STATE);
  EXPECT_EQ(ff_init(nullptr), FF_ERR_STATE);
}
