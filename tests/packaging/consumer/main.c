/* The consumer program: includes <fragfree/fragfree.h> from the install
 * prefix, links libfragfree, and allocates + frees on the host backend
 * (FRAGFREE_CONF=backend:host in the environment). Prints "consumer ok".
 * Thread-safety: single-threaded. */
#include <fragfree/fragfree.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  const size_t size = 1 << 20;
  void* p = ff_malloc(size, 0, NULL);
  if (p == NULL) {
    fprintf(stderr, "ff_malloc: %s\n", ff_last_error());
    return 1;
  }
  memset(p, 1, size);
  if (ff_free(p, 0) != FF_OK) {
    fprintf(stderr, "ff_free: %s\n", ff_last_error());
    return 2;
  }
  printf("consumer ok (fragfree %s)\n", ff_version());
  return 0;
}
