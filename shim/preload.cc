// The LD_PRELOAD mode's process plumbing (docs/preload.md): the library
// constructor (is this process preloaded? choose PyTorch's backend through
// PYTORCH_CUDA_ALLOC_CONF; in a Python process, install the bootstrap of
// preload_python.cc that puts the native adapter in place when torch is
// imported), the one-time notice of what fragfree sees under the
// user's setting, fork handlers, and the stats_at_exit summary (with the
// bucket advisor's line). The constructor makes no CUDA or driver call and
// parses nothing that can fail: loading the library into a process that never
// uses CUDA changes nothing but that variable (and, in Python, PYTHONPATH,
// which the bootstrap restores before the program runs).
// Thread-safety: the constructor runs before any thread exists and writes the
// configuration once; afterwards state is atomics. The fork handlers take the
// preload layer's locks around fork(). The exit handler reads engine state
// through the engine's own locks.
#include "shim/preload.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/base/config_tokens.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/units.h"
#include "allocator/obs/stats.h"
#include "allocator/options.h"
#include "shim/device_bucket_advice.h"
#include "shim/preload_python.h"
#include "shim/runtime.h"

namespace fragfree::preload {
namespace {

constexpr const char* kTorchConfVars[] = {
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"};
constexpr const char* kOurTorchConf = "backend:cudaMallocAsync";

// What the constructor found; written once before main, read-only after.
struct TorchConf {
  std::string var;    // the variable PyTorch will read ("" when we set it)
  std::string value;  // its value
  bool no_caching = false;  // PYTORCH_NO_CUDA_MEMORY_CACHING is true
};
TorchConf* torch_conf = nullptr;  // constant-initialised; set by the ctor

std::atomic<bool> active{false};
std::atomic<bool> fork_child_passthrough{false};
std::atomic<bool> engine_used{false};
std::atomic<bool> notice_done{false};
std::atomic<pid_t> owner_pid{0};

bool EnvTrue(const char* name) {
  const char* v = getenv(name);
  if (v == nullptr) return false;
  std::string s(v);
  for (char& c : s) c = char(tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true" || s == "yes" || s == "y" || s == "on";
}

// The two keys of a PyTorch allocator config that decide what fragfree sees:
// a top-level item `backend:cudaMallocAsync` or `expandable_segments:True`
// (the last item with the key wins), read from the tokens of the one
// configuration tokenizer (allocator/base/config_tokens.h).
struct TorchBackend {
  bool cuda_malloc_async = false;
  bool expandable_segments = false;
};
TorchBackend ParseTorchConf(std::string_view conf) {
  TorchBackend out;
  const std::vector<std::string> tokens = TokenizeConfig(conf);
  int depth = 0;
  size_t start = 0;  // the current top-level item: tokens [start, i)
  for (size_t i = 0; i <= tokens.size(); ++i) {
    const std::string_view t =
        i < tokens.size() ? std::string_view(tokens[i]) : ",";
    if (t == "[") ++depth;
    if (t == "]") --depth;
    if (t != "," || depth > 0) continue;
    const size_t n = i - start;
    const std::string* item = tokens.data() + start;
    start = i + 1;
    if (n < 2 || item[1] != ":") continue;  // not `key:...`
    // The value is one word, or nothing that either key accepts.
    const std::string_view value = n == 3 ? item[2] : std::string_view();
    if (item[0] == "backend")
      out.cuda_malloc_async = value == "cudaMallocAsync";
    if (item[0] == "expandable_segments") {
      out.expandable_segments = value == "True";
    }
  }
  return out;
}

// Decides PyTorch's allocator backend for this process and its children.
void ChooseTorchBackend() {
  torch_conf = new TorchConf();
  torch_conf->no_caching = EnvTrue("PYTORCH_NO_CUDA_MEMORY_CACHING");
  for (const char* var : kTorchConfVars) {
    const char* value = getenv(var);
    if (value != nullptr && value[0] != '\0') {
      torch_conf->var = var;
      torch_conf->value = value;
      return;
    }
  }
  // Unset (or set to ""): every tensor allocation then reaches fragfree as a
  // cudaMallocAsync with its stream. PyTorch reads the variable after this.
  setenv(kTorchConfVars[0], kOurTorchConf, /*overwrite=*/1);
}

void PrintTorchConfNotice() {
  if (torch_conf == nullptr) return;
  const TorchConf& c = *torch_conf;
  if (c.var.empty()) {
    if (c.no_caching) {
      fprintf(stderr,
              "fragfree: PYTORCH_NO_CUDA_MEMORY_CACHING has no effect with "
              "%s=%s (set by fragfree): fragfree serves and caches every "
              "tensor allocation with its stream\n",
              kTorchConfVars[0], kOurTorchConf);
    }
    return;
  }
  const TorchBackend b = ParseTorchConf(c.value);
  if (b.cuda_malloc_async) return;  // what fragfree would have chosen
  if (b.expandable_segments) {
    fprintf(stderr,
            "fragfree: %s=%s: PyTorch maps its own memory through the driver "
            "API (expandable segments), so fragfree sees no tensor "
            "allocation, only other libraries' cudaMalloc/cudaMallocAsync and "
            "the pinned host calls. Unset %s (fragfree then sets %s) to let "
            "fragfree serve every tensor.\n",
            c.var.c_str(), c.value.c_str(), c.var.c_str(), kOurTorchConf);
  } else if (c.no_caching) {
    fprintf(stderr,
            "fragfree: %s=%s with PYTORCH_NO_CUDA_MEMORY_CACHING: every tensor "
            "is a cudaMalloc/cudaFree that fragfree serves, without its "
            "stream: cudaFree waits for the legacy default stream and the "
            "streams fragfree has seen (docs/preload.md), and "
            "torch.cuda.memory_stats() stays empty. Unset %s (fragfree then "
            "sets %s) to give fragfree the streams.\n",
            c.var.c_str(), c.value.c_str(), c.var.c_str(), kOurTorchConf);
  } else {
    fprintf(stderr,
            "fragfree: %s=%s keeps PyTorch's native caching allocator: "
            "fragfree serves only its segments (cudaMalloc of 2 MiB, 20 MiB "
            "or larger blocks, without streams) while PyTorch caches, splits "
            "and keeps the statistics; torch.cuda.memory_stats() and "
            "empty_cache() talk to PyTorch's cache. Unset %s (fragfree then "
            "sets %s) to let fragfree serve every tensor.\n",
            c.var.c_str(), c.value.c_str(), c.var.c_str(), kOurTorchConf);
  }
}

// --- fork -------------------------------------------------------------------

void BeforeFork() {
  LockStateForFork();
  LockPinnedForFork();
}
void AfterForkInParent() {
  UnlockPinnedAfterFork();
  UnlockStateAfterFork();
}
void AfterForkInChild() {
  UnlockPinnedAfterFork();
  ResetStateLocksInForkChild();
  if (engine_used.load()) {
    // The parent's device memory, contexts and engine locks are not usable
    // here: forward everything, as if fragfree were absent.
    fork_child_passthrough.store(true);
  } else {
    owner_pid.store(getpid());
  }
}

// --- exit -------------------------------------------------------------------

int FindLibcuda(struct dl_phdr_info* info, size_t /*size*/, void* found) {
  const char* name = info->dlpi_name;
  if (name != nullptr && strstr(name, "libcuda.so") != nullptr) {
    *static_cast<bool*>(found) = true;
    return 1;
  }
  return 0;
}

std::string Ratio(double r) { return absl::StrFormat("%.2f", r); }

void PrintDeviceSummary(int device, DeviceAllocator& d) {
  const DeviceStats s = d.GetStats();
  const Fragmentation f = ComputeFragmentation(s);
  const Stat& allocated = s.allocated_bytes.pool[kPoolAll];
  const Stat& reserved = s.reserved_bytes.pool[kPoolAll];
  const Stat& allocs = s.allocation.pool[kPoolAll];
  // The verdict on the gap at the peak (obs/stats.h JudgeGap): at exit the
  // current figures say nothing about how the run used its memory.
  std::string verdict;
  if (reserved.peak > 0) {
    verdict =
        absl::StrFormat("; gap at the peak %.1f%%: %s (%s)", 100 * f.peak_gap,
                        GapVerdictName(f.peak_gap_verdict), GapRuleText());
  }
  fprintf(
      stderr,
      "fragfree: device %d (%s) at exit: peak allocated %s of peak reserved "
      "%s (U_alloc %s, U_active %s, waste %s)%s\n"
      "fragfree:   now allocated %s, reserved %s, cached free %s (largest "
      "free block %s, external fragmentation %s), idle pages %s\n"
      "fragfree:   %lld allocations, %lld OOMs, %lld alloc retries, "
      "%lld invalid frees; pages mapped %lld, unmapped %lld, remapped %lld\n",
      device, d.backend_name().c_str(),
      FormatBytes(size_t(allocated.peak)).c_str(),
      FormatBytes(size_t(reserved.peak)).c_str(), Ratio(f.u_alloc).c_str(),
      Ratio(f.u_active).c_str(), FormatBytes(size_t(f.waste_bytes)).c_str(),
      verdict.c_str(), FormatBytes(size_t(allocated.current)).c_str(),
      FormatBytes(size_t(reserved.current)).c_str(),
      FormatBytes(size_t(s.cached_free_bytes)).c_str(),
      FormatBytes(size_t(s.largest_free_block)).c_str(),
      Ratio(f.external).c_str(),
      FormatBytes(size_t(s.idle_page_bytes.current)).c_str(),
      static_cast<long long>(allocs.allocated),
      static_cast<long long>(s.num_ooms),
      static_cast<long long>(s.num_alloc_retries),
      static_cast<long long>(s.invalid_frees),
      static_cast<long long>(s.pages_mapped),
      static_cast<long long>(s.pages_unmapped),
      static_cast<long long>(s.pages_remapped));
  // The bucket advisor over the sampled request sizes (docs/oom.md).
  const BucketAdvice a = AdviseDeviceBuckets(&d, d.options()).advice;
  if (!a.conf.empty()) {
    fprintf(stderr,
            "fragfree:   bucket advice: FRAGFREE_CONF=%s (%zu block sizes "
            "instead of %zu; padding %s, default rounding %s)\n",
            a.conf.c_str(), a.advised_distinct_sizes, a.default_distinct_sizes,
            FormatBytes(size_t(a.padding_bytes)).c_str(),
            FormatBytes(size_t(a.default_padding_bytes)).c_str());
  }
}

void PrintPinnedSummary() {
  const PinnedCounters p = GetPinnedCounters();
  if (p.allocs == 0 && p.frees == 0 && p.foreign_frees == 0) return;
  fprintf(stderr,
          "fragfree: pinned host memory (served by the CUDA runtime): %lld "
          "allocations (%s), %lld frees (+%lld of memory allocated "
          "elsewhere); peak live %s, live at exit %s\n",
          static_cast<long long>(p.allocs),
          FormatBytes(size_t(p.bytes_allocated)).c_str(),
          static_cast<long long>(p.frees),
          static_cast<long long>(p.foreign_frees),
          FormatBytes(size_t(p.peak_live_bytes)).c_str(),
          FormatBytes(size_t(p.live_bytes)).c_str());
}

bool StatsAtExitRequested() {
  if (MaxServedDevice() > 0) return Runtime::Get().options().stats_at_exit;
  // No device served: the engine never parsed FRAGFREE_CONF.
  const char* conf = getenv("FRAGFREE_CONF");
  absl::StatusOr<Options> options = Options::Parse(conf != nullptr ? conf : "");
  return options.ok() && options->stats_at_exit;
}

void AtExit() {
  if (!Active() || getpid() != owner_pid.load()) return;
  if (!notice_done.load()) {
    // No CUDA call reached fragfree; if the process used CUDA anyway (e.g.
    // PyTorch with expandable segments), say why fragfree saw nothing.
    bool libcuda = false;
    dl_iterate_phdr(FindLibcuda, &libcuda);
    if (libcuda && !notice_done.exchange(true)) PrintTorchConfNotice();
  }
  if (!StatsAtExitRequested()) return;
  ForEachServed(PrintDeviceSummary);
  PrintPinnedSummary();
}

bool Preloaded() {
  const char* preload = getenv("LD_PRELOAD");
  return preload != nullptr && strstr(preload, "libfragfree") != nullptr;
}

// Runs when the library is loaded, before main. dlopen users (fragfree.enable()
// through ctypes, C programs linking the library) are not preloaded: nothing
// is set up and every interposed function forwards to the runtime.
__attribute__((constructor)) void FragfreePreloadInit() {
  if (!Preloaded()) return;
  owner_pid.store(getpid());
  ChooseTorchBackend();
  // Python: the native adapter once torch is imported (preload_python.cc).
  // PyTorch's backend above stays chosen, so that interposition serves every
  // tensor when the adapter cannot be installed; the adapter replaces that
  // backend before it is initialised.
  SetUpPythonBootstrap();
  // The preload layer allocates metadata under the locks its fork handlers
  // take, so the metadata arena's locks must be taken after them: prepare
  // handlers run in reverse order of registration. The mmap arena's are
  // registered before this constructor runs; jemalloc registers its own when
  // it initializes, so when fragfree's jemalloc is already in the process it
  // is initialized now, before ours (docs/host.md, "Threads and fork").
  if (dlsym(RTLD_DEFAULT, FF_JEMALLOC_API_SYMBOL) != nullptr) {
    MetadataArena::Initialize();
  }
  pthread_atfork(BeforeFork, AfterForkInParent, AfterForkInChild);
  atexit(AtExit);
  active.store(true);
}

}  // namespace

bool Active() {
  return active.load(std::memory_order_relaxed) &&
         !fork_child_passthrough.load(std::memory_order_relaxed);
}

void NoteCudaUse() {
  if (notice_done.load(std::memory_order_relaxed)) return;
  if (!notice_done.exchange(true)) {
    if (const char* line = PythonBootstrapNotice()) {
      fprintf(stderr, "%s\n", line);
    }
    PrintTorchConfNotice();
  }
}

void NoteEngineUse() {
  engine_used.store(true);
  NoteCudaUse();
}

}  // namespace fragfree::preload
