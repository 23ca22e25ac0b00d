// AdviseDeviceBuckets (shim/device_bucket_advice.h). Thread-safety: as there.
#include "shim/device_bucket_advice.h"

#include <vector>

namespace fragfree {

DeviceBucketAdvice AdviseDeviceBuckets(const DeviceAllocator* device,
                                       const Options& options,
                                       size_t num_buckets) {
  DeviceBucketAdvice out;
  out.num_buckets = num_buckets > 0 ? num_buckets : options.bucket_advice_k;
  out.histogram.sample_every = options.bucket_sample;
  BucketAdvisorOptions advisor;
  advisor.num_buckets = out.num_buckets;
  std::vector<SizeCount> sizes;
  if (device != nullptr) {
    sizes = device->RequestSizes(&out.histogram);
    if (size_t limit = device->memory_limit(); limit != 0) {
      advisor.max_size = limit;
    }
  }
  out.has_sizes = !sizes.empty();
  out.advice = AdviseBuckets(sizes, advisor);
  return out;
}

}  // namespace fragfree
