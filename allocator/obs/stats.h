// DeviceStats: every counter fragfree keeps for one device, under PyTorch's key
// names where the meaning matches (torch.cuda.memory_stats()), plus fragfree's
// own. The field lists are X-macros so the struct, the JSON writer and the
// Python dict come from one list. Key meanings for fragfree are in
// docs/stats.md. Also the one definition of the fragmentation verdict on the
// gap between allocated and reserved memory (JudgeGap), which the OOM report,
// the LD_PRELOAD exit summary and the stats JSON (hence Python's
// memory_summary) all use. Thread-safety: plain data and pure functions; the
// DeviceAllocator updates DeviceStats under its lock and hands out copies.
#ifndef FRAGFREE_ALLOCATOR_OBS_STATS_H_
#define FRAGFREE_ALLOCATOR_OBS_STATS_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fragfree {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // cumulative increases
  int64_t freed = 0;      // cumulative decreases

  // A new peak is rare once memory has grown (and a streak while it grows):
  // a predicted branch, cheaper than a conditional move and its store.
  void Increase(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) [[unlikely]]
      peak = current;
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

// A statistic per pool and for "all" pools. Every change goes to one pool
// (kPoolSmall or kPoolLarge), so "all" is their sum: Increase and Decrease
// move only that pool and the "all" peak (checked against the sum on every
// increase, so it is exact); pool[kPoolAll]'s current, allocated and freed are
// written only by Fold. Read "all" through All(), or pool[kPoolAll] after a
// Fold (DeviceStats::Fold: every copy the engine hands out is folded).
struct StatArray {
  Stat pool[3];
  void Increase(int which, int64_t n) {
    pool[which].Increase(n);
    const int64_t all = pool[kPoolSmall].current + pool[kPoolLarge].current;
    if (all > pool[kPoolAll].peak) [[unlikely]]
      pool[kPoolAll].peak = all;
  }
  void Decrease(int which, int64_t n) { pool[which].Decrease(n); }
  // "all": the pools' sums and the tracked peak.
  Stat All() const {
    const Stat& s = pool[kPoolSmall];
    const Stat& l = pool[kPoolLarge];
    return {.current = s.current + l.current,
            .peak = pool[kPoolAll].peak,
            .allocated = s.allocated + l.allocated,
            .freed = s.freed + l.freed};
  }
  void Fold() { pool[kPoolAll] = All(); }
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
  FF_SLEEP_FIELDS(FF_DECLARE_COUNTER)
  FF_TIMING_FIELDS(FF_DECLARE_COUNTER)
#undef FF_DECLARE_COUNTER

  // Writes every StatArray's "all" entry (StatArray::Fold).
  void Fold();
  void ResetPeak();
  void ResetAccumulated();
};

// The verdict on a gap between allocated and reserved memory,
// gap = 1 - allocated / reserved: below 10% it is low; above 20% fragmentation
// is severe; in between, moderate (worth a look). These thresholds are the
// only ones: every verdict fragfree prints or reports comes from JudgeGap.
// The values are the stats JSON's "fragmentation.gap_severity" (Python's
// memory_summary names them in this order).
enum class GapVerdict { kLow = 0, kModerate = 1, kSevere = 2 };
inline constexpr double kGapModerate = 0.10;  // gap >= this: moderate
inline constexpr double kGapSevere = 0.20;    // gap > this: severe
GapVerdict JudgeGap(double gap);
const char* GapVerdictName(GapVerdict verdict);  // "low", "moderate", "severe"
// The rule in one sentence, for reports: "a gap between allocated and reserved
// memory above 20% means fragmentation is severe; below 10% it is low".
const char* GapRuleText();
// 1 - allocated / reserved; 0 when nothing is reserved.
double AllocatedReservedGap(int64_t allocated, int64_t reserved);

// Fragmentation figures with the fields' definitions (docs/stats.md).
struct Fragmentation {
  double u_alloc = 1.0;     // peak allocated / peak reserved (STAlloc)
  double u_active = 1.0;    // peak active / peak reserved (GMLake)
  int64_t waste_bytes = 0;  // peak reserved - peak allocated
  double external = 0.0;  // 1 - largest free / total free (mapped free memory)
  double gap_now = 0.0;   // 1 - allocated / reserved, now
  GapVerdict gap_verdict = GapVerdict::kLow;  // JudgeGap(gap_now)
  // 1 - peak allocated / peak reserved (= 1 - u_alloc) and its verdict: the
  // gap when memory was at its highest (the exit summary judges this one).
  double peak_gap = 0.0;
  GapVerdict peak_gap_verdict = GapVerdict::kLow;
};
Fragmentation ComputeFragmentation(const DeviceStats& stats);

// Flat JSON object in torch.cuda.memory_stats() key form ("allocated_bytes.all.
// current": n, ...), with fragfree's keys and the fragmentation figures under
// "fragmentation." keys. Every value is a number (as in memory_stats(), whose
// consumers log every key as a metric): the verdicts are
// "fragmentation.gap_severity" and "fragmentation.peak_gap_severity", the
// GapVerdict values 0 (low), 1 (moderate), 2 (severe).
std::string StatsToJson(const DeviceStats& stats);

// The value StatsToJson writes under one integer key ("allocated_bytes.all.
// current", "oversize_segments.peak", "num_ooms", ...), found from the key's
// parts without writing the others; nullopt for a key it does not write and
// for the "fragmentation." figures, which are computed. What one figure such
// as torch.cuda.memory_allocated() costs without the whole JSON.
std::optional<int64_t> IntegerStat(const DeviceStats& stats,
                                   std::string_view key);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_STATS_H_
