// fuzz_model: engine_fuzz's reference model of a DeviceAllocator — what it
// must hold after each operation — and the checks of the engine against it:
//  - live allocations never overlap, are 512-aligned, and AllocationSize() is
//    the requested size;
//  - data written into a block at allocation is intact when it is freed (and in
//    every live block whenever the engine unmapped pages);
//  - CheckInvariants() is OK; allocated_bytes / requested_bytes / allocation
//    (current and peak) equal the model's recount; num_ooms and invalid_frees
//    count what the model saw; memory_limit() is what the model computes;
//  - an allocation fails only with ResourceExhausted, and only when the pages
//    touched by live or pending blocks plus the request's pages (+1 for an
//    unaligned start) exceed the memory limit in pages (conformance_test.cc's
//    rule). The session skips the rule for a call during which a fault was
//    injected, and while a graph pool is capturing or not yet released (its
//    free pages are held for replay); such calls must still fail cleanly. It
//    holds with large pages (large_page_mb) too: a request the large pages
//    cannot serve falls back to the base pages;
//  - after EmptyCache with no fault, capture or held pool: mapped pages ==
//    pages touched by live blocks, no idle page, and the backend holds exactly
//    the mapped pages;
//  - at the end (faults cleared, pools released, events completed, every block
//    freed, EmptyCache): nothing reserved, nothing idle, and the backend's free
//    memory equals its capacity.
// The rules about status codes (bad pointers, pools, faults) are checked where
// the session makes the calls (fuzz_session.cc). A violation prints what
// happened (Reporter::Fail) and aborts; libFuzzer records the input.
//
// Thread-safety: single-threaded; each input builds its own model.
#ifndef FRAGFREE_TESTS_FUZZ_FUZZ_MODEL_H_
#define FRAGFREE_TESTS_FUZZ_FUZZ_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "allocator/blocks/size_classes.h"
#include "allocator/device_allocator.h"
#include "allocator/options.h"
#include "allocator/phys/backend.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/testing/touched_pages.h"

namespace fragfree::fuzz {

// Failure reports and the operation trace, both naming the step being run.
class Reporter {
 public:
  Reporter(size_t page, size_t capacity);

  // The operation being run; step -1 is the setup and the final teardown.
  void Begin(int step, Op op) {
    step_ = step;
    op_ = op;
  }
  int step() const { return step_; }

  // Prints the step, the operation and the message, then aborts.
  [[noreturn]] void Fail(const char* fmt, ...) const
      __attribute__((format(printf, 2, 3)));
  // With FRAGFREE_FUZZ_TRACE=1, prints one line (every operation, to read a
  // crash).
  void Trace(const char* fmt, ...) const __attribute__((format(printf, 2, 3)));

 private:
  const char* op_name() const { return step_ < 0 ? "setup" : OpName(op_); }

  const size_t page_;
  const size_t capacity_;
  const bool trace_;
  int step_ = -1;
  Op op_ = Op::kAlloc;
};

// A 64-bit mixing function (the data patterns, and the seeds of blocks).
uint64_t Mix(uint64_t x);

// Pages touched by allocated or pending blocks, over all arenas.
using ::fragfree::testing::TouchedPages;

struct LiveBlock {
  size_t size;     // requested
  size_t rounded;  // what the rounding makes of it
  uint64_t seed;
  StreamHandle stream;
};

struct PoolModel {
  bool capturing = false;
  bool released = false;
  uint16_t mask = 0;  // streams the filter takes
};

class Model {
 public:
  Model(size_t page, size_t capacity, const Options& options,
        const Reporter& report);

  size_t page() const { return page_; }
  size_t capacity() const { return capacity_; }

  // ---- memory limit --------------------------------------------------------
  // What memory_limit() must be: capacity × fraction, capped by the limit
  // requested (0: none), in whole pages.
  size_t LimitBytes() const;
  void set_limit_request(size_t bytes) { limit_request_ = bytes; }
  void set_fraction(double fraction) { fraction_ = fraction; }

  // ---- live blocks ---------------------------------------------------------
  size_t num_live() const { return order_.size(); }
  // The index-th live block, in an order that only picking depends on.
  uintptr_t LiveAt(size_t index) const { return order_[index]; }
  size_t IndexOf(uintptr_t addr) const;
  bool IsLive(uintptr_t addr) const { return live_.count(addr) != 0; }
  const LiveBlock& Block(uintptr_t addr) const { return live_.at(addr); }
  // Every other live block in address order, starting with the first (parity
  // 0) or the second.
  std::vector<uintptr_t> EveryOther(int parity) const;
  // A pointer that is not a live block's (or 0): kind % 5 picks foreign,
  // interior, recently freed, near a live block, or random.
  uintptr_t BadPointer(uint8_t kind, uint16_t v) const;

  // A block Malloc returned: checks it overlaps no live block, records it and
  // writes its data pattern.
  void AddLive(uintptr_t addr, size_t size, StreamHandle stream);
  // The index-th live block was freed.
  void RemoveLive(size_t index);

  // ---- data ----------------------------------------------------------------
  void CheckPattern(uintptr_t addr, const LiveBlock& b) const;
  void VerifyAll() const;

  // ---- graph pools ---------------------------------------------------------
  PoolModel& pool(int id) { return pools_[id]; }
  bool begun(int id) const { return begun_[id]; }
  void set_begun(int id) { begun_[id] = true; }
  // A pool being allocated to, or begun and not released, keeps its pages.
  bool PoolsHoldPages() const;
  bool Capturing() const;
  // Pools capturing stream i.
  int& capture_count(int i) { return capture_count_[i]; }

  // ---- counters ------------------------------------------------------------
  void CountOom() { ++ooms_; }
  void CountInvalidFree() { ++invalid_frees_; }
  void ResetPeak() { peak_allocated_ = allocated_; }
  void ResetAccumulated() { ooms_ = 0; }

  // ---- checks of the engine ------------------------------------------------
  // After every operation: invariants, stats, limit, and the data of every
  // live block when pages were unmapped since the last check.
  void CheckState(DeviceAllocator& a);
  // A failed Malloc of `size` (no fault injected, no pool holding pages) with
  // `touched` pages touched before it: the OOM must be justified.
  void CheckOomJustified(size_t size, StreamHandle stream, size_t touched,
                         const absl::Status& status) const;
  // After an EmptyCache with no fault, capture or held pool.
  void CheckAfterEmptyCache(DeviceAllocator& a,
                            const PhysicalBackend& backend) const;
  // After everything was freed and EmptyCache: nothing left anywhere.
  void CheckAllReturned(DeviceAllocator& a,
                        const PhysicalBackend& backend) const;

 private:
  void WritePattern(uintptr_t addr, const LiveBlock& b) const;

  const size_t page_;
  const size_t capacity_;
  const SizeRounding rounding_;
  const Reporter& report_;

  std::map<uintptr_t, LiveBlock> live_;
  std::vector<uintptr_t> order_;  // live addresses, for picking by index
  std::vector<uintptr_t> freed_;  // recently freed (double-free candidates)
  size_t allocated_ = 0, requested_ = 0, peak_allocated_ = 0;
  int64_t ooms_ = 0, invalid_frees_ = 0, last_unmapped_ = 0;
  uint64_t seed_ = 0;
  size_t limit_request_ = 0;
  double fraction_ = 1.0;
  PoolModel pools_[kMaxPools];
  bool begun_[kMaxPools] = {};
  int capture_count_[kNumStreams] = {};
};

}  // namespace fragfree::fuzz

#endif  // FRAGFREE_TESTS_FUZZ_FUZZ_MODEL_H_
