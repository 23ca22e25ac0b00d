// Tests of the OOM report's renderings: JSON that parses, a self-contained
// HTML page, plain words only (no internal names) in every rendering, and the
// time for 100k blocks (printed, not asserted). With FRAGFREE_OOM_EXAMPLE_DIR
// set, the example of docs/oom.md is written there as
// oom_example.{txt,json,html}.
#include <time.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "allocator/obs/oom_report.h"
#include "allocator/obs/stats.h"
#include "gtest/gtest.h"
#include "tests/obs/oom_test_util.h"

namespace fragfree {
namespace {

using namespace testing_oom;  // NOLINT(build/namespaces)

OomContext Rich() {
  std::vector<Spec> specs;
  for (uint64_t i = 1; i <= 20; ++i) {
    specs.push_back({kGiB / 2, BlockState::kAllocated, i});
  }
  for (uint64_t i = 0; i < 30; ++i) {
    specs.push_back({100 * kMiB + 512, BlockState::kAllocated, 900 + i});
    specs.push_back({5 * kMiB, BlockState::kFree, 0, i % 3 != 0});
  }
  specs.push_back({kMiB, BlockState::kPendingFree, 2000});
  OomContext c = Numbers(0, 0, 0, 0);
  c.arenas.push_back(Build(0x7f0000000000, 2 * kMiB, 0, false, specs));
  c.arenas.push_back(Build(0x7e0000000000, 2 * kMiB, 0x55, true,
                           {{4096, BlockState::kAllocated, 1000},
                            {8192, BlockState::kFree, 0},
                            {512, BlockState::kAllocated, 1001}}));
  FactsFromArenas(&c);
  c.live = {
      {0x7f0000000000, kGiB / 2, 0, 1,
       "File \"train.py\", line 42, in <module>\n  x = \"quoted\" & <b>"}};
  c.categories = MemoryCategories{4 * kGiB, 4 * kGiB, 2 * kGiB, 0};
  return c;
}

TEST(OomReport, JsonParsesAndHasTheKeys) {
  OomContext c = Rich();
  c.bucket_advice = AdviseBuckets({{1000, 10}, {5000, 1}}, {});
  std::string j = OomReportJson(c);
  EXPECT_TRUE(JsonChecker(j).Valid()) << j;
  for (const char* key :
       {"\"message\":\"CUDA out of memory. Tried to allocate ",
        "\"diagnosis\":{\"cause\":\"", "\"fragmentation\":{\"gap\":",
        "\"advice\":[{\"id\":\"bf16_autocast\"", "\"largest_allocations\":[",
        "\"stats\":{\"allocation.all.current\"", "\"bucket_advice\":{",
        "\\\"quoted\\\"", "\"categories\":{\"parameters\":"}) {
    EXPECT_NE(j.find(key), std::string::npos) << key;
  }
  c.categories.reset();
  c.bucket_advice.reset();
  c.live.clear();
  EXPECT_TRUE(JsonChecker(OomReportJson(c)).Valid());
  EXPECT_TRUE(JsonChecker(OomReportJson(OomContext())).Valid());
}

TEST(OomReport, HtmlIsSelfContained) {
  OomContext c = Rich();
  std::string h = OomReportHtml(c);
  EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(h.find("</html>"), std::string::npos);
  EXPECT_EQ(h.find("http"), std::string::npos);
  EXPECT_EQ(h.find("src="), std::string::npos);
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
  EXPECT_EQ(h.find("url("), std::string::npos);
  EXPECT_NE(h.find("<svg"), std::string::npos);
  EXPECT_NE(h.find("<style>"), std::string::npos);
  // The stack is escaped, and the map draws both arenas.
  EXPECT_NE(h.find("&quot;quoted&quot; &amp; &lt;b&gt;"), std::string::npos);
  EXPECT_NE(h.find("arena 0: stream 0, large"), std::string::npos) << h;
  EXPECT_NE(h.find("arena 1: stream 0x55, small"), std::string::npos);
  EXPECT_NE(h.find("CUDA out of memory. Tried to allocate"), std::string::npos);
  EXPECT_TRUE(OomReportHtml(OomContext()).find("</html>") != std::string::npos);
}

// What a user reads names no internal document or project vocabulary: the
// rules are stated in plain words instead.
void ExpectPlainWords(const std::string& what, const std::string& r) {
  std::string lower = r;
  for (char& ch : lower) ch = char(tolower(static_cast<unsigned char>(ch)));
  for (const char* word : {"seed", "shared/", "design.md", "reference/",
                           "issue 1", "decision tree"}) {
    EXPECT_EQ(lower.find(word), std::string::npos) << what << ": " << word;
  }
  // No CJK text (the methodology's source language): U+2E80..U+9FFF and
  // U+F900..U+FAFF start with UTF-8 lead bytes 0xE2 0xBA..0xE9 or 0xEF 0xA4..
  for (size_t i = 0; i + 1 < r.size(); ++i) {
    const unsigned char b = r[i], n = r[i + 1];
    const bool cjk = (b >= 0xE3 && b <= 0xE9) || (b == 0xE2 && n >= 0xBA) ||
                     (b == 0xEF && n >= 0xA4 && n <= 0xAB);
    EXPECT_FALSE(cjk) << what << " at " << i;
    if (cjk) break;
  }
}

TEST(OomReport, SpeaksPlainWords) {
  std::vector<std::pair<std::string, OomContext>> scenarios;
  scenarios.emplace_back("persistent, categories", Rich());
  // Fragmentation with bucket advice; unknown split.
  OomContext frag = Numbers(50 * kGiB, 80 * kGiB, 30 * kGiB, 2 * kGiB);
  frag.bucket_advice = AdviseBuckets({{1000, 10}, {1100, 10}, {5000, 1}}, {});
  scenarios.emplace_back("fragmentation, unknown split", frag);
  // A severe gap that is mostly reclaimable (the note on it).
  OomContext reclaimable = Numbers(50 * kGiB, 80 * kGiB, 30 * kGiB, 29 * kGiB);
  reclaimable.categories = MemoryCategories{10 * kGiB, 0, 20 * kGiB, 0};
  scenarios.emplace_back("reclaimable gap", reclaimable);
  // Too large for the device, with techniques known.
  OomContext large = Numbers(10 * kGiB, 12 * kGiB, 2 * kGiB, kGiB);
  large.facts.rounded_bytes = large.facts.requested_bytes = 100 * kGiB;
  large.techniques = ActiveTechniques{};
  scenarios.emplace_back("too large", large);
  scenarios.emplace_back("empty", OomContext());
  for (const auto& [name, c] : scenarios) {
    const OomDiagnosis d = DiagnoseOom(c);
    const std::string text = OomReportText(c, d);
    ExpectPlainWords(name + " text", text);
    ExpectPlainWords(name + " json", OomReportJson(c, d));
    ExpectPlainWords(name + " html", OomReportHtml(c, d));
    // The rule and the order are stated instead.
    EXPECT_NE(text.find(GapRuleText()), std::string::npos) << name;
    EXPECT_NE(text.find(OomAdviceOrderText()), std::string::npos) << name;
  }
}

// 100k blocks over four arenas: alternating live and free blocks of 64 KiB to
// 8 MiB, some free blocks' pages unmapped.
OomContext HundredThousandBlocks() {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<size_t> size(128, 16384);  // x 512 bytes
  OomContext c = Numbers(0, 0, 0, 0);
  c.facts.device_total_bytes = c.facts.limit_bytes = 1024 * kGiB;
  uint64_t seq = 0;
  for (int a = 0; a < 4; ++a) {
    std::vector<Spec> specs;
    for (int i = 0; i < 25000; ++i) {
      bool live = i % 2 == 0;
      specs.push_back({size(rng) * 512,
                       live ? BlockState::kAllocated : BlockState::kFree,
                       live ? ++seq : 0, i % 5 != 1});
      if (live && i % 7 == 0) seq += 50;
    }
    c.arenas.push_back(Build(0x7f0000000000 + (uintptr_t(a) << 40), 2 * kMiB,
                             StreamHandle(a), a == 3, specs));
  }
  FactsFromArenas(&c);
  return c;
}

TEST(OomReport, TimeForOneHundredThousandBlocks) {
  OomContext c = HundredThousandBlocks();
  size_t blocks = 0;
  for (const ArenaView& a : c.arenas) blocks += a.blocks.size();
  ASSERT_EQ(blocks, 100000u);
  // Wall time, and this thread's CPU time (what the report costs, whatever
  // else the machine is doing); best of five rounds.
  using Clock = std::chrono::steady_clock;
  auto cpu_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  };
  auto wall_ms = [] {
    return std::chrono::duration<double, std::milli>(
               Clock::now().time_since_epoch())
        .count();
  };
  // diagnosis, text, JSON, HTML, all: wall and CPU.
  double wall[5] = {1e9, 1e9, 1e9, 1e9, 1e9},
         cpu[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
  size_t text = 0, json = 0, html = 0;
  for (int round = 0; round < 5; ++round) {
    double w[5], c0[5];
    w[0] = wall_ms(), c0[0] = cpu_ms();
    OomDiagnosis d = DiagnoseOom(c);
    w[1] = wall_ms(), c0[1] = cpu_ms();
    text = OomReportText(c, d).size();
    w[2] = wall_ms(), c0[2] = cpu_ms();
    json = OomReportJson(c, d).size();
    w[3] = wall_ms(), c0[3] = cpu_ms();
    html = OomReportHtml(c, d).size();
    double w_end = wall_ms(), c_end = cpu_ms();
    for (int i = 0; i < 4; ++i) {
      double wn = i < 3 ? w[i + 1] : w_end, cn = i < 3 ? c0[i + 1] : c_end;
      wall[i] = std::min(wall[i], wn - w[i]);
      cpu[i] = std::min(cpu[i], cn - c0[i]);
    }
    wall[4] = std::min(wall[4], w_end - w[0]);
    cpu[4] = std::min(cpu[4], c_end - c0[0]);
  }
  std::printf(
      "[ figure ] OOM report for %zu blocks, best of 5, CPU ms (wall ms): "
      "diagnosis %.2f (%.2f), text %.2f (%.2f), JSON %.2f (%.2f), HTML %.2f "
      "(%.2f), all %.2f (%.2f); sizes: text %zu B, JSON %zu B, HTML %zu B\n",
      blocks, cpu[0], wall[0], cpu[1], wall[1], cpu[2], wall[2], cpu[3],
      wall[3], cpu[4], wall[4], text, json, html);
  size_t separate = OomReportText(c).size() + OomReportJson(c).size() +
                    OomReportHtml(c).size();
  EXPECT_GT(separate, 0u);
}

// The example of docs/oom.md: fine-tuning all weights of a 7B model in bf16
// with AdamW (fp32 master weights and moments) on one 140 GiB GPU.
OomContext Example() {
  std::mt19937_64 rng(42);
  OomContext c;
  const size_t page = 2 * kMiB;
  uint64_t seq = 0;
  std::vector<Spec> persistent;
  // 7e9 parameters: bf16 weights and gradients, fp32 master + m + v.
  for (size_t bytes : {size_t(14e9), size_t(14e9), size_t(84e9)}) {
    size_t left = bytes;
    while (left > 0) {
      size_t s = std::min(left, size_t(((rng() % 200) + 40) * kMiB));
      persistent.push_back({s, BlockState::kAllocated, ++seq});
      left -= s;
    }
    seq += 20000;  // a step's worth of allocations between them
  }
  c.arenas.push_back(Build(0x7f0000000000, page, 0, false, persistent));
  std::vector<Spec> step;
  for (int i = 0; i < 1500; ++i) {
    size_t s = size_t((rng() % 40) + 1) * kMiB + (rng() % 64) * 512;
    step.push_back({s, BlockState::kAllocated, seq += 3});
    if (i % 4 == 0) {
      step.push_back(
          {(rng() % 6 + 1) * kMiB, BlockState::kFree, 0, i % 8 == 0});
    }
  }
  c.arenas.push_back(Build(0x7e0000000000, page, 0, false, step));
  std::vector<Spec> small;
  for (int i = 0; i < 3000; ++i) {
    small.push_back({size_t(rng() % 2048 + 1) * 512,
                     i % 3 ? BlockState::kAllocated : BlockState::kFree,
                     seq += 2});
  }
  c.arenas.push_back(Build(0x7d0000000000, page, 0, true, small));
  FactsFromArenas(&c);
  OomFacts& f = c.facts;
  f.device = 0;
  f.stream = 0;
  f.requested_bytes = size_t(4.1e9);
  f.rounded_bytes = (f.requested_bytes + 511) / 512 * 512;
  f.device_total_bytes = size_t(150.0e9);
  f.limit_bytes = f.device_total_bytes;
  f.device_free_bytes = 900 * kMiB;
  f.idle_bytes = 0;
  f.pages_needed = f.rounded_bytes / page + 1;
  f.reason =
      "no free pages: live blocks and partial edge pages fill the device";
  c.categories = MemoryCategories{size_t(14e9), size_t(14e9), size_t(84e9), 0};
  ActiveTechniques on;
  on.bf16_autocast = on.flash_attention = true;
  c.techniques = on;
  return c;
}

TEST(OomReport, WritesTheDocsExample) {
  OomContext c = Example();
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_EQ(d.cause, OomCause::kPersistent);
  EXPECT_EQ(d.advice.front().id, "lora_peft");
  const char* dir = std::getenv("FRAGFREE_OOM_EXAMPLE_DIR");
  if (dir == nullptr) return;
  std::string base = std::string(dir) + "/oom_example.";
  std::ofstream(base + "txt") << OomReportText(c, d);
  std::ofstream(base + "json") << OomReportJson(c, d);
  std::ofstream(base + "html") << OomReportHtml(c, d);
}

}  // namespace
}  // namespace fragfree
