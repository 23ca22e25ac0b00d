// PinnedHostAllocator: pinned (page-locked) host memory for offload, served
// from large chunks that are pinned once (PinningBackend: 64 MiB by default, a
// bigger request gets a chunk of its own) and carved with best fit:
// requests are rounded to size classes (512 B steps up to 16 KiB, then 32
// classes per doubling), free blocks are kept by (size, address) and coalesced
// with their neighbours in the same chunk, so most requests cost no pinning
// call at all. A chunk whose blocks are all free is unpinned once it has been
// free for `release_after_ms` (checked on every call, and by Trim), or at once
// by EmptyCache.
// Stream safety follows PyTorch's CachingHostAllocator: RecordStream notes the
// streams an allocation was used on (asynchronous copies); Free records an
// event on each of them and the block is reused only once every event has
// completed (stream/deferred_frees.h, the device engine's mechanism too). A
// block never given a stream is reusable at once.
// Errors (absl::Status): unknown pointer, interior pointer, double free,
// record_stream of a freed block, size too large, pinning failures
// (ResourceExhausted, after unpinning every free chunk and retrying once).
// The object and all its metadata are on the metadata arena.
// Thread-safety: every method is thread-safe. One mutex guards the metadata;
// the backend's Pin and Unpin calls, which take milliseconds on a GPU, are
// made without it.
#ifndef FRAGFREE_ALLOCATOR_HOST_PINNED_ALLOCATOR_H_
#define FRAGFREE_ALLOCATOR_HOST_PINNED_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/mutex.h"
#include "allocator/base/stream_handle.h"
#include "allocator/base/units.h"
#include "allocator/host/pinning_backend.h"
#include "allocator/obs/allocator_view.h"
#include "allocator/stream/deferred_frees.h"
#include "allocator/stream/event_source.h"

namespace fragfree {

struct PinnedOptions {
  size_t chunk_bytes = 64 * kMiB;  // pinned at once (rounded to pages)
  // A chunk with no live block is unpinned after this long; < 0: only by
  // EmptyCache.
  int64_t release_after_ms = 10'000;
};

struct PinnedStats {
  int64_t pinned_bytes = 0;  // in chunks now
  int64_t peak_pinned_bytes = 0;
  int64_t live_bytes = 0;  // handed out (block sizes, after rounding)
  int64_t peak_live_bytes = 0;
  int64_t requested_bytes = 0;  // the callers' sizes of live allocations
  int64_t pending_bytes = 0;    // freed, waiting for their streams' events
  int64_t chunks = 0;
  int64_t pin_calls = 0;
  int64_t unpin_calls = 0;
  int64_t pin_failures = 0;
  int64_t allocs = 0;
  int64_t frees = 0;
  int64_t allocs_without_pin = 0;  // served from memory already pinned
  int64_t events_recorded = 0;
  int64_t event_errors = 0;  // queries that failed (treated as complete)
};

class PinnedHostAllocator : public MetadataObject {
 public:
  using Clock = std::function<int64_t()>;  // nanoseconds, monotonic

  // `clock` defaults to std::chrono::steady_clock (tests pass a fake one).
  PinnedHostAllocator(std::unique_ptr<PinningBackend> backend,
                      std::unique_ptr<EventSource> events,
                      PinnedOptions options = {}, Clock clock = nullptr);
  // Unpins every chunk (live blocks included).
  ~PinnedHostAllocator();
  PinnedHostAllocator(const PinnedHostAllocator&) = delete;
  PinnedHostAllocator& operator=(const PinnedHostAllocator&) = delete;

  // `size` > 0 bytes of pinned memory, aligned to kAlignment.
  [[nodiscard]] absl::StatusOr<void*> Allocate(size_t size)
      ABSL_LOCKS_EXCLUDED(mu_);
  [[nodiscard]] absl::Status Free(void* ptr) ABSL_LOCKS_EXCLUDED(mu_);
  // `ptr` (a live allocation) is used by work on `stream`: Free will not
  // let the memory be reused before that work (issued so far) completes.
  [[nodiscard]] absl::Status RecordStream(void* ptr, StreamHandle stream)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Unpins every chunk that has no live or pending block; pending blocks
  // whose events completed are freed first (no waiting).
  [[nodiscard]] absl::Status EmptyCache() ABSL_LOCKS_EXCLUDED(mu_);
  // Unpins chunks free for longer than release_after_ms (also done by every
  // Allocate and Free).
  void Trim() ABSL_LOCKS_EXCLUDED(mu_);

  // The caller's size of a live allocation starting at `ptr`, else 0.
  size_t AllocationSize(const void* ptr) const ABSL_LOCKS_EXCLUDED(mu_);
  // True when `ptr` lies in one of this allocator's chunks.
  bool Owns(const void* ptr) const ABSL_LOCKS_EXCLUDED(mu_);
  PinnedStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // Every chunk and the blocks that tile it, by address (snapshots'
  // host_segments).
  std::vector<HostSegmentView> Segments() const ABSL_LOCKS_EXCLUDED(mu_);
  const PinnedOptions& options() const { return options_; }
  const PinningBackend& backend() const { return *backend_; }

  static constexpr size_t kAlignment = 512;
  // The block size a request of `size` bytes gets.
  static size_t RoundSize(size_t size);
  // Larger requests are refused (InvalidArgument).
  static constexpr size_t kMaxRequest = size_t{1} << 46;

 private:
  enum class State : uint8_t { kFree, kLive, kPending };
  struct Chunk {
    uintptr_t base = 0;
    size_t bytes = 0;
    int64_t idle_since_ns = -1;  // >= 0 while the chunk is one free block
  };
  struct Block {
    size_t size = 0;
    size_t requested = 0;  // while live
    Chunk* chunk = nullptr;
    State state = State::kFree;
    MetadataVector<StreamHandle> streams;  // recorded while live
  };
  using BlockMap = MetadataMap<uintptr_t, Block>;
  using FreeKey = std::pair<size_t, uintptr_t>;  // (size, address)
  using ChunkList = MetadataVector<std::pair<void*, size_t>>;

  // Takes the best-fitting free block for `rounded` bytes and makes it live.
  void* CarveLocked(size_t rounded, size_t requested)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Splits the free block `it` (already out of free_) and makes it live.
  void* UseBlockLocked(BlockMap::iterator it, size_t rounded, size_t requested)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds a new chunk as one free block.
  void AddChunkLocked(void* base, size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes a live or pending block free, coalescing with its neighbours.
  void ReleaseBlockLocked(BlockMap::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees pending blocks whose events have all completed.
  void ProcessPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves idle chunks (older than `min_idle_ns`; 0: all) out of the maps
  // into `out`, to be unpinned after the lock is dropped.
  void TakeIdleChunksLocked(int64_t min_idle_ns, ChunkList* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UnpinAll(const ChunkList& chunks) ABSL_LOCKS_EXCLUDED(mu_);
  void AccountLiveLocked(int64_t delta) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t Now() const;

  const std::unique_ptr<PinningBackend> backend_;
  const std::unique_ptr<EventSource> events_;
  const PinnedOptions options_;
  const Clock clock_;

  mutable Mutex mu_;
  BlockMap blocks_ ABSL_GUARDED_BY(mu_);            // all, by address
  MetadataSet<FreeKey> free_ ABSL_GUARDED_BY(mu_);  // free blocks
  MetadataMap<uintptr_t, Chunk*> chunks_ ABSL_GUARDED_BY(mu_);  // by base
  // Pending blocks by address, with their events (the engine's mechanism).
  DeferredFrees<uintptr_t> pending_ ABSL_GUARDED_BY(mu_);
  int64_t idle_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  PinnedStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_HOST_PINNED_ALLOCATOR_H_
