// Byte units and alignment arithmetic shared by every layer.
// Thread-safety: pure functions and constants only.
#ifndef FRAGFREE_ALLOCATOR_BASE_UNITS_H_
#define FRAGFREE_ALLOCATOR_BASE_UNITS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace fragfree {

inline constexpr size_t kKiB = size_t{1} << 10;
inline constexpr size_t kMiB = size_t{1} << 20;
inline constexpr size_t kGiB = size_t{1} << 30;
inline constexpr size_t kTiB = size_t{1} << 40;

// REQUIRES: alignment is a power of two.
constexpr size_t AlignUp(size_t value, size_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}
constexpr size_t AlignDown(size_t value, size_t alignment) {
  return value & ~(alignment - 1);
}
constexpr bool IsPowerOfTwo(size_t value) {
  return value != 0 && (value & (value - 1)) == 0;
}
constexpr int Log2Floor(size_t value) { return 63 - __builtin_clzll(value); }

// "1.50 GiB", "512 B": for messages and reports.
std::string FormatBytes(size_t bytes);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_UNITS_H_
