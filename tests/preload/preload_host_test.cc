// Host test of the LD_PRELOAD interposer: this program links the fake CUDA
// runtime (fake_cudart.h) and runs under LD_PRELOAD=libfragfree.so with
// FRAGFREE_CONF=backend:host, so every cuda* call it makes goes to
// libfragfree.so first. It checks what fragfree serves and what it forwards to
// the "runtime" (the fake counts calls), stream-ordered and cross-stream frees,
// graph-capture fallbacks, pool statistics, error codes, threads and fork.
// Modes (argv[1]): all (default), one (one cudaMalloc/cudaFree), none (no CUDA
// call), pinned (one cudaHostAlloc/cudaFreeHost), oom (cudaMalloc and
// cudaMallocAsync run out of memory, the latter twice for the same request),
// capi_oom LIB CONF (not preloaded: dlopen LIB, ff_init(CONF), an ff_malloc
// that runs out of memory). preload_host_test.sh runs it (as
// preload_host_prog) and checks the stderr and the report files of the short
// modes.
// Thread-safety: the test itself starts threads in CheckThreads/CheckFork.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fragfree/fragfree.h"
#include "tests/preload/fake_cudart.h"
#include "tests/preload/prog_check.h"

extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size,
                                 cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
}

namespace {

// fragfree's C API, found in the preloaded library (this program does not
// link it).
struct Fragfree {
  decltype(&ff_allocation_size) allocation_size;
  decltype(&ff_get_stats) get_stats;
  decltype(&ff_check_invariants) check_invariants;
  decltype(&ff_set_error_handler) set_error_handler;
};
Fragfree ff;

template <typename T>
T Find(const char* name) {
  return reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
}

bool Owned(const void* p) { return ff.allocation_size(p, 0) > 0; }

ff_stats_t Stats() {
  ff_stats_t s;
  memset(&s, 0, sizeof(s));
  s.size = sizeof(s);
  CHECK_EQ(ff.get_stats(0, &s), FF_OK);
  return s;
}

// cudaFree waits for the busy non-blocking streams fragfree knows (created
// through the runtime or passed to its allocation calls), never for blocking
// ones (the legacy stream covers them), capturing or destroyed ones. Since it
// forgets a destroyed stream, cudaStreamDestroy of a busy one it would wait
// for waits for it first.
void CheckFreeFences() {
  const int q0 = fake_calls("cudaStreamQuery");
  void* p = nullptr;
  CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK_EQ(fake_calls("cudaStreamQuery"), q0);  // no stream known yet
  cudaStream_t nb = nullptr, blocking = nullptr, prio = nullptr;
  CHECK_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  CHECK_EQ(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault),
           cudaSuccess);
  CHECK_EQ(cudaStreamCreateWithPriority(&prio, cudaStreamNonBlocking, -1),
           cudaSuccess);
  fake_set_busy(nb, 1);
  CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK_EQ(fake_calls("cudaStreamQuery"), q0 + 2);  // nb and prio
  CHECK(!Owned(p));
  fake_set_capturing(prio, 1);
  CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK_EQ(fake_calls("cudaStreamQuery"), q0 + 3);  // not the capturing one
  fake_set_capturing(prio, 0);
  const int sync0 = fake_calls("cudaStreamSynchronize");
  for (cudaStream_t s : {nb, blocking, prio}) {
    CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  }
  CHECK_EQ(fake_calls("cudaStreamQuery"), q0 + 5);  // nb and prio: busy?
  CHECK_EQ(fake_calls("cudaStreamSynchronize"), sync0 + 1);  // nb was
  CHECK_EQ(fake_calls("cudaStreamDestroy"), 3);
  CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK_EQ(fake_calls("cudaStreamQuery"), q0 + 5);  // destroyed: forgotten
  CHECK_EQ(fake_calls("cudaMalloc") + fake_calls("cudaFree"), 0);
}

void CheckDeviceMemory() {
  void* p = nullptr;
  CHECK_EQ(cudaMalloc(&p, 1 << 20), cudaSuccess);
  CHECK(p != nullptr && Owned(p));
  memset(p, 0x5a, 1 << 20);  // the host backend's memory is host memory
  CHECK_EQ(fake_calls("cudaMalloc"), 0);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK(!Owned(p));
  CHECK_EQ(fake_calls("cudaFree"), 0);

  // cudaFree(NULL) and size 0 go to the runtime.
  CHECK_EQ(cudaFree(nullptr), cudaSuccess);
  CHECK_EQ(fake_calls("cudaFree"), 1);
  void* z = &z;
  CHECK_EQ(cudaMalloc(&z, 0), cudaSuccess);
  CHECK_EQ(fake_calls("cudaMalloc"), 1);

  // A pointer fragfree did not allocate goes to the runtime.
  void* foreign = fake_device_alloc(4096);
  CHECK_EQ(cudaFree(foreign), cudaSuccess);
  CHECK_EQ(fake_calls("cudaFree"), 2);

  // Bad pointers: an interior pointer and a double free are not fragfree's,
  // so the runtime answers (cudaErrorInvalidValue).
  CHECK_EQ(cudaMalloc(&p, 8192), cudaSuccess);
  CHECK_EQ(cudaFree(static_cast<char*>(p) + 16), cudaErrorInvalidValue);
  CHECK(Owned(p));
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK_EQ(cudaFree(p), cudaErrorInvalidValue);

  // No device: cudaMalloc is the runtime's.
  fake_set_no_device(1);
  const int before = fake_calls("cudaMalloc");
  CHECK_EQ(cudaMalloc(&p, 4096), cudaSuccess);
  CHECK_EQ(fake_calls("cudaMalloc"), before + 1);
  CHECK(!Owned(p));
  fake_set_no_device(0);
  CHECK_EQ(cudaFree(p), cudaSuccess);  // forwarded: the fake's pointer
}

void CheckStreams() {
  cudaStream_t a = fake_stream_create(0), b = fake_stream_create(0);
  void* q = nullptr;
  CHECK_EQ(cudaMallocAsync(&q, 4096, a), cudaSuccess);
  CHECK(Owned(q));
  CHECK_EQ(cudaFreeAsync(q, b), cudaSuccess);  // cross-stream free
  CHECK(!Owned(q));
  CHECK_EQ(cudaMallocAsync(&q, 4096, a), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);
  CHECK_EQ(cudaMallocAsync(&q, 4096, nullptr), cudaSuccess);  // legacy
  CHECK(Owned(q));
  CHECK_EQ(cudaFree(q), cudaSuccess);  // a cudaMallocAsync block, cudaFree'd
  CHECK_EQ(cudaMallocAsync(&q, 4096, cudaStreamLegacy), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(q, nullptr), cudaSuccess);
  CHECK_EQ(cudaMallocAsync_ptsz(&q, 4096, nullptr), cudaSuccess);
  CHECK(Owned(q));
  CHECK_EQ(cudaFreeAsync_ptsz(q, nullptr), cudaSuccess);
  CHECK_EQ(fake_calls("cudaMallocAsync") + fake_calls("cudaFreeAsync") +
               fake_calls("cudaMallocAsync_ptsz") +
               fake_calls("cudaFreeAsync_ptsz"),
           0);

  // A cudaMalloc block freed in stream order.
  CHECK_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);
  CHECK(!Owned(q));

  // Freed on a stream of another device: fragfree waits for that stream, in
  // relaxed capture mode (a swap and its restore around the synchronize).
  cudaStream_t other = fake_stream_create(1);
  CHECK_EQ(cudaMallocAsync(&q, 4096, a), cudaSuccess);
  const int syncs = fake_calls("cudaStreamSynchronize");
  const int swaps = fake_calls("cudaThreadExchangeStreamCaptureMode");
  CHECK_EQ(cudaFreeAsync(q, other), cudaSuccess);
  CHECK_EQ(fake_calls("cudaStreamSynchronize"), syncs + 1);
  CHECK_EQ(fake_calls("cudaThreadExchangeStreamCaptureMode"), swaps + 2);
  CHECK(!Owned(q));

  // Allocations and frees the engine serves without a driver call (the host
  // backend never makes one) change no capture mode: the engine switches to
  // relaxed mode only before a driver call (allocator/phys/capture_relax.h).
  for (int i = 0; i < 16; ++i) {
    CHECK_EQ(cudaMallocAsync(&q, 4096 << (i % 4), a), cudaSuccess);
    CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);
  }
  CHECK_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);
  CHECK_EQ(fake_calls("cudaThreadExchangeStreamCaptureMode"), swaps + 2);

  // Not a stream: the runtime's error.
  CHECK_EQ(cudaMallocAsync(&q, 4096, reinterpret_cast<cudaStream_t>(0xdead0)),
           cudaErrorInvalidResourceHandle);

  // Graph capture: allocations go to the runtime (the graph owns them).
  fake_set_capturing(a, 1);
  void* g = nullptr;
  CHECK_EQ(cudaMallocAsync(&g, 4096, a), cudaSuccess);
  CHECK(!Owned(g));
  CHECK_EQ(fake_calls("cudaMallocAsync"), 1);
  CHECK_EQ(cudaFreeAsync(g, a), cudaSuccess);
  CHECK_EQ(fake_calls("cudaFreeAsync"), 1);
  // fragfree memory freed inside a capture is refused and stays allocated.
  void* r = nullptr;
  CHECK_EQ(cudaMallocAsync(&r, 4096, b), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(r, a), cudaErrorInvalidValue);
  CHECK(Owned(r));
  fake_set_capturing(a, 0);
  CHECK_EQ(cudaFreeAsync(r, a), cudaSuccess);
  // The legacy stream while another stream captures (implicit capture).
  fake_set_implicit_capture(1);
  CHECK_EQ(cudaMallocAsync(&g, 4096, nullptr), cudaSuccess);
  CHECK(!Owned(g));
  CHECK_EQ(fake_calls("cudaMallocAsync"), 2);
  fake_set_implicit_capture(0);
  CHECK_EQ(cudaFreeAsync(g, nullptr), cudaSuccess);

  // A stream fragfree allocated on is retired in the engine, then destroyed.
  const int destroyed = fake_calls("cudaStreamDestroy");
  CHECK_EQ(cudaStreamDestroy(b), cudaSuccess);
  CHECK_EQ(fake_calls("cudaStreamDestroy"), destroyed + 1);
  CHECK_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  CHECK_EQ(cudaFree(q), cudaSuccess);
  CHECK_EQ(Stats().allocated_bytes[0].current, 0);
}

// cudaStreamDestroy of a stream the engine allocated on retires it in the
// engine (its arenas are released once empty) and destroys it for real; a
// second destroy is the runtime's error. A create/allocate/destroy loop keeps
// the engine's arenas and streams bounded, and a block still live on a
// destroyed stream stays usable until it is freed.
void CheckStreamRetirement() {
  const ff_stats_t before = Stats();
  cudaStream_t s = nullptr;
  CHECK_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  void* p = nullptr;
  CHECK_EQ(cudaMallocAsync(&p, 4096, s), cudaSuccess);
  CHECK_EQ(cudaFreeAsync(p, s), cudaSuccess);
  CHECK_EQ(Stats().num_arenas, before.num_arenas + 1);
  const int destroyed = fake_calls("cudaStreamDestroy");
  CHECK_EQ(cudaStreamDestroy(s), cudaSuccess);
  CHECK_EQ(fake_calls("cudaStreamDestroy"), destroyed + 1);
  CHECK_EQ(Stats().num_arenas, before.num_arenas);
  CHECK_EQ(Stats().num_streams, before.num_streams);
  CHECK_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);

  // A block outlives its stream.
  cudaStream_t t = nullptr;
  CHECK_EQ(cudaStreamCreate(&t), cudaSuccess);
  CHECK_EQ(cudaMallocAsync(&p, 8192, t), cudaSuccess);
  memset(p, 0x5a, 8192);
  CHECK_EQ(cudaStreamDestroy(t), cudaSuccess);
  CHECK(Owned(p));
  CHECK_EQ(Stats().num_arenas, before.num_arenas + 1);
  CHECK_EQ(static_cast<unsigned char*>(p)[8191], 0x5a);
  // cudaFree makes it wait for events on the streams it fences; the next
  // allocation finds them complete and the arena empty.
  CHECK_EQ(cudaFree(p), cudaSuccess);
  void* q = nullptr;
  CHECK_EQ(cudaMalloc(&q, 4096), cudaSuccess);
  CHECK_EQ(cudaFree(q), cudaSuccess);
  CHECK_EQ(Stats().num_arenas, before.num_arenas);

  const int created = fake_calls("cudaStreamCreate");
  const int destroyed_before_loop = fake_calls("cudaStreamDestroy");
  for (int i = 0; i < 1000; ++i) {
    cudaStream_t x = nullptr;
    CHECK_EQ(cudaStreamCreate(&x), cudaSuccess);
    CHECK_EQ(cudaMallocAsync(&p, 4096, x), cudaSuccess);
    CHECK_EQ(cudaFreeAsync(p, x), cudaSuccess);
    CHECK_EQ(cudaStreamDestroy(x), cudaSuccess);
  }
  CHECK_EQ(fake_calls("cudaStreamCreate"), created + 1000);
  CHECK_EQ(fake_calls("cudaStreamDestroy"), destroyed_before_loop + 1000);
  const ff_stats_t after = Stats();
  CHECK_EQ(after.num_arenas, before.num_arenas);
  CHECK_EQ(after.num_streams, before.num_streams);
  CHECK_EQ(ff.check_invariants(0), FF_OK);
}

void CheckPools() {
  cudaStream_t a = fake_stream_create(0);
  cudaMemPool_t pool = nullptr;
  CHECK_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  void* q = nullptr;
  CHECK_EQ(cudaMallocAsync(&q, 3 << 20, a), cudaSuccess);
  const ff_stats_t s = Stats();
  CHECK(s.allocated_bytes[0].current >= (3 << 20));
  uint64_t v = 0;
  CHECK_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v),
           cudaSuccess);
  CHECK_EQ(v, FAKE_POOL_BYTES + s.allocated_bytes[0].current);
  CHECK_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v),
           cudaSuccess);
  CHECK_EQ(v, FAKE_POOL_BYTES + s.reserved_bytes[0].current);
  CHECK_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v),
           cudaSuccess);
  CHECK_EQ(v, FAKE_POOL_BYTES + s.allocated_bytes[0].peak);
  // Another pool is the runtime's alone.
  cudaMemPool_t mine = fake_pool_create();
  CHECK_EQ(cudaMemPoolGetAttribute(mine, cudaMemPoolAttrUsedMemCurrent, &v),
           cudaSuccess);
  CHECK_EQ(v, FAKE_POOL_BYTES);

  // Reset the highs (as torch.cuda.reset_peak_memory_stats does) after a free.
  CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);
  uint64_t zero = 0;
  CHECK_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero),
           cudaSuccess);
  CHECK_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v),
           cudaSuccess);
  CHECK_EQ(v, FAKE_POOL_BYTES);
  // empty_cache: trim to zero releases fragfree's free pages.
  CHECK(Stats().reserved_bytes[0].current > 0);
  CHECK_EQ(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
  CHECK_EQ(Stats().reserved_bytes[0].current, 0);
  CHECK_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v),
           cudaSuccess);
  CHECK_EQ(v, FAKE_POOL_BYTES);

  // Explicit pool allocations: the default pool is fragfree's.
  CHECK_EQ(cudaMallocFromPoolAsync(&q, 4096, pool, a), cudaSuccess);
  CHECK(Owned(q));
  CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);
  CHECK_EQ(cudaMallocFromPoolAsync(&q, 4096, mine, a), cudaSuccess);
  CHECK(!Owned(q));
  CHECK_EQ(fake_calls("cudaMallocFromPoolAsync"), 1);
  CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);

  // Another current pool: cudaMallocAsync allocates from it (the runtime).
  CHECK_EQ(cudaDeviceSetMemPool(0, mine), cudaSuccess);
  const int before = fake_calls("cudaMallocAsync");
  CHECK_EQ(cudaMallocAsync(&q, 4096, a), cudaSuccess);
  CHECK(!Owned(q));
  CHECK_EQ(fake_calls("cudaMallocAsync"), before + 1);
  CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);
  CHECK_EQ(cudaDeviceSetMemPool(0, pool), cudaSuccess);
  cudaMemPool_t current = nullptr;
  CHECK_EQ(cudaDeviceGetMemPool(&current, 0), cudaSuccess);
  CHECK(current == pool);
  CHECK_EQ(cudaMallocAsync(&q, 4096, a), cudaSuccess);
  CHECK(Owned(q));
  CHECK_EQ(cudaFreeAsync(q, a), cudaSuccess);
}

std::atomic<int> oom_reports{0};
void OnError(ff_status_t status, const char* /*message*/, void* /*arg*/) {
  if (status == FF_ERR_OOM) ++oom_reports;
}

void CheckOom() {
  ff.set_error_handler(OnError, nullptr);
  void* p = nullptr;
  // Larger than host_capacity_mb (the test runs with 64 MiB).
  CHECK_EQ(cudaMalloc(&p, size_t{1} << 30), cudaErrorMemoryAllocation);
  cudaStream_t a = fake_stream_create(0);
  CHECK_EQ(cudaMallocAsync(&p, size_t{1} << 30, a), cudaErrorMemoryAllocation);
  CHECK_EQ(oom_reports.load(), 2);
  ff.set_error_handler(nullptr, nullptr);
}

// Pinned host calls are served by fragfree's pinned pool (pinning emulated
// here): no runtime call, usable memory; a write-combined request is not the
// pool's and goes to the runtime.
void CheckPinned() {
  void* h1 = nullptr;
  void* h2 = nullptr;
  CHECK_EQ(cudaHostAlloc(&h1, 1 << 20, cudaHostAllocDefault), cudaSuccess);
  CHECK_EQ(cudaMallocHost(&h2, 4096), cudaSuccess);
  CHECK_EQ(fake_calls("cudaHostAlloc"), 0);
  CHECK_EQ(fake_calls("cudaMallocHost"), 0);
  if (h1 != nullptr && h2 != nullptr) {
    memset(h1, 0x11, 1 << 20);
    memset(h2, 0x22, 4096);
    CHECK_EQ(static_cast<unsigned char*>(h1)[(1 << 20) - 1], 0x11);
  }
  CHECK_EQ(cudaFreeHost(h1), cudaSuccess);
  CHECK_EQ(cudaFreeHost(h2), cudaSuccess);
  CHECK_EQ(fake_calls("cudaFreeHost"), 0);
  void* wc = nullptr;
  CHECK_EQ(cudaHostAlloc(&wc, 4096, cudaHostAllocWriteCombined), cudaSuccess);
  CHECK_EQ(fake_calls("cudaHostAlloc"), 1);
  CHECK_EQ(cudaFreeHost(wc), cudaSuccess);
  CHECK_EQ(fake_calls("cudaFreeHost"), 1);
}

// Threads allocate on their own streams and free on their own or a shared one.
void CheckThreads() {
  constexpr int kThreads = 8;
  cudaStream_t shared = fake_stream_create(0);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, shared, &errors] {
      cudaStream_t mine = fake_stream_create(0);
      std::mt19937 rng(t);
      std::vector<void*> live;
      for (int i = 0; i < 2000; ++i) {
        void* p = nullptr;
        const size_t size = 256 + rng() % (256 << 10);
        cudaError_t err = (i % 7 == 0) ? cudaMalloc(&p, size)
                                       : cudaMallocAsync(&p, size, mine);
        if (err != cudaSuccess || !Owned(p)) ++errors;
        live.push_back(p);
        if (live.size() > 8) {
          void* q = live[rng() % live.size()];
          std::erase(live, q);
          err = (i % 3 == 0) ? cudaFree(q)
                             : cudaFreeAsync(q, i % 2 ? mine : shared);
          if (err != cudaSuccess) ++errors;
        }
      }
      for (void* q : live) {
        if (cudaFreeAsync(q, mine) != cudaSuccess) ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK_EQ(errors.load(), 0);
  CHECK_EQ(Stats().allocated_bytes[0].current, 0);
  CHECK_EQ(ff.check_invariants(0), FF_OK);
}

// A fork child of a process that used fragfree forwards everything (the
// parent's device state is not usable there) and never deadlocks, even when
// other threads were inside fragfree at the fork.
void CheckFork() {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 4; ++t) {
    busy.emplace_back([&stop] {
      cudaStream_t s = fake_stream_create(0);
      while (!stop.load()) {
        void* p = nullptr;
        if (cudaMallocAsync(&p, 4096, s) == cudaSuccess) cudaFreeAsync(p, s);
        void* h = nullptr;
        if (cudaHostAlloc(&h, 64, 0) == cudaSuccess) cudaFreeHost(h);
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(20);  // a deadlock fails the test instead of hanging it
      const int before = fake_calls("cudaMalloc");
      void* p = nullptr;
      int rc = 0;
      if (cudaMalloc(&p, 4096) != cudaSuccess) rc = 1;
      // Forwarded: the runtime served it. (The engine is not asked: its locks
      // may have been held by a busy thread at the fork.)
      if (fake_calls("cudaMalloc") != before + 1) rc = 2;
      if (cudaFree(p) != cudaSuccess) rc = 3;
      void* h = nullptr;
      if (cudaHostAlloc(&h, 64, 0) != cudaSuccess || cudaFreeHost(h)) rc = 4;
      _exit(rc);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "fork child %d: status %d\n", i, status);
    }
  }
  stop.store(true);
  for (auto& th : busy) th.join();
}

// Mode oom: a request larger than the device through cudaMalloc, then
// cudaMallocAsync filling the device until it fails, and the same request
// again at once (as PyTorch's cudaMallocAsync backend retries). Each failure
// answers cudaErrorMemoryAllocation; the script checks the reports.
int OomMode() {
  void* p = nullptr;
  if (cudaMalloc(&p, size_t{1} << 30) != cudaErrorMemoryAllocation) return 1;
  cudaStream_t s = fake_stream_create(0);
  std::vector<void*> held;
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < 1000 && err == cudaSuccess; ++i) {
    err = cudaMallocAsync(&p, 3 << 20, s);
    if (err == cudaSuccess) held.push_back(p);
  }
  if (err != cudaErrorMemoryAllocation || held.empty()) return 2;
  if (cudaMallocAsync(&p, 3 << 20, s) != cudaErrorMemoryAllocation) return 3;
  for (void* q : held) {
    if (cudaFreeAsync(q, s) != cudaSuccess) return 4;
  }
  printf("oom mode: %zu blocks held, then out of memory\n", held.size());
  return 0;
}

// Mode capi_oom: the C API of a library loaded with dlopen (no LD_PRELOAD).
int CapiOomMode(const char* lib, const char* conf) {
  void* handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return 1;
  }
  auto init = reinterpret_cast<decltype(&ff_init)>(dlsym(handle, "ff_init"));
  auto malloc_fn =
      reinterpret_cast<decltype(&ff_malloc)>(dlsym(handle, "ff_malloc"));
  if (init == nullptr || malloc_fn == nullptr) return 2;
  if (init(conf) != FF_OK) return 3;
  if (malloc_fn(size_t{1} << 40, 0, nullptr) != nullptr) return 4;
  printf("capi_oom: ff_malloc failed as expected\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  if (mode == "none") {
    printf("no CUDA call\n");
    return 0;
  }
  if (mode == "one") {
    void* p = nullptr;
    if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) {
      return 1;
    }
    printf("one cudaMalloc/cudaFree pair\n");
    return 0;
  }
  if (mode == "oom") return OomMode();
  if (mode == "capi_oom") {
    if (argc < 4) {
      fprintf(stderr, "usage: %s capi_oom LIBFRAGFREE CONF\n", argv[0]);
      return 1;
    }
    return CapiOomMode(argv[2], argv[3]);
  }
  if (mode == "pinned") {
    void* h = nullptr;
    if (cudaHostAlloc(&h, 4096, 0) != cudaSuccess || cudaFreeHost(h)) return 1;
    printf("one pinned pair\n");
    return 0;
  }
  ff.allocation_size = Find<decltype(ff.allocation_size)>("ff_allocation_size");
  ff.get_stats = Find<decltype(ff.get_stats)>("ff_get_stats");
  ff.check_invariants =
      Find<decltype(ff.check_invariants)>("ff_check_invariants");
  ff.set_error_handler =
      Find<decltype(ff.set_error_handler)>("ff_set_error_handler");
  if (ff.allocation_size == nullptr || ff.get_stats == nullptr) {
    fprintf(stderr, "run me with LD_PRELOAD=libfragfree.so\n");
    return 1;
  }
  CheckFreeFences();
  CheckDeviceMemory();
  CheckStreams();
  CheckStreamRetirement();
  CheckPools();
  CheckOom();
  CheckPinned();
  CheckThreads();
  CheckFork();
  if (check_failures > 0) {
    fprintf(stderr, "%d check(s) failed\n", check_failures.load());
    return 1;
  }
  printf("preload_host_test: all checks passed\n");
  return 0;
}
