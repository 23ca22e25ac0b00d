// Mutex: the engine's lock, wrapped so that clang's thread-safety analysis
// checks it like absl::Mutex (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED).
// A lock word (0 unlocked, 1 locked) and a count of sleeping waiters, both in
// one cache line. Uncontended, a lock is one compare-exchange and an unlock a
// plain store and a load, inline (Note [Lock] in docs/design.md): std::mutex
// goes through pthread_mutex_lock/unlock (~110 instructions a lock and unlock
// under callgrind), and an unlock by exchange waits for every store of the
// critical section to drain. A waiter spins briefly, then sleeps on the word
// (futex) after a process-wide barrier (membarrier) that makes the unlock's
// plain store and load safe; the slow paths are in mutex.cc. absl::Mutex is
// not used on the hot path because abseil builds with deadlock detection pay a
// graph lookup on every acquire. Under ThreadSanitizer it is a std::mutex,
// whose lock TSan intercepts (lock-order and double-lock reports).
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
#include <atomic>
#include <cstdint>
#endif

namespace fragfree {

#ifdef FF_MUTEX_IS_STD_MUTEX

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void UnlockInForkChild() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
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
    if (ABSL_PREDICT_FALSE(!TryLock())) LockSlow();
  }
  // A plain store, then a look at the sleeper count: no locked instruction, so
  // the unlock does not wait for the critical section's stores to drain. The
  // CPU may still read `sleepers_` before the store is seen; a waiter covers
  // that window with a process-wide barrier before it sleeps (Note [Lock] in
  // docs/design.md). The signal fence keeps the compiler from swapping them.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    word_.store(kUnlocked, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (ABSL_PREDICT_FALSE(sleepers_.load(std::memory_order_relaxed) != 0)) {
      Wake();
    }
  }
  // Unlock in the child of a fork taken while holding the lock (a
  // pthread_atfork child handler): the child's only thread, so the parent's
  // sleepers are forgotten rather than woken at every unlock.
  void UnlockInForkChild() ABSL_UNLOCK_FUNCTION() {
    sleepers_.store(0, std::memory_order_relaxed);
    word_.store(kUnlocked, std::memory_order_release);
  }
  // Tells the thread-safety analysis that the caller holds this lock (for a
  // lambda that a function holding it passes on); checks nothing at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  // For tests: threads counted in the sleep step now.
  uint32_t sleepers_for_testing() const {
    return sleepers_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr uint32_t kUnlocked = 0;
  static constexpr uint32_t kLocked = 1;

  bool TryLock() {
    uint32_t expected = kUnlocked;
    return word_.compare_exchange_strong(expected, kLocked,
                                         std::memory_order_acquire,
                                         std::memory_order_relaxed);
  }
  // Spins a little, then sleeps on the word until an unlock wakes it
  // (mutex.cc).
  ABSL_ATTRIBUTE_NOINLINE void LockSlow();
  ABSL_ATTRIBUTE_NOINLINE void Wake();

  std::atomic<uint32_t> word_{kUnlocked};
  // Threads inside LockSlow's sleep step (counted before their barrier).
  std::atomic<uint32_t> sleepers_{0};
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                std::atomic<uint32_t>::is_always_lock_free);
};

#endif  // FF_MUTEX_IS_STD_MUTEX

// Whether a waiter's barrier (membarrier's private expedited command) works in
// this process (always true in the std::mutex build): false where the kernel
// or a sandbox refuses it, and then a sleeping waiter looks at the lock again
// every kMutexBackstopUs at most.
bool MutexSleepIsExact();
inline constexpr int kMutexBackstopUs = 200;
// Registers the process for the waiters' barrier now rather than when a
// waiter first sleeps: the registration waits for the kernel's grace period
// (12-23 ms on the 2-vCPU host VM, mutex_bench's BM_SleepBarrier). Cheap after
// the first call. The engine calls it when a device's allocator is made.
void PrepareMutexSleep();
// For tests: every waiter sleeps with the backstop and without the barrier,
// as where membarrier is refused.
void ForceMutexBackstopForTesting(bool on);

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
