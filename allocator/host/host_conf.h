// HostConf: the settings of fragfree's host side, parsed from
// FRAGFREE_HOST_CONF (same `key:value,...` syntax as FRAGFREE_CONF; which
// backend pins, CUDA or the emulation, follows FRAGFREE_CONF's `backend`).
// Keys (docs/host.md): chunk_mb, release_after_ms, pin (host_alloc |
// register), serve_preload, emulate_populate, emulate_lock,
// emulate_capacity_mb. Unknown keys and bad values are errors naming the key.
// Thread-safety: a value type.
#ifndef FRAGFREE_ALLOCATOR_HOST_HOST_CONF_H_
#define FRAGFREE_ALLOCATOR_HOST_HOST_CONF_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "allocator/host/pinned_allocator.h"
#include "allocator/host/pinning_backend.h"

namespace fragfree {

struct HostConf {
  PinnedOptions pinned;
  bool register_pages = false;  // pin:register (mmap + cuMemHostRegister)
  // The LD_PRELOAD interposer serves cudaHostAlloc/cudaMallocHost/
  // cudaFreeHost from the pinned pool (else it forwards them).
  bool serve_preload = true;
  EmulatedPinningBackend::Config emulation;

  static absl::StatusOr<HostConf> Parse(std::string_view conf);
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_HOST_HOST_CONF_H_
