// Unit tests of PagePool (allocator/va/page_pool.h) on the simulated backend:
// pages are created up to the limit, become idle and are taken again without a
// new handle, and idle pages go back to the device; the idle counts follow.
#include "allocator/va/page_pool.h"

#include "allocator/phys/simulated_backend.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kPage = 64 << 10;

TEST(PagePool, CreatesPagesUpToTheLimit) {
  SimulatedBackend backend(8 * kPage, kPage);
  PagePool pool(&backend, 3 * kPage);
  PageId a, b, c, d;
  ASSERT_TRUE(pool.CreatePage(&a).ok());
  ASSERT_TRUE(pool.CreatePage(&b).ok());
  ASSERT_TRUE(pool.CreatePage(&c).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(pool.CreatePage(&d)));
  EXPECT_EQ(pool.created_pages(), 3u);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_EQ(backend.MemoryInfo().free_bytes, 5 * kPage);
  // A larger limit lets it create more.
  pool.set_limit_bytes(4 * kPage);
  EXPECT_TRUE(pool.CreatePage(&d).ok());
  EXPECT_EQ(pool.created_pages(), 4u);
  for (PageId p : {a, b, c, d}) pool.ReturnIdle(p);
  ASSERT_TRUE(pool.ReleaseIdle(0).ok());
}

TEST(PagePool, DeviceExhaustionIsResourceExhausted) {
  SimulatedBackend backend(kPage, kPage);
  PagePool pool(&backend, 4 * kPage);
  PageId a, b;
  ASSERT_TRUE(pool.CreatePage(&a).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(pool.CreatePage(&b)));
  EXPECT_EQ(pool.created_pages(), 1u);
  ASSERT_TRUE(pool.ReleasePage(a).ok());
  EXPECT_EQ(pool.created_pages(), 0u);
  EXPECT_EQ(backend.MemoryInfo().free_bytes, kPage);
}

TEST(PagePool, IdlePagesAreReusedWithoutNewHandles) {
  SimulatedBackend backend(8 * kPage, kPage);
  PagePool pool(&backend, 8 * kPage);
  PageId page;
  EXPECT_FALSE(pool.TakeIdle(&page));
  PageId a;
  ASSERT_TRUE(pool.CreatePage(&a).ok());
  const PhysHandle handle = pool.handle(a);
  pool.ReturnIdle(a);
  EXPECT_EQ(pool.idle_pages(), 1u);
  ASSERT_TRUE(pool.TakeIdle(&page));
  EXPECT_EQ(page, a);
  EXPECT_EQ(pool.handle(page).value, handle.value);
  EXPECT_EQ(pool.idle_pages(), 0u);
  EXPECT_EQ(pool.created_pages(), 1u);
  EXPECT_EQ(backend.MemoryInfo().free_bytes, 7 * kPage);
  pool.ReturnIdle(page);
  ASSERT_TRUE(pool.ReleaseIdle(0).ok());
}

TEST(PagePool, ReleaseIdleKeepsAtMostKeepAndCountsIdlePages) {
  SimulatedBackend backend(8 * kPage, kPage);
  PagePool pool(&backend, 8 * kPage);
  PageId pages[4];
  for (PageId& p : pages) ASSERT_TRUE(pool.CreatePage(&p).ok());
  for (PageId p : pages) pool.ReturnIdle(p);
  EXPECT_EQ(pool.idle_counts().peak, 4u);
  EXPECT_EQ(pool.idle_counts().added, 4u);
  ASSERT_TRUE(pool.ReleaseIdle(1).ok());
  EXPECT_EQ(pool.idle_pages(), 1u);
  EXPECT_EQ(pool.created_pages(), 1u);
  EXPECT_EQ(pool.total_released(), 3u);
  EXPECT_EQ(pool.idle_counts().removed, 3u);
  EXPECT_EQ(backend.MemoryInfo().free_bytes, 7 * kPage);
  pool.ResetIdlePeak();
  EXPECT_EQ(pool.idle_counts().peak, 1u);
  pool.ResetIdleCounts();
  EXPECT_EQ(pool.idle_counts().added, 0u);
  // A released page's id is given to the next page created.
  PageId again;
  ASSERT_TRUE(pool.CreatePage(&again).ok());
  EXPECT_EQ(pool.created_pages(), 2u);
  pool.ReturnIdle(again);
  ASSERT_TRUE(pool.ReleaseIdle(0).ok());
  EXPECT_EQ(backend.MemoryInfo().free_bytes, 8 * kPage);
}

}  // namespace
}  // namespace fragfree
