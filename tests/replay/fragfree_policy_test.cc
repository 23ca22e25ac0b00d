// Tests for bench/replay/fragfree_policy.h: the engine behind the replay
// interface on the simulated backend. These check the adapter (ids, OOM, the
// counting backend agreeing with the engine's stats) and the engine's headline
// promise on a replay: scattered free pages still serve a request.
// Thread-safety: single-threaded tests.
#include "bench/replay/fragfree_policy.h"

#include <random>
#include <vector>

#include "bench/replay/native_policy.h"
#include "bench/replay/policy_registry.h"
#include "bench/replay/replayer.h"
#include "bench/replay/trace_reader.h"
#include "gtest/gtest.h"

namespace fragfree::replay {
namespace {

// 16 pages of 2 MiB, less 512 bytes: base pages, not large ones.
constexpr uint64_t kSixteenPages = 32 * kMiB - 512;

std::unique_ptr<FragfreePolicy> Make(uint64_t capacity) {
  PolicyConfig config;
  config.capacity_bytes = capacity;
  config.device_total_bytes = capacity;
  absl::StatusOr<std::unique_ptr<FragfreePolicy>> p =
      FragfreePolicy::Create(config);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(FragfreePolicyTest, AllocFreeAndReserved) {
  auto p = Make(kGiB);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Alloc(0, 5 * kMiB, 0));
  ASSERT_TRUE(p->Alloc(1, 1000, 0));
  ASSERT_TRUE(p->Alloc(2, 0, 0));  // size 0 still gets a distinct block
  EXPECT_GE(p->reserved_bytes(), 6 * kMiB);
  EXPECT_EQ(p->reserved_bytes() % FragfreePolicy::kPageBytes, 0u);
  EXPECT_TRUE(p->CheckInvariants().ok()) << p->CheckInvariants();
  p->Free(0);
  p->Free(1);
  p->Free(2);
  EXPECT_TRUE(p->CheckInvariants().ok()) << p->CheckInvariants();
  const PolicyFigures f = p->figures();
  EXPECT_EQ(f.allocated_bytes, 0u);
  EXPECT_GE(f.peak_allocated_bytes, 5 * kMiB + 1024);
  // Nothing was unmapped yet, so the peak is every page mapped so far.
  EXPECT_EQ(f.unmaps, 0u);
  EXPECT_EQ(f.peak_reserved_bytes, f.maps * FragfreePolicy::kPageBytes);
  p->EmptyCache();
  EXPECT_EQ(p->reserved_bytes(), 0u);
  EXPECT_TRUE(p->status().ok()) << p->status();
}

TEST(FragfreePolicyTest, OomIsFalseNotAnError) {
  auto p = Make(16 * kMiB);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Alloc(0, 12 * kMiB, 0));
  EXPECT_FALSE(p->Alloc(1, 8 * kMiB, 0));
  EXPECT_FALSE(p->Alloc(2, 64 * kMiB, 0));  // above the whole limit
  EXPECT_EQ(p->figures().ooms, 2u);
  EXPECT_TRUE(p->status().ok()) << p->status();
  EXPECT_LE(p->reserved_bytes(), 16 * kMiB);
  EXPECT_TRUE(p->CheckInvariants().ok()) << p->CheckInvariants();
}

TEST(FragfreePolicyTest, ScatteredFreePagesServeALargeRequest) {
  // 32 blocks of 2 MiB fill 64 MiB; freeing every other one leaves 32 MiB free
  // but no two free pages adjacent. A request of 16 pages (less 512 bytes: not
  // a whole number of large pages, Note [Large pages]) must still succeed: its
  // pages come from the holes.
  auto p = Make(64 * kMiB);
  ASSERT_NE(p, nullptr);
  for (uint64_t i = 0; i < 32; ++i) ASSERT_TRUE(p->Alloc(i, 2 * kMiB, 0)) << i;
  for (uint64_t i = 0; i < 32; i += 2) p->Free(i);
  ASSERT_TRUE(p->Alloc(100, kSixteenPages, 0));
  EXPECT_LE(p->reserved_bytes(), 64 * kMiB);
  EXPECT_GE(p->figures().remaps, 16u);
  EXPECT_TRUE(p->CheckInvariants().ok()) << p->CheckInvariants();
  // Pages also move between streams.
  p->Free(100);
  ASSERT_TRUE(p->Alloc(101, kSixteenPages, /*stream=*/7));
  EXPECT_TRUE(p->CheckInvariants().ok()) << p->CheckInvariants();
}

// A GPU behind the CPU (--event-lag): the holes a request needs were freed a
// moment ago, their fences not complete. Past the growth slack the engine
// reclaims them instead of growing (Note [Reclaim before grow]): reserved
// memory stays at what lag 0 gives. A request on the holes' own stream takes
// their pages without waiting, stream order making the reuse safe (Note
// [Moving a page without waiting]); one on another stream waits for their
// fences, counted.
TEST(FragfreePolicyTest, LaggingGpuStillReclaimsBeforeGrowing) {
  PolicyConfig config;
  config.capacity_bytes = config.device_total_bytes = 1024 * kMiB;
  for (uint64_t lag : {0, 1000}) {
    for (uint64_t stream : {0, 7}) {
      absl::StatusOr<std::unique_ptr<FragfreePolicy>> made =
          FragfreePolicy::Create(config, 0, lag);
      ASSERT_TRUE(made.ok()) << made.status();
      FragfreePolicy& p = **made;
      for (uint64_t i = 0; i < 32; ++i) ASSERT_TRUE(p.Alloc(i, 2 * kMiB, 0));
      for (uint64_t i = 0; i < 32; i += 2) p.Free(i);
      ASSERT_TRUE(p.Alloc(100, kSixteenPages, stream));
      EXPECT_LE(p.figures().peak_reserved_bytes, 66 * kMiB)
          << "lag " << lag << " stream " << stream;
      uint64_t waits = 0;
      for (const auto& [key, value] : p.figures().extra) {
        if (key == "event_waits") waits = value;
      }
      EXPECT_EQ(waits > 0, lag > 0 && stream != 0)
          << "lag " << lag << " stream " << stream;
      EXPECT_TRUE(p.CheckInvariants().ok()) << p.CheckInvariants();
      // The old addresses go once the GPU passes the holes' last use.
      p.Free(100);
    }
  }
}

TEST(FragfreePolicyTest, InvariantsHoldUnderARandomWorkload) {
  auto p = Make(2 * kGiB);
  ASSERT_NE(p, nullptr);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> live;
  uint64_t next_id = 0;
  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 100 < 52) {
      const uint64_t size =
          rng() % 4 == 0 ? rng() % (64 * kMiB) : rng() % (2 * kMiB);
      if (p->Alloc(next_id, size, rng() % 3)) live.push_back(next_id);
      ++next_id;
    } else {
      const size_t i = rng() % live.size();
      p->Free(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 997 == 0) p->EmptyCache();
    if (step % 500 == 0) {
      ASSERT_TRUE(p->CheckInvariants().ok())
          << step << ": " << p->CheckInvariants();
    }
  }
  for (uint64_t id : live) p->Free(id);
  ASSERT_TRUE(p->CheckInvariants().ok()) << p->CheckInvariants();
  EXPECT_TRUE(p->status().ok()) << p->status();
  EXPECT_EQ(p->figures().allocated_bytes, 0u);
}

TEST(FragfreePolicyTest, TinyTraceNeedsNoMoreThanNative) {
  absl::StatusOr<Trace> trace =
      ReadTrace(std::string(FRAGFREE_REPLAY_TEST_DATA) + "/tiny.csv",
                TraceFormat::kAuto, ReadOptions{});
  ASSERT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<PolicyFactory> factory =
      MakePolicyFactory("fragfree", PolicyOptions{});
  ASSERT_TRUE(factory.ok());
  PolicyConfig config;
  auto policy = (*factory)(config);
  ASSERT_TRUE(policy.ok()) << policy.status();
  ReplayOptions options;
  options.check_invariants_every_event = true;
  const ReplayResult r = Replay(*trace, **policy, options);
  EXPECT_TRUE(r.invariant_error.ok()) << r.invariant_error;
  EXPECT_TRUE(r.policy_status.ok()) << r.policy_status;
  EXPECT_EQ(r.ooms, 0u);
  // Live peaks at 34 MiB + 1000 B: at least 18 pages; native needs 54 MiB.
  EXPECT_GE(r.figures.peak_reserved_bytes, 36 * kMiB);
  EXPECT_LE(r.figures.peak_reserved_bytes, 54 * kMiB);
  absl::StatusOr<MinCapacity> min =
      FindMinCapacity(*trace, *factory, config, r.figures.peak_reserved_bytes);
  ASSERT_TRUE(min.ok()) << min.status();
  ASSERT_TRUE(min->found);
  EXPECT_GE(min->bytes, 36 * kMiB);
  EXPECT_LE(min->bytes, 54 * kMiB);
}

}  // namespace
}  // namespace fragfree::replay
