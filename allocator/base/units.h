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
// REQUIRES: value > 0.
constexpr int Log2Floor(size_t value) { return 63 - __builtin_clzll(value); }

// PyTorch's roundup_power2_next_division: `size` rounded up to the next of
// `divisions` equal steps between the powers of two around it (1200 with 4
// divisions -> 1280); a power of two stays itself, and a step below 1 byte
// rounds to the next power of two. REQUIRES: size > 0, divisions a power of
// two.
constexpr size_t RoundUpPower2Division(size_t size, size_t divisions) {
  if (IsPowerOfTwo(size)) return size;
  const size_t floor = size_t{1} << Log2Floor(size);
  const size_t step = floor >> Log2Floor(divisions);
  if (step == 0) return floor * 2;
  return AlignUp(size, step);
}

// "1.50 GiB", "512 B": for messages and reports.
std::string FormatBytes(size_t bytes);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_UNITS_H_
