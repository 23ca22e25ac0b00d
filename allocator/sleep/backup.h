// Backups of paused memory (docs/sleep.md): a BackupCopier moves bytes between
// device addresses and host memory for the backend in use, a BackupPool keeps
// host chunks between cycles (resume with keep_backup), and a Backup holds one
// paused tag's host copy: its chunks and, per piece of an allocation, where
// its bytes went.
//  - CUDA backend: pinned host chunks (cuMemHostAlloc, or mmap + populate +
//    cuMemHostRegister: FRAGFREE_BACKUP_PIN), copies with cuMemcpyDtoHAsync /
//    cuMemcpyHtoDAsync in pieces spread over a few streams of the copier's
//    own, completion tracked by events (backup_cuda.cc).
//  - Host backend: the "device" is host memory: anonymous mmap chunks and
//    memcpy (copies are complete when issued).
//  - Simulated backend (bookkeeping only): nothing is copied or kept.
// Copies are identified by tickets, increasing in issue order: WaitFor(t)
// returns once every copy with a ticket <= t is complete.
// Thread-safety: BackupCopier::AllocateHost and FreeHost may run on several
// threads at once (a Backup pins its chunks on helper threads while the
// owner issues copies); everything else is not thread-safe: the owning
// DeviceAllocator serialises calls under its lock.
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
  // ResourceExhausted when the host cannot provide it. Thread-safe.
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes) = 0;
  // Thread-safe.
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
  // How many threads get (and free) host chunks at once: 1 = the caller's
  // thread only; more = helper threads, each chunk on one of them.
  virtual int host_threads() const { return 1; }
};

// The copier for a backend named `backend_name` (PhysicalBackend::Name(): a
// "+faults" suffix is ignored) on `device`.
absl::StatusOr<std::unique_ptr<BackupCopier>> MakeBackupCopier(
    const std::string& backend_name, int device);
#ifdef FRAGFREE_WITH_CUDA
absl::StatusOr<std::unique_ptr<BackupCopier>> MakeCudaBackupCopier(int device);
#endif

// A host chunk of a backup: `base` from BackupCopier::AllocateHost(size).
struct HostChunk {
  char* base;
  size_t size;
};

// Frees `chunks` with copier->FreeHost, on up to copier->host_threads()
// threads at once; returns when all are freed.
void FreeHostChunks(BackupCopier* copier, const HostChunk* chunks, size_t n);

// Host chunks kept between cycles (a resume with keep_backup gives its
// backup's chunks here; a later pause of any tag takes them before getting new
// ones). Owned by the device's SleepState, freed by Release (ff_release_backup)
// or when the device goes.
class BackupPool {
 public:
  explicit BackupPool(BackupCopier* copier = nullptr) : copier_(copier) {}
  ~BackupPool() { Release(); }
  BackupPool(const BackupPool&) = delete;
  BackupPool& operator=(const BackupPool&) = delete;
  void set_copier(BackupCopier* copier) { copier_ = copier; }

  void Put(HostChunk c);
  // The chunk that best serves a need of `need` bytes: the smallest chunk of
  // at least `need` (best fit), else the largest (the need continues in the
  // next chunk). False when the pool is empty.
  bool Take(size_t need, HostChunk* out);
  // Frees every kept chunk; the bytes freed.
  size_t Release();
  size_t bytes() const { return bytes_; }
  size_t chunks() const { return chunks_.size(); }

 private:
  BackupCopier* copier_;
  MetadataVector<HostChunk> chunks_;
  size_t bytes_ = 0;
};

// One paused tag's host copy. Host space is carved in order from chunks: kept
// ones from the pool first (best fit), then new ones of kChunkBytes (the last
// only as large as what remains), got on the copier's helper threads ahead of
// use, so that getting chunk k+1 (pinning) overlaps copying into chunk k. An
// allocation may be split across chunks: an Entry is one piece of one
// allocation, and pieces adjacent on both sides copy as one.
class Backup : public MetadataObject {
 public:
  struct Entry {
    uintptr_t block;    // device address of the allocation
    size_t block_size;  // its size (the block's), to tell if it is the same
    uintptr_t addr;     // this piece: device address
    size_t size;        // bytes
    char* host;         // where they are (nullptr when nothing is copied)
    // The piece begins a host chunk: a copy never runs across chunks (each is
    // its own pinned allocation, even where two happen to be adjacent).
    bool starts_chunk = false;
  };
  static constexpr size_t kChunkBytes = size_t{256} << 20;
  // Host alignment of each piece.
  static constexpr size_t kAlign = 512;

  // `expected_bytes`: what Reserve will be asked for in all (each request
  // rounded up to kAlign), so that the chunks are planned up front. Nothing is
  // got before Start.
  Backup(BackupCopier* copier, BackupPool* pool, size_t expected_bytes);
  ~Backup();  // stops and joins the helpers; frees every chunk it holds
  Backup(const Backup&) = delete;
  Backup& operator=(const Backup&) = delete;

  // Takes the planned chunks from the pool and starts getting the new ones.
  void Start();
  // Host space for up to `bytes` (at least 1 byte, at most `bytes`,
  // contiguous): the rest of the current chunk, or the next one (waiting for
  // it). Nothing is allocated when the copier copies nothing ({nullptr,
  // bytes}).
  absl::StatusOr<std::pair<char*, size_t>> Reserve(size_t bytes);
  // Whether the piece the last Reserve returned begins a host chunk.
  bool last_piece_starts_chunk() const { return last_starts_chunk_; }
  // Every chunk is in hand: joins the helpers (chunks got ahead but not
  // reserved stay with the backup). Called at the end of a successful backup.
  void FinishReserving();
  MetadataVector<Entry>& entries() { return entries_; }
  const MetadataVector<Entry>& entries() const { return entries_; }
  // Host bytes held (chunks).
  size_t host_bytes() const { return host_bytes_; }
  // Bytes of chunks newly got (not from the pool), so far.
  size_t new_bytes() const { return new_bytes_; }
  // Gives every chunk to `pool` (the backup is then empty).
  void GiveChunksTo(BackupPool* pool);
  // Failure path: chunks that came from the pool go back to it, new ones are
  // freed, so a failed pause leaves the kept memory as it was.
  void Abandon();

 private:
  struct Pipeline;
  absl::Status NextChunk(size_t bytes);
  void StopHelpers();

  BackupCopier* const copier_;
  BackupPool* const pool_;
  const size_t expected_;
  MetadataVector<HostChunk> chunks_;  // in use, in order
  size_t from_pool_ = 0;              // chunks_[0, from_pool_) came from pool_
  MetadataVector<HostChunk> planned_pool_;  // taken from the pool, not used yet
  size_t next_planned_ = 0;
  Pipeline* pipeline_ = nullptr;  // new chunks being got (MetadataNew)
  MetadataVector<Entry> entries_;
  bool last_starts_chunk_ = false;
  size_t used_in_last_ = 0;
  size_t host_bytes_ = 0;
  size_t new_bytes_ = 0;
  bool started_ = false;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_SLEEP_BACKUP_H_
