// Backups of paused memory (docs/sleep.md): a BackupCopier moves bytes between
// device addresses and host memory for the backend in use, and a Backup holds
// one paused tag's host copy: the host chunks and, per allocation, where its
// bytes went.
//  - CUDA backend: pinned host chunks (cuMemHostAlloc), copies with
//    cuMemcpyDtoHAsync / cuMemcpyHtoDAsync in pieces spread over a few streams
//    of the copier's own, completion tracked by events (backup_cuda.cc).
//  - Host backend: the "device" is host memory: anonymous mmap chunks and
//    memcpy (copies are complete when issued).
//  - Simulated backend (bookkeeping only): nothing is copied or kept.
// Copies are identified by tickets, increasing in issue order: WaitFor(t)
// returns once every copy with a ticket <= t is complete.
// Thread-safety: not thread-safe; the owning DeviceAllocator serialises calls
// under its lock.
#ifndef FRAGFREE_ALLOCATOR_SLEEP_BACKUP_H_
#define FRAGFREE_ALLOCATOR_SLEEP_BACKUP_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/metadata_arena.h"

namespace fragfree {

enum class BackupMode : int { kNone = 0, kCpu = 1 };

class BackupCopier : public MetadataObject {
 public:
  virtual ~BackupCopier() = default;
  // Host memory of `bytes` (pinned where the backend copies by DMA).
  // ResourceExhausted when the host cannot provide it.
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes) = 0;
  virtual void FreeHost(void* host, size_t bytes) = 0;
  // Starts a copy and returns its ticket. The source stays unchanged until
  // WaitFor(ticket) returns.
  virtual absl::StatusOr<uint64_t> CopyToHost(void* dst, uintptr_t src,
                                              size_t bytes) = 0;
  virtual absl::StatusOr<uint64_t> CopyToDevice(uintptr_t dst, const void* src,
                                                size_t bytes) = 0;
  virtual absl::Status WaitFor(uint64_t ticket) = 0;
  // Whether a backup holds the contents (false: the simulated backend, where
  // there are none).
  virtual bool copies_contents() const = 0;
};

// The copier for a backend named `backend_name` (PhysicalBackend::Name(): a
// "+faults" suffix is ignored) on `device`.
absl::StatusOr<std::unique_ptr<BackupCopier>> MakeBackupCopier(
    const std::string& backend_name, int device);
#ifdef FRAGFREE_WITH_CUDA
absl::StatusOr<std::unique_ptr<BackupCopier>> MakeCudaBackupCopier(int device);
#endif

// One paused tag's host copy. Host space is carved from chunks of kChunkBytes
// (or one allocation's size when larger; the last chunk only as large as what
// remains), in order, so that allocations adjacent on the device are
// adjacent on the host too and copy as one.
class Backup : public MetadataObject {
 public:
  struct Entry {
    uintptr_t addr;  // device address of the allocation
    size_t size;     // bytes kept (the block's size)
    char* host;      // where they are (nullptr when nothing is copied)
  };
  static constexpr size_t kChunkBytes = size_t{256} << 20;

  // `expected_bytes`: the total that Reserve will be asked for, so that the
  // last chunk is no larger than needed.
  Backup(BackupCopier* copier, size_t expected_bytes)
      : copier_(copier), remaining_(expected_bytes) {}
  ~Backup();
  Backup(const Backup&) = delete;
  Backup& operator=(const Backup&) = delete;

  // Host space for `bytes`, contiguous (a new chunk when the current one is
  // short). Nothing is allocated when the copier copies nothing.
  absl::StatusOr<char*> Reserve(size_t bytes);
  MetadataVector<Entry>& entries() { return entries_; }
  const MetadataVector<Entry>& entries() const { return entries_; }
  // Host bytes held (chunks).
  size_t host_bytes() const { return host_bytes_; }

 private:
  struct Chunk {
    char* base;
    size_t size;
  };
  BackupCopier* const copier_;
  MetadataVector<Chunk> chunks_;
  MetadataVector<Entry> entries_;
  size_t remaining_;  // of expected_bytes, not reserved yet
  size_t used_in_last_ = 0;
  size_t host_bytes_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_SLEEP_BACKUP_H_
