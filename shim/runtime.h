// Runtime: fragfree's process-wide state, the only global in the library. It
// owns one DeviceAllocator per device (created on first use with the backend
// the options name), the options, the error handler and the shutdown flag.
// Thread-safety: all methods are thread-safe; device allocators are created
// under mu_, then used lock-free through an atomic pointer table.
#ifndef FRAGFREE_SHIM_RUNTIME_H_
#define FRAGFREE_SHIM_RUNTIME_H_

#include <array>
#include <atomic>
#include <memory>
#include <string>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "allocator/device_allocator.h"
#include "allocator/options.h"
#include "fragfree/fragfree.h"

namespace fragfree {

inline constexpr int kMaxDevices = 64;

class Runtime : public MetadataObject {
 public:
  // The process's runtime (never destroyed: PyTorch may free tensors during
  // static destruction).
  ABSL_ATTRIBUTE_ALWAYS_INLINE static Runtime& Get() {
    static Runtime* const runtime = new Runtime();
    return *runtime;
  }

  // Re-reads the options; refused once a device allocator exists.
  absl::Status Init(const char* conf) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // The allocator of `device`, created on first use.
  absl::StatusOr<DeviceAllocator*> Device(int device) ABSL_LOCKS_EXCLUDED(mu_) {
    if (DeviceAllocator* d = Existing(device)) return d;
    return CreateDevice(device);
  }
  // The allocator of `device` if it exists (no creation), else nullptr
  // (inline: every allocation and free asks, shim/call_entry.h).
  DeviceAllocator* Existing(int device) const {
    if (ABSL_PREDICT_FALSE(device < 0 || device >= kMaxDevices)) return nullptr;
    return devices_[device].load(std::memory_order_acquire);
  }
  absl::StatusOr<int> DeviceCount() ABSL_LOCKS_EXCLUDED(mu_);
  Options options() const ABSL_LOCKS_EXCLUDED(mu_);
  // The trace size of every device allocator created from now on (what
  // ff_record_history(-1, ...) asks for before a device is in use).
  absl::Status SetTraceEntriesForNewDevices(size_t entries)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Turns a status into a C code: records it as the thread's last error and
  // calls the handler. OK stays FF_OK (inline: every ff_free reports).
  ff_status_t Report(const absl::Status& status) {
    return ABSL_PREDICT_TRUE(status.ok()) ? FF_OK : ReportError(status);
  }
  void SetErrorHandler(ff_error_handler_t handler, void* arg);
  static const char* LastError();

 private:
  Runtime() = default;
  ff_status_t ReportError(const absl::Status& status);
  // Device's slow path: the allocator, made unless another thread made it.
  absl::StatusOr<DeviceAllocator*> CreateDevice(int device)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status EnsureOptionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool options_loaded_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  Options options_ ABSL_GUARDED_BY(mu_);
  std::array<std::atomic<DeviceAllocator*>, kMaxDevices> devices_{};
  std::atomic<ff_error_handler_t> handler_{nullptr};
  std::atomic<void*> handler_arg_{nullptr};
};

// Writes a snapshot of every device in use to the snapshot_path option (device
// N > 0 to "<path>.deviceN"); registered with atexit when that option is set.
void DumpSnapshotsAtExit();
// Writes `device`'s snapshot to `path` (pickle, or JSON for "*.json"). A device
// fragfree has not served gives an empty snapshot.
absl::Status DumpSnapshot(int device, const std::string& path);

}  // namespace fragfree

#endif  // FRAGFREE_SHIM_RUNTIME_H_
