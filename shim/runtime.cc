#include "shim/runtime.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "absl/strings/str_format.h"
#include "allocator/obs/snapshot.h"
#include "allocator/phys/backend_registry.h"
#include "allocator/stream/host_event_source.h"
#include "shim/host_api.h"
#ifdef FRAGFREE_WITH_CUDA
#include "allocator/stream/cuda_event_source.h"
#endif

namespace fragfree {
namespace {
thread_local std::string last_error;

ff_status_t CodeOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return FF_OK;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
      return FF_ERR_INVALID_ARGUMENT;
    case absl::StatusCode::kResourceExhausted:
      return FF_ERR_OOM;
    case absl::StatusCode::kUnavailable:
      return FF_ERR_NO_DEVICE;
    case absl::StatusCode::kFailedPrecondition:
      return FF_ERR_STATE;
    case absl::StatusCode::kInternal:
      return FF_ERR_BACKEND;
    default:
      return FF_ERR_INTERNAL;
  }
}
}  // namespace

absl::Status Runtime::EnsureOptionsLocked() {
  if (options_loaded_) return absl::OkStatus();
  const char* env = getenv("FRAGFREE_CONF");
  absl::StatusOr<Options> parsed = Options::Parse(env != nullptr ? env : "");
  if (!parsed.ok()) return parsed.status();
  options_ = *parsed;
  options_loaded_ = true;
  return absl::OkStatus();
}

absl::Status Runtime::Init(const char* conf) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    return absl::FailedPreconditionError("fragfree: ff_init after ff_shutdown");
  }
  for (const auto& d : devices_) {
    if (d.load() != nullptr) {
      return absl::FailedPreconditionError(
          "fragfree: ff_init called after memory was allocated; configure "
          "before the first allocation");
    }
  }
  const char* text = conf != nullptr ? conf : getenv("FRAGFREE_CONF");
  absl::StatusOr<Options> parsed = Options::Parse(text != nullptr ? text : "");
  if (!parsed.ok()) return parsed.status();
  options_ = *parsed;
  options_loaded_ = true;
  return absl::OkStatus();
}

absl::Status Runtime::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  for (auto& d : devices_) {
    delete d.exchange(nullptr);
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Runtime::DeviceCount() {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = EnsureOptionsLocked(); !s.ok()) return s;
  if (FindBackend(options_.backend)->emulated) return options_.host_devices;
#ifdef FRAGFREE_WITH_CUDA
  absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
  if (!cu.ok()) return cu.status();
  int count = 0;
  FF_CU_RETURN_IF_ERROR(**cu, cuDeviceGetCount(&count));
  return count;
#else
  return NoCudaBuildError();
#endif
}

absl::StatusOr<DeviceAllocator*> Runtime::CreateDevice(int device) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    return absl::FailedPreconditionError(
        "fragfree: called after ff_shutdown; the allocator is gone");
  }
  if (absl::Status s = EnsureOptionsLocked(); !s.ok()) return s;
  if (device < 0 || device >= kMaxDevices) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fragfree: device index %d is out of range", device));
  }
  if (DeviceAllocator* d = Existing(device)) return d;
  const BackendSpec& spec = *FindBackend(options_.backend);
  if (spec.emulated && device >= options_.host_devices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragfree: device %d does not exist: the %s backend emulates %d "
        "device(s) (the host_devices option)",
        device, spec.name, options_.host_devices));
  }
  absl::StatusOr<std::unique_ptr<PhysicalBackend>> backend = spec.create(
      BackendParams{.device = device,
                    .capacity_bytes = options_.host_capacity_bytes,
                    .granularity_bytes = options_.host_granularity_bytes});
  if (!backend.ok()) return backend.status();
  std::unique_ptr<EventSource> events;
  if (spec.emulated) {
    events = std::make_unique<HostEventSource>();
  } else {
#ifdef FRAGFREE_WITH_CUDA
    absl::StatusOr<std::unique_ptr<CudaEventSource>> e =
        CudaEventSource::Create(device);
    if (!e.ok()) return e.status();
    events = std::move(*e);
#else
    return NoCudaBuildError();
#endif
  }
  absl::StatusOr<std::unique_ptr<DeviceAllocator>> allocator =
      DeviceAllocator::Create(device, options_, std::move(*backend),
                              std::move(events));
  if (!allocator.ok()) return allocator.status();
  DeviceAllocator* raw = allocator->release();
  devices_[device].store(raw, std::memory_order_release);
  if (!options_.snapshot_path.empty()) {
    // snapshot_path: the state (and trace, with trace_entries) at exit.
    static std::once_flag once;
    std::call_once(once, [] { atexit(DumpSnapshotsAtExit); });
  }
  return raw;
}

void DumpSnapshotsAtExit() {
  Runtime& rt = Runtime::Get();
  const std::string path = rt.options().snapshot_path;
  for (int device = 0; device < kMaxDevices; ++device) {
    if (rt.Existing(device) == nullptr) continue;
    std::string file =
        device == 0 ? path : absl::StrFormat("%s.device%d", path, device);
    absl::Status s = DumpSnapshot(device, file);
    if (!s.ok())
      fprintf(stderr, "fragfree: %s\n", std::string(s.message()).c_str());
  }
}

absl::Status DumpSnapshot(int device, const std::string& path) {
  DeviceAllocator* d = Runtime::Get().Existing(device);
  std::vector<ArenaView> arenas;
  TraceLog trace;
  if (d != nullptr) {
    arenas = d->Arenas();
    trace = d->Trace();
  }
  const bool json =
      path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cannot write the snapshot to %s: %s", path, strerror(errno)));
  }
  // Streamed to the file: never the whole snapshot in memory.
  bool ok = WriteSnapshot(
      json ? SnapshotFormat::kJson : SnapshotFormat::kPickle, device, arenas,
      trace,
      [f](std::string_view s) {
        return fwrite(s.data(), 1, s.size(), f) == s.size();
      },
      HostSegments());
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    return absl::InternalError(
        absl::StrFormat("writing the snapshot to %s failed", path));
  }
  return absl::OkStatus();
}

absl::Status Runtime::SetTraceEntriesForNewDevices(size_t entries) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = EnsureOptionsLocked(); !s.ok()) return s;
  options_.trace_entries = entries;
  return absl::OkStatus();
}

Options Runtime::options() const {
  absl::MutexLock lock(&mu_);
  return options_;
}

ff_status_t Runtime::ReportError(const absl::Status& status) {
  ff_status_t code = CodeOf(status);
  last_error = std::string(status.message());
  ff_error_handler_t handler = handler_.load();
  if (handler != nullptr) {
    handler(code, last_error.c_str(), handler_arg_.load());
  } else {
    fprintf(stderr, "fragfree: %s: %s\n", ff_status_name(code),
            last_error.c_str());
  }
  return code;
}

void Runtime::SetErrorHandler(ff_error_handler_t handler, void* arg) {
  handler_arg_.store(arg);
  handler_.store(handler);
}

const char* Runtime::LastError() { return last_error.c_str(); }

}  // namespace fragfree
