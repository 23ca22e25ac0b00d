// The CUDA backend's BackupCopier (backup.h): pinned host chunks, got on
// kHostThreads threads at once (a Backup pins chunk k+1.. while chunk k
// copies), either from cuMemHostAlloc (FRAGFREE_BACKUP_PIN=alloc, the
// default) or as anonymous mmap memory (2 MiB transparent huge pages asked
// for, populated by MADV_POPULATE_WRITE, else by touching each page) then
// cuMemHostRegister (FRAGFREE_BACKUP_PIN=register): docs/sleep.md says how to
// choose. Copies split into pieces of at most kPieceBytes issued
// round-robin on kStreams non-blocking streams of the copier's own (so that
// both directions' copy engines stay busy), an event recorded after each
// piece. Every call runs in the device's primary context (CudaContextScope;
// the caller's context is restored). The caller has already waited for the
// program's work on the memory (pause waits for the tag's streams), so the
// copier's streams need no ordering with the program's.
// Thread-safety: see backup.h.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"
#include "allocator/phys/cuda_driver.h"
#include "allocator/sleep/backup.h"

namespace fragfree {
namespace {

class CudaBackupCopier final : public BackupCopier {
 public:
  static constexpr int kStreams = 4;
  static constexpr size_t kPieceBytes = size_t{64} << 20;
  static constexpr int kHostThreads = 4;

  CudaBackupCopier(const CudaDriver* cu, CUcontext context, bool register_pin)
      : cu_(*cu), context_(context), register_(register_pin) {}
  ~CudaBackupCopier() override {
    CudaContextScope scope(cu_, context_);
    if (!scope.status().ok()) return;  // the context is gone (exit)
    for (const Pending& p : pending_) {
      cu_.cuEventSynchronize(p.event);
      cu_.cuEventDestroy(p.event);
    }
    for (CUstream s : streams_) {
      if (s != nullptr) cu_.cuStreamDestroy(s);
    }
  }

  // Runs on the Backup's helper threads: driver calls are thread-safe, and
  // each thread makes the device's primary context current for the call.
  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    CudaContextScope scope(cu_, context_);
    if (!scope.status().ok()) return scope.status();
    void* host = nullptr;
    CUresult r;
    const char* call;
    if (register_) {
      host = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (host == MAP_FAILED) {
        return absl::ResourceExhaustedError(
            absl::StrFormat("cannot map %s of host memory for a backup: %s",
                            FormatBytes(bytes), strerror(errno)));
      }
      Populate(host, bytes);
      call = "cuMemHostRegister";
      r = cu_.cuMemHostRegister(host, bytes, CU_MEMHOSTREGISTER_PORTABLE);
      if (r != CUDA_SUCCESS) munmap(host, bytes);
    } else {
      call = "cuMemHostAlloc";
      r = cu_.cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_PORTABLE);
    }
    if (r != CUDA_SUCCESS) {
      absl::Status s = cu_.ToStatus(r, call, __FILE__, __LINE__);
      // Pinned memory is short: say so in the words of the request.
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot pin %s of host memory for a backup: %s",
                          FormatBytes(bytes), s.message()));
    }
    return host;
  }

  void FreeHost(void* host, size_t bytes) override {
    CudaContextScope scope(cu_, context_);
    if (!scope.status().ok()) return;  // the context is gone (exit)
    if (register_) {
      cu_.cuMemHostUnregister(host);
      munmap(host, bytes);
    } else {
      cu_.cuMemFreeHost(host);
    }
  }

  int host_threads() const override { return kHostThreads; }

  absl::StatusOr<uint64_t> CopyToHost(void* dst, uintptr_t src,
                                      size_t bytes) override {
    return Copy(static_cast<char*>(dst), src, bytes, /*to_host=*/true);
  }
  absl::StatusOr<uint64_t> CopyToDevice(uintptr_t dst, const void* src,
                                        size_t bytes) override {
    return Copy(const_cast<char*>(static_cast<const char*>(src)), dst, bytes,
                /*to_host=*/false);
  }

  absl::Status WaitFor(uint64_t ticket) override {
    CudaContextScope scope(cu_, context_);
    if (!scope.status().ok()) return scope.status();
    while (!pending_.empty() && pending_.front().ticket <= ticket) {
      const Pending p = pending_.front();
      pending_.pop_front();
      CUresult r = cu_.cuEventSynchronize(p.event);
      cu_.cuEventDestroy(p.event);
      if (r != CUDA_SUCCESS) {
        return cu_.ToStatus(r, "cuEventSynchronize (backup copy)", __FILE__,
                            __LINE__);
      }
    }
    return absl::OkStatus();
  }

  bool copies_contents() const override { return true; }

 private:
  struct Pending {
    uint64_t ticket;
    CUevent event;
  };

  absl::StatusOr<uint64_t> Copy(char* host, uintptr_t device, size_t bytes,
                                bool to_host) {
    CudaContextScope scope(cu_, context_);
    if (!scope.status().ok()) return scope.status();
    for (CUstream& s : streams_) {
      if (s == nullptr) {
        FF_CU_RETURN_IF_ERROR(cu_, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
      }
    }
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(kPieceBytes, bytes - done);
      CUstream stream = streams_[next_stream_];
      next_stream_ = (next_stream_ + 1) % kStreams;
      if (to_host) {
        FF_CU_RETURN_IF_ERROR(
            cu_, cuMemcpyDtoHAsync(host + done, CUdeviceptr(device + done), n,
                                   stream));
      } else {
        FF_CU_RETURN_IF_ERROR(cu_, cuMemcpyHtoDAsync(CUdeviceptr(device + done),
                                                     host + done, n, stream));
      }
      CUevent event;
      FF_CU_RETURN_IF_ERROR(cu_,
                            cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
      if (CUresult r = cu_.cuEventRecord(event, stream); r != CUDA_SUCCESS) {
        cu_.cuEventDestroy(event);
        return cu_.ToStatus(r, "cuEventRecord (backup copy)", __FILE__,
                            __LINE__);
      }
      pending_.push_back({++ticket_, event});
      done += n;
    }
    return ticket_;
  }

  // Faults in every page of a fresh mapping (on the calling helper thread, so
  // chunks populate in parallel), as 2 MiB huge pages where the kernel gives
  // them: fewer faults, and pinning walks fewer pages.
  static void Populate(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);  // advice: ignored where THP is off
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif
    if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
    volatile char* c = static_cast<char*>(p);
    for (size_t off = 0; off < bytes; off += 4096) c[off] = 0;
  }

  const CudaDriver& cu_;
  const CUcontext context_;
  const bool register_;
  CUstream streams_[kStreams] = {};
  int next_stream_ = 0;
  uint64_t ticket_ = 0;
  MetadataDeque<Pending> pending_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BackupCopier>> MakeCudaBackupCopier(int device) {
  absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
  if (!cu.ok()) return cu.status();
  absl::StatusOr<CUcontext> context = (*cu)->RetainPrimaryContext(device);
  if (!context.ok()) return context.status();
  const char* pin = getenv("FRAGFREE_BACKUP_PIN");
  const bool register_pin = pin != nullptr && strcmp(pin, "register") == 0;
  return std::unique_ptr<BackupCopier>(
      new CudaBackupCopier(*cu, *context, register_pin));
}

}  // namespace fragfree
