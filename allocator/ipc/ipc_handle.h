// IpcHandle: the bytes that describe an exported block to another process.
// Layout (docs/ipc.md, "Handle format"): PyTorch's expandable-segment handle,
// so that stock PyTorch can open it, then fragfree's trailer:
//   [0]  version (2, PyTorch's SHAREABLE_HANDLE_VERSION)
//   [1]  'e' (SHAREABLE_CUDA_EXPANDABLE_SEGMENT)
//   PyTorch's ShareHeader {int32 pid; (4 bytes padding); uint64 segment_size;
//   uint64 num_handles} then num_handles int32 fds (numbers in the producer)
//   "FFIPC01\0", then IpcTrailer, then num_handles uint64 page offsets.
// A handle without the trailer (from stock PyTorch) decodes too: no lease,
// no device check, the block is the whole range of pages.
// Thread-safety: value types and pure functions.
#ifndef FRAGFREE_ALLOCATOR_IPC_IPC_HANDLE_H_
#define FRAGFREE_ALLOCATOR_IPC_IPC_HANDLE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace fragfree {

inline constexpr char kTorchHandleVersion = 2;
inline constexpr char kTorchExpandableType = 'e';
inline constexpr char kTorchCudaMallocType = 'c';

struct IpcHandle {
  pid_t pid = 0;           // the producer
  uint64_t page_size = 0;  // every page's size
  struct Page {
    int fd = -1;          // descriptor number in the producer
    uint64_t offset = 0;  // the page's offset in that file
  };
  std::vector<Page> pages;  // in address order
  // fragfree's trailer (false for a stock PyTorch handle).
  bool has_trailer = false;
  uint64_t producer_start_time = 0;
  int32_t device = -1;
  uint64_t export_id = 0;
  uint64_t block_offset = 0;  // block start - first page start
  uint64_t block_size = 0;
  int32_t lease_fd = -1;  // in the producer
  uint32_t lease_slot = 0;
  uint64_t lease_bytes = 0;
};

std::string EncodeIpcHandle(const IpcHandle& handle);
// InvalidArgument naming what is wrong for anything else than a well-formed
// handle ('c' handles of cudaMalloc memory included: they are not fragfree's
// to open).
absl::StatusOr<IpcHandle> DecodeIpcHandle(std::string_view bytes);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_IPC_IPC_HANDLE_H_
