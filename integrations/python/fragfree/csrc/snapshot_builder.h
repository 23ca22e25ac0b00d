// BuildSnapshot: the adapter's (csrc/) answer to CUDAAllocator::snapshot:
// libfragfree's snapshot of every device in use (ff_snapshot_json) turned into
// PyTorch's SnapshotInfo, with the stacks StackHistory kept attached to the
// trace entries and live blocks, so torch.cuda.memory._snapshot() and
// _dump_snapshot() symbolize them as they do for PyTorch's own allocator.
//
// Why JSON here, and only here: a snapshot is nested data of variable length
// (segments holding blocks, trace rings), and the C API gives it in one form,
// the JSON object ff_snapshot_json writes (the shape torch's _snapshot()
// returns, which the Python package and the pickle dump use as they are).
// Statistics have a struct (ff_get_stats, FragfreeApi::GetStats) and never go
// through JSON. So SnapshotJson below is the adapter's one call that returns
// JSON and json_reader.h its one reader.
//
// Thread-safety: reads libfragfree (which locks) and StackHistory (which
// locks); no state of its own.
#pragma once

#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <ctime>
#include <string>

#include "common.h"
#include "fragfree_api.h"
#include "json_reader.h"
#include "messages.h"
#include "stack_history.h"

namespace fragfree_native {

using c10::approx_time_t;

// ff_snapshot_json(device) parsed into *out; false (and *err) on failure. The
// C API's buffer convention: the first call measures, the second writes, and
// a snapshot that grew in between is asked for again.
inline bool SnapshotJson(const FragfreeApi& api, int device, Json* out,
                         std::string* err) {
  size_t n = api.snapshot_json(device, nullptr, 0);
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (n == 0) {
      *err = api.LastError();
      return false;
    }
    std::string buf(n + 1, '\0');
    size_t m = api.snapshot_json(device, buf.data(), buf.size());
    if (m == 0) {
      *err = api.LastError();
      return false;
    }
    if (m <= n) {
      buf.resize(m);
      JsonReader reader(buf);
      if (!reader.Parse(out)) {
        *err = "malformed JSON from libfragfree";
        return false;
      }
      return true;
    }
    n = m;
  }
  *err = "the snapshot kept growing";
  return false;
}

inline cca::SnapshotInfo BuildSnapshot(
    const FragfreeApi& api, int device_count,
    const std::array<std::atomic<bool>, kMaxDevices>& used,
    const StackHistory& stacks, MempoolId mempool_id, bool include_traces) {
  cca::SnapshotInfo result{};
  const int ndev = std::max(device_count, 1);
  result.device_traces.resize(ndev);
  if (api.snapshot_json == nullptr) {
    TORCH_WARN_ONCE(
        "fragfree: this libfragfree has no ff_snapshot_json; memory "
        "snapshots are empty.");
    return result;
  }
  for (int d = 0; d < ndev; ++d) {
    if (!used[d].load()) continue;
    Json json;
    std::string err;
    TORCH_CHECK(SnapshotJson(api, d, &json, &err),
                "fragfree: ff_snapshot_json(", Num(d), ") failed: ", err);
    if (const Json* segs = json.get("segments");
        segs && segs->type == Json::kArray) {
      for (const Json& s : segs->array) {
        cca::SegmentInfo seg;
        seg.device = static_cast<decltype(seg.device)>(s.int_at("device", d));
        seg.address = static_cast<decltype(seg.address)>(s.int_at("address"));
        seg.total_size =
            static_cast<decltype(seg.total_size)>(s.int_at("total_size"));
        seg.requested_size = static_cast<decltype(seg.requested_size)>(
            s.int_at("requested_size"));
        seg.allocated_size = static_cast<decltype(seg.allocated_size)>(
            s.int_at("allocated_size"));
        seg.active_size =
            static_cast<decltype(seg.active_size)>(s.int_at("active_size"));
        seg.stream = reinterpret_cast<cudaStream_t>(
            static_cast<intptr_t>(s.int_at("stream")));
        seg.is_large = s.str_at("segment_type") != "small";
        if (const Json* e = s.get("is_expandable"))
          seg.is_expandable = e->as_int(1) != 0;
        else
          seg.is_expandable = true;
        if (const Json* pid = s.get("segment_pool_id");
            pid && pid->type == Json::kArray && pid->array.size() == 2) {
          seg.owner_private_pool_id = {
              static_cast<unsigned long long>(pid->array[0].as_int()),
              static_cast<unsigned long long>(pid->array[1].as_int())};
        }
        if (mempool_id != MempoolId{0, 0} &&
            seg.owner_private_pool_id != mempool_id)
          continue;
        if (const Json* blocks = s.get("blocks");
            blocks && blocks->type == Json::kArray) {
          for (const Json& b : blocks->array) {
            cca::BlockInfo block;
            block.size = static_cast<decltype(block.size)>(b.int_at("size"));
            block.requested_size = static_cast<decltype(block.requested_size)>(
                b.int_at("requested_size"));
            const std::string state = b.str_at("state");
            block.allocated = state == "active_allocated";
            block.active =
                state == "active_allocated" || state == "active_pending_free";
            if (block.allocated) {
              block.context_when_allocated =
                  stacks.ForLive(reinterpret_cast<void*>(
                      static_cast<intptr_t>(b.int_at("address"))));
            }
            seg.blocks.push_back(std::move(block));
          }
        }
        result.segments.push_back(std::move(seg));
      }
    }
    if (!include_traces) continue;
    const Json* traces = json.get("device_traces");
    if (traces == nullptr || traces->type != Json::kArray ||
        traces->array.empty())
      continue;
    const Json& mine =
        traces->array.size() == 1
            ? traces->array[0]
            : traces->array[std::min<size_t>(d, traces->array.size() - 1)];
    if (mine.type != Json::kArray) continue;
    for (const Json& e : mine.array) {
      const std::string action = e.str_at("action");
      cca::TraceEntry::Action a;
      if (action == "alloc")
        a = cca::TraceEntry::ALLOC;
      else if (action == "free_requested")
        a = cca::TraceEntry::FREE_REQUESTED;
      else if (action == "free_completed")
        a = cca::TraceEntry::FREE_COMPLETED;
      else if (action == "segment_alloc")
        a = cca::TraceEntry::SEGMENT_ALLOC;
      else if (action == "segment_free")
        a = cca::TraceEntry::SEGMENT_FREE;
      else if (action == "segment_map")
        a = cca::TraceEntry::SEGMENT_MAP;
      else if (action == "segment_unmap")
        a = cca::TraceEntry::SEGMENT_UNMAP;
      else if (action == "snapshot")
        a = cca::TraceEntry::SNAPSHOT;
      else if (action == "oom")
        a = cca::TraceEntry::OOM;
      else
        continue;
      const int64_t addr = a == cca::TraceEntry::OOM ? e.int_at("device_free")
                                                     : e.int_at("addr");
      MempoolId pool{0, 0};
      if (const Json* pid = e.get("pool_id");
          pid && pid->type == Json::kArray && pid->array.size() == 2) {
        pool = {static_cast<unsigned long long>(pid->array[0].as_int()),
                static_cast<unsigned long long>(pid->array[1].as_int())};
      }
      cca::TraceEntry& entry = result.device_traces[d].emplace_back(
          a, static_cast<DeviceIndex>(d), static_cast<size_t>(addr),
          static_cast<size_t>(e.int_at("size")),
          reinterpret_cast<cudaStream_t>(
              static_cast<intptr_t>(e.int_at("stream"))),
          pool, approx_time_t{0},
          stacks.ForTrace(static_cast<uint32_t>(e.int_at("context"))));
      // A snapshot's allocator converts its clock to Unix microseconds in
      // time_.t_ before PyTorch reads it (time_us); libfragfree's entries
      // already carry Unix microseconds.
      entry.time_.t_ = static_cast<time_t>(e.int_at("time_us"));
    }
  }
  return result;
}

}  // namespace fragfree_native
