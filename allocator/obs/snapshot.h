// Snapshot: the allocator's state in the shape of torch.cuda.memory._snapshot()
// (segments with their blocks, device_traces): one segment per contiguous
// mapped range (as PyTorch does for expandable segments), blocks clipped to it
// so that they tile it exactly, and device_traces with one list per device.
// Written as JSON or as a pickle that torch.cuda._memory_viz and MemoryViz
// open, straight from the views and the trace into a buffer that is handed on
// in pieces (a file, a string): no tree, nothing allocated per block or event.
// Thread-safety: pure functions over views.
#ifndef FRAGFREE_ALLOCATOR_OBS_SNAPSHOT_H_
#define FRAGFREE_ALLOCATOR_OBS_SNAPSHOT_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "allocator/obs/allocator_view.h"
#include "allocator/obs/trace.h"

namespace fragfree {

enum class SnapshotFormat { kJson, kPickle };

// {"segments": [...], "device_traces": [[], ..., [trace]]} for `device`: one
// list per device up to this one, this device's holding `trace`; and
// "host_segments" when `host` (the pinned pool's chunks) is not empty: per
// chunk address, total_size, allocated_size, requested_size and the blocks
// that tile it (address, size, requested_size, state). The bytes go to
// `write` in pieces of at most 64 KiB; it returns false to stop (a failed
// write), and so does WriteSnapshot then.
bool WriteSnapshot(SnapshotFormat format, int device,
                   const std::vector<ArenaView>& arenas, const TraceLog& trace,
                   absl::FunctionRef<bool(std::string_view)> write,
                   const std::vector<HostSegmentView>& host = {});
std::string SnapshotToJson(int device, const std::vector<ArenaView>& arenas,
                           const TraceLog& trace = {},
                           const std::vector<HostSegmentView>& host = {});
// The pickle (protocol 2, only the opcodes MemoryViz's unpickler accepts).
std::string SnapshotToPickle(int device, const std::vector<ArenaView>& arenas,
                             const TraceLog& trace = {},
                             const std::vector<HostSegmentView>& host = {});

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_SNAPSHOT_H_
