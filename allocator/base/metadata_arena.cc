// MetadataArena: fragfree's metadata lives on its own mmap arena
// (base/mmap_arena.h) in every load mode: LD_PRELOAD, dlopen (ctypes, torch's
// CUDAPluggableAllocator, the native adapter), and programs linking fragfree.
// The private-jemalloc companion (libff_jemalloc.so) that could serve it when
// loaded at process start was removed: the mmap arena is cheaper per
// allocation + free pair and works everywhere (docs/host.md, "Why the mmap
// arena, and no jemalloc"). Nothing here uses the program's heap.
// Thread-safety: the mmap arena has its own lock; counters are relaxed
// atomics.
#include "allocator/base/metadata_arena.h"

#include <pthread.h>

#include <atomic>

#include "allocator/base/mmap_arena.h"

namespace fragfree {
namespace {

inline constexpr const char kMmapBackend[] = "fragfree mmap arena";
// MetadataArenaInfo::why_not: the one reason, kept non-empty so that readers
// of "metadata_why_not_jemalloc" (ff_host_stats_json) see why.
inline constexpr const char kWhyNotJemalloc[] =
    "fragfree keeps metadata on its own mmap arena in every load mode (no "
    "jemalloc companion; FRAGFREE_WITH_JEMALLOC=OFF since it was removed, "
    "docs/host.md)";

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> live_allocations{0};
std::atomic<int64_t> total_allocations{0};

// Constant-initialized and never destroyed: usable from any constructor or
// destructor, in any order.
constinit MmapArena mmap_arena;

// The mmap arena's lock is held across fork(), so that a child never inherits
// it held. Registered when the library (or program) is loaded, by a
// constructor that runs before fragfree's other constructors (priority 101),
// so before any handler of a layer above: prepare handlers run in reverse
// order of registration, so this lock is taken last, after the locks of
// layers that allocate metadata while holding them (docs/host.md, "Threads
// and fork").
__attribute__((constructor(101))) void RegisterMmapArenaForkHandlers() {
  pthread_atfork([] { mmap_arena.LockForFork(); },
                 [] { mmap_arena.UnlockAfterFork(); },
                 [] { mmap_arena.UnlockInForkChild(); });
}

}  // namespace

void MetadataArena::Initialize() {}

void* MetadataArena::Allocate(size_t size, size_t alignment) noexcept {
  void* p = mmap_arena.Allocate(size, alignment);
  if (p != nullptr) {
    live_bytes.fetch_add(int64_t(size), std::memory_order_relaxed);
    live_allocations.fetch_add(1, std::memory_order_relaxed);
    total_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  return p;
}

void MetadataArena::Deallocate(void* ptr, size_t size,
                               size_t alignment) noexcept {
  if (ptr == nullptr) return;
  live_bytes.fetch_sub(int64_t(size), std::memory_order_relaxed);
  live_allocations.fetch_sub(1, std::memory_order_relaxed);
  mmap_arena.Deallocate(ptr, size, alignment);
}

MetadataArenaInfo MetadataArena::Info() {
  MetadataArenaInfo info;
  info.jemalloc = false;
  info.arena = 0;
  info.backend = kMmapBackend;
  info.why_not = kWhyNotJemalloc;
  info.live_bytes = live_bytes.load(std::memory_order_relaxed);
  info.live_allocations = live_allocations.load(std::memory_order_relaxed);
  info.total_allocations = total_allocations.load(std::memory_order_relaxed);
  info.mapped_bytes = int64_t(mmap_arena.mapped_bytes());
  return info;
}

bool MetadataArena::InPrivateArena(const void* ptr) {
  return ptr != nullptr && mmap_arena.Owns(ptr);
}

// Always nullptr: there is no jemalloc any more (kept for the header's
// declaration until its callers drop it).
const ff_jemalloc_api_t* MetadataArena::jemalloc() { return nullptr; }

}  // namespace fragfree
