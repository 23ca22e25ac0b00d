// CallClock: a cheap clock for timing the allocator's own calls (the CPU time
// inside Malloc and Free, backend calls, fence waits; docs/stats.md, "Where
// the time goes"). Reading it is one TSC read on x86-64 (the virtual counter
// on AArch64, CLOCK_MONOTONIC elsewhere); sums of ticks become nanoseconds
// only when stats are read, at the rate measured between the library's load
// and that read (a read within 1 ms of the load waits for that 1 ms, so that a
// sum never converts lower later than it did before). A TSC read costs 10-20 ns
// on virtualised x86-64 hosts, so the engine times every Malloc and Free only
// with Options::time_calls. Thread-safety: CallTicks is a pure read;
// CallTicksToNs is safe from any thread (its base reading is taken once, under
// a function-local static's guard); ProcessCpuNs, the process's CPU time
// (the move meter's other clock, Options::move_clock; a system call), too.
#ifndef FRAGFREE_ALLOCATOR_BASE_CALL_CLOCK_H_
#define FRAGFREE_ALLOCATOR_BASE_CALL_CLOCK_H_

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace fragfree {

uint64_t CallTicksSlow();  // CLOCK_MONOTONIC ns
// The CPU time of the whole process (every thread), in ns: a system call.
uint64_t ProcessCpuNs();

inline uint64_t CallTicks() {
#if defined(__x86_64__)
  return __rdtsc();
#elif defined(__aarch64__)
  uint64_t v;
  asm volatile("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return CallTicksSlow();
#endif
}

// `ticks` (a sum of CallTicks differences) in nanoseconds.
int64_t CallTicksToNs(uint64_t ticks);

// Adds the ticks between its construction and destruction to *sum; with a
// null `sum` it reads no clock and adds nothing (timing switched off). The
// caller guarantees *sum is not written concurrently (the allocator's lock).
class ScopedCallTimer {
 public:
  explicit ScopedCallTimer(uint64_t* sum)
      : sum_(sum), start_(sum != nullptr ? CallTicks() : 0) {}
  ~ScopedCallTimer() {
    if (sum_ != nullptr) *sum_ += CallTicks() - start_;
  }
  ScopedCallTimer(const ScopedCallTimer&) = delete;
  ScopedCallTimer& operator=(const ScopedCallTimer&) = delete;

 private:
  uint64_t* sum_;
  uint64_t start_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_CALL_CLOCK_H_
