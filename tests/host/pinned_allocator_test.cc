// PinnedHostAllocator's policy on the emulated pinning backend: few pin calls
// for many requests, reuse and coalescing inside chunks, events that gate reuse
// (ManualEventSource), release of idle chunks after the decay time (fake
// clock) and by EmptyCache, out of memory, bad input; and HostConf parsing.
// Thread-safety: the threaded test runs the allocator from several threads.
#include "allocator/host/pinned_allocator.h"

#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "allocator/host/host_conf.h"
#include "allocator/stream/host_event_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

using ::testing::HasSubstr;

constexpr StreamHandle kStreamA = 0x1000;
constexpr StreamHandle kStreamB = 0x2000;

class PinnedTest : public ::testing::Test {
 protected:
  // A fresh allocator with `chunk_mb` chunks, a fake clock, ManualEventSource
  // or HostEventSource, and an emulated backend (not populated: fast).
  void Make(size_t chunk_mb = 4, int64_t release_after_ms = 1000,
            size_t capacity_mb = 0, bool manual_events = true) {
    EmulatedPinningBackend::Config config;
    config.populate = false;
    config.capacity_bytes = capacity_mb * kMiB;
    auto backend = std::make_unique<EmulatedPinningBackend>(config);
    backend_ = backend.get();
    std::unique_ptr<EventSource> events;
    if (manual_events) {
      auto manual = std::make_unique<ManualEventSource>();
      events_ = manual.get();
      events = std::move(manual);
    } else {
      events_ = nullptr;
      events = std::make_unique<HostEventSource>();
    }
    PinnedOptions options;
    options.chunk_bytes = chunk_mb * kMiB;
    options.release_after_ms = release_after_ms;
    alloc_ = std::make_unique<PinnedHostAllocator>(std::move(backend),
                                                   std::move(events), options,
                                                   [this] { return now_ns_; });
  }
  void* Alloc(size_t size) {
    absl::StatusOr<void*> p = alloc_->Allocate(size);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : nullptr;
  }
  void Free(void* p) {
    absl::Status s = alloc_->Free(p);
    EXPECT_TRUE(s.ok()) << s;
  }
  void AdvanceMs(int64_t ms) { now_ns_ += ms * 1'000'000; }

  int64_t now_ns_ = 1'000'000'000;
  EmulatedPinningBackend* backend_ = nullptr;
  ManualEventSource* events_ = nullptr;
  std::unique_ptr<PinnedHostAllocator> alloc_;
};

TEST(PinnedRoundTest, SizeClasses) {
  EXPECT_EQ(PinnedHostAllocator::RoundSize(1), 512u);
  EXPECT_EQ(PinnedHostAllocator::RoundSize(512), 512u);
  EXPECT_EQ(PinnedHostAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(PinnedHostAllocator::RoundSize(16 * kKiB), 16 * kKiB);
  // Above 16 KiB: 32 classes per doubling (at most ~3% rounding).
  EXPECT_EQ(PinnedHostAllocator::RoundSize(16 * kKiB + 1), 16 * kKiB + 512);
  EXPECT_EQ(PinnedHostAllocator::RoundSize(kMiB + 1), kMiB + 32 * kKiB);
  for (size_t size = 1; size < (size_t{1} << 31); size = size * 3 + 7) {
    size_t r = PinnedHostAllocator::RoundSize(size);
    EXPECT_GE(r, size);
    EXPECT_EQ(r % PinnedHostAllocator::kAlignment, 0u);
    EXPECT_LE(double(r - size), 0.04 * double(size) + 512) << size;
  }
}

TEST_F(PinnedTest, ManyRequestsFewPinCalls) {
  Make(/*chunk_mb=*/4);
  std::vector<void*> live;
  size_t total = 0;
  for (int i = 0; i < 1000; ++i) {
    size_t size = size_t(4 * kKiB) << (i % 5);  // 4 KiB .. 64 KiB
    void* p = Alloc(size);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
    memset(p, i, size);
    live.push_back(p);
    total += size;
  }
  PinnedStats s = alloc_->stats();
  // 24.2 MiB in 4 MiB chunks: 7 pin calls (8 at most: a chunk's tail may be
  // too small for the next request) for 1000 requests.
  EXPECT_LE(s.pin_calls, int64_t((total + 4 * kMiB - 1) / (4 * kMiB)) + 1);
  EXPECT_EQ(s.pin_calls, backend_->pin_calls());
  EXPECT_EQ(s.allocs, 1000);
  EXPECT_EQ(s.allocs_without_pin, 1000 - s.pin_calls);
  EXPECT_EQ(s.live_bytes, int64_t(total));
  EXPECT_EQ(s.requested_bytes, int64_t(total));
  for (void* p : live) Free(p);
  // Freed memory serves a second round with no pin call at all.
  for (int i = 0; i < 1000; ++i) live[i] = Alloc(size_t(4 * kKiB) << (i % 5));
  EXPECT_EQ(alloc_->stats().pin_calls, s.pin_calls);
  for (void* p : live) Free(p);
  EXPECT_EQ(alloc_->stats().live_bytes, 0);
}

TEST_F(PinnedTest, FreedBlockIsReusedAtOnceWithoutStreams) {
  Make();
  void* a = Alloc(100 * kKiB);
  Free(a);
  EXPECT_EQ(Alloc(100 * kKiB), a);
  EXPECT_EQ(alloc_->stats().pin_calls, 1);
  EXPECT_EQ(events_->records(), 0);
}

TEST_F(PinnedTest, NeighboursCoalesceIntoTheWholeChunk) {
  Make(/*chunk_mb=*/4);
  void* a = Alloc(kMiB);
  void* b = Alloc(kMiB);
  void* c = Alloc(2 * kMiB);
  EXPECT_EQ(alloc_->stats().chunks, 1);
  Free(b);
  Free(a);
  Free(c);
  // The chunk is one free block again: a chunk-sized request fits in it.
  EXPECT_EQ(Alloc(4 * kMiB), a);
  EXPECT_EQ(alloc_->stats().pin_calls, 1);
}

TEST_F(PinnedTest, BestFitPrefersTheSmallestHole) {
  Make(/*chunk_mb=*/4);
  void* a = Alloc(64 * kKiB);
  void* hole_big = Alloc(512 * kKiB);
  void* b = Alloc(64 * kKiB);
  void* hole_small = Alloc(128 * kKiB);
  void* c = Alloc(64 * kKiB);
  Free(hole_big);
  Free(hole_small);
  EXPECT_EQ(Alloc(100 * kKiB), hole_small);
  EXPECT_EQ(Alloc(300 * kKiB), hole_big);
  (void)a, (void)b, (void)c;
}

TEST_F(PinnedTest, LargeRequestGetsItsOwnChunk) {
  Make(/*chunk_mb=*/4);
  void* big = Alloc(10 * kMiB);
  PinnedStats s = alloc_->stats();
  EXPECT_EQ(s.chunks, 1);
  EXPECT_EQ(s.pinned_bytes, int64_t(PinnedHostAllocator::RoundSize(10 * kMiB)));
  EXPECT_EQ(backend_->pinned_bytes(), s.pinned_bytes);
  Free(big);
  // A small request after it reuses that chunk rather than pinning another.
  Alloc(kKiB);
  EXPECT_EQ(alloc_->stats().pin_calls, 1);
}

TEST_F(PinnedTest, RecordedStreamsGateReuseUntilEventsComplete) {
  Make();
  void* p = Alloc(256 * kKiB);
  ASSERT_TRUE(alloc_->RecordStream(p, kStreamA).ok());
  ASSERT_TRUE(alloc_->RecordStream(p, kStreamB).ok());
  ASSERT_TRUE(alloc_->RecordStream(p, kStreamA).ok());  // once per stream
  Free(p);
  EXPECT_EQ(events_->records(), 2);
  PinnedStats s = alloc_->stats();
  EXPECT_EQ(s.pending_bytes, int64_t(256 * kKiB));
  EXPECT_EQ(s.events_recorded, 2);
  EXPECT_EQ(s.live_bytes, 0);
  // In flight: the same request must not get p back.
  void* q = Alloc(256 * kKiB);
  EXPECT_NE(q, p);
  Free(q);
  void* r = Alloc(256 * kKiB);
  EXPECT_NE(r, p);
  events_->CompleteAll();
  Free(r);  // processes the completed events
  EXPECT_EQ(alloc_->stats().pending_bytes, 0);
  EXPECT_EQ(Alloc(256 * kKiB), p);
  EXPECT_EQ(alloc_->stats().pin_calls, 1);
}

TEST_F(PinnedTest, PendingBlocksKeepTheirChunkPinned) {
  Make(/*chunk_mb=*/4, /*release_after_ms=*/0);
  void* p = Alloc(kMiB);
  ASSERT_TRUE(alloc_->RecordStream(p, kStreamA).ok());
  Free(p);
  ASSERT_TRUE(alloc_->EmptyCache().ok());
  EXPECT_EQ(alloc_->stats().chunks, 1) << "released under an in-flight copy";
  events_->CompleteAll();
  ASSERT_TRUE(alloc_->EmptyCache().ok());
  EXPECT_EQ(alloc_->stats().chunks, 0);
  EXPECT_EQ(backend_->unpin_calls(), 1);
}

TEST_F(PinnedTest, CapturingStreamRefusesTheFree) {
  Make();
  void* p = Alloc(kKiB);
  ASSERT_TRUE(alloc_->RecordStream(p, kStreamA).ok());
  events_->SetCapturing(kStreamA, true);
  absl::Status s = alloc_->Free(p);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("capturing"));
  EXPECT_EQ(alloc_->AllocationSize(p), kKiB);  // still live
  events_->SetCapturing(kStreamA, false);
  Free(p);
}

TEST_F(PinnedTest, IdleChunksAreReleasedAfterTheDecayTime) {
  Make(/*chunk_mb=*/4, /*release_after_ms=*/1000);
  void* a = Alloc(kMiB);
  void* b = Alloc(8 * kMiB);  // a second chunk
  EXPECT_EQ(alloc_->stats().chunks, 2);
  Free(b);
  AdvanceMs(999);
  alloc_->Trim();
  EXPECT_EQ(alloc_->stats().chunks, 2);
  AdvanceMs(1);
  alloc_->Trim();
  PinnedStats s = alloc_->stats();
  EXPECT_EQ(s.chunks, 1);
  EXPECT_EQ(s.unpin_calls, 1);
  EXPECT_EQ(s.pinned_bytes, int64_t(4 * kMiB));
  EXPECT_EQ(backend_->pinned_bytes(), int64_t(4 * kMiB));
  // Allocations and frees trim too; reusing a chunk resets its clock.
  Free(a);
  AdvanceMs(500);
  a = Alloc(kMiB);
  AdvanceMs(5000);
  Free(Alloc(kKiB));
  EXPECT_EQ(alloc_->stats().chunks, 1);
  Free(a);
  AdvanceMs(1000);
  Free(Alloc(kKiB));  // reuses the chunk: it is busy, then idle again
  EXPECT_EQ(alloc_->stats().chunks, 1);
  AdvanceMs(1000);
  alloc_->Trim();
  EXPECT_EQ(alloc_->stats().chunks, 0);
  EXPECT_EQ(backend_->pinned_bytes(), 0);
}

TEST_F(PinnedTest, NegativeDecayKeepsChunksUntilEmptyCache) {
  Make(/*chunk_mb=*/4, /*release_after_ms=*/-1);
  void* live = Alloc(kMiB);
  Free(Alloc(6 * kMiB));
  AdvanceMs(int64_t{1} << 30);
  alloc_->Trim();
  EXPECT_EQ(alloc_->stats().chunks, 2);
  ASSERT_TRUE(alloc_->EmptyCache().ok());
  EXPECT_EQ(alloc_->stats().chunks, 1);  // the one holding `live` stays
  Free(live);
  ASSERT_TRUE(alloc_->EmptyCache().ok());
  PinnedStats s = alloc_->stats();
  EXPECT_EQ(s.chunks, 0);
  EXPECT_EQ(s.pinned_bytes, 0);
  EXPECT_EQ(s.peak_pinned_bytes, int64_t(10 * kMiB));
}

TEST_F(PinnedTest, OutOfMemoryReleasesFreeChunksThenFails) {
  Make(/*chunk_mb=*/2, /*release_after_ms=*/-1, /*capacity_mb=*/8);
  void* a = Alloc(2 * kMiB);
  void* b = Alloc(2 * kMiB);
  void* c = Alloc(2 * kMiB);
  Free(b);
  Free(c);
  // 6 MiB pinned, 4 of it free: 5 MiB more fits only after unpinning them.
  void* d = Alloc(5 * kMiB);
  ASSERT_NE(d, nullptr);
  PinnedStats s = alloc_->stats();
  EXPECT_EQ(s.unpin_calls, 2);
  EXPECT_EQ(s.pin_calls, 5);  // 3 chunks, a refused pin, the retry
  EXPECT_EQ(s.pinned_bytes, int64_t(7 * kMiB));
  absl::StatusOr<void*> e = alloc_->Allocate(4 * kMiB);
  EXPECT_TRUE(absl::IsResourceExhausted(e.status())) << e.status();
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("cannot pin"));
  EXPECT_EQ(alloc_->stats().pin_failures, 1);
  Free(a);
  Free(d);
}

TEST_F(PinnedTest, BadInputIsAnError) {
  Make();
  EXPECT_TRUE(absl::IsInvalidArgument(alloc_->Allocate(0).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      alloc_->Allocate(PinnedHostAllocator::kMaxRequest + 1).status()));
  int on_stack = 0;
  absl::Status s = alloc_->Free(&on_stack);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("not a fragfree pinned allocation"));
  void* p = Alloc(8 * kKiB);
  void* keep = Alloc(8 * kKiB);
  s = alloc_->Free(static_cast<char*>(p) + 512);
  EXPECT_THAT(std::string(s.message()), HasSubstr("interior pointer"));
  Free(p);
  s = alloc_->Free(p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("double free"));
  s = alloc_->RecordStream(p, kStreamA);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(std::string(s.message()), HasSubstr("record_stream"));
  // A pending block is freed already too.
  ASSERT_TRUE(alloc_->RecordStream(keep, kStreamA).ok());
  Free(keep);
  EXPECT_THAT(std::string(alloc_->Free(keep).message()),
              HasSubstr("double free"));
  EXPECT_EQ(alloc_->stats().frees, 2);
}

TEST_F(PinnedTest, OwnsAndAllocationSize) {
  Make();
  void* p = Alloc(1000);
  EXPECT_TRUE(alloc_->Owns(p));
  EXPECT_TRUE(alloc_->Owns(static_cast<char*>(p) + 999));
  EXPECT_EQ(alloc_->AllocationSize(p), 1000u);
  EXPECT_EQ(alloc_->AllocationSize(static_cast<char*>(p) + 1), 0u);
  int x;
  EXPECT_FALSE(alloc_->Owns(&x));
  Free(p);
  EXPECT_EQ(alloc_->AllocationSize(p), 0u);
  EXPECT_TRUE(alloc_->Owns(p));  // still in a pinned chunk
}

TEST_F(PinnedTest, MetadataLivesOnTheMetadataArena) {
  Make();
  const int64_t before = MetadataArena::Info().live_allocations;
  std::vector<void*> live;
  for (int i = 0; i < 100; ++i) live.push_back(Alloc(kKiB));
  EXPECT_GE(MetadataArena::Info().live_allocations - before, 100);
  for (void* p : live) Free(p);
}

TEST_F(PinnedTest, ThreadsNeverShareMemory) {
  Make(/*chunk_mb=*/8, /*release_after_ms=*/-1, 0, /*manual_events=*/false);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::pair<unsigned char*, size_t>> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.size() < 20 && rng() % 3 != 0) {
          size_t size = 1 + rng() % (256 * kKiB);
          auto p = alloc_->Allocate(size);
          if (!p.ok()) {
            errors++;
            continue;
          }
          auto* bytes = static_cast<unsigned char*>(*p);
          memset(bytes, t + 1, size);
          if (rng() % 2) (void)alloc_->RecordStream(bytes, kStreamA + t);
          mine.emplace_back(bytes, size);
        } else if (!mine.empty()) {
          auto [bytes, size] = mine.back();
          mine.pop_back();
          for (size_t k = 0; k < size; k += 997) {
            if (bytes[k] != t + 1) errors++;
          }
          if (!alloc_->Free(bytes).ok()) errors++;
        }
      }
      for (auto [bytes, size] : mine) (void)alloc_->Free(bytes);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  PinnedStats s = alloc_->stats();
  EXPECT_EQ(s.live_bytes, 0);
  EXPECT_EQ(s.pending_bytes, 0);
  EXPECT_LT(s.pin_calls, s.allocs / 100);
  ASSERT_TRUE(alloc_->EmptyCache().ok());
  EXPECT_EQ(backend_->pinned_bytes(), 0);
}

TEST(HostConfTest, ParsesEveryKey) {
  absl::StatusOr<HostConf> c = HostConf::Parse(
      "chunk_mb:16, release_after_ms:-1,pin:register,serve_preload:False,"
      "emulate_populate:false,emulate_lock:True,emulate_capacity_mb:64");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pinned.chunk_bytes, 16 * kMiB);
  EXPECT_EQ(c->pinned.release_after_ms, -1);
  EXPECT_TRUE(c->register_pages);
  EXPECT_FALSE(c->serve_preload);
  EXPECT_FALSE(c->emulation.populate);
  EXPECT_TRUE(c->emulation.lock);
  EXPECT_EQ(c->emulation.capacity_bytes, 64 * kMiB);
  absl::StatusOr<HostConf> d = HostConf::Parse("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->pinned.chunk_bytes, 64 * kMiB);
  EXPECT_TRUE(d->serve_preload);
}

TEST(HostConfTest, ErrorsNameTheKey) {
  for (const char* bad : {"chunk_mb:0", "chunk_mb:x", "pin:mlock",
                          "serve_preload:maybe", "release_after_ms:-2"}) {
    absl::StatusOr<HostConf> c = HostConf::Parse(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << bad;
    std::string key(bad, strchr(bad, ':') - bad);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("'" + key + "'"));
  }
  EXPECT_THAT(std::string(HostConf::Parse("nope:1").status().message()),
              HasSubstr("unknown key 'nope'"));
}

}  // namespace
}  // namespace fragfree
