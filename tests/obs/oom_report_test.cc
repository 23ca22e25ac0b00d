// Tests of the OOM diagnosis and text: PyTorch's headline, fragfree's numbers,
// persistent vs activations vs fragmentation (from categories or from
// allocation age), the order of the advice and what it skips, and the one
// definition of the fragmentation verdict.
#include "allocator/obs/oom_report.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/obs/stats.h"
#include "gtest/gtest.h"
#include "tests/obs/oom_test_util.h"

namespace fragfree {
namespace {

using namespace testing_oom;  // NOLINT(build/namespaces)

std::vector<std::string> Ids(const OomDiagnosis& d) {
  std::vector<std::string> ids;
  for (const OomAdvice& a : d.advice) ids.push_back(a.id);
  return ids;
}

using Ids_t = std::vector<std::string>;

TEST(OomReport, PyTorchFormatSize) {
  EXPECT_EQ(PyTorchFormatSize(512), "512 bytes");
  EXPECT_EQ(PyTorchFormatSize(1024), "1024 bytes");
  EXPECT_EQ(PyTorchFormatSize(1536), "1.50 KiB");
  EXPECT_EQ(PyTorchFormatSize(kMiB), "1024.00 KiB");
  EXPECT_EQ(PyTorchFormatSize(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(PyTorchFormatSize(79 * kGiB + kGiB / 4), "79.25 GiB");
}

TEST(OomReport, TextStartsLikePyTorchAndHasTheNumbers) {
  OomContext c = Numbers(70 * kGiB, 72 * kGiB, 2 * kGiB, kGiB + kGiB / 2);
  std::string t = OomReportText(c);
  // PyTorch's format_size writes exactly 1 GiB as "1024.00 MiB".
  const std::string headline =
      "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
      "capacity of 80.00 GiB of which 1024.00 MiB is free. Of the allocated "
      "memory 70.00 GiB is allocated by fragfree, and 2.00 GiB is reserved by "
      "fragfree but unallocated.";
  EXPECT_EQ(t.rfind(headline, 0), 0u) << t;
  EXPECT_EQ(OomHeadline(c.facts), headline);
  for (const char* s : {"72.00 GiB mapped", "70.00 GiB allocated",
                        "1.50 GiB reclaimable", "512.00 MiB stranded",
                        "1024 more pages needed", "every whole free page",
                        "7.00 GiB in use outside fragfree", "gap 2.8%"}) {
    EXPECT_NE(t.find(s), std::string::npos) << s << "\n" << t;
  }
  // A memory limit below the device shows as PyTorch's "allowed".
  c.facts.limit_bytes = 40 * kGiB;
  EXPECT_NE(OomHeadline(c.facts).find("is free. 40.00 GiB allowed; Of the"),
            std::string::npos);
}

TEST(OomReport, PersistentStateDominates) {
  OomContext c = Numbers(70 * kGiB, 72 * kGiB, 2 * kGiB, kGiB + kGiB / 2);
  c.categories = MemoryCategories{14 * kGiB, 14 * kGiB, 28 * kGiB, 0};
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_EQ(d.cause, OomCause::kPersistent);
  EXPECT_EQ(d.persistent_bytes, 56 * kGiB);
  EXPECT_EQ(d.activation_bytes, 14 * kGiB);
  EXPECT_FALSE(d.persistent_estimated);
  // Free ones first, then the persistent branch cheapest first, then the
  // last resort; techniques unknown: nothing skipped.
  EXPECT_EQ(Ids(d), (Ids_t{"bf16_autocast", "flash_attention", "lora_peft",
                           "eight_bit_optimizer", "zero_fsdp",
                           "more_parallelism", "cpu_offload", "micro_batch"}));
  EXPECT_TRUE(d.skipped.empty());
  EXPECT_NE(d.advice[0].title.find("if not already on"), std::string::npos);
  std::string t = OomReportText(c, d);
  EXPECT_NE(t.find("parameters 14.00 GiB, gradients 14.00 GiB, optimizer "
                   "state 28.00 GiB"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("Diagnosis (persistent)"), std::string::npos);
}

TEST(OomReport, ActivationsDominateAndFlagsThatAreOnAreSkipped) {
  OomContext c = Numbers(70 * kGiB, 72 * kGiB, 2 * kGiB, kGiB + kGiB / 2);
  c.categories = MemoryCategories{2 * kGiB, 2 * kGiB, 4 * kGiB, kGiB};
  ActiveTechniques on;
  on.bf16_autocast = true;
  on.gradient_checkpointing = true;
  c.techniques = on;
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_EQ(d.cause, OomCause::kActivations);
  EXPECT_EQ(d.activation_bytes, 61 * kGiB);
  EXPECT_EQ(Ids(d), (Ids_t{"flash_attention", "shorter_sequences",
                           "sequence_parallelism", "micro_batch"}));
  EXPECT_EQ(d.skipped, (Ids_t{"bf16_autocast", "gradient_checkpointing"}));
  for (const OomAdvice& a : d.advice) {
    EXPECT_EQ(a.title.find("if not already on"), std::string::npos);
  }
  // Everything on: only what has no flag remains.
  on.flash_attention = true;
  c.techniques = on;
  EXPECT_EQ(
      Ids(DiagnoseOom(c)),
      (Ids_t{"shorter_sequences", "sequence_parallelism", "micro_batch"}));
  // Persistent branch with its flags on.
  c.categories = MemoryCategories{20 * kGiB, 20 * kGiB, 25 * kGiB, 0};
  on.lora_peft = on.eight_bit_optimizer = on.sharded = true;
  c.techniques = on;
  OomDiagnosis p = DiagnoseOom(c);
  EXPECT_EQ(Ids(p), (Ids_t{"more_parallelism", "cpu_offload", "micro_batch"}));
  EXPECT_EQ(p.skipped, (Ids_t{"bf16_autocast", "flash_attention", "lora_peft",
                              "eight_bit_optimizer", "zero_fsdp"}));
  EXPECT_NE(OomReportText(c, p).find("Already on, not suggested: "
                                     "bf16_autocast, flash_attention"),
            std::string::npos);
}

TEST(OomReport, FragmentationFromStrandedPages) {
  // 30 GiB cached, only 2 GiB of it whole pages: 28 GiB stranded = 35% of the
  // reserved memory.
  OomContext c = Numbers(50 * kGiB, 80 * kGiB, 30 * kGiB, 2 * kGiB);
  c.facts.device_free_bytes = 0;
  c.categories = MemoryCategories{10 * kGiB, 10 * kGiB, 20 * kGiB, 0};
  BucketAdvisorOptions o;
  o.num_buckets = 2;
  c.bucket_advice = AdviseBuckets({{1000, 10}, {1100, 10}, {5000, 1}}, o);
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_EQ(d.cause, OomCause::kFragmentation);
  EXPECT_STREQ(d.gap_verdict, "severe");
  EXPECT_STREQ(d.effective_verdict, "severe");
  EXPECT_EQ(d.stranded_bytes, 28 * kGiB);
  EXPECT_EQ(Ids(d), (Ids_t{"bf16_autocast", "flash_attention", "fixed_shapes",
                           "round_buckets", "lora_peft", "eight_bit_optimizer",
                           "zero_fsdp", "more_parallelism", "cpu_offload",
                           "micro_batch"}));
  EXPECT_NE(d.advice[3].how.find("FRAGFREE_CONF=round_buckets:[1536,5K]"),
            std::string::npos)
      << d.advice[3].how;
  EXPECT_NE(OomReportText(c, d).find("empty_cache() will not help"),
            std::string::npos);
  // round_buckets already set: not suggested again.
  ActiveTechniques on;
  on.round_buckets = true;
  c.techniques = on;
  EXPECT_EQ(DiagnoseOom(c).skipped, (Ids_t{"round_buckets"}));
}

// With pages larger than the device's own (page_size_mb), fragmentation's
// first advice is the device's page size; with the device's own, none.
TEST(OomReport, LargerPagesAdviseTheDevicesOwnPageSize) {
  OomContext c = Numbers(50 * kGiB, 80 * kGiB, 30 * kGiB, 2 * kGiB);
  c.facts.device_free_bytes = 0;
  c.categories = MemoryCategories{10 * kGiB, 10 * kGiB, 20 * kGiB, 0};
  c.facts.device_granularity_bytes = 2 << 20;
  c.stats.page_size = 2 << 20;
  OomDiagnosis d = DiagnoseOom(c);
  ASSERT_EQ(d.cause, OomCause::kFragmentation);
  const Ids_t plain = Ids(d);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "smaller_pages"), 0);
  c.stats.page_size = 8 << 20;
  d = DiagnoseOom(c);
  Ids_t expected = plain;
  const auto at = std::find(expected.begin(), expected.end(), "fixed_shapes") -
                  expected.begin();
  expected.insert(expected.begin() + at, "smaller_pages");
  EXPECT_EQ(Ids(d), expected);
  const OomAdvice& a = d.advice[at];
  EXPECT_NE(a.how.find("FRAGFREE_CONF=page_size_mb:0 (pages of 8.00 MiB "
                       "instead of 2.00 MiB"),
            std::string::npos)
      << a.how;
  EXPECT_NE(a.how.find("28.00 GiB lies free in partially used pages"),
            std::string::npos)
      << a.how;
}

TEST(OomReport, ReclaimableGapIsNotFragmentation) {
  // The gap between allocated and reserved is 37.5% (severe), but 29 of the
  // 30 cached GiB are whole pages fragfree remaps: not the cause.
  OomContext c = Numbers(50 * kGiB, 80 * kGiB, 30 * kGiB, 29 * kGiB);
  c.categories = MemoryCategories{10 * kGiB, 10 * kGiB, 20 * kGiB, 0};
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_STREQ(d.gap_verdict, "severe");
  EXPECT_STREQ(d.effective_verdict, "low");
  EXPECT_EQ(d.cause, OomCause::kPersistent);
  bool noted = false;
  for (const std::string& n : d.notes) noted |= n.find("not lost") != n.npos;
  EXPECT_TRUE(noted);
}

TEST(OomReport, UnknownSplitAsksForTheBatchOneExperiment) {
  OomContext c = Numbers(70 * kGiB, 72 * kGiB, 2 * kGiB, kGiB + kGiB / 2);
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_EQ(d.cause, OomCause::kUnknown);
  EXPECT_FALSE(d.split_known);
  EXPECT_EQ(
      Ids(d),
      (Ids_t{"bf16_autocast", "flash_attention", "batch1_experiment",
             "lora_peft", "eight_bit_optimizer", "zero_fsdp",
             "more_parallelism", "cpu_offload", "gradient_checkpointing",
             "shorter_sequences", "sequence_parallelism", "micro_batch"}));
  EXPECT_NE(d.summary.find("batch size 1"), std::string::npos);
}

TEST(OomReport, EstimatesPersistentStateFromAllocationAge) {
  // Ten 1 GiB blocks allocated first (seq 1..10), then, after a long run of
  // allocations that were freed, this step's blocks (seq 5000..).
  std::vector<Spec> specs;
  for (uint64_t i = 1; i <= 10; ++i) {
    specs.push_back({kGiB, BlockState::kAllocated, i});
  }
  specs.push_back({64 * kMiB, BlockState::kFree, 0, true});
  for (uint64_t i = 0; i < 40; ++i) {
    specs.push_back({512 * kMiB, BlockState::kAllocated, 5000 + i});
    specs.push_back({3 * kMiB, BlockState::kFree, 0, i % 2 == 0});
  }
  OomContext c = Numbers(0, 0, 0, 0);
  c.arenas.push_back(Build(0x7f0000000000, 2 * kMiB, 0, false, specs));
  FactsFromArenas(&c);
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_TRUE(d.persistent_estimated);
  EXPECT_EQ(d.persistent_bytes, 10 * kGiB);
  EXPECT_EQ(d.activation_bytes, 20 * kGiB);
  EXPECT_EQ(d.cause, OomCause::kActivations);
  EXPECT_EQ(d.padding_bytes, c.facts.allocated_bytes / 64);
  EXPECT_NE(OomReportText(c, d).find("[estimate]"), std::string::npos);
  // Largest first, from the arenas.
  ASSERT_EQ(d.largest.size(), 10u);
  EXPECT_EQ(d.largest[0].size, kGiB);
  EXPECT_EQ(d.largest[0].alloc_seq, 1u);
  // Live allocations with stacks replace the arena's list.
  c.live = {{0x1000, 3 * kGiB, 7, 3, "train.py:42 forward\nmodel.py:7 mlp"}};
  d = DiagnoseOom(c);
  ASSERT_EQ(d.largest.size(), 1u);
  std::string t = OomReportText(c, d);
  EXPECT_NE(t.find("        model.py:7 mlp"), std::string::npos) << t;
}

// The one definition of the verdict (obs/stats.h): above 20% severe, from 10%
// moderate, below low; the stats JSON and the report use it.
TEST(GapVerdict, OneRuleEverywhere) {
  EXPECT_EQ(JudgeGap(0.0), GapVerdict::kLow);
  EXPECT_EQ(JudgeGap(0.0999), GapVerdict::kLow);
  EXPECT_EQ(JudgeGap(0.10), GapVerdict::kModerate);
  EXPECT_EQ(JudgeGap(0.20), GapVerdict::kModerate);
  EXPECT_EQ(JudgeGap(0.2001), GapVerdict::kSevere);
  EXPECT_EQ(JudgeGap(1.0), GapVerdict::kSevere);
  EXPECT_STREQ(GapVerdictName(GapVerdict::kModerate), "moderate");
  EXPECT_DOUBLE_EQ(AllocatedReservedGap(75, 100), 0.25);
  EXPECT_DOUBLE_EQ(AllocatedReservedGap(0, 0), 0.0);
  // The rule's sentence states the thresholds.
  const std::string rule = GapRuleText();
  EXPECT_NE(rule.find(absl::StrFormat("above %.0f%%", 100 * kGapSevere)),
            std::string::npos);
  EXPECT_NE(rule.find(absl::StrFormat("below %.0f%%", 100 * kGapModerate)),
            std::string::npos);

  DeviceStats s;
  s.allocated_bytes.pool[kPoolAll].current = 70;
  s.reserved_bytes.pool[kPoolAll].current = 100;  // gap 30%: severe
  s.allocated_bytes.pool[kPoolAll].peak = 95;
  s.reserved_bytes.pool[kPoolAll].peak = 100;  // peak gap 5%: low
  const Fragmentation f = ComputeFragmentation(s);
  EXPECT_EQ(f.gap_verdict, GapVerdict::kSevere);
  EXPECT_EQ(f.peak_gap_verdict, GapVerdict::kLow);
  const std::string json = StatsToJson(s);
  EXPECT_NE(json.find("\"fragmentation.gap_severity\":2,"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"fragmentation.peak_gap_severity\":0}"),
            std::string::npos);

  // The report judges its gap the same way: 15% is moderate.
  OomContext c = Numbers(85 * kGiB, 100 * kGiB, 15 * kGiB, 15 * kGiB);
  EXPECT_STREQ(DiagnoseOom(c).gap_verdict, "moderate");
}

TEST(OomReport, RequestLargerThanTheDevice) {
  OomContext c = Numbers(10 * kGiB, 12 * kGiB, 2 * kGiB, kGiB);
  c.facts.rounded_bytes = c.facts.requested_bytes = 100 * kGiB;
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_EQ(d.cause, OomCause::kTooLarge);
  EXPECT_EQ(d.advice.front().id, "split_tensor");
}

TEST(OomReport, OtherProcessesAndLimitNotes) {
  OomContext c = Numbers(30 * kGiB, 32 * kGiB, 2 * kGiB, kGiB);
  c.facts.device_free_bytes = kGiB;  // 80 - 1 - 32 = 47 GiB elsewhere
  c.facts.limit_bytes = 60 * kGiB;
  OomDiagnosis d = DiagnoseOom(c);
  EXPECT_EQ(d.other_bytes, 47 * kGiB);
  ASSERT_GE(d.notes.size(), 2u);
  EXPECT_NE(d.notes[0].find("outside fragfree"), std::string::npos);
  EXPECT_NE(d.notes[1].find("memory limit"), std::string::npos);
}

}  // namespace
}  // namespace fragfree
