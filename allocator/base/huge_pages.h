// Host memory for the engine's big, randomly accessed tables (the live table,
// Block chunks), backed by transparent huge pages where the kernel allows it
// (madvise(MADV_HUGEPAGE)), so that a lookup among 100k live blocks costs a
// cache miss and not also a TLB miss. Everything is on the metadata arena
// (base/metadata_arena.h): tables of 2 MiB or more are 2 MiB-aligned (a
// mapping of their own on the mmap arena), smaller ones 64-byte aligned.
// Thread-safety: stateless; safe from any thread.
#ifndef FRAGFREE_ALLOCATOR_BASE_HUGE_PAGES_H_
#define FRAGFREE_ALLOCATOR_BASE_HUGE_PAGES_H_

#include <cstddef>
#include <new>

namespace fragfree {

inline constexpr size_t kHugePageSize = size_t{2} << 20;
inline constexpr size_t kHostTableAlignment = 64;

// At least `bytes` (> 0), 64-byte aligned; 2 MiB-aligned and huge-page-advised
// when `bytes` is at least kHugePageSize. Throws std::bad_alloc when out of
// memory.
void* AllocateHostTable(size_t bytes);
// `bytes` as passed to AllocateHostTable.
void FreeHostTable(void* p, size_t bytes);

// A std::allocator for containers whose backing array may grow large.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding
  static_assert(alignof(T) <= kHostTableAlignment,
                "AllocateHostTable aligns to 64 bytes");
  T* allocate(size_t n) {
    return static_cast<T*>(AllocateHostTable(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) { FreeHostTable(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_HUGE_PAGES_H_
