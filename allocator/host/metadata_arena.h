// MetadataArena: where fragfree's own bookkeeping lives on the host (maps,
// vectors, nodes): a private jemalloc arena (created with "arenas.create" in
// fragfree's own renamed copy of jemalloc, libff_jemalloc.so), so that
// the allocator's metadata never shares a heap with the program's malloc and
// fragfree never replaces or calls into the program's allocator for it. When
// that copy cannot be used (built without it, FRAGFREE_JEMALLOC=0, or the
// companion library cannot be loaded: docs/host.md explains the static-TLS
// limit), everything falls back to ::operator new; the choice is made once, at
// the first call, and never changes while the process runs.
// MetadataAllocator<T> is the same thing as an STL allocator, and
// MetadataMap/MetadataSet/MetadataVector are the containers that use it.
// Thread-safety: every function is thread-safe (jemalloc's arena locks, or
// operator new); counters are relaxed atomics.
#ifndef FRAGFREE_ALLOCATOR_HOST_METADATA_ARENA_H_
#define FRAGFREE_ALLOCATOR_HOST_METADATA_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "allocator/host/jemalloc_api.h"

namespace fragfree {

struct MetadataArenaInfo {
  bool jemalloc = false;   // served by the private jemalloc arena
  unsigned arena = 0;      // its index in fragfree's jemalloc (when jemalloc)
  std::string backend;     // "jemalloc 5.3.0-... arena 2" or "operator new"
  std::string why_not;     // why jemalloc is not used; "" when it is
  int64_t live_bytes = 0;  // requested bytes currently allocated through it
  int64_t live_allocations = 0;
  int64_t total_allocations = 0;
};

class MetadataArena {
 public:
  // `size` bytes aligned to `alignment` (a power of two), or nullptr when out
  // of memory. Size 0 allocates a minimal block.
  static void* Allocate(size_t size,
                        size_t alignment = alignof(std::max_align_t)) noexcept;
  // `size` and `alignment` must be those given to Allocate. nullptr: no-op.
  static void Deallocate(void* ptr, size_t size,
                         size_t alignment = alignof(std::max_align_t)) noexcept;

  static MetadataArenaInfo Info();
  // True when `ptr`, returned by Allocate, lies in the private jemalloc arena
  // (jemalloc's "arenas.lookup"). Only pointers from Allocate may be passed.
  static bool InPrivateArena(const void* ptr);
  // fragfree's jemalloc, or nullptr when metadata uses operator new.
  static const ff_jemalloc_api_t* jemalloc();
};

// Creates and destroys single objects on the metadata arena.
template <typename T, typename... Args>
T* MetadataNew(Args&&... args) {
  void* p = MetadataArena::Allocate(sizeof(T), alignof(T));
  if (p == nullptr) throw std::bad_alloc();
  return new (p) T(std::forward<Args>(args)...);
}
template <typename T>
void MetadataDelete(T* p) noexcept {
  if (p == nullptr) return;
  p->~T();
  MetadataArena::Deallocate(p, sizeof(T), alignof(T));
}

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

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_HOST_METADATA_ARENA_H_
