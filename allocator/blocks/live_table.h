// LiveTable: a device's live allocations by address: 16-byte entries (the
// address and its block, four to a cache line), so that the table is small
// enough to stay in the caches longer and a probe run rarely crosses a line.
// Open addressing with linear probing (Fibonacci hashing of the address) at a
// load of at most 1/4 up to kSparseCapacity slots (short probe runs: whether
// the next slot is taken is a branch that mispredicts about as often as the
// slot is taken) and 1/2 above (there the table's misses in the caches cost
// more than those branches), and backward-shift deletion: no tombstones, so
// under alloc/free churn at a steady live count the table never rehashes in
// place (a tombstone table does, every few dozen frees near its load limit: a
// latency spike of O(capacity)). The array doubles as the live count grows,
// and is on the metadata arena, huge-page backed where the kernel allows
// (base/huge_pages.h).
// Thread-safety: guarded by the owning DeviceAllocator's lock, except Prefetch,
// which may run without it (it reads the table's location through relaxed
// atomics and only hints the cache: a stale or torn reading prefetches the
// wrong line, never faults).
#ifndef FRAGFREE_ALLOCATOR_BLOCKS_LIVE_TABLE_H_
#define FRAGFREE_ALLOCATOR_BLOCKS_LIVE_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

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
  LiveTable() { Allocate(kMinCapacity); }
  ~LiveTable() { FreeHostTable(slots(), capacity() * sizeof(LiveEntry)); }
  LiveTable(const LiveTable&) = delete;
  LiveTable& operator=(const LiveTable&) = delete;

  // Starts loading the home slot of `addr` (Find's first probe, the cache
  // miss of a free once the table outgrows the caches). Safe without the lock.
  void Prefetch(uintptr_t addr) const {
    const uintptr_t table =
        reinterpret_cast<uintptr_t>(slots_.load(std::memory_order_relaxed));
    const int shift = shift_.load(std::memory_order_relaxed);
    __builtin_prefetch(reinterpret_cast<const void*>(
        table + HomeAt(addr, shift) * sizeof(LiveEntry)));
  }
  // The entry of `addr`, or nullptr. The pointer is valid until the next
  // Insert or Erase.
  LiveEntry* Find(uintptr_t addr) {
    LiveEntry* const slots = this->slots();
    for (size_t i = Home(addr);; i = (i + 1) & mask_) {
      if (slots[i].addr == addr) return &slots[i];
      if (slots[i].addr == 0) return nullptr;
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
    LiveEntry* const slots = this->slots();
    size_t i = Home(entry.addr);
    while (slots[i].addr != 0) i = (i + 1) & mask_;
    slots[i] = entry;
    ++size_;
  }
  // REQUIRES: `entry` is from Find.
  void Erase(LiveEntry* entry) {
    // Backward shift: move later entries of the probe run into the hole when
    // that keeps them reachable from their home slot.
    LiveEntry* const slots = this->slots();
    size_t hole = size_t(entry - slots);
    for (size_t j = (hole + 1) & mask_; slots[j].addr != 0;
         j = (j + 1) & mask_) {
      const size_t home = Home(slots[j].addr);
      if (((j - home) & mask_) >= ((j - hole) & mask_)) {
        slots[hole] = slots[j];
        hole = j;
      }
    }
    slots[hole] = LiveEntry();
    --size_;
  }
  void Clear() {
    LiveEntry* const slots = this->slots();
    for (size_t i = 0; i < capacity(); ++i) slots[i] = LiveEntry();
    size_ = 0;
  }
  size_t size() const { return size_; }
  // Calls fn(LiveEntry&) for every entry; fn must not insert or erase.
  template <typename Fn>
  void ForEach(Fn&& fn) {
    LiveEntry* const slots = this->slots();
    for (size_t i = 0; i < capacity(); ++i) {
      if (slots[i].addr != 0) fn(slots[i]);
    }
  }

 private:
  static constexpr size_t kMinCapacity = 256;
  static constexpr size_t kSparseCapacity = 4096;  // 64 KiB of entries
  size_t capacity() const { return mask_ + 1; }
  static size_t HomeAt(uintptr_t addr, int shift) {
    return size_t(((addr >> 9) * 0x9E3779B97F4A7C15ull) >> shift);
  }
  size_t Home(uintptr_t addr) const {
    return HomeAt(addr, shift_.load(std::memory_order_relaxed));
  }
  LiveEntry* slots() const { return slots_.load(std::memory_order_relaxed); }
  void Allocate(size_t capacity) {
    LiveEntry* const slots = static_cast<LiveEntry*>(
        AllocateHostTable(capacity * sizeof(LiveEntry)));
    for (size_t i = 0; i < capacity; ++i) new (&slots[i]) LiveEntry();
    slots_.store(slots, std::memory_order_relaxed);
    mask_ = capacity - 1;
    max_size_ = capacity <= kSparseCapacity ? capacity / 4 : capacity / 2;
    shift_.store(64 - __builtin_ctzll(capacity), std::memory_order_relaxed);
  }
  void Grow() {
    LiveEntry* const old = slots();
    const size_t old_capacity = capacity();
    Allocate(2 * old_capacity);
    LiveEntry* const slots = this->slots();
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].addr == 0) continue;
      size_t j = Home(old[i].addr);
      while (slots[j].addr != 0) j = (j + 1) & mask_;
      slots[j] = old[i];
    }
    FreeHostTable(old, old_capacity * sizeof(LiveEntry));
  }

  // Atomic only for Prefetch's unlocked reads; written under the lock.
  std::atomic<LiveEntry*> slots_{nullptr};
  size_t mask_ = 0;
  size_t max_size_ = 0;  // the most entries before the table grows
  std::atomic<int> shift_{64};
  size_t size_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BLOCKS_LIVE_TABLE_H_
