// PinningBackend: where page-locked ("pinned") host memory comes from, one
// large range at a time. Two implementations: CudaPinningBackend
// (cuda_host.h: cuMemHostAlloc, or mmap + cuMemHostRegister) on a GPU, and
// EmulatedPinningBackend here (mmap, optionally populated and mlock'ed), which
// counts its calls and can be given a capacity so that every policy of the
// pinned allocator, out of memory included, is tested without a GPU.
// Backends are MetadataObjects: `new` puts them on the metadata arena.
// Thread-safety: implementations are thread-safe (Pin/Unpin may run
// concurrently; the pinned allocator calls them without holding its lock).
#ifndef FRAGFREE_ALLOCATOR_HOST_PINNING_BACKEND_H_
#define FRAGFREE_ALLOCATOR_HOST_PINNING_BACKEND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/metadata_arena.h"

namespace fragfree {

class PinningBackend : public MetadataObject {
 public:
  virtual ~PinningBackend() = default;
  // `bytes` (a multiple of granularity()) of pinned host memory, aligned to
  // granularity(). ResourceExhausted when the memory cannot be had.
  [[nodiscard]] virtual absl::StatusOr<void*> Pin(size_t bytes) = 0;
  // Releases a range returned by Pin, whole.
  [[nodiscard]] virtual absl::Status Unpin(void* ptr, size_t bytes) = 0;
  // The unit of Pin sizes and alignment (the host page size).
  virtual size_t granularity() const = 0;
  // "emulated (mmap)", "cuda (cuMemHostAlloc)", ...
  virtual std::string name() const = 0;
  // True when the memory is really page-locked for DMA by a GPU.
  virtual bool is_cuda() const = 0;
};

class EmulatedPinningBackend final : public PinningBackend {
 public:
  struct Config {
    bool populate = true;       // MAP_POPULATE: pay for the pages at Pin, as
                                // pinning does
    bool lock = false;          // mlock the range (needs RLIMIT_MEMLOCK)
    size_t capacity_bytes = 0;  // 0: unlimited; else Pin fails beyond it
  };
  EmulatedPinningBackend() : EmulatedPinningBackend(Config()) {}
  explicit EmulatedPinningBackend(Config config);

  absl::StatusOr<void*> Pin(size_t bytes) override;
  absl::Status Unpin(void* ptr, size_t bytes) override;
  size_t granularity() const override { return page_size_; }
  std::string name() const override;
  bool is_cuda() const override { return false; }

  // What the tests check: calls made and bytes held now.
  int64_t pin_calls() const { return pin_calls_.load(); }
  int64_t unpin_calls() const { return unpin_calls_.load(); }
  int64_t pinned_bytes() const { return pinned_bytes_.load(); }

 private:
  const Config config_;
  const size_t page_size_;
  std::atomic<int64_t> pin_calls_{0};
  std::atomic<int64_t> unpin_calls_{0};
  std::atomic<int64_t> pinned_bytes_{0};
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_HOST_PINNING_BACKEND_H_
