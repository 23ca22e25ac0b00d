// GatherOomFacts and OomMessage (oom_facts.h). Thread-safety: pure functions.
#include "allocator/obs/oom_facts.h"

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"

namespace fragfree {

void AddStatsFacts(const DeviceStats& stats, OomFacts* o) {
  o->mapped_bytes = size_t(stats.mapped_bytes.current);
  o->allocated_bytes = size_t(stats.allocated_bytes.All().current);
  o->active_bytes = size_t(stats.active_bytes.All().current);
  o->cached_bytes = size_t(stats.cached_free_bytes);
  o->reclaimable_bytes = size_t(stats.reclaimable_bytes);
}

std::string OomMessage(const OomFacts& o) {
  return absl::StrFormat(
      "fragfree: out of memory on device %d: tried to allocate %s (%s after "
      "rounding). fragfree holds %s of pages for %s in live allocations "
      "(%s cached, %s reclaimable); memory limit %s, device has %s total and "
      "%s free. %s.",
      o.device, FormatBytes(o.requested_bytes), FormatBytes(o.rounded_bytes),
      FormatBytes(o.mapped_bytes), FormatBytes(o.allocated_bytes),
      FormatBytes(o.cached_bytes), FormatBytes(o.reclaimable_bytes),
      FormatBytes(o.limit_bytes), FormatBytes(o.device_total_bytes),
      FormatBytes(o.device_free_bytes), o.reason);
}

}  // namespace fragfree
