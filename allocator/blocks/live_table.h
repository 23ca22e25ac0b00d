// LiveTable: a device's live allocations by address: 16-byte entries (the
// address and its block), four to a bucket of one cache line. An address
// hashes (Fibonacci hashing) to its home bucket and lives there unless the
// bucket was full when it was inserted; then it lives in the first bucket after
// with room, and every bucket it passed counts one more entry gone past it
// (overflow_). A lookup compares the address with all four entries of a bucket
// without branching on which holds it, and goes on to the next bucket only if
// entries went past this one; an erase empties the slot and takes the entry off
// the counts of the buckets it passed. So a free and an allocation branch on
// nothing whose outcome is a coin toss (linear probing branches on each slot of
// a probe run and, erasing, on each entry it shifts back): Note [Hot path] in
// docs/design.md. No tombstones, so no rehash in place. Load at most 1/4 up to
// kSparseCapacity slots and 1/2 above; the array doubles as the live count
// grows, and is on the metadata arena, huge-page backed where the kernel
// allows (base/huge_pages.h).
// Thread-safety: guarded by the owning DeviceAllocator's lock, except
// Prefetch, which may run without it (it reads the table's location through
// relaxed atomics and only hints the cache: a stale or torn reading prefetches
// the wrong line, never faults).
#ifndef FRAGFREE_ALLOCATOR_BLOCKS_LIVE_TABLE_H_
#define FRAGFREE_ALLOCATOR_BLOCKS_LIVE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "allocator/base/check.h"
#include "allocator/base/huge_pages.h"
#include "allocator/blocks/block.h"

namespace fragfree {

// A live allocation: its address and block, and whether other streams used it
// (block->uses != nullptr, in the block pointer's low bit: blocks are 64-byte
// aligned), so that a free decides its path without waiting for the block. The
// rest (arena, requested size) is read from the block, whose second line a free
// writes anyway.
struct alignas(16) LiveEntry {
  LiveEntry() = default;
  LiveEntry(uintptr_t address, Block* b)
      : addr(address), bits(reinterpret_cast<uintptr_t>(b)) {}
  Block* block() const { return reinterpret_cast<Block*>(bits & ~kHasUses); }
  bool has_uses() const { return (bits & kHasUses) != 0; }
  void set_has_uses() { bits |= kHasUses; }

  static constexpr uintptr_t kHasUses = 1;
  uintptr_t addr = 0;  // 0: an empty slot
  uintptr_t bits = 0;  // the block, | kHasUses
};
static_assert(alignof(Block) > LiveEntry::kHasUses,
              "the flag lives in bits a Block pointer never sets");
static_assert(sizeof(LiveEntry) == 16, "four entries per cache line");

class LiveTable {
 public:
  static constexpr size_t kBucketEntries = 4;  // one cache line

  LiveTable() { Allocate(kMinCapacity); }
  ~LiveTable() { Release(buckets(), overflow_, capacity()); }
  LiveTable(const LiveTable&) = delete;
  LiveTable& operator=(const LiveTable&) = delete;

  // Starts loading the home bucket of `addr` (Find's first line, the cache
  // miss of a free once the table outgrows the caches). Safe without the lock.
  void Prefetch(uintptr_t addr) const {
    const uintptr_t table =
        reinterpret_cast<uintptr_t>(buckets_.load(std::memory_order_relaxed));
    const int shift = shift_.load(std::memory_order_relaxed);
    __builtin_prefetch(reinterpret_cast<const void*>(
        table + HomeAt(addr, shift) * sizeof(Bucket)));
  }
  // The entry of `addr`, or nullptr (always for 0). The pointer is valid until
  // the next Insert or Erase.
  LiveEntry* Find(uintptr_t addr) {
    if (addr == 0) [[unlikely]]
      return nullptr;
    Bucket* const buckets = this->buckets();
    size_t b = Home(addr);
    for (size_t passed = 0;; ++passed) {
      if (const unsigned m = Matches(buckets[b], addr); m != 0) {
        return &buckets[b].entries[__builtin_ctz(m)];
      }
      // Nothing went past this bucket (or every bucket was looked at).
      if (overflow_[b] == 0 || passed == bucket_mask_) return nullptr;
      b = (b + 1) & bucket_mask_;
    }
  }
  const LiveEntry* Find(uintptr_t addr) const {
    return const_cast<LiveTable*>(this)->Find(addr);
  }
  // REQUIRES: entry.addr != 0 and not in the table.
  void Insert(const LiveEntry& entry) {
    FF_DCHECK(entry.addr != 0 && Find(entry.addr) == nullptr,
              "LiveTable::Insert of a bad or present address");
    if (size_ + 1 > max_size_) Grow();
    Place(entry);
    ++size_;
  }
  // REQUIRES: `entry` is from Find.
  void Erase(LiveEntry* entry) {
    const size_t at =  // its bucket
        (reinterpret_cast<uintptr_t>(entry) -
         reinterpret_cast<uintptr_t>(buckets())) /
        sizeof(Bucket);
    for (size_t b = Home(entry->addr); b != at; b = (b + 1) & bucket_mask_) {
      if (overflow_[b] != kStuck) --overflow_[b];
    }
    *entry = LiveEntry();
    --size_;
  }
  void Clear() {
    Bucket* const buckets = this->buckets();
    for (size_t b = 0; b <= bucket_mask_; ++b) {
      buckets[b] = Bucket();
      overflow_[b] = 0;
    }
    size_ = 0;
  }
  size_t size() const { return size_; }
  // The bucket `addr` hashes to in the table as it is now (tests).
  size_t HomeBucket(uintptr_t addr) const { return Home(addr); }
  size_t bucket_count() const { return bucket_mask_ + 1; }
  // Calls fn(LiveEntry&) for every entry; fn must not insert or erase.
  template <typename Fn>
  void ForEach(Fn&& fn) {
    Bucket* const buckets = this->buckets();
    for (size_t b = 0; b <= bucket_mask_; ++b) {
      for (LiveEntry& e : buckets[b].entries) {
        if (e.addr != 0) fn(e);
      }
    }
  }

 private:
  struct alignas(64) Bucket {
    LiveEntry entries[kBucketEntries];
  };
  static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");
  static constexpr size_t kMinCapacity = 256;
  static constexpr size_t kSparseCapacity = 4096;  // 64 KiB of entries
  // An overflow count that reached this stays there (the bucket is always
  // searched past) until the table is rebuilt: only a pathological clustering
  // of addresses gets there.
  static constexpr uint8_t kStuck = 255;

  // Bit i: entries[i].addr == addr, computed for all four without branching.
  static unsigned Matches(const Bucket& bucket, uintptr_t addr) {
    const LiveEntry* const e = bucket.entries;
    return Equal(e[0].addr, addr) | Equal(e[1].addr, addr) << 1 |
           Equal(e[2].addr, addr) << 2 | Equal(e[3].addr, addr) << 3;
  }
  // 1 if a == b, else 0, as a value the compiler cannot see through: it would
  // otherwise turn some of Matches' compares into branches.
  static unsigned Equal(uintptr_t a, uintptr_t b) {
    unsigned bit = a == b;
    asm("" : "+r"(bit));
    return bit;
  }
  // Puts `entry` in the first bucket with room from its home, counting it on
  // every full bucket it passes (the table always has room: load <= 1/2).
  void Place(const LiveEntry& entry) {
    Bucket* const buckets = this->buckets();
    for (size_t b = Home(entry.addr);; b = (b + 1) & bucket_mask_) {
      if (const unsigned m = Matches(buckets[b], 0); m != 0) {
        buckets[b].entries[__builtin_ctz(m)] = entry;
        return;
      }
      if (overflow_[b] != kStuck) ++overflow_[b];
    }
  }
  size_t capacity() const { return (bucket_mask_ + 1) * kBucketEntries; }
  static size_t HomeAt(uintptr_t addr, int shift) {
    return size_t(((addr >> 9) * 0x9E3779B97F4A7C15ull) >> shift);
  }
  size_t Home(uintptr_t addr) const {
    return HomeAt(addr, shift_.load(std::memory_order_relaxed));
  }
  Bucket* buckets() const { return buckets_.load(std::memory_order_relaxed); }
  static void Release(Bucket* buckets, uint8_t* overflow, size_t capacity) {
    FreeHostTable(buckets, capacity * sizeof(LiveEntry));
    FreeHostTable(overflow, capacity / kBucketEntries);
  }
  void Allocate(size_t capacity) {
    const size_t count = capacity / kBucketEntries;
    Bucket* const buckets =
        static_cast<Bucket*>(AllocateHostTable(capacity * sizeof(LiveEntry)));
    for (size_t b = 0; b < count; ++b) new (&buckets[b]) Bucket();
    overflow_ = static_cast<uint8_t*>(AllocateHostTable(count));
    for (size_t b = 0; b < count; ++b) overflow_[b] = 0;
    buckets_.store(buckets, std::memory_order_relaxed);
    bucket_mask_ = count - 1;
    max_size_ = capacity <= kSparseCapacity ? capacity / 4 : capacity / 2;
    shift_.store(64 - __builtin_ctzll(count), std::memory_order_relaxed);
  }
  void Grow() {
    Bucket* const old = buckets();
    uint8_t* const old_overflow = overflow_;
    const size_t old_capacity = capacity();
    Allocate(2 * old_capacity);
    for (size_t b = 0; b < old_capacity / kBucketEntries; ++b) {
      for (const LiveEntry& e : old[b].entries) {
        if (e.addr != 0) Place(e);
      }
    }
    Release(old, old_overflow, old_capacity);
  }

  // Atomic only for Prefetch's unlocked reads; written under the lock.
  std::atomic<Bucket*> buckets_{nullptr};
  uint8_t* overflow_ = nullptr;  // per bucket: entries that went past it
  size_t bucket_mask_ = 0;       // buckets - 1
  size_t max_size_ = 0;          // the most entries before the table grows
  std::atomic<int> shift_{64};
  size_t size_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BLOCKS_LIVE_TABLE_H_
