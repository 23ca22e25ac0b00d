// The process's pinned host allocator (the ff_host_* C API in host_api.cc) and
// the two hooks through which the LD_PRELOAD interposer
// (shim/preload_pinned.cc) serves cudaHostAlloc / cudaMallocHost / cudaFreeHost
// from it. Thread-safety: every function is thread-safe; the allocator is
// created once.
#ifndef FRAGFREE_SHIM_HOST_API_H_
#define FRAGFREE_SHIM_HOST_API_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/host/host_conf.h"
#include "allocator/host/pinned_allocator.h"

namespace fragfree {

// The process's pinned host allocator, created on first use: the pinning
// backend follows FRAGFREE_CONF's backend (cuda: the CUDA driver; host,
// simulated: the mmap emulation), the tuning FRAGFREE_HOST_CONF. An error
// (not cached: a later call tries again) when it cannot be made.
absl::StatusOr<PinnedHostAllocator*> HostAllocator();
// The allocator if it exists (no creation), else nullptr.
PinnedHostAllocator* ExistingHostAllocator();
// The settings it was made with (FRAGFREE_HOST_CONF).
HostConf HostAllocatorConf();
// The pinned pool's chunks for snapshots ("host_segments", process-wide, in
// every device's snapshot); empty when no pool exists.
std::vector<HostSegmentView> HostSegments();

// Hooks for the LD_PRELOAD interposer. Each returns false when the pinned
// pool does not take the call, and the caller forwards it to the CUDA runtime:
// FRAGFREE_HOST_CONF serve_preload:False, size 0, write-combined flags, the
// pool cannot be made (reported once), or a pointer the pool did not hand out.
// When true, *cuda_error is the cudaError_t to return: 0 (cudaSuccess),
// 1 (cudaErrorInvalidValue) or 2 (cudaErrorMemoryAllocation).
bool ServePinnedHostAlloc(void** ptr, size_t size, unsigned int flags,
                          int* cuda_error);
// A pool pointer freed with cudaFreeHost is reused only after the work issued
// so far on the legacy default stream of the current context has completed
// (cudaFreeHost's own synchronisation); memory used by non-blocking streams
// should also be given to ff_host_record_stream.
bool ServePinnedHostFree(void* ptr, int* cuda_error);

}  // namespace fragfree

#endif  // FRAGFREE_SHIM_HOST_API_H_
