#include "allocator/obs/bucket_advisor.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/base/units.h"

namespace fragfree {
namespace {

using u128 = unsigned __int128;
constexpr u128 kInfinity = ~u128{0};

uint64_t Clamp64(u128 v) {
  return v > u128(UINT64_MAX) ? UINT64_MAX : uint64_t(v);
}

// One candidate bucket: requests whose rounded size is `value` (or, after
// merging, lies in the group that ends at `value`).
struct Point {
  uint64_t value = 0;
  u128 weight = 0;  // requests
  u128 sum = 0;     // their unrounded bytes (or tokens)
};

// Sorts `raw` (value = rounded key) and merges equal keys.
std::vector<Point> Compress(std::vector<Point> raw) {
  std::sort(raw.begin(), raw.end(),
            [](const Point& a, const Point& b) { return a.value < b.value; });
  std::vector<Point> out;
  for (const Point& p : raw) {
    if (!out.empty() && out.back().value == p.value) {
      out.back().weight += p.weight;
      out.back().sum += p.sum;
    } else {
      out.push_back(p);
    }
  }
  return out;
}

// Merges adjacent points into at most `max_points` groups: a group closes once
// it holds 2/max_points of the requests or of the bytes. Each group keeps its
// largest value, so a bucket still serves every request in it.
std::vector<Point> MergeQuantiles(std::vector<Point> pts, size_t max_points,
                                  bool* exact) {
  *exact = pts.size() <= max_points;
  if (*exact) return pts;
  u128 total_weight = 0, total_sum = 0;
  for (const Point& p : pts) total_weight += p.weight, total_sum += p.sum;
  const size_t half = std::max<size_t>(max_points / 2, 1);
  const u128 weight_quantum = (total_weight + half - 1) / half;
  const u128 sum_quantum = (total_sum + half - 1) / half;
  std::vector<Point> out;
  Point group;
  bool open = false;
  for (const Point& p : pts) {
    group.value = p.value;
    group.weight += p.weight;
    group.sum += p.sum;
    open = true;
    if (group.weight >= weight_quantum || group.sum >= sum_quantum) {
      out.push_back(group);
      group = Point();
      open = false;
    }
  }
  if (open) out.push_back(group);
  return out;
}

struct Solution {
  std::vector<size_t> ends;  // index of the last point of each group
  u128 padding = 0;
};

// The K contiguous groups of `pts` (sorted) minimising
// sum over groups of (max value * weight - sum). Exact.
Solution Solve(const std::vector<Point>& pts, size_t k) {
  Solution sol;
  const size_t n = pts.size();
  if (n == 0 || k == 0) return sol;
  k = std::min(k, n);
  std::vector<u128> w(n + 1, 0), s(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    w[i + 1] = w[i] + pts[i].weight;
    s[i + 1] = s[i] + pts[i].sum;
  }
  // Padding of points first..last served by the bucket pts[last].value.
  auto cost = [&](size_t first, size_t last) -> u128 {
    return u128(pts[last].value) * (w[last + 1] - w[first]) -
           (s[last + 1] - s[first]);
  };
  // prev[j]: least padding of the first j points with (layer - 1) buckets.
  std::vector<u128> prev(n + 1, kInfinity), cur(n + 1, kInfinity);
  for (size_t j = 1; j <= n; ++j) prev[j] = cost(0, j - 1);
  // arg[layer][j]: where the last group starts in the best split of the first
  // j points into `layer` groups.
  std::vector<std::vector<uint32_t>> arg(k + 1);
  for (size_t layer = 2; layer <= k; ++layer) {
    arg[layer].assign(n + 1, 0);
    std::fill(cur.begin(), cur.end(), kInfinity);
    // The cost obeys the quadrangle inequality (for a<b<=c<d, cost(a,c) +
    // cost(b,d) <= cost(a,d) + cost(b,c), since values grow with the index),
    // so the smallest best start is monotone in j: divide and conquer.
    std::function<void(size_t, size_t, size_t, size_t)> compute =
        [&](size_t lo, size_t hi, size_t opt_lo, size_t opt_hi) {
          if (lo > hi) return;
          const size_t mid = lo + (hi - lo) / 2;
          u128 best = kInfinity;
          size_t best_i = opt_lo;
          const size_t last = std::min(mid - 1, opt_hi);
          for (size_t i = opt_lo; i <= last; ++i) {
            if (prev[i] == kInfinity) continue;
            u128 c = prev[i] + cost(i, mid - 1);
            if (c < best) best = c, best_i = i;
          }
          cur[mid] = best;
          arg[layer][mid] = uint32_t(best_i);
          if (mid > lo) compute(lo, mid - 1, opt_lo, best_i);
          compute(mid + 1, hi, best_i, opt_hi);
        };
    compute(layer, n, layer - 1, n - 1);
    std::swap(prev, cur);
  }
  sol.padding = prev[n];
  size_t j = n;
  for (size_t layer = k; layer >= 1; --layer) {
    sol.ends.push_back(j - 1);
    j = layer == 1 ? 0 : arg[layer][j];
  }
  std::reverse(sol.ends.begin(), sol.ends.end());
  return sol;
}

}  // namespace

uint64_t PaddingUnder(const std::vector<SizeCount>& histogram,
                      const SizeRounding& rounding) {
  u128 padding = 0;
  for (const SizeCount& e : histogram) {
    if (e.size == 0 || e.count == 0) continue;
    padding += u128(rounding.Round(e.size) - e.size) * e.count;
  }
  return Clamp64(padding);
}

size_t DistinctSizesUnder(const std::vector<SizeCount>& histogram,
                          const SizeRounding& rounding) {
  std::vector<size_t> sizes;
  for (const SizeCount& e : histogram) {
    if (e.size != 0 && e.count != 0) sizes.push_back(rounding.Round(e.size));
  }
  std::sort(sizes.begin(), sizes.end());
  return size_t(std::unique(sizes.begin(), sizes.end()) - sizes.begin());
}

std::string FormatSizeSuffix(size_t bytes) {
  if (bytes != 0 && bytes % kGiB == 0) return absl::StrCat(bytes / kGiB, "G");
  if (bytes != 0 && bytes % kMiB == 0) return absl::StrCat(bytes / kMiB, "M");
  if (bytes != 0 && bytes % kKiB == 0) return absl::StrCat(bytes / kKiB, "K");
  return absl::StrCat(bytes);
}

std::string FormatRoundBuckets(const std::vector<size_t>& buckets) {
  std::vector<std::string> parts;
  parts.reserve(buckets.size());
  for (size_t b : buckets) parts.push_back(FormatSizeSuffix(b));
  return absl::StrCat("round_buckets:[", absl::StrJoin(parts, ","), "]");
}

BucketAdvice AdviseBuckets(const std::vector<SizeCount>& histogram,
                           const BucketAdvisorOptions& options) {
  BucketAdvice advice;
  const SizeRounding default_rounding;
  RoundingConfig pow2;
  pow2.divisions.fill(4);
  const SizeRounding pow2_rounding(pow2);

  std::vector<Point> raw;
  std::vector<SizeCount> unbucketed;
  u128 requested = 0;
  for (const SizeCount& e : histogram) {
    if (e.size == 0 || e.count == 0) continue;
    advice.requests += e.count;
    requested += u128(e.size) * e.count;
    const size_t key = AlignUp(e.size, kMinBlockSize);
    if (key > options.max_size) {
      unbucketed.push_back(e);
      advice.unbucketed_requests += e.count;
      continue;
    }
    raw.push_back(Point{key, e.count, u128(e.size) * e.count});
  }
  advice.requested_bytes = Clamp64(requested);
  advice.default_padding_bytes = PaddingUnder(histogram, default_rounding);
  advice.pow2_div4_padding_bytes = PaddingUnder(histogram, pow2_rounding);
  advice.default_distinct_sizes =
      DistinctSizesUnder(histogram, default_rounding);
  advice.pow2_div4_distinct_sizes =
      DistinctSizesUnder(histogram, pow2_rounding);

  std::vector<Point> pts =
      MergeQuantiles(Compress(std::move(raw)),
                     std::max<size_t>(options.max_points, 2), &advice.exact);
  advice.points = pts.size();
  Solution sol = Solve(pts, options.num_buckets);
  for (size_t end : sol.ends) advice.buckets.push_back(pts[end].value);
  advice.padding_bytes =
      Clamp64(sol.padding + PaddingUnder(unbucketed, default_rounding));
  advice.advised_distinct_sizes =
      advice.buckets.size() + DistinctSizesUnder(unbucketed, default_rounding);
  if (!advice.buckets.empty()) advice.conf = FormatRoundBuckets(advice.buckets);
  return advice;
}

std::string BucketAdviceToJson(const BucketAdvice& a) {
  return absl::StrFormat(
      "{\"buckets\":[%s],\"conf\":\"%s\",\"requests\":%d,"
      "\"requested_bytes\":%d,\"padding_bytes\":%d,"
      "\"default_padding_bytes\":%d,\"pow2_div4_padding_bytes\":%d,"
      "\"advised_distinct_sizes\":%d,\"default_distinct_sizes\":%d,"
      "\"pow2_div4_distinct_sizes\":%d,\"unbucketed_requests\":%d,"
      "\"points\":%d,\"exact\":%s}",
      absl::StrJoin(a.buckets, ","), a.conf, a.requests, a.requested_bytes,
      a.padding_bytes, a.default_padding_bytes, a.pow2_div4_padding_bytes,
      a.advised_distinct_sizes, a.default_distinct_sizes,
      a.pow2_div4_distinct_sizes, a.unbucketed_requests, a.points,
      a.exact ? "true" : "false");
}

SeqBucketAdvice AdviseSequenceBuckets(const std::vector<LengthCount>& histogram,
                                      size_t num_buckets, size_t multiple_of,
                                      size_t max_points) {
  SeqBucketAdvice advice;
  multiple_of = std::max<size_t>(multiple_of, 1);
  std::vector<Point> raw;
  u128 tokens = 0;
  for (const LengthCount& e : histogram) {
    if (e.count == 0) continue;
    advice.sequences += e.count;
    tokens += u128(e.length) * e.count;
    const size_t key = (e.length + multiple_of - 1) / multiple_of * multiple_of;
    raw.push_back(Point{key, e.count, u128(e.length) * e.count});
  }
  advice.tokens = Clamp64(tokens);
  std::vector<Point> pts = MergeQuantiles(
      Compress(std::move(raw)), std::max<size_t>(max_points, 2), &advice.exact);
  if (pts.empty()) return advice;
  advice.pad_to_max_padding_tokens = Clamp64(Solve(pts, 1).padding);
  Solution sol = Solve(pts, num_buckets);
  advice.padding_tokens = Clamp64(sol.padding);
  size_t first = 0;
  for (size_t end : sol.ends) {
    advice.lengths.push_back(pts[end].value);
    u128 n = 0;
    for (size_t i = first; i <= end; ++i) n += pts[i].weight;
    advice.sequences_per_bucket.push_back(Clamp64(n));
    first = end + 1;
  }
  return advice;
}

std::string SeqBucketAdviceToJson(const SeqBucketAdvice& a) {
  return absl::StrFormat(
      "{\"lengths\":[%s],\"sequences_per_bucket\":[%s],\"sequences\":%d,"
      "\"tokens\":%d,\"padding_tokens\":%d,\"pad_to_max_padding_tokens\":%d,"
      "\"exact\":%s}",
      absl::StrJoin(a.lengths, ","), absl::StrJoin(a.sequences_per_bucket, ","),
      a.sequences, a.tokens, a.padding_tokens, a.pad_to_max_padding_tokens,
      a.exact ? "true" : "false");
}

}  // namespace fragfree
