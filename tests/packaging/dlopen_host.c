/* Loads the libfragfree.so named on the command line with dlopen (nothing
 * linked at build time) and uses it on the host backend (FRAGFREE_CONF=
 * backend:host in the environment): ff_malloc, a write over the block,
 * ff_allocation_size, ff_free; prints "ok <version>". Exit 0 on success.
 * Thread-safety: single-threaded. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef void* (*malloc_fn)(size_t, int, void*);
typedef int (*free_fn)(void*, int);
typedef const char* (*version_fn)(void);
typedef const char* (*error_fn)(void);

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBFRAGFREE\n", argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 3;
  }
  malloc_fn ff_malloc = (malloc_fn)dlsym(h, "ff_malloc");
  free_fn ff_free = (free_fn)dlsym(h, "ff_free");
  version_fn ff_version = (version_fn)dlsym(h, "ff_version");
  error_fn ff_last_error = (error_fn)dlsym(h, "ff_last_error");
  if (!ff_malloc || !ff_free || !ff_version || !ff_last_error) {
    fprintf(stderr, "missing symbols\n");
    return 4;
  }
  const size_t size = 3 << 20;
  char* p = (char*)ff_malloc(size, 0, NULL);
  if (p == NULL) {
    fprintf(stderr, "ff_malloc failed: %s\n", ff_last_error());
    return 5;
  }
  memset(p, 0x5a, size);
  if (p[size - 1] != 0x5a) return 6;
  int status = ff_free(p, 0);
  if (status != 0) {
    fprintf(stderr, "ff_free: %d %s\n", status, ff_last_error());
    return 7;
  }
  printf("ok %s\n", ff_version());
  return 0;
}
