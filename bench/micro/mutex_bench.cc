// The engine's lock (allocator/base/mutex.h) on its own: an uncontended lock
// and unlock around a critical section that writes a few cache lines (as a
// free or an allocation writes its block, bins and stats), the lines in cache
// (`/0`) or scattered over 64 MiB so that their stores miss (`/1`); and
// threads that take it in turn with work between (BM_Contended/W, 1 to 8
// threads, W additions outside the lock: 64 keeps the lock busy about half
// the time, 2048 (~0.6 us on the 2-vCPU host VM) more as a program that does
// other work between allocations; waiters spin and, past their spin, sleep);
// and the barrier a waiter runs before it sleeps (BM_SleepBarrier/T, T other
// threads busy). Note [Lock] in docs/design.md. Run two builds side by side
// to compare two locks.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "allocator/base/mutex.h"
#include "benchmark/benchmark.h"

namespace fragfree {
namespace {

constexpr size_t kLine = 64;

// The lines a critical section writes: 4 a section, `spread` bytes apart.
struct Lines {
  std::vector<uint64_t> words;
  size_t stride;  // in words
  explicit Lines(size_t span, size_t spread)
      : words(span / sizeof(uint64_t)), stride(spread / sizeof(uint64_t)) {}
  // The 4 lines of the section numbered `n`.
  void Touch(uint64_t n) {
    const size_t count = words.size();
    for (uint64_t k = 0; k < 4; ++k) {
      // A multiplicative step, so that successive sections write lines far
      // apart (no stride for the prefetcher to follow).
      const size_t at = ((n * 4 + k) * 0x9E3779B97F4A7C15ull >> 20) % count;
      words[at / stride * stride] += 1;
    }
  }
};

void BM_Uncontended(benchmark::State& state) {
  const bool scattered = state.range(0) != 0;
  Lines lines(scattered ? size_t{64} << 20 : 4 * kLine * 4, kLine);
  Mutex mu;
  uint64_t n = 0;
  for (auto _ : state) {
    mu.Lock();
    lines.Touch(n++);
    mu.Unlock();
  }
  benchmark::DoNotOptimize(lines.words.data());
}
BENCHMARK(BM_Uncontended)->Arg(0)->Arg(1);

// What a waiter pays before it sleeps: the process-wide barrier
// (MutexSleepIsExact runs one), with `state.range(0)` other threads busy so
// that their CPUs take the barrier's interrupt. The first call also registers
// the process (PrepareMutexSleep), outside the timed loop (counter
// register_ms). Registered before BM_Contended, whose waiters would register
// the process first.
void BM_SleepBarrier(benchmark::State& state) {
  // register_ms: how long the process's registration took (the first call),
  // with a second thread alive, as in any program that has started one (the
  // kernel skips its grace-period wait for a single-threaded process).
  static const double register_ms = [] {
    std::atomic<bool> go{false};
    std::thread second([&] {
      while (!go.load()) std::this_thread::yield();
    });
    const auto t0 = std::chrono::steady_clock::now();
    PrepareMutexSleep();
    const auto t1 = std::chrono::steady_clock::now();
    go.store(true);
    second.join();
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  }();
  state.counters["register_ms"] = register_ms;
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int64_t t = 0; t < state.range(0); ++t) {
    busy.emplace_back([&] {
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed))
        benchmark::DoNotOptimize(++n);
    });
  }
  bool exact = true;
  for (auto _ : state) exact &= MutexSleepIsExact();
  stop.store(true);
  for (std::thread& t : busy) t.join();
  if (!exact)
    state.SkipWithError("membarrier refused: waiters use the backstop");
}
BENCHMARK(BM_SleepBarrier)->Arg(0)->Arg(1)->Arg(4)->UseRealTime();

// One lock and its lines for all threads of BM_Contended.
Mutex g_mu;
Lines* g_lines = nullptr;
uint64_t g_sections = 0;

void BM_Contended(benchmark::State& state) {
  if (state.thread_index() == 0) g_lines = new Lines(size_t{1} << 20, kLine);
  const int64_t work = state.range(0);
  uint64_t outside = 0;
  for (auto _ : state) {
    g_mu.Lock();
    g_lines->Touch(g_sections++);
    g_mu.Unlock();
    for (int64_t k = 0; k < work; ++k) benchmark::DoNotOptimize(outside += k);
  }
  if (state.thread_index() == 0) {
    delete g_lines;
    g_lines = nullptr;
  }
}
BENCHMARK(BM_Contended)->Arg(64)->Arg(2048)->ThreadRange(1, 8)->UseRealTime();

}  // namespace
}  // namespace fragfree

BENCHMARK_MAIN();
