// The FSDP-style pattern of bench/gpu/workloads.py (FsdpWorkload) on the
// engine, simulated backend, with the GPU running behind the CPU: 24 layers'
// 64 MiB weights gathered on a side stream (plus a 64 MiB temporary there),
// handed to the compute stream with record_stream and freed after use, while
// the compute stream keeps one activation per layer, a different row count
// every step. Checks that the steady state moves (remaps) few pages per step
// and that reserved memory stays near the active peak. With FSDP_VERBOSE set
// it prints each step's figures.
// Thread-safety: single-threaded test.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "allocator/device_allocator.h"
#include "allocator/phys/simulated_backend.h"
#include "bench/replay/lagging_event_source.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kPage = 2 * kMiB;
constexpr StreamHandle kCompute = 0x100, kSide = 0x200;

struct StepFigures {
  int64_t remapped = 0;  // pages moved from a free block (unmap + map)
  int64_t mapped = 0;    // pages mapped
  int64_t created = 0;   // pages created
  int64_t fence_waits = 0;
};

struct FsdpResult {
  std::vector<StepFigures> steps;
  int64_t reserved_peak = 0;
  int64_t allocated_peak = 0;
  int64_t active_peak = 0;
};

constexpr int kSteps = 30, kWarmup = 12;

// Runs `steps` steps of the pattern; `lag` in allocator calls. The move time
// budget is off: these tests count placement's moves, which must not depend
// on how fast the machine runs them (Note [Move time budget]).
FsdpResult RunFsdp(int steps, uint64_t lag, Options options = Options(),
                   int layers = 24) {
  options.move_time_budget = 1.0;
  uint64_t clock = 0;
  auto events_owned = std::make_unique<replay::LaggingEventSource>(lag, &clock);
  replay::LaggingEventSource* events = events_owned.get();
  auto backend = std::make_unique<SimulatedBackend>(size_t{64} << 30, kPage);
  std::unique_ptr<DeviceAllocator> a = *DeviceAllocator::Create(
      0, options, std::move(backend), std::move(events_owned));
  auto alloc = [&](size_t bytes, StreamHandle s) {
    ++clock;
    absl::StatusOr<void*> p = a->Malloc(bytes, s);
    EXPECT_TRUE(p.ok()) << p.status();
    return *p;
  };
  auto free = [&](void* p) {
    ++clock;
    EXPECT_TRUE(a->Free(p).ok());
  };
  constexpr size_t kWeight = 4096 * 4096 * 4;  // 64 MiB
  std::vector<void*> shards;
  for (int i = 0; i < layers; ++i)
    shards.push_back(alloc(kWeight / 8, kCompute));
  std::mt19937 rng(0);
  std::uniform_int_distribution<int> rows_dist(4, 16);
  const bool verbose = std::getenv("FSDP_VERBOSE") != nullptr;
  FsdpResult result;
  for (int step = 0; step < steps; ++step) {
    const DeviceStats before = a->GetStats();
    const int64_t waits_before = int64_t(events->waits());
    const size_t act = size_t(64 * rows_dist(rng)) * 4096 * 4;
    void* x = alloc(act, kCompute);
    std::vector<void*> full(layers, nullptr);
    auto gather = [&](int i) {  // on the side stream
      full[i] = alloc(kWeight, kSide);
      void* repeated = alloc(kWeight, kSide);  // shard.repeat(8)
      free(repeated);
    };
    gather(0);
    std::vector<void*> acts;
    for (int i = 0; i < layers; ++i) {
      void* w = full[i];
      ++clock;
      EXPECT_TRUE(a->RecordStream(w, kCompute).ok());
      if (i + 1 < layers) gather(i + 1);
      void* mm = alloc(act, kCompute);  // x @ w
      void* y = alloc(act, kCompute);   // relu
      free(mm);
      if (i == 0) free(x);
      acts.push_back(y);
      full[i] = nullptr;
      free(w);
    }
    events->CatchUp();  // loss.item()
    for (void* p : acts) free(p);
    const DeviceStats after = a->GetStats();
    StepFigures f{after.pages_remapped - before.pages_remapped,
                  after.pages_mapped - before.pages_mapped,
                  after.handles_created - before.handles_created,
                  int64_t(events->waits()) - waits_before};
    result.steps.push_back(f);
    if (verbose) {
      std::printf(
          "step %2d act %2zu MiB: remapped %3lld mapped %3lld created %3lld "
          "waits %3lld reserved %.3f GiB (peak %.3f) allocated peak %.3f\n",
          step, act / kMiB, (long long)f.remapped, (long long)f.mapped,
          (long long)f.created, (long long)f.fence_waits,
          double(after.reserved_bytes.pool[0].current) / (1 << 30),
          double(after.reserved_bytes.pool[0].peak) / (1 << 30),
          double(after.allocated_bytes.pool[0].peak) / (1 << 30));
    }
  }
  const DeviceStats end = a->GetStats();
  result.reserved_peak = end.reserved_bytes.pool[0].peak;
  result.allocated_peak = end.allocated_bytes.pool[0].peak;
  result.active_peak = end.active_bytes.pool[0].peak;
  for (void* p : shards) free(p);
  return result;
}

double MeanRemapsAfter(const FsdpResult& r, int warmup) {
  int64_t total = 0;
  for (size_t i = warmup; i < r.steps.size(); ++i) total += r.steps[i].remapped;
  return double(total) / double(r.steps.size() - warmup);
}

// Reserved memory against the most memory active at once (allocated, or
// freed while the compute stream's recorded use may still run).
double ReservedOverActive(const FsdpResult& r) {
  return double(r.reserved_peak) / double(r.active_peak);
}

// With the GPU behind the CPU, the steady state moves few pages per step: the
// compute stream's activations, placed in its arena's tail, go over the tail's
// mapped pages instead of sliding them forward one request at a time (Note
// [Mapped-first placement]), and the weights freed with record_stream count as
// in use, so the engine holds their pages instead of waiting for the GPU and
// moving pages between the streams; while such frees are pending it creates
// pages instead of reclaiming (Note [Pending frees count as in use]).
// Lag 0 and 8 are a GPU close behind; 40 a few layers behind; 100000 a whole
// step behind (the CPU waits only at the step's end).
TEST(FsdpPattern, FewRemapsPerStepInSteadyState) {
  for (uint64_t lag : {0, 8, 40, 100000}) {
    FsdpResult r = RunFsdp(kSteps, lag);
    EXPECT_LE(MeanRemapsAfter(r, kWarmup), 10.0) << "lag " << lag;
    // And the CPU does not wait for the GPU to reuse pages.
    int64_t waits = 0;
    for (size_t i = kWarmup; i < r.steps.size(); ++i) {
      waits += r.steps[i].fence_waits;
    }
    EXPECT_EQ(waits, 0) << "lag " << lag;
    // Memory holds what is active and little more.
    EXPECT_LE(ReservedOverActive(r), 1.10) << "lag " << lag;
  }
}

// Counting only allocated bytes (grow_for_pending_frees:False) keeps reserved
// memory lower, and pays for it in pages moved (and fence waits) once the GPU
// is more than a few calls behind.
TEST(FsdpPattern, AllocatedOnlyGrowthMovesPagesInsteadOfGrowing) {
  Options allocated_only;
  allocated_only.grow_for_pending_frees = false;
  for (uint64_t lag : {40, 100000}) {
    FsdpResult active = RunFsdp(kSteps, lag);
    FsdpResult allocated = RunFsdp(kSteps, lag, allocated_only);
    EXPECT_GT(MeanRemapsAfter(allocated, kWarmup),
              4 * MeanRemapsAfter(active, kWarmup) + 20)
        << "lag " << lag;
    EXPECT_LT(allocated.reserved_peak, active.reserved_peak) << "lag " << lag;
  }
}

}  // namespace
}  // namespace fragfree
