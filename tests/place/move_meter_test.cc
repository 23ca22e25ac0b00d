// Unit tests of MoveMeter (allocator/place/move_meter.h): a steady share of
// time spent moving pages reads as that share, an idle second decays it by e,
// and a clock reading older than the last one decays nothing.
#include "allocator/place/move_meter.h"

#include <cmath>

#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(MoveMeter, ReadsZeroBeforeAnyMove) {
  MoveMeter meter;
  EXPECT_EQ(meter.Fraction(0), 0.0);
  EXPECT_EQ(meter.Fraction(5'000 * kMs), 0.0);
}

// 15 ms of moves in every 100 ms step (a checkpointed step that moves ~200
// pages on the H200) reads ~15% once a few seconds have passed.
TEST(MoveMeter, SteadyShareReadsAsThatShare) {
  MoveMeter meter;
  int64_t now = 0;
  for (int step = 0; step < 100; ++step) {
    now += 100 * kMs;
    meter.Add(15.0 * kMs, now);
  }
  // The decayed sum of a steady rate, sampled at the end of a step, sits at
  // most one step's moves above rate x time constant.
  EXPECT_NEAR(meter.Fraction(now), 0.15, 0.015);
  EXPECT_GT(meter.Fraction(now), 0.15);
  // Mid-step it is a step's decay lower.
  EXPECT_NEAR(meter.Fraction(now + 50 * kMs), 0.15, 0.015);
}

TEST(MoveMeter, DecaysByEEverySecondWithoutMoves) {
  MoveMeter meter;
  meter.Add(100.0 * kMs, 1'000 * kMs);
  EXPECT_DOUBLE_EQ(meter.Fraction(1'000 * kMs), 0.1);
  EXPECT_NEAR(meter.Fraction(2'000 * kMs), 0.1 / std::exp(1.0), 1e-12);
  EXPECT_LT(meter.Fraction(11'000 * kMs), 0.1 * 1e-4);
}

// A reading taken before the last Add (another thread's clock read lost the
// race for the lock) neither decays nor grows the sum.
TEST(MoveMeter, OlderClockReadingDecaysNothing) {
  MoveMeter meter;
  meter.Add(10.0 * kMs, 2'000 * kMs);
  EXPECT_DOUBLE_EQ(meter.Fraction(1'500 * kMs), 0.01);
  meter.Add(10.0 * kMs, 1'900 * kMs);
  EXPECT_DOUBLE_EQ(meter.Fraction(1'900 * kMs), 0.02);
}

}  // namespace
}  // namespace fragfree
