// FragfreePolicy: fragfree's real engine (fragfree::DeviceAllocator) behind the
// ReplayPolicy interface, on SimulatedBackend (physical memory as numbers: the
// capacity bounds the page handles created, 2 MiB pages) and a
// LaggingEventSource (device work completes at once, as a trace's
// free_completed says it did, or --event-lag allocator calls late).
// A counting decorator between the engine and the backend gives the mapped and
// physical bytes after every call without asking the engine for its stats.
// Reserved = physically mapped bytes (docs/stats.md); idle handles (created,
// not mapped) are reported apart.
// Thread-safety: not thread-safe (the engine is, but the bookkeeping here is
// not).
#ifndef FRAGFREE_BENCH_REPLAY_FRAGFREE_POLICY_H_
#define FRAGFREE_BENCH_REPLAY_FRAGFREE_POLICY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/device_allocator.h"
#include "bench/replay/policy.h"

namespace fragfree::replay {

class CountingBackend;
class LaggingEventSource;

class FragfreePolicy final : public ReplayPolicy {
 public:
  static constexpr uint64_t kPageBytes = 2 * kMiB;

  // The capacity is rounded down to whole pages.
  // trace_entries > 0 records the engine's event trace for
  // WriteSnapshotPickle(). event_lag > 0: device work completes that many
  // allocator calls late (LaggingEventSource), as on a GPU that runs behind the
  // CPU.
  static absl::StatusOr<std::unique_ptr<FragfreePolicy>> Create(
      const PolicyConfig& config, size_t trace_entries = 0,
      uint64_t event_lag = 0);
  ~FragfreePolicy() override;

  std::string name() const override { return "fragfree"; }
  bool Alloc(uint64_t id, uint64_t size, uint64_t stream) override;
  void Free(uint64_t id) override;
  uint64_t reserved_bytes() const override;
  PolicyFigures figures() const override;
  void EmptyCache() override;
  absl::Status CheckInvariants() const override;
  absl::Status status() const override { return status_; }
  bool WriteSnapshotPickle(std::ostream& out) const override;

 private:
  FragfreePolicy(std::unique_ptr<DeviceAllocator> engine,
                 CountingBackend* backend, std::unique_ptr<uint64_t> clock,
                 const LaggingEventSource* events);
  void NoteError(absl::Status status);

  std::unique_ptr<DeviceAllocator> engine_;
  CountingBackend* backend_;          // owned by engine_
  std::unique_ptr<uint64_t> clock_;   // allocator calls so far
  const LaggingEventSource* events_;  // owned by engine_
  std::vector<void*> by_id_;          // allocation id -> pointer
  uint64_t ooms_ = 0;
  absl::Status status_;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_FRAGFREE_POLICY_H_
