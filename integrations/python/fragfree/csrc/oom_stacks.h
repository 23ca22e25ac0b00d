// LargestLiveStacksText: the stacks of the largest live allocations, as text
// for the adapter's (csrc/) OutOfMemoryError message, when PyTorch asked for
// stacks (_record_memory_history(stacks="python")). Symbolizing costs tens of
// milliseconds for a handful of Python stacks; it runs only on an OOM.
// Thread-safety: reads StackHistory (which locks); takes the GIL inside
// torch::symbolize, so the caller must hold no lock another Python thread
// could wait for.
#pragma once

#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <string>
#include <vector>

#include "messages.h"
#include "stack_history.h"

namespace fragfree_native {

inline std::string LargestLiveStacksText(const StackHistory& stacks,
                                         size_t count, size_t max_frames) {
  const auto largest = stacks.LargestLive(count);
  if (largest.empty()) return "";
  std::vector<torch::CapturedTraceback*> tracebacks;
  for (const auto& [size, context] : largest) {
    auto* tb = dynamic_cast<torch::CapturedTraceback*>(context.get());
    if (tb == nullptr) return "";  // a recorder of another kind
    tracebacks.push_back(tb);
  }
  const torch::SymbolizedTracebacks symbolized = torch::symbolize(tracebacks);
  std::string out =
      "\nfragfree: the largest live allocations, where they were made "
      "(innermost frame first; recorded by _record_memory_history):";
  for (size_t i = 0; i < largest.size(); ++i) {
    out += "\n  " + std::to_string(i + 1) + ". " +
           FormatSize(largest[i].first) + ":";
    const std::vector<uint64_t>& frames = symbolized.tracebacks[i];
    const size_t n = std::min(frames.size(), max_frames);
    for (size_t k = 0; k < n; ++k) {
      const auto& f = symbolized.all_frames[frames[k]];
      out += "\n      " + f.filename + ":" + std::to_string(f.lineno) + " " +
             f.funcname;
    }
    if (frames.size() > n) {
      out += "\n      ... " + std::to_string(frames.size() - n) + " more";
    }
  }
  return out;
}

}  // namespace fragfree_native
