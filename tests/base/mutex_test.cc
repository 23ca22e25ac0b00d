// Tests of the engine's lock (allocator/base/mutex.h): mutual exclusion, and
// every waiter woken, under contention that makes waiters spin and sleep,
// with the process-wide barrier (where the kernel grants it) and with the
// backstop alone (as where it is refused), and across fork. A missed wake in
// the first mode hangs a waiter: the watchdog turns that into a failure.
#include "allocator/base/mutex.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#ifndef FF_MUTEX_IS_STD_MUTEX
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace fragfree {
namespace {

struct Shared {
  Mutex mu;
  uint64_t count ABSL_GUARDED_BY(mu) = 0;  // not atomic: the lock guards it
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
};

// `threads` threads each take the lock `rounds` times; every `hold_every`-th
// time the holder keeps it for `hold` (so that waiters pass their spin and
// sleep). A thread not finished after two minutes was never woken: the
// process exits with a message (the threads cannot be joined).
void Contend(Shared* shared, int threads, int rounds, int hold_every,
             std::chrono::microseconds hold) {
  std::vector<std::thread> workers;
  std::atomic<int> done{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        MutexLock lock(&shared->mu);
        if (shared->inside.fetch_add(1) != 0) shared->overlaps.fetch_add(1);
        ++shared->count;
        if ((r + t) % hold_every == 0) std::this_thread::sleep_for(hold);
        shared->inside.fetch_sub(1);
      }
      done.fetch_add(1);
    });
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (done.load() != threads) {
    if (std::chrono::steady_clock::now() > deadline) {
      fprintf(stderr, "Mutex: %d of %d threads finished by the deadline\n",
              done.load(), threads);
      fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (std::thread& w : workers) w.join();
}

class MutexTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { ForceMutexBackstopForTesting(GetParam()); }
  void TearDown() override { ForceMutexBackstopForTesting(false); }
};

// Short critical sections, many threads: mostly spinning waiters.
TEST_P(MutexTest, ExcludesUnderShortCriticalSections) {
  Shared shared;
  constexpr int kThreads = 8, kRounds = 50000;
  Contend(&shared, kThreads, kRounds, 1 << 30, std::chrono::microseconds(0));
  MutexLock lock(&shared.mu);
  EXPECT_EQ(shared.count, uint64_t{kThreads} * kRounds);
  EXPECT_EQ(shared.overlaps.load(), 0);
}

// Holders that keep the lock for 200 us now and then: waiters go to sleep and
// every one of them must be woken (or, with the backstop, look again).
TEST_P(MutexTest, WakesEverySleepingWaiter) {
  Shared shared;
  constexpr int kThreads = 6, kRounds = 4000;
  Contend(&shared, kThreads, kRounds, 97, std::chrono::microseconds(200));
  MutexLock lock(&shared.mu);
  EXPECT_EQ(shared.count, uint64_t{kThreads} * kRounds);
  EXPECT_EQ(shared.overlaps.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Sleep, MutexTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "BackstopOnly" : "Barrier";
                         });

// The sleep is exact where the machine grants membarrier (Linux 4.14 and
// later, outside sandboxes that refuse it; printed, not asserted), and never
// while the backstop is forced (but in the std::mutex build, which has none).
TEST(Mutex, SleepIsExactOnlyWithTheBarrier) {
  printf("membarrier: %s\n", MutexSleepIsExact() ? "granted" : "refused");
  ForceMutexBackstopForTesting(true);
#ifndef FF_MUTEX_IS_STD_MUTEX
  EXPECT_FALSE(MutexSleepIsExact());
#endif
  ForceMutexBackstopForTesting(false);
}

#ifndef FF_MUTEX_IS_STD_MUTEX
// A fork taken while a thread sleeps on the lock (as the metadata arena's
// prepare handler holds its lock while other threads may wait on it): the
// child forgets that sleeper, so its unlocks wake no one, and the lock works
// there; the parent's sleeper is woken by the parent's unlock.
TEST(Mutex, AForkChildForgetsTheParentsSleepers) {
  Mutex mu;
  mu.Lock();
  std::thread sleeper([&] { MutexLock lock(&mu); });
  while (mu.sleepers_for_testing() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    mu.UnlockInForkChild();
    const bool forgotten = mu.sleepers_for_testing() == 0;
    mu.Lock();
    mu.Unlock();
    _exit(forgotten ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  mu.Unlock();
  sleeper.join();
  EXPECT_EQ(mu.sleepers_for_testing(), 0u);
}
#endif

}  // namespace
}  // namespace fragfree
