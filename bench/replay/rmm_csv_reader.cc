// Implementation of rmm_csv_reader.h.
// Thread-safety: see rmm_csv_reader.h.
#include "bench/replay/rmm_csv_reader.h"

#include "absl/strings/str_cat.h"
#include "bench/replay/csv_fields.h"
#include "bench/replay/trace_builder.h"

namespace fragfree::replay {
namespace {

enum Column { kThread, kTime, kAction, kPointer, kSize, kStream };

// Microseconds from a fraction of a second written with up to 9 digits.
bool ParseFractionUs(std::string_view digits, int64_t* us) {
  if (digits.empty() || digits.size() > 9) return false;
  uint64_t value = 0;
  if (!ParseDecimalU64(digits, &value)) return false;
  for (size_t i = digits.size(); i < 6; ++i) value *= 10;
  for (size_t i = 6; i < digits.size(); ++i) value /= 10;
  *us = static_cast<int64_t>(value);
  return true;
}

}  // namespace

bool ParseRmmTime(std::string_view s, int64_t* time_us) {
  s = TrimBlanks(s);
  // Split "HH:MM:SS.ffffff" / "HH:MM:SS:ffffff" / "SSSSSSSSSS.ffffff" into at
  // most four numbers.
  std::string_view parts[5];
  size_t count = 0;
  bool dot_seen = false;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    const bool end = i == s.size();
    if (!end && s[i] != ':' && s[i] != '.') continue;
    if (!end && s[i] == '.') {
      if (dot_seen) return false;
      dot_seen = true;
    }
    if (count == 4) return false;
    parts[count++] = s.substr(start, i - start);
    start = i + 1;
  }
  if (count == 1 || (count == 2 && dot_seen)) {  // epoch seconds
    uint64_t whole = 0;
    int64_t frac = 0;
    if (!ParseDecimalU64(parts[0], &whole)) return false;
    if (count == 2 && !ParseFractionUs(parts[1], &frac)) return false;
    if (whole > static_cast<uint64_t>(INT64_MAX / 1000000 - 1)) return false;
    *time_us = static_cast<int64_t>(whole) * 1000000 + frac;
    return true;
  }
  if (count != 4) return false;
  uint64_t h = 0, m = 0, sec = 0;
  int64_t frac = 0;
  if (!ParseDecimalU64(parts[0], &h) || !ParseDecimalU64(parts[1], &m) ||
      !ParseDecimalU64(parts[2], &sec) || !ParseFractionUs(parts[3], &frac) ||
      h > 23 || m > 59 || sec > 60) {
    return false;
  }
  *time_us = static_cast<int64_t>((h * 3600 + m * 60 + sec) * 1000000) + frac;
  return true;
}

const std::vector<std::string_view>& RmmCsvColumns() {
  static const auto* const kColumns = new std::vector<std::string_view>{
      "Thread", "Time", "Action", "Pointer", "Size", "Stream"};
  return *kColumns;
}

absl::Status ReadRmmCsvRows(LineReader& reader,
                            const std::vector<size_t>& columns,
                            const ReadOptions& options, Trace* trace) {
  TraceBuilder builder(trace);
  auto row = [&](const std::string_view* f, uint64_t line) -> absl::Status {
    uint64_t thread = 0;
    int64_t time_us = 0;
    uint64_t pointer = 0;
    uint64_t size = 0;
    uint64_t stream = 0;
    if (!ParseDecimalU64(f[kThread], &thread)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad Thread '", std::string(f[kThread]),
                       "' (want a decimal thread id)"));
    }
    if (!ParseRmmTime(f[kTime], &time_us)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad Time '", std::string(f[kTime]),
                       "' (want HH:MM:SS.ffffff or epoch seconds)"));
    }
    const std::string_view action = f[kAction];
    const bool failure = action == "allocate failure";
    // A failed allocation logs a null pointer, which RMM prints in several
    // ways.
    if (!ParseHexU64(f[kPointer], &pointer) &&
        !(failure && (f[kPointer] == "(nil)" || f[kPointer] == "nullptr"))) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad Pointer '", std::string(f[kPointer]),
                       "' (want a hexadecimal address)"));
    }
    if (!ParseDecimalU64(f[kSize], &size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad Size '", std::string(f[kSize]), "' (want a decimal integer)"));
    }
    if (!ParseHexU64(f[kStream], &stream)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad Stream '", std::string(f[kStream]),
                       "' (want a hexadecimal stream handle)"));
    }
    if (action == "allocate") {
      return builder.Alloc(pointer, size, stream, time_us, line);
    }
    if (action == "free" || action == "deallocate") {
      return builder.Free(pointer, time_us, line);
    }
    if (failure) {
      ++trace->ignored_lines;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown action '", std::string(action),
                     "' (want allocate, free or allocate failure)"));
  };
  absl::Status status = ForEachRow(reader, columns, options, trace, row);
  builder.Finish();
  return status;
}

}  // namespace fragfree::replay
