// Implementation of row_reader.h.
// Thread-safety: see row_reader.h.
#include "bench/replay/row_reader.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/replay/csv_fields.h"

namespace fragfree::replay {

absl::Status ForEachRow(LineReader& reader, const std::vector<size_t>& columns,
                        const ReadOptions& options, Trace* trace,
                        absl::FunctionRef<absl::Status(
                            const std::string_view* fields, uint64_t line)>
                            row) {
  std::string_view raw[kMaxColumns + 1];
  std::string_view fields[kMaxColumns];
  const size_t want = columns.size();
  std::string_view line;
  while (reader.Next(&line)) {
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const uint64_t line_number = reader.line_number();
    absl::Status status;
    const size_t count = SplitCsv(line, raw, kMaxColumns + 1);
    if (count != want) {
      status = absl::InvalidArgumentError(
          absl::StrCat("expected ", want, " comma-separated fields, found ",
                       count, count < want ? " (truncated line?)" : ""));
    } else {
      for (size_t i = 0; i < want; ++i) fields[i] = raw[columns[i]];
      status = row(fields, line_number);
    }
    if (status.ok()) continue;
    std::string message =
        absl::StrCat(reader.name(), ":", line_number, ": ", status.message());
    if (reader.last_line_unterminated()) {
      absl::StrAppend(&message,
                      " (last line has no newline: is the file truncated?)");
    }
    if (!options.lenient) {
      return absl::InvalidArgumentError(message);
    }
    if (trace->skipped_lines < options.max_warnings) {
      trace->warnings.push_back(absl::StrCat("skipped ", message));
    }
    ++trace->skipped_lines;
  }
  if (!reader.status().ok()) return reader.status();
  if (reader.last_line_unterminated()) {
    trace->warnings.push_back(
        absl::StrCat(reader.name(), ":", reader.line_number(),
                     ": last line has no newline; the file may be truncated"));
  }
  return absl::OkStatus();
}

}  // namespace fragfree::replay
