// MmapArena (mmap_arena.h): size classes, runs carved from mmap'ed chunks,
// own mappings for large requests, and the sanitizer hooks.
// Thread-safety: see mmap_arena.h.
#include "allocator/base/mmap_arena.h"

#include <sys/mman.h>

#include <bit>
#include <cstdint>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FF_MMAP_ARENA_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(FF_MMAP_ARENA_ASAN)
#define FF_MMAP_ARENA_ASAN 1
#endif

#ifdef FF_MMAP_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/lsan_interface.h>
#endif

namespace fragfree {
namespace {

constexpr size_t kRunMin = size_t{64} << 10;
constexpr int kLinearClasses = 8;  // 16, 32, ..., 128

constexpr size_t RoundUp(size_t n, size_t to) {
  return (n + to - 1) & ~(to - 1);
}

// Poisoning (AddressSanitizer) and root regions (LeakSanitizer).
inline void Poison(const void* p, size_t n) {
#ifdef FF_MMAP_ARENA_ASAN
  ASAN_POISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n;
#endif
}
inline void Unpoison(const void* p, size_t n) {
#ifdef FF_MMAP_ARENA_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, n);
#else
  (void)p, (void)n;
#endif
}
inline void AddRootRegion(const void* p, size_t n) {
#ifdef FF_MMAP_ARENA_ASAN
  __lsan_register_root_region(p, n);
#else
  (void)p, (void)n;
#endif
}
inline void RemoveRootRegion(const void* p, size_t n) {
#ifdef FF_MMAP_ARENA_ASAN
  __lsan_unregister_root_region(p, n);
#else
  (void)p, (void)n;
#endif
}

void* MapAnonymous(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// The run carved for a class: at least 64 KiB and 4 objects, so that the
// largest run fits a chunk after its header page.
static_assert(4 * MmapArena::kMaxSmall <=
              MmapArena::kChunkBytes - MmapArena::kPage);
size_t RunBytes(size_t class_size) {
  return RoundUp(class_size * 4 > kRunMin ? class_size * 4 : kRunMin,
                 MmapArena::kPage);
}

}  // namespace

size_t MmapArena::ClassSize(int c) {
  if (c < kLinearClasses) return size_t(c + 1) * 16;
  const int k = 7 + (c - kLinearClasses) / 4;  // (2^k, 2^(k+1)]
  const size_t step = size_t{1} << (k - 2);
  return (size_t{1} << k) + size_t((c - kLinearClasses) % 4 + 1) * step;
}

int MmapArena::ClassOf(size_t size, size_t alignment) {
  if (alignment > kPage || size > kMaxSmall) return -1;
  if (alignment > kMinAlign)
    size = RoundUp(size > alignment ? size : alignment, alignment);
  if (size > kMaxSmall) return -1;
  int c;
  if (size <= 128) {
    c = size == 0 ? 0 : int((size - 1) / 16);
  } else {
    const int k = std::bit_width(size - 1) - 1;  // size in (2^k, 2^(k+1)]
    const size_t step = size_t{1} << (k - 2);
    const int sub = int((size - (size_t{1} << k) + step - 1) / step);  // 1..4
    c = kLinearClasses + (k - 7) * 4 + sub - 1;
  }
  // A class whose objects are all aligned: its size a multiple of alignment.
  while (alignment > kMinAlign && c < kNumClasses &&
         ClassSize(c) % alignment != 0) {
    ++c;
  }
  return c < kNumClasses ? c : -1;
}

char* MmapArena::NewRun(size_t bytes) {
  if (chunk_cur_ == nullptr || size_t(chunk_end_ - chunk_cur_) < bytes) {
    // The rest of the current chunk is left (never touched, so never
    // resident). The first page holds the chunk list.
    void* p = MapAnonymous(kChunkBytes);
    if (p == nullptr) return nullptr;
    mapped_bytes_.fetch_add(kChunkBytes, std::memory_order_relaxed);
    AddRootRegion(p, kChunkBytes);
    auto* header = static_cast<ChunkHeader*>(p);
    header->next = chunks_;
    chunks_ = header;
    ++num_chunks_;
    chunk_cur_ = static_cast<char*>(p) + kPage;
    chunk_end_ = static_cast<char*>(p) + kChunkBytes;
  }
  char* run = chunk_cur_;
  chunk_cur_ += bytes;
  Poison(run, bytes);  // carved objects are unpoisoned one by one
  return run;
}

void* MmapArena::Allocate(size_t size, size_t alignment) noexcept {
  const int c = ClassOf(size, alignment);
  if (c < 0) return MapOwn(size, alignment);
  const size_t class_size = ClassSize(c);
  void* p;
  {
    MutexLock lock(&mu_);
    Class& cl = classes_[c];
    if (FreeNode* node = cl.free) {
      Unpoison(node, sizeof(FreeNode));
      cl.free = node->next;
      p = node;
    } else {
      if (size_t(cl.end - cl.cur) < class_size) {
        const size_t run_bytes = RunBytes(class_size);
        char* run = NewRun(run_bytes);
        if (run == nullptr) return nullptr;
        cl.cur = run;
        cl.end = run + run_bytes;
      }
      p = cl.cur;
      cl.cur += class_size;
    }
  }
  // The requested bytes are usable; the class's tail stays poisoned.
  Unpoison(p, size == 0 ? 1 : size);
  return p;
}

void MmapArena::Deallocate(void* ptr, size_t size, size_t alignment) noexcept {
  if (ptr == nullptr) return;
  const int c = ClassOf(size, alignment);
  if (c < 0) {
    UnmapOwn(ptr, size);
    return;
  }
  auto* node = static_cast<FreeNode*>(ptr);
  Unpoison(node, sizeof(FreeNode));  // a request of < 8 bytes
  MutexLock lock(&mu_);
  Class& cl = classes_[c];
  node->next = cl.free;
  cl.free = node;
  Poison(node, ClassSize(c));
}

void* MmapArena::MapOwn(size_t size, size_t alignment) noexcept {
  if (size > (SIZE_MAX >> 2) || alignment > (SIZE_MAX >> 2)) return nullptr;
  const size_t bytes = RoundUp(size == 0 ? 1 : size, kPage);
  if (alignment <= kPage) {
    void* p = MapAnonymous(bytes);
    if (p == nullptr) return nullptr;
    mapped_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    AddRootRegion(p, bytes);
    return p;
  }
  // Over-map by the alignment and unmap the ends.
  char* raw = static_cast<char*>(MapAnonymous(bytes + alignment));
  if (raw == nullptr) return nullptr;
  char* p = reinterpret_cast<char*>(
      RoundUp(reinterpret_cast<uintptr_t>(raw), alignment));
  if (p > raw) munmap(raw, size_t(p - raw));
  const size_t tail = size_t(raw + bytes + alignment - (p + bytes));
  if (tail > 0) munmap(p + bytes, tail);
  mapped_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  AddRootRegion(p, bytes);
  return p;
}

void MmapArena::UnmapOwn(void* ptr, size_t size) noexcept {
  const size_t bytes = RoundUp(size == 0 ? 1 : size, kPage);
  RemoveRootRegion(ptr, bytes);
  munmap(ptr, bytes);
  mapped_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

bool MmapArena::Owns(const void* ptr) const {
  const char* p = static_cast<const char*>(ptr);
  MutexLock lock(&mu_);
  for (const ChunkHeader* h = chunks_; h != nullptr; h = h->next) {
    const char* base = reinterpret_cast<const char*>(h);
    if (p >= base + kPage && p < base + kChunkBytes) return true;
  }
  return false;
}

size_t MmapArena::chunks() const {
  MutexLock lock(&mu_);
  return num_chunks_;
}

void MmapArena::ReleaseAll() {
  MutexLock lock(&mu_);
  for (ChunkHeader* h = chunks_; h != nullptr;) {
    ChunkHeader* next = h->next;
    Unpoison(h, kChunkBytes);
    RemoveRootRegion(h, kChunkBytes);
    munmap(h, kChunkBytes);
    mapped_bytes_.fetch_sub(kChunkBytes, std::memory_order_relaxed);
    h = next;
  }
  chunks_ = nullptr;
  chunk_cur_ = chunk_end_ = nullptr;
  num_chunks_ = 0;
  for (Class& cl : classes_) cl = Class();
}

}  // namespace fragfree
