// The bodies of ff_malloc and ff_free, inline, so that PyTorch's pluggable
// entry points (shim/pluggable.cc) run them in place rather than calling the
// exported C functions: a call saved on every allocation and free, and in
// libfragfree.so no call through the PLT (an exported function may be
// interposed, so the compiler neither inlines it nor calls it directly). The
// paths that report an error, make a device or search every device for a
// pointer's owner stay out of line (shim/c_api.cc).
// Thread-safety: as the C API (the Runtime and allocators lock).
#ifndef FRAGFREE_SHIM_CALL_ENTRY_H_
#define FRAGFREE_SHIM_CALL_ENTRY_H_

#include <cstddef>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fragfree/fragfree.h"
#include "shim/runtime.h"

namespace fragfree {

// ff_malloc's failure: records the error (an out-of-memory error's message is
// the whole report, docs/oom.md) and returns nullptr.
void* MallocFailed(DeviceAllocator& device, const absl::Status& status);
// ff_malloc on a device with no allocator yet: makes it and allocates, or
// reports why it cannot (no such device).
void* MallocOnNewDevice(size_t size, int device, ff_stream_t stream);
// ff_free with FF_DEVICE_OWNER (device < 0), or on a device with no allocator
// yet.
ff_status_t FreeSlow(void* ptr, int device);

// `size` (> 0) bytes from `device`'s allocator, or nullptr with the error
// recorded.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void* MallocOn(DeviceAllocator& device,
                                                   size_t size,
                                                   ff_stream_t stream) {
  absl::StatusOr<void*> p =
      device.Malloc(size, reinterpret_cast<StreamHandle>(stream));
  if (ABSL_PREDICT_FALSE(!p.ok())) return MallocFailed(device, p.status());
  return *p;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void* MallocCall(size_t size, int device,
                                                     ff_stream_t stream) {
  if (size == 0) return nullptr;
  DeviceAllocator* const d = Runtime::Get().Existing(device);
  if (ABSL_PREDICT_FALSE(d == nullptr)) {
    return MallocOnNewDevice(size, device, stream);
  }
  return MallocOn(*d, size, stream);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline ff_status_t FreeCall(void* ptr,
                                                         int device) {
  if (ptr == nullptr) return FF_OK;
  Runtime& rt = Runtime::Get();
  DeviceAllocator* const d = rt.Existing(device);  // nullptr if device < 0
  if (ABSL_PREDICT_FALSE(d == nullptr)) return FreeSlow(ptr, device);
  return rt.Report(d->Free(ptr));
}

}  // namespace fragfree

#endif  // FRAGFREE_SHIM_CALL_ENTRY_H_
