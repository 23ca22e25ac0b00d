#include "allocator/ipc/ipc_state.h"

#include <unistd.h>

#include <atomic>

namespace fragfree {

uint64_t NextIpcExportId() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

IpcState::~IpcState() {
  for (auto& [id, e] : exports) {
    if (e.handle_file >= 0) close(e.handle_file);
  }
  // The allocator is going away with blocks of other processes still open
  // here: give the pages back (the producers' leases see this process's
  // claims dropped below).
  for (auto& [base, im] : imports) {
    for (size_t i = 0; i < im.handles.size(); ++i) {
      backend->Unmap(base + i * im.page_size, im.page_size).IgnoreError();
      backend->Release(im.handles[i]).IgnoreError();
    }
    backend->ReleaseVa(base, im.mapped).IgnoreError();
  }
}

}  // namespace fragfree
