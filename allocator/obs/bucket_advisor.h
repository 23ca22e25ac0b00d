// BucketAdvisor: from a histogram of observed request sizes, the K rounding
// buckets that minimise padding (bytes rounded up), the padding of PyTorch's
// default rounding and of roundup_power2_divisions:4 for comparison, and the
// FRAGFREE_CONF string (`round_buckets:[...]`) that applies them. The same
// optimisation on sequence lengths gives a data loader's length buckets (pad
// variable-length batches to a few fixed lengths). docs/oom.md, "Bucket
// advisor", has the method.
//
// Method: sizes are first rounded up to 512-byte multiples (a bucket must be
// one: options.cc), so every candidate bucket is an observed rounded size. The
// K buckets that minimise total padding split the sorted distinct sizes into K
// contiguous groups, each served by its largest size; an exact dynamic
// programme finds them. Its cost satisfies the quadrangle inequality, so the
// programme is solved by divide and conquer in O(K n log n) rather than O(K
// n^2) (same answer; tests compare it with the plain programme and with brute
// force). Above `max_points` distinct sizes, adjacent sizes are merged into
// quantile groups (closed at 1/(max_points/2) of the requests or of the bytes,
// whichever comes first), and buckets are chosen among group maxima: `exact` is
// false then. The largest bucket is the largest observed size (<= max_size), so
// every bucketed request is served by a bucket, as SizeRounding does.
//
// Thread-safety: pure functions over values.
#ifndef FRAGFREE_ALLOCATOR_OBS_BUCKET_ADVISOR_H_
#define FRAGFREE_ALLOCATOR_OBS_BUCKET_ADVISOR_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "allocator/blocks/size_classes.h"

namespace fragfree {

// The most buckets the C API, the options and the Python helpers ask for (the
// programme's memory grows as buckets x distinct sizes).
inline constexpr size_t kMaxAdvisedBuckets = 256;

// One histogram entry: `count` requests of `size` bytes. Entries may come in
// any order and repeat a size.
struct SizeCount {
  size_t size = 0;
  uint64_t count = 0;
};

struct BucketAdvisorOptions {
  size_t num_buckets = 16;
  // Requests above this are not bucketed (they keep the default rounding, as
  // SizeRounding does for sizes above the largest bucket).
  size_t max_size = std::numeric_limits<size_t>::max();
  // Distinct 512-byte sizes kept exact; more are merged into quantile groups.
  size_t max_points = 4096;
};

struct BucketAdvice {
  std::vector<size_t> buckets;  // ascending multiples of 512
  uint64_t requests = 0;
  uint64_t requested_bytes = 0;
  // Bytes rounded up over all requests, with the advised buckets (requests
  // above max_size padded by the default rounding).
  uint64_t padding_bytes = 0;
  // The same with PyTorch's default rounding (512-byte multiples), and with
  // roundup_power2_divisions:4 (a common PyTorch setting against
  // fragmentation).
  uint64_t default_padding_bytes = 0;
  uint64_t pow2_div4_padding_bytes = 0;
  // Distinct block sizes each rounding produces: fewer sizes, more reuse.
  size_t default_distinct_sizes = 0;
  size_t pow2_div4_distinct_sizes = 0;
  size_t advised_distinct_sizes = 0;
  uint64_t unbucketed_requests = 0;  // above max_size
  size_t points = 0;                 // programme points after merging
  bool exact = true;                 // no quantile merging was needed
  std::string conf;  // "round_buckets:[1536,5K]"; empty without buckets
};

BucketAdvice AdviseBuckets(const std::vector<SizeCount>& histogram,
                           const BucketAdvisorOptions& options = {});

// Bytes rounded up over all requests, and distinct block sizes, under any
// rounding (for comparisons with the current configuration).
uint64_t PaddingUnder(const std::vector<SizeCount>& histogram,
                      const SizeRounding& rounding);
size_t DistinctSizesUnder(const std::vector<SizeCount>& histogram,
                          const SizeRounding& rounding);

// "round_buckets:[64K,1536,8M]": sizes with a K/M/G suffix where exact.
std::string FormatRoundBuckets(const std::vector<size_t>& buckets);
// "64K", "1536", "8M", "2G".
std::string FormatSizeSuffix(size_t bytes);

// {"buckets":[...],"conf":"...","padding_bytes":n,...}
std::string BucketAdviceToJson(const BucketAdvice& advice);

// Sequence lengths for a data loader: the same programme on lengths (rounded up
// to `multiple_of` tokens), padding measured in tokens.
struct LengthCount {
  size_t length = 0;
  uint64_t count = 0;
};

struct SeqBucketAdvice {
  std::vector<size_t> lengths;  // ascending: pad to the smallest >= a sequence
  std::vector<uint64_t> sequences_per_bucket;
  uint64_t sequences = 0;
  uint64_t tokens = 0;          // real tokens
  uint64_t padding_tokens = 0;  // with the advised lengths
  // Padding everything to the longest sequence (one fixed shape).
  uint64_t pad_to_max_padding_tokens = 0;
  bool exact = true;
};

SeqBucketAdvice AdviseSequenceBuckets(const std::vector<LengthCount>& histogram,
                                      size_t num_buckets,
                                      size_t multiple_of = 1,
                                      size_t max_points = 4096);

std::string SeqBucketAdviceToJson(const SeqBucketAdvice& advice);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_BUCKET_ADVISOR_H_
