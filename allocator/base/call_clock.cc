// CallClock's conversion to nanoseconds (call_clock.h).
#include "allocator/base/call_clock.h"

#include <time.h>

namespace fragfree {

uint64_t CallTicksSlow() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000 + uint64_t(ts.tv_nsec);
}

namespace {
struct Reading {
  uint64_t ticks;
  uint64_t ns;
};
Reading ReadBoth() {
  const uint64_t before = CallTicks();
  const uint64_t ns = CallTicksSlow();
  const uint64_t after = CallTicks();
  return {before + (after - before) / 2, ns};
}
}  // namespace

int64_t CallTicksToNs(uint64_t ticks) {
#if !defined(__x86_64__) && !defined(__aarch64__)
  return int64_t(ticks);  // the ticks are nanoseconds
#else
  // The rate is measured over everything since the library was loaded (the
  // base reading below is taken then), so it gets more exact the longer the
  // process runs; within the first 1 ms it assumes 1 GHz.
  static const Reading base = ReadBoth();
  const Reading now = ReadBoth();
  const uint64_t dt = now.ticks - base.ticks;
  const uint64_t dns = now.ns - base.ns;
  if (dns < 1000000 || dt == 0) return int64_t(ticks);
  return int64_t(double(ticks) * double(dns) / double(dt));
#endif
}

namespace {
// Takes the base reading at load time.
[[maybe_unused]] const int64_t kBaseTaken = CallTicksToNs(0);
}  // namespace

}  // namespace fragfree
