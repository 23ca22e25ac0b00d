// CHECK and CHECK_EQ for the preloaded test programs (tests/preload/*_test.cc
// run under LD_PRELOAD without GoogleTest): a failed check prints the process,
// file, line and expression, and counts in check_failures; the program exits
// nonzero when any failed. Thread-safety: checks may run on any thread.
#ifndef FRAGFREE_TESTS_PRELOAD_PROG_CHECK_H_
#define FRAGFREE_TESTS_PRELOAD_PROG_CHECK_H_

#include <unistd.h>

#include <atomic>
#include <cstdio>

inline std::atomic<int> check_failures{0};

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "[%d] %s:%d: CHECK failed: %s\n", int(getpid()), \
              __FILE__, __LINE__, #cond);                              \
      ++check_failures;                                                \
    }                                                                  \
  } while (0)
#define CHECK_EQ(a, b)                                                         \
  do {                                                                         \
    const long long va_ = (long long)(a), vb_ = (long long)(b);                \
    if (va_ != vb_) {                                                          \
      fprintf(stderr, "[%d] %s:%d: CHECK_EQ failed: %s (%lld) != %s (%lld)\n", \
              int(getpid()), __FILE__, __LINE__, #a, va_, #b, vb_);            \
      ++check_failures;                                                        \
    }                                                                          \
  } while (0)

#endif  // FRAGFREE_TESTS_PRELOAD_PROG_CHECK_H_
