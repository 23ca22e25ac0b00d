// Implementation of report.h.
// Thread-safety: see report.h.
#include "bench/replay/report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace fragfree::replay {

TraceReport SummariseTrace(const Trace& trace) {
  TraceReport r;
  r.path = trace.path;
  r.format = trace.format;
  r.events = trace.events.size();
  r.allocations = trace.num_ids;
  r.peak_live_bytes = PeakLiveBytes(trace);
  r.ignored_lines = trace.ignored_lines;
  r.skipped_lines = trace.skipped_lines;
  r.never_freed = trace.never_freed;
  return r;
}

double UAlloc(const PolicyFigures& f) {
  if (f.peak_reserved_bytes == 0) return 0;
  return static_cast<double>(f.peak_allocated_bytes) /
         static_cast<double>(f.peak_reserved_bytes);
}

uint64_t WasteBytes(const PolicyFigures& f) {
  return f.peak_reserved_bytes > f.peak_allocated_bytes
             ? f.peak_reserved_bytes - f.peak_allocated_bytes
             : 0;
}

std::string FormatGiB(uint64_t bytes) {
  return absl::StrFormat("%.3f GiB", static_cast<double>(bytes) / kGiB);
}

std::string FormatTable(const TraceReport& report) {
  std::string out =
      absl::StrFormat("trace %s (%s): %d events, %d allocations, peak live %s",
                      report.path, report.format, report.events,
                      report.allocations, FormatGiB(report.peak_live_bytes));
  if (report.skipped_lines > 0) {
    absl::StrAppend(&out, ", ", report.skipped_lines, " bad lines skipped");
  }
  if (report.never_freed > 0) {
    absl::StrAppend(&out, ", ", report.never_freed, " never freed");
  }
  absl::StrAppend(&out, "\n");
  const std::vector<std::string> header = {
      "policy", "peak alloc",   "peak reserved", "U_alloc",
      "waste",  "min capacity", "maps",          "unmaps",
      "remaps", "p50 ns",       "p99 ns",        "OOMs"};
  std::vector<std::vector<std::string>> rows = {header};
  for (const PolicyReport& p : report.policies) {
    const PolicyFigures& f = p.replay.figures;
    std::string min_capacity = "-";
    if (p.min_capacity_searched) {
      min_capacity = p.min_capacity.found
                         ? FormatGiB(p.min_capacity.bytes)
                         : absl::StrCat("> ", FormatGiB(p.capacity_bytes));
    }
    rows.push_back(
        {p.replay.policy, FormatGiB(f.peak_allocated_bytes),
         FormatGiB(f.peak_reserved_bytes), absl::StrFormat("%.3f", UAlloc(f)),
         FormatGiB(WasteBytes(f)), min_capacity, absl::StrCat(f.maps),
         absl::StrCat(f.unmaps), absl::StrCat(f.remaps),
         absl::StrCat(p.replay.all_calls.p50_ns),
         absl::StrCat(p.replay.all_calls.p99_ns), absl::StrCat(p.replay.ooms)});
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t c = 0; c < row.size(); ++c) {
      // Names left-aligned, figures right-aligned.
      const std::string pad(width[c] - row[c].size(), ' ');
      absl::StrAppend(&line, c == 0 ? row[c] + pad : pad + row[c],
                      c + 1 < row.size() ? "  " : "");
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string FormatJsonLine(const TraceReport& report,
                           const PolicyReport& policy) {
  const ReplayResult& r = policy.replay;
  const PolicyFigures& f = r.figures;
  std::vector<std::string> kv;
  auto add = [&](std::string_view key, const std::string& value) {
    kv.push_back(absl::StrCat("\"", std::string(key), "\":", value));
  };
  auto num = [](uint64_t v) { return absl::StrCat(v); };
  add("trace", absl::StrCat("\"", JsonEscape(report.path), "\""));
  add("policy", absl::StrCat("\"", JsonEscape(r.policy), "\""));
  add("events", num(r.events));
  add("allocs", num(r.allocs));
  add("frees", num(r.frees));
  add("peak_live_bytes", num(report.peak_live_bytes));
  add("peak_allocated_bytes", num(f.peak_allocated_bytes));
  add("peak_reserved_bytes", num(f.peak_reserved_bytes));
  add("u_alloc", absl::StrFormat("%.4f", UAlloc(f)));
  add("waste_bytes", num(WasteBytes(f)));
  add("capacity_bytes", num(policy.capacity_bytes));
  add("min_capacity_bytes",
      policy.min_capacity_searched && policy.min_capacity.found
          ? num(policy.min_capacity.bytes)
          : "null");
  add("p50_ns", num(r.all_calls.p50_ns));
  add("p99_ns", num(r.all_calls.p99_ns));
  add("alloc_p50_ns", num(r.alloc_calls.p50_ns));
  add("alloc_p99_ns", num(r.alloc_calls.p99_ns));
  add("free_p50_ns", num(r.free_calls.p50_ns));
  add("free_p99_ns", num(r.free_calls.p99_ns));
  add("maps", num(f.maps));
  add("unmaps", num(f.unmaps));
  add("remaps", num(f.remaps));
  add("alloc_retries", num(f.alloc_retries));
  add("ooms", num(r.ooms));
  for (const auto& [key, value] : f.extra) add(key, num(value));
  add("skipped_lines", num(report.skipped_lines));
  add("replay_seconds", absl::StrFormat("%.4f", r.seconds));
  return absl::StrCat("{", absl::StrJoin(kv, ","), "}");
}

}  // namespace fragfree::replay
