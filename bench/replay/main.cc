// fragfree-replay: replays allocation traces through allocator models
// (PyTorch's native and expandable-segments allocators, fragfree's engine) and
// reports fragmentation, minimum capacity and per-call latency. See
// docs/replay.md. Thread-safety: single-threaded program.
#include <iostream>
#include <string>
#include <vector>

#include "bench/replay/cli.h"

int main(int argc, char** argv) {
  using fragfree::replay::ParseArgs;
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<fragfree::replay::CliOptions> options = ParseArgs(args);
  if (!options.ok()) {
    std::cerr << "fragfree-replay: " << options.status().message() << "\n\n"
              << fragfree::replay::UsageText();
    return 2;
  }
  if (options->help) {
    std::cout << fragfree::replay::UsageText();
    return 0;
  }
  return fragfree::replay::RunCli(*options, std::cout, std::cerr);
}
