// The hot path in steady state: free+alloc pairs through
// PyTorch's entry points (fragfree_malloc / fragfree_free, the pluggable
// allocator's ABI: shim/pluggable.cc), mixed sizes, 100 / 1k / 10k live
// blocks, with no page mapped or unmapped inside the timed loop: the sequence
// of requests is replayed untimed, with reclaim_before_grow:False, until two
// million pairs in a row map and unmap nothing, then the timed loop replays the
// same sequence (the warm-up runs once per process for each benchmark and live
// count; the further calls Google Benchmark makes to reach
// --benchmark_min_time continue the sequence where the last stopped). The
// stats (ff_stats_t)
// are read around the timed loop: the maps and unmaps during timing are
// reported as counters (maps_timed, unmaps_timed, maps_per_10k_pairs) and a
// run where more than 1 pair in 10,000 mapped or unmapped is an error. p50_ns /
// p99_ns: each pair timed on its own with the TSC, around the two calls alone:
// what a pair frees (from the live-block array) and allocates (computed from
// the sequence index) is in hand before the first read, which waits for those
// loads (lfence), and the second read waits for the calls to finish (rdtscp).
// Raw: tare_ns is the median cost of the two TSC reads alone, p50_net_ns =
// p50_ns - tare_ns. Target on
// the H200's CUDA backend: p50 <= 200 ns, p99 <= 1 us. BM_SteadyPairsAdapter:
// the same pairs through the native adapter's calls (ff_malloc, and ff_free
// with FF_DEVICE_OWNER: its deleter is given only the pointer).
//
// The mapping path on its own (BM_MapPages/N): map N pages and make them
// accessible (one SetAccess over the range, as Arena::MapPages does for a
// run of pages), then unmap them: ns per batch and per page; BM_CreateRelease:
// one page created and released.
//
// FSDP-style's calls (BM_HandoffStep): the allocator calls of one step of
// bench/gpu/workloads.py's FsdpWorkload, through the same ABI: 24 layers, each
// layer's 64 MiB weight gathered on a side stream, handed to the main stream
// with record_stream and freed there (so each free records an event and later
// allocations query it: docs/design.md, Note [Lazy fences]), its activations
// allocated on the main stream. The streams are the legacy default stream and
// the per-thread default stream (CU_STREAM_PER_THREAD), valid on the GPU
// without creating any; no GPU work is queued, so every event is complete when
// queried. Each call is timed on its own with the TSC (tare_ns: the two reads
// alone): ns_per_call, the mean over a step's calls, the CUDA event calls
// included (what the hot path's pairs, which record no event, leave out); by
// kind, alloc_ns, start_alloc_ns (the step's first three), free_ns,
// handoff_free_ns (a weight's free, which records an event on the main stream)
// and record_stream_ns; maps_timed: pages mapped while timed (the warm-up steps
// map the working set). On the cuda backend the primary context is current, as
// on PyTorch's threads. BM_EventCalls: the driver calls behind those events,
// each timed alone (cuda backend only).
//
// Under callgrind with --collect-atstart=no, only the timed pairs are
// collected: the two calls and the TSC reads around them (not the warm-up
// passes, which map pages and search further, nor the benchmark's own loop).
//
// Backend: FRAGFREE_BENCH_BACKEND=cuda (the GPU), host (memfd pages, the
// default) or simulated (no OS calls: the data structures alone).
// FRAGFREE_BENCH_CONF: more engine options (FRAGFREE_CONF syntax).
#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#endif

#include "allocator/base/units.h"
#include "allocator/phys/host_backend.h"
#include "allocator/phys/simulated_backend.h"
#include "benchmark/benchmark.h"
#include "fragfree/fragfree.h"
#ifdef FRAGFREE_WITH_CUDA
#include "allocator/phys/cuda_vmm_backend.h"
#endif

extern "C" {
void* fragfree_malloc(size_t size, int device, void* stream);
void fragfree_free(void* ptr, size_t size, int device, void* stream);
void fragfree_record_stream(void* ptr, void* stream);
}

namespace fragfree {
namespace {

std::string BackendKind() {
  const char* env = getenv("FRAGFREE_BENCH_BACKEND");
  return env ? env : "host";
}

// The engine, once per process, through the C API (as PyTorch's process has
// it).
void InitOnce() {
  static const bool done = [] {
    std::string kind = BackendKind();
    // Nothing is unmapped to keep the footprint near the live bytes
    // (reclaim_before_grow:False), so the mapped set only grows during the
    // warm-up passes until every layout the sequence makes fits in it: the
    // timed loop then maps nothing (Note [Reclaim before grow] in
    // docs/design.md is what this leaves out).
    std::string conf = "reclaim_before_grow:False";
    if (kind != "cuda") {
      // 10k live mixed blocks hold ~36 GiB: the emulated device is 128 GiB of
      // address space (host pages are only touched when written).
      conf += ",backend:" + kind + ",host_capacity_mb:131072";
    }
    if (const char* extra = getenv("FRAGFREE_BENCH_CONF")) {
      conf += (conf.empty() ? "" : ",") + std::string(extra);
    }
    if (ff_init(conf.c_str()) != FF_OK) {
      fprintf(stderr, "ff_init(%s): %s\n", conf.c_str(), ff_last_error());
      exit(1);
    }
    return true;
  }();
  (void)done;
}

ff_stats_t Stats() {
  ff_stats_t s = {};
  s.size = sizeof(s);
  ff_get_stats(0, &s);
  return s;
}

// A 64-bit word of index n's stream (splitmix64's finaliser): the
// benchmark's random numbers are a function of their index, so the request
// sequence needs no arrays, which at 10k live blocks (1.3 MB of sizes and
// slots) streamed through the caches the engine's tables live in.
uint64_t RandomWord(uint64_t n) {
  uint64_t z = n * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// As bench/micro/malloc_free_bench.cc's mixed sizes: 60% 512 B-1 MiB, 35%
// 1-9 MiB, 5% 16-48 MiB, in 512-byte steps; `r` picks the range (its low
// 32 bits, mod 100) and the size in it (its high 32 bits).
size_t MixedSize(uint64_t r) {
  const int range = int(uint32_t(r) % 100);
  size_t lo, hi;
  if (range < 60) {
    lo = 512, hi = 1 << 20;
  } else if (range < 95) {
    lo = 1 << 20, hi = 9 << 20;
  } else {
    lo = 16 << 20, hi = 48 << 20;
  }
  return (lo + (r >> 32) % (hi - lo)) / 512 * 512 + 512;
}

double NsPerTick() {
  static const double rate = [] {
    const auto w0 = std::chrono::steady_clock::now();
    const uint64_t t0 = __rdtsc();
    while (std::chrono::steady_clock::now() - w0 <
           std::chrono::milliseconds(20)) {
    }
    return std::chrono::duration<double, std::nano>(
               std::chrono::steady_clock::now() - w0)
               .count() /
           double(__rdtsc() - t0);
  }();
  return rate;
}

// The TSC reads around a timed pair. The first waits for every earlier
// instruction, the loads of what the pair frees and allocates included
// (lfence), so no miss of the benchmark's live-block array is counted; the
// second waits for the pair's instructions to finish (rdtscp).
inline uint64_t StartTicks() {
  _mm_lfence();
  return __rdtsc();
}
inline uint64_t EndTicks() {
  unsigned int core;
  return __rdtscp(&core);
}

// The two TSC reads around a pair with nothing between them, median of
// 10,001 (what p50_ns includes besides the pair: p50_net_ns subtracts it).
double TareNs() {
  std::vector<uint64_t> ticks(10001);
  for (uint64_t& t : ticks) {
    const uint64_t t0 = StartTicks();
    const uint64_t t1 = EndTicks();
    t = t1 - t0;
  }
  std::nth_element(ticks.begin(), ticks.begin() + ticks.size() / 2,
                   ticks.end());
  return double(ticks[ticks.size() / 2]) * NsPerTick();
}

// Which entry points a pair goes through: PyTorch's pluggable allocator ABI
// (fragfree_malloc / fragfree_free with the device PyTorch passes), or the
// native adapter's calls (ff_malloc, and ff_free with FF_DEVICE_OWNER: its
// deleter knows only the pointer; integrations/python/fragfree/csrc).
enum class Entry { kPluggable, kNativeAdapter };

void* Allocate(Entry entry, size_t size) {
  return entry == Entry::kPluggable ? fragfree_malloc(size, 0, nullptr)
                                    : ff_malloc(size, 0, nullptr);
}

void Release(Entry entry, void* p, size_t size) {
  if (entry == Entry::kPluggable) {
    fragfree_free(p, size, 0, nullptr);
  } else {
    ff_free(p, FF_DEVICE_OWNER);
  }
}

// One (entry, live count)'s live blocks and request sequence, warmed once per
// process: Google Benchmark calls a benchmark again with more iterations until
// --benchmark_min_time is met (1, 10, 100, ... up to ~7 calls), and setting up
// 10k live blocks anew each time (tens of GiB mapped, then given back) was
// most of a run on the GPU. Each call times pairs from where the last stopped.
struct Warmed {
  // A live block as a program holds it: the pointer and its size together.
  struct Live {
    void* ptr;
    size_t size;
  };
  Entry entry;
  size_t live_count;
  std::vector<Live> live;
  size_t length = 0;  // the sequence's period, in pairs
  size_t next = 0;    // the sequence index the next pair takes
  int passes = 0;     // untimed passes the warm-up took

  // The pairs of the sequence over the live set. A caller's local copy keeps
  // the array's address in a register across the engine calls (a pair reads
  // nothing through the Warmed object).
  struct Pairs {
    Entry entry;
    Live* live;
    size_t live_count;
    size_t length;

    // Sequence index i: the live block it frees, and the size it allocates
    // in its place (i and i + length are the same step).
    struct Step {
      Live* block;
      size_t size;
    };
    Step At(size_t i) const {
      const uint64_t n = 2 * (i % length);  // two words a step
      return {&live[RandomWord(n) % live_count], MixedSize(RandomWord(n + 1))};
    }
    // A pair's engine calls: frees `old` (of `old_size` bytes), returns a
    // new block of `size` bytes.
    void* Exchange(void* old, size_t old_size, size_t size) const {
      Release(entry, old, old_size);
      return Allocate(entry, size);
    }
    void operator()(size_t i) const {
      const Step s = At(i);
      *s.block = {Exchange(s.block->ptr, s.block->size, s.size), s.size};
    }
  };
  Pairs pairs() { return {entry, live.data(), live_count, length}; }
};

std::unique_ptr<Warmed>& WarmedSlot() {
  static std::unique_ptr<Warmed> warmed;
  return warmed;
}

// Frees the warmed live set, if any, and empties the cache: the next
// benchmark starts from an empty device.
void ReleaseWarmed() {
  std::unique_ptr<Warmed>& w = WarmedSlot();
  if (w == nullptr) return;
  for (size_t k = 0; k < w->live_count; ++k) {
    Release(w->entry, w->live[k].ptr, w->live[k].size);
  }
  ff_empty_cache(0);
  w.reset();
}

Warmed& WarmedFor(Entry entry, size_t live_count) {
  std::unique_ptr<Warmed>& w = WarmedSlot();
  if (w != nullptr && w->entry == entry && w->live_count == live_count) {
    return *w;
  }
  ReleaseWarmed();
  w = std::make_unique<Warmed>();
  w->entry = entry;
  w->live_count = live_count;
  // The initial live set's sizes are words past every sequence index's.
  constexpr uint64_t kInitialWords = uint64_t{1} << 40;
  w->live.resize(live_count);
  for (size_t i = 0; i < live_count; ++i) {
    const size_t size = MixedSize(RandomWord(kInitialWords + i));
    w->live[i] = {Allocate(entry, size), size};
  }
  // Each slot is replaced ~8 times a pass at 10k live blocks.
  w->length = std::max<size_t>(1 << 14, 8 * live_count);
  const size_t sequence = w->length;
  // Untimed passes over the sequence until two million pairs in a row (at
  // least four passes) map and unmap nothing. The mapped set only grows, by
  // a few pages when a 16-48 MiB request fits no mapped hole, rarer the longer
  // it runs; the timed calls that follow (up to ~7, the first ones short)
  // each fail on more than one map in 10,000 pairs, so the warm-up runs until
  // maps are rare enough that a short call is unlikely to meet one (with a
  // million, a 100k-pair call of the 10k live set met a 72-page map).
  constexpr size_t kCleanPairs = size_t{1} << 21;
  constexpr int kMinCleanPasses = 4, kMaxPasses = 400;
  const int clean_passes = std::max<int>(
      kMinCleanPasses, int((kCleanPairs + sequence - 1) / sequence));
  const Warmed::Pairs pair = w->pairs();
  for (int clean = 0; clean < clean_passes && w->passes < kMaxPasses;
       ++w->passes) {
    const ff_stats_t a = Stats();
    for (size_t i = 0; i < sequence; ++i) pair(i);
    const ff_stats_t b = Stats();
    const bool mapped = b.pages_mapped != a.pages_mapped ||
                        b.pages_unmapped != a.pages_unmapped;
    clean = mapped ? 0 : clean + 1;
  }
  return *w;
}

void SteadyPairs(benchmark::State& state, Entry entry) {
  InitOnce();
  Warmed& w = WarmedFor(entry, size_t(state.range(0)));
  const Warmed::Pairs pair = w.pairs();
  const size_t start = w.next;
  std::vector<uint64_t> ticks;
  ticks.reserve(1 << 20);
  const ff_stats_t before = Stats();
  size_t i = 0;
  for (auto _ : state) {
    const Warmed::Pairs::Step step = pair.At(start + i);
    void* old = step.block->ptr;
    size_t old_size = step.block->size;
    size_t size = step.size;
    // In registers before the first TSC read, which waits for their loads.
    benchmark::DoNotOptimize(old);
    benchmark::DoNotOptimize(old_size);
    benchmark::DoNotOptimize(size);
    CALLGRIND_TOGGLE_COLLECT;
    const uint64_t t0 = StartTicks();
    void* fresh = pair.Exchange(old, old_size, size);
    const uint64_t t1 = EndTicks();
    CALLGRIND_TOGGLE_COLLECT;
    *step.block = {fresh, size};
    if (ticks.size() < ticks.capacity()) ticks.push_back(t1 - t0);
    ++i;
  }
  w.next = (start + i) % w.length;
  const ff_stats_t after = Stats();
  std::sort(ticks.begin(), ticks.end());
  if (!ticks.empty()) {
    const double p50 = double(ticks[ticks.size() / 2]) * NsPerTick();
    const double tare = TareNs();
    state.counters["p50_ns"] = p50;
    state.counters["p99_ns"] =
        double(ticks[ticks.size() * 99 / 100]) * NsPerTick();
    state.counters["tare_ns"] = tare;
    state.counters["p50_net_ns"] = p50 - tare;
  }
  const double maps = double(after.pages_mapped - before.pages_mapped);
  const double unmaps = double(after.pages_unmapped - before.pages_unmapped);
  state.counters["maps_timed"] = maps;
  state.counters["unmaps_timed"] = unmaps;
  state.counters["warm_passes"] = w.passes;
  state.counters["mapped_GiB"] = double(after.mapped_bytes.current) / kGiB;
  state.counters["live_GiB"] = double(after.allocated_bytes[0].current) / kGiB;
  // The blocks a pair's walk ranges over (allocated, and free ones split off
  // beside them), each a 128-byte Block: the working set that Note [Hot path]
  // in docs/design.md weighs against the last-level cache.
  state.counters["blocks"] =
      double(after.active[0].current + after.inactive_split[0].current);
  // The warm-up leaves the mapped set growing by a page now and then (a
  // 16-48 MiB request that fits no mapped hole: a few dozen pages per million
  // pairs). Pairs that map, if at most 1 in 10,000, cannot move p50 or p99 by
  // more than 0.01 of a percentile; more fails the run.
  // FRAGFREE_BENCH_ALLOW_MAPS=1: report rather than fail (to study a run).
  const bool allow = getenv("FRAGFREE_BENCH_ALLOW_MAPS") != nullptr;
  state.counters["maps_per_10k_pairs"] = 1e4 * (maps + unmaps) / double(i);
  if ((maps + unmaps) * 10000 > double(i) && !allow) {
    state.SkipWithError(("pages were mapped (" + std::to_string(int64_t(maps)) +
                         ") or unmapped (" + std::to_string(int64_t(unmaps)) +
                         ") during timing")
                            .c_str());
  }
}

void BM_SteadyPairs(benchmark::State& state) {
  SteadyPairs(state, Entry::kPluggable);
}
void BM_SteadyPairsAdapter(benchmark::State& state) {
  SteadyPairs(state, Entry::kNativeAdapter);
}

// The two streams of BM_HandoffStep: the legacy default stream and
// CU_STREAM_PER_THREAD.
void* const kMainStream = nullptr;
void* const kSideStream = reinterpret_cast<void*>(uintptr_t{2});

// The calls of BM_HandoffStep by kind, each timed on its own with the TSC.
enum HandoffCall {
  kAlloc,
  kStartAlloc,
  kFree,
  kHandoffFree,
  kRecordStream,
  kHandoffCalls
};
constexpr const char* kHandoffCallNames[kHandoffCalls] = {
    "alloc", "start_alloc", "free", "handoff_free", "record_stream"};

// TSC ticks and calls of `kKinds` kinds of call, each call timed on its own.
template <int kKinds>
struct CallTicks {
  uint64_t ticks[kKinds] = {};
  int64_t calls[kKinds] = {};

  template <typename F>
  void Time(int kind, F&& call) {
    const uint64_t t0 = StartTicks();
    call();
    ticks[kind] += EndTicks() - t0;
    ++calls[kind];
  }
  // ns a call of `kind` (TSC reads included); 0 when none was timed.
  double NsPerCall(int kind) const {
    return calls[kind] > 0 ? double(ticks[kind]) * NsPerTick() / calls[kind]
                           : 0.0;
  }
};
using HandoffTotals = CallTicks<kHandoffCalls>;

// One FSDP-style step's allocator calls (index `k` picks its batch rows, as
// FsdpWorkload's 256..1024 rows of 4096 fp32), added to *totals.
void HandoffStep(uint64_t k, HandoffTotals* totals) {
  constexpr int kLayers = 24;
  constexpr size_t kWidth = 4096, kWeight = kWidth * kWidth * 4;
  constexpr size_t kScalar = 4;
  const size_t act = 64 * (4 + RandomWord(k) % 13) * kWidth * 4;
  // The step's first three allocations (the input, then the first gather's
  // two on the side stream) are timed apart: on the GPU, FsdpWorkload's marks
  // input, empty0 and repeat0 time the same calls with the GPU idle.
  int allocs = 0;
  auto alloc = [&](size_t size, void* stream) {
    void* p = nullptr;
    totals->Time(allocs++ < 3 ? kStartAlloc : kAlloc,
                 [&] { p = fragfree_malloc(size, 0, stream); });
    return p;
  };
  auto release = [&](void* p, size_t size, void* stream,
                     HandoffCall kind = kFree) {
    totals->Time(kind, [&] { fragfree_free(p, size, 0, stream); });
  };
  // A weight gathered on the side stream: the full weight, and the repeated
  // shard it is copied from (freed once copied).
  auto gather = [&]() {
    void* w = alloc(kWeight, kSideStream);
    release(alloc(kWeight, kSideStream), kWeight, kSideStream);
    return w;
  };
  void* acts[kLayers];
  void* x = alloc(act, kMainStream);
  void* next = gather();
  for (int i = 0; i < kLayers; ++i) {
    void* w = next;
    totals->Time(kRecordStream,
                 [&] { fragfree_record_stream(w, kMainStream); });
    if (i + 1 < kLayers) next = gather();
    void* product = alloc(act, kMainStream);  // x @ w
    acts[i] = alloc(act, kMainStream);        // relu
    release(product, act, kMainStream);
    // Pending on the main stream: records an event there.
    release(w, kWeight, kSideStream, kHandoffFree);
  }
  // The loss: a mean per activation, summed.
  void* sum = alloc(kScalar, kMainStream);
  for (int i = 0; i < kLayers; ++i) {
    void* mean = alloc(kScalar, kMainStream);
    void* total = alloc(kScalar, kMainStream);
    release(mean, kScalar, kMainStream);
    release(sum, kScalar, kMainStream);
    sum = total;
  }
  release(sum, kScalar, kMainStream);
  for (void* a : acts) release(a, act, kMainStream);
  release(x, act, kMainStream);
}

#ifdef FRAGFREE_WITH_CUDA
// The device's primary context, made current on this thread as PyTorch's
// threads have it (else each engine call that records an event switches the
// context and back, which a PyTorch process never does); false on another
// backend or without a device. The context is retained once per process.
bool MakePrimaryContextCurrent() {
  if (BackendKind() != "cuda") return false;
  static const absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
  if (!cu.ok()) return false;
  static const absl::StatusOr<CUcontext> context =
      (*cu)->RetainPrimaryContext(0);
  return context.ok() && (*cu)->cuCtxSetCurrent(*context) == CUDA_SUCCESS;
}
#else
bool MakePrimaryContextCurrent() { return false; }
#endif

void BM_HandoffStep(benchmark::State& state) {
  ReleaseWarmed();
  InitOnce();
  MakePrimaryContextCurrent();
  uint64_t k = 0;
  HandoffTotals warm_up;
  for (int i = 0; i < 50; ++i) HandoffStep(k++, &warm_up);
  const ff_stats_t before = Stats();
  HandoffTotals totals;
  int64_t steps = 0;
  for (auto _ : state) {
    HandoffStep(k++, &totals);
    ++steps;
  }
  const ff_stats_t after = Stats();
  uint64_t ticks = 0;
  int64_t calls = 0;
  for (int kind = 0; kind < kHandoffCalls; ++kind) {
    ticks += totals.ticks[kind];
    calls += totals.calls[kind];
    if (totals.calls[kind] > 0) {
      state.counters[std::string(kHandoffCallNames[kind]) + "_ns"] =
          totals.NsPerCall(kind);
    }
  }
  if (calls > 0) {
    state.counters["ns_per_call"] = double(ticks) * NsPerTick() / calls;
    state.counters["calls_per_step"] = double(calls) / double(steps);
    state.counters["tare_ns"] = TareNs();
  }
  state.counters["maps_timed"] =
      double(after.pages_mapped - before.pages_mapped);
  ff_empty_cache(0);
}

#ifdef FRAGFREE_WITH_CUDA
// The driver calls behind a free of memory another stream used and the
// allocations after it, each timed alone (ns a call, TSC reads included), on
// the legacy default stream with the primary context current: cuEventRecord
// and cuEventQuery, which PyTorch's allocator makes too (through
// cudaEventRecord / cudaEventQuery), and what fragfree adds around a record:
// cuCtxGetCurrent (CudaContextScope) and cuStreamGetCaptureInfo
// (IsCapturing); cuStreamIsCapturing for comparison. cuda backend only.
void BM_EventCalls(benchmark::State& state) {
  ReleaseWarmed();
  if (!MakePrimaryContextCurrent()) {
    state.SkipWithError("needs FRAGFREE_BENCH_BACKEND=cuda and a device");
    return;
  }
  const CudaDriver& cu = **CudaDriver::Get();
  CUevent event;
  if (cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) {
    state.SkipWithError("cuEventCreate failed");
    return;
  }
  enum { kCtxGet, kCaptureInfo, kIsCapturing, kRecord, kQuery, kCalls };
  constexpr const char* kNames[kCalls] = {
      "ctx_get_current_ns", "get_capture_info_ns", "is_capturing_ns",
      "event_record_ns", "event_query_ns"};
  CallTicks<kCalls> times;
  const CUstream stream = nullptr;
  for (auto _ : state) {
    CUcontext current;
    CUstreamCaptureStatus status;
    times.Time(kCtxGet, [&] { cu.cuCtxGetCurrent(&current); });
    times.Time(kCaptureInfo, [&] {
      cu.cuStreamGetCaptureInfo(stream, &status, nullptr, nullptr, nullptr,
                                nullptr, nullptr);
    });
    times.Time(kIsCapturing, [&] { cu.cuStreamIsCapturing(stream, &status); });
    times.Time(kRecord, [&] { cu.cuEventRecord(event, stream); });
    times.Time(kQuery, [&] { cu.cuEventQuery(event); });
  }
  for (int kind = 0; kind < kCalls; ++kind) {
    if (times.calls[kind] > 0) {
      state.counters[kNames[kind]] = times.NsPerCall(kind);
    }
  }
  cu.cuEventDestroy(event);
}
#endif

std::unique_ptr<PhysicalBackend> MakeBackend() {
  const std::string kind = BackendKind();
#ifdef FRAGFREE_WITH_CUDA
  if (kind == "cuda") {
    auto b = CudaVmmBackend::Create(0);
    if (!b.ok()) {
      fprintf(stderr, "no CUDA device: %s\n", b.status().ToString().c_str());
      exit(1);
    }
    return std::move(*b);
  }
#endif
  if (kind == "simulated") {
    return std::make_unique<SimulatedBackend>(size_t{1} << 30, 2 * kMiB);
  }
  return std::move(*HostBackend::Create(size_t{1} << 30, 2 * kMiB));
}

// Map N pages (one Map each) and make the range accessible (one SetAccess),
// then unmap them (one Unmap each), timed apart.
void BM_MapPages(benchmark::State& state) {
  ReleaseWarmed();
  const size_t n = size_t(state.range(0));
  std::unique_ptr<PhysicalBackend> b = MakeBackend();
  const size_t page = b->Granularity();
  const uintptr_t va = *b->ReserveVa(n * page);
  std::vector<PhysHandle> handles;
  for (size_t i = 0; i < n; ++i) handles.push_back(*b->Create(page));
  uint64_t map_ticks = 0, unmap_ticks = 0, batches = 0;
  for (auto _ : state) {
    const uint64_t t0 = __rdtsc();
    for (size_t i = 0; i < n; ++i) {
      b->Map(va + i * page, page, handles[i]).IgnoreError();
    }
    b->SetAccess(va, n * page).IgnoreError();
    const uint64_t t1 = __rdtsc();
    for (size_t i = 0; i < n; ++i) b->Unmap(va + i * page, page).IgnoreError();
    const uint64_t t2 = __rdtsc();
    map_ticks += t1 - t0;
    unmap_ticks += t2 - t1;
    ++batches;
  }
  if (batches > 0) {
    const double per = NsPerTick() / double(batches);
    state.counters["map_access_ns"] = double(map_ticks) * per;
    state.counters["map_access_ns_per_page"] = double(map_ticks) * per / n;
    state.counters["unmap_ns"] = double(unmap_ticks) * per;
    state.counters["unmap_ns_per_page"] = double(unmap_ticks) * per / n;
  }
  for (PhysHandle h : handles) b->Release(h).IgnoreError();
  b->ReleaseVa(va, n * page).IgnoreError();
}

void BM_CreateRelease(benchmark::State& state) {
  ReleaseWarmed();
  std::unique_ptr<PhysicalBackend> b = MakeBackend();
  const size_t page = b->Granularity();
  for (auto _ : state) {
    PhysHandle h = *b->Create(page);
    b->Release(h).IgnoreError();
  }
}

BENCHMARK(BM_SteadyPairs)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_SteadyPairsAdapter)->Arg(100)->Arg(1000)->Arg(10000);
BENCHMARK(BM_HandoffStep);
#ifdef FRAGFREE_WITH_CUDA
BENCHMARK(BM_EventCalls);
#endif
BENCHMARK(BM_MapPages)->Arg(1)->Arg(8)->Arg(64);
BENCHMARK(BM_CreateRelease);

}  // namespace
}  // namespace fragfree

BENCHMARK_MAIN();
