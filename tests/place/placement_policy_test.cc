// Unit tests of BestFitPolicy (allocator/place/best_fit_policy.h) on the
// simulated backend: the arena search takes the first arena with a fit, the
// growth rule follows reclaim_before_grow and grow_slack, and the reclaim
// order visits split remainders before holes and stops when told to.
#include <memory>
#include <vector>

#include "allocator/phys/simulated_backend.h"
#include "allocator/place/best_fit_policy.h"
#include "allocator/va/page_pool.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kPage = 2 << 20;
using R = BestFitPolicy::ReclaimFirst;

class PlacementTest : public ::testing::Test {
 protected:
  Arena* NewArena(size_t pages) {
    absl::StatusOr<std::unique_ptr<Arena>> a =
        Arena::Create(&backend_, &pool_, &blocks_, &queue_, pages * kPage,
                      ArenaKind::kLarge, /*stream_slot=*/0, StreamHandle{});
    EXPECT_TRUE(a.ok()) << a.status();
    arenas_.push_back(std::move(*a));
    return arenas_.back().get();
  }
  // Maps the pages `b` lacks.
  void Map(Block* b) {
    PageList pages;
    for (size_t i = b->arena->UnmappedPages(b); i > 0; --i) {
      PageId p;
      ASSERT_TRUE(pool_.CreatePage(&p).ok());
      pages.push_back(p);
    }
    ASSERT_TRUE(b->arena->MapPages(b, pages).ok());
  }
  void TearDown() override {
    for (auto& arena : arenas_) {
      for (Block* b = const_cast<Block*>(arena->first_block()); b != nullptr;
           b = b->next) {
        if (!b->is_free()) b = arena->Release(b, 0);
      }
      for (const Block* b = arena->first_block(); b != nullptr; b = b->next) {
        PageList pages;
        ASSERT_TRUE(arena->UnmapFreePages(b, SIZE_MAX, &pages).ok());
        for (PageId p : pages) pool_.ReturnIdle(p);
      }
    }
    arenas_.clear();
    ASSERT_TRUE(pool_.ReleaseIdle(0).ok());
  }

  SimulatedBackend backend_{64 * kPage, kPage};
  PagePool pool_{&backend_, 64 * kPage};
  BlockPool blocks_;
  ReclaimQueue queue_;
  MetadataVector<std::unique_ptr<Arena>> arenas_;
};

TEST_F(PlacementTest, FindTakesTheFirstArenaWithAFit) {
  BestFitPolicy policy(R::kAuto, 0.03, true);
  Arena* small = NewArena(2);
  Arena* big = NewArena(8);
  MetadataVector<Arena*> list = {small, big};
  const Placed pa = policy.Find(list, 3 * kPage, 3 * kPage);  // too big for
  Block* a = pa.block;                                        // `small`
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->arena, big);
  EXPECT_EQ(pa.arena, big);
  EXPECT_EQ(pa.missing, big->UnmappedPages(a));
  EXPECT_EQ(pa.missing, 3u);  // nothing is mapped yet
  const Placed pb = policy.Find(list, kPage, 100);
  Block* b = pb.block;
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->arena, small);
  EXPECT_EQ(pb.arena, small);
  EXPECT_EQ(pb.missing, small->UnmappedPages(b));
  EXPECT_EQ(b->requested, 100u);
  const Placed none = policy.Find(list, 16 * kPage, 16 * kPage);
  EXPECT_EQ(none.block, nullptr);
  EXPECT_EQ(none.arena, nullptr);
}

// Find counts the pages its block lacks (Arena::UnmappedPages), so that the
// engine maps only when some are missing.
TEST_F(PlacementTest, FindCountsTheBlocksMissingPages) {
  BestFitPolicy policy(R::kAuto, 0.03, true);
  Arena* arena = NewArena(8);
  MetadataVector<Arena*> list = {arena};
  const Placed first = policy.Find(list, 2 * kPage, 2 * kPage);
  ASSERT_NE(first.block, nullptr);
  EXPECT_EQ(first.missing, 2u);
  Map(first.block);
  const uintptr_t addr = first.block->addr;
  arena->Release(first.block, /*free_epoch=*/0, /*free_seq=*/1);
  const Placed again = policy.Find(list, 2 * kPage, 2 * kPage);
  ASSERT_NE(again.block, nullptr);
  EXPECT_EQ(again.block->addr, addr);  // the mapped fit
  EXPECT_EQ(again.missing, 0u);
  EXPECT_EQ(arena->UnmappedPages(again.block), 0u);
}

// Growth facts in pages: the high-water marks and current bytes allocated and
// active, mapped now; the request's block is one page and lacks one page.
GrowthFacts FactsInPages(int64_t allocated_high_water, int64_t allocated,
                         int64_t active_high_water, int64_t active,
                         int64_t mapped) {
  const int64_t page = int64_t(kPage);
  return GrowthFacts{.allocated_high_water = allocated_high_water * page,
                     .allocated_bytes = allocated * page,
                     .active_high_water = active_high_water * page,
                     .active_bytes = active * page,
                     .block_bytes = kPage,
                     .mapped_bytes = mapped * page,
                     .bytes_to_map = kPage};
}

// (Allocated bytes as the measure: grow_for_pending_frees off.)
TEST(BestFitPolicy, GrowthRuleFollowsTheOption) {
  GrowthFacts facts = FactsInPages(100, 50, 0, 0, /*mapped=*/100);
  EXPECT_TRUE(BestFitPolicy(R::kAlways, 0.03, false).ShouldReclaimFirst(facts));
  EXPECT_FALSE(BestFitPolicy(R::kNever, 0.03, false).ShouldReclaimFirst(facts));
  // auto: 101 pages mapped after <= 1.03 x 100 allocated at most: grow.
  EXPECT_FALSE(BestFitPolicy(R::kAuto, 0.03, false).ShouldReclaimFirst(facts));
  facts.bytes_to_map = 4 * kPage;  // 104 > 103: reclaim first
  EXPECT_TRUE(BestFitPolicy(R::kAuto, 0.03, false).ShouldReclaimFirst(facts));
  // The request itself raises the high-water mark it is measured against.
  facts.allocated_high_water = 0;
  facts.allocated_bytes = 100 * int64_t(kPage);
  facts.block_bytes = 4 * kPage;
  facts.bytes_to_map = 4 * kPage;
  EXPECT_FALSE(BestFitPolicy(R::kAuto, 0.03, false).ShouldReclaimFirst(facts));
}

// Past the slack, pages move only while moving them has taken no more than
// move_time_budget of the recent time; within the slack the request grows
// anyway, and True reclaims first whatever the time.
TEST(BestFitPolicy, GrowsPastTheSlackWhenMovesSpentTheirTimeBudget) {
  GrowthFacts facts = FactsInPages(100, 50, 0, 0, /*mapped=*/100);
  facts.bytes_to_map = 4 * kPage;  // 104 > 103: past the slack
  facts.move_time_fraction = 0.02;
  EXPECT_TRUE(
      BestFitPolicy(R::kAuto, 0.03, false, 0.02).ShouldReclaimFirst(facts));
  facts.move_time_fraction = 0.021;
  EXPECT_FALSE(
      BestFitPolicy(R::kAuto, 0.03, false, 0.02).ShouldReclaimFirst(facts));
  EXPECT_TRUE(
      BestFitPolicy(R::kAuto, 0.03, false, 1.0).ShouldReclaimFirst(facts));
  EXPECT_TRUE(
      BestFitPolicy(R::kAlways, 0.03, false, 0.0).ShouldReclaimFirst(facts));
  facts.bytes_to_map = kPage;  // 101 <= 103: grows, budget or not
  facts.move_time_fraction = 0.0;
  EXPECT_FALSE(
      BestFitPolicy(R::kAuto, 0.03, false, 0.02).ShouldReclaimFirst(facts));
}

// Once pending blocks have retired, the most bytes ever active (allocated or
// pending) is the mark with grow_for_pending_frees, the most ever allocated
// without.
TEST(BestFitPolicy, ActiveHighWaterIsTheMarkWhenAsked) {
  GrowthFacts facts = FactsInPages(50, 40, 100, 40, /*mapped=*/96);
  // 97 pages mapped after: within 1.03 x 100 active, far above 1.03 x 50.
  EXPECT_FALSE(BestFitPolicy(R::kAuto, 0.03, true).ShouldReclaimFirst(facts));
  EXPECT_TRUE(BestFitPolicy(R::kAuto, 0.03, false).ShouldReclaimFirst(facts));
  facts.bytes_to_map = 8 * kPage;  // 104 > 103
  EXPECT_TRUE(BestFitPolicy(R::kAuto, 0.03, true).ShouldReclaimFirst(facts));
  // The request raises the mark it is measured against: 40 + 70 after it.
  facts.block_bytes = 70 * kPage;
  facts.bytes_to_map = 16 * kPage;  // 112 <= 1.03 x 110
  EXPECT_FALSE(BestFitPolicy(R::kAuto, 0.03, true).ShouldReclaimFirst(facts));
}

// While blocks freed with record_stream are pending (active > allocated), the
// engine grows instead of reclaiming, with grow_for_pending_frees only.
TEST(BestFitPolicy, GrowsWhilePendingFreesAreCountedAsInUse) {
  GrowthFacts facts = FactsInPages(40, 40, 40, 40, /*mapped=*/80);
  EXPECT_TRUE(BestFitPolicy(R::kAuto, 0.03, true).ShouldReclaimFirst(facts));
  facts.allocated_bytes = 39 * int64_t(kPage);  // one block pending
  EXPECT_FALSE(BestFitPolicy(R::kAuto, 0.03, true).ShouldReclaimFirst(facts));
  EXPECT_TRUE(BestFitPolicy(R::kAuto, 0.03, false).ShouldReclaimFirst(facts));
  EXPECT_TRUE(BestFitPolicy(R::kAlways, 0.03, true).ShouldReclaimFirst(facts));
}

TEST_F(PlacementTest, ReclaimVisitsRemaindersBeforeHolesAndStops) {
  BestFitPolicy policy(R::kAuto, 0.03, true);
  Arena* arena = NewArena(16);
  MetadataVector<Arena*> list = {arena};
  // A hole: a mapped block of 2 pages between live blocks, then freed.
  Block* left = policy.Find(list, kPage, kPage).block;
  Map(left);
  Block* hole = policy.Find(list, 2 * kPage, 2 * kPage).block;
  Map(hole);
  Block* right = policy.Find(list, kPage, kPage).block;
  Map(right);
  arena->Release(hole, /*free_epoch=*/0, /*free_seq=*/1);
  // A remainder: 3 mapped pages of a block of which the first half is taken.
  Block* big = policy.Find(list, 4 * kPage, 4 * kPage).block;
  Map(big);
  arena->Release(big, 0, 2);
  ASSERT_NE(policy.Find(list, kPage / 2, kPage / 2).block, nullptr);
  std::vector<const Block*> order;
  policy.ForEachReclaimable(arenas_, queue_, [&](Arena* a, Block* b) {
    EXPECT_EQ(a, arena);
    order.push_back(b);
    return true;
  });
  ASSERT_GE(order.size(), 2u);
  EXPECT_EQ(order.front()->free_seq, 0u);  // the remainder
  int visits = 0;
  policy.ForEachReclaimable(arenas_, queue_, [&](Arena*, Block*) {
    ++visits;
    return false;
  });
  EXPECT_EQ(visits, 1);
}

}  // namespace
}  // namespace fragfree
