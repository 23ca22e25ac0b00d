// SizeHistogram (size_histogram.h): sampling, bounded keys, coarsening.
// Thread-safety: none of its own (the owner's lock).
#include "allocator/obs/size_histogram.h"

#include <algorithm>
#include <bit>

namespace fragfree {
namespace {
constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
constexpr int kFirstCoarseBits = 16;  // sizes below 32 MiB stay exact
}  // namespace

SizeHistogram::SizeHistogram(uint32_t sample_every, size_t max_sizes)
    : sample_every_(sample_every),
      max_sizes_(std::max(max_sizes, kMinMaxSizes)),
      // The first request is always sampled (a short run still has advice).
      countdown_(sample_every == 0 ? kNever : 1) {}

uint64_t SizeHistogram::NextInterval() {
  if (sample_every_ == 0) return kNever;
  if (sample_every_ == 1) return 1;
  // xorshift64: a uniform interval in [1, 2N - 1], mean N.
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  return 1 + rng_ % (2 * uint64_t(sample_every_) - 1);
}

uint64_t SizeHistogram::KeyOf(uint64_t units, int bits) {
  if (bits == 0) return units;
  const int width = std::bit_width(units);
  if (width <= bits) return units;
  const int shift = width - bits;
  const uint64_t mask = (uint64_t{1} << shift) - 1;
  return ((units >> shift) + ((units & mask) != 0 ? 1 : 0)) << shift;
}

void SizeHistogram::Sample(size_t size) {
  countdown_ = NextInterval();
  if (sample_every_ == 0) return;
  pending_[pending_count_++] = size;
  if (pending_count_ == kBatch) Flush();
}

void SizeHistogram::Flush() const {
  // The keys at the current precision: a coarsening inside the batch only
  // makes some of these prefetches useless.
  for (uint32_t i = 0; i < pending_count_; ++i) {
    table_.prefetch(KeyOf(UnitsOf(pending_[i]), bits_));
  }
  for (uint32_t i = 0; i < pending_count_; ++i) Add(pending_[i]);
  pending_count_ = 0;
}

void SizeHistogram::Add(size_t size) const {
  ++samples_;
  Entry& e = table_[KeyOf(UnitsOf(size), bits_)];
  ++e.count;
  e.sum = e.sum + size < e.sum ? kNever : e.sum + size;
  e.max = std::max(e.max, size);
  if (table_.size() > max_sizes_) Coarsen();
}

void SizeHistogram::Coarsen() const {
  int bits = bits_ == 0 ? kFirstCoarseBits : bits_ - 1;
  MetadataFlatHashSet<uint64_t> keys;
  for (; bits > 1; --bits) {
    keys.clear();
    for (const auto& [key, e] : table_) keys.insert(KeyOf(key, bits));
    if (keys.size() <= max_sizes_ / 2) break;
  }
  if (bits < 1) bits = 1;
  MetadataFlatHashMap<uint64_t, Entry> merged;
  merged.reserve(max_sizes_ / 2 + 1);
  for (const auto& [key, e] : table_) {
    Entry& m = merged[KeyOf(key, bits)];
    m.count += e.count;
    m.sum = m.sum + e.sum < m.sum ? kNever : m.sum + e.sum;
    m.max = std::max(m.max, e.max);
  }
  table_ = std::move(merged);
  bits_ = bits;
}

SizeHistogram::Info SizeHistogram::info() const {
  Flush();
  Info i;
  i.sample_every = sample_every_;
  i.samples = samples_;
  i.distinct_sizes = table_.size();
  i.max_sizes = max_sizes_;
  i.precision_bits = bits_;
  return i;
}

std::vector<SizeCount> SizeHistogram::Entries() const {
  Flush();
  const uint64_t scale = std::max<uint64_t>(sample_every_, 1);
  std::vector<SizeCount> out;
  out.reserve(table_.size() * 3);
  for (const auto& [key, e] : table_) {
    out.push_back({e.max, scale});
    const uint64_t rest = e.count - 1;
    if (rest == 0) continue;
    const uint64_t rest_sum = e.sum >= e.max ? e.sum - e.max : 0;
    const uint64_t mean = rest_sum / rest, extra = rest_sum % rest;
    if (rest > extra) out.push_back({size_t(mean), (rest - extra) * scale});
    if (extra > 0) out.push_back({size_t(mean + 1), extra * scale});
  }
  std::sort(out.begin(), out.end(), [](const SizeCount& a, const SizeCount& b) {
    return a.size != b.size ? a.size < b.size : a.count < b.count;
  });
  return out;
}

void SizeHistogram::Clear() {
  pending_count_ = 0;
  table_.clear();
  samples_ = 0;
  bits_ = 0;
}

}  // namespace fragfree
