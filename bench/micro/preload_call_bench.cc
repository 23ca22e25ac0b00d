// What a stream-ordered allocation costs on the CPU under LD_PRELOAD, and
// where it goes (docs/preload.md, "What a call costs"): the CUDA runtime calls
// that the interposer makes around the engine on every cudaMallocAsync and
// cudaFreeAsync, each timed alone, and the whole pair three ways:
//   BM_AsyncPair          cudaMallocAsync + cudaFreeAsync through the runtime's
//                         symbols: CUDA's own pool when run bare, fragfree's
//                         interposer under LD_PRELOAD=libfragfree.so
//   BM_AsyncPairDefaultStream  the same on the legacy default stream (PyTorch's
//                         current stream unless the program sets one)
//   BM_EnginePair         fragfree_malloc + fragfree_free (the pluggable
//                         allocator's entry points: the engine without the
//                         interposer), found in the preloaded library; skipped
//                         when run bare
//   BM_StreamIsCapturing, BM_CaptureModeExchange (a swap and its restore),
//   BM_GetDevice          one runtime call each
//   BM_DriverStreamIsCapturing, BM_DriverCtxGetDevice  the driver's
//                         cuStreamIsCapturing (same stream) and cuCtxGetDevice
//                         (libcuda.so.1 as the runtime loaded it): what the
//                         runtime's calls add to the driver's
// BM_AsyncPair under LD_PRELOAD minus BM_EnginePair is the interposer's cost.
// Sizes cycle over 4 KiB-64 MiB (as bench/gpu/alloc_overhead.py's "pair"), on
// a stream created here. Needs a CUDA device; cudart is linked shared, so that
// LD_PRELOAD interposes it.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "benchmark/benchmark.h"

namespace {

constexpr size_t kSizes[8] = {4096,     65536,    1 << 20, 3 << 20,
                              16 << 20, 64 << 20, 12288,   786432};

void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    exit(1);
  }
}

cudaStream_t Stream() {
  static cudaStream_t stream = [] {
    cudaStream_t s;
    Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags");
    return s;
  }();
  return stream;
}

void AsyncPairs(benchmark::State& state, cudaStream_t s) {
  size_t i = 0;
  for (auto _ : state) {
    void* p = nullptr;
    Check(cudaMallocAsync(&p, kSizes[i++ & 7], s), "cudaMallocAsync");
    Check(cudaFreeAsync(p, s), "cudaFreeAsync");
  }
  Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void BM_AsyncPair(benchmark::State& state) { AsyncPairs(state, Stream()); }
BENCHMARK(BM_AsyncPair);

void BM_AsyncPairDefaultStream(benchmark::State& state) {
  AsyncPairs(state, nullptr);
}
BENCHMARK(BM_AsyncPairDefaultStream);

using MallocFn = void* (*)(size_t, int, void*);
using FreeFn = void (*)(void*, size_t, int, void*);

void BM_EnginePair(benchmark::State& state) {
  auto engine_malloc =
      reinterpret_cast<MallocFn>(dlsym(RTLD_DEFAULT, "fragfree_malloc"));
  auto engine_free =
      reinterpret_cast<FreeFn>(dlsym(RTLD_DEFAULT, "fragfree_free"));
  if (engine_malloc == nullptr || engine_free == nullptr) {
    state.SkipWithError("no fragfree_malloc: run under LD_PRELOAD");
    return;
  }
  cudaStream_t s = Stream();
  int device = 0;
  Check(cudaGetDevice(&device), "cudaGetDevice");
  size_t i = 0;
  for (auto _ : state) {
    const size_t size = kSizes[i++ & 7];
    void* p = engine_malloc(size, device, s);
    if (p == nullptr) {
      state.SkipWithError("fragfree_malloc failed");
      return;
    }
    engine_free(p, size, device, s);
  }
}
BENCHMARK(BM_EnginePair);

void BM_StreamIsCapturing(benchmark::State& state) {
  cudaStream_t s = Stream();
  for (auto _ : state) {
    cudaStreamCaptureStatus status;
    Check(cudaStreamIsCapturing(s, &status), "cudaStreamIsCapturing");
    benchmark::DoNotOptimize(status);
  }
}
BENCHMARK(BM_StreamIsCapturing);

// Times `call` on the driver's function `name` (libcuda.so.1 as the runtime
// loaded it: Stream() brings the runtime up first); `call(fn, &out)` returns
// the CUresult as an int and writes one int.
template <typename Fn, typename Call>
void DriverCalls(benchmark::State& state, const char* name, Call call) {
  Stream();
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto fn = reinterpret_cast<Fn>(cuda == nullptr ? nullptr : dlsym(cuda, name));
  if (fn == nullptr) {
    state.SkipWithError("libcuda.so.1 not loaded or a driver function missing");
    return;
  }
  for (auto _ : state) {
    int out = -1;
    if (call(fn, &out) != 0) {
      state.SkipWithError("the driver call failed");
      return;
    }
    benchmark::DoNotOptimize(out);
  }
}

void BM_DriverStreamIsCapturing(benchmark::State& state) {
  using IsCapturing = int (*)(cudaStream_t, int*);  // CUstreamCaptureStatus*
  DriverCalls<IsCapturing>(
      state, "cuStreamIsCapturing",
      [s = Stream()](IsCapturing fn, int* status) { return fn(s, status); });
}
BENCHMARK(BM_DriverStreamIsCapturing);

void BM_DriverCtxGetDevice(benchmark::State& state) {
  using CtxGetDevice = int (*)(int*);  // CUdevice*
  DriverCalls<CtxGetDevice>(
      state, "cuCtxGetDevice",
      [](CtxGetDevice fn, int* device) { return fn(device); });
}
BENCHMARK(BM_DriverCtxGetDevice);

void BM_CaptureModeExchange(benchmark::State& state) {
  for (auto _ : state) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    Check(cudaThreadExchangeStreamCaptureMode(&mode), "exchange");
    Check(cudaThreadExchangeStreamCaptureMode(&mode), "exchange back");
  }
}
BENCHMARK(BM_CaptureModeExchange);

void BM_GetDevice(benchmark::State& state) {
  for (auto _ : state) {
    int device;
    Check(cudaGetDevice(&device), "cudaGetDevice");
    benchmark::DoNotOptimize(device);
  }
}
BENCHMARK(BM_GetDevice);

}  // namespace

BENCHMARK_MAIN();
