// MetadataArena and MetadataAllocator: built twice. metadata_arena_test has
// libff_jemalloc.so linked (FF_EXPECT_JEMALLOC) and checks that
// metadata really comes from the private arena, not from the program's
// malloc; metadata_fallback_test runs with FRAGFREE_JEMALLOC=0
// (FF_EXPECT_FALLBACK) and checks the same of fragfree's mmap arena. Without
// FRAGFREE_WITH_JEMALLOC both check the mmap arena.
// Thread-safety: the threaded tests use the arena from several threads, and
// fork while they do.
#include "allocator/base/metadata_arena.h"

#include <dlfcn.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace fragfree {
namespace {

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FF_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__) && !defined(FF_TEST_TSAN)
#define FF_TEST_TSAN 1
#endif

#if defined(FF_EXPECT_JEMALLOC) && !defined(FF_EXPECT_FALLBACK)
constexpr bool kExpectJemalloc = true;
#else
constexpr bool kExpectJemalloc = false;
#endif

TEST(MetadataArenaTest, BackendIsTheExpectedOne) {
  MetadataArenaInfo info = MetadataArena::Info();
  EXPECT_EQ(info.jemalloc, kExpectJemalloc)
      << info.backend << " / " << info.why_not;
  if (kExpectJemalloc) {
    EXPECT_NE(info.backend.find("jemalloc 5."), std::string::npos)
        << info.backend;
    EXPECT_TRUE(info.why_not.empty());
    ASSERT_NE(MetadataArena::jemalloc(), nullptr);
  } else {
    EXPECT_EQ(info.backend, "fragfree mmap arena");
    EXPECT_FALSE(info.why_not.empty());
    EXPECT_EQ(MetadataArena::jemalloc(), nullptr);
  }
#ifdef FF_EXPECT_FALLBACK
  // Turned off by the environment, or not built at all.
  EXPECT_TRUE(info.why_not.find("FRAGFREE_JEMALLOC=0") != std::string::npos ||
              info.why_not.find("FRAGFREE_WITH_JEMALLOC=OFF") !=
                  std::string::npos)
      << info.why_not;
#endif
}

TEST(MetadataArenaTest, AllocationsComeFromThePrivateArena) {
  std::vector<std::pair<void*, size_t>> blocks;
  for (size_t size :
       {size_t{8}, size_t{100}, size_t{4096}, size_t{70000}, size_t{3} << 20}) {
    void* p = MetadataArena::Allocate(size);
    ASSERT_NE(p, nullptr);
    memset(p, 0xab, size);
    // On the mmap arena, sizes up to 64 KiB lie in its chunks; larger ones
    // have mappings of their own (not the program's heap either).
    EXPECT_EQ(MetadataArena::InPrivateArena(p),
              kExpectJemalloc || size <= (size_t{64} << 10))
        << size;
    blocks.emplace_back(p, size);
  }
  if (kExpectJemalloc) {
    // jemalloc knows these regions; its arena for them is the private one,
    // never arena 0 (jemalloc's automatic arena) nor glibc's heap.
    const ff_jemalloc_api_t* je = MetadataArena::jemalloc();
    for (auto [p, size] : blocks) {
      EXPECT_EQ(je->arena_of(p), MetadataArena::Info().arena);
      EXPECT_GE(je->usable_size(p), size);
    }
    EXPECT_NE(MetadataArena::Info().arena, 0u);
    // The companion's options are in force: never sbrk (the program's heap),
    // no automatic thread caches.
    const char* dss = nullptr;
    size_t len = sizeof(dss);
    ASSERT_EQ(je->mallctl("opt.dss", &dss, &len, nullptr, 0), 0);
    EXPECT_STREQ(dss, "disabled");
    bool tcache = true;
    len = sizeof(tcache);
    ASSERT_EQ(je->mallctl("opt.tcache", &tcache, &len, nullptr, 0), 0);
    EXPECT_FALSE(tcache);
  }
  for (auto [p, size] : blocks) MetadataArena::Deallocate(p, size);
}

TEST(MetadataArenaTest, ProgramMallocIsStillTheCLibrarys) {
  // The private jemalloc defines no malloc: the program's malloc, free and
  // operator new resolve to glibc / libstdc++, never to fragfree's copy.
  for (const char* name : {"malloc", "free", "calloc", "realloc", "_Znwm"}) {
    void* sym = dlsym(RTLD_DEFAULT, name);
    ASSERT_NE(sym, nullptr) << name;
    Dl_info info;
    ASSERT_NE(dladdr(sym, &info), 0) << name;
    std::string lib = info.dli_fname;
    EXPECT_EQ(lib.find("fragfree"), std::string::npos) << name << " in " << lib;
    EXPECT_EQ(lib.find("jemalloc"), std::string::npos) << name << " in " << lib;
  }
  // And glibc's allocator still serves the program (malloc_usable_size is
  // glibc's, and answers for its own blocks).
  void* p = malloc(100);
  EXPECT_GE(malloc_usable_size(p), 100u);
  free(p);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "ffje_malloc"), nullptr);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "mallocx"), nullptr);
}

TEST(MetadataArenaTest, CountersFollowLiveBytes) {
  MetadataArenaInfo before = MetadataArena::Info();
  void* p = MetadataArena::Allocate(1000);
  void* q = MetadataArena::Allocate(24);
  MetadataArenaInfo during = MetadataArena::Info();
  EXPECT_EQ(during.live_bytes - before.live_bytes, 1024);
  EXPECT_EQ(during.live_allocations - before.live_allocations, 2);
  EXPECT_EQ(during.total_allocations - before.total_allocations, 2);
  MetadataArena::Deallocate(p, 1000);
  MetadataArena::Deallocate(q, 24);
  EXPECT_EQ(MetadataArena::Info().live_bytes, before.live_bytes);
}

TEST(MetadataArenaTest, AlignmentIsHonoured) {
  for (size_t align : {size_t{64}, size_t{256}, size_t{4096}}) {
    void* p = MetadataArena::Allocate(100, align);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << align;
    MetadataArena::Deallocate(p, 100, align);
  }
  struct alignas(128) Wide {
    char c[3];
  };
  MetadataVector<Wide> v(5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 128, 0u);
}

TEST(MetadataArenaTest, ContainersUseTheArena) {
  MetadataArenaInfo before = MetadataArena::Info();
  MetadataMap<int, std::string> map;
  MetadataSet<int> set;
  MetadataVector<int> vec;
  for (int i = 0; i < 1000; ++i) {
    map.emplace(i, "x");
    set.insert(i);
    vec.push_back(i);
  }
  MetadataArenaInfo during = MetadataArena::Info();
  EXPECT_GE(during.live_allocations - before.live_allocations, 2000);
  EXPECT_TRUE(MetadataArena::InPrivateArena(&*set.begin()));
  EXPECT_TRUE(MetadataArena::InPrivateArena(&*map.begin()));
  if (kExpectJemalloc) {
    EXPECT_TRUE(MetadataArena::InPrivateArena(vec.data()));
  }
  EXPECT_EQ(map.size(), 1000u);
  map.clear();
  set.clear();
  vec = MetadataVector<int>();
  EXPECT_EQ(MetadataArena::Info().live_bytes, before.live_bytes);
}

TEST(MetadataArenaTest, NewAndDeleteObjects) {
  struct Node {
    explicit Node(int v) : value(v) {}
    int value;
    MetadataVector<int> children;
  };
  Node* n = MetadataNew<Node>(7);
  n->children.assign(100, 1);
  EXPECT_EQ(n->value, 7);
  MetadataDelete(n);
  MetadataDelete<Node>(nullptr);
}

TEST(MetadataArenaTest, ManyThreads) {
  MetadataArenaInfo before = MetadataArena::Info();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t] {
      MetadataVector<void*> mine;
      for (int i = 0; i < 5000; ++i) {
        size_t size = size_t(16 + (i * 7 + t) % 2000);
        void* p = MetadataArena::Allocate(size);
        ASSERT_NE(p, nullptr);
        memset(p, t, size);
        MetadataArena::Deallocate(p, size);
        mine.push_back(nullptr);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(MetadataArena::Info().live_bytes, before.live_bytes);
}

TEST(MetadataArenaTest, FreedOnAnotherThread) {
  // Each thread has its own jemalloc cache: memory moves between them.
  MetadataArenaInfo before = MetadataArena::Info();
  std::vector<void*> blocks(10000);
  std::thread producer([&] {
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i] = MetadataArena::Allocate(48 + i % 200);
    }
  });
  producer.join();
  std::thread consumer([&] {
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_TRUE(MetadataArena::InPrivateArena(blocks[i]));
      MetadataArena::Deallocate(blocks[i], 48 + i % 200);
    }
  });
  consumer.join();
  // Threads come and go (each creates and destroys a cache).
  for (int round = 0; round < 50; ++round) {
    std::thread([] {
      MetadataVector<int> v(100, 1);
      EXPECT_EQ(v[99], 1);
    }).join();
  }
  EXPECT_EQ(MetadataArena::Info().live_bytes, before.live_bytes);
}

TEST(MetadataArenaTest, AllocatorOutOfMemoryThrows) {
  MetadataAllocator<int> a;
  EXPECT_THROW(a.allocate(std::numeric_limits<size_t>::max() / 2),
               std::bad_array_new_length);
  EXPECT_EQ(MetadataArena::Allocate(size_t{1} << 62), nullptr);
}

TEST(MetadataArenaTest, ObjectsAndUniquePointers) {
  const MetadataArenaInfo before = MetadataArena::Info();
  struct Widget : MetadataObject {
    explicit Widget(int v) : value(v) {}
    virtual ~Widget() = default;
    int value;
  };
  struct alignas(128) WideWidget : Widget {
    WideWidget() : Widget(2) {}
    char pad[200] = {};
  };
  {
    std::unique_ptr<Widget> plain = std::make_unique<Widget>(1);
    std::unique_ptr<Widget> wide = std::make_unique<WideWidget>();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(wide.get()) % 128, 0u);
    EXPECT_TRUE(MetadataArena::InPrivateArena(plain.get()));
    EXPECT_TRUE(MetadataArena::InPrivateArena(wide.get()));
    MetadataUniquePtr<MetadataVector<int>> v =
        MakeMetadataUnique<MetadataVector<int>>(10, 3);
    EXPECT_EQ(sizeof(v), sizeof(void*));
    EXPECT_EQ((*v)[9], 3);
    EXPECT_EQ(MetadataArena::Info().live_allocations - before.live_allocations,
              4);
  }
  const MetadataArenaInfo after = MetadataArena::Info();
  EXPECT_EQ(after.live_allocations, before.live_allocations);
  EXPECT_EQ(after.live_bytes, before.live_bytes);
}

// A fork while other threads allocate and free metadata: the backend's locks
// are held across fork(), so the child never inherits one held and can use the
// arena (a deadlock would hit the alarm and fail the child).
TEST(MetadataArenaTest, ForkWhileOtherThreadsAllocate) {
#ifdef FF_TEST_TSAN
  if (kExpectJemalloc) {
    // jemalloc's fork handler takes all of its (hundreds of) locks, more than
    // TSan's deadlock detector can hold at once (64): TSan aborts.
    GTEST_SKIP() << "jemalloc's fork handler under ThreadSanitizer";
  }
#endif
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 3; ++t) {
    busy.emplace_back([&stop, t] {
      MetadataVector<void*> held;
      for (size_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const size_t size = 16 + (i * 37 + size_t(t)) % 5000;
        void* p = MetadataArena::Allocate(size);
        if (p != nullptr) MetadataArena::Deallocate(p, size);
        MetadataMap<int, int> m;
        for (int k = 0; k < 8; ++k) m[k] = k;
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    pid_t pid = fork();
    ASSERT_NE(pid, -1);
    if (pid == 0) {
      alarm(20);
      int rc = 0;
      for (size_t size : {size_t{24}, size_t{3000}, size_t{100000}}) {
        void* p = MetadataArena::Allocate(size);
        if (p == nullptr) rc = 1;
        if (p != nullptr) memset(p, 1, size);
        MetadataArena::Deallocate(p, size);
      }
      MetadataVector<int> v(1000, 7);
      if (v[999] != 7) rc = 2;
      _exit(rc);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "fork child " << i << ": status " << status;
  }
  stop.store(true);
  for (auto& t : busy) t.join();
}

}  // namespace
}  // namespace fragfree
