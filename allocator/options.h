// Options: every setting of fragfree, parsed once from FRAGFREE_CONF (same
// syntax as PYTORCH_CUDA_ALLOC_CONF: `key:value,key:[k:v,...]`). Unknown keys
// and bad values are errors that name the key. The keys are one table in
// options.cc; `Keys()` gives each key's default and documentation, and the
// README's "Configuration: FRAGFREE_CONF" table is `MarkdownTable()` (a test
// keeps them equal). Thread-safety: a value type; the static functions are
// pure.
#ifndef FRAGFREE_ALLOCATOR_OPTIONS_H_
#define FRAGFREE_ALLOCATOR_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/blocks/size_classes.h"

namespace fragfree {

// The largest `bucket_sample` (one request in N goes to the histogram).
inline constexpr uint64_t kMaxBucketSample = uint64_t{1} << 20;

struct Options {
  // A name in allocator/phys/backend_registry.cc's table.
  std::string backend = "cuda";
  size_t host_capacity_bytes = size_t{1} << 30;  // host/simulated backends
  size_t host_granularity_bytes = size_t{2} << 20;
  // Devices the host/simulated backends emulate (0 .. n-1), each with its own
  // host_capacity_bytes: multi-device paths tested without GPUs.
  int host_devices = 1;
  double memory_fraction = 1.0;  // of the device's total memory
  // 0: no limit beyond the device (and fraction).
  size_t memory_limit_bytes = 0;
  RoundingConfig rounding;
  // When a request needs new pages, whether to first take whole free pages
  // (whose last use is known complete) from cached holes instead of creating
  // pages: always, never (only at the cap), or automatically: once the mapped
  // bytes would exceed (1 + grow_slack) x the allocated high-water mark. See
  // Note [Where pages come from].
  enum class Reclaim { kNever, kAlways, kAuto };
  Reclaim reclaim_before_grow = Reclaim::kAuto;
  double grow_slack = 0.03;
  // With reclaim_before_grow auto: past the slack, a request creates pages
  // rather than moving cached ones while moving pages has taken more than
  // this fraction of the recent time (on move_clock; 0: create once any page
  // has moved recently; 1: no limit). See Note [Move time budget] in
  // docs/design.md.
  double move_time_budget = 0.0;
  // The clock move_time_budget's "recent time" runs on: the wall clock, or
  // the process's CPU time (all its threads), which stands still while the
  // process sleeps or blocks. See Note [Move time budget].
  enum class MoveClock { kWall, kCpu };
  MoveClock move_clock = MoveClock::kWall;
  // In `auto`, whether blocks the program freed while another stream's
  // recorded use (record_stream) may still be running count as in use: the
  // high-water mark is then of active bytes, and while such blocks are pending
  // a request creates pages instead of reclaiming. See Note [Pending frees
  // count as in use].
  bool grow_for_pending_frees = true;
  // A page reclaimed from a hole the request's own stream freed moves at once,
  // its old address unmapped once the GPU has passed the hole's last use,
  // instead of the CPU waiting for that. See Note [Moving a page without
  // waiting].
  bool defer_unmap = true;
  // Bytes per page, one backend handle each: 0 for the backend's granularity,
  // else a multiple of it (phys/page_sized_backend.h). See Note [Page size and
  // handle size] in docs/design.md.
  size_t page_size_bytes = 0;
  // Bytes per page of the large blocks whose size is a multiple of it (a
  // second page size, in arenas of their own): 0 for none, else a multiple of
  // the page above. The default is none where the page does not divide it.
  // See Note [Large pages] in docs/design.md.
  static constexpr size_t kDefaultLargePageBytes = size_t{32} << 20;
  size_t large_page_bytes = kDefaultLargePageBytes;
  // VA reserved per arena, as a multiple of the memory limit.
  size_t va_factor = 2;
  // Observability (README, "Configuration: FRAGFREE_CONF"; docs/stats.md).
  bool stats_at_exit = false;
  // Time the CPU spent inside every Malloc and Free (stats' alloc_cpu_ns and
  // alloc_cpu_calls; two clock reads per call). Off: both stay 0.
  bool time_calls = false;
  std::string snapshot_path;    // write a snapshot here at exit
  std::string oom_report_path;  // write OOM reports (text, JSON, HTML) here
  size_t trace_entries = 0;     // trace ring buffer capacity; 0 = off
  // Bucket advisor (docs/oom.md): 1 in `bucket_sample` requests (on average)
  // goes into the device's request-size histogram (0 = off); OOM reports and
  // the exit summary advise `bucket_advice_k` rounding buckets from it.
  uint32_t bucket_sample = 8;
  size_t bucket_advice_k = 4;

  // Parses a FRAGFREE_CONF string on top of `base`.
  static absl::StatusOr<Options> Parse(std::string_view conf);
  static absl::StatusOr<Options> Parse(std::string_view conf, Options base);
  // Every key, in table order.
  static const std::vector<std::string>& KnownKeys();

  // One key's documentation: its name, its default as the README shows it
  // ("none" where unset), and one line saying what it does.
  struct KeyDoc {
    std::string_view name;
    std::string_view default_text;
    std::string_view doc;
  };
  static const std::vector<KeyDoc>& Keys();
  // The README's table of keys: a header and one markdown row per key.
  static std::string MarkdownTable();
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OPTIONS_H_
