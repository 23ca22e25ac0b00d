// IpcState: one device allocator's sharing records (docs/ipc.md): the blocks
// it exported (with their exports and lease slots) and the blocks of other
// processes it has opened (their VA, imported handles and lease claims). The
// logic is DeviceAllocator's (device_allocator_ipc.cc); this is its data.
// Invariants: an export is in `exports` until its block is freed; a block is in
// `blocks` while it has an export; an exported block stays allocated in its
// arena (so its pages stay mapped under it: never unmapped, moved or reused)
// until its record is dropped. The object is on the metadata arena.
// Thread-safety: guarded by the owning DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_IPC_IPC_STATE_H_
#define FRAGFREE_ALLOCATOR_IPC_IPC_STATE_H_

#include <cstdint>
#include <memory>

#include "allocator/base/metadata_arena.h"
#include "allocator/base/metadata_containers.h"
#include "allocator/ipc/lease_table.h"
#include "allocator/phys/backend.h"

namespace fragfree {

struct IpcState : public MetadataObject {
  explicit IpcState(PhysicalBackend* b) : backend(b) {}
  // Unmaps and releases what is still open here; closes handle files.
  ~IpcState();

  PhysicalBackend* const backend;
  std::unique_ptr<LeaseTable> leases;  // made on the first export

  struct Export {
    uintptr_t block = 0;
    uint32_t slot = 0;
    bool released = false;         // no new opens
    bool release_on_free = false;  // released by the block's Free
    // A sealed memfd with the full handle, for compact handles
    // (allocator/ipc/compact_handle.h); open only while the export accepts
    // opens, else -1.
    int handle_file = -1;
  };
  MetadataFlatHashMap<uint64_t, Export> exports;  // by export id
  struct Exported {
    MetadataVector<uint64_t> exports;
    bool producer_freed = false;
  };
  MetadataFlatHashMap<uintptr_t, Exported> blocks;  // by block address

  struct Import {
    uintptr_t base = 0;  // VA reserved and mapped: [base, base + mapped)
    size_t mapped = 0;
    uintptr_t ptr = 0;  // the block's bytes
    size_t size = 0;
    size_t page_size = 0;
    MetadataVector<PhysHandle> handles;
    std::unique_ptr<LeaseClaim> claim;  // null for a stock PyTorch handle
  };
  MetadataBtreeMap<uintptr_t, Import> imports;  // by base
};

// Process-unique export ids (never 0, never reused).
uint64_t NextIpcExportId();

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_IPC_IPC_STATE_H_
