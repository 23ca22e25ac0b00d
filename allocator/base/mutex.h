// Mutex: the engine's lock. One futex word (0 unlocked, 1 locked, 2 locked
// with possible waiters; an unlock that finds 2 wakes one sleeper), wrapped so
// that clang's thread-safety analysis checks it like absl::Mutex
// (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED). Uncontended, a lock is one
// compare-exchange and an unlock one exchange, inline: std::mutex goes through
// pthread_mutex_lock/unlock (~110 instructions a lock and unlock under
// callgrind, Note [Hot path] in docs/design.md). absl::Mutex is not used on the
// hot path because abseil builds with deadlock detection pay a graph lookup on
// every acquire. Under ThreadSanitizer it is a std::mutex, whose lock TSan
// intercepts (lock-order and double-lock reports).
// Thread-safety: it is the synchronisation primitive.
#ifndef FRAGFREE_ALLOCATOR_BASE_MUTEX_H_
#define FRAGFREE_ALLOCATOR_BASE_MUTEX_H_

#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"

#if defined(__SANITIZE_THREAD__)
#define FF_MUTEX_IS_STD_MUTEX 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FF_MUTEX_IS_STD_MUTEX 1
#endif
#endif

#ifdef FF_MUTEX_IS_STD_MUTEX
#include <mutex>
#else
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#endif

namespace fragfree {

#ifdef FF_MUTEX_IS_STD_MUTEX

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the thread-safety analysis that the caller holds this lock (for a
  // lambda that a function holding it passes on); checks nothing at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::mutex mu_;
};

#else

class ABSL_LOCKABLE Mutex {
 public:
  constexpr Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    uint32_t expected = kUnlocked;
    if (ABSL_PREDICT_FALSE(!word_.compare_exchange_strong(
            expected, kLocked, std::memory_order_acquire,
            std::memory_order_relaxed))) {
      LockSlow();
    }
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (ABSL_PREDICT_FALSE(
            word_.exchange(kUnlocked, std::memory_order_release) ==
            kContended)) {
      Wake();
    }
  }
  // Tells the thread-safety analysis that the caller holds this lock (for a
  // lambda that a function holding it passes on); checks nothing at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  static constexpr uint32_t kUnlocked = 0;
  static constexpr uint32_t kLocked = 1;
  static constexpr uint32_t kContended = 2;  // locked; a waiter may sleep

  // Marks the word contended and sleeps until an unlock finds it so; a thread
  // that takes the lock here leaves it contended (at worst one spare wake).
  ABSL_ATTRIBUTE_NOINLINE void LockSlow() {
    while (word_.exchange(kContended, std::memory_order_acquire) != kUnlocked) {
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_),
              FUTEX_WAIT_PRIVATE, kContended, nullptr, nullptr, 0);
    }
  }
  ABSL_ATTRIBUTE_NOINLINE void Wake() {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE,
            1, nullptr, nullptr, 0);
  }

  std::atomic<uint32_t> word_{kUnlocked};
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                std::atomic<uint32_t>::is_always_lock_free);
};

#endif  // FF_MUTEX_IS_STD_MUTEX

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_MUTEX_H_
