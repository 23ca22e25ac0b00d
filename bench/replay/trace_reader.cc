// Implementation of trace_reader.h.
// Thread-safety: see trace_reader.h.
#include "bench/replay/trace_reader.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/replay/csv_fields.h"
#include "bench/replay/pytorch_csv_reader.h"
#include "bench/replay/rmm_csv_reader.h"

namespace fragfree::replay {

absl::StatusOr<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "auto") return TraceFormat::kAuto;
  if (name == "csv") return TraceFormat::kCsv;
  if (name == "rmm") return TraceFormat::kRmm;
  return absl::InvalidArgumentError(absl::StrCat("unknown trace format '",
                                                 std::string(name),
                                                 "' (want auto, csv or rmm)"));
}

absl::StatusOr<Trace> ReadTrace(const std::string& path, TraceFormat format,
                                const ReadOptions& options) {
  absl::StatusOr<std::unique_ptr<LineReader>> reader =
      LineReader::OpenFile(path);
  if (!reader.ok()) return reader.status();
  return ReadTraceFrom(**reader, format, options);
}

absl::StatusOr<Trace> ReadTraceFrom(LineReader& reader, TraceFormat format,
                                    const ReadOptions& options) {
  Trace trace;
  trace.path = reader.name();
  std::string_view header;
  if (!reader.Next(&header)) {
    if (!reader.status().ok()) return reader.status();
    return absl::InvalidArgumentError(
        absl::StrCat(reader.name(), ": empty file (no header line)"));
  }
  if (header.substr(0, 3) == "\xEF\xBB\xBF") header.remove_prefix(3);  // BOM
  std::string_view raw[kMaxColumns + 1];
  const size_t count = SplitCsv(header, raw, kMaxColumns + 1);
  const std::vector<std::string_view> fields(
      raw, raw + std::min(count, kMaxColumns + 1));

  absl::StatusOr<std::vector<size_t>> csv_columns =
      MapColumns(fields, PytorchCsvColumns());
  absl::StatusOr<std::vector<size_t>> rmm_columns =
      MapColumns(fields, RmmCsvColumns());
  const std::string where = absl::StrCat(reader.name(), ":1: ");
  if (format == TraceFormat::kAuto) {
    if (csv_columns.ok()) {
      format = TraceFormat::kCsv;
    } else if (rmm_columns.ok()) {
      format = TraceFormat::kRmm;
    } else {
      std::string shown(header.substr(0, 80));
      return absl::InvalidArgumentError(absl::StrCat(
          where, "unrecognised header '", shown,
          "': want 'action,addr,size,stream,time_us' (PyTorch trace CSV) or "
          "'Thread,Time,Action,Pointer,Size,Stream' (RMM log)"));
    }
  }
  absl::Status status;
  if (format == TraceFormat::kCsv) {
    if (!csv_columns.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, csv_columns.status().message()));
    }
    trace.format = "csv";
    status = ReadPytorchCsvRows(reader, *csv_columns, options, &trace);
  } else {
    if (!rmm_columns.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, rmm_columns.status().message()));
    }
    trace.format = "rmm";
    status = ReadRmmCsvRows(reader, *rmm_columns, options, &trace);
  }
  if (!status.ok()) return status;
  if (trace.events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        reader.name(), ": no alloc/free events",
        trace.skipped_lines > 0
            ? absl::StrCat(" (", trace.skipped_lines, " bad lines skipped)")
            : ""));
  }
  return trace;
}

}  // namespace fragfree::replay
