// Gathering an OOM's facts: what the engine knew when a request failed
// (OomFacts, obs/oom_report.h), from its statistics, and the one-line error
// the failed Malloc returns. The report (DiagnoseOom and its
// renderings) is built from these facts later, outside the engine's lock.
// Thread-safety: pure functions over values.
#ifndef FRAGFREE_ALLOCATOR_OBS_OOM_FACTS_H_
#define FRAGFREE_ALLOCATOR_OBS_OOM_FACTS_H_

#include <string>

#include "allocator/obs/oom_report.h"
#include "allocator/obs/stats.h"

namespace fragfree {

// Fills the facts that come from `stats` (its gauges current: mapped,
// allocated, active, cached and reclaimable bytes) into `facts`, whose request
// and device fields the engine has set.
void AddStatsFacts(const DeviceStats& stats, OomFacts* facts);
// "fragfree: out of memory on device N: tried to allocate ...": the message
// of the ResourceExhausted error.
std::string OomMessage(const OomFacts& facts);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_OOM_FACTS_H_
