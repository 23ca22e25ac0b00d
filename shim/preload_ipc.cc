// The interposed CUDA IPC calls for memory fragfree owns (docs/ipc.md, "CUDA's
// IPC calls"): cudaIpcGetMemHandle exports the whole block a pointer lies in
// and writes a 64-byte compact handle (allocator/ipc/compact_handle.h);
// cudaIpcOpenMemHandle maps such a handle's block, from another preloaded
// process, and returns its first byte (as CUDA, the handle stands for the
// whole allocation, whatever pointer inside it was exported);
// cudaIpcCloseMemHandle unmaps it. Pointers fragfree does not own, and
// handles that are not fragfree's, go to the runtime unchanged.
//
// Opens are counted per export, as CUDA does: opening the same handle again
// returns the same pointer, and the mapping goes with the last close.
// Exports are released by the producer's free of the block (PyTorch's and
// CUDA's rule: a handle is valid while the allocation lives); the memory is
// reused once every consumer closed it or died (the lease table).
//
// Thread-safety: every function is thread-safe. The table of opened handles
// has its own Mutex, taken only once the engine was used (a fork child of such
// a process runs with fragfree off, so it never needs the lock it may have
// inherited held) and never held while calling into the engine, the runtime
// or another process.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/metadata_containers.h"
#include "allocator/base/mutex.h"
#include "allocator/ipc/compact_handle.h"
#include "allocator/ipc/lease_table.h"
#include "shim/preload.h"
#include "shim/preload_real.h"
#include "shim/runtime.h"

#define FF_INTERPOSE extern "C" __attribute__((visibility("default")))

namespace fragfree::preload {
namespace {

// An export of another process (or of this one) opened here.
struct Opened {
  pid_t pid = 0;
  uint64_t start_time = 0;
  uint64_t export_id = 0;
  uintptr_t ptr = 0;  // what cudaIpcOpenMemHandle returned
  int device = -1;
  int64_t refs = 0;
};

struct OpenTable : public MetadataObject {
  Mutex mu;
  MetadataVector<Opened> opened ABSL_GUARDED_BY(mu);
  // Set once something was opened (after the engine was used): until then
  // cudaIpcCloseMemHandle does not take `mu`, so a fork child of a process
  // that never used fragfree cannot inherit it held.
  std::atomic<bool> used{false};
};

OpenTable& Table() {
  static OpenTable* const table = MetadataNew<OpenTable>();
  return *table;
}

// Reports `status` (fragfree's error handler, stderr by default) and returns
// `code`.
cudaError_t Fail(const absl::Status& status, cudaError_t code) {
  Runtime::Get().Report(status);
  return code;
}

// The CUDA error for a failed export or open.
cudaError_t IpcError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return Fail(status, cudaErrorInvalidValue);
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kNotFound:
      // The producer is gone or the export released: the handle is stale.
      return Fail(status, cudaErrorInvalidResourceHandle);
    case absl::StatusCode::kPermissionDenied:
      return Fail(status, cudaErrorNotPermitted);
    case absl::StatusCode::kUnimplemented:
      return Fail(status, cudaErrorNotSupported);
    default:
      return ToCuda(status);
  }
}

// Drops one reference to the open at `ptr`: *last says whether it was the
// last one. False when nothing was opened at `ptr` with cudaIpcOpenMemHandle.
bool Unref(uintptr_t ptr, int* device, bool* last) {
  OpenTable& t = Table();
  if (!t.used.load(std::memory_order_acquire)) return false;
  MutexLock lock(&t.mu);
  for (size_t i = 0; i < t.opened.size(); ++i) {
    Opened& o = t.opened[i];
    if (o.ptr != ptr) continue;
    *device = o.device;
    *last = --o.refs == 0;
    if (*last) {
      t.opened[i] = t.opened.back();
      t.opened.pop_back();
    }
    return true;
  }
  return false;
}

// The pointer of an open of `h` already in the table (one more reference),
// or 0. REQUIRES: Table().mu held (the analysis cannot name it here).
uintptr_t Ref(const CompactHandle& h) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  OpenTable& t = Table();
  for (Opened& o : t.opened) {
    if (o.pid == h.pid && o.start_time == h.start_time &&
        o.export_id == h.export_id) {
      ++o.refs;
      return o.ptr;
    }
  }
  return 0;
}

// Exports the block of `d` (on `device`) that devPtr lies in.
cudaError_t GetHandle(cudaIpcMemHandle_t* handle, void* devPtr,
                      DeviceAllocator* d, int device) {
  NoteCudaUse();
  RelaxedCapture relaxed;
  absl::StatusOr<DeviceAllocator::IpcExport> e =
      d->IpcExportBlock(devPtr, /*release_on_free=*/true,
                        /*handle_file=*/true);
  if (!e.ok()) {
    if (absl::IsFailedPrecondition(e.status())) {
      return Fail(e.status(), cudaErrorNotSupported);
    }
    return IpcError(e.status());
  }
  CompactHandle c;
  c.pid = getpid();
  c.handle_fd = e->handle_file;
  c.start_time = SelfStartTime();
  c.export_id = e->id;
  c.device = device;
  c.handle_bytes = uint32_t(e->handle.size());
  c.block_size = e->block_size;
  static_assert(sizeof(handle->reserved) == kCompactHandleBytes,
                "cudaIpcMemHandle_t is 64 bytes");
  EncodeCompactHandle(c, handle->reserved);
  return cudaSuccess;
}

cudaError_t OpenHandle(void** devPtr, const cudaIpcMemHandle_t& handle,
                       unsigned int flags) {
  NoteCudaUse();
  absl::StatusOr<CompactHandle> c = DecodeCompactHandle(handle.reserved);
  if (!c.ok()) return IpcError(c.status());
  if ((flags & ~unsigned{cudaIpcMemLazyEnablePeerAccess}) != 0) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
                    "cudaIpcOpenMemHandle: unknown flags %#x (only "
                    "cudaIpcMemLazyEnablePeerAccess is defined)",
                    flags)),
                cudaErrorInvalidValue);
  }
  int device = -1;
  if (cudaError_t err = CurrentDevice(&device); err != cudaSuccess) return err;
  if (c->device != device) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
                    "cudaIpcOpenMemHandle: the handle is fragfree memory of "
                    "device %d and the current device is %d: fragfree maps "
                    "shared pages on their own device only (cudaSetDevice(%d) "
                    "first; device numbers must mean the same GPU in both "
                    "processes)",
                    c->device, device, c->device)),
                cudaErrorInvalidDevice);
  }
  DeviceAllocator* d = Served(device);
  if (d == nullptr) {
    return Fail(absl::FailedPreconditionError(absl::StrFormat(
                    "cudaIpcOpenMemHandle: the handle is fragfree memory and "
                    "fragfree does not serve device %d in this process",
                    device)),
                cudaErrorNotSupported);
  }
  OpenTable& t = Table();
  {
    MutexLock lock(&t.mu);
    if (uintptr_t p = Ref(*c)) {
      *devPtr = reinterpret_cast<void*>(p);
      return cudaSuccess;
    }
  }
  absl::StatusOr<std::string> full = FetchFullHandle(*c);
  if (!full.ok()) return IpcError(full.status());
  RelaxedCapture relaxed;
  absl::StatusOr<DeviceAllocator::IpcMapping> m = d->IpcOpen(*full);
  if (!m.ok()) return IpcError(m.status());
  uintptr_t existing = 0;
  {
    MutexLock lock(&t.mu);
    existing = Ref(*c);  // another thread opened it meanwhile
    if (existing == 0) {
      t.opened.push_back(
          Opened{c->pid, c->start_time, c->export_id, m->ptr, device, 1});
      t.used.store(true, std::memory_order_release);
    }
  }
  if (existing != 0) {
    d->IpcClose(reinterpret_cast<void*>(m->ptr)).IgnoreError();
    *devPtr = reinterpret_cast<void*>(existing);
    return cudaSuccess;
  }
  *devPtr = reinterpret_cast<void*>(m->ptr);
  return cudaSuccess;
}

}  // namespace
}  // namespace fragfree::preload

using fragfree::DeviceAllocator;
using namespace fragfree::preload;  // NOLINT(build/namespaces): the C ABI edge

FF_INTERPOSE cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle,
                                             void* devPtr) {
  auto forward = [&] { FF_FORWARD(cudaIpcGetMemHandle, handle, devPtr); };
  if (!Active() || handle == nullptr || devPtr == nullptr) return forward();
  uintptr_t base = 0;
  size_t size = 0;
  int device = -1;
  DeviceAllocator* d =
      BlockRange(reinterpret_cast<uintptr_t>(devPtr), &base, &size, &device);
  if (d == nullptr) return forward();
  return GetHandle(handle, devPtr, d, device);
}

FF_INTERPOSE cudaError_t cudaIpcOpenMemHandle(void** devPtr,
                                              cudaIpcMemHandle_t handle,
                                              unsigned int flags) {
  auto forward = [&] {
    FF_FORWARD(cudaIpcOpenMemHandle, devPtr, handle, flags);
  };
  if (!Active() || devPtr == nullptr ||
      !fragfree::IsCompactHandle(handle.reserved)) {
    return forward();
  }
  return OpenHandle(devPtr, handle, flags);
}

FF_INTERPOSE cudaError_t cudaIpcCloseMemHandle(void* devPtr) {
  auto forward = [&] { FF_FORWARD(cudaIpcCloseMemHandle, devPtr); };
  if (!Active() || devPtr == nullptr) return forward();
  const uintptr_t p = reinterpret_cast<uintptr_t>(devPtr);
  int device = -1;
  bool last = false;
  if (Unref(p, &device, &last)) {
    if (!last) return cudaSuccess;
    DeviceAllocator* d = fragfree::Runtime::Get().Existing(device);
    RelaxedCapture relaxed;
    const absl::Status s = d->IpcClose(devPtr);
    return s.ok() ? cudaSuccess : ToCuda(s);
  }
  uintptr_t base = 0;
  size_t size = 0;
  if (BlockRange(p, &base, &size) != nullptr) {
    // fragfree memory, but not a pointer cudaIpcOpenMemHandle returned.
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
                    "cudaIpcCloseMemHandle(%p): not a pointer that "
                    "cudaIpcOpenMemHandle returned (it lies in fragfree's "
                    "block [%#x, +%d); close the pointer the open returned)",
                    devPtr, base, size)),
                cudaErrorInvalidValue);
  }
  return forward();
}
