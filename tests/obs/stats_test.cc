// IntegerStat against StatsToJson: one figure found by its key is the figure
// the JSON writes under it, for every integer key, and a key the JSON does not
// write as an integer is refused. Thread-safety: single-threaded test.
#include "allocator/obs/stats.h"

#include <cstdint>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace fragfree {
namespace {

// Every figure of a DeviceStats set to a value no other figure has.
DeviceStats DistinctStats() {
  DeviceStats s;
  int64_t next = 1;
  auto fill = [&next](Stat& stat) {
    stat = {next, next + 1, next + 2, next + 3};
    next += 4;
  };
#define FF_FILL_ARRAY(name) \
  for (Stat & stat : s.name.pool) fill(stat);
  FF_STAT_ARRAY_FIELDS(FF_FILL_ARRAY)
#undef FF_FILL_ARRAY
#define FF_FILL_STAT(name) fill(s.name);
  FF_STAT_FIELDS(FF_FILL_STAT)
#undef FF_FILL_STAT
#define FF_FILL_COUNTER(name) s.name = next++;
  FF_COUNTER_FIELDS(FF_FILL_COUNTER)
  FF_GAUGE_FIELDS(FF_FILL_COUNTER)
  FF_SLEEP_FIELDS(FF_FILL_COUNTER)
  FF_TIMING_FIELDS(FF_FILL_COUNTER)
#undef FF_FILL_COUNTER
  return s;
}

TEST(IntegerStat, EveryIntegerKeyOfTheJsonHasItsValue) {
  const DeviceStats s = DistinctStats();
  const std::string json = StatsToJson(s);
  const std::regex pair("\"([^\"]+)\":(-?[0-9.]+)");
  int integer_keys = 0;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), pair);
       it != std::sregex_iterator(); ++it) {
    const std::string key = (*it)[1];
    if (key.rfind("fragmentation.", 0) == 0) {
      EXPECT_EQ(IntegerStat(s, key), std::nullopt) << key;
      continue;
    }
    ++integer_keys;
    EXPECT_EQ(IntegerStat(s, key), std::stoll((*it)[2])) << key;
  }
  // 9 arrays x 3 pools x 4 figures, 4 stats x 4 figures, and the counters.
  EXPECT_GT(integer_keys, 9 * 3 * 4 + 4 * 4);
}

TEST(IntegerStat, PyTorchsKeysReadTheirFigures) {
  DeviceStats s;
  s.allocated_bytes.pool[kPoolAll] = {10, 20, 30, 40};
  s.reserved_bytes.pool[kPoolLarge].peak = 7;
  s.num_ooms = 3;
  EXPECT_EQ(IntegerStat(s, "allocated_bytes.all.current"), 10);
  EXPECT_EQ(IntegerStat(s, "allocated_bytes.all.peak"), 20);
  EXPECT_EQ(IntegerStat(s, "allocated_bytes.all.freed"), 40);
  EXPECT_EQ(IntegerStat(s, "reserved_bytes.large_pool.peak"), 7);
  EXPECT_EQ(IntegerStat(s, "num_ooms"), 3);
}

TEST(IntegerStat, KeysTheJsonDoesNotWriteAreRefused) {
  const DeviceStats s = DistinctStats();
  for (const char* key :
       {"", ".", "allocated_bytes", "allocated_bytes.all",
        "allocated_bytes.all.current.x", "allocated_bytes.some_pool.current",
        "allocated_bytes.all.largest", "allocated_bytes.current",
        "mapped_bytes", "mapped_bytes.all.current", "num_ooms.current",
        "no_such_counter", "fragmentation.u_alloc", "current"}) {
    EXPECT_EQ(IntegerStat(s, key), std::nullopt) << key;
  }
}

}  // namespace
}  // namespace fragfree
