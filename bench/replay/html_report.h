// RenderHtml: one self-contained HTML page (inline CSS and SVG; no scripts,
// fonts or other external resources) with, per trace, the figures table and a
// chart per policy of live vs reserved bytes over the trace (event index on x),
// drawn from the replay's sampled timeline so the page stays small.
// Thread-safety: pure function.
#ifndef FRAGFREE_BENCH_REPLAY_HTML_REPORT_H_
#define FRAGFREE_BENCH_REPLAY_HTML_REPORT_H_

#include <string>
#include <vector>

#include "bench/replay/report.h"

namespace fragfree::replay {

std::string RenderHtml(const std::vector<TraceReport>& reports);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_HTML_REPORT_H_
