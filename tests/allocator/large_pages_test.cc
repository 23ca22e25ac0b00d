// Unit tests of the second page size (Options::large_page_bytes, Note [Large
// pages] in docs/design.md) on the host backend: large blocks whose size is a
// whole number of large pages take such pages, in arenas of their own; other
// blocks keep the base page; the two sizes share the memory limit, and under
// pressure the unused pages of one are released to make room for the other;
// a request that still fails leaves every live block as it was.
#include <algorithm>
#include <cstring>
#include <vector>

#include "allocator/device_allocator.h"
#include "allocator/phys/fault_injecting_backend.h"
#include "allocator/phys/host_backend.h"
#include "allocator/stream/host_event_source.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kPage = 64 << 10;    // the backend's granularity
constexpr size_t kLarge = 8 * kPage;  // the large page (512 KiB)
constexpr size_t kMiB = size_t{1} << 20;
constexpr StreamHandle kS1 = 0x100, kS2 = 0x200;

struct Fixture {
  std::unique_ptr<DeviceAllocator> a;
  FaultInjectingBackend* faults = nullptr;
};

Fixture Make(size_t capacity, size_t large_page = kLarge) {
  Options o;
  o.large_page_bytes = large_page;
  Fixture f;
  auto faults = std::make_unique<FaultInjectingBackend>(
      *HostBackend::Create(capacity, kPage));
  f.faults = faults.get();
  f.a = *DeviceAllocator::Create(0, o, std::move(faults),
                                 std::make_unique<ManualEventSource>());
  return f;
}

void Fill(void* p, size_t n, int value) { memset(p, value, n); }
bool Holds(const void* p, size_t n, int value) {
  const auto* b = static_cast<const unsigned char*>(p);
  return std::all_of(b, b + n, [&](unsigned char c) { return c == value; });
}

// The page sizes of the arenas holding pages, one entry per arena.
std::vector<size_t> ArenaPageSizes(DeviceAllocator& a) {
  std::vector<size_t> sizes;
  for (const ArenaView& v : a.Arenas()) {
    if (v.mapped_pages > 0) sizes.push_back(v.page_size);
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

TEST(LargePages, WholeLargePagesGoToTheirOwnArenaOtherSizesDoNot) {
  Fixture f = Make(32 * kMiB);
  void* whole = *f.a->Malloc(2 * kMiB, kS1);  // 4 large pages
  EXPECT_EQ(f.faults->Calls(BackendOp::kCreate), 4);
  Fill(whole, 2 * kMiB, 1);
  void* other = *f.a->Malloc(2 * kMiB + kPage, kS1);  // not a whole number
  EXPECT_EQ(f.faults->Calls(BackendOp::kCreate), 4 + 33);
  Fill(other, 2 * kMiB + kPage, 2);
  void* small = *f.a->Malloc(1000, kS1);  // small blocks: the base page
  EXPECT_EQ(f.faults->Calls(BackendOp::kCreate), 4 + 33 + 1);
  EXPECT_EQ(ArenaPageSizes(*f.a), (std::vector<size_t>{kPage, kPage, kLarge}));
  DeviceStats s = f.a->GetStats();
  EXPECT_EQ(s.reserved_bytes.pool[kPoolAll].current,
            int64_t(2 * kMiB + 2 * kMiB + kPage + kPage));
  EXPECT_EQ(s.reserved_bytes.pool[kPoolLarge].current,
            int64_t(4 * kMiB + kPage));
  EXPECT_EQ(s.segment.pool[kPoolLarge].current, 2);
  EXPECT_EQ(s.handles_created, 38);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  EXPECT_TRUE(Holds(whole, 2 * kMiB, 1));
  for (void* p : {whole, other, small}) ASSERT_TRUE(f.a->Free(p).ok());
  // Freed and asked for again: the same block, no page made.
  void* again = *f.a->Malloc(2 * kMiB, kS1);
  EXPECT_EQ(again, whole);
  EXPECT_EQ(f.faults->Calls(BackendOp::kCreate), 38);
  ASSERT_TRUE(f.a->Free(again).ok());
  ASSERT_TRUE(f.a->EmptyCache().ok());
  s = f.a->GetStats();
  EXPECT_EQ(s.reserved_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(s.idle_page_bytes.current, 0);
  EXPECT_EQ(f.faults->Calls(BackendOp::kRelease), 38);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// The device full of one size's cached pages: a request of the other size
// gets its memory by their release, both ways, and what is live stays.
TEST(LargePages, UnderTheCapOneSizeMakesRoomForTheOther) {
  Fixture f = Make(8 * kMiB);
  std::vector<void*> large;
  for (int i = 0; i < 4; ++i) {
    large.push_back(*f.a->Malloc(2 * kMiB, kS1));
    Fill(large.back(), 2 * kMiB, 10 + i);
  }
  ASSERT_TRUE(f.a->Free(large[1]).ok());
  ASSERT_TRUE(f.a->Free(large[2]).ok());
  // 4 MiB of large pages cached; 4 MiB less a page of base pages asked for.
  absl::StatusOr<void*> base = f.a->Malloc(4 * kMiB - kPage, kS2);
  ASSERT_TRUE(base.ok()) << base.status();
  Fill(*base, 4 * kMiB - kPage, 3);
  EXPECT_TRUE(Holds(large[0], 2 * kMiB, 10));
  EXPECT_TRUE(Holds(large[3], 2 * kMiB, 13));
  DeviceStats s = f.a->GetStats();
  EXPECT_LE(s.reserved_bytes.pool[kPoolAll].current, int64_t(8 * kMiB));
  EXPECT_EQ(s.num_ooms, 0);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  // And back: the base pages cached, a whole-large-page request takes their
  // memory.
  ASSERT_TRUE(f.a->Free(*base).ok());
  absl::StatusOr<void*> again = f.a->Malloc(4 * kMiB, kS2);
  ASSERT_TRUE(again.ok()) << again.status();
  Fill(*again, 4 * kMiB, 4);
  EXPECT_TRUE(Holds(large[0], 2 * kMiB, 10));
  EXPECT_TRUE(Holds(large[3], 2 * kMiB, 13));
  EXPECT_EQ(f.a->GetStats().num_ooms, 0);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  for (void* p : {large[0], large[3], *again}) ASSERT_TRUE(f.a->Free(p).ok());
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// A request that cannot be served even with the other size's pages released
// fails as an OOM; the live blocks and their bytes are as they were.
TEST(LargePages, ARequestTooLargeForBothSizesFailsAndKeepsTheLiveBlocks) {
  Fixture f = Make(8 * kMiB);
  void* live_large = *f.a->Malloc(4 * kMiB, kS1);
  Fill(live_large, 4 * kMiB, 5);
  void* live_base = *f.a->Malloc(2 * kMiB + kPage, kS1);
  Fill(live_base, 2 * kMiB + kPage, 6);
  absl::StatusOr<void*> big = f.a->Malloc(2 * kMiB, kS2);  // 1.9 MiB left
  EXPECT_TRUE(absl::IsResourceExhausted(big.status())) << big.status();
  EXPECT_TRUE(Holds(live_large, 4 * kMiB, 5));
  EXPECT_TRUE(Holds(live_base, 2 * kMiB + kPage, 6));
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  EXPECT_EQ(f.a->GetStats().num_ooms, 1);
  // What fits still comes: 1.5 MiB of large pages.
  absl::StatusOr<void*> fits = f.a->Malloc(3 * kLarge, kS2);
  ASSERT_TRUE(fits.ok()) << fits.status();
  for (void* p : {live_large, live_base, *fits}) {
    ASSERT_TRUE(f.a->Free(p).ok());
  }
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
}

// Above a lowered limit, a request of one size has the other size give up its
// unused pages until the pools fit the limit with the request, not only the
// request's own pages: both ways.
TEST(LargePages, AboveALoweredLimitTheOtherSizeGivesUpEnough) {
  {
    Fixture f = Make(32 * kMiB);
    void* p = *f.a->Malloc(4 * kMiB, kS1);  // 8 large pages, then cached
    ASSERT_TRUE(f.a->Free(p).ok());
    ASSERT_TRUE(f.a->SetMemoryLimit(2 * kMiB).ok());
    absl::StatusOr<void*> base = f.a->Malloc(3 * kPage, kS2);
    ASSERT_TRUE(base.ok()) << base.status();
    EXPECT_LE(f.a->GetStats().reserved_bytes.pool[kPoolAll].current,
              int64_t(2 * kMiB));
    ASSERT_TRUE(f.a->Free(*base).ok());
    ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  }
  {
    Fixture f = Make(32 * kMiB);
    void* p = *f.a->Malloc(4 * kMiB + kPage, kS1);  // base pages, then cached
    ASSERT_TRUE(f.a->Free(p).ok());
    ASSERT_TRUE(f.a->SetMemoryLimit(2 * kMiB).ok());
    absl::StatusOr<void*> large = f.a->Malloc(3 * kLarge, kS2);
    ASSERT_TRUE(large.ok()) << large.status();
    EXPECT_EQ(f.a->GetStats().num_ooms, 0);
    ASSERT_TRUE(f.a->Free(*large).ok());
    ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  }
}

// Large pages the device cannot make (its free memory scattered in holes
// smaller than a large page: the host backend places pages first fit) leave
// the request to the base pages, which fit: no OOM, one counted at most.
TEST(LargePages, WhatLargePagesCannotHoldBasePagesServe) {
  Fixture f = Make(4 * kMiB);
  std::vector<void*> small;
  for (int i = 0; i < 64; ++i) small.push_back(*f.a->Malloc(kPage, kS1));
  for (int i = 0; i < 64; i += 2) ASSERT_TRUE(f.a->Free(small[i]).ok());
  ASSERT_TRUE(f.a->EmptyCache().ok());  // 32 free pages, none adjacent
  absl::StatusOr<void*> p = f.a->Malloc(3 * kLarge, kS1);  // 1.5 MiB
  ASSERT_TRUE(p.ok()) << p.status();
  Fill(*p, 3 * kLarge, 7);
  EXPECT_EQ(ArenaPageSizes(*f.a), (std::vector<size_t>{kPage, kPage}));
  EXPECT_EQ(f.a->GetStats().num_ooms, 0);
  ASSERT_TRUE(f.a->CheckInvariants().ok()) << f.a->CheckInvariants();
  ASSERT_TRUE(f.a->Free(*p).ok());
  for (int i = 1; i < 64; i += 2) ASSERT_TRUE(f.a->Free(small[i]).ok());
}

// A step whose large blocks of whole large pages (gradients) come as its
// other blocks (activations) go, and go before they come again: memory flows
// between the two sizes every step. The large pages retire, and the memory
// stays what one page size needs.
size_t PeakReservedOfSteps(Options o) {
  auto faults = std::make_unique<FaultInjectingBackend>(
      *HostBackend::Create(64 * kMiB, kPage));
  std::unique_ptr<DeviceAllocator> a = *DeviceAllocator::Create(
      0, o, std::move(faults), std::make_unique<ManualEventSource>());
  void* weights = *a->Malloc(4 * kMiB, kS1);
  for (int step = 0; step < 6; ++step) {
    std::vector<void*> acts;
    for (int i = 0; i < 12; ++i) {
      acts.push_back(*a->Malloc(kMiB + (i + 1) * 3 * kPage, kS1));
    }
    std::vector<void*> grads;
    for (int i = 0; i < 4; ++i) {
      for (int k = 0; k < 3; ++k) {
        EXPECT_TRUE(a->Free(acts.back()).ok());
        acts.pop_back();
      }
      grads.push_back(*a->Malloc(4 * kMiB, kS1));
    }
    for (void* g : grads) EXPECT_TRUE(a->Free(g).ok());
  }
  EXPECT_TRUE(a->CheckInvariants().ok()) << a->CheckInvariants();
  // Retired: a new block of whole large pages is placed on base pages.
  void* after = *a->Malloc(2 * kMiB, kS2);
  for (const ArenaView& v : a->Arenas()) {
    if (v.stream == kS2 && v.mapped_pages > 0 && o.large_page_bytes != 0) {
      EXPECT_EQ(v.page_size, kPage) << "large pages still taken";
    }
  }
  EXPECT_TRUE(a->Free(after).ok());
  EXPECT_TRUE(a->Free(weights).ok());
  return size_t(a->GetStats().reserved_bytes.pool[kPoolAll].peak);
}

TEST(LargePages, WhenTheSizesTradeMemoryEveryStepLargePagesRetire) {
  Options base;
  Options large;
  large.large_page_bytes = kLarge;
  const size_t one_size = PeakReservedOfSteps(base);
  const size_t two_sizes = PeakReservedOfSteps(large);
  EXPECT_LE(two_sizes, one_size + 4 * kMiB)
      << "one step's gradients at most stranded before the large pages retire";
}

// A large page the base page does not divide is refused when the device's
// allocator is made, naming the option; one equal to the base page is none.
TEST(LargePages, ALargePageNotAMultipleOfThePageIsRefused) {
  Options o;
  o.large_page_bytes = 3 * kPage / 2;
  absl::StatusOr<std::unique_ptr<DeviceAllocator>> a =
      DeviceAllocator::Create(0, o, *HostBackend::Create(8 * kMiB, kPage),
                              std::make_unique<ManualEventSource>());
  ASSERT_TRUE(absl::IsInvalidArgument(a.status())) << a.status();
  EXPECT_NE(a.status().message().find("large_page_mb"), std::string::npos)
      << a.status();
  Fixture f = Make(8 * kMiB, kPage);
  void* p = *f.a->Malloc(2 * kMiB, kS1);
  EXPECT_EQ(ArenaPageSizes(*f.a), (std::vector<size_t>{kPage}));
  ASSERT_TRUE(f.a->Free(p).ok());
}

}  // namespace
}  // namespace fragfree
