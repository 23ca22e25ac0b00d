// AdviseDeviceBuckets: the bucket advisor (allocator/obs/bucket_advisor.h)
// applied to one device's state: the request sizes it has sampled (the
// bucket_sample option), the number of buckets (the bucket_advice_k option
// unless the caller asks for another), and the device's memory limit as the
// largest bucket (a request above it could not be served by any bucket). The
// one place the shim turns a device into advice: ff_bucket_advice_json
// (shim/c_api.cc), the OOM report (shim/oom.cc) and the LD_PRELOAD exit
// summary (shim/preload.cc) all call it.
// Thread-safety: reads the device through its own lock; no state.
#ifndef FRAGFREE_SHIM_DEVICE_BUCKET_ADVICE_H_
#define FRAGFREE_SHIM_DEVICE_BUCKET_ADVICE_H_

#include <cstddef>

#include "allocator/device_allocator.h"
#include "allocator/obs/bucket_advisor.h"
#include "allocator/obs/size_histogram.h"
#include "allocator/options.h"

namespace fragfree {

struct DeviceBucketAdvice {
  size_t num_buckets = 0;         // what the advisor was asked for
  SizeHistogram::Info histogram;  // the sampled sizes' figures
  bool has_sizes = false;         // any request size was sampled
  BucketAdvice advice;            // without sizes: no buckets, conf ""
};

// `device` may be null (a device fragfree has not served: no sizes, no limit);
// `options` are the device's (or, without one, the runtime's). num_buckets 0:
// options.bucket_advice_k.
DeviceBucketAdvice AdviseDeviceBuckets(const DeviceAllocator* device,
                                       const Options& options,
                                       size_t num_buckets = 0);

}  // namespace fragfree

#endif  // FRAGFREE_SHIM_DEVICE_BUCKET_ADVICE_H_
