/* A program that never uses CUDA, for the "preloading is harmless" test:
 * it mallocs and prints. --getenv VAR prints a variable of its environment;
 * --dlopen LIB loads a library first (as ctypes does for fragfree.enable()).
 * Thread-safety: single-threaded. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--dlopen") == 0) {
      if (dlopen(argv[i + 1], RTLD_NOW | RTLD_LOCAL) == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
      }
    } else if (strcmp(argv[i], "--getenv") == 0) {
      const char* v = getenv(argv[i + 1]);
      printf("%s=%s\n", argv[i + 1], v != NULL ? v : "(unset)");
    }
  }
  unsigned long total = 0;
  for (int i = 0; i < 1000; ++i) {
    size_t n = (size_t)i * 37 + 1;
    unsigned char* p = malloc(n);
    if (p == NULL) return 3;
    memset(p, i & 0xff, n);
    total += p[n - 1];
    free(p);
  }
  printf("plain program: %lu\n", total);
  return 0;
}
