// OomReportHtml: the OOM report as one self-contained page (inline CSS and
// inline SVG, no scripts, no external resources): the headline, the device
// memory split, the numbers, the diagnosis and advice, and a memory map with
// one bar per arena. A bar shows the arena's VA up to its last used page in
// 1000 columns; each column is stacked by how many of its bytes are allocated,
// pending other streams, free but mapped (cached), and unmapped, and equal
// neighbouring columns share one rect, so the page stays small for any number
// of blocks (O(blocks + pages + columns) per arena). Thread-safety: pure
// functions over values.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/base/html.h"
#include "allocator/base/units.h"
#include "allocator/obs/oom_report.h"

namespace fragfree {
namespace {

constexpr int kWidth = 1000;       // SVG user units across a bar
constexpr int kColumns = 1000;     // memory map columns per arena
constexpr int kBarHeight = 16;     // memory map bar height
constexpr size_t kMaxArenas = 64;  // arenas drawn (largest mapped first)

constexpr const char* kAllocated = "#2b6cb0";
constexpr const char* kPending = "#805ad5";
constexpr const char* kReclaimable = "#68d391";
constexpr const char* kStranded = "#ed8936";
constexpr const char* kIdle = "#ecc94b";
constexpr const char* kOther = "#e53e3e";
constexpr const char* kFree = "#e2e8f0";
constexpr const char* kUnmapped = "#f1f5f9";

constexpr const char* kCss = R"css(
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;
margin:24px auto;max-width:1080px;color:#1a202c;padding:0 16px}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px;
border-bottom:1px solid #e2e8f0;padding-bottom:4px}
pre{background:#f7fafc;border:1px solid #e2e8f0;padding:10px;white-space:pre-wrap;
word-break:break-word;font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
table{border-collapse:collapse}td,th{padding:3px 12px 3px 0;text-align:left;
vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}
.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:11px;height:11px;margin-right:4px;
vertical-align:-1px;border:1px solid #a0aec0}
.badge{display:inline-block;font-size:11px;padding:1px 7px;border-radius:9px;
background:#edf2f7;margin-right:6px}
.severe{background:#fed7d7}.moderate{background:#feebc8}.low{background:#c6f6d5}
.how{color:#4a5568;font-size:13px;margin:2px 0 8px}
li{margin-bottom:4px}svg text{font:11px system-ui,sans-serif;fill:#2d3748}
.cause{font-size:15px;background:#ebf8ff;border-left:4px solid #3182ce;
padding:8px 12px}
)css";

struct Segment {
  std::string label;
  size_t bytes;
  const char* colour;
};

// One horizontal bar split in proportion to `segs`, with a legend below.
void AppendStackedBar(const std::vector<Segment>& segs, std::string* out) {
  double total = 0;
  for (const Segment& s : segs) total += double(s.bytes);
  absl::StrAppendFormat(out,
                        "<svg viewBox=\"0 0 %d 28\" width=\"100%%\" "
                        "role=\"img\"><rect width=\"%d\" height=\"28\" "
                        "fill=\"%s\"/>",
                        kWidth, kWidth, kFree);
  double x = 0;
  for (const Segment& s : segs) {
    if (s.bytes == 0 || total <= 0) continue;
    double w = kWidth * double(s.bytes) / total;
    absl::StrAppendFormat(out,
                          "<rect x=\"%.2f\" width=\"%.2f\" height=\"28\" "
                          "fill=\"%s\"><title>%s: %s</title></rect>",
                          x, w, s.colour, HtmlEscape(s.label),
                          FormatBytes(s.bytes));
    x += w;
  }
  *out += "</svg><div class=\"legend\">";
  for (const Segment& s : segs) {
    absl::StrAppendFormat(out,
                          "<span><i class=\"sw\" style=\"background:%s\"></i>"
                          "%s %s (%.1f%%)</span>",
                          s.colour, HtmlEscape(s.label), FormatBytes(s.bytes),
                          total > 0 ? 100.0 * double(s.bytes) / total : 0.0);
  }
  *out += "</div>";
}

// Adds the bytes of [lo, hi) (offsets in the arena) to the columns.
void AddRange(double lo, double hi, double column_bytes,
              std::vector<double>& cols) {
  if (hi <= lo) return;
  int c0 = std::clamp(int(lo / column_bytes), 0, kColumns - 1);
  int c1 = std::clamp(int((hi - 1) / column_bytes), 0, kColumns - 1);
  for (int c = c0; c <= c1; ++c) {
    double a = std::max(lo, c * column_bytes);
    double b = std::min(hi, (c + 1) * column_bytes);
    if (b > a) cols[c] += b - a;
  }
}

// One arena's row: a label and a bar at height `y`.
void AppendArenaRow(const ArenaView& a, size_t index, int y, std::string* out) {
  const size_t ps = std::max<size_t>(a.page_size, 1);
  size_t used_end = a.page_mapped.size() * ps;
  size_t blocks_live = 0;
  for (const BlockView& b : a.blocks) {
    if (b.state == BlockState::kFree) continue;
    ++blocks_live;
    used_end = std::max(used_end, b.addr + b.size - a.base);
  }
  size_t extent =
      std::min(AlignUp(std::max(used_end, ps), ps), std::max(a.va_size, ps));
  const double cw = double(extent) / kColumns;
  std::vector<double> mapped(kColumns, 0), alloc(kColumns, 0),
      pend(kColumns, 0);
  for (size_t p = 0, n = a.page_mapped.size(); p < n;) {
    if (!a.page_mapped[p]) {
      ++p;
      continue;
    }
    size_t q = p;
    while (q < n && a.page_mapped[q]) ++q;
    AddRange(double(p * ps), double(std::min(q * ps, extent)), cw, mapped);
    p = q;
  }
  for (const BlockView& b : a.blocks) {
    if (b.state == BlockState::kFree) continue;
    double lo = double(b.addr - a.base), hi = lo + double(b.size);
    AddRange(lo, std::min(hi, double(extent)), cw,
             b.state == BlockState::kAllocated ? alloc : pend);
  }
  absl::StrAppendFormat(
      out,
      "<text x=\"0\" y=\"%d\">arena %d: stream %#x, %s%s, %s mapped, %d live "
      "blocks; shown: first %s of %s VA</text>",
      y + 11, index, a.stream, a.small ? "small" : "large",
      a.pool_id[0] || a.pool_id[1]
          ? absl::StrFormat(", graph pool (%d,%d)", a.pool_id[0], a.pool_id[1])
          : std::string(),
      FormatBytes(a.mapped_pages * a.page_size), blocks_live,
      FormatBytes(extent), FormatBytes(a.va_size));
  const int bar_y = y + 15;
  static_assert(kWidth == kColumns, "one SVG unit per column");
  // Heights per column: allocated, pending, free mapped (bottom up); the rest
  // is unmapped. A non-zero part gets at least one unit.
  auto heights = [&](int c) {
    std::array<int, 3> h;
    double parts[3] = {alloc[c], pend[c],
                       std::max(0.0, mapped[c] - alloc[c] - pend[c])};
    int sum = 0, big = 0;
    for (int i = 0; i < 3; ++i) {
      h[i] = int(std::lround(kBarHeight * parts[i] / cw));
      if (h[i] == 0 && parts[i] > 0) h[i] = 1;
      sum += h[i];
      if (h[i] > h[big]) big = i;
    }
    if (sum > kBarHeight) h[big] -= sum - kBarHeight;
    return h;
  };
  absl::StrAppendFormat(out,
                        "<rect x=\"0\" y=\"%d\" width=\"%d\" height=\"%d\" "
                        "fill=\"%s\" stroke=\"#cbd5e0\" stroke-width=\"0.5\"/>",
                        bar_y, kWidth, kBarHeight, kUnmapped);
  const char* colours[3] = {kAllocated, kPending, kStranded};
  std::vector<std::array<int, 3>> column_heights(kColumns);
  for (int c = 0; c < kColumns; ++c) column_heights[c] = heights(c);
  int c = 0;
  while (c < kColumns) {
    const std::array<int, 3>& h = column_heights[c];
    int e = c + 1;
    while (e < kColumns && column_heights[e] == h) ++e;
    int bottom = bar_y + kBarHeight;
    for (int i = 0; i < 3; ++i) {
      if (h[i] <= 0) continue;
      bottom -= h[i];
      absl::StrAppend(out, "<rect x=\"", c, "\" y=\"", bottom, "\" width=\"",
                      e - c, "\" height=\"", h[i], "\" fill=\"", colours[i],
                      "\"/>");
    }
    c = e;
  }
}

void AppendMemoryMap(const std::vector<ArenaView>& arenas, std::string* out) {
  std::vector<size_t> order;
  for (size_t i = 0; i < arenas.size(); ++i) {
    if (arenas[i].mapped_pages > 0 || !arenas[i].blocks.empty()) {
      order.push_back(i);
    }
  }
  const size_t shown_count = std::min(order.size(), kMaxArenas);
  std::partial_sort(order.begin(), order.begin() + shown_count, order.end(),
                    [&](size_t x, size_t y) {
                      return arenas[x].mapped_pages > arenas[y].mapped_pages;
                    });
  std::vector<size_t> shown(order.begin(), order.begin() + shown_count);
  std::sort(shown.begin(), shown.end());
  if (shown.empty()) {
    *out += "<p>No arena holds memory.</p>";
    return;
  }
  constexpr int kRow = 40;
  absl::StrAppendFormat(out,
                        "<svg viewBox=\"0 0 %d %d\" width=\"100%%\" "
                        "role=\"img\">",
                        kWidth, int(shown.size()) * kRow);
  for (size_t i = 0; i < shown.size(); ++i) {
    AppendArenaRow(arenas[shown[i]], shown[i], int(i) * kRow, out);
  }
  *out += "</svg>";
  absl::StrAppendFormat(
      out,
      "<div class=\"legend\"><span><i class=\"sw\" style=\"background:%s\">"
      "</i>allocated</span><span><i class=\"sw\" style=\"background:%s\"></i>"
      "freed, pending other streams</span><span><i class=\"sw\" "
      "style=\"background:%s\"></i>free, mapped (cached)</span><span><i "
      "class=\"sw\" style=\"background:%s\"></i>unmapped VA</span></div>",
      kAllocated, kPending, kStranded, kUnmapped);
  if (order.size() > shown.size()) {
    absl::StrAppendFormat(out,
                          "<p>%d more arenas with less memory not drawn.</p>",
                          order.size() - shown.size());
  }
}

void Row(std::string* out, std::string_view name, std::string_view value,
         std::string_view note = "") {
  absl::StrAppend(out, "<tr><td>", HtmlEscape(name), "</td><td class=\"n\">",
                  HtmlEscape(value), "</td><td>", HtmlEscape(note),
                  "</td></tr>");
}

// The page's head, the headline and why the request failed.
void AppendHeader(const OomFacts& f, std::string* h) {
  absl::StrAppend(h,
                  "<!DOCTYPE html><html lang=\"en\"><head><meta "
                  "charset=\"utf-8\"><title>fragfree OOM report: device ",
                  f.device, "</title><style>", kCss, "</style></head><body>");
  absl::StrAppend(h, "<h1>Out of memory on GPU ", f.device,
                  ": fragfree report</h1><pre>", HtmlEscape(OomHeadline(f)),
                  "</pre>");
  if (!f.reason.empty()) {
    absl::StrAppend(h, "<p><b>Why:</b> ", HtmlEscape(f.reason), "</p>");
  }
}

// The device memory split: fragfree's parts, other processes, free.
void AppendDeviceMemory(const OomFacts& f, const OomDiagnosis& d,
                        std::string* h) {
  *h += "<h2>Device memory</h2>";
  const size_t fragfree_pages = f.mapped_bytes + f.idle_bytes;
  const size_t accounted = fragfree_pages + d.other_bytes;
  const size_t free_bytes =
      f.device_total_bytes > accounted ? f.device_total_bytes - accounted : 0;
  AppendStackedBar(
      {{"fragfree allocated", f.allocated_bytes, kAllocated},
       {"fragfree pending", d.pending_bytes, kPending},
       {"fragfree cached, reclaimable", f.reclaimable_bytes, kReclaimable},
       {"fragfree cached, stranded", d.stranded_bytes, kStranded},
       {"fragfree idle pages", f.idle_bytes, kIdle},
       {"other processes / non-fragfree", d.other_bytes, kOther},
       {"free", free_bytes, kFree}},
      h);
}

// The numbers table.
void AppendNumbers(const OomFacts& f, const OomDiagnosis& d, std::string* h) {
  *h += "<h2>Numbers</h2><table>";
  Row(h, "requested", FormatBytes(f.requested_bytes),
      absl::StrCat(FormatBytes(f.rounded_bytes), " after rounding",
                   f.pages_needed ? absl::StrCat("; ", f.pages_needed,
                                                 " more pages needed")
                                  : ""));
  Row(h, "device total", FormatBytes(f.device_total_bytes));
  Row(h, "device free", FormatBytes(f.device_free_bytes));
  Row(h, "fragfree limit", FormatBytes(f.limit_bytes));
  Row(h, "fragfree mapped (reserved)", FormatBytes(f.mapped_bytes));
  Row(h, "allocated", FormatBytes(f.allocated_bytes));
  Row(h, "pending other streams", FormatBytes(d.pending_bytes));
  Row(h, "cached free", FormatBytes(f.cached_bytes));
  Row(h, "  reclaimable", FormatBytes(f.reclaimable_bytes),
      "whole free pages: fragfree remaps them");
  Row(h, "  stranded", FormatBytes(d.stranded_bytes),
      "free bytes in pages shared with live blocks");
  Row(h, "idle pages", FormatBytes(f.idle_bytes));
  Row(h, "rounding padding", FormatBytes(d.padding_bytes),
      "allocated - requested");
  Row(h, "other (outside fragfree)", FormatBytes(d.other_bytes),
      "device used - fragfree's pages");
  *h += "</table>";
}

// The gap and the effective gap, with their verdicts.
void AppendFragmentation(const OomDiagnosis& d, std::string* h) {
  absl::StrAppendFormat(
      h,
      "<h2>Fragmentation</h2><p><span class=\"badge %s\">%s</span>gap %.1f%% "
      "(1 - allocated / reserved; %s)</p><p><span "
      "class=\"badge %s\">%s</span>fragfree's effective gap %.1f%% ((stranded "
      "+ padding) / reserved): reclaimable pages are not lost, fragfree "
      "remaps them.</p>",
      d.gap_verdict, d.gap_verdict, 100 * d.gap, GapRuleText(),
      d.effective_verdict, d.effective_verdict, 100 * d.effective_gap);
}

// The cause, the persistent / activation split (when known) and the notes.
void AppendDiagnosis(const OomContext& ctx, const OomDiagnosis& d,
                     std::string* h) {
  *h += "<h2>Diagnosis</h2>";
  absl::StrAppend(h, "<p class=\"cause\"><span class=\"badge\">",
                  OomCauseName(d.cause), "</span>", HtmlEscape(d.summary),
                  "</p>");
  if (d.split_known) {
    std::vector<Segment> segs;
    if (d.categories_known) {
      const MemoryCategories& c = *ctx.categories;
      segs = {{"parameters", c.parameters, "#2c5282"},
              {"gradients", c.gradients, "#3182ce"},
              {"optimizer state", c.optimizer_state, "#63b3ed"},
              {"other persistent", c.other_persistent, "#90cdf4"}};
    } else {
      segs = {{"alive across steps (estimate)", d.persistent_bytes, "#3182ce"}};
    }
    segs.push_back({d.persistent_estimated ? "within a step (estimate)"
                                           : "activations (within a step)",
                    d.activation_bytes, "#dd6b20"});
    AppendStackedBar(segs, h);
  }
  if (!d.notes.empty()) {
    *h += "<ul>";
    for (const std::string& n : d.notes) {
      absl::StrAppend(h, "<li>", HtmlEscape(n), "</li>");
    }
    *h += "</ul>";
  }
}

// The advice in order, and what was skipped as already on.
void AppendAdvice(const OomDiagnosis& d, std::string* h) {
  absl::StrAppend(h, "<h2>What to try, in order</h2><p>", OomAdviceOrderText(),
                  ".</p><ol>");
  for (const OomAdvice& a : d.advice) {
    absl::StrAppend(h, "<li><span class=\"badge\">", HtmlEscape(a.branch),
                    "</span><b>", HtmlEscape(a.title),
                    "</b><div class=\"how\">", HtmlEscape(a.how),
                    "</div></li>");
  }
  *h += "</ol>";
  if (!d.skipped.empty()) {
    *h += "<p>Already on, not suggested:";
    for (const std::string& s : d.skipped) {
      absl::StrAppend(h, " <span class=\"badge\">", HtmlEscape(s), "</span>");
    }
    *h += "</p>";
  }
}

// The largest live allocations table (none: nothing).
void AppendLargest(const OomDiagnosis& d, std::string* h) {
  if (d.largest.empty()) return;
  *h +=
      "<h2>Largest live allocations</h2><table><tr><th>size</th><th>"
      "address</th><th>stream</th><th>seq</th><th>stack</th></tr>";
  for (const LiveAllocation& l : d.largest) {
    absl::StrAppendFormat(
        h,
        "<tr><td class=\"n\">%s</td><td>%#x</td><td>%#x</td><td "
        "class=\"n\">%d</td><td>",
        FormatBytes(l.size), l.addr, l.stream, l.alloc_seq);
    if (!l.stack.empty()) {
      absl::StrAppend(h, "<details><summary>stack</summary><pre>",
                      HtmlEscape(l.stack), "</pre></details>");
    }
    *h += "</td></tr>";
  }
  *h += "</table>";
}

}  // namespace

std::string OomReportHtml(const OomContext& ctx) {
  return OomReportHtml(ctx, DiagnoseOom(ctx));
}

std::string OomReportHtml(const OomContext& ctx, const OomDiagnosis& d) {
  const OomFacts& f = ctx.facts;
  std::string h;
  h.reserve(64 * 1024);
  AppendHeader(f, &h);
  AppendDeviceMemory(f, d, &h);
  AppendNumbers(f, d, &h);
  AppendFragmentation(d, &h);
  AppendDiagnosis(ctx, d, &h);
  AppendAdvice(d, &h);
  h += "<h2>Memory map</h2>";
  AppendMemoryMap(ctx.arenas, &h);
  AppendLargest(d, &h);
  absl::StrAppend(&h,
                  "<h2>Statistics</h2><details><summary>memory_stats() keys "
                  "(JSON)</summary><pre>",
                  HtmlEscape(StatsToJson(ctx.stats)),
                  "</pre></details></body></html>\n");
  return h;
}

}  // namespace fragfree
