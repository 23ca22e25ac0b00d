// Mutex: the engine's lock. A std::mutex (one uncontended futex word) wrapped
// so that clang's thread-safety analysis checks it like absl::Mutex
// (ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED). absl::Mutex is not used on
// the hot path because abseil builds with deadlock detection pay a graph lookup
// on every acquire. Thread-safety: it is the synchronisation primitive.
#ifndef FRAGFREE_ALLOCATOR_BASE_MUTEX_H_
#define FRAGFREE_ALLOCATOR_BASE_MUTEX_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace fragfree {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

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
