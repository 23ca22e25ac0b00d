// Backup and the host and simulated backends' copiers (backup.h); the CUDA
// copier is in backup_cuda.cc. Thread-safety: see backup.h.
#include "allocator/sleep/backup.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "allocator/base/units.h"

namespace fragfree {
namespace {

// The host backend: device memory is host memory, so a copy is a memcpy,
// complete when issued. Backups live in anonymous mappings (never the
// program's heap).
class HostMemcpyCopier final : public BackupCopier {
 public:
  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot map %s of host memory for a backup: %s",
                          FormatBytes(bytes), strerror(errno)));
    }
    return p;
  }
  void FreeHost(void* host, size_t bytes) override { munmap(host, bytes); }
  absl::StatusOr<uint64_t> CopyToHost(void* dst, uintptr_t src,
                                      size_t bytes) override {
    memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return ++ticket_;
  }
  absl::StatusOr<uint64_t> CopyToDevice(uintptr_t dst, const void* src,
                                        size_t bytes) override {
    memcpy(reinterpret_cast<void*>(dst), src, bytes);
    return ++ticket_;
  }
  absl::Status WaitFor(uint64_t) override { return absl::OkStatus(); }
  bool copies_contents() const override { return true; }

 private:
  uint64_t ticket_ = 0;
};

// The simulated backend has no memory behind its addresses: a backup is
// bookkeeping only.
class NullCopier final : public BackupCopier {
 public:
  absl::StatusOr<void*> AllocateHost(size_t) override { return nullptr; }
  void FreeHost(void*, size_t) override {}
  absl::StatusOr<uint64_t> CopyToHost(void*, uintptr_t, size_t) override {
    return ++ticket_;
  }
  absl::StatusOr<uint64_t> CopyToDevice(uintptr_t, const void*,
                                        size_t) override {
    return ++ticket_;
  }
  absl::Status WaitFor(uint64_t) override { return absl::OkStatus(); }
  bool copies_contents() const override { return false; }

 private:
  uint64_t ticket_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BackupCopier>> MakeBackupCopier(
    const std::string& backend_name, int device) {
  if (absl::StartsWith(backend_name, "host")) {
    return std::unique_ptr<BackupCopier>(new HostMemcpyCopier());
  }
  if (absl::StartsWith(backend_name, "cuda")) {
#ifdef FRAGFREE_WITH_CUDA
    return MakeCudaBackupCopier(device);
#else
    return absl::UnimplementedError(
        "this fragfree was built without CUDA: no CPU backup on the cuda "
        "backend");
#endif
  }
  (void)device;
  return std::unique_ptr<BackupCopier>(new NullCopier());
}

Backup::~Backup() {
  for (const Chunk& c : chunks_) copier_->FreeHost(c.base, c.size);
}

absl::StatusOr<char*> Backup::Reserve(size_t bytes) {
  if (!copier_->copies_contents()) return nullptr;
  if (chunks_.empty() || chunks_.back().size - used_in_last_ < bytes) {
    const size_t size = AlignUp(
        std::max(bytes, std::min(kChunkBytes, remaining_)), size_t{64} << 10);
    absl::StatusOr<void*> host = copier_->AllocateHost(size);
    if (!host.ok()) return host.status();
    chunks_.push_back({static_cast<char*>(*host), size});
    host_bytes_ += size;
    used_in_last_ = 0;
  }
  char* p = chunks_.back().base + used_in_last_;
  used_in_last_ += AlignUp(bytes, size_t{512});
  remaining_ -= std::min(remaining_, bytes);
  return p;
}

}  // namespace fragfree
