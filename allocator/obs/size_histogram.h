// SizeHistogram: the request sizes a device has seen, sampled and bounded, as
// the bucket advisor's input (obs/bucket_advisor.h; docs/oom.md, "Bucket
// advisor"). DeviceAllocator::Malloc calls Note(size) once per request; Note
// costs a decrement and a branch except on sampled calls (1 in
// `sample_every` on average, at random intervals so that a training step that
// repeats the same sequence of requests is not sampled in lock-step; the first
// request is always sampled).
//
// Sampled sizes are added to the table kBatch at a time, in the order they
// were sampled (so the table is what adding each at once would make), with
// the table's slots for the whole batch prefetched first: the table is a few
// hundred KiB, and one lookup per sample was a cache miss in the sampled
// call. Every reader adds the pending sizes first.
//
// A sampled size is kept under its 512-byte key (the advisor's resolution)
// with its count, the sum and the largest of its exact sizes, so the padding
// figures stay exact and the advised buckets cover the sizes seen. At most
// `max_sizes` keys are kept: when a new key would exceed that, keys are
// coarsened to fewer significant bits (relative precision 2^-bits, merging
// neighbours) until at most half the table is used, so memory stays bounded
// whatever the workload. Entries() scales counts by `sample_every` to estimate
// every request. The table is on the metadata arena (Note may insert into it
// under the engine's lock); Entries() returns a copy on the caller's heap.
//
// Thread-safety: none of its own. DeviceAllocator guards it with its mu_,
// held exclusively for the const readers too (they add the pending samples).
#ifndef FRAGFREE_ALLOCATOR_OBS_SIZE_HISTOGRAM_H_
#define FRAGFREE_ALLOCATOR_OBS_SIZE_HISTOGRAM_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "allocator/base/metadata_containers.h"
#include "allocator/obs/bucket_advisor.h"

namespace fragfree {

class SizeHistogram {
 public:
  static constexpr size_t kDefaultMaxSizes = 4096;
  static constexpr size_t kMinMaxSizes = 128;

  // `sample_every` = 0: off (Note records nothing); 1: every request.
  explicit SizeHistogram(uint32_t sample_every = 8,
                         size_t max_sizes = kDefaultMaxSizes);

  // The hot path: called for every request.
  void Note(size_t size) {
    if (--countdown_ == 0) Sample(size);
  }

  struct Info {
    uint32_t sample_every = 0;
    uint64_t samples = 0;       // sizes recorded
    size_t distinct_sizes = 0;  // keys in the table
    size_t max_sizes = 0;       // the table's bound
    int precision_bits = 0;     // 0: exact 512-byte keys; else coarsened
  };
  Info info() const;

  // The histogram, counts scaled by sample_every (estimates of all requests).
  // Each key yields its largest size once and the rest at their mean, so the
  // total bytes and the largest size of every key are kept.
  std::vector<SizeCount> Entries() const;

  // Forgets every sample (keeps the sampling rate).
  void Clear();

 private:
  struct Entry {
    uint64_t count = 0;
    uint64_t sum = 0;  // of exact sizes (saturating)
    size_t max = 0;
  };

  static constexpr uint32_t kBatch = 32;

  void Sample(size_t size);
  // Adds the pending sampled sizes to the table, oldest first. Const: the
  // histogram's value (every sampled size) does not change, only where the
  // pending ones are kept.
  void Flush() const;
  void Add(size_t size) const;
  // The key of a size in 512-byte units at `bits` significant bits (0: exact).
  static uint64_t KeyOf(uint64_t units, int bits);
  static uint64_t UnitsOf(size_t size) {
    return uint64_t(size / 512) + (size % 512 != 0 ? 1 : 0);
  }
  void Coarsen() const;
  uint64_t NextInterval();

  uint32_t sample_every_;
  size_t max_sizes_;
  uint64_t countdown_;
  uint64_t rng_ = 0x9e3779b97f4a7c15ull;
  // Sampled sizes not yet in the table (pending_[0, pending_count_)), and the
  // table of the others; together, every sampled size since Clear.
  mutable std::array<size_t, kBatch> pending_;
  mutable uint32_t pending_count_ = 0;
  mutable int bits_ = 0;
  mutable uint64_t samples_ = 0;
  mutable MetadataFlatHashMap<uint64_t, Entry> table_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_SIZE_HISTOGRAM_H_
