// The OOM report at the C edge: when ff_malloc fails for lack of memory, build
// the report from the device's state (obs/oom_report.h: facts, stats, memory
// map, diagnosis and advice, with the bucket advisor's round_buckets string
// from the device's sampled request sizes), return its text for the error
// message (stderr by default; PyTorch's RuntimeError in pluggable mode), and,
// with the oom_report_path option, write its JSON and HTML next to each other.
// Thread-safety: called without the allocator's lock held; safe from any
// thread.
#ifndef FRAGFREE_SHIM_OOM_H_
#define FRAGFREE_SHIM_OOM_H_

#include <string>

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

// The report's text; writes
// <oom_report_path>/fragfree-oom-<pid>-<n>.{json,html} when the option is set
// (and says so at the end of the text).
std::string ReportOom(DeviceAllocator& device, const Options& options);

}  // namespace fragfree

#endif  // FRAGFREE_SHIM_OOM_H_
