// Unit tests of allocator/base's pure helpers: the call clock's conversion to
// nanoseconds and the process CPU clock (call_clock.h), byte units and
// power-of-two arithmetic (units.h), the configuration tokenizer
// (config_tokens.h) and HTML escaping (html.h).
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "allocator/base/call_clock.h"
#include "allocator/base/config_tokens.h"
#include "allocator/base/html.h"
#include "allocator/base/units.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

// A sum of ticks converts to the same nanoseconds now as later, and a larger
// sum never to fewer: counters read at a process's start and again later move
// only forward. First in the file, so that it runs as soon after the load as
// the test binary allows (where a guessed rate once made sums shrink).
TEST(CallClock, ASumNeverConvertsLowerLater) {
  const uint64_t sum = 1000000;
  const int64_t first = CallTicksToNs(sum);
  const uint64_t start = CallTicksSlow();
  while (CallTicksSlow() - start < 5000000) {
  }
  const int64_t later = CallTicksToNs(sum);
  EXPECT_GT(first, 0);
  EXPECT_NEAR(double(later), double(first), 0.02 * double(first));
  EXPECT_GE(CallTicksToNs(sum + sum / 10), later);
}

// The process's CPU time (Options::move_clock:cpu) advances while a thread
// works and stands still while the process sleeps.
TEST(CallClock, ProcessCpuTimeStandsStillWhileTheProcessSleeps) {
  const uint64_t before_work = ProcessCpuNs();
  const uint64_t start = CallTicksSlow();
  while (CallTicksSlow() - start < 5000000) {
  }
  const uint64_t before_sleep = ProcessCpuNs();
  EXPECT_GT(before_sleep, before_work);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_LT(ProcessCpuNs() - before_sleep, uint64_t{100000000})
      << "the CPU clock ran on while the process slept";
}

TEST(Units, AlignmentAndPowersOfTwo) {
  EXPECT_EQ(AlignUp(1, 512), 512u);
  EXPECT_EQ(AlignUp(512, 512), 512u);
  EXPECT_EQ(AlignDown(1023, 512), 512u);
  EXPECT_TRUE(IsPowerOfTwo(1));
  EXPECT_TRUE(IsPowerOfTwo(kGiB));
  EXPECT_FALSE(IsPowerOfTwo(0));
  EXPECT_FALSE(IsPowerOfTwo(3 * kMiB));
  EXPECT_EQ(Log2Floor(1), 0);
  EXPECT_EQ(Log2Floor(kMiB), 20);
  EXPECT_EQ(Log2Floor(kMiB + 1), 20);
  EXPECT_EQ(Log2Floor(2 * kMiB - 1), 20);
}

TEST(Units, RoundUpPower2Division) {
  EXPECT_EQ(RoundUpPower2Division(1200, 4), 1280u);  // PyTorch's example
  EXPECT_EQ(RoundUpPower2Division(1024, 4), 1024u);  // powers of two stay
  EXPECT_EQ(RoundUpPower2Division(1280, 4), 1280u);  // on a step stays
  EXPECT_EQ(RoundUpPower2Division(3, 4), 4u);        // step below 1: next power
  EXPECT_EQ(RoundUpPower2Division(5 * kMiB, 1), 8 * kMiB);
  EXPECT_EQ(RoundUpPower2Division(5 * kMiB + 1, 8), 5 * kMiB + kMiB / 2);
}

TEST(Units, FormatBytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3 * kKiB / 2), "1.50 KiB");
  EXPECT_EQ(FormatBytes(kMiB), "1.00 MiB");
  EXPECT_EQ(FormatBytes(3 * kGiB / 2), "1.50 GiB");
}

TEST(ConfigTokens, PunctuationIsATokenAndBlanksSeparateWords) {
  EXPECT_EQ(TokenizeConfig("a:1,b:[x:2,>:4]"),
            (std::vector<std::string>{"a", ":", "1", ",", "b", ":", "[", "x",
                                      ":", "2", ",", ">", ":", "4", "]"}));
  EXPECT_EQ(TokenizeConfig(" a : 1\t b\r\n:2 "),
            (std::vector<std::string>{"a", ":", "1", "b", ":", "2"}));
  EXPECT_EQ(TokenizeConfig("path:/tmp/a:b.pickle"),
            (std::vector<std::string>{"path", ":", "/tmp/a", ":", "b.pickle"}));
  EXPECT_TRUE(TokenizeConfig("").empty());
  EXPECT_TRUE(TokenizeConfig(" \t\n").empty());
  EXPECT_EQ(TokenizeConfig(",,"), (std::vector<std::string>{",", ","}));
}

TEST(Html, EscapesMarkupAndQuotes) {
  EXPECT_EQ(HtmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
  EXPECT_EQ(HtmlEscape("plain 1.5 GiB"), "plain 1.5 GiB");
  EXPECT_EQ(HtmlEscape(""), "");
}

}  // namespace
}  // namespace fragfree
