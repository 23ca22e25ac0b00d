// ReplayPolicy: one allocator model behind one interface, so the replayer can
// run a trace through any of them and compare figures. A policy is constructed
// with its capacity (the device memory it may reserve) and owns all its state.
// Thread-safety: policies are not thread-safe; a replay drives one from one
// thread.
#ifndef FRAGFREE_BENCH_REPLAY_POLICY_H_
#define FRAGFREE_BENCH_REPLAY_POLICY_H_

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/units.h"

namespace fragfree::replay {

// Byte units: kKiB, kMiB, kGiB of allocator/base/units.h.

struct PolicyConfig {
  // Most bytes the policy may hold reserved (segments or mapped pages) at once.
  uint64_t capacity_bytes = 141 * kGiB;
  // Total memory of the modelled device; sizes VA reservations (expandable
  // segments reserve 9/8 of it per segment). Not changed by a capacity search.
  uint64_t device_total_bytes = 141 * kGiB;
};

struct PolicyFigures {
  uint64_t allocated_bytes = 0;  // blocks handed out (rounded sizes)
  uint64_t peak_allocated_bytes = 0;
  uint64_t reserved_bytes = 0;  // segments cudaMalloc'd, or pages mapped
  uint64_t peak_reserved_bytes = 0;
  uint64_t maps = 0;           // segments cudaMalloc'd (native) or pages mapped
  uint64_t unmaps = 0;         // segments cudaFree'd (native) or pages unmapped
  uint64_t remaps = 0;         // pages moved to serve another range (fragfree)
  uint64_t alloc_retries = 0;  // OOMs recovered by releasing cached memory
  uint64_t ooms = 0;           // Alloc calls that returned false
  // Policy-specific extras for the JSON output, e.g. {"pages_mapped", n}.
  std::vector<std::pair<std::string, uint64_t>> extra;
};

class ReplayPolicy {
 public:
  virtual ~ReplayPolicy() = default;

  virtual std::string name() const = 0;
  // Allocates `size` bytes for allocation `id` on `stream`. Returns false when
  // the policy is out of memory after everything it does to recover (an OOM);
  // the id is then not live. Ids are dense (0, 1, 2, ...) and never reused.
  virtual bool Alloc(uint64_t id, uint64_t size, uint64_t stream) = 0;
  // Frees a live allocation. The memory is reusable at once (the trace records
  // frees when they completed).
  virtual void Free(uint64_t id) = 0;
  // Current reserved bytes; cheap, called after every event for the timeline.
  virtual uint64_t reserved_bytes() const = 0;
  virtual PolicyFigures figures() const = 0;
  // Releases cached memory the way torch.cuda.empty_cache() would.
  virtual void EmptyCache() = 0;
  // Recounts the policy's structures and checks its invariants (for tests).
  virtual absl::Status CheckInvariants() const { return absl::OkStatus(); }
  // The first failure other than running out of memory (an engine error); a
  // replay that saw one is not to be trusted.
  virtual absl::Status status() const { return absl::OkStatus(); }
  // Writes the final state (and, if recorded, the trace) to `out` as a
  // PyTorch memory snapshot pickle, streamed; false if a write failed.
  // Policies that are models rather than the engine write nothing.
  virtual bool WriteSnapshotPickle(std::ostream& out) const { return true; }
};

using PolicyFactory =
    std::function<absl::StatusOr<std::unique_ptr<ReplayPolicy>>(
        const PolicyConfig&)>;

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_POLICY_H_
