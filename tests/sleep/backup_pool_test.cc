// Backup and BackupPool (allocator/sleep/backup.h) on a copier that only
// counts: kept host chunks reused best fit, backups spanning chunks, failed
// pinning giving kept chunks back, and a started backup's teardown. No device
// memory is touched.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>

#include "absl/status/statusor.h"
#include "allocator/sleep/backup.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Hands out fake, distinct host addresses (nothing is touched) and counts what
// is outstanding; the k-th AllocateHost fails when asked.
class CountingCopier final : public BackupCopier {
 public:
  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (++calls_ == fail_at_) {
      return absl::ResourceExhaustedError("no pinned memory (test)");
    }
    next_ += bytes + (size_t{1} << 30);  // never adjacent
    live_bytes_ += bytes;
    ++live_;
    return reinterpret_cast<void*>(next_);
  }
  void FreeHost(void*, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    live_bytes_ -= bytes;
    --live_;
  }
  absl::StatusOr<uint64_t> CopyToHost(void*, uintptr_t, size_t) override {
    return ++ticket_;
  }
  absl::StatusOr<uint64_t> CopyToDevice(uintptr_t, const void*,
                                        size_t) override {
    return ++ticket_;
  }
  absl::Status WaitFor(uint64_t) override { return absl::OkStatus(); }
  bool copies_contents() const override { return true; }
  int host_threads() const override { return 3; }

  void FailAt(int k) { fail_at_ = k; }
  size_t live_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_bytes_;
  }
  int live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  int calls_ = 0, fail_at_ = 0, live_ = 0;
  size_t live_bytes_ = 0;
  uintptr_t next_ = uintptr_t{1} << 44;
  uint64_t ticket_ = 0;
};

// Reserves `total` bytes in requests of `each`; the pieces' sizes.
absl::StatusOr<size_t> ReserveAll(Backup& b, size_t total, size_t each) {
  size_t got = 0, pieces = 0;
  while (got < total) {
    absl::StatusOr<std::pair<char*, size_t>> r =
        b.Reserve(std::min(each, total - got));
    if (!r.ok()) return r.status();
    EXPECT_GT(r->second, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->first) % Backup::kAlign, 0u);
    got += r->second;
    ++pieces;
  }
  return pieces;
}

TEST(BackupPool, BestFitThenLargest) {
  CountingCopier copier;
  BackupPool pool(&copier);
  for (size_t mib : {64, 256, 128}) {
    pool.Put(
        {static_cast<char*>(*copier.AllocateHost(mib * kMiB)), mib * kMiB});
  }
  HostChunk c;
  ASSERT_TRUE(pool.Take(100 * kMiB, &c));
  EXPECT_EQ(c.size, 128 * kMiB);  // the smallest that holds it
  ASSERT_TRUE(pool.Take(900 * kMiB, &c));
  EXPECT_EQ(c.size, 256 * kMiB);  // none holds it: the largest
  EXPECT_EQ(pool.bytes(), 64 * kMiB);
  copier.FreeHost(nullptr, 128 * kMiB);
  copier.FreeHost(nullptr, 256 * kMiB);
  EXPECT_EQ(pool.Release(), 64 * kMiB);
  EXPECT_EQ(copier.live(), 0);
  EXPECT_FALSE(pool.Take(1, &c));
}

TEST(BackupPool, BackupSpansChunksReusesKeptOnesAndGrows) {
  CountingCopier copier;
  BackupPool pool(&copier);
  const size_t total = 600 * kMiB;  // 256 + 256 + 88 MiB chunks
  {
    Backup b(&copier, &pool, total);
    b.Start();
    absl::StatusOr<size_t> pieces = ReserveAll(b, total, 100 * kMiB);
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    EXPECT_EQ(*pieces, 7u);  // 100-MiB requests, cut at two chunk ends
    b.FinishReserving();
    EXPECT_EQ(b.host_bytes(), 600 * kMiB);
    EXPECT_EQ(b.new_bytes(), 600 * kMiB);
    b.GiveChunksTo(&pool);
  }
  EXPECT_EQ(pool.bytes(), 600 * kMiB);
  EXPECT_EQ(copier.live_bytes(), 600 * kMiB);
  const int calls = copier.calls();
  {  // The same again: nothing new.
    Backup b(&copier, &pool, total);
    ASSERT_TRUE(ReserveAll(b, total, 7 * kMiB).ok());
    b.FinishReserving();
    EXPECT_EQ(b.new_bytes(), 0u);
    EXPECT_EQ(pool.bytes(), 0u);
    b.GiveChunksTo(&pool);
  }
  EXPECT_EQ(copier.calls(), calls);
  {  // Larger: the kept 600 MiB, then new chunks for the rest.
    Backup b(&copier, &pool, 1000 * kMiB);
    ASSERT_TRUE(ReserveAll(b, 1000 * kMiB, 300 * kMiB).ok());
    b.FinishReserving();
    EXPECT_EQ(b.new_bytes(), 400 * kMiB);
    EXPECT_EQ(b.host_bytes(), 1000 * kMiB);
  }  // not kept: every chunk freed
  EXPECT_EQ(pool.bytes(), 0u);
  EXPECT_EQ(copier.live(), 0);
}

TEST(BackupPool, FailedPinningGivesKeptChunksBackAndFreesNewOnes) {
  for (int fail_at = 1; fail_at <= 4; ++fail_at) {
    CountingCopier copier;
    BackupPool pool(&copier);
    pool.Put({static_cast<char*>(*copier.AllocateHost(64 * kMiB)), 64 * kMiB});
    copier.FailAt(copier.calls() + fail_at);
    Backup b(&copier, &pool, 64 * kMiB + 900 * kMiB);  // 64 kept + 4 new
    b.Start();
    absl::StatusOr<size_t> r = ReserveAll(b, 964 * kMiB, 50 * kMiB);
    ASSERT_TRUE(absl::IsResourceExhausted(r.status())) << fail_at;
    b.Abandon();
    EXPECT_EQ(b.host_bytes(), 0u);
    EXPECT_EQ(pool.bytes(), 64 * kMiB) << fail_at;         // as it was
    EXPECT_EQ(copier.live_bytes(), 64 * kMiB) << fail_at;  // new ones freed
  }
}

TEST(BackupPool, DestroyingAStartedBackupFreesEverything) {
  CountingCopier copier;
  BackupPool pool(&copier);
  {
    Backup b(&copier, &pool, 2000 * kMiB);
    b.Start();
    ASSERT_TRUE(b.Reserve(kMiB).ok());  // helpers still pinning ahead
  }
  EXPECT_EQ(copier.live(), 0);
  EXPECT_EQ(pool.bytes(), 0u);
}

}  // namespace
}  // namespace fragfree
