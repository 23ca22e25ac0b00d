#include "allocator/base/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>

namespace fragfree {

void* AllocateHostTable(size_t bytes) {
  if (bytes < kHugePageSize)
    return ::operator new (bytes, std::align_val_t{64});
  const size_t rounded =
      (bytes + kHugePageSize - 1) / kHugePageSize * kHugePageSize;
  void* p = std::aligned_alloc(kHugePageSize, rounded);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
  return p;
}

void FreeHostTable(void* p, size_t bytes) {
  if (bytes < kHugePageSize) {
    ::operator delete (p, std::align_val_t{64});
  } else {
    std::free(p);
  }
}

}  // namespace fragfree
