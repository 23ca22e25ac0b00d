// Unit tests of FRAGFREE_CONF parsing: every key, PyTorch's syntax, clear
// errors.
#include "allocator/options.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

bool SameOptions(const Options& a, const Options& b) {
  return a.backend == b.backend &&
         a.host_capacity_bytes == b.host_capacity_bytes &&
         a.host_granularity_bytes == b.host_granularity_bytes &&
         a.host_devices == b.host_devices &&
         a.memory_fraction == b.memory_fraction &&
         a.memory_limit_bytes == b.memory_limit_bytes &&
         a.rounding.divisions == b.rounding.divisions &&
         a.rounding.buckets == b.rounding.buckets &&
         a.reclaim_before_grow == b.reclaim_before_grow &&
         a.grow_slack == b.grow_slack &&
         a.move_time_budget == b.move_time_budget &&
         a.move_clock == b.move_clock && a.va_factor == b.va_factor &&
         a.stats_at_exit == b.stats_at_exit && a.time_calls == b.time_calls &&
         a.snapshot_path == b.snapshot_path &&
         a.oom_report_path == b.oom_report_path &&
         a.trace_entries == b.trace_entries &&
         a.bucket_sample == b.bucket_sample &&
         a.bucket_advice_k == b.bucket_advice_k;
}

TEST(Options, DefaultsAndKeys) {
  Options o = *Options::Parse("");
  EXPECT_EQ(o.backend, "cuda");
  EXPECT_FALSE(o.time_calls);
  o = *Options::Parse(
      "backend:host, host_capacity_mb:64,host_granularity_kb:64,"
      "reclaim_before_grow:False,per_process_memory_fraction:0.5,"
      "memory_limit_mb:32,stats_at_exit:True,trace_entries:1000,"
      "snapshot_path:/tmp/a:b.pickle,va_factor:4,time_calls:True");
  EXPECT_EQ(o.backend, "host");
  EXPECT_EQ(o.host_capacity_bytes, 64u << 20);
  EXPECT_EQ(o.host_granularity_bytes, 64u << 10);
  EXPECT_EQ(o.reclaim_before_grow, Options::Reclaim::kNever);
  EXPECT_DOUBLE_EQ(o.memory_fraction, 0.5);
  EXPECT_EQ(o.memory_limit_bytes, 32u << 20);
  EXPECT_TRUE(o.stats_at_exit);
  EXPECT_EQ(o.trace_entries, 1000u);
  EXPECT_EQ(o.snapshot_path, "/tmp/a:b.pickle");
  EXPECT_EQ(o.va_factor, 4u);
  EXPECT_TRUE(o.time_calls);
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
  EXPECT_EQ(Options::Parse("move_time_budget:0.1")->move_time_budget, 0.1);
  EXPECT_EQ(Options::Parse("move_time_budget:0")->move_time_budget, 0.0);
  EXPECT_EQ(Options::Parse("")->move_clock, Options::MoveClock::kWall);
  EXPECT_EQ(Options::Parse("move_clock:cpu")->move_clock,
            Options::MoveClock::kCpu);
  EXPECT_EQ(Options::Parse("move_clock:cpu,move_clock:wall")->move_clock,
            Options::MoveClock::kWall);
  EXPECT_FALSE(Options::Parse("roundup_power2_divisions:[256:1").ok());
}

// Every error message, word for word: the key, the bad value and what was
// expected.
TEST(Options, ErrorMessagesExactly) {
  const std::pair<const char*, const char*> kCases[] = {
      {R"(backend:tpu)",
       R"(bad value 'tpu' for key 'backend': expected cuda, host or simulated)"},
      {R"(backend)", R"(key 'backend' needs a value ('backend:<value>'))"},
      {R"(backend:)", R"(key 'backend' needs a value ('backend:<value>'))"},
      {R"(backend:,)", R"(key 'backend' needs a value ('backend:<value>'))"},
      {R"(backend:[x])", R"(key 'backend' needs a value ('backend:<value>'))"},
      {R"(host_capacity_mb:0)",
       R"(bad value '0' for key 'host_capacity_mb': expected a positive number of MiB)"},
      {R"(host_capacity_mb:x)",
       R"(bad value 'x' for key 'host_capacity_mb': expected a whole number)"},
      {R"(host_granularity_kb:3)",
       R"(bad value '3' for key 'host_granularity_kb': expected a power of two >= 4 (KiB))"},
      {R"(host_granularity_kb:2)",
       R"(bad value '2' for key 'host_granularity_kb': expected a power of two >= 4 (KiB))"},
      {R"(host_devices:0)",
       R"(bad value '0' for key 'host_devices': expected a number of devices from 1 to 64)"},
      {R"(host_devices:65)",
       R"(bad value '65' for key 'host_devices': expected a number of devices from 1 to 64)"},
      {R"(per_process_memory_fraction:2)",
       R"(bad value '2' for key 'per_process_memory_fraction': expected a fraction in (0, 1])"},
      {R"(per_process_memory_fraction:abc)",
       R"(bad value 'abc' for key 'per_process_memory_fraction': expected a fraction in (0, 1])"},
      {R"(memory_limit_mb:-1)",
       R"(bad value '-1' for key 'memory_limit_mb': expected a whole number)"},
      {R"(roundup_power2_divisions:3)",
       R"(bad value '3' for key 'roundup_power2_divisions': expected a power of two (or 0))"},
      {R"(roundup_power2_divisions:x)",
       R"(bad value 'x' for key 'roundup_power2_divisions': expected a whole number)"},
      {R"(roundup_power2_divisions:[256:1)",
       R"(bad value '[' for key 'roundup_power2_divisions': expected a closing ']')"},
      {R"(roundup_power2_divisions:[256:3])",
       R"(bad value '3' for key 'roundup_power2_divisions': expected a power of two (or 0))"},
      {R"(roundup_power2_divisions:[300:2])",
       R"(bad value '300' for key 'roundup_power2_divisions': expected interval boundaries that are powers of two)"},
      {R"(roundup_power2_divisions:[256])",
       R"(bad value '256' for key 'roundup_power2_divisions': expected [<MB>:<divisions>,...,>:<divisions>])"},
      {R"(roundup_power2_divisions:[x:2])",
       R"(bad value 'x' for key 'roundup_power2_divisions': expected a whole number)"},
      {R"(roundup_power2_divisions:[>:y])",
       R"(bad value 'y' for key 'roundup_power2_divisions': expected a whole number)"},
      {R"(round_buckets:4)",
       R"(bad value '' for key 'round_buckets': expected [size,size,...])"},
      {R"(round_buckets:[1000])",
       R"(bad value '1000' for key 'round_buckets': expected bucket sizes that are multiples of 512)"},
      {R"(round_buckets:[1M)",
       R"(bad value '[' for key 'round_buckets': expected a closing ']')"},
      {R"(round_buckets:[abc])",
       R"(bad value 'abc' for key 'round_buckets': expected a size (bytes, or with a K/M/G suffix))"},
      {R"(round_buckets:)",
       R"(bad value '' for key 'round_buckets': expected [size,size,...])"},
      {R"(reclaim_before_grow:maybe)",
       R"(bad value 'maybe' for key 'reclaim_before_grow': expected True, False or auto)"},
      {R"(grow_slack:-1)",
       R"(bad value '-1' for key 'grow_slack': expected a fraction >= 0 (0.03 = 3%))"},
      {R"(grow_slack:11)",
       R"(bad value '11' for key 'grow_slack': expected a fraction >= 0 (0.03 = 3%))"},
      {R"(move_time_budget:1.5)",
       R"(bad value '1.5' for key 'move_time_budget': expected a fraction in [0, 1] (0.02 = 2% of the time))"},
      {R"(move_clock:monotonic)",
       R"(bad value 'monotonic' for key 'move_clock': expected wall or cpu)"},
      {R"(va_factor:0)",
       R"(bad value '0' for key 'va_factor': expected 1 to 64)"},
      {R"(va_factor:65)",
       R"(bad value '65' for key 'va_factor': expected 1 to 64)"},
      {R"(stats_at_exit:yes)",
       R"(bad value 'yes' for key 'stats_at_exit': expected True or False)"},
      {R"(trace_entries:-3)",
       R"(bad value '-3' for key 'trace_entries': expected a whole number)"},
      {R"(bucket_sample:-1)",
       R"(bad value '-1' for key 'bucket_sample': expected a whole number: 0 (off) or 1 in N requests)"},
      {R"(bucket_sample:2000000)",
       R"(bad value '2000000' for key 'bucket_sample': expected 0 (off) or 1 to 1048576: one request in N is sampled)"},
      {R"(bucket_advice_k:0)",
       R"(bad value '0' for key 'bucket_advice_k': expected a number of buckets from 1 to 256)"},
      {R"(bucket_advice_k:257)",
       R"(bad value '257' for key 'bucket_advice_k': expected a number of buckets from 1 to 256)"},
      {R"(snapshot_path:)",
       R"(key 'snapshot_path' needs a value ('snapshot_path:<value>'))"},
      {R"(oom_report_path)",
       R"(key 'oom_report_path' needs a value ('oom_report_path:<value>'))"},
  };
  for (const auto& [conf, message] : kCases) {
    absl::StatusOr<Options> r = Options::Parse(conf);
    ASSERT_FALSE(r.ok()) << conf;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), absl::StrCat("FRAGFREE_CONF: ", message))
        << conf;
  }
}

TEST(Options, UnknownKeyListsEveryKnownKeyInTableOrder) {
  absl::StatusOr<Options> r = Options::Parse("backend:host,,va_factor:3,foo");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "FRAGFREE_CONF: unknown key 'foo'. Known keys: backend, "
            "host_capacity_mb, host_granularity_kb, host_devices, "
            "per_process_memory_fraction, memory_limit_mb, "
            "roundup_power2_divisions, round_buckets, reclaim_before_grow, "
            "grow_slack, move_time_budget, move_clock, grow_for_pending_frees, "
            "defer_unmap, page_size_mb, large_page_mb, va_factor, "
            "stats_at_exit, "
            "time_calls, snapshot_path, "
            "oom_report_path, trace_entries, bucket_sample, bucket_advice_k");
  std::vector<std::string> names;
  for (const Options::KeyDoc& k : Options::Keys()) names.emplace_back(k.name);
  EXPECT_EQ(names, Options::KnownKeys());
}

TEST(Options, BlanksSeparateKeysLikeCommas) {
  absl::StatusOr<Options> o = Options::Parse(" backend:host va_factor:3\t");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->backend, "host");
  EXPECT_EQ(o->va_factor, 3u);
}

// Each key's documented default is what Options{} holds: parsing
// `key:<default>` changes nothing.
TEST(Options, DocumentedDefaultsAreTheDefaults) {
  const Options defaults;
  for (const Options::KeyDoc& k : Options::Keys()) {
    if (k.default_text == "none") continue;
    std::string value(k.default_text);
    value.erase(std::remove(value.begin(), value.end(), '`'), value.end());
    absl::StatusOr<Options> o =
        Options::Parse(std::string(k.name) + ":" + value);
    ASSERT_TRUE(o.ok()) << k.name << ": " << o.status();
    EXPECT_TRUE(SameOptions(*o, defaults)) << k.name << ":" << value;
  }
}

// The README's table of keys is the options table: a new key is a row in
// allocator/options.cc and, printed by this test on a mismatch, in README.md.
TEST(Options, ReadmeTableIsTheOptionsTable) {
  std::ifstream readme(FRAGFREE_SOURCE_DIR "/README.md");
  ASSERT_TRUE(readme.good());
  std::string line, table;
  bool in_section = false;
  while (std::getline(readme, line)) {
    if (line.rfind("## ", 0) == 0) {
      in_section = line == "## Configuration: `FRAGFREE_CONF`";
      continue;
    }
    if (!in_section) continue;
    if (line.rfind("|", 0) == 0) {
      absl::StrAppend(&table, line, "\n");
    } else if (!table.empty()) {
      break;
    }
  }
  EXPECT_EQ(table, Options::MarkdownTable())
      << "README.md's FRAGFREE_CONF table should read:\n"
      << Options::MarkdownTable();
}

}  // namespace
}  // namespace fragfree
