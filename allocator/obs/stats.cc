// DeviceStats' resets, the fragmentation figures and verdict, and the flat
// stats JSON. Thread-safety: pure functions over values.
#include "allocator/obs/stats.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fragfree {

void DeviceStats::Fold() {
#define FF_FOLD_ARRAY(name) name.Fold();
  FF_STAT_ARRAY_FIELDS(FF_FOLD_ARRAY)
#undef FF_FOLD_ARRAY
}

void DeviceStats::ResetPeak() {
  Fold();  // "all" peaks restart at the pools' summed current values
#define FF_RESET_ARRAY(name) \
  for (Stat & s : name.pool) s.ResetPeak();
  FF_STAT_ARRAY_FIELDS(FF_RESET_ARRAY)
#undef FF_RESET_ARRAY
#define FF_RESET_STAT(name) name.ResetPeak();
  FF_STAT_FIELDS(FF_RESET_STAT)
#undef FF_RESET_STAT
}

void DeviceStats::ResetAccumulated() {
#define FF_RESET_ARRAY(name) \
  for (Stat & s : name.pool) s.ResetAccumulated();
  FF_STAT_ARRAY_FIELDS(FF_RESET_ARRAY)
#undef FF_RESET_ARRAY
#define FF_RESET_STAT(name) name.ResetAccumulated();
  FF_STAT_FIELDS(FF_RESET_STAT)
#undef FF_RESET_STAT
  num_alloc_retries = num_ooms = num_sync_all_streams = num_device_alloc =
      num_device_free = 0;
}

GapVerdict JudgeGap(double gap) {
  if (gap > kGapSevere) return GapVerdict::kSevere;
  if (gap >= kGapModerate) return GapVerdict::kModerate;
  return GapVerdict::kLow;
}

const char* GapVerdictName(GapVerdict verdict) {
  switch (verdict) {
    case GapVerdict::kLow:
      return "low";
    case GapVerdict::kModerate:
      return "moderate";
    case GapVerdict::kSevere:
      return "severe";
  }
  return "low";
}

const char* GapRuleText() {
  // Must state kGapSevere and kGapModerate (stats_test checks the figures).
  return "a gap between allocated and reserved memory above 20% means "
         "fragmentation is severe; below 10% it is low";
}

double AllocatedReservedGap(int64_t allocated, int64_t reserved) {
  // Paused allocations (docs/sleep.md) stay allocated without pages, so
  // allocated may exceed reserved: the gap is then 0, never negative.
  if (reserved <= 0) return 0.0;
  return std::max(0.0, 1.0 - double(allocated) / double(reserved));
}

Fragmentation ComputeFragmentation(const DeviceStats& s) {
  Fragmentation f;
  const Stat& reserved = s.reserved_bytes.pool[kPoolAll];
  const Stat& allocated = s.allocated_bytes.pool[kPoolAll];
  const Stat& active = s.active_bytes.pool[kPoolAll];
  // Paused allocations (docs/sleep.md) stay allocated without pages, so
  // allocated may exceed reserved: the ratios are capped at 1 and the waste
  // at 0 rather than report more than all of the memory as used.
  if (reserved.peak > 0) {
    f.u_alloc = std::min(1.0, double(allocated.peak) / double(reserved.peak));
    f.u_active = std::min(1.0, double(active.peak) / double(reserved.peak));
  }
  f.waste_bytes = std::max<int64_t>(0, reserved.peak - allocated.peak);
  if (s.cached_free_bytes > 0) {
    f.external =
        1.0 - double(std::min(s.largest_free_block, s.cached_free_bytes)) /
                  double(s.cached_free_bytes);
  }
  f.gap_now = AllocatedReservedGap(allocated.current, reserved.current);
  f.gap_verdict = JudgeGap(f.gap_now);
  f.peak_gap = AllocatedReservedGap(allocated.peak, reserved.peak);
  f.peak_gap_verdict = JudgeGap(f.peak_gap);
  return f;
}

namespace {

// A Stat's four figures, in the order and under the names of the JSON keys.
constexpr const char* kStatFieldNames[4] = {"current", "peak", "allocated",
                                            "freed"};
constexpr int64_t Stat::*kStatFields[4] = {&Stat::current, &Stat::peak,
                                           &Stat::allocated, &Stat::freed};
int64_t StatField(const Stat& s, int field) { return s.*kStatFields[field]; }

// The index of `name` in `names`, or -1.
template <size_t N>
int IndexOf(const char* const (&names)[N], std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return int(i);
  }
  return -1;
}

void AppendStat(std::string* out, std::string_view key, const Stat& s) {
  for (int field = 0; field < 4; ++field) {
    absl::StrAppendFormat(out, "\"%s.%s\":%d,", key, kStatFieldNames[field],
                          StatField(s, field));
  }
}

}  // namespace

std::optional<int64_t> IntegerStat(const DeviceStats& s, std::string_view key) {
  // "<array>.<pool>.<field>", "<stat>.<field>" or "<counter>".
  const size_t dot = key.find('.');
  const std::string_view name = key.substr(0, dot);
  const std::string_view rest =
      dot == std::string_view::npos ? std::string_view() : key.substr(dot + 1);
  const size_t last_dot = rest.rfind('.');
  const int field = IndexOf(kStatFieldNames, rest.substr(last_dot + 1));
  if (last_dot != std::string_view::npos) {
    const int pool = IndexOf(kStatPoolNames, rest.substr(0, last_dot));
    if (pool < 0 || field < 0) return std::nullopt;
#define FF_LOOKUP_ARRAY(stat) \
  if (name == #stat) return StatField(s.stat.pool[pool], field);
    FF_STAT_ARRAY_FIELDS(FF_LOOKUP_ARRAY)
#undef FF_LOOKUP_ARRAY
    return std::nullopt;
  }
  if (dot != std::string_view::npos) {
    if (field < 0) return std::nullopt;
#define FF_LOOKUP_STAT(stat) \
  if (name == #stat) return StatField(s.stat, field);
    FF_STAT_FIELDS(FF_LOOKUP_STAT)
#undef FF_LOOKUP_STAT
    return std::nullopt;
  }
#define FF_LOOKUP_COUNTER(counter) \
  if (name == #counter) return int64_t(s.counter);
  FF_COUNTER_FIELDS(FF_LOOKUP_COUNTER)
  FF_GAUGE_FIELDS(FF_LOOKUP_COUNTER)
  FF_SLEEP_FIELDS(FF_LOOKUP_COUNTER)
  FF_TIMING_FIELDS(FF_LOOKUP_COUNTER)
#undef FF_LOOKUP_COUNTER
  return std::nullopt;
}

std::string StatsToJson(const DeviceStats& s) {
  std::string out = "{";
#define FF_JSON_ARRAY(name)                                       \
  for (int p = 0; p < 3; ++p)                                     \
    AppendStat(&out, absl::StrCat(#name, ".", kStatPoolNames[p]), \
               s.name.pool[p]);
  FF_STAT_ARRAY_FIELDS(FF_JSON_ARRAY)
#undef FF_JSON_ARRAY
#define FF_JSON_STAT(name) AppendStat(&out, #name, s.name);
  FF_STAT_FIELDS(FF_JSON_STAT)
#undef FF_JSON_STAT
#define FF_JSON_COUNTER(name) \
  absl::StrAppendFormat(&out, "\"%s\":%d,", #name, s.name);
  FF_COUNTER_FIELDS(FF_JSON_COUNTER)
  FF_GAUGE_FIELDS(FF_JSON_COUNTER)
  FF_SLEEP_FIELDS(FF_JSON_COUNTER)
  FF_TIMING_FIELDS(FF_JSON_COUNTER)
#undef FF_JSON_COUNTER
  Fragmentation f = ComputeFragmentation(s);
  absl::StrAppendFormat(&out,
                        "\"fragmentation.u_alloc\":%.6f,\"fragmentation.u_"
                        "active\":%.6f,\"fragmentation.waste_bytes\":%d,"
                        "\"fragmentation.external\":%.6f,\"fragmentation.gap_"
                        "now\":%.6f,\"fragmentation.gap_severity\":%d,"
                        "\"fragmentation.peak_gap\":%.6f,"
                        "\"fragmentation.peak_gap_severity\":%d}",
                        f.u_alloc, f.u_active, f.waste_bytes, f.external,
                        f.gap_now, int(f.gap_verdict), f.peak_gap,
                        int(f.peak_gap_verdict));
  return out;
}

}  // namespace fragfree
