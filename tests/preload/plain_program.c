/* A program that never uses CUDA, for the "preloading is harmless" test:
 * it mallocs and prints. --getenv VAR prints a variable of its environment;
 * --dlopen LIB loads a library first (as ctypes does for fragfree.enable());
 * --fork-chain N forks a child that forks a child ... N deep, each waiting for
 * its own (a shell script that runs a program that forks does this).
 * Thread-safety: single-threaded. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--dlopen") == 0) {
      if (dlopen(argv[i + 1], RTLD_NOW | RTLD_LOCAL) == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
      }
    } else if (strcmp(argv[i], "--fork-chain") == 0) {
      int depth = atoi(argv[i + 1]);
      int level = 0;
      while (level < depth) {
        pid_t child = fork();
        if (child < 0) return 4;
        if (child > 0) {
          int status = 0;
          if (waitpid(child, &status, 0) != child) return 5;
          if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 6;
          break;
        }
        ++level; /* in the child: go one deeper */
      }
      if (level > 0) _exit(0);
      printf("forked %d deep\n", depth);
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
