// MmapArena, the metadata arena's fallback (allocator/base/mmap_arena.h), on
// private instances: size classes, many sizes and alignments, reuse, own
// mappings, counters, threads, and (under AddressSanitizer) poisoning.
// Thread-safety: the threaded tests share one arena between threads.
#include "allocator/base/mmap_arena.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FF_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(FF_TEST_ASAN)
#define FF_TEST_ASAN 1
#endif
#ifdef FF_TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace fragfree {
namespace {

// A private arena, unmapped at the end of the test.
class Arena {
 public:
  ~Arena() { arena_.ReleaseAll(); }
  MmapArena* operator->() { return &arena_; }
  MmapArena& operator*() { return arena_; }

 private:
  MmapArena arena_;
};

TEST(MmapArenaTest, SizeClassesCoverEverySizeWithBoundedRounding) {
  size_t previous = 0;
  for (int c = 0; c < MmapArena::kNumClasses; ++c) {
    const size_t size = MmapArena::ClassSize(c);
    EXPECT_GT(size, previous) << c;
    EXPECT_EQ(size % MmapArena::kMinAlign, 0u) << c;
    previous = size;
  }
  EXPECT_EQ(MmapArena::ClassSize(MmapArena::kNumClasses - 1),
            MmapArena::kMaxSmall);
  for (size_t size = 0; size <= MmapArena::kMaxSmall; ++size) {
    const int c = MmapArena::ClassOf(size, 16);
    ASSERT_GE(c, 0) << size;
    const size_t class_size = MmapArena::ClassSize(c);
    ASSERT_GE(class_size, size) << size;
    // The smallest class that holds it, and at most 25% (or 16 bytes) more.
    ASSERT_TRUE(c == 0 || MmapArena::ClassSize(c - 1) < size) << size;
    ASSERT_LE(class_size, std::max(size + 16, size + size / 4)) << size;
  }
  EXPECT_EQ(MmapArena::ClassOf(MmapArena::kMaxSmall + 1, 16), -1);
  EXPECT_EQ(MmapArena::ClassOf(100, 8192), -1);  // more than a page: own
  // An aligned request gets a class whose size is a multiple of it.
  for (size_t align : {32, 64, 128, 256, 1024, 4096}) {
    for (size_t size : {1, 100, 1000, 5000}) {
      const int c = MmapArena::ClassOf(size, align);
      ASSERT_GE(c, 0) << size << " " << align;
      EXPECT_EQ(MmapArena::ClassSize(c) % align, 0u) << size << " " << align;
      EXPECT_GE(MmapArena::ClassSize(c), size);
    }
  }
}

TEST(MmapArenaTest, ManySizesAndAlignmentsNeverOverlap) {
  Arena arena;
  struct Held {
    char* p;
    size_t size;
    size_t align;
    unsigned char fill;
  };
  std::vector<Held> held;
  std::mt19937 rng(7);
  const size_t aligns[] = {1, 8, 16, 32, 64, 256, 4096, 8192, size_t{2} << 20};
  for (int i = 0; i < 4000; ++i) {
    size_t size = rng() % 3 == 0 ? rng() % 100000 : rng() % 600;
    const size_t align = aligns[rng() % std::size(aligns)];
    if (align > 4096 && rng() % 8 != 0) continue;  // a few big alignments
    char* p = static_cast<char*>(arena->Allocate(size, align));
    ASSERT_NE(p, nullptr) << size << " " << align;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % std::max<size_t>(align, 16), 0u)
        << size << " " << align;
    const unsigned char fill = static_cast<unsigned char>(i);
    memset(p, fill, size);
    held.push_back({p, size, align, fill});
    if (rng() % 3 == 0) {  // free a random one, after checking its contents
      const size_t k = rng() % held.size();
      const Held h = held[k];
      for (size_t j = 0; j < h.size; j += 61) {
        ASSERT_EQ(static_cast<unsigned char>(h.p[j]), h.fill);
      }
      arena->Deallocate(h.p, h.size, h.align);
      held[k] = held.back();
      held.pop_back();
    }
  }
  // Nothing overwrote anything: every block still holds its pattern.
  std::map<uintptr_t, size_t> ranges;
  for (const Held& h : held) {
    for (size_t j = 0; j < h.size; ++j) {
      ASSERT_EQ(static_cast<unsigned char>(h.p[j]), h.fill);
    }
    ranges[reinterpret_cast<uintptr_t>(h.p)] = std::max<size_t>(h.size, 1);
  }
  uintptr_t end = 0;
  for (auto [begin, size] : ranges) {
    EXPECT_GE(begin, end);
    end = begin + size;
  }
  for (const Held& h : held) arena->Deallocate(h.p, h.size, h.align);
}

TEST(MmapArenaTest, FreedMemoryIsReused) {
  Arena arena;
  // The last freed object of a class is the next one handed out.
  void* a = arena->Allocate(100);
  void* b = arena->Allocate(100);
  arena->Deallocate(a, 100);
  EXPECT_EQ(arena->Allocate(100), a);
  arena->Deallocate(b, 100);
  EXPECT_EQ(arena->Allocate(112), b);  // same class (112)
  arena->Deallocate(a, 100);
  arena->Deallocate(b, 112);
  // A steady churn maps nothing more once warm.
  std::vector<void*> ptrs;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < 5000; ++i) ptrs.push_back(arena->Allocate(i % 3000));
    for (size_t i = 0; i < ptrs.size(); ++i)
      arena->Deallocate(ptrs[i], i % 3000);
    ptrs.clear();
  }
  const size_t mapped = arena->mapped_bytes();
  const size_t chunks = arena->chunks();
  for (size_t i = 0; i < 5000; ++i) ptrs.push_back(arena->Allocate(i % 3000));
  for (size_t i = 0; i < ptrs.size(); ++i) arena->Deallocate(ptrs[i], i % 3000);
  EXPECT_EQ(arena->mapped_bytes(), mapped);
  EXPECT_EQ(arena->chunks(), chunks);
  EXPECT_EQ(mapped, chunks * MmapArena::kChunkBytes);
}

TEST(MmapArenaTest, LargeRequestsHaveMappingsOfTheirOwn) {
  Arena arena;
  const size_t before = arena->mapped_bytes();
  void* p = arena->Allocate(100000);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(arena->Owns(p));
  EXPECT_EQ(arena->mapped_bytes() - before, size_t{100} << 10);  // 25 pages
  memset(p, 1, 100000);
  void* huge = arena->Allocate(size_t{3} << 20, size_t{2} << 20);
  ASSERT_NE(huge, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(huge) % (size_t{2} << 20), 0u);
  memset(huge, 2, size_t{3} << 20);
  arena->Deallocate(p, 100000);
  arena->Deallocate(huge, size_t{3} << 20, size_t{2} << 20);
  EXPECT_EQ(arena->mapped_bytes(), before);
  EXPECT_EQ(arena->Allocate(size_t{1} << 62), nullptr);
  EXPECT_EQ(arena->Allocate(SIZE_MAX - 10), nullptr);
}

TEST(MmapArenaTest, SmallRequestsLieInChunks) {
  Arena arena;
  EXPECT_EQ(arena->chunks(), 0u);
  void* p = arena->Allocate(0);  // a minimal block
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(arena->Owns(p));
  EXPECT_EQ(arena->chunks(), 1u);
  int local = 0;
  EXPECT_FALSE(arena->Owns(&local));
  arena->Deallocate(p, 0);
}

TEST(MmapArenaTest, ThreadsShareOneArena) {
  Arena arena;
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  // Each thread frees half of what it allocates to the next thread's queue,
  // so memory moves between threads.
  constexpr int kThreads = 6;
  std::vector<std::vector<std::pair<char*, size_t>>> handoff(kThreads);
  std::vector<std::mutex> handoff_mu(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng{unsigned(t)};
      std::vector<std::pair<char*, size_t>> mine;
      for (int i = 0; i < 20000; ++i) {
        const size_t size = rng() % 4 == 0 ? rng() % 40000 : rng() % 300;
        char* p = static_cast<char*>((*arena).Allocate(size));
        if (p == nullptr) {
          ++errors;
          continue;
        }
        memset(p, t + 1, size);
        mine.emplace_back(p, size);
        if (mine.size() > 64) {
          auto [q, n] = mine.front();
          mine.erase(mine.begin());
          for (size_t j = 0; j < n; j += 97) {
            if (q[j] != char(t + 1)) ++errors;
          }
          const int to = (t + 1) % kThreads;
          std::lock_guard<std::mutex> lock(handoff_mu[to]);
          handoff[to].emplace_back(q, n);
        }
        std::vector<std::pair<char*, size_t>> theirs;
        {
          std::lock_guard<std::mutex> lock(handoff_mu[t]);
          theirs.swap(handoff[t]);
        }
        for (auto [q, n] : theirs) (*arena).Deallocate(q, n);
      }
      for (auto [q, n] : mine) (*arena).Deallocate(q, n);
    });
  }
  for (auto& th : threads) th.join();
  for (auto& list : handoff) {
    for (auto [q, n] : list) (*arena).Deallocate(q, n);
  }
  EXPECT_EQ(errors.load(), 0);
}

#ifdef FF_TEST_ASAN
TEST(MmapArenaTest, FreeAndUncarvedMemoryIsPoisoned) {
  Arena arena;
  char* p = static_cast<char*>(arena->Allocate(40));
  EXPECT_FALSE(__asan_address_is_poisoned(p));
  EXPECT_FALSE(__asan_address_is_poisoned(p + 39));
  EXPECT_TRUE(__asan_address_is_poisoned(p + 40));  // the class's tail (48)
  EXPECT_TRUE(__asan_address_is_poisoned(p + 48));  // not carved yet
  arena->Deallocate(p, 40);
  EXPECT_TRUE(__asan_address_is_poisoned(p + 8));
  EXPECT_TRUE(__asan_address_is_poisoned(p + 39));
}
#endif

}  // namespace
}  // namespace fragfree
