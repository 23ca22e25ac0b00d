// Implementation of html_report.h.
// Thread-safety: see html_report.h.
#include "bench/replay/html_report.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/base/html.h"

namespace fragfree::replay {
namespace {

constexpr double kWidth = 880;
constexpr double kHeight = 250;
constexpr double kLeft = 64;  // room for y labels
constexpr double kRight = 12;
constexpr double kTop = 12;
constexpr double kBottom = 38;  // room for x labels and the axis title

constexpr size_t kMaxPlotPoints = 800;  // about one per pixel column

// Merges consecutive stretches so that at most `max_points` remain, keeping the
// maximum of each merged group.
std::vector<TimelinePoint> Merge(const std::vector<TimelinePoint>& in,
                                 size_t max_points) {
  if (in.size() <= max_points) return in;
  std::vector<TimelinePoint> out(max_points);
  for (size_t k = 0; k < max_points; ++k) {
    const size_t begin = k * in.size() / max_points;
    const size_t end = (k + 1) * in.size() / max_points;
    out[k].first_event = in[begin].first_event;
    for (size_t i = begin; i < end; ++i) {
      out[k].live_bytes = std::max(out[k].live_bytes, in[i].live_bytes);
      out[k].reserved_bytes =
          std::max(out[k].reserved_bytes, in[i].reserved_bytes);
    }
  }
  return out;
}

// A "nice" step (1, 2 or 5 times a power of ten) giving about `ticks` ticks.
double NiceStep(double range, int ticks) {
  if (range <= 0) return 1;
  const double raw = range / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

std::string Chart(const ReplayResult& r, uint64_t events, double y_max_gib) {
  const double pw = kWidth - kLeft - kRight;
  const double ph = kHeight - kTop - kBottom;
  const double x_max = std::max<double>(1, static_cast<double>(events));
  auto x = [&](double event) { return kLeft + pw * event / x_max; };
  auto y = [&](double gib) { return kTop + ph * (1 - gib / y_max_gib); };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
      "aria-label=\"live and reserved bytes, %s\">\n",
      kWidth, kHeight, kWidth, kHeight, HtmlEscape(r.policy));
  // Grid and y labels.
  const double ystep = NiceStep(y_max_gib, 5);
  for (double v = 0; v <= y_max_gib + 1e-9; v += ystep) {
    absl::StrAppendFormat(&svg,
                          "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" "
                          "x2=\"%.1f\" y2=\"%.1f\"/>"
                          "<text x=\"%.1f\" y=\"%.1f\" class=\"ylab\">%g "
                          "GiB</text>\n",
                          kLeft, y(v), kLeft + pw, y(v), kLeft - 6, y(v) + 4,
                          v);
  }
  const double xstep = NiceStep(x_max, 6);
  for (double v = 0; v <= x_max + 1e-9; v += xstep) {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%.1f\" y=\"%.1f\" class=\"xlab\">%g"
                          "</text>\n",
                          x(v), kTop + ph + 15, v);
  }
  // Live bytes as a filled area, reserved bytes as a line, both as step plots
  // over the sampled stretches, merged (by maximum) to at most one stretch per
  // pixel column to keep the page small.
  const std::vector<TimelinePoint> t = Merge(r.timeline, kMaxPlotPoints);
  std::string live = absl::StrFormat("M%.1f %.1f", x(0), y(0));
  std::string reserved;
  for (size_t i = 0; i < t.size(); ++i) {
    const double x0 = x(static_cast<double>(t[i].first_event));
    const double x1 =
        x(i + 1 < t.size() ? static_cast<double>(t[i + 1].first_event) : x_max);
    const double lv = y(static_cast<double>(t[i].live_bytes) / kGiB);
    const double rv = y(static_cast<double>(t[i].reserved_bytes) / kGiB);
    absl::StrAppendFormat(&live, "V%.1fH%.1f", lv, x1);
    if (i == 0) {
      absl::StrAppendFormat(&reserved, "M%.1f %.1fH%.1f", x0, rv, x1);
    } else {
      absl::StrAppendFormat(&reserved, "V%.1fH%.1f", rv, x1);
    }
  }
  absl::StrAppendFormat(&live, "V%.1fZ", y(0));
  absl::StrAppend(&svg, "<path class=\"live\" d=\"", live, "\"/>\n");
  absl::StrAppend(&svg, "<path class=\"reserved\" d=\"", reserved, "\"/>\n");
  absl::StrAppendFormat(
      &svg,
      "<rect class=\"frame\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
      "height=\"%.1f\"/>\n"
      "<text x=\"%.1f\" y=\"%.1f\" class=\"xlab\">event index</text>\n",
      kLeft, kTop, pw, ph, kLeft + pw / 2, kHeight - 4);
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

std::string TableHtml(const TraceReport& report) {
  std::string out =
      "<table>\n<tr><th>policy</th><th>peak allocated</th><th>peak "
      "reserved</th><th>U_alloc</th><th>waste</th><th>min capacity</th>"
      "<th>maps</th><th>unmaps</th><th>remaps</th><th>p50 ns</th>"
      "<th>p99 ns</th><th>OOMs</th></tr>\n";
  for (const PolicyReport& p : report.policies) {
    const PolicyFigures& f = p.replay.figures;
    std::string min_capacity = "&ndash;";
    if (p.min_capacity_searched) {
      min_capacity = p.min_capacity.found
                         ? FormatGiB(p.min_capacity.bytes)
                         : absl::StrCat("&gt; ", FormatGiB(p.capacity_bytes));
    }
    absl::StrAppendFormat(
        &out,
        "<tr><td>%s</td><td>%s</td><td>%s</td><td>%.3f</td><td>%s</td>"
        "<td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td>"
        "<td>%d</td></tr>\n",
        HtmlEscape(p.replay.policy), FormatGiB(f.peak_allocated_bytes),
        FormatGiB(f.peak_reserved_bytes), UAlloc(f), FormatGiB(WasteBytes(f)),
        min_capacity, f.maps, f.unmaps, f.remaps, p.replay.all_calls.p50_ns,
        p.replay.all_calls.p99_ns, p.replay.ooms);
  }
  absl::StrAppend(&out, "</table>\n");
  return out;
}

}  // namespace

std::string RenderHtml(const std::vector<TraceReport>& reports) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
      "charset=\"utf-8\">\n<title>fragfree-replay report</title>\n<style>\n"
      "body{font-family:sans-serif;margin:24px;color:#222;max-width:960px}\n"
      "table{border-collapse:collapse;margin:8px 0 16px}\n"
      "th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;"
      "font-size:13px}\n"
      "th:first-child,td:first-child{text-align:left}\n"
      "th{background:#f2f2f2}\n"
      ".grid{stroke:#e4e4e4;stroke-width:1}\n"
      ".frame{fill:none;stroke:#999;stroke-width:1}\n"
      ".live{fill:#9ecae1;stroke:none}\n"
      ".reserved{fill:none;stroke:#d94801;stroke-width:1.5}\n"
      ".ylab{font-size:11px;text-anchor:end;fill:#555}\n"
      ".xlab{font-size:11px;text-anchor:middle;fill:#555}\n"
      ".key{display:inline-block;width:14px;height:10px;margin:0 4px 0 "
      "12px}\n"
      "</style>\n</head>\n<body>\n<h1>fragfree-replay</h1>\n"
      "<p>Live bytes (requested sizes of live allocations) "
      "<span class=\"key\" style=\"background:#9ecae1\"></span> and reserved "
      "bytes (segments or mapped pages) <span class=\"key\" "
      "style=\"background:#d94801;height:3px\"></span> over the trace. Each "
      "point is the maximum over a stretch of events. U_alloc = peak "
      "allocated / peak reserved; waste = peak reserved &minus; peak "
      "allocated.</p>\n";
  for (const TraceReport& report : reports) {
    absl::StrAppendFormat(
        &html,
        "<h2>%s</h2>\n<p>format %s; %d events, %d allocations; peak live "
        "%s.</p>\n",
        HtmlEscape(report.path), HtmlEscape(report.format), report.events,
        report.allocations, FormatGiB(report.peak_live_bytes));
    absl::StrAppend(&html, TableHtml(report));
    uint64_t y_max = report.peak_live_bytes;
    for (const PolicyReport& p : report.policies) {
      for (const TimelinePoint& t : p.replay.timeline) {
        y_max = std::max({y_max, t.reserved_bytes, t.live_bytes});
      }
    }
    const double y_max_gib =
        std::max(1e-3, static_cast<double>(y_max) / kGiB * 1.05);
    for (const PolicyReport& p : report.policies) {
      absl::StrAppendFormat(&html,
                            "<h3>%s: peak reserved %s, U_alloc %.3f</h3>\n",
                            HtmlEscape(p.replay.policy),
                            FormatGiB(p.replay.figures.peak_reserved_bytes),
                            UAlloc(p.replay.figures));
      absl::StrAppend(&html, Chart(p.replay, report.events, y_max_gib));
    }
  }
  absl::StrAppend(&html, "</body>\n</html>\n");
  return html;
}

}  // namespace fragfree::replay
