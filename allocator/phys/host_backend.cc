#include "allocator/phys/host_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocator/base/units.h"

namespace fragfree {
namespace {
absl::Status ErrnoStatus(const char* what) {
  return absl::InternalError(
      absl::StrFormat("host backend: %s failed: %s", what, strerror(errno)));
}
}  // namespace

absl::StatusOr<std::unique_ptr<HostBackend>> HostBackend::Create(
    size_t capacity, size_t granularity) {
  const size_t os_page = size_t(sysconf(_SC_PAGESIZE));
  if (!IsPowerOfTwo(granularity) || granularity < os_page) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host backend: granularity %d must be a power of two >= the OS page "
        "size (%d)",
        granularity, os_page));
  }
  if (capacity == 0 || capacity % granularity != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host backend: capacity %d must be a positive multiple of the "
        "granularity %d",
        capacity, granularity));
  }
  int fd = memfd_create("fragfree-host-backend", MFD_CLOEXEC);
  if (fd < 0) return ErrnoStatus("memfd_create");
  if (ftruncate(fd, off_t(capacity)) != 0) {
    absl::Status status = ErrnoStatus("ftruncate");
    close(fd);
    return status;
  }
  return std::unique_ptr<HostBackend>(
      new HostBackend(fd, capacity, granularity));
}

HostBackend::HostBackend(int fd, size_t capacity, size_t granularity)
    : fd_(fd),
      capacity_(capacity),
      granularity_(granularity),
      slot_used_(capacity / granularity, false) {}

HostBackend::~HostBackend() {
  for (const auto& [va, size] : reservations_) {
    munmap(reinterpret_cast<void*>(va), size);
  }
  for (const auto& [id, info] : handles_) {
    if (info.import_fd >= 0) close(info.import_fd);
  }
  close(fd_);
}

DeviceMemoryInfo HostBackend::MemoryInfo() const {
  return {capacity_, capacity_ - used_bytes_};
}

absl::Status HostBackend::CheckAligned(const char* call, uintptr_t va,
                                       size_t size) const {
  if (size == 0 || va % granularity_ != 0 || size % granularity_ != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host backend: %s(0x%x, %d): address and size must be non-zero "
        "multiples of the granularity %d",
        call, va, size, granularity_));
  }
  return absl::OkStatus();
}

absl::StatusOr<uintptr_t> HostBackend::ReserveVa(size_t size) {
  if (size == 0 || size % granularity_ != 0) {
    return absl::InvalidArgumentError("host backend: bad VA reservation size");
  }
  // Over-reserve by one granule so the start can be aligned to it.
  void* raw = mmap(nullptr, size + granularity_, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return ErrnoStatus("mmap(PROT_NONE) for VA");
  uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  uintptr_t aligned = AlignUp(start, granularity_);
  if (aligned > start) munmap(raw, aligned - start);
  size_t tail = (start + size + granularity_) - (aligned + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
  reservations_[aligned] = size;
  return aligned;
}

absl::Status HostBackend::ReleaseVa(uintptr_t va, size_t size) {
  auto it = reservations_.find(va);
  if (it == reservations_.end() || it->second != size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host backend: ReleaseVa(0x%x, %d) does not match a reservation", va,
        size));
  }
  auto mapped = mappings_.lower_bound(va);
  if (mapped != mappings_.end() && mapped->first < va + size) {
    return absl::FailedPreconditionError(
        "host backend: ReleaseVa of a range that still has mappings");
  }
  if (munmap(reinterpret_cast<void*>(va), size) != 0) {
    return ErrnoStatus("munmap");
  }
  reservations_.erase(it);
  return absl::OkStatus();
}

ptrdiff_t HostBackend::FindFreeSlots(size_t count) const {
  size_t run = 0;
  for (size_t i = 0; i < slot_used_.size(); ++i) {
    run = slot_used_[i] ? 0 : run + 1;
    if (run == count) return ptrdiff_t(i + 1 - count);
  }
  return -1;
}

absl::StatusOr<PhysHandle> HostBackend::Create(size_t size) {
  if (size == 0 || size % granularity_ != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host backend: Create(%d): size must be a non-zero multiple of %d",
        size, granularity_));
  }
  ptrdiff_t slot = FindFreeSlots(size / granularity_);
  if (slot < 0) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "host backend: out of physical memory (%s of %s in use, asked for %s)",
        FormatBytes(used_bytes_), FormatBytes(capacity_), FormatBytes(size)));
  }
  for (size_t i = 0; i < size / granularity_; ++i) slot_used_[slot + i] = true;
  uint64_t id = next_handle_++;
  handles_[id] = HandleInfo{size_t(slot) * granularity_, size, 0};
  used_bytes_ += size;
  return PhysHandle{id};
}

absl::Status HostBackend::Release(PhysHandle handle) {
  auto it = handles_.find(handle.value);
  if (it == handles_.end()) {
    return absl::InvalidArgumentError(
        "host backend: Release of unknown handle");
  }
  if (it->second.mappings != 0) {
    return absl::FailedPreconditionError(
        "host backend: Release of a handle that is still mapped");
  }
  if (it->second.import_fd >= 0) {  // another process's page: drop our fd
    close(it->second.import_fd);
    handles_.erase(it);
    return absl::OkStatus();
  }
  // Give the pages back to the OS and zero them, as a fresh cuMemCreate would
  // not promise to, but without keeping stale data around.
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            off_t(it->second.offset), off_t(it->second.size));
  for (size_t i = 0; i < it->second.size / granularity_; ++i) {
    slot_used_[it->second.offset / granularity_ + i] = false;
  }
  used_bytes_ -= it->second.size;
  handles_.erase(it);
  return absl::OkStatus();
}

absl::Status HostBackend::Map(uintptr_t va, size_t size, PhysHandle handle) {
  if (absl::Status s = CheckAligned("Map", va, size); !s.ok()) return s;
  auto it = handles_.find(handle.value);
  if (it == handles_.end()) {
    return absl::InvalidArgumentError("host backend: Map of unknown handle");
  }
  if (it->second.size != size) {
    return absl::InvalidArgumentError(
        "host backend: Map size differs from the handle's");
  }
  auto next = mappings_.lower_bound(va);
  if (next != mappings_.end() && next->first < va + size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "host backend: Map at 0x%x overlaps an existing mapping", va));
  }
  if (next != mappings_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + handles_[prev->second].size > va) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "host backend: Map at 0x%x overlaps an existing mapping", va));
    }
  }
  const int fd = it->second.import_fd >= 0 ? it->second.import_fd : fd_;
  void* at = mmap(reinterpret_cast<void*>(va), size, PROT_NONE,
                  MAP_SHARED | MAP_FIXED, fd, off_t(it->second.offset));
  if (at == MAP_FAILED) return ErrnoStatus("mmap(MAP_FIXED) of a handle");
  ++it->second.mappings;
  mappings_[va] = handle.value;
  return absl::OkStatus();
}

absl::Status HostBackend::Unmap(uintptr_t va, size_t size) {
  if (absl::Status s = CheckAligned("Unmap", va, size); !s.ok()) return s;
  // Unmap every mapping in [va, va+size); the range must be exactly covered.
  size_t covered = 0;
  auto it = mappings_.lower_bound(va);
  MetadataVector<decltype(mappings_)::iterator> to_erase;
  for (; it != mappings_.end() && it->first < va + size; ++it) {
    covered += handles_[it->second].size;
    to_erase.push_back(it);
  }
  if (covered != size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "host backend: Unmap(0x%x, %d) covers memory that is not mapped", va,
        size));
  }
  void* at =
      mmap(reinterpret_cast<void*>(va), size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  if (at == MAP_FAILED) return ErrnoStatus("mmap(PROT_NONE) to unmap");
  for (auto& e : to_erase) {
    --handles_[e->second].mappings;
    mappings_.erase(e);
  }
  return absl::OkStatus();
}

absl::Status HostBackend::SetAccess(uintptr_t va, size_t size) {
  if (absl::Status s = CheckAligned("SetAccess", va, size); !s.ok()) return s;
  if (mprotect(reinterpret_cast<void*>(va), size, PROT_READ | PROT_WRITE) !=
      0) {
    return ErrnoStatus("mprotect");
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedPage> HostBackend::Export(PhysHandle handle) {
  auto it = handles_.find(handle.value);
  if (it == handles_.end() || it->second.import_fd >= 0) {
    return absl::InvalidArgumentError(
        "host backend: Export of an unknown or imported handle");
  }
  return SharedPage{fd_, it->second.offset};
}

absl::StatusOr<PhysHandle> HostBackend::Import(int fd, uint64_t offset,
                                               size_t size) {
  if (fd < 0 || size == 0 || size % granularity_ != 0 ||
      offset % granularity_ != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "host backend: Import(fd %d, offset %d, size %d): size and offset "
        "must be multiples of the granularity %d",
        fd, offset, size, granularity_));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus("fstat of an imported page");
  if (uint64_t(st.st_size) < offset + size) {
    return absl::InvalidArgumentError(
        "host backend: Import of a page beyond the end of its file");
  }
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return ErrnoStatus("dup of an imported page");
  const uint64_t id = next_handle_++;
  handles_[id] = HandleInfo{size_t(offset), size, 0, own};
  return PhysHandle{id};
}

}  // namespace fragfree
