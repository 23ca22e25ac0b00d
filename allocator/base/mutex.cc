// Mutex's slow paths (mutex.h): the waiter's spin and sleep, the unlock's
// wake, and the process-wide barrier a waiter takes before it sleeps (Note
// [Lock] in docs/design.md).
// Thread-safety: any thread; the barrier's registration state is one atomic
// (racing registrations agree on the answer).
#include "allocator/base/mutex.h"

#include <atomic>

#ifndef FF_MUTEX_IS_STD_MUTEX
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#endif

namespace fragfree {
namespace {

std::atomic<bool> g_force_backstop{false};

#ifndef FF_MUTEX_IS_STD_MUTEX

// How many times a waiter looks at the word, a pause apart, before it sleeps:
// a critical section of the engine's fast paths is well under a microsecond.
constexpr int kSpins = 128;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

enum BarrierState : int { kUnknown, kRegistered, kRefused };
std::atomic<int> g_barrier{kUnknown};

long Membarrier(int command) { return syscall(SYS_membarrier, command, 0, 0); }

bool RegisterBarrier() {
  const long commands = Membarrier(MEMBARRIER_CMD_QUERY);
  return commands >= 0 && (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
         Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

// Registers the process on first use (racing first uses agree).
BarrierState KnownBarrierState() {
  int state = g_barrier.load(std::memory_order_acquire);
  if (state == kUnknown) {
    state = RegisterBarrier() ? kRegistered : kRefused;
    g_barrier.store(state, std::memory_order_release);
  }
  return BarrierState(state);
}

// A full memory barrier on every CPU that runs a thread of this process, done
// before this returns true; false where the kernel or a sandbox refuses it.
bool ProcessWideBarrier() {
  if (g_force_backstop.load(std::memory_order_relaxed)) return false;
  if (KnownBarrierState() == kRefused) return false;
  if (Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return true;
  // A child of fork may find its process not registered.
  return errno == EPERM && RegisterBarrier() &&
         Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
}

#endif  // FF_MUTEX_IS_STD_MUTEX

}  // namespace

#ifndef FF_MUTEX_IS_STD_MUTEX

// The sleep step's invariant: a waiter counts itself in `sleepers_`, then runs
// the barrier, then sleeps only while the word still reads locked (the
// kernel's check in FUTEX_WAIT). An unlock stores 0 and then reads
// `sleepers_`; if that read missed this waiter's count, the unlock's store and
// read both ran before the barrier reached its CPU, so the store is visible
// to the kernel's check and the waiter does not sleep. Without the barrier a
// wake can be missed, so the sleep is bounded by the backstop.
void Mutex::LockSlow() {
  while (true) {
    for (int i = 0; i < kSpins; ++i) {
      if (word_.load(std::memory_order_relaxed) == kUnlocked && TryLock()) {
        return;
      }
      CpuRelax();
    }
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    const bool exact = ProcessWideBarrier();
    timespec backstop = {0, long{kMutexBackstopUs} * 1000};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAIT_PRIVATE,
            kLocked, exact ? nullptr : &backstop, nullptr, 0);
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    if (TryLock()) return;
  }
}

void Mutex::Wake() {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, 1,
          nullptr, nullptr, 0);
}

bool MutexSleepIsExact() { return ProcessWideBarrier(); }

void PrepareMutexSleep() { KnownBarrierState(); }

#else

bool MutexSleepIsExact() { return true; }
void PrepareMutexSleep() {}

#endif  // FF_MUTEX_IS_STD_MUTEX

void ForceMutexBackstopForTesting(bool on) {
  g_force_backstop.store(on, std::memory_order_relaxed);
}

}  // namespace fragfree
