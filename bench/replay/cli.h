// The fragfree-replay command line: parsing (ParseArgs) and running (RunCli),
// kept apart from main() so tests can drive both. Thread-safety: RunCli runs on
// the calling thread only.
#ifndef FRAGFREE_BENCH_REPLAY_CLI_H_
#define FRAGFREE_BENCH_REPLAY_CLI_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/replay/policy_registry.h"
#include "bench/replay/trace_reader.h"

namespace fragfree::replay {

struct CliOptions {
  std::vector<std::string> policies;  // default: AllPolicyNames()
  double capacity_gib = 141;
  bool min_capacity = true;
  bool json = false;
  std::string html_path;      // empty: no HTML
  std::string snapshot_path;  // empty: no snapshot of fragfree's end state
  bool lenient = false;
  TraceFormat format = TraceFormat::kAuto;
  PolicyOptions policy_options;
  std::vector<std::string> traces;
  bool help = false;
};

std::string UsageText();

// Parses argv[1..] (without the program name). Errors are usage errors.
absl::StatusOr<CliOptions> ParseArgs(const std::vector<std::string>& args);

// Runs the replays and writes the report. Returns the process exit status:
// 0 success, 1 a trace or output file failed.
int RunCli(const CliOptions& options, std::ostream& out, std::ostream& err);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_CLI_H_
