// CUDA IPC between two plain (non-torch) CUDA programs, and the address
// ranges the driver reports, on a GPU (docs/ipc.md). Run it bare (CUDA's own
// cudaMalloc IPC: the baseline) and under LD_PRELOAD=libfragfree.so (fragfree's
// interposed cudaIpc* and range queries):
//
//   nvcc -O2 -arch=sm_90 -o ipc_pair bench/gpu/ipc_pair.cu -lcuda
//   LD_PRELOAD=/path/libfragfree.so ./ipc_pair [stress_iterations (200)]
//
// The program re-executes itself as the other process (fork + exec, so the
// child is preloaded afresh). Checks, one "PASS name" or "FAIL name: why" line
// each, then "ipc_pair: N passed, M failed":
//   ranges        cuMemGetAddressRange_v2 / cuPointerGetAttribute(RANGE_*) /
//                 cuPointerGetAttributes, directly and through
//                 cudaGetDriverEntryPoint, for a pointer in the 4th 2 MiB page
//                 of a 10 MiB cudaMalloc block: the whole block
//   parent->child the child opens an interior pointer's handle, reads the
//                 parent's bytes from the block's first byte, writes; the
//                 parent sees the write; the child's ranges cover the block
//   child->parent the same the other way (the child declares the parent as
//                 its ptracer for kernel.yama.ptrace_scope=1)
//   errors        closing twice, an interior pointer, a stale handle after the
//                 producer freed the block and the consumer closed it
//   stress        both processes allocate and free random sizes while the
//                 parent shares a fresh block every iteration; the child
//                 checks and writes every one
// Thread-safety: single-threaded per process.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSize = 10 * kMiB;
int passed = 0, failed = 0;

void Report(const char* name, bool ok, const std::string& why) {
  if (ok) {
    printf("PASS %s\n", name);
    ++passed;
  } else {
    printf("FAIL %s: %s\n", name, why.c_str());
    ++failed;
  }
  fflush(stdout);
}

__global__ void FillKernel(unsigned int* p, size_t n, unsigned int seed) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    p[i] = unsigned(i) * 2654435761u + seed;
  }
}
__global__ void CheckKernel(const unsigned int* p, size_t n, unsigned int seed,
                            unsigned long long* bad) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if (p[i] != unsigned(i) * 2654435761u + seed) atomicAdd(bad, 1ull);
  }
}

void Fill(void* p, size_t bytes, unsigned seed) {
  FillKernel<<<256, 256>>>(static_cast<unsigned*>(p), bytes / 4, seed);
  cudaDeviceSynchronize();
}
// Mismatching words (or ~0 when the kernel failed).
unsigned long long Mismatches(const void* p, size_t bytes, unsigned seed) {
  static unsigned long long* bad = nullptr;
  if (bad == nullptr && cudaMallocManaged(&bad, sizeof(*bad)) != cudaSuccess) {
    return ~0ull;
  }
  *bad = 0;
  CheckKernel<<<256, 256>>>(static_cast<const unsigned*>(p), bytes / 4, seed,
                            bad);
  if (cudaDeviceSynchronize() != cudaSuccess) return ~0ull;
  return *bad;
}

std::string Err(cudaError_t e) { return cudaGetErrorString(e); }

// Whether every range query for `inner` answers [base, base + at_least...).
bool RangesCover(CUdeviceptr base, size_t at_least, CUdeviceptr inner,
                 std::string* why) {
  char buf[256];
  CUdeviceptr b = 0;
  size_t s = 0;
  CUresult r = cuMemGetAddressRange_v2(&b, &s, inner);
  if (r != CUDA_SUCCESS || b != base || s < at_least) {
    snprintf(buf, sizeof(buf),
             "cuMemGetAddressRange: r=%d base%+lld size %zu (want base+0, "
             ">= %zu)",
             int(r), (long long)(b - base), s, at_least);
    *why = buf;
    return false;
  }
  CUdeviceptr start = 0;
  size_t size = 0;
  if (cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                            inner) != CUDA_SUCCESS ||
      cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, inner) !=
          CUDA_SUCCESS ||
      start != base || size < at_least) {
    snprintf(buf, sizeof(buf), "cuPointerGetAttribute: base%+lld size %zu",
             (long long)(start - base), size);
    *why = buf;
    return false;
  }
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  start = 0;
  size = 0;
  void* data[2] = {&start, &size};
  if (cuPointerGetAttributes(2, attrs, data, inner) != CUDA_SUCCESS ||
      start != base || size < at_least) {
    snprintf(buf, sizeof(buf), "cuPointerGetAttributes: base%+lld size %zu",
             (long long)(start - base), size);
    *why = buf;
    return false;
  }
  // Through the runtime's entry-point lookup (how NCCL, CUTLASS and PyTorch
  // reach the driver).
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult st;
  if (cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn, cudaEnableDefault,
                              &st) != cudaSuccess ||
      fn == nullptr) {
    *why = "cudaGetDriverEntryPoint(cuMemGetAddressRange) failed";
    return false;
  }
  b = 0;
  s = 0;
  r = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr)>(fn)(
      &b, &s, inner);
  if (r != CUDA_SUCCESS || b != base || s < at_least) {
    snprintf(buf, sizeof(buf),
             "cuMemGetAddressRange via cudaGetDriverEntryPoint: base%+lld "
             "size %zu",
             (long long)(b - base), s);
    *why = buf;
    return false;
  }
  return true;
}

void Send(int fd, const void* p, size_t n) {
  if (write(fd, p, n) != ssize_t(n)) perror("write");
}
bool Recv(int fd, void* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = read(fd, static_cast<char*>(p) + done, n - done);
    if (r <= 0) return false;
    done += size_t(r);
  }
  return true;
}

struct Child {
  pid_t pid;
  int to, from;
};
Child Spawn(const char* self, const char* mode, int iterations) {
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) abort();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(down[0], 3);
    dup2(up[1], 4);
    const std::string n = std::to_string(iterations);
    execl(self, self, mode, n.c_str(), nullptr);
    _exit(127);
  }
  close(down[0]);
  close(up[1]);
  return {pid, down[1], up[0]};
}
int Wait(const Child& c) {
  close(c.to);
  close(c.from);
  int status = 0;
  waitpid(c.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

// ---- The child
// ---------------------------------------------------------------

int ChildConsumer(int iterations) {
  cudaIpcMemHandle_t h;
  if (!Recv(3, &h, sizeof(h))) return 2;
  void* q = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess);
  Report("child: open", e == cudaSuccess, Err(e));
  if (e != cudaSuccess) return 1;
  const unsigned long long bad = Mismatches(q, kSize, 1);
  Report("child: reads the parent's bytes from the block's first byte",
         bad == 0, std::to_string(bad) + " words differ");
  std::string why;
  Report(
      "child: ranges of the opened block cover it",
      RangesCover(CUdeviceptr(q), kSize, CUdeviceptr(q) + 7 * kMiB + 3, &why),
      why);
  Fill(q, kSize, 2);
  e = cudaIpcCloseMemHandle(static_cast<char*>(q) + 4096);
  Report("child: closing an interior pointer is refused", e != cudaSuccess,
         "accepted");
  e = cudaIpcCloseMemHandle(q);
  Report("child: close", e == cudaSuccess, Err(e));
  e = cudaIpcCloseMemHandle(q);
  Report("child: closing twice is an error", e != cudaSuccess, "accepted");
  cudaGetLastError();
  Send(4, "d", 1);
  // Stress: open, check, write, close a fresh block per iteration while
  // allocating and freeing memory of its own.
  std::mt19937 rng(7);
  std::vector<void*> mine;
  int stress_bad = 0;
  for (int i = 0; i < iterations; ++i) {
    uint64_t bytes = 0;
    if (!Recv(3, &h, sizeof(h)) || !Recv(3, &bytes, sizeof(bytes))) return 2;
    void* m = nullptr;
    if (cudaMalloc(&m, (1 + rng() % 24) * kMiB + rng() % 4096) == cudaSuccess) {
      mine.push_back(m);
    }
    if (mine.size() > 8) {
      const size_t k = rng() % mine.size();
      cudaFree(mine[k]);
      mine.erase(mine.begin() + k);
    }
    if (cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) !=
        cudaSuccess) {
      ++stress_bad;
    } else {
      if (Mismatches(q, bytes, 100 + i) != 0) ++stress_bad;
      Fill(q, bytes, 200 + i);
      if (cudaIpcCloseMemHandle(q) != cudaSuccess) ++stress_bad;
    }
    Send(4, "s", 1);
  }
  for (void* m : mine) cudaFree(m);
  if (iterations > 0) {
    Report("child: stress (open/check/write/close while allocating)",
           stress_bad == 0, std::to_string(stress_bad) + " iterations failed");
  }
  return failed == 0 ? 0 : 1;
}

int ChildProducer() {
  prctl(PR_SET_PTRACER, getppid(), 0, 0, 0);
  void* p = nullptr;
  if (cudaMalloc(&p, kSize) != cudaSuccess) return 2;
  Fill(p, kSize, 3);
  cudaIpcMemHandle_t h;
  const cudaError_t e = cudaIpcGetMemHandle(&h, p);
  Report("child: export", e == cudaSuccess, Err(e));
  Send(4, &h, sizeof(h));
  char c = 0;
  if (!Recv(3, &c, 1)) return 2;
  const unsigned long long bad = Mismatches(p, kSize, 4);
  Report("child: sees the parent's write", bad == 0,
         std::to_string(bad) + " words differ");
  cudaFree(p);
  return failed == 0 ? 0 : 1;
}

// ---- The parent
// --------------------------------------------------------------

int Parent(const char* self, int iterations) {
  const bool preloaded = getenv("LD_PRELOAD") != nullptr &&
                         strstr(getenv("LD_PRELOAD"), "fragfree") != nullptr;
  printf("ipc_pair: %s\n",
         preloaded ? "LD_PRELOAD=libfragfree.so" : "CUDA's own cudaMalloc IPC");
  cudaFree(nullptr);
  void* before = nullptr;
  cudaMalloc(&before, 3 * kMiB);  // so the block starts inside a page
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, kSize);
  Report("parent: cudaMalloc 10 MiB", e == cudaSuccess, Err(e));
  if (e != cudaSuccess) return 1;
  Fill(p, kSize, 1);
  std::string why;
  Report(
      "ranges: a pointer in the 4th 2 MiB page reports the whole block",
      RangesCover(CUdeviceptr(p), kSize, CUdeviceptr(p) + 7 * kMiB + 5, &why),
      why);

  Child c = Spawn(self, "consumer", iterations);
  cudaIpcMemHandle_t h;
  e = cudaIpcGetMemHandle(&h, static_cast<char*>(p) + 5 * kMiB);
  Report("parent: export of an interior pointer", e == cudaSuccess, Err(e));
  Send(c.to, &h, sizeof(h));
  char ack = 0;
  Recv(c.from, &ack, 1);
  const unsigned long long bad = Mismatches(p, kSize, 2);
  Report("parent->child: the parent sees the child's write", bad == 0,
         std::to_string(bad) + " words differ");
  e = cudaFree(p);
  Report("parent: free after the child closed", e == cudaSuccess, Err(e));

  // Stress: a fresh block shared per iteration while both sides churn.
  std::mt19937 rng(11);
  std::vector<void*> live;
  size_t free_before = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  for (int i = 0; i < iterations; ++i) {
    const uint64_t bytes = ((1 + rng() % 16) * kMiB + rng() % 8192) & ~3ull;
    void* s = nullptr;
    if (cudaMalloc(&s, bytes) != cudaSuccess) break;
    Fill(s, bytes, 100 + i);
    cudaIpcGetMemHandle(&h, s);
    Send(c.to, &h, sizeof(h));
    Send(c.to, &bytes, sizeof(bytes));
    for (int k = 0; k < 3; ++k) {  // churn while the child works
      void* x = nullptr;
      if (cudaMalloc(&x, (1 + rng() % 8) * kMiB) == cudaSuccess) {
        live.push_back(x);
      }
      if (live.size() > 12) {
        cudaFree(live.front());
        live.erase(live.begin());
      }
    }
    Recv(c.from, &ack, 1);
    if (Mismatches(s, bytes, 200 + i) != 0) {
      Report("stress: parent sees the child's write", false,
             "iteration " + std::to_string(i));
    }
    cudaFree(s);
  }
  for (void* x : live) cudaFree(x);
  const int child_rc = Wait(c);
  Report("parent->child: child process", child_rc == 0,
         "exit " + std::to_string(child_rc));

  // child -> parent
  Child pc = Spawn(self, "producer", 0);
  cudaIpcMemHandle_t ch;
  Recv(pc.from, &ch, sizeof(ch));
  void* q = nullptr;
  e = cudaIpcOpenMemHandle(&q, ch, cudaIpcMemLazyEnablePeerAccess);
  Report("child->parent: open", e == cudaSuccess, Err(e));
  if (e == cudaSuccess) {
    const unsigned long long b2 = Mismatches(q, kSize, 3);
    Report("child->parent: the parent reads the child's bytes", b2 == 0,
           std::to_string(b2) + " words differ");
    Fill(q, kSize, 4);
    Send(pc.to, "w", 1);
    const int rc = Wait(pc);
    Report("child->parent: child process", rc == 0,
           "exit " + std::to_string(rc));
    e = cudaIpcCloseMemHandle(q);
    Report("child->parent: close after the producer exited", e == cudaSuccess,
           Err(e));
  } else {
    Wait(pc);
  }
  void* stale = nullptr;
  e = cudaIpcOpenMemHandle(&stale, ch, cudaIpcMemLazyEnablePeerAccess);
  Report("errors: a handle of an exited producer is refused", e != cudaSuccess,
         "opened");
  cudaGetLastError();
  cudaFree(before);
  cudaDeviceSynchronize();
  size_t free_after = 0;
  cudaMemGetInfo(&free_after, &total);
  printf("ipc_pair: device free memory before/after stress: %zu / %zu MiB\n",
         free_before / kMiB, free_after / kMiB);
  printf("ipc_pair: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Parent: ipc_pair [stress_iterations]; children: ipc_pair MODE N.
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "consumer") return ChildConsumer(argc > 2 ? atoi(argv[2]) : 0);
  if (mode == "producer") return ChildProducer();
  return Parent("/proc/self/exe", argc > 1 ? atoi(argv[1]) : 200);
}
