// DeviceStats: every counter fragfree keeps for one device, under PyTorch's key
// names where the meaning matches (torch.cuda.memory_stats(), as
// DeviceStats in c10/core/CachingDeviceAllocator.h names them), plus fragfree's
// own. The field lists are X-macros so the struct, the JSON writer and the
// Python dict come from one list. Key meanings for fragfree are in
// docs/stats.md. Thread-safety: plain data; the DeviceAllocator updates it
// under its lock and hands out copies.
#ifndef FRAGFREE_ALLOCATOR_OBS_STATS_H_
#define FRAGFREE_ALLOCATOR_OBS_STATS_H_

#include <algorithm>
#include <cstdint>
#include <string>

namespace fragfree {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // cumulative increases
  int64_t freed = 0;      // cumulative decreases

  void Increase(int64_t n) {
    current += n;
    allocated += n;
    peak = std::max(peak, current);
  }
  void Decrease(int64_t n) {
    current -= n;
    freed += n;
  }
  void ResetPeak() { peak = current; }
  void ResetAccumulated() { allocated = freed = 0; }
};

enum StatPool { kPoolAll = 0, kPoolSmall = 1, kPoolLarge = 2 };
inline constexpr const char* kStatPoolNames[3] = {"all", "small_pool",
                                                  "large_pool"};

struct StatArray {
  Stat pool[3];
  void Increase(int which, int64_t n) {
    pool[kPoolAll].Increase(n);
    pool[which].Increase(n);
  }
  void Decrease(int which, int64_t n) {
    pool[kPoolAll].Decrease(n);
    pool[which].Decrease(n);
  }
};

#include "allocator/obs/stat_fields.h"

struct DeviceStats {
#define FF_DECLARE_ARRAY(name) StatArray name;
  FF_STAT_ARRAY_FIELDS(FF_DECLARE_ARRAY)
#undef FF_DECLARE_ARRAY
#define FF_DECLARE_STAT(name) Stat name;
  FF_STAT_FIELDS(FF_DECLARE_STAT)
#undef FF_DECLARE_STAT
#define FF_DECLARE_COUNTER(name) int64_t name = 0;
  FF_COUNTER_FIELDS(FF_DECLARE_COUNTER)
  FF_GAUGE_FIELDS(FF_DECLARE_COUNTER)
#undef FF_DECLARE_COUNTER

  void ResetPeak();
  void ResetAccumulated();
};

// Fragmentation figures; each field's definition is in docs/stats.md.
struct Fragmentation {
  double u_alloc = 1.0;     // peak allocated / peak reserved (STAlloc)
  double u_active = 1.0;    // peak active / peak reserved (GMLake)
  int64_t waste_bytes = 0;  // peak reserved - peak allocated
  double external = 0.0;  // 1 - largest free / total free (mapped free memory)
  // 1 - allocated / reserved, now (over 20% is severe: docs/oom.md).
  double gap_now = 0.0;
};
Fragmentation ComputeFragmentation(const DeviceStats& stats);

// Flat JSON object in torch.cuda.memory_stats() key form ("allocated_bytes.all.
// current": n, ...), with fragfree's keys and the fragmentation figures under
// "fragfree." keys.
std::string StatsToJson(const DeviceStats& stats);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_STATS_H_
