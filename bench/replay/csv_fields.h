// CSV field splitting and integer parsing for the trace formats. The formats
// never quote fields, so a field is whatever lies between commas (surrounding
// blanks are trimmed). Also maps a header line onto the columns a reader needs.
// Thread-safety: pure functions.
#ifndef FRAGFREE_BENCH_REPLAY_CSV_FIELDS_H_
#define FRAGFREE_BENCH_REPLAY_CSV_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fragfree::replay {

// Splits `line` at commas into `fields` (capacity `max_fields`). Returns the
// number of fields in the line, which may exceed `max_fields` (then only the
// first `max_fields` are stored).
size_t SplitCsv(std::string_view line, std::string_view* fields,
                size_t max_fields);

std::string_view TrimBlanks(std::string_view s);

// Strict parsers: the whole (trimmed) field must be the number; false on empty
// fields, signs where none belong, junk, and overflow.
bool ParseDecimalU64(std::string_view s, uint64_t* out);
bool ParseDecimalI64(std::string_view s, int64_t* out);
// Hexadecimal with an optional 0x/0X prefix ("0x7f00", "7f00").
bool ParseHexU64(std::string_view s, uint64_t* out);

// Maps header `fields` onto `wanted` column names (case-sensitive, trimmed):
// the result's i-th entry is the position of wanted[i]. The header must hold
// exactly the wanted columns, in any order; otherwise the error names what is
// missing, unexpected or repeated.
absl::StatusOr<std::vector<size_t>> MapColumns(
    const std::vector<std::string_view>& fields,
    const std::vector<std::string_view>& wanted);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_CSV_FIELDS_H_
