// TouchedPages: the pages under allocated or pending blocks, over all arenas of
// a DeviceAllocator: the floor that "an allocation never fails while enough
// free physical pages exist" is measured against (conformance suite, fuzzer).
// Thread-safety: reads a consistent view (DeviceAllocator::Arenas).
#ifndef FRAGFREE_TESTS_TESTING_TOUCHED_PAGES_H_
#define FRAGFREE_TESTS_TESTING_TOUCHED_PAGES_H_

#include <cstddef>
#include <vector>

#include "allocator/device_allocator.h"

namespace fragfree::testing {

// In pages of `page` bytes where `page` is given (the engine's page): a page
// of a larger size (large_page_mb) counts as the pages of `page` bytes it
// spans; 0: one per page of each arena's own size.
inline size_t TouchedPages(DeviceAllocator& a, size_t page = 0) {
  size_t pages = 0;
  for (const ArenaView& arena : a.Arenas()) {
    const size_t weight = page == 0 ? 1 : arena.page_size / page;
    std::vector<bool> touched(arena.va_size / arena.page_size, false);
    for (const BlockView& b : arena.blocks) {
      if (b.state == BlockState::kFree) continue;
      size_t first = (b.addr - arena.base) / arena.page_size;
      size_t end = (b.addr + b.size - arena.base + arena.page_size - 1) /
                   arena.page_size;
      for (size_t p = first; p < end; ++p) touched[p] = true;
    }
    for (bool t : touched) pages += t ? weight : 0;
  }
  return pages;
}

}  // namespace fragfree::testing

#endif  // FRAGFREE_TESTS_TESTING_TOUCHED_PAGES_H_
