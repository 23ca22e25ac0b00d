// The OOM report at the C edge: when an allocation fails for lack of memory
// (ff_malloc, the LD_PRELOAD interposers, the pluggable and native modes
// through ff_malloc), build the report from the device's state
// (obs/oom_report.h: facts, stats, memory map, diagnosis and advice, with the
// bucket advisor's round_buckets string from the device's sampled request
// sizes) and return its text for the error message (stderr by default;
// PyTorch's OutOfMemoryError in the Python modes). With the oom_report_path
// option it also writes the text, JSON and HTML next to each other and prints
// one line on stderr naming them.
// Thread-safety: called without the allocator's lock held; safe from any
// thread (each report gets its own file names).
#ifndef FRAGFREE_SHIM_OOM_H_
#define FRAGFREE_SHIM_OOM_H_

#include <string>

#include "absl/status/status.h"
#include "allocator/device_allocator.h"
#include "allocator/obs/oom_report.h"
#include "allocator/options.h"

namespace fragfree {

// What the program told fragfree for its OOM reports (ff_set_oom_hints).
struct OomHints {
  MemoryCategories categories;
  ActiveTechniques techniques;
};
// Replaces `device`'s hints (thread-safe).
void SetOomHints(int device, const OomHints& hints);

// The report's text. When options.oom_report_path is set, writes
// <oom_report_path>/fragfree-oom-<pid>-<n>.{txt,json,html} (creating the
// directory and its parents), prints
// "fragfree: OOM report written to <base>.{txt,json,html}" on stderr and ends
// the text with the same paths; a path that cannot be written is said on
// stderr and in the text, with the reason.
std::string ReportOom(DeviceAllocator& device, const Options& options);

// The status to report for a failed Malloc on `device` (the LD_PRELOAD
// interposers): an out-of-memory failure becomes ResourceExhausted with the
// whole report (ReportOom with the device's options) as its message; any other
// status is returned unchanged. A retry of the last reported request (same
// device, stream and size) with nothing allocated since gets a one-line
// message naming that report instead of a second report.
absl::Status OomStatus(DeviceAllocator& device, const absl::Status& failure);

}  // namespace fragfree

#endif  // FRAGFREE_SHIM_OOM_H_
