// Implementation of replayer.h.
// Thread-safety: see replayer.h.
#include "bench/replay/replayer.h"

#include <algorithm>
#include <chrono>

namespace fragfree::replay {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t ElapsedNs(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

uint64_t Percentile(std::vector<uint32_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * v.size()));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

Latency Summarise(std::vector<uint32_t>& v) {
  Latency l;
  if (v.empty()) return l;
  l.max_ns = *std::max_element(v.begin(), v.end());
  l.p99_ns = Percentile(v, 0.99);
  l.p50_ns = Percentile(v, 0.50);
  return l;
}

uint32_t Clamp32(uint64_t ns) {
  return static_cast<uint32_t>(std::min<uint64_t>(ns, UINT32_MAX));
}

}  // namespace

uint64_t PeakLiveBytes(const Trace& trace) {
  uint64_t live = 0;
  uint64_t peak = 0;
  for (const Event& e : trace.events) {
    if (e.op == Op::kAlloc) {
      live += e.size;
      peak = std::max(peak, live);
    } else {
      live -= e.size;
    }
  }
  return peak;
}

ReplayResult Replay(const Trace& trace, ReplayPolicy& policy,
                    const ReplayOptions& options) {
  ReplayResult r;
  r.policy = policy.name();
  const size_t n = trace.events.size();
  std::vector<uint8_t> live(trace.num_ids, 0);
  std::vector<uint32_t> alloc_ns;
  std::vector<uint32_t> free_ns;
  if (options.time_calls) {
    alloc_ns.reserve(trace.num_ids);
    free_ns.reserve(n - std::min<size_t>(n, trace.num_ids));
  }
  const size_t points = std::min(options.timeline_points, n);
  r.timeline.resize(points);
  for (size_t p = 0; p < points; ++p) {
    // First event of stretch p: smallest i with i * points / n == p.
    r.timeline[p].first_event = (p * n + points - 1) / points;
  }
  uint64_t live_bytes = 0;
  const auto start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    const Event& e = trace.events[i];
    if (e.op == Op::kAlloc) {
      bool ok;
      if (options.time_calls) {
        const auto t0 = Clock::now();
        ok = policy.Alloc(e.id, e.size, e.stream);
        const auto t1 = Clock::now();
        alloc_ns.push_back(Clamp32(ElapsedNs(t0, t1)));
      } else {
        ok = policy.Alloc(e.id, e.size, e.stream);
      }
      ++r.allocs;
      if (ok) {
        live[e.id] = 1;
        live_bytes += e.size;
        r.peak_live_bytes = std::max(r.peak_live_bytes, live_bytes);
      } else {
        if (r.ooms++ == 0) r.first_oom_line = static_cast<int64_t>(e.line);
        if (options.stop_at_first_oom) break;
      }
    } else {
      if (!live[e.id]) continue;  // its allocation failed
      live[e.id] = 0;
      if (options.time_calls) {
        const auto t0 = Clock::now();
        policy.Free(e.id);
        const auto t1 = Clock::now();
        free_ns.push_back(Clamp32(ElapsedNs(t0, t1)));
      } else {
        policy.Free(e.id);
      }
      ++r.frees;
      live_bytes -= e.size;
    }
    if (points > 0) {
      TimelinePoint& p = r.timeline[i * points / n];
      p.live_bytes = std::max(p.live_bytes, live_bytes);
      p.reserved_bytes = std::max(p.reserved_bytes, policy.reserved_bytes());
    }
    if (options.check_invariants_every_event && r.invariant_error.ok()) {
      r.invariant_error = policy.CheckInvariants();
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.events = r.allocs + r.frees;
  r.figures = policy.figures();
  r.policy_status = policy.status();
  if (options.time_calls) {
    std::vector<uint32_t> all;
    all.reserve(alloc_ns.size() + free_ns.size());
    all.insert(all.end(), alloc_ns.begin(), alloc_ns.end());
    all.insert(all.end(), free_ns.begin(), free_ns.end());
    r.all_calls = Summarise(all);
    r.alloc_calls = Summarise(alloc_ns);
    r.free_calls = Summarise(free_ns);
  }
  return r;
}

absl::StatusOr<MinCapacity> FindMinCapacity(const Trace& trace,
                                            const PolicyFactory& factory,
                                            const PolicyConfig& base,
                                            uint64_t known_fit,
                                            uint64_t granularity) {
  MinCapacity result;
  ReplayOptions options;
  options.time_calls = false;
  options.timeline_points = 0;
  options.stop_at_first_oom = true;
  auto fits = [&](uint64_t capacity) -> absl::StatusOr<bool> {
    PolicyConfig config = base;
    config.capacity_bytes = capacity;
    absl::StatusOr<std::unique_ptr<ReplayPolicy>> policy = factory(config);
    if (!policy.ok()) return policy.status();
    ++result.replays;
    const ReplayResult r = Replay(trace, **policy, options);
    if (!r.policy_status.ok()) return r.policy_status;
    return r.ooms == 0;
  };
  auto align_up = [&](uint64_t v) {
    return (v + granularity - 1) / granularity * granularity;
  };
  // hi: a capacity that fits.
  uint64_t hi = 0;
  if (known_fit != 0) {
    hi = std::min(align_up(known_fit), base.capacity_bytes);
    absl::StatusOr<bool> ok = fits(hi);
    if (!ok.ok()) return ok.status();
    if (!*ok) hi = 0;
  }
  if (hi == 0) {
    absl::StatusOr<bool> ok = fits(base.capacity_bytes);
    if (!ok.ok()) return ok.status();
    if (!*ok) return result;  // not found
    hi = base.capacity_bytes;
  }
  // lo: a capacity that cannot fit (below the peak of live bytes).
  const uint64_t peak_live = PeakLiveBytes(trace);
  if (peak_live == 0) {
    result.found = true;
    return result;
  }
  uint64_t lo = (peak_live - 1) / granularity * granularity;
  if (lo >= hi) lo = 0;
  while (hi - lo > granularity) {
    uint64_t mid = lo + (hi - lo) / 2;
    mid = mid / granularity * granularity;
    if (mid <= lo) mid = lo + granularity;
    absl::StatusOr<bool> ok = fits(mid);
    if (!ok.ok()) return ok.status();
    if (*ok) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  result.found = true;
  result.bytes = hi;
  return result;
}

}  // namespace fragfree::replay
