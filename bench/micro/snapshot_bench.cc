// Snapshot benchmark (Google Benchmark): what writing a memory snapshot costs
// with a full 1M-entry trace ring (docs/stats.md, "What the trace and snapshots
// cost"; target: <= 1 s). The state is built once on the simulated backend by
// random mixed-size malloc/free until the ring has wrapped; then each
// benchmark times one step: copying the ring and the arena views out of the
// allocator (what is done under its lock), and writing the pickle or the JSON
// from them. Counters: events, bytes written, peak RSS so far (MiB).
#include <sys/resource.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "allocator/device_allocator.h"
#include "allocator/obs/snapshot.h"
#include "allocator/phys/simulated_backend.h"
#include "allocator/stream/host_event_source.h"
#include "benchmark/benchmark.h"

namespace fragfree {
namespace {

constexpr size_t kTraceEntries = 1000000;

// One allocator for every benchmark: ~1.5k live blocks of mixed sizes, and a
// trace ring that has wrapped (so it is read across its end).
DeviceAllocator& State() {
  static DeviceAllocator* a = [] {
    Options o;
    o.trace_entries = kTraceEntries;
    auto backend =
        std::make_unique<SimulatedBackend>(size_t{128} << 30, size_t{2} << 20);
    DeviceAllocator* d =
        DeviceAllocator::Create(0, o, std::move(backend),
                                std::make_unique<HostEventSource>())
            ->release();
    std::mt19937_64 rng(7);
    auto size = [&rng] {
      const int r = int(rng() % 100);
      const size_t hi = r < 70 ? (1 << 20) : r < 97 ? (16 << 20) : (64 << 20);
      return 512 + rng() % hi;
    };
    std::vector<void*> live;
    for (int i = 0; i < 1500; ++i) live.push_back(*d->Malloc(size(), 0));
    for (int i = 0; i < 600000; ++i) {
      void*& p = live[rng() % live.size()];
      d->Free(p).IgnoreError();
      p = *d->Malloc(size(), rng() % 4 == 0 ? 0x10 : 0);
    }
    return d;
  }();
  return *a;
}

void Report(benchmark::State& state, size_t events, size_t bytes) {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  state.counters["events"] = double(events);
  state.counters["bytes"] = double(bytes);
  state.counters["peak_rss_MiB"] = double(ru.ru_maxrss) / 1024;
}

void BM_CopyTraceAndArenas(benchmark::State& state) {
  DeviceAllocator& a = State();
  size_t events = 0;
  for (auto _ : state) {
    auto arenas = a.Arenas();
    auto trace = a.Trace();
    events = trace.size();
    benchmark::DoNotOptimize(arenas.data());
    benchmark::DoNotOptimize(trace.entries.data());
  }
  Report(state, events, 0);
}

template <bool kPickle>
void BM_Snapshot(benchmark::State& state) {
  DeviceAllocator& a = State();
  auto arenas = a.Arenas();
  auto trace = a.Trace();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string out = kPickle ? SnapshotToPickle(0, arenas, trace)
                              : SnapshotToJson(0, arenas, trace);
    bytes = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  Report(state, trace.size(), bytes);
}
void BM_SnapshotPickle(benchmark::State& state) { BM_Snapshot<true>(state); }
void BM_SnapshotJson(benchmark::State& state) { BM_Snapshot<false>(state); }

BENCHMARK(BM_CopyTraceAndArenas)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SnapshotPickle)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SnapshotJson)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fragfree

BENCHMARK_MAIN();
