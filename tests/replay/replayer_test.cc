// Tests for bench/replay/replayer.h with a scripted policy: OOM handling, the
// timeline's sampling, latency bookkeeping and the minimum-capacity search.
// Thread-safety: single-threaded tests.
#include "bench/replay/replayer.h"

#include <algorithm>
#include <memory>
#include <set>

#include "gtest/gtest.h"

namespace fragfree::replay {
namespace {

// Reserves exactly what is live, rounded up to 2 MiB; fails past capacity.
class ExactPolicy final : public ReplayPolicy {
 public:
  explicit ExactPolicy(const PolicyConfig& config) : config_(config) {}
  std::string name() const override { return "exact"; }
  bool Alloc(uint64_t id, uint64_t size, uint64_t) override {
    if (fail_ids.count(id) > 0) return false;
    const uint64_t rounded = (size + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
    if (reserved_ + rounded > config_.capacity_bytes) return false;
    reserved_ += rounded;
    peak_ = std::max(peak_, reserved_);
    if (sizes_.size() <= id) sizes_.resize(id + 1);
    sizes_[id] = rounded;
    ++calls;
    return true;
  }
  void Free(uint64_t id) override {
    reserved_ -= sizes_[id];
    ++calls;
  }
  uint64_t reserved_bytes() const override { return reserved_; }
  PolicyFigures figures() const override {
    PolicyFigures f;
    f.reserved_bytes = reserved_;
    f.peak_reserved_bytes = peak_;
    return f;
  }
  void EmptyCache() override {}

  std::set<uint64_t> fail_ids;
  int calls = 0;

 private:
  PolicyConfig config_;
  std::vector<uint64_t> sizes_;
  uint64_t reserved_ = 0;
  uint64_t peak_ = 0;
};

Trace MakeTrace(const std::vector<std::pair<Op, uint64_t>>& ops,
                const std::vector<uint64_t>& sizes) {
  Trace t;
  t.path = "synthetic";
  uint64_t line = 2;
  for (const auto& [op, id] : ops) {
    t.events.push_back(Event{op, id, sizes[id], 0, 0, line++});
    if (op == Op::kAlloc) t.num_ids = std::max(t.num_ids, id + 1);
  }
  return t;
}

TEST(ReplayTest, CountsOomsAndSkipsTheirFrees) {
  // a0 (3 MiB), a1 (1 MiB, fails), f1, f0.
  const Trace t = MakeTrace(
      {{Op::kAlloc, 0}, {Op::kAlloc, 1}, {Op::kFree, 1}, {Op::kFree, 0}},
      {3 * kMiB, kMiB});
  ExactPolicy p(PolicyConfig{});
  p.fail_ids = {1};
  ReplayResult r = Replay(t, p, ReplayOptions{});
  EXPECT_EQ(r.ooms, 1u);
  EXPECT_EQ(r.first_oom_line, 3);
  EXPECT_EQ(r.allocs, 2u);
  EXPECT_EQ(r.frees, 1u);  // the failed allocation's free is skipped
  EXPECT_EQ(r.events, 3u);
  EXPECT_EQ(p.calls, 2);
  EXPECT_EQ(r.peak_live_bytes, 3 * kMiB);
  EXPECT_EQ(r.figures.peak_reserved_bytes, 4 * kMiB);
  EXPECT_GT(r.all_calls.p50_ns, 0u);
  EXPECT_GE(r.all_calls.p99_ns, r.all_calls.p50_ns);
  EXPECT_GE(r.all_calls.max_ns, r.all_calls.p99_ns);
}

TEST(ReplayTest, StopsAtFirstOomWhenAsked) {
  const Trace t = MakeTrace(
      {{Op::kAlloc, 0}, {Op::kAlloc, 1}, {Op::kFree, 1}, {Op::kFree, 0}},
      {3 * kMiB, kMiB});
  ExactPolicy p(PolicyConfig{});
  p.fail_ids = {0};
  ReplayOptions options;
  options.stop_at_first_oom = true;
  ReplayResult r = Replay(t, p, options);
  EXPECT_EQ(r.ooms, 1u);
  EXPECT_EQ(p.calls, 0);
}

TEST(ReplayTest, TimelineKeepsTheMaximumOfEachStretch) {
  // 1000 allocations of 1 MiB, each freed at once: live alternates 1 MiB / 0.
  std::vector<std::pair<Op, uint64_t>> ops;
  std::vector<uint64_t> sizes;
  for (uint64_t i = 0; i < 1000; ++i) {
    ops.push_back({Op::kAlloc, i});
    ops.push_back({Op::kFree, i});
    sizes.push_back(kMiB);
  }
  const Trace t = MakeTrace(ops, sizes);
  ExactPolicy p(PolicyConfig{});
  ReplayOptions options;
  options.timeline_points = 300;
  ReplayResult r = Replay(t, p, options);
  ASSERT_EQ(r.timeline.size(), 300u);
  EXPECT_EQ(r.timeline.front().first_event, 0u);
  for (size_t i = 0; i < r.timeline.size(); ++i) {
    // Every stretch holds at least one alloc, so its maximum is the peak.
    EXPECT_EQ(r.timeline[i].live_bytes, kMiB) << i;
    EXPECT_EQ(r.timeline[i].reserved_bytes, 2 * kMiB) << i;
    if (i > 0) {
      EXPECT_GT(r.timeline[i].first_event, r.timeline[i - 1].first_event);
    }
  }
  EXPECT_LT(r.timeline.back().first_event, 2000u);
  // Fewer events than points: one point per event.
  const Trace small = MakeTrace({{Op::kAlloc, 0}}, {kMiB});
  ExactPolicy q(PolicyConfig{});
  EXPECT_EQ(Replay(small, q, options).timeline.size(), 1u);
}

TEST(ReplayTest, PeakLiveBytesOfATrace) {
  const Trace t = MakeTrace({{Op::kAlloc, 0},
                             {Op::kAlloc, 1},
                             {Op::kFree, 0},
                             {Op::kAlloc, 2},
                             {Op::kFree, 1}},
                            {100, 200, 50});
  EXPECT_EQ(PeakLiveBytes(t), 300u);
}

TEST(MinCapacityTest, FindsTheSmallestCapacityThatFits) {
  // Live peaks at 3 MiB + 5 MiB: the exact policy needs 4 + 6 = 10 MiB.
  const Trace t = MakeTrace(
      {{Op::kAlloc, 0}, {Op::kAlloc, 1}, {Op::kFree, 0}, {Op::kFree, 1}},
      {3 * kMiB, 5 * kMiB});
  PolicyFactory factory = [](const PolicyConfig& c)
      -> absl::StatusOr<std::unique_ptr<ReplayPolicy>> {
    return std::make_unique<ExactPolicy>(c);
  };
  PolicyConfig base;
  base.capacity_bytes = 64 * kGiB;
  for (uint64_t known_fit : {uint64_t{0}, 10 * kMiB, 64 * kMiB}) {
    absl::StatusOr<MinCapacity> m =
        FindMinCapacity(t, factory, base, known_fit);
    ASSERT_TRUE(m.ok());
    EXPECT_TRUE(m->found);
    EXPECT_EQ(m->bytes, 10 * kMiB) << known_fit;
    EXPECT_LT(m->replays, 20);
  }
  // Nothing fits below the base capacity: not found.
  base.capacity_bytes = 8 * kMiB;
  absl::StatusOr<MinCapacity> m = FindMinCapacity(t, factory, base, 0);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->found);
}

}  // namespace
}  // namespace fragfree::replay
