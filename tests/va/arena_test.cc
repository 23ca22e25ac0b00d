// Unit tests of Arena (allocator/va/arena.h) on the simulated backend:
// placement (best fit, mapped holes preferred), splitting and coalescing that
// keep the blocks tiling the range, mapping exactly the missing pages, and
// unmapping whole free pages into the reclaim index, a run of them (or of
// detached old addresses) by one backend call.
#include "allocator/va/arena.h"

#include <memory>
#include <random>
#include <vector>

#include "allocator/phys/forwarding_backend.h"
#include "allocator/phys/simulated_backend.h"
#include "allocator/va/page_pool.h"
#include "allocator/va/reclaim_queue.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kPage = 2 << 20;

// The simulated backend, recording the size of every Unmap; with
// refuse_ranges, an Unmap over more than one page fails (nothing unmapped).
class UnmapRecorder final : public ForwardingBackend {
 public:
  UnmapRecorder()
      : ForwardingBackend(
            std::make_unique<SimulatedBackend>(64 * kPage, kPage)) {}
  absl::Status Unmap(uintptr_t va, size_t size) override {
    if (refuse_ranges && size > kPage) {
      return absl::InternalError("range refused");
    }
    unmaps.push_back(size / kPage);
    return ForwardingBackend::Unmap(va, size);
  }
  bool refuse_ranges = false;
  std::vector<size_t> unmaps;  // pages per successful call
};

class ArenaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Arena>> a =
        Arena::Create(&backend_, &pool_, &blocks_, &queue_, 16 * kPage,
                      ArenaKind::kLarge, /*stream_slot=*/0, StreamHandle{});
    ASSERT_TRUE(a.ok()) << a.status();
    arena_ = std::move(*a);
  }
  void TearDown() override {
    // Every page back to the pool, then to the device.
    for (const Block* b = arena_->first_block(); b != nullptr; b = b->next) {
      ASSERT_TRUE(b->is_free());
      PageList pages;
      ASSERT_TRUE(arena_->UnmapFreePages(b, SIZE_MAX, &pages).ok());
      for (PageId p : pages) pool_.ReturnIdle(p);
    }
    ASSERT_EQ(arena_->mapped_pages(), 0u);
    arena_.reset();
    ASSERT_TRUE(pool_.ReleaseIdle(0).ok());
    EXPECT_EQ(backend_.MemoryInfo().free_bytes, 64 * kPage);
  }

  // Allocates `size` bytes and maps the pages it lacks.
  Block* AllocateMapped(size_t size) {
    Block* b = arena_->Allocate(size, size);
    if (b == nullptr) return nullptr;
    PageList pages;
    for (size_t i = arena_->UnmappedPages(b); i > 0; --i) {
      PageId p;
      if (!pool_.TakeIdle(&p) && !pool_.CreatePage(&p).ok()) return nullptr;
      pages.push_back(p);
    }
    if (!arena_->MapPages(b, pages).ok()) return nullptr;
    return b;
  }

  // The blocks tile [base, base + size) in address order, no two free
  // blocks are neighbours, and each block's neighbour bits say which of its
  // neighbours are free.
  void ExpectTiled() const {
    uintptr_t at = arena_->base();
    const Block* prev = nullptr;
    for (const Block* b = arena_->first_block(); b != nullptr; b = b->next) {
      EXPECT_EQ(b->addr, at);
      EXPECT_EQ(b->prev, prev);
      if (prev != nullptr) {
        EXPECT_FALSE(prev->is_free() && b->is_free());
      }
      EXPECT_EQ(b->prev_free, prev != nullptr && prev->is_free()) << b->addr;
      EXPECT_EQ(b->next_free, b->next != nullptr && b->next->is_free())
          << b->addr;
      at = b->end();
      prev = b;
    }
    EXPECT_EQ(at, arena_->base() + arena_->size());
  }

  UnmapRecorder backend_;
  PagePool pool_{&backend_, 64 * kPage};
  BlockPool blocks_;
  ReclaimQueue queue_;
  std::unique_ptr<Arena> arena_;
};

TEST_F(ArenaTest, StartsAsOneFreeUnmappedBlock) {
  EXPECT_TRUE(arena_->IsEmpty());
  EXPECT_EQ(arena_->size(), 16 * kPage);
  EXPECT_EQ(arena_->page_size(), kPage);
  EXPECT_EQ(arena_->mapped_pages(), 0u);
  EXPECT_EQ(arena_->first_block()->size, 16 * kPage);
  EXPECT_TRUE(arena_->Contains(arena_->base() + 16 * kPage - 1));
  EXPECT_FALSE(arena_->Contains(arena_->base() + 16 * kPage));
}

TEST_F(ArenaTest, MapsExactlyThePagesAnAllocationLacks) {
  Block* a = arena_->Allocate(kPage + 512, kPage + 1);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->addr, arena_->base());
  EXPECT_EQ(a->size, kPage + 512);
  EXPECT_EQ(a->requested, kPage + 1);
  EXPECT_EQ(arena_->UnmappedPages(a), 2u);  // it straddles two pages
  EXPECT_FALSE(arena_->IsFullyMapped(a));
  PageList pages;
  for (int i = 0; i < 2; ++i) {
    PageId p;
    ASSERT_TRUE(pool_.CreatePage(&p).ok());
    pages.push_back(p);
  }
  ASSERT_TRUE(arena_->MapPages(a, pages).ok());
  EXPECT_TRUE(arena_->IsFullyMapped(a));
  EXPECT_EQ(arena_->mapped_pages(), 2u);
  EXPECT_EQ(arena_->MappedBytes(a), a->size);
  EXPECT_TRUE(arena_->IsPageMapped(0));
  EXPECT_TRUE(arena_->IsPageMapped(1));
  EXPECT_FALSE(arena_->IsPageMapped(2));
  // The next block shares page 1: it needs one new page, not two.
  Block* b = arena_->Allocate(kPage, kPage);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->addr, a->end());
  EXPECT_EQ(arena_->UnmappedPages(b), 1u);
  EXPECT_EQ(arena_->BlockContaining(a->addr + 7), a);
  EXPECT_EQ(arena_->BlockContaining(b->addr), b);
  arena_->Release(b, /*free_epoch=*/1);
  arena_->Release(a, /*free_epoch=*/1);
  ExpectTiled();
}

TEST_F(ArenaTest, ReleaseCoalescesWithFreeNeighbours) {
  Block* a = arena_->Allocate(kPage, kPage);
  Block* b = arena_->Allocate(kPage, kPage);
  Block* c = arena_->Allocate(kPage, kPage);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(b->addr, a->end());
  EXPECT_EQ(c->addr, b->end());
  ExpectTiled();
  Block* free_b = arena_->Release(b, /*free_epoch=*/3);
  EXPECT_EQ(free_b->addr, b->addr);
  EXPECT_EQ(free_b->free_epoch, 3u);
  ExpectTiled();
  // a merges with the hole after it; the merged block keeps the later epoch.
  Block* free_ab = arena_->Release(a, /*free_epoch=*/2);
  EXPECT_EQ(free_ab->addr, arena_->base());
  EXPECT_EQ(free_ab->size, 2 * kPage);
  EXPECT_EQ(free_ab->free_epoch, 3u);
  ExpectTiled();
  EXPECT_FALSE(arena_->IsEmpty());
  arena_->Release(c, /*free_epoch=*/4);
  EXPECT_TRUE(arena_->IsEmpty());
  EXPECT_EQ(arena_->first_block()->size, 16 * kPage);
}

TEST_F(ArenaTest, PrefersAMappedHoleOverABetterFittingUnmappedRange) {
  Block* a = AllocateMapped(2 * kPage);
  Block* b = AllocateMapped(6 * kPage);
  Block* c = AllocateMapped(5 * kPage);
  ASSERT_TRUE(a && b && c);
  const uintptr_t hole = b->addr;
  arena_->Release(b, /*free_epoch=*/1, /*free_seq=*/5);
  // Free now: the 6-page mapped hole, and the unmapped 3-page tail, which fits
  // a 3-page request exactly. Mapping would cost 3 new pages; the hole none.
  Block* d = arena_->Allocate(3 * kPage, 3 * kPage);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(arena_->UnmappedPages(d), 0u);
  EXPECT_GE(d->addr, hole);
  EXPECT_LE(d->end(), hole + 6 * kPage);
  ExpectTiled();
  // The rest of the hole serves the next 3 pages; only then the tail, which
  // needs its 3 pages mapped.
  Block* e = arena_->Allocate(3 * kPage, 3 * kPage);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(arena_->UnmappedPages(e), 0u);
  Block* f = arena_->Allocate(3 * kPage, 3 * kPage);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->addr, c->end());
  EXPECT_EQ(arena_->UnmappedPages(f), 3u);
  ExpectTiled();
  for (Block* x : {a, c, d, e, f}) arena_->Release(x, /*free_epoch=*/2);
}

TEST_F(ArenaTest, UnmapsWholeFreePagesAndIndexesReclaimableHoles) {
  Block* a = AllocateMapped(3 * kPage);
  Block* guard = AllocateMapped(512);  // keeps the hole from merging away
  ASSERT_TRUE(a && guard);
  EXPECT_EQ(arena_->mapped_pages(), 4u);
  EXPECT_EQ(queue_.size(), 0u);
  Block* hole = arena_->Release(a, /*free_epoch=*/1, /*free_seq=*/7);
  EXPECT_EQ(arena_->ReclaimablePages(hole), 3u);
  EXPECT_TRUE(hole->queued);
  EXPECT_EQ(queue_.front(), hole);
  PageList pages;
  VaRuns runs;
  ASSERT_TRUE(arena_->UnmapFreePages(hole, 2, &pages, &runs).ok());
  EXPECT_EQ(pages.size(), 2u);
  EXPECT_EQ(arena_->mapped_pages(), 2u);
  EXPECT_EQ(arena_->ReclaimablePages(hole), 1u);
  size_t run_bytes = 0;
  for (const auto& [addr, bytes] : runs) run_bytes += bytes;
  EXPECT_EQ(run_bytes, 2 * kPage);
  ASSERT_TRUE(arena_->UnmapFreePages(hole, SIZE_MAX, &pages).ok());
  EXPECT_EQ(pages.size(), 3u);
  EXPECT_EQ(arena_->ReclaimablePages(hole), 0u);
  EXPECT_FALSE(hole->queued);  // nothing left to reclaim: out of the index
  EXPECT_EQ(queue_.size(), 0u);
  for (PageId p : pages) pool_.ReturnIdle(p);
  arena_->Release(guard, /*free_epoch=*/2);
  ExpectTiled();
}

// Adjacent pages leave by one Unmap: a hole's pages (up to the count wanted),
// and detached old addresses whose fences have passed (not those whose fences
// have not). A backend that refuses ranges gets one call per page.
TEST_F(ArenaTest, UnmapsARunOfPagesByOneBackendCall) {
  for (bool refuse : {false, true}) {
    backend_.refuse_ranges = refuse;
    backend_.unmaps.clear();
    Block* a = AllocateMapped(6 * kPage);
    Block* guard = AllocateMapped(512);
    ASSERT_TRUE(a && guard);
    Block* hole = arena_->Release(a, /*free_epoch=*/1, /*free_seq=*/1);
    PageList pages;
    ASSERT_TRUE(arena_->UnmapFreePages(hole, 2, &pages).ok());
    ASSERT_TRUE(
        arena_->DetachFreePages(hole, SIZE_MAX, /*epoch=*/5, &pages).ok());
    EXPECT_EQ(pages.size(), 6u);
    EXPECT_EQ(arena_->mapped_pages(), 1u);  // the guard's
    EXPECT_EQ(arena_->detached_pages(), 4u);
    if (refuse) {
      EXPECT_EQ(backend_.unmaps, std::vector<size_t>({1, 1}));
    } else {
      EXPECT_EQ(backend_.unmaps, std::vector<size_t>({2}));
    }
    // Detached pages 2..5: the fence of page 4 has not passed.
    backend_.unmaps.clear();
    size_t asked = 0;
    ASSERT_TRUE(arena_
                    ->UnmapAllDetached([&](uint64_t epoch) {
                      EXPECT_EQ(epoch, 5u);
                      return ++asked != 3;  // the third page asked: not yet
                    })
                    .ok());
    EXPECT_EQ(arena_->detached_pages(), 1u);
    if (refuse) {
      EXPECT_EQ(backend_.unmaps, std::vector<size_t>({1, 1, 1}));
    } else {
      EXPECT_EQ(backend_.unmaps, std::vector<size_t>({2, 1}));
    }
    ASSERT_TRUE(arena_->UnmapAllDetached([](uint64_t) { return true; }).ok());
    EXPECT_EQ(arena_->detached_pages(), 0u);
    for (PageId p : pages) pool_.ReturnIdle(p);
    arena_->Release(guard, /*free_epoch=*/2);
    ExpectTiled();
  }
}

TEST_F(ArenaTest, ReturnsNullWhenNoFreeRangeFits) {
  Block* all = arena_->Allocate(16 * kPage, 16 * kPage);
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(arena_->Allocate(512, 512), nullptr);
  arena_->Release(all, /*free_epoch=*/1);
  EXPECT_TRUE(arena_->IsEmpty());
}

// Random allocate/release churn of sizes from 512 bytes to a few pages,
// released in random order, with free pages unmapped now and then: after
// every step the blocks tile the arena and every block's neighbour bits match
// its neighbours (Note [Neighbour bits] in docs/design.md). The churn reaches
// every case: a block placed with free space left behind it, in front of it
// (placed at a free block's tail or inside it, where its pages are mapped),
// and a release that coalesces with neither neighbour, either, or both.
TEST_F(ArenaTest, NeighbourBitsFollowEverySplitAndCoalesce) {
  std::mt19937_64 rng(7);
  std::vector<Block*> live;
  int free_behind = 0, free_in_front = 0, coalesced[4] = {0, 0, 0, 0};
  for (int step = 0; step < 4000; ++step) {
    const bool allocate = live.empty() || (live.size() < 24 && rng() % 2 == 0);
    if (allocate) {
      const size_t size =
          rng() % 4 == 0 ? (1 + rng() % 2) * kPage : (1 + rng() % 2048) * 512;
      if (Block* b = AllocateMapped(size)) {
        live.push_back(b);
        free_behind += b->next_free;
        free_in_front += b->prev_free;
      }
    } else {
      const size_t i = rng() % live.size();
      ++coalesced[live[i]->prev_free + 2 * live[i]->next_free];
      arena_->Release(live[i], /*free_epoch=*/0, /*free_seq=*/step + 1);
      live[i] = live.back();
      live.pop_back();
    }
    if (step % 8 == 0) {
      // Unmap a free block's whole pages: later requests that would need
      // pages there go at a free block's tail or inside it instead.
      for (const Block* b = arena_->first_block(); b != nullptr; b = b->next) {
        if (!b->is_free() || rng() % 2 != 0) continue;
        PageList pages;
        ASSERT_TRUE(arena_->UnmapFreePages(b, 1, &pages).ok());
        for (PageId p : pages) pool_.ReturnIdle(p);
      }
    }
    ExpectTiled();
    if (HasFailure()) FAIL() << "at step " << step;
  }
  for (Block* b : live) arena_->Release(b, 0, 1);
  ExpectTiled();
  EXPECT_GT(free_behind, 0);
  EXPECT_GT(free_in_front, 0);
  for (int c : coalesced) EXPECT_GT(c, 0);
}

}  // namespace
}  // namespace fragfree
