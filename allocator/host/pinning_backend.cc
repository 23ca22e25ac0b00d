// EmulatedPinningBackend: anonymous mmap stands in for pinned memory.
// Thread-safety: counters are atomics; mmap/munmap/mlock are thread-safe.
#include "allocator/host/pinning_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"

namespace fragfree {

EmulatedPinningBackend::EmulatedPinningBackend(Config config)
    : config_(config), page_size_(size_t(sysconf(_SC_PAGESIZE))) {}

std::string EmulatedPinningBackend::name() const {
  return absl::StrFormat("emulated (mmap%s%s)",
                         config_.populate ? " + populate" : "",
                         config_.lock ? " + mlock" : "");
}

absl::StatusOr<void*> EmulatedPinningBackend::Pin(size_t bytes) {
  if (bytes == 0 || bytes % page_size_ != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pinning: %d bytes is not a multiple of the page size", bytes));
  }
  pin_calls_.fetch_add(1);
  if (config_.capacity_bytes != 0) {
    int64_t now = pinned_bytes_.fetch_add(int64_t(bytes)) + int64_t(bytes);
    if (now > int64_t(config_.capacity_bytes)) {
      pinned_bytes_.fetch_sub(int64_t(bytes));
      return absl::ResourceExhaustedError(absl::StrFormat(
          "emulated pinning: %s more would exceed the capacity of %s",
          FormatBytes(bytes), FormatBytes(config_.capacity_bytes)));
    }
  } else {
    pinned_bytes_.fetch_add(int64_t(bytes));
  }
  int flags =
      MAP_PRIVATE | MAP_ANONYMOUS | (config_.populate ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
  int error = errno;
  if (p != MAP_FAILED && config_.lock && mlock(p, bytes) != 0) {
    error = errno;
    munmap(p, bytes);
    p = MAP_FAILED;
  }
  if (p == MAP_FAILED) {
    pinned_bytes_.fetch_sub(int64_t(bytes));
    return absl::ResourceExhaustedError(
        absl::StrFormat("emulated pinning of %s failed: %s", FormatBytes(bytes),
                        strerror(error)));
  }
  return p;
}

absl::Status EmulatedPinningBackend::Unpin(void* ptr, size_t bytes) {
  unpin_calls_.fetch_add(1);
  if (config_.lock) munlock(ptr, bytes);
  if (munmap(ptr, bytes) != 0) {
    return absl::InternalError(absl::StrFormat(
        "emulated unpin: munmap(%p, %d): %s", ptr, bytes, strerror(errno)));
  }
  pinned_bytes_.fetch_sub(int64_t(bytes));
  return absl::OkStatus();
}

}  // namespace fragfree
