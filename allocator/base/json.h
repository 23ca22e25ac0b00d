// JSON text helpers shared by every writer (stats, snapshots, reports, replay).
// Thread-safety: pure functions.
#ifndef FRAGFREE_ALLOCATOR_BASE_JSON_H_
#define FRAGFREE_ALLOCATOR_BASE_JSON_H_

#include <string>
#include <string_view>

namespace fragfree {

// `s` escaped for use inside a JSON string (quotes, backslashes, control
// characters).
std::string JsonEscape(std::string_view s);
// `s` as a quoted JSON string.
std::string JsonQuote(std::string_view s);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_JSON_H_
