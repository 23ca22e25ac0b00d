// The adapter's (csrc/) OutOfMemoryError: ThrowOutOfMemory builds PyTorch's
// message with libfragfree's numbers and report, and LargestLiveStacksText
// adds the stacks of the largest live allocations when PyTorch asked for
// stacks (_record_memory_history(stacks="python")). Symbolizing costs tens of
// milliseconds for a handful of Python stacks; it runs only on an OOM.
// Thread-safety: reads libfragfree and StackHistory (which lock); takes the
// GIL inside torch::symbolize, so the caller must hold no lock another Python
// thread could wait for.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"
#include "fragfree_api.h"
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

// Throws PyTorch's OutOfMemoryError for a failed allocation of `size` bytes on
// `device`, after telling the profiler and the OOM observers, as PyTorch's
// allocator does: its message starts like PyTorch's and adds libfragfree's
// whole report and the stacks. Must be called on the thread whose ff_malloc
// just failed, before any other fragfree call that can fail: the report is
// that call's ff_last_error() (thread-local), the full text ReportOom built
// (shim/oom.h), with the report files' paths when oom_report_path is set.
[[noreturn]] inline void ThrowOutOfMemory(
    const FragfreeApi& api, const StackHistory& stacks,
    const std::vector<cca::OutOfMemoryObserver>& observers, size_t size,
    DeviceIndex device, double fraction) {
  const std::string report = api.LastError();  // first: nothing may replace it
  size_t device_free = 0, device_total = 0;
  {
    c10::cuda::CUDAGuard guard(device);
    if (cudaMemGetInfo(&device_free, &device_total) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }
  (void)cudaGetLastError();  // clear any sticky allocation error, as native
                             // does
  int64_t allocated = 0, reserved = 0;
  ff_stats_t stats;
  std::string err;
  if (api.GetStats(device, &stats, &err)) {
    allocated = stats.allocated_bytes[kStatsAll].current;
    reserved = stats.reserved_bytes[kStatsAll].current;
  }
  const size_t allowed =
      fraction < 1.0 ? static_cast<size_t>(fraction * device_total) : 0;
  c10::reportOutOfMemoryToProfiler(static_cast<int64_t>(size),
                                   static_cast<size_t>(allocated),
                                   static_cast<size_t>(reserved),
                                   c10::Device(c10::DeviceType::CUDA, device));
  for (const auto& obs : observers) {
    obs(device, size, allowed ? allowed : device_total, device_free);
  }
  const std::string allowed_info =
      allowed ? FormatSize(allowed) + " allowed; " : "";
  // The stacks PyTorch's recorder gathered (none unless history with stacks
  // is on): the engine's report lists the largest allocations without them.
  const std::string where = stacks.on()
                                ? LargestLiveStacksText(stacks, /*count=*/5,
                                                        /*max_frames=*/8)
                                : std::string();
  TORCH_CHECK_WITH(
      OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ",
      FormatSize(size), ". GPU ", Num(device), " has a total capacity of ",
      FormatSize(device_total), " of which ", FormatSize(device_free),
      " is free. ", allowed_info, "Of the allocated memory ",
      FormatSize(static_cast<uint64_t>(allocated)),
      " is allocated by PyTorch, and ",
      FormatSize(
          static_cast<uint64_t>(std::max<int64_t>(0, reserved - allocated))),
      " is reserved by PyTorch but unallocated (allocator: fragfree).",
      report.empty() ? "\nfragfree: no report (ff_last_error is empty)"
                     : "\n\nfragfree's report:\n",
      report, where);
}

}  // namespace fragfree_native
