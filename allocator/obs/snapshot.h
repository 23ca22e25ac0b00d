// Snapshot: the allocator's state in the shape of torch.cuda.memory._snapshot()
// (reference/pytorch_allocator.md §2): one segment per contiguous mapped range
// (as PyTorch does for expandable segments), blocks clipped to it so that they
// tile it exactly, and device_traces with one list per device. Written as JSON
// here; the Python side and fragfree-replay turn it into a pickle MemoryViz
// reads. Thread-safety: pure functions over views.
#ifndef FRAGFREE_ALLOCATOR_OBS_SNAPSHOT_H_
#define FRAGFREE_ALLOCATOR_OBS_SNAPSHOT_H_

#include <string>
#include <vector>

#include "allocator/obs/allocator_view.h"
#include "allocator/obs/trace.h"
#include "allocator/obs/value.h"

namespace fragfree {

// {"segments": [...], "device_traces": [[], ..., [trace]]} for `device`: one
// list per device up to this one, this device's holding `trace`.
Value SnapshotValue(int device, const std::vector<ArenaView>& arenas,
                    const std::vector<TraceEntry>& trace = {});
std::string SnapshotToJson(int device, const std::vector<ArenaView>& arenas,
                           const std::vector<TraceEntry>& trace = {});
// The same as a pickle that torch.cuda._memory_viz and MemoryViz open.
std::string SnapshotToPickle(int device, const std::vector<ArenaView>& arenas,
                             const std::vector<TraceEntry>& trace = {});

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_SNAPSHOT_H_
