// The former snapshot writers, kept until the comparison test has run.
#include <algorithm>

#include "allocator/obs/pickle.h"
#include "allocator/obs/snapshot.h"
#include "allocator/obs/value.h"

namespace fragfree {
namespace {

const char* StateName(BlockState s) {
  switch (s) {
    case BlockState::kAllocated:
      return "active_allocated";
    case BlockState::kPendingFree:
      return "active_pending_free";
    case BlockState::kFree:
    case BlockState::kCached:
      return "inactive";
  }
  return "inactive";
}

// The segment for mapped range [lo, hi) of `arena`, blocks clipped to it.
Value Segment(int device, const ArenaView& arena, uintptr_t lo, uintptr_t hi) {
  Value blocks = Value::List();
  int64_t allocated = 0, active = 0, requested = 0;
  for (const BlockView& b : arena.blocks) {
    uintptr_t start = std::max(b.addr, lo), end = std::min(b.addr + b.size, hi);
    if (start >= end) continue;
    const int64_t size = int64_t(end - start);
    const bool live = b.state != BlockState::kFree;
    const int64_t block_requested =
        live ? std::min<int64_t>(int64_t(b.requested), size) : size;
    if (b.state == BlockState::kAllocated) allocated += size;
    if (live) {
      active += size;
      requested += block_requested;
    }
    Value& block = blocks.Append(Value::Dict());
    block.Set("address", Value::Int(int64_t(start)));
    block.Set("size", Value::Int(size));
    block.Set("requested_size", Value::Int(block_requested));
    block.Set("state", Value::String(StateName(b.state)));
    block.Set("frames", Value::List());
  }
  Value segment = Value::Dict();
  segment.Set("device", Value::Int(device));
  segment.Set("address", Value::Int(int64_t(lo)));
  segment.Set("total_size", Value::Int(int64_t(hi - lo)));
  segment.Set("allocated_size", Value::Int(allocated));
  segment.Set("active_size", Value::Int(active));
  segment.Set("requested_size", Value::Int(requested));
  segment.Set("stream", Value::Int(int64_t(arena.stream)));
  segment.Set("segment_type", Value::String(arena.small ? "small" : "large"));
  Value& pool = segment.Set("segment_pool_id", Value::Tuple());
  pool.Append(Value::Int(int64_t(arena.pool_id[0])));
  pool.Append(Value::Int(int64_t(arena.pool_id[1])));
  segment.Set("is_expandable", Value::Bool(true));
  segment.Set("frames", Value::List());
  segment.Set("blocks", std::move(blocks));
  return segment;
}

Value TraceList(const std::vector<TraceEntry>& trace) {
  Value list = Value::List();
  for (const TraceEntry& e : trace) {
    Value& entry = list.Append(Value::Dict());
    entry.Set("action", Value::String(TraceActionName(e.action)));
    entry.Set(e.action == TraceAction::kOom ? "device_free" : "addr",
              Value::Int(int64_t(e.addr)));
    entry.Set("size", Value::Int(int64_t(e.size)));
    entry.Set("stream", Value::Int(int64_t(e.stream)));
    entry.Set("time_us", Value::Int(int64_t(e.time_us)));
    entry.Set("frames", Value::List());
  }
  return list;
}

}  // namespace

Value LegacySnapshotValue(int device, const std::vector<ArenaView>& arenas,
                          const std::vector<TraceEntry>& trace) {
  Value segments = Value::List();
  std::vector<std::pair<uintptr_t, Value>> sorted;
  for (const ArenaView& arena : arenas) {
    size_t p = 0, n = arena.page_mapped.size();
    while (p < n) {
      if (!arena.page_mapped[p]) {
        ++p;
        continue;
      }
      size_t q = p;
      while (q < n && arena.page_mapped[q]) ++q;
      uintptr_t lo = arena.base + p * arena.page_size;
      sorted.emplace_back(
          lo, Segment(device, arena, lo, arena.base + q * arena.page_size));
      p = q;
    }
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [addr, segment] : sorted) segments.Append(std::move(segment));
  Value snapshot = Value::Dict();
  snapshot.Set("segments", std::move(segments));
  Value& traces = snapshot.Set("device_traces", Value::List());
  for (int d = 0; d < device; ++d) traces.Append(Value::List());
  traces.Append(TraceList(trace));
  return snapshot;
}

std::string LegacySnapshotToJson(int device,
                                 const std::vector<ArenaView>& arenas,
                                 const std::vector<TraceEntry>& trace) {
  return ToJson(LegacySnapshotValue(device, arenas, trace));
}

std::string LegacySnapshotToPickle(int device,
                                   const std::vector<ArenaView>& arenas,
                                   const std::vector<TraceEntry>& trace) {
  return ToPickle(LegacySnapshotValue(device, arenas, trace));
}

}  // namespace fragfree
