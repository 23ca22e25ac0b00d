/* libff_jemalloc.so: fragfree's private jemalloc. Linked from a copy of
 * Debian's libjemalloc_pic.a whose public names (malloc, free, mallocx, ...)
 * were renamed to ffje_* and whose C++ operators (jemalloc_cpp.o) were dropped
 * (allocator/base/CMakeLists.txt), so this library defines no standard
 * allocation function and cannot replace or be confused with the program's
 * malloc. It exports only ff_jemalloc_api() (jemalloc_api.h).
 * Thread-safety: the table is immutable; jemalloc is thread-safe. */
#include <jemalloc/jemalloc.h> /* MALLOCX_* flag macros only */
#include <stdint.h>

#include "allocator/base/jemalloc_api.h"

/* The renamed entry points of the private archive. */
void* ffje_mallocx(size_t size, int flags);
void ffje_sdallocx(void* ptr, size_t size, int flags);
void ffje_dallocx(void* ptr, int flags);
size_t ffje_sallocx(const void* ptr, int flags);
int ffje_mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp,
                 size_t newlen);

/* jemalloc's compile-time options for this copy (the archive's weak
 * malloc_conf, renamed). No sbrk (the program's heap is glibc's), no
 * automatic thread caches (fragfree uses explicit ones, with its arena), one
 * automatic arena (unused). The
 * MALLOC_CONF environment variable is still read on top (docs/host.md). */
__attribute__((visibility("hidden"))) const char* ffje_malloc_conf =
    "dss:disabled,tcache:false,narenas:1,background_thread:false";

static int Flags(unsigned arena, int tcache, size_t alignment) {
  int flags = MALLOCX_ARENA(arena) |
              (tcache >= 0 ? MALLOCX_TCACHE(tcache) : MALLOCX_TCACHE_NONE);
  if (alignment > 16) flags |= MALLOCX_ALIGN(alignment);
  return flags;
}

static void* Alloc(unsigned arena, int tcache, size_t size, size_t alignment) {
  return ffje_mallocx(size == 0 ? 1 : size, Flags(arena, tcache, alignment));
}

static void Dealloc(unsigned arena, int tcache, void* ptr, size_t size,
                    size_t alignment) {
  if (ptr == NULL) return;
  if (size == 0) {
    ffje_dallocx(ptr, Flags(arena, tcache, alignment));
  } else {
    ffje_sdallocx(ptr, size, Flags(arena, tcache, alignment));
  }
}

static size_t UsableSize(const void* ptr) { return ffje_sallocx(ptr, 0); }

static unsigned ArenaOf(const void* ptr) {
  unsigned arena = UINT32_MAX;
  size_t len = sizeof(arena);
  if (ffje_mallctl("arenas.lookup", &arena, &len, (void*)&ptr, sizeof(ptr)) !=
      0) {
    return UINT32_MAX;
  }
  return arena;
}

static const ff_jemalloc_api_t kApi = {
    FF_JEMALLOC_API_VERSION, ffje_mallctl, Alloc, Dealloc, UsableSize, ArenaOf,
};

__attribute__((visibility("default"))) const ff_jemalloc_api_t* ff_jemalloc_api(
    void) {
  return &kApi;
}
