// MetadataArena: where every host allocation fragfree makes for itself lives
// (the engine's blocks, live table, arenas, streams, page tables; the pinned
// pool's maps; docs/host.md, "What lives where"), so that fragfree's
// bookkeeping never depends on, nor shares a heap with, the program's malloc
// (under LD_PRELOAD that may be anything), and fragfree never replaces it.
// Two backends, chosen once, at the first call, for the life of the process:
//  - a private jemalloc arena ("arenas.create" in fragfree's own renamed copy
//    of jemalloc, libff_jemalloc.so), when that companion can be used;
//  - otherwise (built without it, FRAGFREE_JEMALLOC=0, or the companion cannot
//    be loaded: docs/host.md explains the static-TLS limit) fragfree's mmap
//    arena (base/mmap_arena.h), which takes its memory from mmap.
// Neither calls the program's malloc or operator new.
// MetadataAllocator<T> is the same thing as an STL allocator; MetadataVector,
// MetadataMap, MetadataSet, MetadataDeque are the std containers that use it
// (base/metadata_containers.h has abseil's); MetadataNew/MetadataDelete and
// MetadataUniquePtr make single objects; a class deriving from MetadataObject
// is allocated on the arena by `new` (class-level operator new/delete).
// Thread-safety: every function is thread-safe (jemalloc's arena locks, or the
// mmap arena's lock); counters are relaxed atomics. Fork: the backend's locks
// are held across fork(), taken after those of any layer whose fork handlers
// were registered later: the mmap arena's handlers are registered when
// fragfree is loaded (a constructor of priority 101), jemalloc's when it
// initializes, so a layer that allocates metadata under a lock of its own
// that its fork handlers take calls Initialize() first when the jemalloc
// companion is already loaded (docs/host.md, "Threads and fork").
#ifndef FRAGFREE_ALLOCATOR_BASE_METADATA_ARENA_H_
#define FRAGFREE_ALLOCATOR_BASE_METADATA_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "allocator/base/jemalloc_api.h"

namespace fragfree {

struct MetadataArenaInfo {
  bool jemalloc = false;  // served by the private jemalloc arena
  unsigned arena = 0;     // its index in fragfree's jemalloc (when jemalloc)
  // "jemalloc 5.3.0-... arena 2" or "fragfree mmap arena".
  std::string backend;
  std::string why_not;     // why jemalloc is not used; "" when it is
  int64_t live_bytes = 0;  // requested bytes currently allocated through it
  int64_t live_allocations = 0;
  int64_t total_allocations = 0;
  // Bytes the mmap arena holds from the OS (0 on jemalloc).
  int64_t mapped_bytes = 0;
};

class MetadataArena {
 public:
  // Chooses the backend now (else the first call does); initializes
  // jemalloc when it is chosen. See the fork rule above.
  static void Initialize();
  // `size` bytes aligned to `alignment` (a power of two), or nullptr when out
  // of memory. Size 0 allocates a minimal block.
  static void* Allocate(size_t size,
                        size_t alignment = alignof(std::max_align_t)) noexcept;
  // `size` and `alignment` must be those given to Allocate. nullptr: no-op.
  static void Deallocate(void* ptr, size_t size,
                         size_t alignment = alignof(std::max_align_t)) noexcept;

  static MetadataArenaInfo Info();
  // True when `ptr`, returned by Allocate, lies in the private jemalloc arena
  // (jemalloc's "arenas.lookup") or, on the mmap arena, in one of its chunks
  // (requests up to MmapArena::kMaxSmall = 64 KiB; a larger one has a mapping
  // of its own and answers false). Only pointers from Allocate may be passed.
  static bool InPrivateArena(const void* ptr);
  // fragfree's jemalloc, or nullptr when metadata uses the mmap arena.
  static const ff_jemalloc_api_t* jemalloc();
};

// Creates and destroys single objects on the metadata arena.
template <typename T, typename... Args>
T* MetadataNew(Args&&... args) {
  void* p = MetadataArena::Allocate(sizeof(T), alignof(T));
  if (p == nullptr) throw std::bad_alloc();
  return ::new (p) T(std::forward<Args>(args)...);
}
template <typename T>
void MetadataDelete(T* p) noexcept {
  if (p == nullptr) return;
  p->~T();
  MetadataArena::Deallocate(p, sizeof(T), alignof(T));
}

// A unique_ptr whose object is on the metadata arena (made by MetadataNew or
// MakeMetadataUnique). Same size as a plain pointer.
template <typename T>
struct MetadataDeleter {
  void operator()(T* p) const noexcept { MetadataDelete(p); }
};
template <typename T>
using MetadataUniquePtr = std::unique_ptr<T, MetadataDeleter<T>>;
template <typename T, typename... Args>
MetadataUniquePtr<T> MakeMetadataUnique(Args&&... args) {
  return MetadataUniquePtr<T>(MetadataNew<T>(std::forward<Args>(args)...));
}

// Derive from this to have `new T` / `delete p` (and so std::make_unique,
// std::unique_ptr<T>) use the metadata arena. Polymorphic deletion passes the
// dynamic type's size (the destructor must be virtual, as always).
class MetadataObject {
 public:
  static void* operator new(size_t size) {
    void* p = MetadataArena::Allocate(size);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  static void* operator new(size_t size, std::align_val_t alignment) {
    void* p = MetadataArena::Allocate(size, size_t(alignment));
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  static void operator delete(void* p, size_t size) noexcept {
    MetadataArena::Deallocate(p, size);
  }
  static void operator delete(void* p, size_t size,
                              std::align_val_t alignment) noexcept {
    MetadataArena::Deallocate(p, size, size_t(alignment));
  }
  // Placement forms (BlockPool, tests) stay the global ones.
  static void* operator new(size_t, void* where) noexcept { return where; }
  static void operator delete(void*, void*) noexcept {}
};

// An STL allocator on the metadata arena (stateless: all instances are equal).
template <typename T>
class MetadataAllocator {
 public:
  using value_type = T;
  MetadataAllocator() noexcept = default;
  template <typename U>
  MetadataAllocator(const MetadataAllocator<U>&) noexcept {}  // NOLINT

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) {
      throw std::bad_array_new_length();
    }
    void* p = MetadataArena::Allocate(n * sizeof(T), alignof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    MetadataArena::Deallocate(p, n * sizeof(T), alignof(T));
  }
  template <typename U>
  bool operator==(const MetadataAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename K, typename V, typename Less = std::less<K>>
using MetadataMap =
    std::map<K, V, Less, MetadataAllocator<std::pair<const K, V>>>;
template <typename K, typename Less = std::less<K>>
using MetadataSet = std::set<K, Less, MetadataAllocator<K>>;
template <typename T>
using MetadataVector = std::vector<T, MetadataAllocator<T>>;
template <typename T>
using MetadataDeque = std::deque<T, MetadataAllocator<T>>;

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_METADATA_ARENA_H_
