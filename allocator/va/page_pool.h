// PagePool: the physical pages (one backend handle each, Granularity() bytes)
// of one device, shared by every stream and arena of that device. A page is
// either mapped somewhere (owned by an arena) or idle here, ready to be mapped
// without a cuMemCreate. The pool enforces the device's memory limit: it never
// holds more than limit_bytes of handles, counted in a PageBudget that the
// pools of one device share when it has pages of two sizes (Note [Large
// pages] in docs/design.md). Its tables are on the metadata arena.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_VA_PAGE_POOL_H_
#define FRAGFREE_ALLOCATOR_VA_PAGE_POOL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/phys/backend.h"

namespace fragfree {

using PageId = int32_t;  // index into the pool's handle table
inline constexpr PageId kNoPage = -1;
// Pages handed between the pool, arenas and the engine (on the metadata arena).
using PageList = MetadataVector<PageId>;

// The bytes of handles a device's pools may hold, and hold.
struct PageBudget {
  size_t limit_bytes = 0;
  size_t created_bytes = 0;  // live handles (mapped + idle) of every pool
};

class PagePool {
 public:
  // A pool with a budget of its own.
  PagePool(PhysicalBackend* backend, size_t limit_bytes);
  // A pool counting its pages in `budget`, shared with the device's other
  // pool (it must outlive the pool).
  PagePool(PhysicalBackend* backend, PageBudget* budget);
  ~PagePool();

  void set_limit_bytes(size_t limit) { budget_->limit_bytes = limit; }

  // Takes an idle page, if any.
  bool TakeIdle(PageId* page);
  // Creates a page if the limit allows. ResourceExhausted when the limit or the
  // device is out of memory; other errors are backend failures.
  absl::Status CreatePage(PageId* page);
  // A page that is no longer mapped becomes idle.
  void ReturnIdle(PageId page);
  // Releases a page that is neither mapped nor idle (one CreatePage made for a
  // request that then failed) back to the device. If the backend refuses, the
  // page becomes idle and the error is returned.
  absl::Status ReleasePage(PageId page);
  // Releases idle pages back to the device until at most `keep` remain idle.
  absl::Status ReleaseIdle(size_t keep);

  // Idle pages over time (the engine reports them as idle_page_bytes).
  struct IdleCounts {
    size_t peak = 0;       // most idle pages at once since ResetIdlePeak
    uint64_t added = 0;    // pages that became idle, since ResetIdleCounts
    uint64_t removed = 0;  // pages that stopped being idle (taken, released)
  };
  const IdleCounts& idle_counts() const { return idle_counts_; }
  void ResetIdlePeak() { idle_counts_.peak = idle_.size(); }
  void ResetIdleCounts() { idle_counts_.added = idle_counts_.removed = 0; }

  PhysHandle handle(PageId page) const { return handles_[page]; }
  size_t idle_pages() const { return idle_.size(); }
  size_t created_pages() const { return created_; }
  size_t page_size() const { return page_size_; }
  // Bytes the device's pools must release before `pages` more pages can be
  // created within the limit (0 when they fit: the limit, not the device).
  size_t BytesOverLimit(size_t pages) const {
    const size_t after = budget_->created_bytes + pages * page_size_;
    return after > budget_->limit_bytes ? after - budget_->limit_bytes : 0;
  }
  // Handles created and released since the pool was made (handles_created,
  // handles_released).
  uint64_t total_created() const { return total_created_; }
  uint64_t total_released() const { return total_released_; }

 private:
  PhysicalBackend* const backend_;
  const size_t page_size_;
  PageBudget own_budget_;
  PageBudget* const budget_;
  MetadataVector<PhysHandle> handles_;  // by PageId; value 0 once released
  PageList idle_;
  PageList unused_ids_;  // ids of released handles, for reuse
  IdleCounts idle_counts_;
  size_t created_ = 0;  // live handles (mapped + idle)
  uint64_t total_created_ = 0;
  uint64_t total_released_ = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_VA_PAGE_POOL_H_
