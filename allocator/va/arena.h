// Arena: one reserved VA range that serves one stream's allocations of one kind
// (small: <= 1 MiB requests, large: the rest, or those of them in large pages).
// Blocks tile the whole range in address order; free blocks sit in a FreeIndex
// and are coalesced with free neighbours. Underneath, the range is a row of
// pages (the backend's granularity), each unmapped or backed by a PagePool
// page. The arena maps pages only where an allocated block needs them and
// unmaps only whole pages lying inside free blocks, on request (reclaim). See
// Note [Pages under blocks] in docs/design.md. Invariants: blocks tile [base,
// base+size) with no gap or overlap; no two free blocks are adjacent; every
// page under an allocated or pending block is mapped and accessible. A page
// whose access is not known to be set (kept after a failed undo, see MapPages)
// is recorded, and MapPages sets its access before any block over it is handed
// out. Free blocks holding a whole mapped page are also in the device's
// ReclaimQueue or the arena's RemainderBins (va/reclaim_queue.h). A page moved
// away before the GPU passed its free block's last use may stay mapped at its
// old address, detached, until its fence completes (DetachFreePages). The Arena
// object, its page tables and its blocks are on the metadata arena
// (base/metadata_arena.h). Thread-safety: guarded by the owning
// DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_VA_ARENA_H_
#define FRAGFREE_ALLOCATOR_VA_ARENA_H_

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/metadata_containers.h"
#include "allocator/blocks/block.h"
#include "allocator/blocks/free_index.h"
#include "allocator/blocks/quick_cache.h"
#include "allocator/phys/backend.h"
#include "allocator/va/page_pool.h"
#include "allocator/va/reclaim_queue.h"

namespace fragfree {

// kLargePages: large blocks whose size is a multiple of the large page
// (Options::large_page_bytes), in pages of that size (Note [Large pages]).
enum class ArenaKind : uint8_t { kSmall = 1, kLarge = 2, kLargePages = 3 };

// VA ranges (address, bytes) mapped or unmapped by a call, for the trace.
using VaRuns = MetadataVector<std::pair<uintptr_t, size_t>>;

class Arena : public MetadataObject {
 public:
  // Reserves `va_size` bytes (a multiple of the granularity) of address space.
  static absl::StatusOr<std::unique_ptr<Arena>> Create(
      PhysicalBackend* backend, PagePool* pool, BlockPool* blocks,
      ReclaimQueue* queue, size_t va_size, ArenaKind kind, uint32_t stream_slot,
      StreamHandle stream);
  // REQUIRES: no page is mapped (the owner unmapped them first).
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Carves a block of `size` bytes (a multiple of 512) out of the best-fitting
  // free block; nullptr when no free range is large enough. The block may lie
  // over unmapped pages: see UnmappedPages / MapPages. *missing (when given):
  // UnmappedPages of the block (its search counted them already).
  Block* Allocate(size_t size, size_t requested, size_t* missing = nullptr);
  // Number of pages under `block` that are not mapped.
  size_t UnmappedPages(const Block* block) const {
    return UnmappedPagesIn(block->addr, block->size);
  }
  // Whether some page under `block` is mapped but its access is not known to
  // be set (a page kept by a failed undo in MapPages). Such a block needs
  // MapPages (with no new page) before it is usable.
  bool HasPagesWithoutAccess(const Block* block) const;
  // Whether `block` must go through MapPages before it is handed out: pages
  // under it are unmapped (*missing of them) or mapped without access.
  bool NeedsMapping(const Block* block, size_t* missing) const {
    *missing = UnmappedPages(block);
    return *missing > 0 || HasPagesWithoutAccess(block);
  }
  // Maps `pages` (exactly UnmappedPages(block) of them, taken from the pool)
  // under the block and makes them accessible, together with the pages under
  // it that are mapped without access. All or nothing: on error, the pages
  // this call mapped are unmapped again and stay the caller's; one whose Unmap
  // fails too stays mapped under the block, recorded as without access (an
  // ordinary cached page once the caller frees the block, set up again before
  // reuse), and is removed from `pages`. When `runs` is given, the VA ranges
  // newly mapped are appended to it.
  absl::Status MapPages(const Block* block, PageList& pages,
                        VaRuns* runs = nullptr);
  // Makes an allocated or pending block free (coalescing with free neighbours)
  // and returns the resulting free block. `free_epoch` is the stream's fence
  // epoch now (stream/stream_fences.h); `free_seq`, unless kKeepFreeSeq,
  // becomes the resulting block's free_seq. REQUIRES: block->uses is null.
  static constexpr uint64_t kKeepFreeSeq = UINT64_MAX;
  Block* Release(Block* block, uint64_t free_epoch,
                 uint64_t free_seq = kKeepFreeSeq);
  // Whole mapped pages lying inside free block `block`.
  size_t ReclaimablePages(const Block* block) const;
  // Unmaps up to `max_pages` whole pages inside free block `block`, a run of
  // adjacent ones by one backend call (UnmapPages), appending their ids to
  // `out` (they are then the caller's, normally back to the pool). When `runs`
  // is given, the VA ranges unmapped are appended to it; when `indices` is, the
  // page indices unmapped (in the order of `out`).
  absl::Status UnmapFreePages(const Block* block, size_t max_pages,
                              PageList* out, VaRuns* runs = nullptr,
                              MetadataVector<size_t>* indices = nullptr);
  // As UnmapFreePages, for pages that move to a block on this arena's stream
  // before the GPU has passed `block`'s last use: the pages leave the arena
  // (out, runs, indices as above) but their old addresses stay mapped,
  // *detached*, until UnmapDetached finds the stream's fence past `epoch`
  // (Note [Moving a page without waiting] in docs/design.md). A detached
  // index counts as unmapped; no page is mapped there again before its old
  // mapping is gone.
  absl::Status DetachFreePages(const Block* block, size_t max_pages,
                               uint64_t epoch, PageList* out,
                               VaRuns* runs = nullptr,
                               MetadataVector<size_t>* indices = nullptr);
  // Whether the GPU has passed a detached page's fence epoch; may wait for it.
  using FenceReady = absl::FunctionRef<absl::StatusOr<bool>(uint64_t epoch)>;
  // Unmaps the old addresses of the detached pages in [addr, addr + size)
  // whose epoch `ready` says is passed, a run of adjacent ones by one backend
  // call. Stops at the first error (that page stays detached; the passed
  // pages before it in its run are unmapped).
  absl::Status UnmapDetached(uintptr_t addr, size_t size, FenceReady ready);
  absl::Status UnmapAllDetached(FenceReady ready) {
    return UnmapDetached(base_, size_, ready);
  }
  size_t detached_pages() const { return detached_.size(); }
  // Whether a detached old address lies in [addr, addr + size).
  bool AnyDetachedIn(uintptr_t addr, size_t size) const {
    if (detached_.empty()) return false;
    auto it = detached_.lower_bound(FirstPage(addr));
    return it != detached_.end() && it->first < EndPage(addr + size);
  }
  // Detached page indices -> their fence epochs (for the invariant check).
  const MetadataBtreeMap<size_t, uint64_t>& detached() const {
    return detached_;
  }
  // Maps pages back at the indices UnmapFreePages or DetachFreePages took
  // them from (a detached one is attached again, no backend call): `pages`
  // are (index, page) pairs sorted by index, each index unmapped now and
  // inside a free block (a failed request gives back what it took: Note [A
  // failed request gives back what it took] in docs/design.md). A page that
  // cannot be mapped and made accessible again is appended to `failed` (the
  // caller's); a page whose undo Unmap fails too stays mapped, recorded as
  // without access (as in MapPages). Free blocks that hold a whole mapped page
  // again rejoin the reclaim queue or the remainder bins. Returns the pages now
  // mapped here; `runs` (optional) receives the VA ranges mapped.
  size_t RestorePages(const MetadataVector<std::pair<size_t, PageId>>& pages,
                      PageList* failed, VaRuns* runs = nullptr);
  // Unmaps every mapped page overlapping [addr, addr + size), whatever lies
  // over it (live blocks too: sleep and wake, docs/sleep.md), appending their
  // ids to `out`; free blocks left without a whole mapped page leave the
  // reclaim index. The caller knows that no GPU work uses those pages, and
  // no page there is detached (UnmapDetached first). Each
  // run of adjacent mapped pages is unmapped by one backend call (page by
  // page where the backend refuses the run); `calls`, when given, is
  // incremented per call. On an Unmap failure the pages before it are
  // unmapped and the rest stay mapped.
  absl::Status UnmapPagesIn(uintptr_t addr, size_t size, PageList* out,
                            VaRuns* runs = nullptr, size_t* calls = nullptr);
  // Bytes of `block` that lie on mapped pages.
  size_t MappedBytes(const Block* block) const;
  bool IsFullyMapped(const Block* block) const {
    return UnmappedPages(block) == 0;
  }
  // No allocated or pending block: one free block covers the whole range.
  bool IsEmpty() const { return first_->is_free() && first_->next == nullptr; }
  // The block starting exactly at addr, or the one containing it.
  const Block* BlockContaining(uintptr_t addr) const;

  bool Contains(uintptr_t addr) const {
    return addr >= base_ && addr < base_ + size_;
  }
  const FreeIndex& free_index() const { return free_index_; }
  // Calls fn(const Block*) for every free block (the free index) and every
  // cached one (the quick cache): O(those blocks), not O(all blocks).
  template <typename Fn>
  void ForEachFreeOrCached(Fn&& fn) const {
    free_index_.ForEachLargestFirst([&fn](const Block* b) {
      fn(b);
      return true;
    });
    quick_.ForEach(fn);
  }
  // Recently freed small blocks kept whole (the engine decides what goes in).
  QuickCache& quick() { return quick_; }
  const QuickCache& quick() const { return quick_; }
  // Split remainders holding a whole mapped page (va/reclaim_queue.h).
  const RemainderBins& remainders() const { return remainders_; }
  const Block* first_block() const { return first_; }
  uintptr_t base() const { return base_; }
  size_t size() const { return size_; }
  ArenaKind kind() const { return kind_; }
  uint32_t stream_slot() const { return stream_slot_; }
  StreamHandle stream() const { return stream_; }
  size_t mapped_pages() const { return mapped_pages_; }
  size_t page_size() const { return page_size_; }
  // The pool its pages come from (one per page size: Note [Large pages]).
  const PagePool* pool() const { return pool_; }
  size_t mapped_end() const { return mapped_end_; }
  bool IsPageMapped(size_t index) const { return page_of_[index] != kNoPage; }
  // The pool pages under [addr, addr + size) in address order (kNoPage where
  // unmapped), and where the first of them starts: what an IPC export shares
  // (allocator/ipc, docs/ipc.md).
  void PagesUnder(uintptr_t addr, size_t size, PageList* out) const {
    for (size_t p = FirstPage(addr), e = EndPage(addr + size); p < e; ++p) {
      out->push_back(page_of_[p]);
    }
  }
  uintptr_t PageStart(uintptr_t addr) const {
    return base_ + FirstPage(addr) * page_size_;
  }

 private:
  Arena(PhysicalBackend* backend, PagePool* pool, BlockPool* blocks,
        ReclaimQueue* queue, uintptr_t base, size_t size, ArenaKind kind,
        uint32_t stream_slot, StreamHandle stream);
  // Carves the first `bytes` of `block` (not in the free index) into a new
  // free block in front of it: a remainder, which reclaim takes first.
  void SplitOffFront(Block* block, size_t bytes);
  // A free block enters / leaves the free index, and the reclaim queue or the
  // remainder bins when it holds a whole mapped page.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void AddFree(Block* block) {
    free_index_.Insert(block);
    if (HasReclaimablePage(block)) Enqueue(block);
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE void RemoveFree(Block* block) {
    free_index_.Remove(block);
    if (block->queued) Dequeue(block);
  }
  void Enqueue(Block* block);
  void Dequeue(Block* block);
  // Whether free block `block` holds a whole mapped page (ReclaimablePages >
  // 0).
  bool HasReclaimablePage(const Block* block) const {
    if (block->size < page_size_) return false;  // no whole page inside
    return AnyMapped(EndPage(block->addr),
                     std::min(FirstPage(block->end()), mapped_end_));
  }
  // Page index range [first, last) under [addr, end).
  size_t FirstPage(uintptr_t addr) const { return PagesIn(addr - base_); }
  size_t EndPage(uintptr_t end) const {
    return PagesIn(end - base_ + page_size_ - 1);
  }
  size_t PagesIn(size_t bytes) const {
    return page_shift_ >= 0 ? bytes >> page_shift_ : bytes / page_size_;
  }
  // Mapped pages among [first, end), from the bitmap; and whether all / any of
  // them are mapped (a mask test per word, no popcount).
  size_t MappedIn(size_t first, size_t end) const;
  // The first mapped page in [first, end), or end when none is.
  size_t NextMappedPage(size_t first, size_t end) const;
  bool AllMapped(size_t first, size_t end) const {
    if (first >= end) return true;
    if (first / 64 != (end - 1) / 64) return AllMappedSlow(first, end);
    const uint64_t mask = WordMask(first, end);
    return (mapped_bits_[first / 64] & mask) == mask;
  }
  bool AnyMapped(size_t first, size_t end) const {
    if (first >= end) return false;
    if (first / 64 != (end - 1) / 64) return AnyMappedSlow(first, end);
    return (mapped_bits_[first / 64] & WordMask(first, end)) != 0;
  }
  // Bits [first, end) of their (single) word.
  static uint64_t WordMask(size_t first, size_t end) {
    return (~uint64_t{0} << (first % 64)) &
           (~uint64_t{0} >> (63 - (end - 1) % 64));
  }
  bool AllMappedSlow(size_t first, size_t end) const;
  bool AnyMappedSlow(size_t first, size_t end) const;
  void SetMappedBit(size_t index, bool mapped) {
    if (mapped) {
      mapped_bits_[index / 64] |= uint64_t{1} << (index % 64);
    } else {
      mapped_bits_[index / 64] &= ~(uint64_t{1} << (index % 64));
    }
  }
  // Unmaps pages [first, end), each its own mapping, by one backend call over
  // the run (the backend contract allows a range covering whole mappings; one
  // call costs the driver less per page than one call a page: docs/design.md,
  // Note [Page size and handle size]), or page by page where the backend
  // refuses the range, stopping at the first error. `gone(p)` runs for each
  // page unmapped; `calls` (optional) counts the backend calls.
  absl::Status UnmapPages(size_t first, size_t end,
                          absl::FunctionRef<void(size_t)> gone,
                          size_t* calls = nullptr);
  // UnmapFreePages and DetachFreePages: detach (at `*epoch`) rather than
  // unmap when `epoch` is given.
  absl::Status TakeFreePages(const Block* block, size_t max_pages,
                             const uint64_t* epoch, PageList* out, VaRuns* runs,
                             MetadataVector<size_t>* indices);
  // Page `index` was just unmapped: its id goes to `out`, the tables forget it.
  void ForgetMapping(size_t index, PageList* out);
  // Pages under [addr, addr + size) that are not mapped. A fully mapped range
  // (the steady state) costs one mask test, no popcount.
  size_t UnmappedPagesIn(uintptr_t addr, size_t size) const {
    const size_t first = FirstPage(addr), end = EndPage(addr + size);
    return AllMapped(first, end) ? 0 : end - first - MappedIn(first, end);
  }
  // Free blocks examined when looking for an already mapped fit.
  static constexpr int kMappedSearchLimit = 256;

  PhysicalBackend* const backend_;
  PagePool* const pool_;
  BlockPool* const blocks_;
  ReclaimQueue* const queue_;
  const uintptr_t base_;
  const size_t size_;
  const size_t page_size_;
  const int page_shift_;  // log2(page_size_), or -1 if not a power of two
  const ArenaKind kind_;
  const uint32_t stream_slot_;
  const StreamHandle stream_;
  Block* first_ = nullptr;
  FreeIndex free_index_;
  RemainderBins remainders_;
  QuickCache quick_;
  MetadataVector<PageId> page_of_;  // by page index
  // Bit p: page p is mapped (page_of_[p] != kNoPage), so that page counts over
  // a range (placement, reclaim) are a few popcounts.
  MetadataVector<uint64_t> mapped_bits_;
  size_t mapped_pages_ = 0;
  size_t mapped_end_ = 0;  // 1 + highest page index ever mapped
  // Mapped pages whose access is not known to be set: a Map or SetAccess
  // failed and so did the Unmap that should have undone it (almost always
  // empty). MapPages sets their access before a block over them is used;
  // unmapping a page removes it.
  MetadataBtreeSet<size_t> without_access_;
  // Detached pages (DetachFreePages): page index -> the fence epoch after
  // which its old mapping may go. page_of_ and the bitmap say unmapped.
  MetadataBtreeMap<size_t, uint64_t> detached_;
  // MapPages's lists of page indices (reused: no allocation per call once
  // warm).
  MetadataVector<size_t> scratch_mapped_;
  MetadataVector<size_t> scratch_set_up_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_VA_ARENA_H_
