// The engine keeps its metadata on the metadata arena (docs/host.md, "What
// lives where"): the arena's live counts rise as a DeviceAllocator creates
// arenas, blocks and streams and fall back exactly when it is destroyed; and
// (outside the sanitizers, whose runtimes own operator new) this binary
// replaces the global operator new with a counting one and checks that a
// whole engine lifetime, hot path included, allocates nothing on the
// program's heap.
// Thread-safety: single-threaded; the counters are atomics anyway.
#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <random>
#include <vector>

#include "allocator/base/metadata_arena.h"
#include "allocator/device_allocator.h"
#include "allocator/phys/host_backend.h"
#include "allocator/stream/host_event_source.h"
#include "gtest/gtest.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FF_TEST_SANITIZER 1
#endif
#endif
#if (defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)) && \
    !defined(FF_TEST_SANITIZER)
#define FF_TEST_SANITIZER 1
#endif

namespace {
[[maybe_unused]] std::atomic<bool> counting{false};
[[maybe_unused]] std::atomic<int64_t> heap_allocations{0};
}  // namespace

#ifndef FF_TEST_SANITIZER
// The program's operator new, counted while `counting` is set. libstdc++'s
// array, nothrow and sized forms call these.
void* operator new(size_t size) {
  if (counting.load(std::memory_order_relaxed)) ++heap_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t size, std::align_val_t alignment) {
  if (counting.load(std::memory_order_relaxed)) ++heap_allocations;
  const size_t align = size_t(alignment);
  const size_t rounded = (size + align - 1) / align * align;
  if (void* p = std::aligned_alloc(align, rounded == 0 ? align : rounded)) {
    return p;
  }
  throw std::bad_alloc();
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  std::free(p);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

namespace fragfree {
namespace {

constexpr size_t kPage = 64 << 10;
constexpr StreamHandle kStreams[] = {0x100, 0x200, 0x300};

std::unique_ptr<DeviceAllocator> MakeDevice() {
  absl::StatusOr<std::unique_ptr<HostBackend>> backend =
      HostBackend::Create(4096 * kPage, kPage);  // 256 MiB
  if (!backend.ok()) abort();
  Options options;
  options.backend = "host";
  absl::StatusOr<std::unique_ptr<DeviceAllocator>> device =
      DeviceAllocator::Create(0, options, std::move(*backend),
                              std::make_unique<HostEventSource>());
  if (!device.ok()) abort();
  return std::move(*device);
}

// A mixed workload: many sizes, three streams, record_stream (pending frees),
// empty_cache, a retired stream. Returns the number of failed calls.
int RunWorkload(DeviceAllocator& d, int steps) {
  static constexpr size_t kSizes[] = {512,    1000,   4096,    20000,
                                      65536,  100000, 1 << 20, 3 << 20,
                                      777777, 123,    40000,   2 << 20};
  std::mt19937 rng(11);
  MetadataVector<void*> live;
  int failures = 0;
  for (int i = 0; i < steps; ++i) {
    const StreamHandle stream = kStreams[rng() % 2];
    if (live.size() < 40 && rng() % 3 != 0) {
      absl::StatusOr<void*> p =
          d.Malloc(kSizes[rng() % std::size(kSizes)], stream);
      if (!p.ok()) {
        ++failures;
        continue;
      }
      live.push_back(*p);
      if (i % 17 == 0 && !d.RecordStream(*p, kStreams[2]).ok()) ++failures;
    } else if (!live.empty()) {
      const size_t k = rng() % live.size();
      if (!d.Free(live[k]).ok()) ++failures;
      live[k] = live.back();
      live.pop_back();
    }
    if (i % 500 == 499 && !d.EmptyCache().ok()) ++failures;
  }
  if (!d.RetireStream(kStreams[2]).ok()) ++failures;
  for (void* p : live) {
    if (!d.Free(p).ok()) ++failures;
  }
  if (!d.EmptyCache().ok()) ++failures;
  return failures;
}

TEST(EngineMetadata, LivesOnTheMetadataArenaAndIsAllGivenBack) {
  const MetadataArenaInfo before = MetadataArena::Info();
  {
    std::unique_ptr<DeviceAllocator> d = MakeDevice();
    const MetadataArenaInfo created = MetadataArena::Info();
    // The allocator, its backend, event source, live table, block pool...
    EXPECT_GE(created.live_allocations - before.live_allocations, 4);
    std::vector<void*> held;
    for (int i = 0; i < 300; ++i) {
      absl::StatusOr<void*> p =
          d->Malloc(size_t(1000 + 3000 * (i % 7)), kStreams[i % 3]);
      ASSERT_TRUE(p.ok()) << p.status();
      held.push_back(*p);
    }
    const MetadataArenaInfo busy = MetadataArena::Info();
    // Arenas (page tables, the Arena objects), streams, blocks.
    EXPECT_GT(busy.live_allocations, created.live_allocations);
    EXPECT_GT(busy.live_bytes, created.live_bytes);
    EXPECT_EQ(d->GetStats().num_arenas, 3);
    for (void* p : held) ASSERT_TRUE(d->Free(p).ok());
    ASSERT_EQ(RunWorkload(*d, 3000), 0);
    ASSERT_TRUE(d->CheckInvariants().ok()) << d->CheckInvariants();
  }
  const MetadataArenaInfo after = MetadataArena::Info();
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
}

TEST(EngineMetadata, NothingOnTheProgramHeapFromCreationToDestruction) {
#ifdef FF_TEST_SANITIZER
  GTEST_SKIP() << "the sanitizer runtime owns operator new";
#else
  heap_allocations = 0;
  counting = true;
  int failures;
  {
    std::unique_ptr<DeviceAllocator> d = MakeDevice();
    failures = RunWorkload(*d, 6000);
    failures += RunWorkload(*d, 6000);  // warm: the same again
  }
  counting = false;
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(heap_allocations.load(), 0)
      << "the engine allocated on the program's heap";
  // The counter works.
  counting = true;
  void* p = ::operator new(24);
  counting = false;
  ::operator delete(p);
  EXPECT_EQ(heap_allocations.load(), 1);
#endif
}

}  // namespace
}  // namespace fragfree
