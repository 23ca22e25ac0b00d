/* A library that leaks what libfragfree.so must never export, for
 * exports_selftest.sh: an abseil function (mangled, in abseil's inline
 * namespace), jemalloc's prefixed entry points, a c10 (torch) name, and malloc.
 * Thread-safety: nothing to share. */
int leaky_absl(void) __asm__("_ZN4absl7debian36StrCatERKNS0_8AlphaNumES3_");
int leaky_absl(void) { return 1; }
int je_mallocx(void) { return 2; }
int ffje_malloc(void) { return 3; }
int leaky_c10(void) __asm__("_ZN3c1019GetCPUAllocatorEv");
int leaky_c10(void) { return 4; }
int malloc_stats_leak(void) { return 5; }
