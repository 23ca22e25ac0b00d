// Report: what fragfree-replay found for one trace, and its text forms: an
// aligned table for people and one JSON object per line per policy for scripts.
// (The HTML page lives in html_report.h.) Thread-safety: value types and pure
// functions.
#ifndef FRAGFREE_BENCH_REPLAY_REPORT_H_
#define FRAGFREE_BENCH_REPLAY_REPORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/base/json.h"
#include "bench/replay/replayer.h"
#include "bench/replay/trace_event.h"

namespace fragfree::replay {

struct PolicyReport {
  ReplayResult replay;
  uint64_t capacity_bytes = 0;
  bool min_capacity_searched = false;
  MinCapacity min_capacity;
};

struct TraceReport {
  std::string path;
  std::string format;
  uint64_t events = 0;
  uint64_t allocations = 0;
  uint64_t peak_live_bytes = 0;
  uint64_t ignored_lines = 0;
  uint64_t skipped_lines = 0;
  uint64_t never_freed = 0;
  std::vector<PolicyReport> policies;
};

// Fills the trace fields of a report (not the policies).
TraceReport SummariseTrace(const Trace& trace);

// U_alloc = peak allocated / peak reserved (0 when nothing was reserved).
double UAlloc(const PolicyFigures& f);
// waste = peak reserved - peak allocated (0 if negative).
uint64_t WasteBytes(const PolicyFigures& f);

// "17.342 GiB" (always GiB with three decimals: easy to compare in a column).
std::string FormatGiB(uint64_t bytes);

std::string FormatTable(const TraceReport& report);
std::string FormatJsonLine(const TraceReport& report,
                           const PolicyReport& policy);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_REPORT_H_
