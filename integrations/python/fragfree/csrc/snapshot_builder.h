// BuildSnapshot: the adapter's (csrc/) answer to CUDAAllocator::snapshot:
// libfragfree's snapshot of every device in use (ff_snapshot_json) turned into
// PyTorch's SnapshotInfo, with the stacks StackHistory kept attached to the
// trace entries and live blocks, so torch.cuda.memory._snapshot() and
// _dump_snapshot() symbolize them as they do for PyTorch's own allocator.
// The library writes the snapshot in torch's shape already (every key PyTorch
// reads; allocator/obs/snapshot.h): this only translates JSON into PyTorch's
// C++ types (docs/design.md, Note [One snapshot shape, two translations]).
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
#include <string_view>
#include <utility>
#include <vector>

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

// A [first, second] pool id at `key` (segment_pool_id, pool_id); {0, 0} when
// there is none.
inline MempoolId PoolIdAt(const Json& j, std::string_view key) {
  const Json* pid = j.get(key);
  if (pid == nullptr || pid->type != Json::kArray || pid->array.size() != 2) {
    return {0, 0};
  }
  return {static_cast<unsigned long long>(pid->array[0].as_int()),
          static_cast<unsigned long long>(pid->array[1].as_int())};
}

// One block of a segment, with the stack of its allocation when it is live.
inline cca::BlockInfo BlockFromJson(const Json& b, const StackHistory& stacks) {
  cca::BlockInfo block;
  block.size = static_cast<decltype(block.size)>(b.int_at("size"));
  block.requested_size =
      static_cast<decltype(block.requested_size)>(b.int_at("requested_size"));
  const std::string state = b.str_at("state");
  block.allocated = state == "active_allocated";
  block.active = state == "active_allocated" || state == "active_pending_free";
  if (block.allocated) {
    block.context_when_allocated = stacks.ForLive(
        reinterpret_cast<void*>(static_cast<intptr_t>(b.int_at("address"))));
  }
  return block;
}

// One segment and its blocks.
inline cca::SegmentInfo SegmentFromJson(const Json& s,
                                        const StackHistory& stacks) {
  cca::SegmentInfo seg;
  seg.device = static_cast<decltype(seg.device)>(s.int_at("device"));
  seg.address = static_cast<decltype(seg.address)>(s.int_at("address"));
  seg.total_size =
      static_cast<decltype(seg.total_size)>(s.int_at("total_size"));
  seg.requested_size =
      static_cast<decltype(seg.requested_size)>(s.int_at("requested_size"));
  seg.allocated_size =
      static_cast<decltype(seg.allocated_size)>(s.int_at("allocated_size"));
  seg.active_size =
      static_cast<decltype(seg.active_size)>(s.int_at("active_size"));
  seg.stream =
      reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(s.int_at("stream")));
  seg.is_large = s.str_at("segment_type") != "small";
  seg.is_expandable = s.int_at("is_expandable") != 0;
  seg.owner_private_pool_id = PoolIdAt(s, "segment_pool_id");
  if (const Json* blocks = s.get("blocks");
      blocks && blocks->type == Json::kArray) {
    for (const Json& b : blocks->array) {
      seg.blocks.push_back(BlockFromJson(b, stacks));
    }
  }
  return seg;
}

// The trace action named `action`, or false for one PyTorch has no entry for.
inline bool TraceActionOf(std::string_view action,
                          cca::TraceEntry::Action* out) {
  static constexpr std::pair<std::string_view, cca::TraceEntry::Action>
      kActions[] = {
          {"alloc", cca::TraceEntry::ALLOC},
          {"free_requested", cca::TraceEntry::FREE_REQUESTED},
          {"free_completed", cca::TraceEntry::FREE_COMPLETED},
          {"segment_alloc", cca::TraceEntry::SEGMENT_ALLOC},
          {"segment_free", cca::TraceEntry::SEGMENT_FREE},
          {"segment_map", cca::TraceEntry::SEGMENT_MAP},
          {"segment_unmap", cca::TraceEntry::SEGMENT_UNMAP},
          {"snapshot", cca::TraceEntry::SNAPSHOT},
          {"oom", cca::TraceEntry::OOM},
      };
  for (const auto& [name, a] : kActions) {
    if (name == action) {
      *out = a;
      return true;
    }
  }
  return false;
}

// Device d's trace events appended to *out, each with its recorded stack.
inline void AppendTrace(const Json& events, int d, const StackHistory& stacks,
                        std::vector<cca::TraceEntry>* out) {
  for (const Json& e : events.array) {
    cca::TraceEntry::Action a;
    if (!TraceActionOf(e.str_at("action"), &a)) continue;
    const int64_t addr =
        a == cca::TraceEntry::OOM ? e.int_at("device_free") : e.int_at("addr");
    cca::TraceEntry& entry = out->emplace_back(
        a, static_cast<DeviceIndex>(d), static_cast<size_t>(addr),
        static_cast<size_t>(e.int_at("size")),
        reinterpret_cast<cudaStream_t>(
            static_cast<intptr_t>(e.int_at("stream"))),
        PoolIdAt(e, "pool_id"), approx_time_t{0},
        stacks.ForTrace(static_cast<uint32_t>(e.int_at("context"))));
    // A snapshot's allocator converts its clock to Unix microseconds in
    // time_.t_ before PyTorch reads it (time_us); libfragfree's entries
    // already carry Unix microseconds.
    entry.time_.t_ = static_cast<time_t>(e.int_at("time_us"));
  }
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
        if (mempool_id != MempoolId{0, 0} &&
            PoolIdAt(s, "segment_pool_id") != mempool_id) {
          continue;
        }
        result.segments.push_back(SegmentFromJson(s, stacks));
      }
    }
    // device_traces holds one list per device up to d; d's is the last.
    const Json* traces = json.get("device_traces");
    if (!include_traces || traces == nullptr || traces->type != Json::kArray ||
        traces->array.size() <= size_t(d) ||
        traces->array[d].type != Json::kArray) {
      continue;
    }
    AppendTrace(traces->array[d], d, stacks, &result.device_traces[d]);
  }
  return result;
}

}  // namespace fragfree_native
