// DeviceAllocator's sharing of blocks with other processes (docs/ipc.md): the
// exporting side (IpcExportBlock, IpcRelease, IpcSweep and the Free hook
// IpcDeferFree), the importing side (IpcOpen, IpcClose) and AddressRange.
// The records are in allocator/ipc/ipc_state.h; the wire format in
// allocator/ipc/ipc_handle.h; who has an export open in
// allocator/ipc/lease_table.h. Thread-safety: as DeviceAllocator (mu_).
#include <unistd.h>

#include "absl/strings/str_format.h"
#include "allocator/device_allocator.h"
#include "allocator/ipc/compact_handle.h"
#include "allocator/ipc/ipc_handle.h"
#include "allocator/ipc/ipc_state.h"
#include "allocator/ipc/lease_table.h"
#include "allocator/ipc/producer_fds.h"

namespace fragfree {

void IpcStateDeleter::operator()(IpcState* state) const { delete state; }

namespace {

// Whether every export of `b` is released and nobody alive has one open.
bool Freeable(IpcState& ipc, const IpcState::Exported& b) {
  if (!b.producer_freed) return false;
  for (uint64_t id : b.exports) {
    const IpcState::Export& e = ipc.exports.at(id);
    if (!e.released || ipc.leases->HasLiveOpeners(e.slot)) return false;
  }
  return true;
}

// No new opens of `e`: its lease slot stops accepting and its handle file
// (the target of compact handles) is closed.
void StopExport(IpcState& ipc, IpcState::Export& e) {
  ipc.leases->StopAccepting(e.slot);
  e.released = true;
  if (e.handle_file >= 0) {
    close(e.handle_file);
    e.handle_file = -1;
  }
}

void DropRecords(IpcState& ipc, uintptr_t block) {
  auto it = ipc.blocks.find(block);
  for (uint64_t id : it->second.exports) {
    IpcState::Export& e = ipc.exports.at(id);
    if (e.handle_file >= 0) close(e.handle_file);
    ipc.leases->Release(e.slot);
    ipc.exports.erase(id);
  }
  ipc.blocks.erase(it);
}

// The export of `block` to hand out: with `release_on_free`, a live one made
// the same way if there is one; else a new one, with a lease slot. On failure
// the records are as they were.
absl::StatusOr<uint64_t> ExportIdFor(IpcState& ipc, uintptr_t block,
                                     bool release_on_free) {
  IpcState::Exported& exported = ipc.blocks[block];
  uint64_t id = 0;
  if (release_on_free) {
    for (uint64_t e : exported.exports) {
      const IpcState::Export& rec = ipc.exports.at(e);
      if (rec.release_on_free && !rec.released) id = e;
    }
  }
  if (id == 0) {
    id = NextIpcExportId();
    absl::StatusOr<uint32_t> slot = ipc.leases->Acquire(id);
    if (!slot.ok()) {
      if (exported.exports.empty()) ipc.blocks.erase(block);
      return slot.status();
    }
    ipc.exports[id] = IpcState::Export{block, *slot, false, release_on_free};
    exported.exports.push_back(id);
  }
  return id;
}

// Drops export `id`, the last one ExportIdFor made for `block`, and the
// block's record if it was its only export.
void DropNewExport(IpcState& ipc, uintptr_t block, uint64_t id) {
  IpcState::Exported& exported = ipc.blocks.at(block);
  IpcState::Export& rec = ipc.exports.at(id);
  StopExport(ipc, rec);
  if (exported.exports.size() == 1) {
    DropRecords(ipc, block);
  } else {
    ipc.leases->Release(rec.slot);
    exported.exports.pop_back();
    ipc.exports.erase(id);
  }
}

// Whether handle `h` can be opened on `device`, whose own mapping granularity
// is `granularity` (the producer's pages may be larger or smaller than this
// engine's, page_size_mb being a per-process option).
absl::Status CheckHandleFits(const IpcHandle& h, int device,
                             size_t granularity) {
  if (h.has_trailer && h.device != device) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragfree ipc: the handle is for device %d, not device %d", h.device,
        device));
  }
  if (h.page_size % granularity != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragfree ipc: the handle's pages (%d bytes) are not a multiple of "
        "this device's granularity (%d)",
        h.page_size, granularity));
  }
  return absl::OkStatus();
}

// A claim on the export's lease slot (null for a handle without a trailer:
// stock PyTorch's).
absl::StatusOr<std::unique_ptr<LeaseClaim>> ClaimLease(
    const ProducerFds& producer, const IpcHandle& h) {
  if (!h.has_trailer) return nullptr;
  absl::StatusOr<int> lease_fd = producer.Take(h.lease_fd);
  if (!lease_fd.ok()) return lease_fd.status();
  absl::StatusOr<std::unique_ptr<LeaseClaim>> c =
      LeaseClaim::Claim(*lease_fd, h.lease_bytes, h.lease_slot, h.export_id);
  close(*lease_fd);  // the mapping keeps the table
  return c;
}

void CloseFds(const MetadataVector<int>& fds) {
  for (int fd : fds) close(fd);
}

// This process's descriptors of the handle's pages, in order; on failure,
// none is left open.
absl::StatusOr<MetadataVector<int>> TakePageFds(const ProducerFds& producer,
                                                const IpcHandle& h) {
  MetadataVector<int> fds;
  for (const IpcHandle::Page& p : h.pages) {
    absl::StatusOr<int> fd = producer.Take(p.fd);
    if (!fd.ok()) {
      CloseFds(fds);
      return fd.status();
    }
    fds.push_back(*fd);
  }
  return fds;
}

// Imports the pages behind `fds` (left open) into im->handles, stopping at
// the first failure; what was imported stays there for UndoImport.
absl::Status ImportPages(PhysicalBackend& backend, const IpcHandle& h,
                         const MetadataVector<int>& fds, IpcState::Import* im) {
  for (size_t i = 0; i < fds.size(); ++i) {
    absl::StatusOr<PhysHandle> handle =
        backend.Import(fds[i], h.pages[i].offset, h.page_size);
    if (!handle.ok()) return handle.status();
    im->handles.push_back(*handle);
  }
  return absl::OkStatus();
}

// Reserves im->base and maps im->handles there in order, then sets access;
// *mapped: how many pages were mapped (for UndoImport on failure).
absl::Status MapImportedPages(PhysicalBackend& backend, IpcState::Import* im,
                              size_t* mapped) {
  absl::StatusOr<uintptr_t> va = backend.ReserveVa(im->mapped);
  if (!va.ok()) return va.status();
  im->base = *va;
  for (; *mapped < im->handles.size(); ++*mapped) {
    if (absl::Status s = backend.Map(im->base + *mapped * im->page_size,
                                     im->page_size, im->handles[*mapped]);
        !s.ok()) {
      return s;
    }
  }
  return backend.SetAccess(im->base, im->mapped);
}

// Undoes ImportPages and MapImportedPages: unmaps the first `mapped` pages,
// releases every imported handle and the VA (if reserved).
void UndoImport(PhysicalBackend& backend, const IpcState::Import& im,
                size_t mapped) {
  for (size_t i = 0; i < mapped; ++i) {
    backend.Unmap(im.base + i * im.page_size, im.page_size).IgnoreError();
  }
  for (PhysHandle handle : im.handles) {
    backend.Release(handle).IgnoreError();
  }
  if (im.base != 0) backend.ReleaseVa(im.base, im.mapped).IgnoreError();
}

}  // namespace

const Block* DeviceAllocator::LiveBlockContaining(uintptr_t addr) const {
  for (const auto& arena : arenas_) {
    if (!arena->Contains(addr)) continue;
    const Block* b = arena->BlockContaining(addr);
    if (b == nullptr || b->state != BlockState::kAllocated) return nullptr;
    return live_.Find(b->addr) != nullptr ? b : nullptr;
  }
  return nullptr;
}

absl::StatusOr<const Block*> DeviceAllocator::ExportableBlock(
    const void* ptr) const {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  const Block* block = LiveBlockContaining(addr);
  if (block == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragfree ipc: %p is not inside a live fragfree allocation on device "
        "%d",
        ptr, device_));
  }
  if (ipc_ != nullptr) {
    auto b = ipc_->blocks.find(block->addr);
    if (b != ipc_->blocks.end() && b->second.producer_freed) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fragfree ipc: %p was freed (its memory is only kept for the "
          "processes that opened it): it cannot be exported again",
          ptr));
    }
  }
  if (!backend_->CanExport()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fragfree ipc: the %s backend cannot share pages with other "
        "processes",
        backend_->Name()));
  }
  return block;
}

absl::Status DeviceAllocator::EnsureIpcExportState() {
  if (ipc_ == nullptr) {
    ipc_.reset(new IpcState(backend_.get()));
  }
  if (ipc_->leases == nullptr) {
    absl::StatusOr<std::unique_ptr<LeaseTable>> t = LeaseTable::Create();
    if (!t.ok()) return t.status();
    ipc_->leases = std::move(*t);
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::DescribeBlockForExport(const Block& block,
                                                     IpcHandle* h) {
  h->pid = getpid();
  h->page_size = block.arena->page_size();
  h->producer_start_time = SelfStartTime();
  h->device = device_;
  h->block_offset = block.addr - block.arena->PageStart(block.addr);
  h->block_size = block.size;
  h->lease_fd = ipc_->leases->fd();
  h->lease_bytes = ipc_->leases->bytes();
  PageList pages;
  block.arena->PagesUnder(block.addr, block.size, &pages);
  for (PageId page : pages) {
    if (page == kNoPage) {
      return absl::InternalError(
          "fragfree ipc: a live block lies over an unmapped page");
    }
    absl::StatusOr<SharedPage> shared =
        backend_->Export(DomainOf(block.arena).pool().handle(page));
    if (!shared.ok()) return shared.status();
    h->pages.push_back({shared->fd, shared->offset});
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceAllocator::IpcExport> DeviceAllocator::IpcExportBlock(
    const void* ptr, bool release_on_free, bool handle_file) {
  MutexLock lock(&mu_);
  absl::StatusOr<const Block*> found = ExportableBlock(ptr);
  if (!found.ok()) return found.status();
  const Block* block = *found;
  if (absl::Status s = EnsureIpcExportState(); !s.ok()) return s;
  IpcHandle h;
  if (absl::Status s = DescribeBlockForExport(*block, &h); !s.ok()) return s;
  absl::StatusOr<uint64_t> id =
      ExportIdFor(*ipc_, block->addr, release_on_free);
  if (!id.ok()) return id.status();
  IpcState::Export& rec = ipc_->exports.at(*id);
  h.export_id = *id;
  h.lease_slot = rec.slot;
  std::string encoded = EncodeIpcHandle(h);
  if (handle_file && rec.handle_file < 0) {
    absl::StatusOr<int> fd = MakeHandleFile(encoded);
    if (!fd.ok()) {
      if (!release_on_free) {  // an export made for this call goes again
        DropNewExport(*ipc_, block->addr, *id);
      }
      return fd.status();
    }
    rec.handle_file = *fd;
  }
  IpcExport out;
  out.handle_file = handle_file ? rec.handle_file : -1;
  out.id = *id;
  out.block = block->addr;
  out.block_size = block->size;
  out.first_page = block->arena->PageStart(block->addr);
  out.handle = std::move(encoded);
  return out;
}

absl::StatusOr<bool> DeviceAllocator::IpcDeferFree(uintptr_t addr) {
  auto it = ipc_->blocks.find(addr);
  if (it == ipc_->blocks.end()) return false;
  if (it->second.producer_freed) {
    ++stats_.invalid_frees;
    return absl::InvalidArgumentError(absl::StrFormat(
        "free of %#x: already freed (double free); its memory is only kept "
        "for the processes that opened its IPC export",
        addr));
  }
  it->second.producer_freed = true;
  for (uint64_t id : it->second.exports) {
    IpcState::Export& e = ipc_->exports.at(id);
    if (e.release_on_free && !e.released) StopExport(*ipc_, e);
  }
  if (!Freeable(*ipc_, it->second)) return true;
  DropRecords(*ipc_, addr);
  return false;
}

void DeviceAllocator::IpcCollectFreeable(MetadataVector<uintptr_t>* out) {
  if (ipc_ == nullptr) return;
  for (const auto& [addr, b] : ipc_->blocks) {
    if (Freeable(*ipc_, b)) out->push_back(addr);
  }
  for (uintptr_t addr : *out) DropRecords(*ipc_, addr);
}

absl::Status DeviceAllocator::IpcRelease(uint64_t id) {
  MetadataVector<uintptr_t> freeable;
  {
    MutexLock lock(&mu_);
    auto it = ipc_ == nullptr ? decltype(ipc_->exports)::iterator()
                              : ipc_->exports.find(id);
    if (ipc_ == nullptr || it == ipc_->exports.end()) {
      return absl::NotFoundError(absl::StrFormat(
          "fragfree ipc: no export %d on device %d (its block was freed after "
          "every holder let go, or it was never made)",
          id, device_));
    }
    if (it->second.released) {
      return absl::InvalidArgumentError(
          absl::StrFormat("fragfree ipc: export %d was already released", id));
    }
    StopExport(*ipc_, it->second);
    IpcCollectFreeable(&freeable);
  }
  // Their records are gone, so these are ordinary frees now.
  absl::Status status;
  for (uintptr_t addr : freeable) {
    status.Update(Free(reinterpret_cast<void*>(addr)));
  }
  return status;
}

absl::Status DeviceAllocator::IpcSweep() {
  MetadataVector<uintptr_t> freeable;
  {
    MutexLock lock(&mu_);
    IpcCollectFreeable(&freeable);
  }
  absl::Status status;
  for (uintptr_t addr : freeable) {
    status.Update(Free(reinterpret_cast<void*>(addr)));
  }
  return status;
}

size_t DeviceAllocator::IpcLiveExports() const {
  MutexLock lock(&mu_);
  return ipc_ == nullptr ? 0 : ipc_->exports.size();
}

absl::StatusOr<DeviceAllocator::IpcMapping> DeviceAllocator::IpcOpen(
    std::string_view bytes) {
  absl::StatusOr<IpcHandle> decoded = DecodeIpcHandle(bytes);
  if (!decoded.ok()) return decoded.status();
  const IpcHandle& h = *decoded;
  if (absl::Status s =
          CheckHandleFits(h, device_, backend_->DeviceGranularity());
      !s.ok()) {
    return s;
  }
  absl::StatusOr<ProducerFds> producer =
      ProducerFds::Open(h.pid, h.has_trailer ? h.producer_start_time : 0);
  if (!producer.ok()) return producer.status();
  absl::StatusOr<std::unique_ptr<LeaseClaim>> claim = ClaimLease(*producer, h);
  if (!claim.ok()) return claim.status();
  absl::StatusOr<MetadataVector<int>> fds = TakePageFds(*producer, h);
  if (!fds.ok()) return fds.status();
  MutexLock lock(&mu_);
  IpcState::Import im;
  im.page_size = h.page_size;
  im.mapped = h.page_size * h.pages.size();
  absl::Status status = ImportPages(*backend_, h, *fds, &im);
  CloseFds(*fds);  // an imported handle keeps what it needs
  size_t mapped = 0;
  if (status.ok()) status = MapImportedPages(*backend_, &im, &mapped);
  if (!status.ok()) {  // undo: nothing of the handle stays mapped here
    UndoImport(*backend_, im, mapped);
    return status;
  }
  im.ptr = im.base + h.block_offset;
  im.size = h.block_size;
  im.claim = std::move(*claim);
  if (ipc_ == nullptr) ipc_.reset(new IpcState(backend_.get()));
  IpcMapping out{im.ptr, im.size, im.base, im.mapped};
  ipc_->imports.emplace(im.base, std::move(im));
  return out;
}

absl::Status DeviceAllocator::IpcClose(const void* ptr) {
  MutexLock lock(&mu_);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = ipc_ == nullptr ? decltype(ipc_->imports)::iterator()
                            : ipc_->imports.upper_bound(addr);
  if (ipc_ == nullptr || it == ipc_->imports.begin() ||
      addr >= std::prev(it)->first + std::prev(it)->second.mapped) {
    return absl::NotFoundError(absl::StrFormat(
        "fragfree ipc: %p is not in a block opened on device %d (closed "
        "twice?)",
        ptr, device_));
  }
  --it;
  IpcState::Import& im = it->second;
  absl::Status status;
  for (size_t i = 0; i < im.handles.size(); ++i) {
    status.Update(backend_->Unmap(im.base + i * im.page_size, im.page_size));
    status.Update(backend_->Release(im.handles[i]));
  }
  status.Update(backend_->ReleaseVa(im.base, im.mapped));
  ipc_->imports.erase(it);  // drops the lease claim
  return status;
}

absl::StatusOr<std::pair<uintptr_t, size_t>> DeviceAllocator::AddressRange(
    const void* ptr) const {
  MutexLock lock(&mu_);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  if (const Block* b = LiveBlockContaining(addr)) {
    return std::make_pair(b->addr, b->size);
  }
  if (ipc_ != nullptr) {
    auto it = ipc_->imports.upper_bound(addr);
    if (it != ipc_->imports.begin()) {
      const IpcState::Import& im = std::prev(it)->second;
      if (addr >= im.ptr && addr < im.ptr + im.size) {
        return std::make_pair(im.ptr, im.size);
      }
    }
  }
  return absl::NotFoundError(absl::StrFormat(
      "%p is not inside memory fragfree handed out on device %d", ptr,
      device_));
}

}  // namespace fragfree
