// Implementation of csv_fields.h.
// Thread-safety: pure functions.
#include "bench/replay/csv_fields.h"

#include <charconv>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fragfree::replay {

size_t SplitCsv(std::string_view line, std::string_view* fields,
                size_t max_fields) {
  size_t count = 0;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    const size_t end = comma == std::string_view::npos ? line.size() : comma;
    if (count < max_fields) {
      fields[count] = TrimBlanks(line.substr(start, end - start));
    }
    ++count;
    if (comma == std::string_view::npos) return count;
    start = comma + 1;
  }
}

std::string_view TrimBlanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

namespace {

template <typename T>
bool ParseWhole(std::string_view s, T* out, int base) {
  s = TrimBlanks(s);
  if (s.empty()) return false;
  if (s.front() == '+') return false;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, *out, base);
  return ec == std::errc() && ptr == end;
}

}  // namespace

bool ParseDecimalU64(std::string_view s, uint64_t* out) {
  s = TrimBlanks(s);
  if (!s.empty() && s.front() == '-') return false;
  return ParseWhole(s, out, 10);
}

bool ParseDecimalI64(std::string_view s, int64_t* out) {
  return ParseWhole(s, out, 10);
}

bool ParseHexU64(std::string_view s, uint64_t* out) {
  s = TrimBlanks(s);
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
  }
  if (!s.empty() && s.front() == '-') return false;
  return ParseWhole(s, out, 16);
}

absl::StatusOr<std::vector<size_t>> MapColumns(
    const std::vector<std::string_view>& fields,
    const std::vector<std::string_view>& wanted) {
  constexpr size_t kUnset = ~size_t{0};
  std::vector<size_t> position(wanted.size(), kUnset);
  std::vector<std::string> unexpected;
  std::vector<std::string> repeated;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string_view name = TrimBlanks(fields[i]);
    size_t w = 0;
    while (w < wanted.size() && wanted[w] != name) ++w;
    if (w == wanted.size()) {
      unexpected.push_back(absl::StrCat("'", std::string(name), "'"));
    } else if (position[w] != kUnset) {
      repeated.push_back(absl::StrCat("'", std::string(name), "'"));
    } else {
      position[w] = i;
    }
  }
  std::vector<std::string> missing;
  for (size_t w = 0; w < wanted.size(); ++w) {
    if (position[w] == kUnset) {
      missing.push_back(absl::StrCat("'", std::string(wanted[w]), "'"));
    }
  }
  if (missing.empty() && unexpected.empty() && repeated.empty()) {
    return position;
  }
  std::string message = "bad header:";
  if (!missing.empty()) {
    absl::StrAppend(&message, " missing column(s) ",
                    absl::StrJoin(missing, ", "), ";");
  }
  if (!unexpected.empty()) {
    absl::StrAppend(&message, " unexpected column(s) ",
                    absl::StrJoin(unexpected, ", "), ";");
  }
  if (!repeated.empty()) {
    absl::StrAppend(&message, " repeated column(s) ",
                    absl::StrJoin(repeated, ", "), ";");
  }
  std::vector<std::string> names(wanted.begin(), wanted.end());
  absl::StrAppend(&message, " expected exactly ", absl::StrJoin(names, ","));
  return absl::InvalidArgumentError(message);
}

}  // namespace fragfree::replay
