// Host tables (huge_pages.h) on the metadata arena. Thread-safety: stateless.
#include "allocator/base/huge_pages.h"

#include <sys/mman.h>

#include "allocator/base/metadata_arena.h"

namespace fragfree {
namespace {
size_t AlignmentFor(size_t bytes) {
  return bytes < kHugePageSize ? kHostTableAlignment : kHugePageSize;
}
size_t Rounded(size_t bytes) {
  return bytes < kHugePageSize
             ? bytes
             : (bytes + kHugePageSize - 1) / kHugePageSize * kHugePageSize;
}
}  // namespace

void* AllocateHostTable(size_t bytes) {
  const size_t rounded = Rounded(bytes);
  void* p = MetadataArena::Allocate(rounded, AlignmentFor(bytes));
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (rounded >= kHugePageSize) {
    madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure is harmless
  }
#endif
  return p;
}

void FreeHostTable(void* p, size_t bytes) {
  MetadataArena::Deallocate(p, Rounded(bytes), AlignmentFor(bytes));
}

}  // namespace fragfree
