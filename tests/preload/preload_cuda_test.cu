// GPU test of LD_PRELOAD mode (label gpu): run as
//   LD_PRELOAD=path/to/libfragfree.so preload_cuda_test
// It is linked with the shared CUDA runtime (-cudart shared), so its cuda*
// calls reach libfragfree.so first. Kernels on two (or more) non-blocking
// streams write and read cudaMalloc'd, cudaMallocAsync'd and pinned buffers;
// the checks catch memory handed out again while earlier work still uses it
// (stream-ordered frees, cross-stream frees, cudaFree's device-wide contract),
// foreign pointers (cuMemAlloc, the runtime's own cudaMalloc), pool statistics
// and trimming, OOM codes, graph capture with a concurrent allocating thread,
// threads, and a destroyed stream.
// Thread-safety: CheckThreads and CheckCapture start threads; each uses its
// own stream.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fragfree/fragfree.h"

namespace {

std::atomic<int> failures{0};

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)
#define CUDA_OK(call)                                               \
  do {                                                              \
    cudaError_t err_ = (call);                                      \
    if (err_ != cudaSuccess) {                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
              cudaGetErrorString(err_));                            \
      ++failures;                                                   \
    }                                                               \
  } while (0)

constexpr size_t kN = size_t{4} << 20;   // floats: 16 MiB buffers
constexpr long long kSpin = 50'000'000;  // clock cycles: ~25 ms on an H200
constexpr int kBlocks = 132;
constexpr int kThreads = 256;

__global__ void Fill(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] = v;
  }
}

// Writes v into a, spins, then copies a into out: if another kernel reuses
// a's memory meanwhile, out shows it.
__global__ void WriteSpinCopy(float* a, float* out, size_t n, float v,
                              long long spin) {
  const size_t first = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = first; i < n; i += stride) a[i] = v;
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  for (size_t i = first; i < n; i += stride) out[i] = a[i];
}

__global__ void Scale(float* p, size_t n, float k) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] *= k;
  }
}

struct Fragfree {
  decltype(&ff_allocation_size) allocation_size;
  decltype(&ff_get_stats) get_stats;
  decltype(&ff_check_invariants) check_invariants;
};
Fragfree ff;

bool Owned(const void* p, int device = 0) {
  return ff.allocation_size(p, device) > 0;
}

// Every element of the device buffer equals v.
bool AllEqual(const float* device_buffer, size_t n, float v) {
  std::vector<float> host(n);
  if (cudaMemcpy(host.data(), device_buffer, n * sizeof(float),
                 cudaMemcpyDeviceToHost) != cudaSuccess) {
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (host[i] != v) {
      fprintf(stderr, "element %zu is %g, want %g\n", i, host[i], v);
      return false;
    }
  }
  return true;
}

// A block freed in stream order on s1 must not serve s2 while s1 still uses
// it; likewise a block freed on another stream that waited for s1.
void CheckStreamOrderedFree(cudaStream_t s1, cudaStream_t s2, cudaStream_t s3,
                            float* out) {
  for (int round = 0; round < 3; ++round) {
    float* a = nullptr;
    CUDA_OK(cudaMallocAsync(&a, kN * sizeof(float), s1));
    CHECK(Owned(a));
    WriteSpinCopy<<<kBlocks, kThreads, 0, s1>>>(a, out, kN, 1.0f, kSpin);
    CUDA_OK(cudaFreeAsync(a, s1));
    float* b = nullptr;
    CUDA_OK(cudaMallocAsync(&b, kN * sizeof(float), s2));
    Fill<<<kBlocks, kThreads, 0, s2>>>(b, kN, 2.0f);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(AllEqual(out, kN, 1.0f));
    CUDA_OK(cudaFreeAsync(b, s2));

    // Cross-stream: freed on s2 after s2 waited for s1's work.
    CUDA_OK(cudaMallocAsync(&a, kN * sizeof(float), s1));
    WriteSpinCopy<<<kBlocks, kThreads, 0, s1>>>(a, out, kN, 3.0f, kSpin);
    cudaEvent_t done;
    CUDA_OK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_OK(cudaEventRecord(done, s1));
    CUDA_OK(cudaStreamWaitEvent(s2, done, 0));
    CUDA_OK(cudaFreeAsync(a, s2));
    CUDA_OK(cudaMallocAsync(&b, kN * sizeof(float), s3));
    Fill<<<kBlocks, kThreads, 0, s3>>>(b, kN, 4.0f);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(AllEqual(out, kN, 3.0f));
    CUDA_OK(cudaFreeAsync(b, s3));
    CUDA_OK(cudaEventDestroy(done));
  }
}

// cudaFree has no stream: nothing issued before it, on a stream fragfree has
// seen or on the legacy default stream, may see the memory reused.
void CheckCudaFreeContract(cudaStream_t seen, cudaStream_t other, float* out) {
  for (cudaStream_t user : {seen, static_cast<cudaStream_t>(nullptr)}) {
    float* a = nullptr;
    CUDA_OK(cudaMalloc(&a, kN * sizeof(float)));
    CHECK(Owned(a));
    WriteSpinCopy<<<kBlocks, kThreads, 0, user>>>(a, out, kN, 5.0f, kSpin);
    CUDA_OK(cudaFree(a));
    float* b = nullptr;
    CUDA_OK(cudaMalloc(&b, kN * sizeof(float)));
    Fill<<<kBlocks, kThreads, 0, other>>>(b, kN, 6.0f);
    CUDA_OK(cudaDeviceSynchronize());
    CHECK(AllEqual(out, kN, 5.0f));
    CHECK(AllEqual(b, kN, 6.0f));
    CUDA_OK(cudaFree(b));
  }
}

void CheckPinned(cudaStream_t s) {
  float* h = nullptr;
  float* h2 = nullptr;
  float* d = nullptr;
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&h), kN * sizeof(float),
                        cudaHostAllocDefault));
  CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&h2), kN * sizeof(float)));
  CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&d), kN * sizeof(float), s));
  for (size_t i = 0; i < kN; ++i) h[i] = float(i % 1000);
  CUDA_OK(cudaMemcpyAsync(d, h, kN * sizeof(float), cudaMemcpyHostToDevice, s));
  Scale<<<kBlocks, kThreads, 0, s>>>(d, kN, 2.0f);
  CUDA_OK(
      cudaMemcpyAsync(h2, d, kN * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamSynchronize(s));
  bool ok = true;
  for (size_t i = 0; i < kN && ok; ++i) ok = h2[i] == 2.0f * float(i % 1000);
  CHECK(ok);
  CUDA_OK(cudaFreeAsync(d, s));
  CUDA_OK(cudaFreeHost(h));
  CUDA_OK(cudaFreeHost(h2));
}

void CheckForeign(cudaStream_t s) {
  // The driver's cuMemAlloc, without linking libcuda.
  using MemAllocFn = CUresult (*)(CUdeviceptr*, size_t);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found;
  CUDA_OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000,
                                           cudaEnableDefault, &found));
  if (fn != nullptr) {
    CUdeviceptr dptr = 0;
    CHECK(reinterpret_cast<MemAllocFn>(fn)(&dptr, 1 << 20) == CUDA_SUCCESS);
    void* p = reinterpret_cast<void*>(dptr);
    CHECK(!Owned(p));
    Fill<<<kBlocks, kThreads, 0, s>>>(static_cast<float*>(p), 1 << 18, 7.0f);
    CUDA_OK(cudaStreamSynchronize(s));
    CUDA_OK(cudaFree(p));  // forwarded to the runtime
  }
  // The runtime's own cudaMalloc and cudaMallocAsync.
  void* cudart = dlopen("libcudart.so.13", RTLD_LAZY | RTLD_NOLOAD);
  if (cudart == nullptr)
    cudart = dlopen("libcudart.so", RTLD_LAZY | RTLD_NOLOAD);
  CHECK(cudart != nullptr);
  if (cudart == nullptr) return;
  using MallocFn = cudaError_t (*)(void**, size_t);
  using MallocAsyncFn = cudaError_t (*)(void**, size_t, cudaStream_t);
  auto real_malloc = reinterpret_cast<MallocFn>(dlsym(cudart, "cudaMalloc"));
  auto real_malloc_async =
      reinterpret_cast<MallocAsyncFn>(dlsym(cudart, "cudaMallocAsync"));
  CHECK(real_malloc != nullptr && real_malloc_async != nullptr);
  if (real_malloc == nullptr || real_malloc_async == nullptr) return;
  void* p = nullptr;
  CUDA_OK(real_malloc(&p, 1 << 20));
  CHECK(!Owned(p));
  CUDA_OK(cudaFree(p));
  CUDA_OK(real_malloc_async(&p, 1 << 20, s));
  CHECK(!Owned(p));
  CUDA_OK(cudaFreeAsync(p, s));
  CUDA_OK(cudaStreamSynchronize(s));
}

uint64_t PoolAttr(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  uint64_t v = 0;
  CUDA_OK(cudaMemPoolGetAttribute(pool, attr, &v));
  return v;
}

// torch.cuda.memory_stats() and empty_cache() under backend:cudaMallocAsync.
void CheckPoolStats(cudaStream_t s) {
  cudaMemPool_t pool;
  CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  const uint64_t used0 = PoolAttr(pool, cudaMemPoolAttrUsedMemCurrent);
  void* p = nullptr;
  CUDA_OK(cudaMallocAsync(&p, size_t{64} << 20, s));
  CHECK(Owned(p));
  const uint64_t used1 = PoolAttr(pool, cudaMemPoolAttrUsedMemCurrent);
  const uint64_t reserved1 = PoolAttr(pool, cudaMemPoolAttrReservedMemCurrent);
  CHECK(used1 >= used0 + (size_t{64} << 20));
  CHECK(reserved1 >= used1);
  CHECK(PoolAttr(pool, cudaMemPoolAttrUsedMemHigh) >= used1);
  CUDA_OK(cudaFreeAsync(p, s));
  CUDA_OK(cudaDeviceSynchronize());
  uint64_t zero = 0;
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  CUDA_OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  CHECK(PoolAttr(pool, cudaMemPoolAttrUsedMemHigh) < used1);
  CUDA_OK(cudaMemPoolTrimTo(pool, 0));
  CHECK(PoolAttr(pool, cudaMemPoolAttrReservedMemCurrent) < reserved1);
}

void CheckOom(cudaStream_t s) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, size_t{1} << 50) == cudaErrorMemoryAllocation);
  CHECK(cudaMallocAsync(&p, size_t{1} << 50, s) == cudaErrorMemoryAllocation);
  (void)cudaGetLastError();  // fragfree cannot set it; clear whatever is there
  // Still usable afterwards.
  CUDA_OK(cudaMallocAsync(&p, 1 << 20, s));
  CUDA_OK(cudaFreeAsync(p, s));
}

// Allocations in a capture belong to the graph (the runtime serves them); a
// thread allocating on another stream meanwhile must not break the capture.
void CheckCapture(cudaStream_t s, float* out) {
  cudaStream_t side;
  CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  float* g = nullptr;
  CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&g), kN * sizeof(float), s));
  CHECK(!Owned(g));
  Fill<<<kBlocks, kThreads, 0, s>>>(g, kN, 8.0f);
  CUDA_OK(
      cudaMemcpyAsync(out, g, kN * sizeof(float), cudaMemcpyDeviceToDevice, s));
  CUDA_OK(cudaFreeAsync(g, s));
  std::thread other([side] {
    for (int i = 0; i < 50; ++i) {
      void* p = nullptr;
      if (cudaMallocAsync(&p, size_t(i + 1) << 20, side) != cudaSuccess) {
        ++failures;
        return;
      }
      cudaFreeAsync(p, side);
    }
  });
  other.join();
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK(AllEqual(out, kN, 8.0f));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaStreamSynchronize(side));
  CUDA_OK(cudaStreamDestroy(side));
}

void CheckThreads() {
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &bad] {
      cudaStream_t s;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        ++bad;
        return;
      }
      for (int i = 0; i < 200; ++i) {
        const size_t n = (size_t(i % 17) + 1) << 14;
        float* p = nullptr;
        if (cudaMallocAsync(reinterpret_cast<void**>(&p), n * sizeof(float),
                            s) != cudaSuccess) {
          ++bad;
          break;
        }
        const float v = float(t * 1000 + i);
        Fill<<<8, 256, 0, s>>>(p, n, v);
        float last = 0;
        cudaMemcpyAsync(&last, p + n - 1, sizeof(float), cudaMemcpyDeviceToHost,
                        s);
        cudaStreamSynchronize(s);
        if (last != v) ++bad;
        if (i % 5 == 0) {
          cudaFree(p);
        } else {
          cudaFreeAsync(p, s);
        }
      }
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(bad.load() == 0);
}

// A thread whose first CUDA call is a stream-ordered allocation on the legacy
// default stream (PyTorch's current stream unless set): no context is current
// on it yet, so the interposer's device and capture queries go to the runtime
// (shim/preload_queries.cc), which sets one up; fragfree serves the block, and
// the next calls on that thread find the context.
void CheckFreshThread() {
  std::atomic<int> bad{0};
  std::thread fresh([&bad] {
    for (int i = 0; i < 3; ++i) {
      float* p = nullptr;
      if (cudaMallocAsync(reinterpret_cast<void**>(&p), kN * sizeof(float),
                          nullptr) != cudaSuccess ||
          !Owned(p)) {
        ++bad;
        return;
      }
      Fill<<<kBlocks, kThreads>>>(p, kN, float(i));
      if (!AllEqual(p, kN, float(i))) ++bad;
      if (cudaFreeAsync(p, nullptr) != cudaSuccess) ++bad;
    }
    if (cudaStreamSynchronize(nullptr) != cudaSuccess) ++bad;
  });
  fresh.join();
  CHECK(bad.load() == 0);
}

// A stream that allocated through fragfree is retired in the engine and then
// really destroyed, even with work in flight: memory freed on it in stream
// order is not handed to another stream before that work completes, a block
// still live on it stays usable, and create/allocate/destroy cycles keep
// fragfree's arenas bounded.
void CheckDestroyedStream(float* out) {
  ff_stats_t before;
  memset(&before, 0, sizeof(before));
  before.size = sizeof(before);
  CHECK(ff.get_stats(0, &before) == FF_OK);
  cudaStream_t s, other;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  float* a = nullptr;
  float* keep = nullptr;
  CUDA_OK(cudaMallocAsync(&a, kN * sizeof(float), s));
  CUDA_OK(cudaMallocAsync(&keep, kN * sizeof(float), s));
  Fill<<<kBlocks, kThreads, 0, s>>>(keep, kN, 7.0f);
  WriteSpinCopy<<<kBlocks, kThreads, 0, s>>>(a, out, kN, 5.0f, kSpin);
  CUDA_OK(cudaFreeAsync(a, s));
  CUDA_OK(cudaStreamDestroy(s));  // while WriteSpinCopy runs
  float* b = nullptr;
  CUDA_OK(cudaMallocAsync(&b, kN * sizeof(float), other));
  Fill<<<kBlocks, kThreads, 0, other>>>(b, kN, 6.0f);
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(AllEqual(out, kN, 5.0f));
  CHECK(AllEqual(keep, kN, 7.0f));
  CUDA_OK(cudaFree(keep));
  CUDA_OK(cudaFreeAsync(b, other));
  for (int i = 0; i < 200; ++i) {
    cudaStream_t x;
    CUDA_OK(cudaStreamCreate(&x));
    CUDA_OK(cudaMallocAsync(&a, 1 << 20, x));
    CUDA_OK(cudaFreeAsync(a, x));
    CUDA_OK(cudaStreamDestroy(x));
  }
  CUDA_OK(cudaStreamDestroy(other));
  CUDA_OK(cudaMalloc(&a, 1 << 20));  // the pending frees complete
  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaDeviceSynchronize());
  ff_stats_t after;
  memset(&after, 0, sizeof(after));
  after.size = sizeof(after);
  CHECK(ff.get_stats(0, &after) == FF_OK);
  CHECK(after.num_arenas <= before.num_arenas + 1);
}

// Which check runs, for the crash handler and the log.
const char* current_check = "setup";
void Step(const char* name) {
  current_check = name;
  fprintf(stderr, "preload_cuda_test: %s\n", name);
}
void OnCrash(int sig) {
  fprintf(stderr, "preload_cuda_test: signal %d during %s\n", sig,
          current_check);
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
  _exit(128 + sig);
}

// Run without the preload (e.g. by a suite that runs every bin/*_test), the
// test re-executes itself with LD_PRELOAD=<dir>/../lib/libfragfree.so.
void ReexecPreloaded(char** argv) {
  if (getenv("FRAGFREE_PRELOAD_TEST_REEXEC") != nullptr) return;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return;
  self[n] = '\0';
  std::string dir(self);
  dir = dir.substr(0, dir.rfind('/'));
  const std::string lib = dir.substr(0, dir.rfind('/')) + "/lib/libfragfree.so";
  if (access(lib.c_str(), R_OK) != 0) return;
  const char* old = getenv("LD_PRELOAD");
  const std::string preload =
      old != nullptr && old[0] != '\0' ? lib + ":" + old : lib;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  setenv("FRAGFREE_PRELOAD_TEST_REEXEC", "1", 1);
  fprintf(stderr, "preload_cuda_test: re-running with LD_PRELOAD=%s\n",
          lib.c_str());
  execv(self, argv);
}

}  // namespace

int main(int, char** argv) {
  if (dlsym(RTLD_DEFAULT, "ff_allocation_size") == nullptr) {
    ReexecPreloaded(argv);
  }
  signal(SIGSEGV, OnCrash);
  signal(SIGBUS, OnCrash);
  signal(SIGABRT, OnCrash);
  ff.allocation_size = reinterpret_cast<decltype(ff.allocation_size)>(
      dlsym(RTLD_DEFAULT, "ff_allocation_size"));
  ff.get_stats = reinterpret_cast<decltype(ff.get_stats)>(
      dlsym(RTLD_DEFAULT, "ff_get_stats"));
  ff.check_invariants = reinterpret_cast<decltype(ff.check_invariants)>(
      dlsym(RTLD_DEFAULT, "ff_check_invariants"));
  if (ff.allocation_size == nullptr) {
    fprintf(stderr, "run me with LD_PRELOAD=libfragfree.so\n");
    return 1;
  }
  if (cudaError_t err = cudaSetDevice(0); err != cudaSuccess) {
    fprintf(stderr, "preload_cuda_test needs a CUDA device: %s\n",
            cudaGetErrorString(err));
    return 1;
  }
  cudaStream_t s1, s2, s3;
  CUDA_OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking));
  float* out = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&out), kN * sizeof(float)));
  CHECK(Owned(out));

  Step("stream-ordered free");
  CheckStreamOrderedFree(s1, s2, s3, out);
  Step("cudaFree contract");
  CheckCudaFreeContract(s1, s2, out);
  Step("pinned");
  CheckPinned(s1);
  Step("foreign pointers");
  CheckForeign(s2);
  Step("pool statistics");
  CheckPoolStats(s1);
  Step("out of memory");
  CheckOom(s1);
  Step("graph capture");
  CheckCapture(s1, out);
  Step("threads");
  CheckThreads();
  Step("fresh thread");
  CheckFreshThread();
  Step("destroyed stream");
  CheckDestroyedStream(out);
  Step("final state");

  CUDA_OK(cudaFree(out));
  CUDA_OK(cudaDeviceSynchronize());
  ff_stats_t stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  CHECK(ff.get_stats(0, &stats) == FF_OK);
  CHECK(stats.allocated_bytes[0].current == 0);
  CHECK(ff.check_invariants(0) == FF_OK);
  for (cudaStream_t s : {s1, s2, s3}) CUDA_OK(cudaStreamDestroy(s));
  if (failures > 0) {
    fprintf(stderr, "preload_cuda_test: %d check(s) failed\n", failures.load());
    return 1;
  }
  printf("preload_cuda_test: all checks passed\n");
  return 0;
}
