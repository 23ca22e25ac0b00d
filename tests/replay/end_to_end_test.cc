// End-to-end: tests/replay/data/tiny.csv (and the same trace as an RMM log)
// through the native and expandable models and through the command line, with
// every expected figure worked out by hand below.
//
// The trace (sizes in bytes; MiB = 1048576):
//   line 2  alloc A 1000        stream 0
//   line 3  alloc B 5 MiB       stream 0
//   line 4  alloc C 4 MiB       stream 0
//   line 6  free  B             (free_completed; line 5 is free_requested)
//   line 7  alloc D 6 MiB       stream 1
//   line 8  alloc E 12 MiB      stream 0
//   line 10 free  C
//   line 11 alloc F 16 MiB      stream 0
//   then D, E, F, A are freed.
//
// Peak live: after F, A + D + E + F = 1000 + (6 + 12 + 16) MiB = 35652584.
//
// native (PyTorch's default allocator):
//   A: 1000 rounds to 1024, small pool: a 2 MiB segment S, split.     2 MiB
//   B: 5 MiB is large and < 10 MiB: a 20 MiB segment L1 = [B 5][15].  22 MiB
//   C: best fit on stream 0 is L1's 15 MiB: L1 = [B 5][C 4][11].
//   free B: its neighbour C is live, so L1 = [5 free][C 4][11 free].
//   D: stream 1 has no blocks: a 20 MiB segment L2 = [D 6][14].       42 MiB
//   E: 12 MiB; stream 0's free blocks are 5 and 11 MiB: a new segment of
//      12 MiB (>= 10 MiB: rounded up to 2 MiB), not split.            54 MiB
//   free C: merges with both neighbours, L1 is one free 20 MiB block.
//   F: 16 MiB fits L1's 20 MiB block; the 4 MiB remainder is split.   54 MiB
//   Peak reserved 54 MiB = 56623104; peak allocated (rounded sizes) after F:
//   1024 + 34 MiB = 35652608, so U_alloc = 35652608 / 56623104 = 0.6296.
//   Minimum capacity: every step above needed its new segment (at 52 MiB, E's
//   cudaMalloc fails, and no segment is wholly free to release): 54 MiB.
//
// expandable (pages of 2 MiB small / 20 MiB large, one segment per stream):
//   A: small segment, one 2 MiB page.                                   2 MiB
//   B: stream 0 large segment, page 0 = [0, 20): B = [0, 5).           22 MiB
//   C: [5, 9); free [9, 20).  free B: [0, 5) free.
//   D: stream 1 large segment, one page.                               42 MiB
//   E: 12 MiB; free are [0, 5) and [9, 20): none fits, so it grows from
//      [9, 20) into page 1: E = [9, 21), free [21, 40).                62 MiB
//   free C: [0, 9) free.
//   F: 16 MiB: best fit is [21, 40) (19 MiB); F = [21, 37).            62 MiB
//   Peak reserved 62 MiB = 65011712; peak allocated 35652608 (as native);
//   minimum capacity 62 MiB (below it E's page cannot be mapped and no page is
//   wholly free).
// Thread-safety: single-threaded tests.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/replay/cli.h"
#include "bench/replay/expandable_policy.h"
#include "bench/replay/native_policy.h"
#include "bench/replay/policy_registry.h"
#include "bench/replay/replayer.h"
#include "bench/replay/trace_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fragfree::replay {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kPeakLive = 35652584;
constexpr uint64_t kPeakAllocated = 35652608;
constexpr uint64_t kNativeReserved = 54 * kMiB;
constexpr uint64_t kExpandableReserved = 62 * kMiB;

std::string DataPath(const std::string& name) {
  return std::string(FRAGFREE_REPLAY_TEST_DATA) + "/" + name;
}

struct Expected {
  const char* policy;
  uint64_t peak_reserved;
};

class TinyTraceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyTraceTest, FiguresMatchTheHandWorkedOnes) {
  absl::StatusOr<Trace> trace =
      ReadTrace(DataPath(GetParam()), TraceFormat::kAuto, ReadOptions{});
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->events.size(), 12u);
  EXPECT_EQ(PeakLiveBytes(*trace), kPeakLive);
  for (const Expected& e : {Expected{"native", kNativeReserved},
                            Expected{"expandable", kExpandableReserved}}) {
    SCOPED_TRACE(e.policy);
    absl::StatusOr<PolicyFactory> factory =
        MakePolicyFactory(e.policy, PolicyOptions{});
    ASSERT_TRUE(factory.ok());
    PolicyConfig config;
    auto policy = (*factory)(config);
    ASSERT_TRUE(policy.ok());
    ReplayOptions options;
    options.check_invariants_every_event = true;
    ReplayResult r = Replay(*trace, **policy, options);
    EXPECT_TRUE(r.invariant_error.ok()) << r.invariant_error;
    EXPECT_EQ(r.ooms, 0u);
    EXPECT_EQ(r.peak_live_bytes, kPeakLive);
    EXPECT_EQ(r.figures.peak_reserved_bytes, e.peak_reserved);
    EXPECT_EQ(r.figures.peak_allocated_bytes, kPeakAllocated);
    EXPECT_EQ(r.figures.allocated_bytes, 0u);
    absl::StatusOr<MinCapacity> min = FindMinCapacity(
        *trace, *factory, config, r.figures.peak_reserved_bytes);
    ASSERT_TRUE(min.ok());
    EXPECT_TRUE(min->found);
    EXPECT_EQ(min->bytes, e.peak_reserved);
  }
}

INSTANTIATE_TEST_SUITE_P(BothFormats, TinyTraceTest,
                         ::testing::Values("tiny.csv", "tiny_rmm.csv"));

TEST(CliTest, JsonAndHtmlReports) {
  const std::string html_path = ::testing::TempDir() + "/tiny.html";
  absl::StatusOr<CliOptions> options =
      ParseArgs({"--policy", "native,expandable", "--json", "--html", html_path,
                 DataPath("tiny.csv")});
  ASSERT_TRUE(options.ok()) << options.status();
  std::ostringstream out;
  std::ostringstream err;
  ASSERT_EQ(RunCli(*options, out, err), 0) << err.str();
  std::istringstream lines(out.str());
  std::string native;
  std::string expandable;
  std::getline(lines, native);
  std::getline(lines, expandable);
  EXPECT_THAT(native, HasSubstr("\"policy\":\"native\""));
  EXPECT_THAT(native, HasSubstr("\"peak_live_bytes\":35652584"));
  EXPECT_THAT(native, HasSubstr("\"peak_reserved_bytes\":56623104"));
  EXPECT_THAT(native, HasSubstr("\"u_alloc\":0.6296"));
  EXPECT_THAT(native, HasSubstr("\"waste_bytes\":20970496"));
  EXPECT_THAT(native, HasSubstr("\"min_capacity_bytes\":56623104"));
  EXPECT_THAT(native, HasSubstr("\"maps\":4"));  // S, L1, L2, E's segment
  EXPECT_THAT(native, HasSubstr("\"unmaps\":0"));
  for (const char* key : {"\"events\":12", "\"p50_ns\":", "\"p99_ns\":"}) {
    EXPECT_THAT(native, HasSubstr(key));
  }
  EXPECT_THAT(expandable, HasSubstr("\"policy\":\"expandable\""));
  EXPECT_THAT(expandable, HasSubstr("\"peak_reserved_bytes\":65011712"));
  EXPECT_THAT(expandable, HasSubstr("\"min_capacity_bytes\":65011712"));

  std::ifstream in(html_path);
  const std::string html((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, HasSubstr("<svg"));
  EXPECT_THAT(html, HasSubstr("0.630"));  // the table's U_alloc
  for (const char* external :
       {"<script", "src=", "href=", "@import", "url(", "<link"}) {
    EXPECT_THAT(html, Not(HasSubstr(external))) << external;
  }
}

TEST(CliTest, TableOutputAndBadTraces) {
  absl::StatusOr<CliOptions> options =
      ParseArgs({"--no-min-capacity", "--policy=native", DataPath("tiny.csv"),
                 DataPath("missing.csv")});
  ASSERT_TRUE(options.ok()) << options.status();
  std::ostringstream out;
  std::ostringstream err;
  EXPECT_EQ(RunCli(*options, out, err), 1);  // the missing trace
  EXPECT_THAT(out.str(), HasSubstr("peak live 0.033 GiB"));
  EXPECT_THAT(out.str(), HasSubstr("native"));
  EXPECT_THAT(out.str(), HasSubstr("0.053 GiB"));  // 54 MiB reserved
  EXPECT_THAT(err.str(), HasSubstr("missing.csv: cannot open"));
}

TEST(CliTest, UsageErrors) {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"--bogus", "t.csv"},
      {"--policy"},
      {"--policy", "tcmalloc", "t.csv"},
      {"--capacity-gib", "-1", "t.csv"},
      {"--capacity-gib", "lots", "t.csv"},
      {"--format", "xml", "t.csv"},
      {"--json=yes", "t.csv"},
      {"--alloc-conf", "nonsense:1", "t.csv"},
      {"--html", "", "t.csv"},
  };
  for (const auto& args : bad) {
    EXPECT_FALSE(ParseArgs(args).ok()) << ::testing::PrintToString(args);
  }
  absl::StatusOr<CliOptions> help = ParseArgs({"--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_TRUE(help->help);
  EXPECT_THAT(UsageText(), HasSubstr("--capacity-gib"));
  absl::StatusOr<CliOptions> o =
      ParseArgs({"--capacity-gib=80", "--lenient", "--format", "rmm", "x"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->capacity_gib, 80);
  EXPECT_TRUE(o->lenient);
  EXPECT_EQ(o->format, TraceFormat::kRmm);
  EXPECT_EQ(o->policies, AllPolicyNames());
}

}  // namespace
}  // namespace fragfree::replay

namespace fragfree::replay {
namespace {

// --snapshot writes fragfree's end state with its event trace as a pickle that
// Python loads (and whose alloc events pair with the trace's allocations).
TEST(CliTest, SnapshotOfTheEndState) {
  const std::string path =
      std::string(::testing::TempDir()) + "/replay_snapshot.pickle";
  absl::StatusOr<CliOptions> options =
      ParseArgs({"--no-min-capacity", "--policy", "fragfree", "--snapshot",
                 path, DataPath("tiny.csv")});
  ASSERT_TRUE(options.ok()) << options.status();
  std::ostringstream out, err;
  ASSERT_EQ(RunCli(*options, out, err), 0) << err.str();
  std::string cmd =
      "/usr/bin/python3 -c \"import pickle,sys;"
      "s=pickle.load(open(sys.argv[1],'rb'));"
      "a=[e for e in s['device_traces'][0] if e['action']=='alloc'];"
      "sys.exit(0 if a and isinstance(s['segments'],list) else 1)\" " +
      path;
  EXPECT_EQ(system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace fragfree::replay
