// Hot-path benchmark (Google Benchmark): a free+alloc pair against a warm
// allocator holding N live blocks, as PyTorch's allocator was measured on the
// H200 (bench/results/2026-11-29-h200-gpu-suite.md: p50 1.28-1.49 us). Mixed
// sizes: 60% 512 B-1 MiB, 35% 1-9 MiB, 5% 16-48 MiB, in 512-byte steps; or
// small only (512 B-64 KiB). Each pair is timed on its own and p50/p99 are
// reported as counters (ns), beside the mean. Backend:
// FRAGFREE_BENCH_BACKEND=simulated (default: no OS calls), host, or cuda.
// Engine options: FRAGFREE_BENCH_CONF (FRAGFREE_CONF syntax). BM_TraceCost*:
// the trace ring's cost, off and on in turns in one process.
#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "allocator/device_allocator.h"
#include "allocator/phys/host_backend.h"
#include "allocator/phys/simulated_backend.h"
#include "allocator/stream/host_event_source.h"
#include "benchmark/benchmark.h"
#ifdef FRAGFREE_WITH_CUDA
#include "allocator/phys/cuda_vmm_backend.h"
#include "allocator/stream/cuda_event_source.h"
#endif

namespace fragfree {
namespace {

std::unique_ptr<DeviceAllocator> MakeAllocator() {
  const char* env = getenv("FRAGFREE_BENCH_BACKEND");
  std::string kind = env ? env : "simulated";
  const size_t capacity = size_t{128} << 30;
  // FRAGFREE_BENCH_CONF: engine options in FRAGFREE_CONF syntax, e.g.
  // trace_entries:1000000 to measure what the trace ring costs.
  const char* conf = getenv("FRAGFREE_BENCH_CONF");
  absl::StatusOr<Options> parsed = Options::Parse(conf ? conf : "");
  if (!parsed.ok()) {
    fprintf(stderr, "FRAGFREE_BENCH_CONF: %s\n",
            parsed.status().ToString().c_str());
    exit(2);
  }
  Options o = *parsed;
#ifdef FRAGFREE_WITH_CUDA
  if (kind == "cuda") {
    auto b = CudaVmmBackend::Create(0);
    auto e = CudaEventSource::Create(0);
    if (!b.ok() || !e.ok()) {
      fprintf(stderr, "no CUDA device: %s\n", b.status().ToString().c_str());
      exit(1);
    }
    return std::move(
        *DeviceAllocator::Create(0, o, std::move(*b), std::move(*e)));
  }
#endif
  std::unique_ptr<PhysicalBackend> backend;
  if (kind == "host") {
    backend = std::move(*HostBackend::Create(capacity, size_t{2} << 20));
  } else {
    backend = std::make_unique<SimulatedBackend>(capacity, size_t{2} << 20);
  }
  return std::move(*DeviceAllocator::Create(
      0, o, std::move(backend), std::make_unique<HostEventSource>()));
}

size_t MixedSize(std::mt19937_64& rng) {
  int r = int(rng() % 100);
  size_t lo, hi;
  if (r < 60)
    lo = 512, hi = 1 << 20;
  else if (r < 95)
    lo = 1 << 20, hi = 9 << 20;
  else
    lo = 16 << 20, hi = 48 << 20;
  return (lo + rng() % (hi - lo)) / 512 * 512 + 512;
}

size_t SmallSize(std::mt19937_64& rng) {
  return 512 + (rng() % (64 << 10)) / 512 * 512;
}

void RunPairs(benchmark::State& state, size_t (*size_of)(std::mt19937_64&)) {
  const size_t live_count = size_t(state.range(0));
  auto a = MakeAllocator();
  std::mt19937_64 rng(42);
  std::vector<void*> live(live_count);
  for (void*& p : live) p = *a->Malloc(size_of(rng), 0);
  // Pre-draw the sequence so the timed region holds only the allocator.
  const size_t kSequence = 1 << 16;
  std::vector<size_t> sizes(kSequence), slots(kSequence);
  for (size_t i = 0; i < kSequence; ++i) {
    sizes[i] = size_of(rng);
    slots[i] = rng() % live_count;
  }
  // Each pair is timed with the TSC (a few ns to read, unlike clock_gettime),
  // converted to ns with a rate calibrated against steady_clock.
  std::vector<uint64_t> ticks;
  ticks.reserve(1 << 20);
  size_t i = 0;
  auto wall0 = std::chrono::steady_clock::now();
  uint64_t tsc0 = __rdtsc();
  for (auto _ : state) {
    size_t slot = slots[i % kSequence];
    uint64_t t0 = __rdtsc();
    a->Free(live[slot]).IgnoreError();
    absl::StatusOr<void*> p = a->Malloc(sizes[i % kSequence], 0);
    uint64_t t1 = __rdtsc();
    live[slot] = *p;
    if (ticks.size() < ticks.capacity()) ticks.push_back(t1 - t0);
    ++i;
  }
  double ns_per_tick = std::chrono::duration<double, std::nano>(
                           std::chrono::steady_clock::now() - wall0)
                           .count() /
                       double(__rdtsc() - tsc0);
  std::sort(ticks.begin(), ticks.end());
  if (!ticks.empty()) {
    state.counters["p50_ns"] = double(ticks[ticks.size() / 2]) * ns_per_tick;
    state.counters["p99_ns"] =
        double(ticks[ticks.size() * 99 / 100]) * ns_per_tick;
  }
  DeviceStats s = a->GetStats();
  state.counters["maps"] = double(s.pages_mapped);
  for (void* p : live) a->Free(p).IgnoreError();
}

// What the trace ring costs, measured against noise: two allocators, the
// trace ring off in one and on (1M entries) in the other, take turns at 256
// free+alloc pairs each, on the same sequence. Counters: ns per pair of each
// (mean) and on/off, the median over the turns of each turn pair's ratio.
void RunTraceCost(benchmark::State& state,
                  size_t (*size_of)(std::mt19937_64&)) {
  const size_t live_count = size_t(state.range(0));
  std::unique_ptr<DeviceAllocator> a[2] = {MakeAllocator(), MakeAllocator()};
  a[1]->SetTraceEntries(1000000);
  a[0]->SetTraceEntries(0);
  std::vector<void*> live[2];
  std::mt19937_64 rng(42);
  const size_t kSequence = 1 << 16;
  std::vector<size_t> sizes(kSequence + live_count), slots(kSequence);
  for (size_t& s : sizes) s = size_of(rng);
  for (size_t& s : slots) s = rng() % live_count;
  for (int k = 0; k < 2; ++k) {
    for (size_t j = 0; j < live_count; ++j) {
      live[k].push_back(*a[k]->Malloc(sizes[kSequence + j], 0));
    }
  }
  constexpr size_t kTurn = 256;
  uint64_t total[2] = {0, 0};
  std::vector<double> ratios;
  size_t i = 0, pairs = 0;
  auto wall0 = std::chrono::steady_clock::now();
  uint64_t tsc0 = __rdtsc();
  for (auto _ : state) {
    uint64_t ticks[2];
    for (int k = 0; k < 2; ++k) {
      DeviceAllocator& d = *a[k];
      const uint64_t t0 = __rdtsc();
      for (size_t j = 0; j < kTurn; ++j) {
        const size_t n = (i + j) % kSequence;
        void*& p = live[k][slots[n]];
        d.Free(p).IgnoreError();
        p = *d.Malloc(sizes[n], 0);
      }
      ticks[k] = __rdtsc() - t0;
      total[k] += ticks[k];
    }
    ratios.push_back(double(ticks[1]) / double(ticks[0]));
    i += kTurn;
    pairs += kTurn;
  }
  const double ns_per_tick = std::chrono::duration<double, std::nano>(
                                 std::chrono::steady_clock::now() - wall0)
                                 .count() /
                             double(__rdtsc() - tsc0);
  if (pairs > 0) {
    std::sort(ratios.begin(), ratios.end());
    state.counters["off_ns"] = double(total[0]) * ns_per_tick / double(pairs);
    state.counters["on_ns"] = double(total[1]) * ns_per_tick / double(pairs);
    state.counters["on_off"] = ratios[ratios.size() / 2];
  }
  for (int k = 0; k < 2; ++k) {
    for (void* p : live[k]) a[k]->Free(p).IgnoreError();
  }
}

void BM_FreeAllocPairMixed(benchmark::State& state) {
  RunPairs(state, MixedSize);
}
void BM_FreeAllocPairSmall(benchmark::State& state) {
  RunPairs(state, SmallSize);
}
void BM_TraceCostMixedPairs(benchmark::State& state) {
  RunTraceCost(state, MixedSize);
}
void BM_TraceCostSmallPairs(benchmark::State& state) {
  RunTraceCost(state, SmallSize);
}

BENCHMARK(BM_FreeAllocPairMixed)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_FreeAllocPairSmall)->Arg(100000);
// Lower-case names: kept out of filters such as 'Small|Mixed/100$'.
BENCHMARK(BM_TraceCostMixedPairs)
    ->Name("BM_TraceCost/mixed")
    ->Arg(100)
    ->Arg(1000);
BENCHMARK(BM_TraceCostSmallPairs)->Name("BM_TraceCost/small")->Arg(100000);

}  // namespace
}  // namespace fragfree

BENCHMARK_MAIN();
