// Pinned host memory benchmark (Google Benchmark), docs/host.md:
//  * PoolAllocFree/<bytes>: an alloc+free pair on fragfree's pinned pool
//    (warm: the chunk is pinned before timing), 4 KiB .. 1 GiB;
//  * PinPerRequest/<bytes>: the same pair paying a pinning call each time:
//    the pinning backend's Pin + Unpin (emulated: mmap + MAP_POPULATE +
//    munmap; on a GPU: cuMemHostAlloc + cuMemFreeHost);
//  * CudaHostAlloc/<bytes> (GPU, when libcudart can be opened):
//    cudaHostAlloc + cudaFreeHost, the path PyTorch's allocator pays per block;
//  * CopyH2D/CopyD2H/<source>/<bytes> (GPU): bandwidth of a synchronous copy
//    from/to fragfree's pinned memory vs cuMemHostAlloc'd memory;
//  * Metadata/<bytes> vs OperatorNew/<bytes>: the metadata arena's cost;
//  * --offload_footprint: no timing; the pinned footprint of an offload-style
//    run (bench/gpu/pinned_offload.py's workload) on fragfree's pool (emulated
//    pinning, no page population) vs a model of PyTorch's pinned allocator
//    (power-of-two blocks, cached per size, never released).
// Backend: the CUDA driver when a device exists (FRAGFREE_BENCH_BACKEND=
// emulated forces the emulation), else the emulation.
// Thread-safety: single-threaded benchmarks.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "allocator/base/metadata_arena.h"
#include "allocator/host/host_conf.h"
#include "allocator/host/pinned_allocator.h"
#include "allocator/stream/host_event_source.h"
#include "benchmark/benchmark.h"
#ifdef FRAGFREE_WITH_CUDA
#include "allocator/host/cuda_host.h"
#endif

namespace fragfree {
namespace {

constexpr size_t kSizes[] = {4 * kKiB,  64 * kKiB,  kMiB,
                             16 * kMiB, 256 * kMiB, kGiB};

bool UseCuda() {
#ifdef FRAGFREE_WITH_CUDA
  const char* env = std::getenv("FRAGFREE_BENCH_BACKEND");
  if (env != nullptr && std::string(env) == "emulated") return false;
  absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
  int n = 0;
  return cu.ok() && (*cu)->cuDeviceGetCount(&n) == CUDA_SUCCESS && n > 0;
#else
  return false;
#endif
}

std::unique_ptr<PinningBackend> MakeBackend() {
#ifdef FRAGFREE_WITH_CUDA
  if (UseCuda()) {
    auto b = CudaPinningBackend::Create(CudaPinningBackend::Mode::kHostAlloc);
    if (b.ok()) return std::move(*b);
    fprintf(stderr, "pinned_bench: %s\n", b.status().ToString().c_str());
    std::exit(1);
  }
#endif
  return std::make_unique<EmulatedPinningBackend>();  // populate: pay pages
}

PinnedHostAllocator& Pool() {
  static PinnedHostAllocator* const pool = [] {
    std::unique_ptr<EventSource> events = std::make_unique<HostEventSource>();
#ifdef FRAGFREE_WITH_CUDA
    if (UseCuda()) events = std::move(*CudaStreamEvents::Create());
#endif
    PinnedOptions options;
    options.release_after_ms = -1;
    return new PinnedHostAllocator(MakeBackend(), std::move(events), options);
  }();
  return *pool;
}

void PoolAllocFree(benchmark::State& state) {
  const size_t size = size_t(state.range(0));
  PinnedHostAllocator& pool = Pool();
  (void)pool.Free(*pool.Allocate(size));  // warm: pins the chunk
  const int64_t pins = pool.stats().pin_calls;
  for (auto _ : state) {
    absl::StatusOr<void*> p = pool.Allocate(size);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(*p);
    (void)pool.Free(*p);
  }
  state.counters["pin_calls"] = double(pool.stats().pin_calls - pins);
  (void)pool.EmptyCache();
}

void PinPerRequest(benchmark::State& state) {
  const size_t size = size_t(state.range(0));
  static PinningBackend* const backend = MakeBackend().release();
  const size_t bytes = AlignUp(size, backend->granularity());
  for (auto _ : state) {
    absl::StatusOr<void*> p = backend->Pin(bytes);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(*p);
    (void)backend->Unpin(*p, bytes);
  }
  state.SetLabel(backend->name());
}

// cudaHostAlloc/cudaFreeHost through the runtime, when one can be opened.
using HostAllocFn = int (*)(void**, size_t, unsigned int);
using FreeHostFn = int (*)(void*);
struct Cudart {
  HostAllocFn host_alloc = nullptr;
  FreeHostFn free_host = nullptr;
};
const Cudart& Runtime() {
  static const Cudart rt = [] {
    Cudart r;
    const char* env = std::getenv("FRAGFREE_BENCH_CUDART");
    for (const char* name :
         {env, "libcudart.so", "libcudart.so.13", "libcudart.so.12"}) {
      if (name == nullptr) continue;
      void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) continue;
      r.host_alloc = reinterpret_cast<HostAllocFn>(dlsym(h, "cudaHostAlloc"));
      r.free_host = reinterpret_cast<FreeHostFn>(dlsym(h, "cudaFreeHost"));
      if (r.host_alloc != nullptr && r.free_host != nullptr) break;
    }
    return r;
  }();
  return rt;
}

void CudaHostAlloc(benchmark::State& state) {
  const size_t size = size_t(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    if (Runtime().host_alloc(&p, size, 0) != 0) {
      state.SkipWithError("cudaHostAlloc failed");
      break;
    }
    benchmark::DoNotOptimize(p);
    Runtime().free_host(p);
  }
}

#ifdef FRAGFREE_WITH_CUDA
// Synchronous copies between device memory and pinned host memory from the
// pool (`from_pool`) or from cuMemHostAlloc.
void Copy(benchmark::State& state, bool h2d, bool from_pool) {
  const size_t size = size_t(state.range(0));
  const CudaDriver& cu = **CudaDriver::Get();
  CUdevice dev;
  CUcontext ctx;
  cu.cuDeviceGet(&dev, 0);
  cu.cuDevicePrimaryCtxRetain(&ctx, dev);
  CudaContextScope scope(cu, ctx);
  CUdeviceptr d = 0;
  if (cu.cuMemAlloc(&d, size) != CUDA_SUCCESS) {
    state.SkipWithError("cuMemAlloc failed");
    return;
  }
  void* host = nullptr;
  if (from_pool) {
    host = *Pool().Allocate(size);
  } else {
    cu.cuMemHostAlloc(&host, size, CU_MEMHOSTALLOC_PORTABLE);
  }
  memset(host, 1, size);
  for (auto _ : state) {
    CUresult r =
        h2d ? cu.cuMemcpyHtoD(d, host, size) : cu.cuMemcpyDtoH(host, d, size);
    if (r != CUDA_SUCCESS) {
      state.SkipWithError("copy failed");
      break;
    }
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(size));
  if (from_pool) {
    (void)Pool().Free(host);
  } else {
    cu.cuMemFreeHost(host);
  }
  cu.cuMemFree(d);
}
#endif

void MetadataAllocFree(benchmark::State& state) {
  const size_t size = size_t(state.range(0));
  for (auto _ : state) {
    void* p = MetadataArena::Allocate(size);
    benchmark::DoNotOptimize(p);
    MetadataArena::Deallocate(p, size);
  }
  state.SetLabel(MetadataArena::Info().backend);
}

void OperatorNewDelete(benchmark::State& state) {
  const size_t size = size_t(state.range(0));
  for (auto _ : state) {
    void* p = ::operator new(size);
    benchmark::DoNotOptimize(p);
    ::operator delete(p);
  }
}

// Offload-style run: per step, every layer's activations (variable lengths)
// are offloaded in layer order and loaded back (and freed) in reverse order.
void OffloadFootprint() {
  const int layers = 24, steps = 12;
  const double base_mib[] = {2, 6, 24, 48, 96};
  std::mt19937_64 rng(0);
  std::uniform_real_distribution<double> scale(0.35, 1.0);
  EmulatedPinningBackend::Config config;
  config.populate = false;
  // FRAGFREE_HOST_CONF applies (chunk_mb: ...).
  const char* conf_text = std::getenv("FRAGFREE_HOST_CONF");
  absl::StatusOr<HostConf> conf =
      HostConf::Parse(conf_text != nullptr ? conf_text : "");
  if (!conf.ok()) {
    fprintf(stderr, "%s\n", conf.status().ToString().c_str());
    return;
  }
  PinnedOptions options = conf->pinned;
  options.release_after_ms = -1;
  PinnedHostAllocator pool(std::make_unique<EmulatedPinningBackend>(config),
                           std::make_unique<HostEventSource>(), options);
  // PyTorch's CachingHostAllocator, modelled: a request is rounded to the
  // next power of two; freed blocks are cached by that size and reused for
  // it; nothing is released during the run.
  std::map<size_t, int64_t> free_blocks, owned_blocks;
  int64_t torch_pinned = 0, torch_calls = 0, live = 0, peak_live = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::pair<void*, size_t>> held;
    for (int l = 0; l < layers; ++l) {
      size_t n =
          AlignUp(size_t(base_mib[l % 5] * double(kMiB) * scale(rng)), 512);
      held.emplace_back(*pool.Allocate(n), n);
      size_t block = size_t{1} << (Log2Floor(n - 1) + 1);
      if (free_blocks[block] > 0) {
        --free_blocks[block];
      } else {
        ++owned_blocks[block];
        torch_pinned += int64_t(block);
        ++torch_calls;
      }
      live += int64_t(n);
      peak_live = std::max(peak_live, live);
    }
    for (auto it = held.rbegin(); it != held.rend(); ++it) {
      (void)pool.Free(it->first);
      ++free_blocks[size_t{1} << (Log2Floor(it->second - 1) + 1)];
      live -= int64_t(it->second);
    }
  }
  PinnedStats s = pool.stats();
  printf("offload-style run (%d layers x %d steps, emulated pinning)\n", layers,
         steps);
  printf(
      "| allocator | pinned peak | live peak | pinned / live | pin calls |\n");
  printf("|---|---|---|---|---|\n");
  printf(
      "| PyTorch pinned allocator (model) | %.0f MiB | %.0f MiB | %.2f | %lld "
      "|\n",
      double(torch_pinned) / double(kMiB), double(peak_live) / double(kMiB),
      double(torch_pinned) / double(peak_live), (long long)torch_calls);
  printf(
      "| fragfree pool (%zu MiB chunks) | %.0f MiB | %.0f MiB | %.2f | %lld "
      "|\n",
      options.chunk_bytes / kMiB, double(s.peak_pinned_bytes) / double(kMiB),
      double(peak_live) / double(kMiB),
      double(s.peak_pinned_bytes) / double(peak_live), (long long)s.pin_calls);
}

void Register() {
  const bool cuda = UseCuda();
  auto sizes = [](benchmark::internal::Benchmark* b) {
    for (size_t s : kSizes) b->Arg(int64_t(s));
  };
  benchmark::RegisterBenchmark("PoolAllocFree", PoolAllocFree)
      ->Apply(sizes)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("PinPerRequest", PinPerRequest)
      ->Apply(sizes)
      ->Unit(benchmark::kMicrosecond);
  if (cuda && Runtime().host_alloc != nullptr) {
    benchmark::RegisterBenchmark("CudaHostAlloc", CudaHostAlloc)
        ->Apply(sizes)
        ->Unit(benchmark::kMicrosecond);
  }
#ifdef FRAGFREE_WITH_CUDA
  if (cuda) {
    for (bool h2d : {true, false}) {
      for (bool pool : {true, false}) {
        std::string name = std::string(h2d ? "CopyH2D/" : "CopyD2H/") +
                           (pool ? "fragfree" : "cuMemHostAlloc");
        benchmark::RegisterBenchmark(
            name.c_str(),
            [h2d, pool](benchmark::State& s) { Copy(s, h2d, pool); })
            ->Arg(int64_t(64 * kMiB))
            ->Arg(int64_t(kGiB))
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
#endif
  for (auto* fn : {&MetadataAllocFree, &OperatorNewDelete}) {
    benchmark::RegisterBenchmark(
        fn == &MetadataAllocFree ? "Metadata" : "OperatorNew", fn)
        ->Arg(64)
        ->Arg(1024);
  }
  fprintf(stderr, "pinned_bench: backend %s; metadata on %s%s%s\n",
          cuda ? "cuda" : "emulated", MetadataArena::Info().backend.c_str(),
          MetadataArena::Info().why_not.empty() ? "" : ": ",
          MetadataArena::Info().why_not.c_str());
}

}  // namespace
}  // namespace fragfree

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--offload_footprint") {
      fragfree::OffloadFootprint();
      return 0;
    }
  }
  benchmark::Initialize(&argc, argv);
  fragfree::Register();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
