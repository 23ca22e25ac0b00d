// CompactHandle (compact_handle.h): the 64-byte encoding and the producer's
// handle file.
#include "allocator/ipc/compact_handle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocator/ipc/ipc_handle.h"
#include "allocator/ipc/producer_fds.h"

namespace fragfree {
namespace {

constexpr char kMagic[8] = {'F', 'F', 'C', 'U', 'I', 'P', 'C', '1'};

struct Wire {
  char magic[8];
  int32_t pid;
  int32_t handle_fd;
  uint64_t start_time;
  uint64_t export_id;
  int32_t device;
  uint32_t handle_bytes;
  uint64_t block_size;
  uint64_t reserved[2];
};
static_assert(sizeof(Wire) == kCompactHandleBytes, "cudaIpcMemHandle_t size");

// Full handles are a few bytes per page; anything larger is not one.
constexpr uint32_t kMaxHandleBytes = 64u << 20;

absl::Status ErrnoError(const char* what) {
  return absl::InternalError(
      absl::StrFormat("fragfree ipc: %s: %s", what, strerror(errno)));
}

}  // namespace

void EncodeCompactHandle(const CompactHandle& h,
                         char out[kCompactHandleBytes]) {
  Wire w{};
  memcpy(w.magic, kMagic, sizeof(kMagic));
  w.pid = int32_t(h.pid);
  w.handle_fd = h.handle_fd;
  w.start_time = h.start_time;
  w.export_id = h.export_id;
  w.device = h.device;
  w.handle_bytes = h.handle_bytes;
  w.block_size = h.block_size;
  memcpy(out, &w, sizeof(w));
}

bool IsCompactHandle(const char bytes[kCompactHandleBytes]) {
  return memcmp(bytes, kMagic, sizeof(kMagic)) == 0;
}

absl::StatusOr<CompactHandle> DecodeCompactHandle(
    const char bytes[kCompactHandleBytes]) {
  Wire w;
  memcpy(&w, bytes, sizeof(w));
  auto bad = [](const char* what) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fragfree ipc: not a valid fragfree IPC memory handle: %s", what));
  };
  if (memcmp(w.magic, kMagic, sizeof(kMagic)) != 0) return bad("no magic");
  if (w.pid <= 0) return bad("bad producer pid");
  if (w.handle_fd < 0) return bad("bad descriptor");
  if (w.start_time == 0) return bad("no producer start time");
  if (w.export_id == 0) return bad("no export id");
  if (w.device < 0) return bad("bad device");
  if (w.handle_bytes == 0 || w.handle_bytes > kMaxHandleBytes) {
    return bad("bad handle size");
  }
  if (w.reserved[0] != 0 || w.reserved[1] != 0)
    return bad("reserved bytes set");
  CompactHandle h;
  h.pid = w.pid;
  h.handle_fd = w.handle_fd;
  h.start_time = w.start_time;
  h.export_id = w.export_id;
  h.device = w.device;
  h.handle_bytes = w.handle_bytes;
  h.block_size = w.block_size;
  return h;
}

absl::StatusOr<int> MakeHandleFile(std::string_view full_handle) {
  const int fd =
      memfd_create("fragfree-ipc-handle", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ErrnoError("memfd_create for a handle file");
  size_t done = 0;
  while (done < full_handle.size()) {
    const ssize_t n =
        write(fd, full_handle.data() + done, full_handle.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = ErrnoError("writing a handle file");
      close(fd);
      return s;
    }
    done += size_t(n);
  }
  // Consumers read it; nobody may change it.
  if (fcntl(fd, F_ADD_SEALS,
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    absl::Status s = ErrnoError("sealing a handle file");
    close(fd);
    return s;
  }
  return fd;
}

absl::StatusOr<std::string> FetchFullHandle(const CompactHandle& h) {
  absl::StatusOr<ProducerFds> producer = ProducerFds::Open(h.pid, h.start_time);
  if (!producer.ok()) return producer.status();
  absl::StatusOr<int> fd = producer->Take(h.handle_fd);
  if (!fd.ok()) return fd.status();
  auto released = [&] {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fragfree ipc: export %d of process %d was released (its block was "
        "freed): the handle can no longer be opened",
        h.export_id, int(h.pid)));
  };
  // The descriptor must still be this export's sealed handle file: once the
  // export is released its number may hold any other file.
  struct stat st;
  const int seals = fcntl(*fd, F_GET_SEALS);
  if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      uint64_t(st.st_size) != h.handle_bytes || seals < 0 ||
      (seals & F_SEAL_WRITE) == 0) {
    close(*fd);
    return released();
  }
  std::string bytes(h.handle_bytes, '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        pread(*fd, bytes.data() + done, bytes.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  close(*fd);
  if (done != bytes.size()) return released();
  absl::StatusOr<IpcHandle> full = DecodeIpcHandle(bytes);
  if (!full.ok() || !full->has_trailer || full->export_id != h.export_id ||
      full->pid != h.pid || full->producer_start_time != h.start_time) {
    return released();
  }
  return bytes;
}

}  // namespace fragfree
