// Unit tests of ChurnMeter (allocator/place/churn_meter.h): the slack doubles
// while moved pages serve more than the churn limit of a window's allocated
// bytes, up to the maximum, halves back to the base once moves stop, waits for
// a whole window before it judges, and restarts its window when accumulated
// stats are reset.
#include "allocator/place/churn_meter.h"

#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kWindow = ChurnMeter::kMinWindowBytes;

TEST(ChurnMeter, StartsAtTheBaseSlack) {
  ChurnMeter m(0.03, 1.0, 0.02);
  EXPECT_DOUBLE_EQ(m.slack(), 0.03);
}

TEST(ChurnMeter, DoublesWhileMovesServeMoreThanTheLimitUpToTheMaximum) {
  ChurnMeter m(0.03, 1.0, 0.02);
  int64_t total = 0;
  m.Update(total, 8 * kMiB);
  const double expected[] = {0.06, 0.12, 0.24, 0.48, 0.96, 1.0, 1.0};
  for (double slack : expected) {
    m.NoteMoved(kWindow / 10);  // 10% of the window came from moved pages
    total += kWindow;
    m.Update(total, 8 * kMiB);
    EXPECT_DOUBLE_EQ(m.slack(), slack);
  }
}

TEST(ChurnMeter, HalvesBackToTheBaseOnceMovesStop) {
  ChurnMeter m(0.03, 1.0, 0.02);
  int64_t total = 0;
  for (int i = 0; i < 6; ++i) {
    m.NoteMoved(kWindow);
    total += kWindow;
    m.Update(total, kMiB);
  }
  ASSERT_DOUBLE_EQ(m.slack(), 1.0);
  for (int i = 0; i < 10; ++i) {
    total += kWindow;
    m.Update(total, kMiB);
  }
  EXPECT_DOUBLE_EQ(m.slack(), 0.03);
}

TEST(ChurnMeter, KeepsItsSlackBetweenAQuarterOfTheLimitAndTheLimit) {
  ChurnMeter m(0.03, 1.0, 0.02);
  m.NoteMoved(kWindow);
  m.Update(kWindow, kMiB);
  ASSERT_DOUBLE_EQ(m.slack(), 0.06);
  m.NoteMoved(kWindow / 100);  // 1%: neither above 2% nor below 0.5%
  m.Update(2 * kWindow, kMiB);
  EXPECT_DOUBLE_EQ(m.slack(), 0.06);
}

TEST(ChurnMeter, JudgesOnlyWholeWindowsOfTheHighWaterMark) {
  ChurnMeter m(0.03, 1.0, 0.02);
  const int64_t high_water = 4 * kWindow;
  m.NoteMoved(kWindow);
  m.Update(2 * kWindow, high_water);  // half a window: no verdict yet
  EXPECT_DOUBLE_EQ(m.slack(), 0.03);
  m.Update(4 * kWindow, high_water);
  EXPECT_DOUBLE_EQ(m.slack(), 0.06);
}

TEST(ChurnMeter, AResetOfAccumulatedStatsRestartsTheWindow) {
  ChurnMeter m(0.03, 1.0, 0.02);
  m.Update(10 * kWindow, kMiB);
  m.NoteMoved(kWindow);
  m.Update(kWindow / 2, kMiB);  // the counter went back: a new window
  m.Update(kWindow / 2 + kWindow, kMiB);
  EXPECT_DOUBLE_EQ(m.slack(), 0.03) << "the moves before the reset count not";
}

TEST(ChurnMeter, AMaximumAtTheBaseTurnsItOff) {
  ChurnMeter m(0.03, 0.03, 0.02);
  m.NoteMoved(kWindow);
  m.Update(kWindow, kMiB);
  EXPECT_DOUBLE_EQ(m.slack(), 0.03);
}

}  // namespace
}  // namespace fragfree
