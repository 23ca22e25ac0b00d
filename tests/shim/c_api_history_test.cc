// ff_record_history(-1, ...) called before any device is in use (as
// torch.cuda.memory._record_memory_history() usually is, before the first CUDA
// allocation) reaches the device first used afterwards. Its own binary: the
// device must not exist yet when the test starts.
#include <string>

#include "fragfree/fragfree.h"
#include "gtest/gtest.h"

TEST(CApiHistory, HistoryStartedBeforeADeviceIsUsedIsRecorded) {
  ASSERT_EQ(ff_init("backend:host,host_capacity_mb:8,host_granularity_kb:64"),
            FF_OK);
  ASSERT_EQ(ff_record_history(-1, 1, 1000), FF_OK) << ff_last_error();
  void* p = ff_malloc(5000, 0, nullptr);
  ASSERT_NE(p, nullptr) << ff_last_error();
  ASSERT_EQ(ff_free(p, 0), FF_OK);
  std::string json(ff_snapshot_json(0, nullptr, 0) + 1, '\0');
  ff_snapshot_json(0, json.data(), json.size());
  EXPECT_NE(json.find("\"action\":\"alloc\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"action\":\"free_completed\""), std::string::npos);
  // Stopping it for every device stops it for later ones too.
  ASSERT_EQ(ff_record_history(-1, 0, 0), FF_OK);
  std::string after(ff_snapshot_json(0, nullptr, 0) + 1, '\0');
  ff_snapshot_json(0, after.data(), after.size());
  EXPECT_EQ(after.find("\"action\":\"alloc\""), std::string::npos) << after;
}
