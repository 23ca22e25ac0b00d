// Moving a page without waiting (docs/design.md, Note [Moving a page without
// waiting]): a page reclaimed from a hole that the request's own stream freed
// is mapped at once, before the GPU has passed the hole's last use, and its
// old address stays mapped (detached) until a block needs that address (or
// empty_cache, a release, a pause or teardown needs none left). These
// tests run the engine on real host memory (HostBackend) with events that
// complete only when told (FlakyEvents), and check: no wait on the same stream
// and a wait on another; both addresses map the same memory meanwhile, also
// after the fence has passed and other blocks mapped pages; a block
// placed over a detached range waits for it; a failed request attaches the
// pages again where they were; empty_cache and teardown leave nothing mapped.
// Thread-safety: single-threaded.
#include <cstdint>
#include <cstring>

#include "allocator/device_allocator.h"
#include "gtest/gtest.h"
#include "tests/stress/fault_rig.h"

namespace fragfree {
namespace {

using stress::FlakyEvents;
using stress::kPage;
using stress::kS1;
using stress::kS2;
using stress::MakeRig;
using stress::Rig;

constexpr size_t kDevicePages = 8;

Rig ReclaimingRig(bool defer_unmap = true) {
  Options o;
  o.reclaim_before_grow = Options::Reclaim::kAlways;
  o.defer_unmap = defer_unmap;
  return MakeRig(kDevicePages, o);
}

int64_t Waits(Rig& r) { return r.events->Calls(FlakyEvents::kSynchronize); }

// A freed two-page hole in front of a live page, its fence not complete:
// returns the hole's address.
char* FreshHole(Rig& r, StreamHandle stream) {
  void* hole = *r.a->Malloc(2 * kPage, stream);
  EXPECT_TRUE(r.a->Malloc(kPage, stream).ok());  // keeps the hole apart
  EXPECT_TRUE(r.a->Free(hole).ok());
  return static_cast<char*>(hole);
}

// The two pages of `hole` (detached) map two of the three pages of `block`:
// writes each of the block's pages with its own byte and finds two of them at
// the old address.
void ExpectHoleMapsBlocksPages(const char* hole, char* block) {
  for (size_t k = 0; k < 3; ++k) memset(block + k * kPage, int(k + 1), kPage);
  const char first = hole[0], second = hole[kPage];
  EXPECT_TRUE(first >= 1 && first <= 3 && second >= 1 && second <= 3 &&
              first != second)
      << int(first) << " " << int(second);
}

// A two-page block on kS1 lands at `hole` without a wait, and is writable.
void ExpectTwoPagesAtHoleWithoutWait(Rig& r, char* hole) {
  const int64_t waits = Waits(r);
  absl::StatusOr<void*> c = r.a->Malloc(2 * kPage, kS1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, hole);
  EXPECT_EQ(Waits(r), waits);
  memset(*c, 0x44, 2 * kPage);
}

TEST(MoveWithoutWait, SameStreamTakesTheHolesPagesWithoutWaiting) {
  Rig r = ReclaimingRig();
  char* hole = FreshHole(r, kS1);
  const int64_t waits = Waits(r);
  // Three pages: the hole is too small, so the block goes past it and takes
  // the hole's two pages plus a new one.
  absl::StatusOr<void*> b = r.a->Malloc(3 * kPage, kS1);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Waits(r), waits) << "the CPU waited for the GPU";
  EXPECT_EQ(r.a->GetStats().pages_remapped, 2);
  EXPECT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
  // Until a block needs it, the hole's old address maps the same memory as
  // the block's new one.
  char* block = static_cast<char*>(*b);
  ExpectHoleMapsBlocksPages(hole, block);
  // empty_cache waits for the GPU and unmaps the old addresses; teardown
  // (~Arena checks) finds nothing left mapped.
  ASSERT_TRUE(r.a->Free(block).ok());
  ASSERT_TRUE(r.a->EmptyCache().ok());
  EXPECT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
}

TEST(MoveWithoutWait, AnotherStreamWaitsForTheHolesFence) {
  Rig r = ReclaimingRig();
  FreshHole(r, kS1);
  const int64_t waits = Waits(r);
  ASSERT_TRUE(r.a->Malloc(3 * kPage, kS2).ok());
  EXPECT_GT(Waits(r), waits);
  EXPECT_EQ(r.a->GetStats().pages_remapped, 2);
  EXPECT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
}

TEST(MoveWithoutWait, OffWaitsOnTheSameStreamToo) {
  Rig r = ReclaimingRig(/*defer_unmap=*/false);
  FreshHole(r, kS1);
  const int64_t waits = Waits(r);
  ASSERT_TRUE(r.a->Malloc(3 * kPage, kS1).ok());
  EXPECT_GT(Waits(r), waits);
}

TEST(MoveWithoutWait, ABlockOverADetachedRangeWaitsThenMaps) {
  Rig r = ReclaimingRig();
  char* hole = FreshHole(r, kS1);
  ASSERT_TRUE(r.a->Malloc(3 * kPage, kS1).ok());
  const int64_t waits = Waits(r);
  // Two pages: the old hole is the best fit; its old mappings go first.
  absl::StatusOr<void*> c = r.a->Malloc(2 * kPage, kS1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, hole);
  EXPECT_GT(Waits(r), waits);
  memset(*c, 0x33, 2 * kPage);  // mapped anew, accessible
  EXPECT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
}

// A passed fence does not unmap the old address by itself: pages mapped for
// another block leave it alone, and the block placed over it unmaps it then,
// without a wait.
TEST(MoveWithoutWait, AnOldAddressStaysMappedUntilABlockNeedsIt) {
  Rig r = ReclaimingRig();
  char* hole = FreshHole(r, kS1);
  absl::StatusOr<void*> b = r.a->Malloc(3 * kPage, kS1);
  ASSERT_TRUE(b.ok()) << b.status();
  r.events->CompleteAll();
  ASSERT_TRUE(r.a->Malloc(kPage, kS2).ok());  // maps a new page elsewhere
  char* block = static_cast<char*>(*b);
  ExpectHoleMapsBlocksPages(hole, block);
  EXPECT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
  ExpectTwoPagesAtHoleWithoutWait(r, hole);
  // The new block has its own pages: the old block's stay as written.
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(block[k * kPage], char(k + 1));
  EXPECT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
}

TEST(MoveWithoutWait, AFailedRequestAttachesThePagesAgain) {
  Rig r = ReclaimingRig();
  char* hole = FreshHole(r, kS1);
  const DeviceStats before = r.a->GetStats();
  const size_t free_before = r.host->MemoryInfo().free_bytes;
  r.faults->FailNext(BackendOp::kSetAccess, 1,
                     absl::InternalError("injected SetAccess fault"));
  EXPECT_FALSE(r.a->Malloc(3 * kPage, kS1).ok());
  r.faults->ClearFaults();
  const DeviceStats after = r.a->GetStats();
  EXPECT_EQ(after.reserved_bytes.pool[kPoolAll].current,
            before.reserved_bytes.pool[kPoolAll].current);
  EXPECT_EQ(after.pages_remapped, before.pages_remapped);
  EXPECT_EQ(r.host->MemoryInfo().free_bytes, free_before);
  EXPECT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
  // The hole holds its pages again, mapped and accessible: a block there
  // needs no map and no wait.
  ExpectTwoPagesAtHoleWithoutWait(r, hole);
}

}  // namespace
}  // namespace fragfree
