// ProducerFds: taking descriptors out of another process (the producer of an
// IPC export, docs/ipc.md "Transport") with pidfd_open + pidfd_getfd. The
// pidfd pins the process: once Open has checked its start time, every
// descriptor taken belongs to that producer, not to a later process that
// reused its pid. Errors name the cause (producer gone, descriptor closed, no
// ptrace permission, kernel too old).
// Thread-safety: an instance belongs to one thread; distinct instances are
// independent.
#ifndef FRAGFREE_ALLOCATOR_IPC_PRODUCER_FDS_H_
#define FRAGFREE_ALLOCATOR_IPC_PRODUCER_FDS_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace fragfree {

class ProducerFds {
 public:
  // A pidfd for `pid`. With `start_time` != 0 the process must still be the
  // one that started then (FailedPrecondition otherwise, and when no process
  // has that pid).
  static absl::StatusOr<ProducerFds> Open(pid_t pid, uint64_t start_time);
  ProducerFds(ProducerFds&& other) noexcept
      : pid_(other.pid_), pidfd_(other.pidfd_) {
    other.pidfd_ = -1;
  }
  ProducerFds& operator=(ProducerFds&&) = delete;
  ProducerFds(const ProducerFds&) = delete;
  ~ProducerFds();

  // A duplicate, in this process, of the producer's descriptor `remote`
  // (the caller closes it). PermissionDenied without ptrace access,
  // FailedPrecondition when the producer has no such descriptor.
  absl::StatusOr<int> Take(int remote) const;

 private:
  ProducerFds(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  pid_t pid_;
  int pidfd_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_IPC_PRODUCER_FDS_H_
