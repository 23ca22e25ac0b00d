#include "allocator/base/units.h"

#include "absl/strings/str_format.h"

namespace fragfree {

std::string FormatBytes(size_t bytes) {
  if (bytes >= kGiB) return absl::StrFormat("%.2f GiB", double(bytes) / kGiB);
  if (bytes >= kMiB) return absl::StrFormat("%.2f MiB", double(bytes) / kMiB);
  if (bytes >= kKiB) return absl::StrFormat("%.2f KiB", double(bytes) / kKiB);
  return absl::StrFormat("%d B", bytes);
}

}  // namespace fragfree
