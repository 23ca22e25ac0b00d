// Host test of the LD_PRELOAD interposer's address-range queries and CUDA IPC
// calls (docs/ipc.md): this program links the fake CUDA runtime and driver
// (fake_cudart.h, fake_cuda.h) and runs under LD_PRELOAD=libfragfree.so with
// FRAGFREE_CONF=backend:host (64 KiB pages), so its cu*/cuda* calls reach
// libfragfree.so first. Checked: range answers for pointers inside a block
// over several pages (direct calls, cuPointerGetAttributes, the
// cudaGetDriverEntryPoint and cuGetProcAddress routes), forwarding of foreign
// pointers, symbols and handles; two preloaded processes sharing a block
// through cudaIpcGet/Open/CloseMemHandle in both directions; the block kept
// while a consumer has it open after the producer's free, and given back
// after a consumer died without closing; stale, malformed and wrong-device
// handles, closing twice. Children are this program, exec'd (modes
// `consumer` and `producer`), so they are preloaded afresh.
// Thread-safety: the consumer opens one handle from four threads at once;
// everything else is single-threaded.
#include <dirent.h>
#include <dlfcn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fragfree/fragfree.h"
#include "tests/preload/fake_cuda.h"
#include "tests/preload/fake_cudart.h"
#include "tests/preload/prog_check.h"

#undef cuGetProcAddress

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still what NCCL,
// CUTLASS and CCCL call; it is tested as such.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

extern "C" {
cudaError_t cudaGetDriverEntryPoint_ptsz(
    const char* symbol, void** funcPtr, unsigned long long flags,
    cudaDriverEntryPointQueryResult* driverStatus);
}

namespace {

constexpr size_t kPage = 64 << 10;  // host_granularity_kb:64
constexpr size_t kSize = 3 * kPage + 1000;

template <typename T>
T Find(const char* name) {
  return reinterpret_cast<T>(dlsym(RTLD_DEFAULT, name));
}

int64_t Allocated() {
  ff_stats_t s;
  memset(&s, 0, sizeof(s));
  s.size = sizeof(s);
  CHECK_EQ(Find<decltype(&ff_get_stats)>("ff_get_stats")(0, &s), FF_OK);
  return s.allocated_bytes[0].current;
}

void Sweep() {
  CHECK_EQ(Find<decltype(&ff_ipc_sweep)>("ff_ipc_sweep")(-1), FF_OK);
}

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

// The block fragfree says `p` lies in.
void Range(void* p, uintptr_t* base, size_t* size) {
  void* b = nullptr;
  CHECK_EQ(Find<decltype(&ff_get_address_range)>("ff_get_address_range")(p, &b,
                                                                         size),
           FF_OK);
  *base = reinterpret_cast<uintptr_t>(b);
}

// A fragfree block over four pages that starts inside its first page (a
// smaller block sits before it).
void* SpanningBlock(void** before) {
  CHECK_EQ(cudaMalloc(before, kPage + kPage / 2), cudaSuccess);
  void* p = nullptr;
  CHECK_EQ(cudaMalloc(&p, kSize), cudaSuccess);
  CHECK((reinterpret_cast<uintptr_t>(p) % kPage) != 0);
  return p;
}

void Fill(void* p, size_t n, unsigned seed) {
  auto* b = static_cast<unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(i * seed);
}
bool Holds(const void* p, size_t n, unsigned seed) {
  auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != static_cast<unsigned char>(i * seed)) return false;
  }
  return true;
}

// ---- Address ranges --------------------------------------------------------

void CheckRanges() {
  void* before = nullptr;
  void* p = SpanningBlock(&before);
  uintptr_t base = 0;
  size_t size = 0;
  Range(p, &base, &size);
  CHECK_EQ(base, reinterpret_cast<uintptr_t>(p));
  CHECK(size >= kSize);
  const CUdeviceptr inner = CUdeviceptr(p) + 2 * kPage + 17;  // third page

  // Direct calls: the whole block, without asking the driver.
  const int driver_calls = fake_driver_calls("cuMemGetAddressRange_v2");
  CUdeviceptr b = 0;
  size_t s = 0;
  CHECK_EQ(cuMemGetAddressRange_v2(&b, &s, inner), CUDA_SUCCESS);
  CHECK_EQ(b, base);
  CHECK_EQ(s, size);
  CHECK_EQ(cuMemGetAddressRange_v2(nullptr, &s, CUdeviceptr(p) + size - 1),
           CUDA_SUCCESS);
  CHECK_EQ(s, size);
  CHECK_EQ(fake_driver_calls("cuMemGetAddressRange_v2"), driver_calls);
  b = 0;
  CHECK_EQ(
      cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, inner),
      CUDA_SUCCESS);
  CHECK_EQ(b, base);
  s = 0;
  CHECK_EQ(cuPointerGetAttribute(&s, CU_POINTER_ATTRIBUTE_RANGE_SIZE, inner),
           CUDA_SUCCESS);
  CHECK_EQ(s, size);
  CHECK_EQ(fake_driver_calls("cuPointerGetAttribute"), 0);
  // Other attributes are the driver's (the fake does not know this memory).
  unsigned int type = 7;
  CHECK_EQ(
      cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, inner),
      CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ(fake_driver_calls("cuPointerGetAttribute"), 1);
  // The plural: the driver answers, fragfree corrects the range entries.
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                  CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  b = 1;
  s = 1;
  type = 7;
  void* data[3] = {&type, &b, &s};
  CHECK_EQ(cuPointerGetAttributes(3, attrs, data, inner), CUDA_SUCCESS);
  CHECK_EQ(type, 0);
  CHECK_EQ(b, base);
  CHECK_EQ(s, size);
  CHECK_EQ(fake_driver_calls("cuPointerGetAttributes"), 1);
  void* some_null[3] = {&type, nullptr, &s};
  s = 0;
  CHECK_EQ(cuPointerGetAttributes(3, attrs, some_null, inner), CUDA_SUCCESS);
  CHECK_EQ(s, size);

  // Foreign memory and unknown pointers: the driver's answer, unchanged.
  const CUdeviceptr foreign = fake_driver_alloc(5000);
  CHECK_EQ(cuMemGetAddressRange_v2(&b, &s, foreign + 10), CUDA_SUCCESS);
  CHECK_EQ(b, foreign);
  CHECK_EQ(s, 5000);
  CHECK_EQ(
      cuPointerGetAttribute(&s, CU_POINTER_ATTRIBUTE_RANGE_SIZE, foreign + 1),
      CUDA_SUCCESS);
  CHECK_EQ(s, 5000);
  void* foreign_data[3] = {&type, &b, &s};
  CHECK_EQ(cuPointerGetAttributes(3, attrs, foreign_data, foreign + 4999),
           CUDA_SUCCESS);
  CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
  CHECK_EQ(b, foreign);
  CHECK_EQ(s, 5000);
  int on_stack = 0;
  CHECK_EQ(cuMemGetAddressRange_v2(&b, &s, CUdeviceptr(&on_stack)),
           CUDA_ERROR_NOT_FOUND);
  CHECK_EQ(cuMemGetAddressRange_v2(&b, &s, 0), CUDA_ERROR_NOT_FOUND);
  CHECK_EQ(
      cuPointerGetAttribute(nullptr, CU_POINTER_ATTRIBUTE_RANGE_SIZE, inner),
      CUDA_ERROR_INVALID_VALUE);

  // The runtime's entry-point route hands out fragfree's wrappers for these
  // names, the driver's own function for anything else.
  void* const driver = dlopen("libcuda.so.99", RTLD_LAZY | RTLD_NOLOAD);
  CHECK(driver != nullptr);
  void* const ours_range = dlsym(RTLD_DEFAULT, "cuMemGetAddressRange_v2");
  CHECK(ours_range != dlsym(driver, "cuMemGetAddressRange_v2"));
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
  CHECK_EQ(cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn,
                                   cudaEnableDefault, &st),
           cudaSuccess);
  CHECK_EQ(st, cudaDriverEntryPointSuccess);
  CHECK(fn == ours_range);
  using RangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  b = 0;
  CHECK_EQ(reinterpret_cast<RangeFn>(fn)(&b, &s, inner), CUDA_SUCCESS);
  CHECK_EQ(b, base);
  CHECK_EQ(s, size);
  CHECK_EQ(cudaGetDriverEntryPoint("cuDriverGetVersion", &fn, cudaEnableDefault,
                                   &st),
           cudaSuccess);
  CHECK(fn == dlsym(driver, "cuDriverGetVersion"));
  CHECK_EQ(cudaGetDriverEntryPoint_ptsz("cuPointerGetAttributes", &fn,
                                        cudaEnableDefault, &st),
           cudaSuccess);
  CHECK(fn == dlsym(RTLD_DEFAULT, "cuPointerGetAttributes"));
  CHECK_EQ(cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &fn, 12000,
                                            cudaEnableDefault, &st),
           cudaSuccess);
  CHECK(fn == dlsym(RTLD_DEFAULT, "cuPointerGetAttribute"));
  // The 32-bit cuMemGetAddressRange of CUDA < 3.2 is not wrapped (the fake
  // driver has none): the lookup's answer passes through.
  fn = nullptr;
  CHECK_EQ(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3000,
                                            cudaEnableDefault, &st),
           cudaSuccess);
  CHECK_EQ(st, cudaDriverEntryPointSymbolNotFound);
  CHECK(fn == nullptr);
  CHECK_EQ(
      cudaGetDriverEntryPoint("cuNoSuchFunction", &fn, cudaEnableDefault, &st),
      cudaSuccess);
  CHECK_EQ(st, cudaDriverEntryPointSymbolNotFound);
  CHECK(fn == nullptr);
  // cuGetProcAddress, handed out by the runtime, routes further lookups too.
  using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                                 CUdriverProcAddressQueryResult*);
  CHECK_EQ(
      cudaGetDriverEntryPoint("cuGetProcAddress", &fn, cudaEnableDefault, &st),
      cudaSuccess);
  CHECK(fn == dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"));
  auto get_proc = reinterpret_cast<GetProcV2>(fn);
  CUdriverProcAddressQueryResult cst = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CHECK_EQ(get_proc("cuMemGetAddressRange", &fn, 12000, 0, &cst), CUDA_SUCCESS);
  CHECK(fn == ours_range);
  CHECK_EQ(get_proc("cuDriverGetVersion", &fn, 12000, 0, &cst), CUDA_SUCCESS);
  CHECK(fn == dlsym(driver, "cuDriverGetVersion"));
  // The four-argument cuGetProcAddress of CUDA 11.
  using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto get_proc_v1 =
      reinterpret_cast<GetProcV1>(dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
  CHECK(get_proc_v1 != nullptr);
  CHECK_EQ(get_proc_v1("cuPointerGetAttribute", &fn, 11030, 0), CUDA_SUCCESS);
  CHECK(fn == dlsym(RTLD_DEFAULT, "cuPointerGetAttribute"));
  CHECK_EQ(get_proc_v1("cuGetProcAddress", &fn, 11030, 0), CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(get_proc_v1));

  // Freed: the driver answers again.
  CHECK_EQ(cudaFree(p), cudaSuccess);
  CHECK_EQ(cudaFree(before), cudaSuccess);
  CHECK_EQ(cuMemGetAddressRange_v2(&b, &s, inner), CUDA_ERROR_NOT_FOUND);
}

// ---- IPC between two processes --------------------------------------------

// Runs this program as `args` (mode first) with pipes to and from it.
struct Child {
  pid_t pid = -1;
  int to = -1;    // we write
  int from = -1;  // we read
};
Child Spawn(const char* mode, const char* arg = "") {
  int down[2], up[2];
  CHECK_EQ(pipe(down), 0);
  CHECK_EQ(pipe(up), 0);
  Child c;
  c.pid = fork();
  if (c.pid == 0) {
    dup2(down[0], 3);
    dup2(up[1], 4);
    execl("/proc/self/exe", "preload_ipc_host_prog", mode, arg, nullptr);
    _exit(127);
  }
  close(down[0]);
  close(up[1]);
  c.to = down[1];
  c.from = up[0];
  return c;
}
int Wait(const Child& c) {
  close(c.to);
  close(c.from);
  int status = 0;
  CHECK_EQ(waitpid(c.pid, &status, 0), c.pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}
void Send(int fd, const void* p, size_t n) {
  CHECK_EQ(write(fd, p, n), ssize_t(n));
}
void Recv(int fd, void* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = read(fd, static_cast<char*>(p) + done, n - done);
    if (r <= 0) break;
    done += size_t(r);
  }
  CHECK_EQ(done, n);
}
char RecvByte(int fd) {
  char c = 0;
  Recv(fd, &c, 1);
  return c;
}

// Child: opens the handle it reads, checks the bytes, then follows the
// parent's script: 'w' write the marker and close, 'x' exit without closing.
int Consumer() {
  cudaIpcMemHandle_t h;
  Recv(3, &h, sizeof(h));
  void* q = nullptr;
  CHECK_EQ(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess),
           cudaSuccess);
  // The block's first byte, whatever pointer inside it was exported.
  CHECK(q != nullptr && Holds(q, kSize, 7));
  void* again = nullptr;
  CHECK_EQ(cudaIpcOpenMemHandle(&again, h, 0), cudaSuccess);
  CHECK(again == q);
  CUdeviceptr b = 0;
  size_t s = 0;
  CHECK_EQ(cuMemGetAddressRange_v2(&b, &s, CUdeviceptr(q) + 2 * kPage + 5),
           CUDA_SUCCESS);
  CHECK_EQ(b, CUdeviceptr(q));
  CHECK(s >= kSize);
  // An interior pointer is not what the open returned.
  CHECK_EQ(cudaIpcCloseMemHandle(static_cast<char*>(q) + 1),
           cudaErrorInvalidValue);
  CHECK_EQ(cudaIpcCloseMemHandle(q), cudaSuccess);  // one reference left
  CHECK(Holds(q, kSize, 7));
  // Threads opening the same handle at once all get the one mapping (a
  // racing duplicate is unmapped again); each close drops one reference.
  std::vector<void*> got(4, nullptr);
  std::vector<std::thread> threads;
  for (void*& g : got) {
    threads.emplace_back(
        [&h, &g] { CHECK_EQ(cudaIpcOpenMemHandle(&g, h, 0), cudaSuccess); });
  }
  for (std::thread& t : threads) t.join();
  for (void* g : got) {
    CHECK(g == q);
    CHECK_EQ(cudaIpcCloseMemHandle(g), cudaSuccess);
  }
  CHECK(Holds(q, kSize, 7));  // the first open's reference is still held
  CHECK_EQ(fake_calls("cudaIpcOpenMemHandle"), 0);
  CHECK_EQ(fake_calls("cudaIpcCloseMemHandle"), 0);
  Send(4, "o", 1);
  const char cmd = RecvByte(3);
  if (cmd == 'x') _exit(check_failures == 0 ? 0 : 1);  // dies holding it open
  CHECK(Holds(q, kSize, 7));  // still there after the producer's free
  static_cast<unsigned char*>(q)[kSize - 1] = 0xAB;
  CHECK_EQ(cudaIpcCloseMemHandle(q), cudaSuccess);
  // Closed twice: fragfree no longer knows the pointer; the runtime answers.
  CHECK_EQ(cudaIpcCloseMemHandle(q), cudaErrorInvalidValue);
  CHECK_EQ(fake_calls("cudaIpcCloseMemHandle"), 1);
  Send(4, "c", 1);
  return check_failures == 0 ? 0 : 1;
}

// Child: exports a block to its parent (declaring it as ptracer, as
// kernel.yama.ptrace_scope=1 requires), waits for the parent's write, checks
// it and exits (its memory goes with it).
int Producer() {
  prctl(PR_SET_PTRACER, getppid(), 0, 0, 0);
  void* before = nullptr;
  void* p = SpanningBlock(&before);
  Fill(p, kSize, 3);
  cudaIpcMemHandle_t h;
  CHECK_EQ(cudaIpcGetMemHandle(&h, p), cudaSuccess);
  Send(4, &h, sizeof(h));
  CHECK_EQ(RecvByte(3), 'w');
  CHECK_EQ(static_cast<unsigned char*>(p)[10], 0xCD);
  return check_failures == 0 ? 0 : 1;
}

void CheckIpc() {
  const int64_t start = Allocated();
  void* before = nullptr;
  void* p = SpanningBlock(&before);
  Fill(p, kSize, 7);
  // A warm-up export, so that the lease table exists before fds are counted.
  {
    void* w = nullptr;
    CHECK_EQ(cudaMalloc(&w, 1000), cudaSuccess);
    cudaIpcMemHandle_t wh;
    CHECK_EQ(cudaIpcGetMemHandle(&wh, w), cudaSuccess);
    CHECK_EQ(cudaFree(w), cudaSuccess);
  }
  const int fds = OpenFds();
  const int64_t with_block = Allocated();

  cudaIpcMemHandle_t h, h2;
  // Any pointer inside the block stands for the whole block.
  CHECK_EQ(cudaIpcGetMemHandle(&h, static_cast<char*>(p) + 2 * kPage),
           cudaSuccess);
  CHECK_EQ(memcmp(h.reserved, "FFCUIPC1", 8), 0);
  CHECK_EQ(cudaIpcGetMemHandle(&h2, p), cudaSuccess);
  CHECK_EQ(memcmp(&h, &h2, sizeof(h)), 0);
  CHECK_EQ(fake_calls("cudaIpcGetMemHandle"), 0);

  // A consumer reads, the producer frees while it is open, the consumer
  // writes and closes: the block is kept until then, then given back.
  Child c = Spawn("consumer");
  Send(c.to, &h, sizeof(h));
  CHECK_EQ(RecvByte(c.from), 'o');
  CHECK_EQ(cudaFree(p), cudaSuccess);
  Sweep();
  CHECK_EQ(Allocated(), with_block);  // kept for the consumer
  const unsigned char* bytes = static_cast<unsigned char*>(p);
  Send(c.to, "w", 1);
  CHECK_EQ(RecvByte(c.from), 'c');
  CHECK_EQ(Wait(c), 0);
  CHECK_EQ(bytes[kSize - 1], 0xAB);  // the consumer's write (block kept)
  Sweep();
  CHECK(Allocated() < with_block);
  CHECK_EQ(OpenFds(), fds);  // the handle file went with the export

  // The export went with the free: the handle is stale now.
  void* q = nullptr;
  CHECK_EQ(cudaIpcOpenMemHandle(&q, h, 0), cudaErrorInvalidResourceHandle);
  CHECK_EQ(fake_calls("cudaIpcOpenMemHandle"), 0);

  // A consumer that dies without closing: its hold ends with it.
  p = nullptr;
  CHECK_EQ(cudaMalloc(&p, kSize), cudaSuccess);
  Fill(p, kSize, 7);
  const int64_t with_second = Allocated();
  CHECK_EQ(cudaIpcGetMemHandle(&h, p), cudaSuccess);
  c = Spawn("consumer");
  Send(c.to, &h, sizeof(h));
  CHECK_EQ(RecvByte(c.from), 'o');
  Send(c.to, "x", 1);
  CHECK_EQ(Wait(c), 0);
  CHECK_EQ(cudaFree(p), cudaSuccess);
  Sweep();
  CHECK(Allocated() < with_second);

  // Child -> parent: the parent opens a child's block and writes to it; once
  // the producer exited, its handle cannot be opened.
  c = Spawn("producer");
  Recv(c.from, &h, sizeof(h));
  q = nullptr;
  CHECK_EQ(cudaIpcOpenMemHandle(&q, h, 0), cudaSuccess);
  CHECK(q != nullptr && Holds(q, kSize, 3));
  static_cast<unsigned char*>(q)[10] = 0xCD;
  Send(c.to, "w", 1);
  CHECK_EQ(Wait(c), 0);
  CHECK_EQ(cudaIpcCloseMemHandle(q), cudaSuccess);
  CHECK_EQ(cudaIpcOpenMemHandle(&q, h, 0), cudaErrorInvalidResourceHandle);

  // Bad handles and pointers: clear errors, nothing forwarded or changed.
  void* live = nullptr;
  CHECK_EQ(cudaMalloc(&live, kSize), cudaSuccess);
  CHECK_EQ(cudaIpcGetMemHandle(&h, live), cudaSuccess);
  cudaIpcMemHandle_t bad = h;
  const int32_t other_device = 1;
  memcpy(bad.reserved + 32, &other_device, sizeof(other_device));
  CHECK_EQ(cudaIpcOpenMemHandle(&q, bad, 0), cudaErrorInvalidDevice);
  bad = h;
  memset(bad.reserved + 8, 0, 4);  // pid 0
  CHECK_EQ(cudaIpcOpenMemHandle(&q, bad, 0), cudaErrorInvalidValue);
  bad = h;
  bad.reserved[60] = 1;  // reserved bytes
  CHECK_EQ(cudaIpcOpenMemHandle(&q, bad, 0), cudaErrorInvalidValue);
  CHECK_EQ(cudaIpcOpenMemHandle(&q, h, 0x10), cudaErrorInvalidValue);
  // A fragfree pointer that was not opened cannot be closed.
  CHECK_EQ(cudaIpcCloseMemHandle(live), cudaErrorInvalidValue);
  CHECK_EQ(fake_calls("cudaIpcOpenMemHandle"), 0);
  CHECK_EQ(fake_calls("cudaIpcCloseMemHandle"), 0);
  CHECK_EQ(cudaFree(live), cudaSuccess);

  // The runtime's own memory and handles go to the runtime.
  void* foreign = fake_device_alloc(4096);
  cudaIpcMemHandle_t fh;
  CHECK_EQ(cudaIpcGetMemHandle(&fh, foreign), cudaSuccess);
  CHECK_EQ(fake_calls("cudaIpcGetMemHandle"), 1);
  void* fq = nullptr;
  CHECK_EQ(cudaIpcOpenMemHandle(&fq, fh, cudaIpcMemLazyEnablePeerAccess),
           cudaSuccess);
  CHECK(fq == foreign);
  CHECK_EQ(fake_calls("cudaIpcOpenMemHandle"), 1);
  CHECK_EQ(cudaIpcCloseMemHandle(fq), cudaSuccess);
  CHECK_EQ(fake_calls("cudaIpcCloseMemHandle"), 1);
  cudaIpcMemHandle_t junk;
  memset(&junk, 0x5A, sizeof(junk));
  CHECK_EQ(cudaIpcOpenMemHandle(&fq, junk, 0), cudaErrorInvalidValue);
  CHECK_EQ(fake_calls("cudaIpcOpenMemHandle"), 2);
  CHECK_EQ(cudaFree(foreign), cudaSuccess);

  CHECK_EQ(cudaFree(before), cudaSuccess);
  Sweep();
  CHECK_EQ(Allocated(), start);
  CHECK_EQ(Find<decltype(&ff_check_invariants)>("ff_check_invariants")(0),
           FF_OK);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  if (Find<void*>("ff_malloc") == nullptr) {
    fprintf(stderr, "run me under LD_PRELOAD=libfragfree.so\n");
    return 2;
  }
  // Expected errors are reported through fragfree's handler: keep stderr for
  // check_failures.
  Find<decltype(&ff_set_error_handler)>("ff_set_error_handler")(
      [](ff_status_t, const char*, void*) {}, nullptr);
  if (mode == "consumer") return Consumer();
  if (mode == "producer") return Producer();
  CheckRanges();
  CheckIpc();
  if (check_failures > 0) {
    fprintf(stderr, "%d failure(s)\n", check_failures.load());
    return 1;
  }
  printf("preload_ipc_host_test: all checks passed\n");
  return 0;
}
