// Implementation of pytorch_csv_reader.h.
// Thread-safety: see pytorch_csv_reader.h.
#include "bench/replay/pytorch_csv_reader.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "bench/replay/csv_fields.h"
#include "bench/replay/trace_builder.h"

namespace fragfree::replay {
namespace {

enum Column { kAction, kAddr, kSize, kStream, kTime };

// Decimal as the traces write it; 0x-prefixed hex is accepted too.
bool ParseAddress(std::string_view s, uint64_t* out) {
  s = TrimBlanks(s);
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    return ParseHexU64(s, out);
  }
  return ParseDecimalU64(s, out);
}

// A stream is a cudaStream_t printed as a signed or unsigned integer.
bool ParseStream(std::string_view s, uint64_t* out) {
  if (ParseAddress(s, out)) return true;
  int64_t value = 0;
  if (!ParseDecimalI64(s, &value)) return false;
  *out = static_cast<uint64_t>(value);
  return true;
}

// Actions PyTorch writes that carry no alloc/free event for a replay.
bool IsIgnoredAction(std::string_view action) {
  return action == "free_requested" || action == "segment_alloc" ||
         action == "segment_free" || action == "segment_map" ||
         action == "segment_unmap" || action == "snapshot" || action == "oom";
}

}  // namespace

const std::vector<std::string_view>& PytorchCsvColumns() {
  static const auto* const kColumns = new std::vector<std::string_view>{
      "action", "addr", "size", "stream", "time_us"};
  return *kColumns;
}

absl::Status ReadPytorchCsvRows(LineReader& reader,
                                const std::vector<size_t>& columns,
                                const ReadOptions& options, Trace* trace) {
  TraceBuilder builder(trace);
  auto row = [&](const std::string_view* f, uint64_t line) -> absl::Status {
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t stream = 0;
    int64_t time_us = 0;
    if (!ParseAddress(f[kAddr], &addr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad addr '", std::string(f[kAddr]), "' (want a decimal integer)"));
    }
    if (!ParseDecimalU64(f[kSize], &size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad size '", std::string(f[kSize]), "' (want a decimal integer)"));
    }
    if (!ParseStream(f[kStream], &stream)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad stream '", std::string(f[kStream]), "' (want an integer)"));
    }
    if (!ParseDecimalI64(f[kTime], &time_us)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad time_us '", std::string(f[kTime]),
                       "' (want a decimal integer)"));
    }
    const std::string_view action = f[kAction];
    if (action == "alloc") {
      return builder.Alloc(addr, size, stream, time_us, line);
    }
    if (action == "free_completed") {
      return builder.Free(addr, time_us, line);
    }
    if (IsIgnoredAction(action)) {
      ++trace->ignored_lines;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown action '", std::string(action),
                     "' (want alloc, free_requested or free_completed)"));
  };
  absl::Status status = ForEachRow(reader, columns, options, trace, row);
  builder.Finish();
  return status;
}

}  // namespace fragfree::replay
