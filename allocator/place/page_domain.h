// PageDomain: the pages of one size on a device and what moves them: the
// engine's backend in that size, the pool of such pages, the reclaim queue of
// the free blocks over them and the PageSource that maps them under blocks.
// Every arena belongs to one domain, the one whose pool it was made with. A
// device has its base domain (pages of page_size_mb: the device's granularity
// by default) and, with large_page_mb, a second one for the large blocks whose
// size is a multiple of that page (Note [Large pages] in docs/design.md). The
// two count their pages against one PageBudget (the device's memory limit),
// and each PageSource takes room from the other under pressure.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_PLACE_PAGE_DOMAIN_H_
#define FRAGFREE_ALLOCATOR_PLACE_PAGE_DOMAIN_H_

#include <memory>
#include <utility>

#include "allocator/base/metadata_arena.h"
#include "allocator/phys/backend.h"
#include "allocator/phys/page_sized_backend.h"
#include "allocator/place/page_source.h"
#include "allocator/va/arena.h"
#include "allocator/va/page_pool.h"
#include "allocator/va/reclaim_queue.h"

namespace fragfree {

class PageDomain : public MetadataObject {
 public:
  // Pages of `page_size` made by `backend` (the engine's), through a view of
  // it in that size when it is not the backend's Granularity()
  // (PageSizedBackend::View; REQUIRES: a multiple of it). `parts` are the
  // PageSource's but for the pool, the reclaim queue and the page size, this
  // domain's.
  PageDomain(PhysicalBackend* backend, size_t page_size, PageBudget* budget,
             PageSource::Parts parts)
      : view_(page_size == backend->Granularity()
                  ? nullptr
                  : PageSizedBackend::View(backend, page_size)),
        backend_(view_ != nullptr ? view_.get() : backend),
        pool_(backend_, budget),
        source_(Own(parts)) {}
  PageDomain(const PageDomain&) = delete;
  PageDomain& operator=(const PageDomain&) = delete;

  // Each domain's PageSource asks the other for room (PageSource::
  // GiveUpPages).
  static void Neighbours(PageDomain& a, PageDomain& b) {
    a.source_.set_neighbour(&b.source_);
    b.source_.set_neighbour(&a.source_);
  }

  bool Owns(const Arena* arena) const { return arena->pool() == &pool_; }
  PhysicalBackend* backend() const { return backend_; }
  size_t page_size() const { return pool_.page_size(); }
  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }
  ReclaimQueue& queue() { return queue_; }
  const ReclaimQueue& queue() const { return queue_; }
  PageSource& source() { return source_; }

 private:
  PageSource::Parts Own(PageSource::Parts parts) {
    parts.pool = &pool_;
    parts.queue = &queue_;
    parts.page_size = pool_.page_size();
    return parts;
  }

  const std::unique_ptr<PhysicalBackend> view_;
  PhysicalBackend* const backend_;
  PagePool pool_;
  ReclaimQueue queue_;
  PageSource source_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PLACE_PAGE_DOMAIN_H_
