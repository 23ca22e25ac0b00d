// PageSizedBackend: a decorator that makes the engine's page, one handle of
// the inner backend, `page_size` bytes, a multiple of the inner backend's
// granularity: it reports that size as Granularity(), so every page the pool
// creates and every range an arena reserves, maps and moves is in such units;
// DeviceGranularity() stays the inner backend's (what imported handles need).
// The option `page_size_mb` (options.h) asks for it; docs/design.md, Note
// [Page size and handle size], says what a larger page trades.
// Thread-safety: as the inner backend (backend.h: not thread-safe).
#ifndef FRAGFREE_ALLOCATOR_PHYS_PAGE_SIZED_BACKEND_H_
#define FRAGFREE_ALLOCATOR_PHYS_PAGE_SIZED_BACKEND_H_

#include <memory>
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
    const size_t granularity = inner->Granularity();
    if (page_size == 0 || page_size == granularity) return inner;
    if (page_size % granularity != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fragfree: page_size_mb: %s is not a multiple of device %d's "
          "allocation granularity (%s); use a multiple of it, or 0 for the "
          "granularity itself",
          FormatBytes(page_size), device, FormatBytes(granularity)));
    }
    return std::unique_ptr<PhysicalBackend>(
        new PageSizedBackend(std::move(inner), page_size));
  }

  size_t Granularity() const override { return page_size_; }

 private:
  PageSizedBackend(std::unique_ptr<PhysicalBackend> inner, size_t page_size)
      : ForwardingBackend(std::move(inner)), page_size_(page_size) {}

  const size_t page_size_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_PAGE_SIZED_BACKEND_H_
