// ForEachRow: the loop shared by the CSV trace readers. It splits each data
// line, checks the field count, hands the fields to a format-specific callback
// and turns a bad line into an error naming the file and line, or, with
// `lenient`, skips it and counts it in the trace. Thread-safety: not
// thread-safe (works on one reader and one trace).
#ifndef FRAGFREE_BENCH_REPLAY_ROW_READER_H_
#define FRAGFREE_BENCH_REPLAY_ROW_READER_H_

#include <cstddef>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "bench/replay/line_reader.h"
#include "bench/replay/trace_event.h"

namespace fragfree::replay {

struct ReadOptions {
  // Skip bad lines (counted in Trace::skipped_lines) instead of failing.
  bool lenient = false;
  // At most this many skipped lines are described in Trace::warnings.
  size_t max_warnings = 5;
};

// The most columns any trace format has.
inline constexpr size_t kMaxColumns = 8;

// Reads the rows after the header. `row` receives the line's fields, already
// reordered so that fields[i] is the i-th wanted column (`columns` maps wanted
// column i to its position in the line), and the line number. Empty lines are
// ignored. Returns the first error (prefixed with "file:line: ") unless
// lenient; read errors (a truncated .gz) are returned in either mode.
absl::Status ForEachRow(LineReader& reader, const std::vector<size_t>& columns,
                        const ReadOptions& options, Trace* trace,
                        absl::FunctionRef<absl::Status(
                            const std::string_view* fields, uint64_t line)>
                            row);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_ROW_READER_H_
