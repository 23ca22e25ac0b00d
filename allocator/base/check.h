// Always-on invariant checks. A failed FF_CHECK means fragfree's own metadata
// is corrupt: it prints file:line and the message without allocating, then
// aborts. Recoverable errors (bad user input, OOM, driver errors) are
// absl::Status, never checks. Thread-safety: safe from any thread.
#ifndef FRAGFREE_ALLOCATOR_BASE_CHECK_H_
#define FRAGFREE_ALLOCATOR_BASE_CHECK_H_

namespace fragfree::internal {
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const char* message);
}  // namespace fragfree::internal

#define FF_CHECK(cond, message)                                              \
  do {                                                                       \
    if (__builtin_expect(!(cond), 0))                                        \
      ::fragfree::internal::CheckFailed(__FILE__, __LINE__, #cond, message); \
  } while (0)

#ifndef NDEBUG
#define FF_DCHECK(cond, message) FF_CHECK(cond, message)
#else
#define FF_DCHECK(cond, message) \
  do {                           \
  } while (0 && (cond))
#endif

#endif  // FRAGFREE_ALLOCATOR_BASE_CHECK_H_
