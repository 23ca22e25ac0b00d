// MmapArena: fragfree's own allocator for its metadata, used when its private
// jemalloc cannot be loaded (MetadataArena's fallback; docs/host.md, "The mmap
// arena"). It never calls the program's malloc: memory comes from mmap.
// Requests up to kMaxSmall bytes are rounded to one of kNumClasses size classes
// (16-byte steps up to 128 bytes, then four classes per power of two: at most
// 25% rounding) and served from the class's free list or carved from the
// class's current run (64 KiB or 4 objects, page aligned) with a bump pointer;
// runs are carved from 1 MiB chunks mapped as needed. Freed objects go back on
// their class's free list (memory of the small classes is kept, never handed
// back to the OS: bounded by each class's peak). Larger or more-than-page-
// aligned requests get a mapping of their own, unmapped when freed. An object
// of a class whose size is a multiple of the requested alignment (up to a
// page) is aligned to it, since runs start on a page.
// Under AddressSanitizer, free and not-yet-carved memory is poisoned (a use
// after free of metadata is reported) and every chunk and mapping is a
// LeakSanitizer root region (heap blocks referenced only from metadata are not
// reported as leaks).
// Thread-safety: one lock per arena (a Mutex) guards the free lists, runs and
// chunks; a request that needs its own mapping maps outside the lock.
// LockForFork/UnlockAfterFork hold the lock across fork() (MetadataArena
// registers them with pthread_atfork), so a child never inherits it held.
#ifndef FRAGFREE_ALLOCATOR_BASE_MMAP_ARENA_H_
#define FRAGFREE_ALLOCATOR_BASE_MMAP_ARENA_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "allocator/base/mutex.h"

namespace fragfree {

class MmapArena {
 public:
  static constexpr size_t kMaxSmall = size_t{64} << 10;  // larger: own mapping
  static constexpr int kNumClasses = 44;
  static constexpr size_t kChunkBytes = size_t{1} << 20;
  static constexpr size_t kPage = 4096;
  static constexpr size_t kMinAlign = 16;  // of every object

  constexpr MmapArena() = default;
  MmapArena(const MmapArena&) = delete;
  MmapArena& operator=(const MmapArena&) = delete;
  // Trivial: the process-wide arena is never destroyed (metadata may be freed
  // by destructors that run at exit). See ReleaseAll.

  // `size` bytes aligned to `alignment` (a power of two), or nullptr when out
  // of memory. Size 0 allocates a minimal block.
  void* Allocate(size_t size, size_t alignment = kMinAlign) noexcept
      ABSL_LOCKS_EXCLUDED(mu_);
  // `size` and `alignment` must be those given to Allocate. nullptr: no-op.
  void Deallocate(void* ptr, size_t size, size_t alignment = kMinAlign) noexcept
      ABSL_LOCKS_EXCLUDED(mu_);

  // The size class serving a request, or -1 when it gets its own mapping.
  static int ClassOf(size_t size, size_t alignment);
  static size_t ClassSize(int c);

  // Whether `ptr` lies in one of this arena's chunks (objects of the size
  // classes; a request with its own mapping answers false).
  bool Owns(const void* ptr) const ABSL_LOCKS_EXCLUDED(mu_);
  // Bytes mapped from the OS: chunks plus own mappings.
  size_t mapped_bytes() const {
    return mapped_bytes_.load(std::memory_order_relaxed);
  }
  size_t chunks() const ABSL_LOCKS_EXCLUDED(mu_);

  // Unmaps every chunk. REQUIRES: nothing allocated here is used any more
  // (tests' private arenas; never the process-wide one).
  void ReleaseAll() ABSL_LOCKS_EXCLUDED(mu_);

  // pthread_atfork handlers: prepare, parent, child.
  void LockForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.Lock(); }
  void UnlockAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS { mu_.Unlock(); }
  void UnlockInForkChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    mu_.UnlockInForkChild();
  }

 private:
  struct FreeNode {
    FreeNode* next;
  };
  struct Class {
    FreeNode* free = nullptr;  // freed objects, last freed first
    char* cur = nullptr;       // the current run: [cur, end) not carved yet
    char* end = nullptr;
  };
  struct ChunkHeader {  // the first page of every chunk
    ChunkHeader* next;
  };
  // A new run of `bytes` (a multiple of kPage) from the current chunk, or a
  // new one; nullptr when out of memory.
  char* NewRun(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void* MapOwn(size_t size, size_t alignment) noexcept;
  void UnmapOwn(void* ptr, size_t size) noexcept;

  mutable Mutex mu_;
  Class classes_[kNumClasses] ABSL_GUARDED_BY(mu_) = {};
  ChunkHeader* chunks_ ABSL_GUARDED_BY(mu_) = nullptr;  // newest first
  char* chunk_cur_ ABSL_GUARDED_BY(mu_) = nullptr;      // of chunks_
  char* chunk_end_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t num_chunks_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<size_t> mapped_bytes_{0};
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_MMAP_ARENA_H_
