// PageSource: gets the physical pages a placed block lacks and maps them, in
// the order Note [Where pages come from] gives: idle pages of the pool; whole
// free pages reclaimed from cached blocks when the placement policy's growth
// rule says so (waiting for their streams' fences); new pages while the limit
// allows; then, under pressure, reclaimed pages after polling fences and after
// waiting for them. A request that fails gives back every page it took (Note
// [A failed request gives back what it took]): new pages are released, moved
// ones mapped back where they were, idle ones made idle again. A page taken
// from a hole of the request's own stream need not wait for the GPU: its old
// address is unmapped later (Note [Moving a page without waiting]).
// The time spent moving pages is metered (MoveMeter) for the growth policy's
// move time budget (Note [Move time budget]). A device with pages of two sizes
// has a PageSource for each (place/page_domain.h); under pressure, one takes
// room from the other, whose unused pages are released to the device (Note
// [Large pages]).
// Counting goes to the StatsBook, events to the trace ring. The scratch lists
// are kept between calls (no allocation per map once warm), on the metadata
// arena.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_PLACE_PAGE_SOURCE_H_
#define FRAGFREE_ALLOCATOR_PLACE_PAGE_SOURCE_H_

#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/call_clock.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/obs/stats_book.h"
#include "allocator/obs/trace.h"
#include "allocator/place/move_meter.h"
#include "allocator/place/placement_policy.h"
#include "allocator/stream/event_source.h"
#include "allocator/stream/stream_fences.h"
#include "allocator/va/arena.h"
#include "allocator/va/page_pool.h"
#include "allocator/va/reclaim_queue.h"

namespace fragfree {

// PyTorch's pool of an arena's blocks in statistics (small or large).
inline int StatPoolOf(ArenaKind kind) {
  return kind == ArenaKind::kSmall ? kPoolSmall : kPoolLarge;
}

class PageSource {
 public:
  // What the engine lends: all outlive the PageSource.
  struct Parts {
    PagePool* pool;
    StreamFences* fences;
    EventSource* events;
    TraceRing* trace;
    StatsBook* stats;
    const PlacementPolicy* policy;
    const MetadataVector<std::unique_ptr<Arena>>* arenas;  // every arena
    const ReclaimQueue* queue;
    size_t page_size;
    size_t base_page_size;  // the device's base page (stats' page_size)
    // Pages of holes the request's own stream freed move without waiting for
    // the GPU (Options::defer_unmap; Note [Moving a page without waiting]).
    bool defer_unmap = false;
    // The move meter's recent time is the process's CPU time rather than the
    // wall clock's (Options::move_clock; Note [Move time budget]).
    bool meter_cpu_time = false;
  };
  // Where pages may come from now.
  struct Scope {
    // During graph capture nothing is unmapped and no event is touched.
    bool capturing = false;
    // Whether an arena's free pages may move (a graph pool's stay put while
    // the pool lives: a graph may replay).
    absl::FunctionRef<bool(const Arena*)> may_move;
    // The stream slot of the block the pages are for: holes of that slot
    // need no wait (stream order), with Parts::defer_unmap. kNoSlot: none.
    uint32_t slot = kNoSlot;
  };
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  // What one request has done that counts once per request.
  struct Request {
    bool retried = false;  // counted in num_alloc_retries
    bool synced = false;   // counted in num_sync_all_streams
    // Where one page size would have moved its own pages, the request took
    // the other size's unused pages (released, to create its own): the two
    // sizes traded memory. Or it grew past the high-water mark instead (the
    // move time budget spent) while the other size's pages lay unused: they
    // stranded memory. Note [Large pages].
    bool traded_page_sizes = false;
    bool stranded_page_sizes = false;
  };
  // A page reclaim unmapped from a free block: where it was, so that a failed
  // request puts it back.
  struct MovedPage {
    Arena* arena;
    size_t index;  // page index in the arena
    PageId page;
  };

  explicit PageSource(const Parts& parts) : p_(parts) {}
  PageSource(const PageSource&) = delete;
  PageSource& operator=(const PageSource&) = delete;

  // Gets `count` pages for `block` and maps them, setting access on them and
  // on pages under the block mapped without access (count may be 0 for those
  // alone). On failure every page it got goes back where it came from.
  absl::Status MapUnder(Block* block, size_t count, const Scope& scope,
                        Request* request);
  // Moves whole free pages whose last use is complete into `out` until it
  // holds `want`, in the policy's reclaim order; with `wait`, waits for
  // in-flight work first. `moved` (optional) receives where each came from.
  absl::Status Reclaim(size_t want, bool wait, const Scope& scope,
                       PageList* out,
                       MetadataVector<MovedPage>* moved = nullptr);
  // `pages` were just mapped into (> 0) or unmapped from (< 0) `arena`.
  void NoteMapped(const Arena* arena, int64_t pages) {
    p_.stats->NotePages(StatPoolOf(arena->kind()), arena->mapped_pages(), pages,
                        arena->page_size());
  }
  // The device's other PageSource (pages of another size), which MapUnder
  // asks for room under pressure (GiveUpPages); null when there is none.
  void set_neighbour(PageSource* neighbour) { neighbour_ = neighbour; }
  // No new block will be placed over this source's pages (the engine stopped
  // using its page size): its neighbour takes its unused pages before it
  // creates any, whatever the growth policy says.
  void Retire() { retired_ = true; }
  bool retired() const { return retired_; }
  // Releases to the device at least `bytes` (when it can) of this source's
  // pages that no block uses: idle pages, then whole free pages of cached
  // blocks (waiting for their fences; none of a graph pool that may replay,
  // none during capture). Returns the bytes released; a page the backend
  // refuses to unmap or release stays (errors are not the request's). For the
  // other page size's request: the pages cannot come back if that request
  // fails (as PyTorch's release of cached blocks before its retry).
  size_t GiveUpPages(size_t bytes, const Scope& scope);
  // Whether at least `bytes` of this source's pages lie unused: idle, or
  // whole and free inside cached blocks.
  bool HoldsUnusedBytes(size_t bytes) const;
  // Unmaps the whole free pages of `block` in `arena` (at most `max_pages`)
  // back to the pool as idle, tracing the runs unmapped.
  absl::Status UnmapFree(Arena* arena, const Block* block, size_t max_pages);
  // Unmaps the old addresses of every detached page (Arena::DetachFreePages),
  // in every arena or in `arena` alone, waiting for the fences that have not
  // passed, so that none is left.
  absl::Status UnmapDetached();
  absl::Status UnmapDetached(Arena* arena);

 private:
  // The bytes the neighbour must give up for `pages` pages of this size: the
  // pages, or what the pools hold over the limit with them, the larger.
  size_t RoomFor(size_t pages) const;
  // Creates pages into `pages` (noting them as created) until it holds
  // `count` or the limit or the device is full (not an error here); a
  // backend failure is returned.
  absl::Status CreateUpTo(size_t count, PageList* pages);
  // Undoes a failed MapUnder: of `pages` (the ones still the request's), new
  // pages are released to the device, moved ones mapped back into the free
  // blocks they came from (released if that fails), idle ones made idle again.
  void GiveBack(const PageList& pages);
  // Before pages are mapped under `block`: the old addresses of detached
  // pages under it are unmapped, once their fences have passed (waiting for
  // them where they have not). Detached addresses elsewhere stay mapped.
  absl::Status SettleDetached(const Block* block, const Scope& scope);
  // Waits until the GPU has passed `epoch` on stream `slot` (at once when it
  // has); true unless the wait fails.
  absl::StatusOr<bool> FencePassed(uint32_t slot, uint64_t epoch);
  void TraceRuns(TraceAction action, StreamHandle stream, bool tagged);
  // MapUnder's time that went to moving pages, into move_meter_: all of the
  // time spent unmapping old addresses under the block (`start_ns` to
  // `settled_ns`), and the share of the rest (to now) of the `moved` pages
  // among the `count` it mapped.
  void MeterMoves(int64_t start_ns, int64_t settled_ns, size_t moved,
                  size_t count);
  // The move meter's time at wall-clock time `wall_ns` (now).
  int64_t MeterNow(int64_t wall_ns) const {
    return p_.meter_cpu_time ? int64_t(ProcessCpuNs()) : wall_ns;
  }

  const Parts p_;
  PageSource* neighbour_ = nullptr;
  bool retired_ = false;
  MoveMeter move_meter_;
  // MapUnder's scratch: the pages it got, and of them the ones it created and
  // the ones it moved; the VA runs mapped or unmapped (for the trace).
  PageList map_pages_;
  PageList created_pages_;
  MetadataVector<MovedPage> moved_pages_;
  MetadataVector<size_t> moved_indices_;
  VaRuns runs_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PLACE_PAGE_SOURCE_H_
