#include "allocator/obs/snapshot.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragfree {
namespace {

const char* StateName(BlockState s) {
  switch (s) {
    case BlockState::kAllocated:
      return "active_allocated";
    case BlockState::kPendingFree:
      return "active_pending_free";
    case BlockState::kFree:
      return "inactive";
  }
  return "inactive";
}

// Appends the segment for mapped range [lo, hi) of `arena`.
void AppendSegment(int device, const ArenaView& arena, uintptr_t lo,
                   uintptr_t hi, std::string* out) {
  std::string blocks;
  size_t allocated = 0, active = 0, requested = 0;
  for (const BlockView& b : arena.blocks) {
    uintptr_t start = std::max(b.addr, lo), end = std::min(b.addr + b.size, hi);
    if (start >= end) continue;
    size_t size = end - start;
    bool live = b.state != BlockState::kFree;
    if (b.state == BlockState::kAllocated) allocated += size;
    if (live) {
      active += size;
      requested += std::min(b.requested, size);
    }
    absl::StrAppendFormat(&blocks,
                          "%s{\"address\":%d,\"size\":%d,\"requested_size\":%d,"
                          "\"state\":\"%s\",\"frames\":[]}",
                          blocks.empty() ? "" : ",", start, size,
                          live ? std::min(b.requested, size) : size,
                          StateName(b.state));
  }
  absl::StrAppendFormat(
      out,
      "%s{\"device\":%d,\"address\":%d,\"total_size\":%d,\"allocated_size\":%"
      "d,\"active_size\":%d,\"requested_size\":%d,\"stream\":%d,\"segment_"
      "type\":\"%s\",\"segment_pool_id\":[%d,%d],\"is_expandable\":true,"
      "\"frames\":[],\"blocks\":[%s]}",
      out->back() == '[' ? "" : ",", device, lo, hi - lo, allocated, active,
      requested, int64_t(arena.stream), arena.small ? "small" : "large",
      arena.pool_id[0], arena.pool_id[1], blocks);
}

}  // namespace

std::string SnapshotToJson(int device, const std::vector<ArenaView>& arenas,
                           const std::vector<TraceEntry>& trace) {
  std::string out = "{\"segments\":[";
  for (const ArenaView& arena : arenas) {
    size_t p = 0, n = arena.page_mapped.size();
    while (p < n) {
      if (!arena.page_mapped[p]) {
        ++p;
        continue;
      }
      size_t q = p;
      while (q < n && arena.page_mapped[q]) ++q;
      AppendSegment(device, arena, arena.base + p * arena.page_size,
                    arena.base + q * arena.page_size, &out);
      p = q;
    }
  }
  out += "],\"device_traces\":[";
  for (int d = 0; d < device; ++d) absl::StrAppend(&out, d ? "," : "", "[]");
  absl::StrAppend(&out, device ? "," : "", TraceToJson(trace));
  out += "]}";
  return out;
}

}  // namespace fragfree
