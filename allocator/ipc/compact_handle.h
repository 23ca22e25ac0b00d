// CompactHandle: a 64-byte reference to an IPC export (docs/ipc.md, "CUDA's
// IPC calls"), the size of CUDA's cudaIpcMemHandle_t, for the LD_PRELOAD
// cudaIpcGetMemHandle. The full handle (allocator/ipc/ipc_handle.h: page
// descriptors, lease) does not fit in 64 bytes, so the producer writes it to a
// sealed memfd (its "handle file", one per export, open while the export
// accepts opens) and the compact handle names that descriptor; the consumer
// takes it with pidfd_getfd and reads the full handle.
// Layout (little-endian, as the producer's compiler lays it out):
//   [0, 8)   "FFCUIPC1"
//   [8, 12)  int32 producer pid        [12, 16) int32 handle file descriptor
//   [16, 24) uint64 producer start time (/proc/<pid>/stat field 22)
//   [24, 32) uint64 export id
//   [32, 36) int32 device              [36, 40) uint32 full handle's bytes
//   [40, 48) uint64 block size         [48, 64) zero
// Thread-safety: pure functions; FetchFullHandle and MakeHandleFile only touch
// descriptors they create.
#ifndef FRAGFREE_ALLOCATOR_IPC_COMPACT_HANDLE_H_
#define FRAGFREE_ALLOCATOR_IPC_COMPACT_HANDLE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace fragfree {

inline constexpr size_t kCompactHandleBytes = 64;

struct CompactHandle {
  pid_t pid = 0;
  int32_t handle_fd = -1;  // in the producer
  uint64_t start_time = 0;
  uint64_t export_id = 0;
  int32_t device = -1;
  uint32_t handle_bytes = 0;
  uint64_t block_size = 0;
};

void EncodeCompactHandle(const CompactHandle& h, char out[kCompactHandleBytes]);
// Whether `bytes` carry fragfree's magic (anything else is some other
// library's handle, e.g. CUDA's own).
bool IsCompactHandle(const char bytes[kCompactHandleBytes]);
// InvalidArgument naming the bad field for anything but a well-formed handle.
absl::StatusOr<CompactHandle> DecodeCompactHandle(
    const char bytes[kCompactHandleBytes]);

// A sealed memfd (close-on-exec) holding `full_handle`.
absl::StatusOr<int> MakeHandleFile(std::string_view full_handle);
// The full handle `h` refers to, read from the producer's handle file:
// FailedPrecondition when the producer is gone or the export was released
// (its handle file closed, or the descriptor now holds something else),
// PermissionDenied without ptrace access to the producer.
absl::StatusOr<std::string> FetchFullHandle(const CompactHandle& h);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_IPC_COMPACT_HANDLE_H_
