// Message pieces as strings for the adapter's TORCH_CHECK / TORCH_WARN texts
// (csrc/). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace fragfree_native {

// Message pieces as strings. Everything passed to TORCH_CHECK / TORCH_WARN in
// this file is a string: on the PyTorch 2.11 + g++ 13 machine this was tested
// on, a C++ extension that formats a number into an ostream (TORCH_CHECK(false,
// "x", 42)) crashes in the locale's num_put facet, so numbers are formatted
// here.
inline std::string Num(long long v) { return std::to_string(v); }

inline std::string Ptr(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

inline std::string Dbl(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

inline std::string FormatSize(uint64_t size) {
  char buf[64];
  if (size <= 1024) {
    std::snprintf(buf, sizeof(buf), "%llu bytes",
                  static_cast<unsigned long long>(size));
  } else if (size <= 1048576) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", size / 1024.0);
  } else if (size <= 1073741824ULL) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", size / 1048576.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", size / 1073741824.0);
  }
  return buf;
}

}  // namespace fragfree_native
