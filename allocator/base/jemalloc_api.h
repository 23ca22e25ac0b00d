/* A remnant: the table fragfree's private jemalloc companion
 * (libff_jemalloc.so) used to export. The companion was removed (docs/host.md,
 * "Why the mmap arena, and no jemalloc"): metadata is always on fragfree's mmap
 * arena and nothing provides ff_jemalloc_api any more, so
 * MetadataArena::jemalloc() is always nullptr and the preload layer's
 * dlsym(FF_JEMALLOC_API_SYMBOL) always fails. Kept only because
 * metadata_arena.h and shim/preload.cc still name it; delete it with those
 * references. */
#ifndef FRAGFREE_ALLOCATOR_BASE_JEMALLOC_API_H_
#define FRAGFREE_ALLOCATOR_BASE_JEMALLOC_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FF_JEMALLOC_API_VERSION 1
#define FF_JEMALLOC_API_SYMBOL "ff_jemalloc_api"

typedef struct ff_jemalloc_api_t {
  uint32_t version; /* FF_JEMALLOC_API_VERSION */
  /* jemalloc's mallctl (names as in jemalloc(3)). */
  int (*mallctl)(const char* name, void* oldp, size_t* oldlenp, void* newp,
                 size_t newlen);
  /* mallocx/sdallocx on arena `arena` through the explicit thread cache
   * `tcache` ("tcache.create"), or through none when tcache < 0. Never the
   * automatic thread cache: it would hand back regions of other arenas; an
   * explicit one used only with `arena` holds only that arena's regions.
   * alignment: 0 or a power of two. NULL when out of memory. */
  void* (*alloc)(unsigned arena, int tcache, size_t size, size_t alignment);
  void (*dealloc)(unsigned arena, int tcache, void* ptr, size_t size,
                  size_t alignment);
  /* The usable size of a region of this jemalloc (sallocx). */
  size_t (*usable_size)(const void* ptr);
  /* The arena that owns a region of this jemalloc ("arenas.lookup"); UINT32_MAX
   * on error. Undefined for memory that this jemalloc did not allocate. */
  unsigned (*arena_of)(const void* ptr);
} ff_jemalloc_api_t;

typedef const ff_jemalloc_api_t* (*ff_jemalloc_api_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* FRAGFREE_ALLOCATOR_BASE_JEMALLOC_API_H_ */
