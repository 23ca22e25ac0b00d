// CallClock's conversion to nanoseconds (call_clock.h).
#include "allocator/base/call_clock.h"

#include <time.h>

#include <cstdint>

namespace fragfree {

namespace {
uint64_t ReadNs(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return uint64_t(ts.tv_sec) * 1000000000 + uint64_t(ts.tv_nsec);
}
}  // namespace

uint64_t CallTicksSlow() { return ReadNs(CLOCK_MONOTONIC); }

uint64_t ProcessCpuNs() { return ReadNs(CLOCK_PROCESS_CPUTIME_ID); }

namespace {
struct Reading {
  uint64_t ticks;
  uint64_t ns;
};
// A tick reading and a nanosecond reading of one instant: the clock read
// between two tick reads, the tightest pair of a few tries (a thread
// preempted between them would pair the nanoseconds with the wrong ticks,
// and a rate measured over the first millisecond with them would be off by
// the preemption's share of it).
Reading ReadBoth() {
  Reading best{};
  uint64_t best_window = UINT64_MAX;
  for (int i = 0; i < 8 && best_window > 2000; ++i) {
    const uint64_t before = CallTicks();
    const uint64_t ns = CallTicksSlow();
    const uint64_t after = CallTicks();
    if (after - before < best_window) {
      best_window = after - before;
      best = {before + (after - before) / 2, ns};
    }
  }
  return best;
}
// The first reading, taken when the library is loaded (kBaseTaken below).
const Reading& Base() {
  static const Reading base = ReadBoth();
  return base;
}
}  // namespace

int64_t CallTicksToNs(uint64_t ticks) {
#if !defined(__x86_64__) && !defined(__aarch64__)
  return int64_t(ticks);  // the ticks are nanoseconds
#else
  // The rate is measured over everything since the library was loaded (the
  // base reading is taken then), so it gets more exact the longer the
  // process runs. A conversion within the first 1 ms waits until 1 ms has
  // passed: a guessed rate replaced later would make cumulative counters
  // (alloc_cpu_ns, map_ns, ...) read lower than they did before.
  const Reading& base = Base();
  Reading now = ReadBoth();
  while (now.ns - base.ns < 1000000) now = ReadBoth();
  const uint64_t dt = now.ticks - base.ticks;
  if (dt == 0) return int64_t(ticks);
  return int64_t(double(ticks) * double(now.ns - base.ns) / double(dt));
#endif
}

namespace {
// Takes the base reading at load time.
[[maybe_unused]] const uint64_t kBaseTaken = Base().ticks;
}  // namespace

}  // namespace fragfree
