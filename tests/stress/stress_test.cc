// Stress test of DeviceAllocator on the host backend (stress_test) and on the
// CUDA driver VMM backend of GPU 0 (stress_cuda_test, FF_STRESS_CUDA: 2 MiB
// pages, patterns written and checked with cuMemcpy): 8 threads allocate on 16
// stream handles, free blocks allocated by other threads (a block is handed
// over through the receiver's inbox), and record_stream blocks on other
// streams, whose events complete late; meanwhile a control thread calls
// EmptyCache, CheckInvariants, GetStats, Arenas, completes events, retires
// streams the workers keep using (cudaStreamDestroy, the handle then reused)
// and changes the memory fraction. Every block carries a pattern checked when
// it is freed. A watchdog aborts with each thread's progress if the run does
// not finish in time (a deadlock). At the end: invariants hold, nothing is
// allocated or reserved, and the backend has all its memory back.
//
// Size: FRAGFREE_STRESS_OPS operations in all (default 1,000,000; 250,000 under
// ASan, 100,000 under TSan), stopping early after FRAGFREE_STRESS_SECONDS
// (default 20) so that CI stays bounded on 2 cores.
// Owns: the stress workload and its thread-safe event source.
// Thread-safety: the test itself is the multi-threaded client; every shared
// structure of the test has its own std::mutex.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "allocator/device_allocator.h"
#include "allocator/phys/host_backend.h"
#ifdef FF_STRESS_CUDA
#include "allocator/phys/cuda_driver.h"
#include "allocator/phys/cuda_vmm_backend.h"
#endif
#include "allocator/stream/event_source.h"
#include "gtest/gtest.h"

#if defined(__SANITIZE_THREAD__)
#define FF_STRESS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FF_STRESS_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FF_STRESS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FF_STRESS_ASAN 1
#endif
#endif

namespace fragfree {
namespace {

constexpr int kThreads = 8;
constexpr int kStreams = 16;
#ifdef FF_STRESS_CUDA
constexpr size_t kPage = 2 << 20;           // the H200's granularity
constexpr size_t kCapacity = 1024 * kPage;  // 2 GiB, as a memory limit
#else
constexpr size_t kPage = 64 << 10;
constexpr size_t kCapacity = 1024 * kPage;  // 64 MiB
#endif
constexpr size_t kMaxLivePerThread = 48;

int64_t EnvOr(const char* name, int64_t fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? strtoll(v, nullptr, 10) : fallback;
}

int64_t DefaultOps() {
#if defined(FF_STRESS_CUDA)
  return 200'000;  // every stamp and check is a synchronous cuMemcpy
#elif defined(FF_STRESS_TSAN)
  return 100'000;
#elif defined(FF_STRESS_ASAN)
  return 250'000;
#else
  return 1'000'000;
#endif
}

// Events that complete late: each one after 1-4 queries, when the allocator
// synchronizes on it, or when the control thread completes everything.
// Thread-safe (std::mutex, so ThreadSanitizer sees the ordering).
class LateEventSource final : public EventSource {
 public:
  absl::StatusOr<EventId> Record(StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    EventId id = ++next_;
    pending_[id] = 1 + int(id % 4);
    ++records_;
    return id;
  }
  absl::StatusOr<bool> Query(EventId event) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(event);
    if (it == pending_.end()) return true;  // completed
    if (--it->second > 0) return false;
    pending_.erase(it);
    return true;
  }
  absl::Status Synchronize(EventId event) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(pending_.begin(), pending_.upper_bound(event));
    ++synchronizes_;
    return absl::OkStatus();
  }
  void Release(EventId event) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.erase(event);
  }
  bool IsCapturing(StreamHandle) override { return false; }

  void CompleteAll() {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.clear();
  }
  int64_t records() const {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

 private:
  mutable std::mutex mu_;
  EventId next_ = 0;
  std::map<EventId, int> pending_;  // not yet complete: queries left
  int64_t records_ = 0;
  int64_t synchronizes_ = 0;
};

struct Block {
  void* ptr;
  size_t size;
  uint64_t tag;
};

uint64_t Word(uint64_t tag, size_t off) {
  uint64_t x = tag * 0x9E3779B97F4A7C15ull + off;
  x ^= x >> 31;
  return x * 0xbf58476d1ce4e5b9ull;
}

#ifdef FF_STRESS_CUDA
// Device memory is written and read with synchronous driver copies from any
// thread, under device 0's primary context.
const CudaDriver& Cu() { return **CudaDriver::Get(); }
void MakeContextCurrent() {
  static CUcontext ctx = [] {
    absl::StatusOr<CUcontext> c = Cu().RetainPrimaryContext(0);
    if (!c.ok()) abort();
    return *c;
  }();
  if (Cu().cuCtxSetCurrent(ctx) != CUDA_SUCCESS) abort();
}
void CopyIn(char* dst, const void* src, size_t n) {
  if (Cu().cuMemcpyHtoD(CUdeviceptr(dst), src, n) != CUDA_SUCCESS) abort();
}
bool SameAs(const char* src, const void* expected, size_t n) {
  char got[8];
  if (Cu().cuMemcpyDtoH(got, CUdeviceptr(src), n) != CUDA_SUCCESS) abort();
  return memcmp(got, expected, n) == 0;
}
#else
void MakeContextCurrent() {}
void CopyIn(char* dst, const void* src, size_t n) { memcpy(dst, src, n); }
bool SameAs(const char* src, const void* expected, size_t n) {
  return memcmp(src, expected, n) == 0;
}
#endif

void Stamp(const Block& b) {
  char* p = static_cast<char*>(b.ptr);
  uint64_t head = Word(b.tag, 0), tail = Word(b.tag, b.size);
  CopyIn(p, &head, std::min<size_t>(8, b.size));
  if (b.size >= 16) CopyIn(p + b.size - 8, &tail, 8);
}

bool Intact(const Block& b) {
  const char* p = static_cast<const char*>(b.ptr);
  uint64_t head = Word(b.tag, 0), tail = Word(b.tag, b.size);
  if (!SameAs(p, &head, std::min<size_t>(8, b.size))) return false;
  return b.size < 16 || SameAs(p + b.size - 8, &tail, 8);
}

// Blocks handed to a thread by the others, to be freed by it.
struct Inbox {
  std::mutex mu;
  std::vector<Block> blocks;
};

struct Progress {
  std::atomic<int64_t> ops{0};
  std::atomic<int64_t> ooms{0};
  std::atomic<int64_t> cross_frees{0};
  std::atomic<int64_t> record_streams{0};
  std::atomic<int> phase{0};  // 0 running, 1 draining, 2 done
};

// Aborts the process with a message if Done() is not called within `timeout`.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds timeout, std::function<void()> report)
      : thread_([this, timeout, report = std::move(report)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, timeout, [this] { return done_; })) {
            fprintf(stderr,
                    "stress_test: watchdog: no progress to completion after "
                    "%lld s (deadlock?)\n",
                    (long long)timeout.count());
            report();
            fflush(stderr);
            abort();
          }
        }) {}
  ~Watchdog() {
    Done();
    thread_.join();
  }
  void Done() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

TEST(Stress, ThreadsOnManyStreamsWithCrossThreadFrees) {
  const int64_t total_ops = EnvOr("FRAGFREE_STRESS_OPS", DefaultOps());
  const int64_t seconds = EnvOr("FRAGFREE_STRESS_SECONDS", 20);
  const int64_t ops_per_thread = total_ops / kThreads;

#ifdef FF_STRESS_CUDA
  ASSERT_TRUE(CudaDriver::Get().ok()) << CudaDriver::Get().status();
  MakeContextCurrent();
  auto made = CudaVmmBackend::Create(0);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ((*made)->Granularity(), kPage);
  std::unique_ptr<PhysicalBackend> owned = std::move(*made);
  Options options;
  options.memory_limit_bytes = kCapacity;
#else
  auto host = HostBackend::Create(kCapacity, kPage);
  ASSERT_TRUE(host.ok()) << host.status();
  std::unique_ptr<PhysicalBackend> owned = std::move(*host);
  Options options;
  options.backend = "host";
#endif
  PhysicalBackend* backend = owned.get();
  const size_t free_at_start = backend->MemoryInfo().free_bytes;
  auto events_owned = std::make_unique<LateEventSource>();
  LateEventSource* events = events_owned.get();
  auto created = DeviceAllocator::Create(0, options, std::move(owned),
                                         std::move(events_owned));
  ASSERT_TRUE(created.ok()) << created.status();
  DeviceAllocator& a = **created;

  StreamHandle streams[kStreams];
  for (int i = 0; i < kStreams; ++i) streams[i] = StreamHandle(i) * 0x100;
  Inbox inboxes[kThreads];
  Progress progress[kThreads];
  std::atomic<bool> stop_control{false};
  std::atomic<int64_t> control_rounds{0}, empty_caches{0}, invariant_checks{0},
      retires{0};
  std::atomic<int> failures{0};
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);

  Watchdog watchdog(std::chrono::seconds(seconds * 6 + 60), [&] {
    for (int t = 0; t < kThreads; ++t) {
      fprintf(stderr, "  thread %d: %lld ops, phase %d\n", t,
              (long long)progress[t].ops.load(), progress[t].phase.load());
    }
    fprintf(stderr, "  control: %lld rounds\n",
            (long long)control_rounds.load());
  });

  auto fail = [&](const std::string& what) {
    if (failures.fetch_add(1) < 10) ADD_FAILURE() << what;
  };

  auto free_block = [&](const Block& b) {
    if (!Intact(b)) fail("data of a block changed before its free");
    absl::Status s = a.Free(b.ptr);
    if (!s.ok()) fail("Free: " + s.ToString());
  };

  auto worker = [&](int t) {
    MakeContextCurrent();
    std::mt19937_64 rng(1000 + t);
    std::vector<Block> mine;
    uint64_t tag = uint64_t(t) << 48;
    Progress& me = progress[t];
    for (int64_t i = 0; i < ops_per_thread; ++i) {
      if ((i & 1023) == 0 && std::chrono::steady_clock::now() > deadline) {
        break;
      }
      me.ops.fetch_add(1, std::memory_order_relaxed);
      // Free what the others handed over.
      if ((i & 7) == 0) {
        std::vector<Block> got;
        {
          std::lock_guard<std::mutex> lock(inboxes[t].mu);
          got.swap(inboxes[t].blocks);
        }
        for (const Block& b : got) free_block(b);
        me.cross_frees.fetch_add(int64_t(got.size()),
                                 std::memory_order_relaxed);
      }
      const uint64_t r = rng();
      const int op = int(r % 100);
      if (op < 50 && mine.size() < kMaxLivePerThread) {
        size_t size;
        const int kind = int((r >> 8) % 20);
        if (kind < 12) {
          size = 1 + (r >> 16) % 8192;  // small, shares pages
        } else if (kind < 19) {
          size = 8192 + (r >> 16) % (4 * kPage);  // a few pages
        } else {
          size = 4 * kPage + (r >> 16) % (1 << 20);  // large arenas
        }
        StreamHandle stream = streams[(r >> 40) % kStreams];
        absl::StatusOr<void*> p = a.Malloc(size, stream);
        if (!p.ok()) {
          if (!absl::IsResourceExhausted(p.status())) {
            fail("Malloc: " + p.status().ToString());
          }
          me.ooms.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        Block b{*p, size, ++tag};
        Stamp(b);
        mine.push_back(b);
      } else if (op < 85 && !mine.empty()) {
        size_t k = (r >> 8) % mine.size();
        free_block(mine[k]);
        mine[k] = mine.back();
        mine.pop_back();
      } else if (op < 93 && !mine.empty()) {
        // Hand a block to another thread, which frees it.
        size_t k = (r >> 8) % mine.size();
        int to = int((r >> 32) % kThreads);
        {
          std::lock_guard<std::mutex> lock(inboxes[to].mu);
          inboxes[to].blocks.push_back(mine[k]);
        }
        mine[k] = mine.back();
        mine.pop_back();
      } else if (!mine.empty()) {
        size_t k = (r >> 8) % mine.size();
        absl::Status s =
            a.RecordStream(mine[k].ptr, streams[(r >> 32) % kStreams]);
        if (!s.ok()) fail("RecordStream: " + s.ToString());
        me.record_streams.fetch_add(1, std::memory_order_relaxed);
      }
    }
    me.phase = 1;
    for (const Block& b : mine) free_block(b);
    me.phase = 2;
  };

  auto control = [&] {
    MakeContextCurrent();
    std::mt19937_64 rng(7);
    while (!stop_control.load()) {
      const int op = int(rng() % 10);
      if (op < 3) {
        absl::Status s = a.EmptyCache();
        if (!s.ok()) fail("EmptyCache: " + s.ToString());
        empty_caches.fetch_add(1);
      } else if (op < 6) {
        absl::Status s = a.CheckInvariants();
        if (!s.ok()) fail("CheckInvariants: " + s.ToString());
        invariant_checks.fetch_add(1);
      } else if (op < 7) {
        DeviceStats st = a.GetStats();
        if (st.reserved_bytes.pool[kPoolAll].current > int64_t(kCapacity)) {
          fail("reserved above the capacity");
        }
      } else if (op < 8) {
        (void)a.Arenas();
      } else if (op < 9) {
        events->CompleteAll();
        if (rng() % 8 == 0) {
          // A stream destroyed while the workers keep using its handle value
          // (a new stream with the same handle, for the engine).
          absl::Status s = a.RetireStream(streams[rng() % kStreams]);
          if (!s.ok()) fail("RetireStream: " + s.ToString());
          retires.fetch_add(1);
        }
      } else {
#ifdef FF_STRESS_CUDA
        // A fraction of the whole GPU would lift the 2 GiB limit: vary it.
        absl::Status s =
            a.SetMemoryLimit(rng() % 4 == 0 ? kCapacity / 4 * 3 : kCapacity);
        if (!s.ok()) fail("SetMemoryLimit: " + s.ToString());
#else
        absl::Status s = a.SetMemoryFraction(rng() % 4 == 0 ? 0.75 : 1.0);
        if (!s.ok()) fail("SetMemoryFraction: " + s.ToString());
#endif
      }
      control_rounds.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };

  const auto start = std::chrono::steady_clock::now();
  std::thread control_thread(control);
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) workers.emplace_back(worker, t);
  for (std::thread& w : workers) w.join();
  // Blocks handed over after their receiver finished.
  for (Inbox& inbox : inboxes) {
    for (const Block& b : inbox.blocks) free_block(b);
    inbox.blocks.clear();
  }
  stop_control = true;
  control_thread.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  events->CompleteAll();
  ASSERT_TRUE(a.SetMemoryFraction(1.0).ok());
  ASSERT_TRUE(a.EmptyCache().ok());
  watchdog.Done();

  ASSERT_EQ(failures.load(), 0);
  ASSERT_TRUE(a.CheckInvariants().ok()) << a.CheckInvariants();
  DeviceStats st = a.GetStats();
  EXPECT_EQ(st.allocated_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(st.active_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(st.requested_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(st.reserved_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(st.idle_page_bytes.current, 0);
  EXPECT_EQ(backend->MemoryInfo().free_bytes, free_at_start)
      << "pages leaked to the backend";

  int64_t ops = 0, ooms = 0, cross = 0, records = 0;
  for (const Progress& p : progress) {
    ops += p.ops;
    ooms += p.ooms;
    cross += p.cross_frees;
    records += p.record_streams;
  }
  printf(
      "stress: %d threads x %d streams: %lld operations in %.1f s "
      "(%.0f ops/s); %lld cross-thread frees, %lld record_streams, %lld "
      "OOMs; control thread: %lld empty_cache, %lld invariant checks, %lld "
      "retired streams; pages remapped %lld, events recorded %lld\n",
      kThreads, kStreams, (long long)ops, elapsed, double(ops) / elapsed,
      (long long)cross, (long long)records, (long long)ooms,
      (long long)empty_caches.load(), (long long)invariant_checks.load(),
      (long long)retires.load(), (long long)st.pages_remapped,
      (long long)events->records());
  RecordProperty("operations", std::to_string(ops));
  RecordProperty("seconds", std::to_string(elapsed));
  EXPECT_GT(cross, 0);
  EXPECT_GT(records, 0);
  EXPECT_GT(empty_caches.load(), 0);
  EXPECT_GT(invariant_checks.load(), 0);
  // A run cut short by the deadline is still a pass, but must have done real
  // work (the deadline exists for slow sanitizer builds).
  EXPECT_GT(ops, std::min<int64_t>(total_ops, 20'000));
}

}  // namespace
}  // namespace fragfree
