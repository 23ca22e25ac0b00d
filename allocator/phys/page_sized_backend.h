// PageSizedBackend: a decorator that makes the engine's page, one handle of
// the inner backend, `page_size` bytes, a multiple of the inner backend's
// granularity: it reports that size as Granularity(), so every page the pool
// creates and every range an arena reserves, maps and moves is in such units;
// DeviceGranularity() stays the inner backend's (what imported handles need).
// The option `page_size_mb` (options.h) asks for it for every page; Note
// [Page size and handle size] in docs/design.md says what a larger page trades.
// A View borrows the engine's backend instead of owning it: the pages of
// `large_page_mb` (Note [Large pages]) are made through one.
// Thread-safety: as the inner backend (backend.h: not thread-safe).
#ifndef FRAGFREE_ALLOCATOR_PHYS_PAGE_SIZED_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_PAGE_SIZED_BACKEND_H_

#include <memory>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "allocator/base/units.h"
#include "allocator/phys/forwarding_backend.h"

namespace fragfree {

class PageSizedBackend : public ForwardingBackend {
 public:
  // `inner` itself when `page_size` is 0 or its granularity, else `inner`
  // decorated. InvalidArgument, naming the option, when `page_size` is not a
  // multiple of the inner backend's granularity.
  static absl::StatusOr<std::unique_ptr<PhysicalBackend>> Wrap(
      std::unique_ptr<PhysicalBackend> inner, size_t page_size, int device) {
    if (page_size == 0 || page_size == inner->Granularity()) return inner;
    if (absl::Status s = CheckMultiple(*inner, page_size, device,
                                       "page_size_mb", "the granularity");
        !s.ok()) {
      return s;
    }
    return std::unique_ptr<PhysicalBackend>(
        new PageSizedBackend(std::move(inner), page_size));
  }
  // `inner` (borrowed: it must outlive the view) in pages of `page_size`.
  // REQUIRES: CheckMultiple(*inner, page_size, ...) is OK.
  static std::unique_ptr<PhysicalBackend> View(PhysicalBackend* inner,
                                               size_t page_size) {
    return std::unique_ptr<PhysicalBackend>(
        new PageSizedBackend(inner, page_size));
  }
  // InvalidArgument naming option `key` unless `page_size` is a multiple of
  // `inner`'s granularity; `zero_means` says what the option's 0 asks for.
  static absl::Status CheckMultiple(const PhysicalBackend& inner,
                                    size_t page_size, int device,
                                    std::string_view key,
                                    std::string_view zero_means) {
    const size_t granularity = inner.Granularity();
    if (page_size % granularity == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragfree: %s: %s is not a multiple of device %d's %s (%s); use a "
        "multiple of it, or 0 for %s",
        key, FormatBytes(page_size), device,
        key == "page_size_mb" ? "allocation granularity" : "page",
        FormatBytes(granularity), zero_means));
  }

  size_t Granularity() const override { return page_size_; }

 private:
  PageSizedBackend(std::unique_ptr<PhysicalBackend> inner, size_t page_size)
      : ForwardingBackend(std::move(inner)), page_size_(page_size) {}
  PageSizedBackend(PhysicalBackend* inner, size_t page_size)
      : ForwardingBackend(inner), page_size_(page_size) {}

  const size_t page_size_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_PAGE_SIZED_BACKEND_H_
