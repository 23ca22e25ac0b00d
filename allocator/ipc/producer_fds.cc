// ProducerFds (producer_fds.h): pidfd_open / pidfd_getfd with errors that say
// which precondition failed.
#include "allocator/ipc/producer_fds.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "allocator/ipc/lease_table.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace fragfree {

absl::StatusOr<ProducerFds> ProducerFds::Open(pid_t pid, uint64_t start_time) {
  if (pid <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fragfree ipc: %d is not a process id", int(pid)));
  }
  const int pidfd = int(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) {
    if (errno == ENOSYS) {
      return absl::UnimplementedError(
          "fragfree ipc: this kernel has no pidfd_open (Linux 5.6 or newer is "
          "needed to share memory between processes)");
    }
    return absl::FailedPreconditionError(absl::StrFormat(
        "fragfree ipc: the producer process %d is gone (pidfd_open: %s)",
        int(pid), strerror(errno)));
  }
  ProducerFds out(pid, pidfd);
  if (start_time != 0 && ProcessStartTime(pid) != start_time) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fragfree ipc: the producer process %d is gone", int(pid)));
  }
  return out;
}

ProducerFds::~ProducerFds() {
  if (pidfd_ >= 0) close(pidfd_);
}

absl::StatusOr<int> ProducerFds::Take(int remote) const {
  const long fd = syscall(SYS_pidfd_getfd, pidfd_, remote, 0);
  if (fd >= 0) return int(fd);
  const int err = errno;
  if (err == EPERM) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "fragfree ipc: pidfd_getfd(pid %d, fd %d): not permitted. The "
        "consumer needs ptrace access to the producer: same user, and with "
        "kernel.yama.ptrace_scope=1 only a process's ancestors (or a ptracer "
        "it declared with prctl(PR_SET_PTRACER)) qualify; see docs/ipc.md",
        int(pid_), remote));
  }
  if (err == EBADF) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fragfree ipc: the producer (pid %d) no longer has descriptor %d: "
        "the export was released and its memory freed",
        int(pid_), remote));
  }
  if (err == ENOSYS) {
    return absl::UnimplementedError(
        "fragfree ipc: this kernel has no pidfd_getfd (Linux 5.6 or newer is "
        "needed to share memory between processes)");
  }
  return absl::InternalError(
      absl::StrFormat("fragfree ipc: pidfd_getfd(pid %d, fd %d) failed: %s",
                      int(pid_), remote, strerror(err)));
}

}  // namespace fragfree
