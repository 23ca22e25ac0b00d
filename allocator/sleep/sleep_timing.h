// Where the time of one pause or resume went (docs/sleep.md, "Observability"):
// wall-clock seconds per phase and the counts behind them, recorded by the
// engine's sleep code for the last Pause and the last Resume of a device and
// reported by ff_paused_json, so that a benchmark shows which phase bounds a
// cycle. A PhaseClock adds the time of a scope to one field.
// Thread-safety: plain data, guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_SLEEP_SLEEP_TIMING_H_
#define FRAGFREE_ALLOCATOR_SLEEP_SLEEP_TIMING_H_

#include <chrono>
#include <cstdint>

namespace fragfree {

// One Pause call (every tag it paused), seconds.
struct PauseTimes {
  double total_s = 0;
  double wait_users_s = 0;  // fences of the tags' streams and users
  // Host memory for the backups (kept chunks, or waiting for fresh pinned
  // ones) and issuing the device-to-host copies.
  double backup_issue_s = 0;
  double copy_wait_s = 0;  // blocked on copies still running
  double unmap_s = 0;      // backend Unmap calls
  double release_s = 0;    // backend Release of the unmapped pages
  uint64_t bytes_copied = 0;
  uint64_t unmap_calls = 0;
  uint64_t pages_unmapped = 0;
  uint64_t pages_released = 0;  // the tags' pages and other idle ones
};

// One Resume call, seconds.
struct ResumeTimes {
  double total_s = 0;
  // Pages under the live allocations: taken idle or reclaimed or created,
  // mapped, access set (the engine's MapUnder, one call per range).
  double map_s = 0;
  double copy_issue_s = 0;   // issuing the host-to-device copies
  double copy_wait_s = 0;    // blocked on copies still running at the end
  double backup_free_s = 0;  // unpinning (or keeping) the backups
  uint64_t bytes_copied = 0;
  uint64_t map_ranges = 0;
  uint64_t pages_mapped = 0;
  uint64_t pages_created = 0;
};

// Adds the seconds between construction and destruction to `*field`.
class PhaseClock {
 public:
  explicit PhaseClock(double* field)
      : field_(field), start_(std::chrono::steady_clock::now()) {}
  ~PhaseClock() {
    *field_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
            .count();
  }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

 private:
  double* field_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_SLEEP_SLEEP_TIMING_H_
