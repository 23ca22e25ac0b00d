// Unit tests of DeviceAllocator's policy on the host backend: stream-ordered
// reuse, record_stream and fences (with events held in flight), reclaim instead
// of OOM, memory limits, empty_cache, bad pointers, fault injection with
// nothing left half-mapped, and stats.
#include "allocator/device_allocator.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "allocator/obs/snapshot.h"
#include "allocator/phys/fault_injecting_backend.h"
#include "allocator/phys/host_backend.h"
#include "allocator/stream/host_event_source.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kPage = 64 << 10;
constexpr StreamHandle kS1 = 0x100, kS2 = 0x200;

struct Fixture {
  std::unique_ptr<DeviceAllocator> a;
  ManualEventSource* events = nullptr;
  FaultInjectingBackend* faults = nullptr;
};

Fixture Make(size_t pages, Options o = Options()) {
  Fixture f;
  auto host = *HostBackend::Create(pages * kPage, kPage);
  auto faults = std::make_unique<FaultInjectingBackend>(std::move(host));
  auto events = std::make_unique<ManualEventSource>();
  f.faults = faults.get();
  f.events = events.get();
  f.a = *DeviceAllocator::Create(0, o, std::move(faults), std::move(events));
  return f;
}

TEST(DeviceAllocator, SizeZeroReturnsNullWithoutError) {
  Fixture f = Make(4);
  absl::StatusOr<void*> p = f.a->Malloc(0, kS1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, nullptr);
  EXPECT_TRUE(f.a->Free(nullptr).ok());
}

TEST(DeviceAllocator, SameStreamReusesAtOnce) {
  Fixture f = Make(4);
  void* p = *f.a->Malloc(10000, kS1);
  ASSERT_TRUE(f.a->Free(p).ok());
  EXPECT_EQ(*f.a->Malloc(10000, kS1), p);
  EXPECT_EQ(f.events->records(), 0) << "the hot path must not record events";
}

// The per-call CPU timing counts only when time_calls is on; off (the
// default), alloc_cpu_ns and alloc_cpu_calls stay 0 rather than undercount.
TEST(DeviceAllocator, CallTimingCountsOnlyWhenOn) {
  for (const bool on : {false, true}) {
    Options o;
    o.time_calls = on;
    Fixture f = Make(4, o);
    void* p = *f.a->Malloc(10000, kS1);
    ASSERT_TRUE(f.a->Free(p).ok());
    const DeviceStats s = f.a->GetStats();
    EXPECT_EQ(s.alloc_cpu_calls, on ? 2 : 0) << "time_calls " << on;
    if (on) {
      EXPECT_GE(s.alloc_cpu_ns, 0);
    } else {
      EXPECT_EQ(s.alloc_cpu_ns, 0);
    }
  }
}

// A small freed block waits whole in its arena's quick cache for the next
// request of its size on its stream; everyone else sees free memory.
TEST(DeviceAllocatorQuickCache, KeepsASmallFreedBlockWholeForItsSize) {
  Fixture f = Make(4);
  void* a = *f.a->Malloc(4096, kS1);
  void* b = *f.a->Malloc(4096, kS1);
  ASSERT_TRUE(f.a->Free(a).ok());
  DeviceStats s = f.a->GetStats();
  EXPECT_EQ(s.active_bytes.pool[kPoolAll].current, 4096);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].current, 4096);
  EXPECT_EQ(s.cached_free_bytes, int64_t(kPage - 4096));
  bool seen = false;
  for (const ArenaView& arena : f.a->Arenas()) {
    for (const BlockView& v : arena.blocks) {
      if (v.addr != reinterpret_cast<uintptr_t>(a)) continue;
      seen = true;
      EXPECT_EQ(v.state, BlockState::kFree);
      EXPECT_EQ(v.size, 4096u) << "kept whole, not coalesced";
    }
  }
  EXPECT_TRUE(seen);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  EXPECT_EQ(*f.a->Malloc(4000, kS1), a);  // same block size: 4096
  EXPECT_EQ(f.a->AllocationSize(a), 4000u);
  ASSERT_TRUE(f.a->Free(b).ok());
  EXPECT_NE(*f.a->Malloc(4096, kS2), b) << "another stream's free block";
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// Cached blocks never make a request fail: they are released (coalesced, their
// pages reclaimable) before the engine gives up.
TEST(DeviceAllocatorQuickCache, IsDrainedBeforeARequestFails) {
  Fixture f = Make(4);
  std::vector<void*> blocks;
  size_t total = 0;
  for (size_t k = 1; total + 512 * k <= 4 * kPage; ++k) {
    blocks.push_back(*f.a->Malloc(512 * k, kS1));  // distinct sizes: all cached
    total += 512 * k;
  }
  for (void* p : blocks) ASSERT_TRUE(f.a->Free(p).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  absl::StatusOr<void*> big = f.a->Malloc(3 * kPage, kS2);
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  ASSERT_TRUE(f.a->Free(*big).ok());
  ASSERT_TRUE(f.a->EmptyCache().ok());
  EXPECT_EQ(f.a->GetStats().reserved_bytes.pool[kPoolAll].current, 0);
}

// A retired stream's arena is released once its blocks are back, cached ones
// included: retiring drains its quick cache and caches nothing more.
TEST(DeviceAllocatorQuickCache, RetiredStreamsArenaIsReleasedWithCachedBlocks) {
  Fixture f = Make(4);
  void* a = *f.a->Malloc(4096, kS1);
  void* b = *f.a->Malloc(8192, kS1);
  ASSERT_TRUE(f.a->Free(a).ok());  // cached
  ASSERT_TRUE(f.a->RetireStream(kS1).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  EXPECT_EQ(f.a->GetStats().num_arenas, 1);  // b is still live
  ASSERT_TRUE(f.a->Free(b).ok());  // not cached: the arena empties and goes
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  DeviceStats s = f.a->GetStats();
  EXPECT_EQ(s.num_arenas, 0);
  EXPECT_EQ(s.reserved_bytes.pool[kPoolAll].current, 0);
  void* c = *f.a->Malloc(4096, kS2);  // the slot and the pages are reused
  ASSERT_TRUE(f.a->Free(c).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

TEST(DeviceAllocator, OtherStreamWaitsForTheFreeingStreamsWork) {
  Fixture f = Make(2);
  void* p = *f.a->Malloc(2 * kPage, kS1);
  ASSERT_TRUE(f.a->Free(p).ok());
  // kS2 needs those pages. Their last use on kS1 is in flight, so fragfree must
  // fence kS1 and wait before unmapping them.
  absl::StatusOr<void*> q = f.a->Malloc(2 * kPage, kS2);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_GE(f.events->synchronizes(), 1);
  DeviceStats s = f.a->GetStats();
  EXPECT_EQ(s.pages_remapped, 2);
  // Reclaim-before-grow took them, waiting (Note [Reclaim before grow]): no
  // allocation retry was needed.
  EXPECT_EQ(s.num_alloc_retries, 0);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// Two 4-page holes between 1-page blocks (y and w, returned): the program's
// high water is 10 pages, 2 are in use and 8 are cached.
std::pair<void*, void*> MakeTwoHoles(Fixture& f) {
  void* x = *f.a->Malloc(4 * kPage, kS1);
  void* y = *f.a->Malloc(kPage, kS1);
  void* z = *f.a->Malloc(4 * kPage, kS1);
  void* w = *f.a->Malloc(kPage, kS1);
  EXPECT_TRUE(f.a->Free(x).ok());
  EXPECT_TRUE(f.a->Free(z).ok());
  return {y, w};
}

// Past the slack, a request moves cached pages while moving has taken no more
// than move_time_budget of the recent time: with 0, the first request that
// needs pages moves them, and the next one, the moves' time now on the meter,
// creates its pages instead (more memory, no driver time on moves); with 1
// (no budget) it moves them too; on either of move_clock's clocks. Note [Move
// time budget] in docs/design.md.
TEST(DeviceAllocator, MovesStopOnceTheyHaveSpentTheirTimeBudget) {
  for (const auto& [budget, clock] :
       {std::pair{0.0, Options::MoveClock::kWall},
        std::pair{1.0, Options::MoveClock::kWall},
        std::pair{0.0, Options::MoveClock::kCpu},
        std::pair{1.0, Options::MoveClock::kCpu}}) {
    Options o;
    o.move_time_budget = budget;
    o.move_clock = clock;
    Fixture f = Make(64, o);
    auto [y, w] = MakeTwoHoles(f);
    // 6 pages fit no hole: mapping 6 more would be far past 1.03 x the high
    // water, and nothing has moved yet, so the holes' pages move.
    void* p = *f.a->Malloc(6 * kPage, kS1);
    const DeviceStats first = f.a->GetStats();
    EXPECT_EQ(first.pages_remapped, 6) << "budget " << budget;
    // 6 more pages: 2 cached pages are left in the holes.
    void* q = *f.a->Malloc(6 * kPage, kS1);
    const DeviceStats second = f.a->GetStats();
    const int64_t reserved = second.reserved_bytes.pool[kPoolAll].current;
    // The meter's time is in the stats, with the pages the budget made.
    EXPECT_GT(first.move_ns, 0);
    EXPECT_EQ(first.move_budget_pages, 0);
    if (budget == 0.0) {
      EXPECT_EQ(second.pages_remapped, 6) << "moved past its budget";
      EXPECT_EQ(reserved, int64_t(16 * kPage));
      EXPECT_EQ(second.move_budget_pages, 6);
      EXPECT_EQ(second.move_ns, first.move_ns);
    } else {
      EXPECT_EQ(second.pages_remapped, 8) << "no budget: the rest moved";
      EXPECT_EQ(reserved, int64_t(14 * kPage));
      EXPECT_EQ(second.move_budget_pages, 0);
      EXPECT_GT(second.move_ns, first.move_ns);
    }
    for (void* b : {y, w, p, q}) ASSERT_TRUE(f.a->Free(b).ok());
    ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  }
}

// The default budget (0): once a page has moved, a request past the slack
// creates its pages while the device has room, and when it has none the
// cached pages move anyway: the budget never turns a request that fits into
// an OOM. Note [Move time budget] in docs/design.md.
TEST(DeviceAllocator, UnderTheCapPagesMoveWhateverTheBudget) {
  ASSERT_EQ(Options().move_time_budget, 0.0);
  Fixture f = Make(16);
  auto [y, w] = MakeTwoHoles(f);
  void* p = *f.a->Malloc(6 * kPage, kS1);  // nothing has moved yet: moves 6
  EXPECT_EQ(f.a->GetStats().pages_remapped, 6);
  // 10 pages mapped, 2 of them cached. The meter now holds the moves' time,
  // so 6 more pages are created: 16, the whole device.
  void* q = *f.a->Malloc(6 * kPage, kS1);
  DeviceStats s = f.a->GetStats();
  EXPECT_EQ(s.pages_remapped, 6);
  EXPECT_EQ(s.move_budget_pages, 6);
  EXPECT_EQ(s.reserved_bytes.pool[kPoolAll].current, int64_t(16 * kPage));
  // The device is full; freeing q caches its 6 pages beside the 2 in the
  // holes. No 8 mapped pages are contiguous and none can be created, so an
  // 8-page request is served by moving cached pages, past the budget.
  ASSERT_TRUE(f.a->Free(q).ok());
  void* r = *f.a->Malloc(8 * kPage, kS1);
  s = f.a->GetStats();
  EXPECT_NE(r, nullptr);
  EXPECT_GT(s.pages_remapped, 6) << "under the cap pages must move";
  EXPECT_LE(s.reserved_bytes.pool[kPoolAll].current, int64_t(16 * kPage));
  EXPECT_EQ(s.num_ooms, 0);
  for (void* b : {y, w, p, r}) ASSERT_TRUE(f.a->Free(b).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// With page_size_bytes a multiple of the backend's granularity (Note [Page
// size and handle size] in docs/design.md), a page is one handle of that size:
// created, mapped, moved and released whole, the device's memory counted in
// such pages, and a request no contiguous free range holds is still served by
// moving them.
TEST(DeviceAllocator, LargerPagesAreOneHandleEachAndStillMove) {
  constexpr size_t kBig = 4 * kPage;
  Options o;
  o.page_size_bytes = kBig;
  Fixture f = Make(32, o);  // room for 8 pages of kBig
  std::vector<void*> b;
  for (int i = 0; i < 8; ++i) {
    b.push_back(*f.a->Malloc(kBig, kS1));
    memset(b.back(), i + 1, kBig);
  }
  EXPECT_EQ(f.faults->Calls(BackendOp::kCreate), 8);
  EXPECT_EQ(f.a->GetStats().reserved_bytes.pool[kPoolAll].current,
            int64_t(8 * kBig));
  EXPECT_TRUE(absl::IsResourceExhausted(f.a->Malloc(kPage, kS1).status()))
      << "the device holds 8 pages of 4 x the granularity, all in use";
  for (int i = 1; i < 8; i += 2) ASSERT_TRUE(f.a->Free(b[i]).ok());
  // No 3 free pages are adjacent and none can be created: pages move.
  absl::StatusOr<void*> r = f.a->Malloc(3 * kBig, kS1);
  ASSERT_TRUE(r.ok()) << r.status();
  memset(*r, 0x7f, 3 * kBig);
  DeviceStats s = f.a->GetStats();
  EXPECT_GE(s.pages_remapped, 2);
  EXPECT_EQ(f.faults->Calls(BackendOp::kCreate), 8);
  for (int i = 0; i < 8; i += 2) {
    const auto* bytes = static_cast<const unsigned char*>(b[i]);
    EXPECT_TRUE(std::all_of(bytes, bytes + kBig,
                            [&](unsigned char c) { return c == i + 1; }))
        << "block " << i << " changed when pages moved";
  }
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  for (int i = 0; i < 8; i += 2) ASSERT_TRUE(f.a->Free(b[i]).ok());
  ASSERT_TRUE(f.a->Free(*r).ok());
  ASSERT_TRUE(f.a->EmptyCache().ok());
  s = f.a->GetStats();
  EXPECT_EQ(s.reserved_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(f.faults->Calls(BackendOp::kRelease), 8);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// A page size the backend cannot make is refused when the device's allocator
// is made, naming the option, before any memory is touched.
TEST(DeviceAllocator, PageSizeNotAMultipleOfTheGranularityIsRefused) {
  Options o;
  o.page_size_bytes = 3 * kPage / 2;
  absl::StatusOr<std::unique_ptr<DeviceAllocator>> a =
      DeviceAllocator::Create(0, o, *HostBackend::Create(8 * kPage, kPage),
                              std::make_unique<ManualEventSource>());
  ASSERT_TRUE(absl::IsInvalidArgument(a.status())) << a.status();
  EXPECT_NE(a.status().message().find("page_size_mb"), std::string::npos);
  EXPECT_NE(a.status().message().find("granularity (64.00 KiB)"),
            std::string::npos)
      << a.status();
}

TEST(DeviceAllocator, CompletedFencesLetPagesMoveWithoutWaiting) {
  Fixture f = Make(2);
  void* p = *f.a->Malloc(2 * kPage, kS1);
  ASSERT_TRUE(f.a->Free(p).ok());
  void* small = *f.a->Malloc(512, kS2);  // slow path: records a fence on kS1
  (void)small;
  f.events->CompleteAll();
  int64_t syncs = f.events->synchronizes();
  ASSERT_TRUE(f.a->Free(small).ok());
  absl::StatusOr<void*> q = f.a->Malloc(kPage, kS2);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(f.events->synchronizes(), syncs);
}

TEST(DeviceAllocator, RecordStreamDefersReuseUntilTheStreamIsDone) {
  Fixture f = Make(8);
  void* p = *f.a->Malloc(kPage, kS1);
  ASSERT_TRUE(f.a->RecordStream(p, kS2).ok());
  ASSERT_TRUE(f.a->Free(p).ok());
  EXPECT_EQ(f.events->records(), 1);
  void* q = *f.a->Malloc(kPage, kS1);
  EXPECT_NE(q, p) << "reused while kS2 may still use it";
  EXPECT_EQ(f.a->GetStats().active_bytes.pool[kPoolAll].current,
            int64_t(2 * kPage));
  f.events->CompleteAll();
  ASSERT_TRUE(f.a->Free(q).ok());
  void* r = *f.a->Malloc(kPage, kS1);  // processes the completed pending free
  EXPECT_TRUE(r == p || r == q);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// Memory freed while another stream may still use it is waited for before a
// request fails, as PyTorch's allocator synchronizes its outstanding events
// before an OOM: the request succeeds, and in the freed block's place.
TEST(DeviceAllocator, PendingFreesAreWaitedForBeforeAnOom) {
  Fixture f = Make(8);
  void* p = *f.a->Malloc(6 * kPage, kS1);
  ASSERT_TRUE(f.a->RecordStream(p, kS2).ok());
  ASSERT_TRUE(f.a->Free(p).ok());
  const int64_t syncs = f.events->synchronizes();
  void* small = *f.a->Malloc(kPage, kS1);  // fits beside the pending block
  EXPECT_EQ(f.events->synchronizes(), syncs) << "waited with room to spare";
  absl::StatusOr<void*> q = f.a->Malloc(6 * kPage, kS1);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_GT(f.events->synchronizes(), syncs);
  EXPECT_EQ(f.a->GetStats().num_ooms, 0);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  ASSERT_TRUE(f.a->Free(*q).ok());
  ASSERT_TRUE(f.a->Free(small).ok());
}

// During graph capture nothing is waited for (an event cannot be synchronized
// while its stream captures): the request fails and leaves the pending free.
TEST(DeviceAllocator, PendingFreesAreNotWaitedForDuringCapture) {
  Fixture f = Make(8);
  void* p = *f.a->Malloc(6 * kPage, kS1);
  ASSERT_TRUE(f.a->RecordStream(p, kS2).ok());
  ASSERT_TRUE(f.a->Free(p).ok());
  const PoolId pool{1, 9};
  ASSERT_TRUE(
      f.a->BeginAllocateToPool(pool, [](StreamHandle s) { return s == kS1; })
          .ok());
  f.events->SetCapturing(kS1, true);
  const int64_t syncs = f.events->synchronizes();
  EXPECT_TRUE(absl::IsResourceExhausted(f.a->Malloc(6 * kPage, kS1).status()));
  EXPECT_EQ(f.events->synchronizes(), syncs);
  f.events->SetCapturing(kS1, false);
  ASSERT_TRUE(f.a->EndAllocateToPool(pool).ok());
  ASSERT_TRUE(f.a->ReleasePool(pool).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  EXPECT_TRUE(f.a->Malloc(6 * kPage, kS1).ok());
}

// FreeOnStream (cudaFreeAsync's free): on another stream it is RecordStream
// then Free, under one lock; on the allocation stream a plain Free; a pointer
// this device does not own changes and counts nothing.
TEST(DeviceAllocator, FreeOnStreamIsRecordStreamThenFree) {
  Fixture f = Make(8);
  void* p = *f.a->Malloc(kPage, kS1);
  bool owned = false;
  ASSERT_TRUE(f.a->FreeOnStream(p, kS2, &owned).ok());
  EXPECT_TRUE(owned);
  EXPECT_EQ(f.events->records(), 1);
  void* q = *f.a->Malloc(kPage, kS1);
  EXPECT_NE(q, p) << "reused while kS2 may still use it";
  f.events->CompleteAll();
  ASSERT_TRUE(f.a->FreeOnStream(q, kS1, &owned).ok());
  EXPECT_TRUE(owned);
  EXPECT_EQ(f.events->records(), 1) << "a same-stream free records no event";
  void* r = *f.a->Malloc(kPage, kS1);
  EXPECT_TRUE(r == p || r == q);

  const DeviceStats before = f.a->GetStats();
  int foreign = 0;
  ASSERT_TRUE(f.a->FreeOnStream(&foreign, kS2, &owned).ok());
  EXPECT_FALSE(owned);
  void* freed = r == p ? q : p;
  ASSERT_TRUE(f.a->FreeOnStream(freed, kS2, &owned).ok());
  EXPECT_FALSE(owned) << "freed already: not a live allocation";
  const DeviceStats after = f.a->GetStats();
  EXPECT_EQ(after.invalid_frees, before.invalid_frees);
  EXPECT_EQ(after.active_bytes.pool[kPoolAll].current,
            before.active_bytes.pool[kPoolAll].current);
  EXPECT_EQ(f.events->records(), 1);
  ASSERT_TRUE(f.a->Free(r).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// A pending free whose events are not complete stays pending however many
// times pending frees are processed (each Malloc processes them).
TEST(DeviceAllocator, PendingFreeWaitsAcrossRepeatedProcessing) {
  Fixture f = Make(8);
  void* p = *f.a->Malloc(kPage, kS1);
  ASSERT_TRUE(f.a->RecordStream(p, kS2).ok());
  ASSERT_TRUE(f.a->Free(p).ok());
  std::vector<void*> held;
  for (int i = 0; i < 3; ++i) {
    void* q = *f.a->Malloc(kPage, kS1);
    EXPECT_NE(q, p) << "reused while kS2 may still use it (malloc " << i << ")";
    held.push_back(q);
  }
  EXPECT_EQ(f.a->GetStats().active_bytes.pool[kPoolAll].current,
            int64_t(4 * kPage));
  f.events->CompleteAll();
  for (void* q : held) ASSERT_TRUE(f.a->Free(q).ok());
  ASSERT_TRUE(f.a->EmptyCache().ok());
  EXPECT_EQ(f.a->GetStats().active_bytes.pool[kPoolAll].current, 0);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// `active` and `active_bytes` against a model that moves them as PyTorch
// does: up with every allocation, down when a free's last use is done (at
// once, or for a free after record_stream when the other stream's work is
// done and pending frees are next processed), per pool and for "all", with
// peaks and cumulative counts across ResetPeakStats and ResetAccumulatedStats
// taken while frees are pending.
TEST(DeviceAllocator, ActiveStatsMoveAsAllocatedPlusPendingFrees) {
  struct ModelStat {
    int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  };
  // [stat: count, bytes][pool: all, small, large]
  ModelStat model[2][3];
  auto add = [&](int pool, int64_t bytes) {
    const int64_t deltas[2] = {1, bytes};
    for (int stat = 0; stat < 2; ++stat) {
      for (int p : {int(kPoolAll), pool}) {
        ModelStat& m = model[stat][p];
        m.current += deltas[stat];
        m.allocated += deltas[stat];
        m.peak = std::max(m.peak, m.current);
      }
    }
  };
  auto remove = [&](int pool, int64_t bytes) {
    const int64_t deltas[2] = {1, bytes};
    for (int stat = 0; stat < 2; ++stat) {
      for (int p : {int(kPoolAll), pool}) {
        model[stat][p].current -= deltas[stat];
        model[stat][p].freed += deltas[stat];
      }
    }
  };
  struct Live {
    void* ptr;
    int pool;
    int64_t bytes;
  };
  struct Pending {
    int pool;
    int64_t bytes;
    bool done;  // the other stream's work completed
  };
  Fixture f = Make(1024);
  std::vector<Live> live;
  std::vector<Pending> pending;
  std::mt19937_64 rng(3);
  for (int step = 0; step < 3000; ++step) {
    const int op = int(rng() % 100);
    if (op < 40 || live.empty()) {
      if (live.size() >= 12) continue;
      // The Malloc first returns the pending frees whose work is done.
      for (auto it = pending.begin(); it != pending.end();) {
        if (!it->done) {
          ++it;
          continue;
        }
        remove(it->pool, it->bytes);
        it = pending.erase(it);
      }
      const bool small = rng() % 2 == 0;
      const size_t size = small ? 512 * (1 + rng() % 128)
                                : (size_t{1} << 20) + 512 * (1 + rng() % 4096);
      const int pool = small ? kPoolSmall : kPoolLarge;
      const int64_t before = f.a->GetStats().allocated_bytes.pool[pool].current;
      absl::StatusOr<void*> p = f.a->Malloc(size, kS1);
      ASSERT_TRUE(p.ok()) << p.status();
      const int64_t bytes =
          f.a->GetStats().allocated_bytes.pool[pool].current - before;
      live.push_back({*p, pool, bytes});
      add(pool, bytes);
    } else if (op < 70) {
      const size_t k = rng() % live.size();
      const Live l = live[k];
      live.erase(live.begin() + k);
      if (rng() % 2 == 0) {
        ASSERT_TRUE(f.a->Free(l.ptr).ok());
        remove(l.pool, l.bytes);
      } else {
        ASSERT_TRUE(f.a->RecordStream(l.ptr, kS2).ok());
        ASSERT_TRUE(f.a->Free(l.ptr).ok());
        pending.push_back({l.pool, l.bytes, false});
      }
    } else if (op < 80) {
      f.events->CompleteAll();
      for (Pending& p : pending) p.done = true;
    } else if (op < 90) {
      f.a->ResetPeakStats();
      for (auto& stat : model) {
        for (ModelStat& m : stat) m.peak = m.current;
      }
    } else {
      f.a->ResetAccumulatedStats();
      for (auto& stat : model) {
        for (ModelStat& m : stat) m.allocated = m.freed = 0;
      }
    }
    const DeviceStats s = f.a->GetStats();
    const StatArray* arrays[2] = {&s.active, &s.active_bytes};
    for (int stat = 0; stat < 2; ++stat) {
      for (int p : {kPoolAll, kPoolSmall, kPoolLarge}) {
        const Stat& got = arrays[stat]->pool[p];
        const ModelStat& want = model[stat][p];
        ASSERT_EQ(got.current, want.current) << step << " " << stat << p;
        ASSERT_EQ(got.peak, want.peak) << step << " " << stat << p;
        ASSERT_EQ(got.allocated, want.allocated) << step << " " << stat << p;
        ASSERT_EQ(got.freed, want.freed) << step << " " << stat << p;
      }
    }
  }
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

TEST(DeviceAllocator, BadPointersAreClearErrorsAndChangeNothing) {
  Fixture f = Make(4);
  void* p = *f.a->Malloc(4096, kS1);
  int x = 0;
  absl::Status unknown = f.a->Free(&x);
  EXPECT_TRUE(absl::IsInvalidArgument(unknown));
  EXPECT_NE(unknown.message().find("not allocated by fragfree"),
            std::string::npos)
      << unknown;
  absl::Status interior = f.a->Free(static_cast<char*>(p) + 512);
  EXPECT_NE(interior.message().find("inside the live allocation"),
            std::string::npos)
      << interior;
  ASSERT_TRUE(f.a->Free(p).ok());
  absl::Status twice = f.a->Free(p);
  EXPECT_NE(twice.message().find("double free"), std::string::npos) << twice;
  EXPECT_EQ(f.a->GetStats().invalid_frees, 3);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  EXPECT_FALSE(f.a->RecordStream(&x, kS2).ok());
}

TEST(DeviceAllocator, AbsurdSizesAreOom) {
  Fixture f = Make(4);
  absl::StatusOr<void*> p = f.a->Malloc(size_t{1} << 50, kS1);
  EXPECT_TRUE(absl::IsResourceExhausted(p.status()));
  EXPECT_NE(p.status().message().find("larger than the memory limit"),
            std::string::npos)
      << p.status();
  EXPECT_EQ(f.a->GetStats().num_ooms, 1);
  EXPECT_EQ(f.a->last_oom().requested_bytes, size_t{1} << 50);
}

TEST(DeviceAllocator, MemoryLimitAndFraction) {
  Fixture f = Make(8);
  ASSERT_TRUE(f.a->SetMemoryLimit(2 * kPage).ok());
  EXPECT_FALSE(f.a->Malloc(3 * kPage, kS1).ok());
  EXPECT_TRUE(f.a->Malloc(2 * kPage, kS1).ok());
  ASSERT_TRUE(f.a->SetMemoryLimit(0).ok());
  ASSERT_TRUE(f.a->SetMemoryFraction(0.5).ok());
  EXPECT_EQ(f.a->memory_limit(), 4 * kPage);
  EXPECT_FALSE(f.a->SetMemoryFraction(1.5).ok());
}

TEST(DeviceAllocator, EmptyCacheReturnsEveryFreePage) {
  Fixture f = Make(8);
  void* a = *f.a->Malloc(3 * kPage, kS1);
  void* b = *f.a->Malloc(100, kS2);
  ASSERT_TRUE(f.a->Free(a).ok());
  ASSERT_TRUE(f.a->EmptyCache().ok());
  DeviceStats s = f.a->GetStats();
  EXPECT_EQ(s.reserved_bytes.pool[kPoolAll].current, int64_t(kPage));
  EXPECT_EQ(s.reserved_bytes.pool[kPoolSmall].current, int64_t(kPage));
  EXPECT_EQ(s.idle_page_bytes.current, 0);
  ASSERT_TRUE(f.a->Free(b).ok());
  ASSERT_TRUE(f.a->EmptyCache().ok());
  EXPECT_EQ(f.a->GetStats().reserved_bytes.pool[kPoolAll].current, 0);
}

// "all" is the sum of the pools at every moment: its peak is the highest sum,
// not the sum of the pools' peaks.
TEST(DeviceAllocator, AllPoolsPeakIsThePeakOfTheSum) {
  Fixture f = Make(64);
  const size_t kLarge = 2 << 20;      // a large-pool request
  void* p = *f.a->Malloc(4096, kS1);  // small pool
  ASSERT_TRUE(f.a->Free(p).ok());
  void* q = *f.a->Malloc(kLarge, kS1);  // large pool, after p is gone
  DeviceStats s = f.a->GetStats();
  const int64_t large = s.allocated_bytes.pool[kPoolLarge].current;
  EXPECT_EQ(s.allocated_bytes.pool[kPoolSmall].peak, 4096);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolLarge].peak, large);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].current, large);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].peak,
            std::max<int64_t>(large, 4096));
  EXPECT_EQ(s.allocation.pool[kPoolAll].peak, 1);
  EXPECT_EQ(s.allocation.pool[kPoolAll].allocated, 2);
  EXPECT_EQ(s.allocation.pool[kPoolAll].freed, 1);
  void* r = *f.a->Malloc(4096, kS1);  // both pools hold a block now
  s = f.a->GetStats();
  EXPECT_EQ(s.allocation.pool[kPoolAll].peak, 2);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].peak, large + 4096);
  ASSERT_TRUE(f.a->Free(q).ok());
  f.a->ResetPeakStats();  // "all" restarts at what is allocated now
  s = f.a->GetStats();
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].peak, 4096);
  EXPECT_EQ(s.active.pool[kPoolAll].peak, 1);
  ASSERT_TRUE(f.a->Free(r).ok());
  s = f.a->GetStats();
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].peak, 4096);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].freed,
            s.allocated_bytes.pool[kPoolSmall].freed +
                s.allocated_bytes.pool[kPoolLarge].freed);
}

TEST(DeviceAllocator, StatsFollowPyTorchMeanings) {
  Fixture f = Make(32);
  const size_t kLarge = (1 << 20) + 1;
  void* p = *f.a->Malloc(1000, kS1);    // small pool, 1024 B block
  void* q = *f.a->Malloc(kLarge, kS1);  // large pool
  DeviceStats s = f.a->GetStats();
  EXPECT_EQ(s.allocation.pool[kPoolAll].current, 2);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolSmall].current, 1024);
  EXPECT_EQ(s.requested_bytes.pool[kPoolAll].current, int64_t(1000 + kLarge));
  EXPECT_EQ(s.reserved_bytes.pool[kPoolSmall].current, int64_t(kPage));
  EXPECT_EQ(s.reserved_bytes.pool[kPoolLarge].current, int64_t(17 * kPage));
  ASSERT_TRUE(f.a->Free(p).ok());
  ASSERT_TRUE(f.a->Free(q).ok());
  s = f.a->GetStats();
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].peak,
            int64_t(1024 + kLarge + 511));
  EXPECT_EQ(s.allocation.pool[kPoolAll].allocated, 2);
  EXPECT_EQ(s.allocation.pool[kPoolAll].freed, 2);
  f.a->ResetPeakStats();
  f.a->ResetAccumulatedStats();
  s = f.a->GetStats();
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].peak, 0);
  EXPECT_EQ(s.allocation.pool[kPoolAll].allocated, 0);
  EXPECT_GT(s.cached_free_bytes, 0);
  std::string json = StatsToJson(s);
  EXPECT_NE(json.find("\"allocated_bytes.all.current\":0"), std::string::npos);
  EXPECT_NE(json.find("\"fragmentation.u_alloc\""), std::string::npos);
}

TEST(DeviceAllocator, RequestSizesFeedTheBucketAdvisor) {
  Options o;
  o.bucket_sample = 1;
  Fixture f = Make(32, o);
  std::vector<void*> held;
  for (int i = 0; i < 10; ++i) held.push_back(*f.a->Malloc(1000, kS1));
  for (int i = 0; i < 10; ++i) held.push_back(*f.a->Malloc(1100, kS1));
  held.push_back(*f.a->Malloc(5000, kS1));
  // A failed request is part of the workload too.
  EXPECT_FALSE(f.a->Malloc(size_t{1} << 50, kS1).ok());
  SizeHistogram::Info info;
  std::vector<SizeCount> sizes = f.a->RequestSizes(&info);
  EXPECT_EQ(info.samples, 22u);
  EXPECT_EQ(info.sample_every, 1u);
  BucketAdvisorOptions advisor;
  advisor.num_buckets = 2;
  advisor.max_size = f.a->memory_limit();
  // docs/oom.md's hand-checked example, from the engine's own histogram.
  BucketAdvice a = AdviseBuckets(sizes, advisor);
  EXPECT_EQ(a.buckets, (std::vector<size_t>{1536, 5120}));
  EXPECT_EQ(a.conf, "round_buckets:[1536,5K]");
  EXPECT_EQ(a.unbucketed_requests, 1u);
  for (void* p : held) ASSERT_TRUE(f.a->Free(p).ok());
  f.a->ResetAccumulatedStats();
  EXPECT_TRUE(f.a->RequestSizes().empty());

  o.bucket_sample = 0;
  Fixture off = Make(4, o);
  ASSERT_TRUE(off.a->Free(*off.a->Malloc(1000, kS1)).ok());
  EXPECT_TRUE(off.a->RequestSizes().empty());
}

// Every backend call that can fail, failed at every position of a sequence:
// the request fails cleanly, nothing is left half-mapped or leaked, and the
// next request works once the fault is gone.
TEST(DeviceAllocator, SurvivesAFaultAtEveryBackendCall) {
  const BackendOp ops[] = {BackendOp::kReserveVa, BackendOp::kCreate,
                           BackendOp::kMap, BackendOp::kSetAccess,
                           BackendOp::kUnmap};
  int injected = 0;
  for (BackendOp op : ops) {
    for (int nth = 1; nth <= 6; ++nth) {
      Fixture f = Make(4);
      f.faults->FailCalls(op, nth, 1, absl::InternalError("injected fault"));
      std::vector<void*> live;
      for (int i = 0; i < 12; ++i) {
        absl::StatusOr<void*> p =
            f.a->Malloc((i % 3 + 1) * kPage / 2, i % 2 ? kS1 : kS2);
        if (p.ok()) {
          memset(*p, i, (i % 3 + 1) * kPage / 2);
          live.push_back(*p);
        }
        ASSERT_TRUE(f.a->CheckInvariants().ok())
            << "op " << int(op) << " call " << nth << ": "
            << f.a->CheckInvariants();
        if (live.size() > 2) {
          ASSERT_TRUE(f.a->Free(live.front()).ok());
          live.erase(live.begin());
        }
      }
      injected += int(f.faults->FaultsInjected());
      f.faults->ClearFaults();
      for (void* p : live) ASSERT_TRUE(f.a->Free(p).ok());
      ASSERT_TRUE(f.a->EmptyCache().ok());
      EXPECT_TRUE(f.a->Malloc(kPage, kS1).ok());
      ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
    }
  }
  EXPECT_GT(injected, 10);
}

TEST(DeviceAllocator, ThreadsOnManyStreams) {
  Options o;
  auto host = *HostBackend::Create(256 * kPage, kPage);
  auto a = *DeviceAllocator::Create(0, o, std::move(host),
                                    std::make_unique<HostEventSource>());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> mine;
      uint64_t x = t + 1;
      for (int i = 0; i < 20000; ++i) {
        x = x * 6364136223846793005ull + 1;
        if (mine.size() < 16 && (x >> 60) < 10) {
          absl::StatusOr<void*> p =
              a->Malloc(512 + (x >> 40) % (3 * kPage), StreamHandle(t % 3));
          if (p.ok()) mine.push_back(*p);
        } else if (!mine.empty()) {
          ASSERT_TRUE(a->Free(mine.back()).ok());
          mine.pop_back();
        }
      }
      for (void* p : mine) ASSERT_TRUE(a->Free(p).ok());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(a->CheckInvariants().ok()) << a->CheckInvariants();
  EXPECT_EQ(a->GetStats().allocated_bytes.pool[kPoolAll].current, 0);
}

}  // namespace
}  // namespace fragfree

namespace fragfree {
namespace {

TEST(DeviceAllocatorGraphPools, PoolPagesStayWithTheGraphUntilReleased) {
  Fixture f = Make(4);
  const PoolId pool{1, 7};
  ASSERT_TRUE(
      f.a->BeginAllocateToPool(pool, [](StreamHandle s) { return s == kS1; })
          .ok());
  f.events->SetCapturing(kS1, true);
  void* p = *f.a->Malloc(4 * kPage, kS1);  // captured: from the pool
  ASSERT_TRUE(f.a->Free(p).ok());          // freed inside the capture
  EXPECT_EQ(f.events->records(), 0) << "no event may be recorded in capture";
  f.events->SetCapturing(kS1, false);
  ASSERT_TRUE(f.a->EndAllocateToPool(pool).ok());
  // The graph may replay: its memory is not handed to anyone else.
  EXPECT_FALSE(f.a->Malloc(kPage, kS2).ok());
  ASSERT_TRUE(f.a->ReleasePool(pool).ok());
  EXPECT_TRUE(f.a->Malloc(kPage, kS2).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  EXPECT_FALSE(f.a->EndAllocateToPool(pool).ok());
  EXPECT_FALSE(f.a->ReleasePool({9, 9}).ok());
}

TEST(DeviceAllocatorSnapshot, SegmentsAreMappedRangesTiledByBlocks) {
  Fixture f = Make(8);
  void* a = *f.a->Malloc(kPage + 512, kS1);
  void* b = *f.a->Malloc(3000, kS2);
  ASSERT_TRUE(f.a->Free(a).ok());
  (void)b;
  std::vector<ArenaView> arenas = f.a->Arenas();
  std::string json = SnapshotToJson(0, arenas);
  EXPECT_NE(json.find("\"segments\":[{"), std::string::npos) << json;
  EXPECT_NE(json.find("\"state\":\"active_allocated\""), std::string::npos);
  EXPECT_NE(json.find("\"device_traces\":[[]]"), std::string::npos);
  EXPECT_NE(json.find("\"segment_type\":\"small\""), std::string::npos);
  // Every segment's blocks add up to its total_size.
  size_t pos = 0;
  int segments = 0;
  while ((pos = json.find("\"total_size\":", pos)) != std::string::npos) {
    size_t total = std::stoull(json.substr(pos + 13));
    size_t end = json.find("}]}", pos);
    size_t sum = 0, q = pos;
    while ((q = json.find("\"size\":", q)) != std::string::npos && q < end) {
      sum += std::stoull(json.substr(q + 7));
      ++q;
    }
    EXPECT_EQ(sum, total) << json;
    ++segments;
    ++pos;
  }
  EXPECT_EQ(segments, 2);
}

}  // namespace
}  // namespace fragfree

namespace fragfree {
namespace {

TEST(DeviceAllocatorStreams, RetiredStreamIsNeverTouchedAgain) {
  Fixture f = Make(4);
  void* a = *f.a->Malloc(2 * kPage, kS1);
  void* b = *f.a->Malloc(kPage, kS2);
  ASSERT_TRUE(f.a->RecordStream(b, kS1).ok());
  ASSERT_TRUE(f.a->Free(a).ok());
  ASSERT_TRUE(f.a->RetireStream(kS1).ok());
  int64_t records = f.events->records_on(kS1);
  // kS1's freed pages serve kS2 without any event on kS1, and b's use by kS1
  // needs no event either.
  ASSERT_TRUE(f.a->Free(b).ok());
  absl::StatusOr<void*> c = f.a->Malloc(3 * kPage, kS2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(f.events->records_on(kS1), records);
  // The same handle value, reused by a new stream, starts afresh.
  EXPECT_TRUE(f.a->Malloc(512, kS1).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

}  // namespace
}  // namespace fragfree
