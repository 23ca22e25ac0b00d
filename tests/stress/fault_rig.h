// The fault-injecting engine of the stress tests (fault_sweep_test,
// failed_request_test, engine_bugs_test): a DeviceAllocator on a HostBackend
// wrapped in a FaultInjectingBackend, with FlakyEvents, a ManualEventSource
// whose Record / Query / Synchronize calls can fail the same way, the three
// ways a call is made to fail (FaultModes), and the page size, streams and
// graph pool the tests share. Owns nothing else.
// Thread-safety: test-only, single-threaded.
#ifndef FRAGFREE_TESTS_STRESS_FAULT_RIG_H_
#define FRAGFREE_TESTS_STRESS_FAULT_RIG_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/device_allocator.h"
#include "allocator/phys/fault_injecting_backend.h"
#include "allocator/phys/host_backend.h"
#include "allocator/stream/host_event_source.h"

namespace fragfree::stress {

constexpr size_t kPage = 64 << 10;
constexpr size_t kPages = 8;
constexpr StreamHandle kS1 = 0x100, kS2 = 0x200, kS3 = 0x300;
constexpr PoolId kPool{1, 1};

inline const char* OpName(BackendOp op) {
  static const char* const kNames[] = {"ReserveVa", "ReleaseVa", "Create",
                                       "Release",   "Map",       "Unmap",
                                       "SetAccess"};
  return kNames[int(op)];
}

// ManualEventSource whose Record / Query / Synchronize calls can fail, counted
// and windowed like FaultInjectingBackend's (a CUDA event call failing).
class FlakyEvents final : public EventSource {
 public:
  enum Call { kRecord, kQuery, kSynchronize, kNumCalls };
  static const char* Name(Call c) {
    return c == kRecord  ? "event Record"
           : c == kQuery ? "event Query"
                         : "event Synchronize";
  }

  absl::StatusOr<EventId> Record(StreamHandle stream) override {
    if (absl::Status s = Next(kRecord); !s.ok()) return s;
    return inner_.Record(stream);
  }
  absl::StatusOr<bool> Query(EventId event) override {
    if (absl::Status s = Next(kQuery); !s.ok()) return s;
    return inner_.Query(event);
  }
  absl::Status Synchronize(EventId event) override {
    if (absl::Status s = Next(kSynchronize); !s.ok()) return s;
    return inner_.Synchronize(event);
  }
  void Release(EventId event) override { inner_.Release(event); }
  bool IsCapturing(StreamHandle stream) override {
    return inner_.IsCapturing(stream);
  }

  // Calls of `call` numbered [first, first + count) fail (count < 0: all).
  void FailCalls(Call call, int64_t first, int64_t count, absl::Status s) {
    window_[call] = {first, count, std::move(s)};
  }
  void ClearFaults() {
    for (Window& w : window_) w = Window();
  }
  int64_t Calls(Call call) const { return calls_[call]; }
  int64_t FaultsInjected() const { return injected_; }
  void CompleteAll() { inner_.CompleteAll(); }

 private:
  struct Window {
    int64_t first = 0;
    int64_t count = 0;
    absl::Status status;
  };
  absl::Status Next(Call call) {
    const int64_t n = ++calls_[call];
    const Window& w = window_[call];
    if (w.count == 0 || n < w.first) return absl::OkStatus();
    if (w.count > 0 && n >= w.first + w.count) return absl::OkStatus();
    ++injected_;
    return w.status;
  }
  ManualEventSource inner_;
  int64_t calls_[kNumCalls] = {};
  Window window_[kNumCalls];
  int64_t injected_ = 0;
};

// How a chosen call fails in the sweeps: once (InternalError), once as out of
// memory (ResourceExhausted), or from that call on (count -1: a lost device).
struct FaultMode {
  const char* name;
  int64_t count;
  absl::Status status;
};
inline std::vector<FaultMode> FaultModes() {
  return {
      {"once", 1, absl::InternalError("injected fault")},
      {"once-oom", 1, absl::ResourceExhaustedError("injected OOM")},
      {"from-then-on", -1, absl::UnavailableError("injected: device lost")},
  };
}

struct Rig {
  HostBackend* host = nullptr;
  FaultInjectingBackend* faults = nullptr;
  FlakyEvents* events = nullptr;
  std::unique_ptr<DeviceAllocator> a;
};

inline Rig MakeRig(size_t pages = kPages, Options o = Options()) {
  Rig r;
  auto host = HostBackend::Create(pages * kPage, kPage);
  if (!host.ok()) abort();
  r.host = host->get();
  auto faults = std::make_unique<FaultInjectingBackend>(std::move(*host));
  r.faults = faults.get();
  auto events = std::make_unique<FlakyEvents>();
  r.events = events.get();
  o.backend = "host";
  r.a = *DeviceAllocator::Create(0, o, std::move(faults), std::move(events));
  return r;
}

}  // namespace fragfree::stress

#endif  // FRAGFREE_TESTS_STRESS_FAULT_RIG_H_
