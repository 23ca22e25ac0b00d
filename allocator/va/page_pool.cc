// Implementation of page_pool.h: creating, idling and releasing page handles
// within the limit. Thread-safety: see page_pool.h.
#include "allocator/va/page_pool.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"

namespace fragfree {

PagePool::PagePool(PhysicalBackend* backend, size_t limit_bytes)
    : PagePool(backend, &own_budget_) {
  own_budget_.limit_bytes = limit_bytes;
}

PagePool::PagePool(PhysicalBackend* backend, PageBudget* budget)
    : backend_(backend), page_size_(backend->Granularity()), budget_(budget) {}

PagePool::~PagePool() { ReleaseIdle(0).IgnoreError(); }

bool PagePool::TakeIdle(PageId* page) {
  if (idle_.empty()) return false;
  *page = idle_.back();
  idle_.pop_back();
  ++idle_counts_.removed;
  return true;
}

absl::Status PagePool::CreatePage(PageId* page) {
  if (budget_->created_bytes + page_size_ > budget_->limit_bytes) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "memory limit reached: %s of pages exist, the limit is %s",
        FormatBytes(budget_->created_bytes),
        FormatBytes(budget_->limit_bytes)));
  }
  absl::StatusOr<PhysHandle> handle = backend_->Create(page_size_);
  if (!handle.ok()) return handle.status();
  PageId id;
  if (!unused_ids_.empty()) {
    id = unused_ids_.back();
    unused_ids_.pop_back();
    handles_[id] = *handle;
  } else {
    id = PageId(handles_.size());
    handles_.push_back(*handle);
  }
  ++created_;
  budget_->created_bytes += page_size_;
  ++total_created_;
  *page = id;
  return absl::OkStatus();
}

void PagePool::ReturnIdle(PageId page) {
  idle_.push_back(page);
  ++idle_counts_.added;
  idle_counts_.peak = std::max(idle_counts_.peak, idle_.size());
}

absl::Status PagePool::ReleasePage(PageId page) {
  if (absl::Status s = backend_->Release(handles_[page]); !s.ok()) {
    ReturnIdle(page);
    return s;
  }
  handles_[page] = PhysHandle{};
  unused_ids_.push_back(page);
  --created_;
  budget_->created_bytes -= page_size_;
  ++total_released_;
  return absl::OkStatus();
}

absl::Status PagePool::ReleaseIdle(size_t keep) {
  while (idle_.size() > keep) {
    PageId id = idle_.back();
    if (absl::Status s = backend_->Release(handles_[id]); !s.ok()) return s;
    idle_.pop_back();
    ++idle_counts_.removed;
    handles_[id] = PhysHandle{};
    unused_ids_.push_back(id);
    --created_;
    budget_->created_bytes -= page_size_;
    ++total_released_;
  }
  return absl::OkStatus();
}

}  // namespace fragfree
