/* The interface between fragfree and its private copy of jemalloc
 * (libff_jemalloc.so, built from Debian's libjemalloc_pic.a with every
 * public name renamed to ffje_*; docs/host.md explains why it is a separate
 * shared object). The companion exports one symbol, ff_jemalloc_api(), that
 * returns this table; fragfree finds it with dlsym/dlopen at run time, so no
 * jemalloc symbol is ever linked into libfragfree.so or a program.
 * Thread-safety: the table is immutable; every function is jemalloc's, and
 * thread-safe. */
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
