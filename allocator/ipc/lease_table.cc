#include "allocator/ipc/lease_table.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_format.h"

namespace fragfree {
namespace {

absl::Status ErrnoStatus(const char* what) {
  return absl::InternalError(
      absl::StrFormat("fragfree ipc: %s failed: %s", what, strerror(errno)));
}

// Fields 3 (state) and 22 (start time) of /proc/<pid>/stat; false if absent.
bool ReadStat(const char* path, char* state, uint64_t* start_time) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: fields are
  // counted from the last ')'.
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  ++p;
  int field = 2;
  const char* token = p;
  while (*token != '\0' && field < 22) {
    while (*token == ' ') ++token;
    ++field;
    if (field == 3) *state = *token;
    if (field == 22) break;
    while (*token != ' ' && *token != '\0') ++token;
  }
  if (field != 22) return false;
  *start_time = strtoull(token, nullptr, 10);
  return true;
}

}  // namespace

uint64_t OpenerWord(pid_t pid, uint64_t start_time) {
  // A start time of 0 would make the word look like an unknown start time;
  // the kernel never reports 0 for a process started after boot's first tick.
  return (start_time << 32) | uint32_t(pid);
}

uint64_t SelfStartTime() {
  char state = 0;
  uint64_t start = 0;
  return ReadStat("/proc/self/stat", &state, &start) ? start : 0;
}

uint64_t ProcessStartTime(pid_t pid) {
  if (pid <= 0) return 0;
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/stat", int(pid));
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(path, &state, &start)) return 0;
  if (state == 'Z' || state == 'X') return 0;  // exited, not yet reaped
  return start;
}

absl::StatusOr<std::unique_ptr<LeaseTable>> LeaseTable::Create() {
  const int fd = memfd_create("fragfree-ipc-leases", MFD_CLOEXEC);
  if (fd < 0) return ErrnoStatus("memfd_create for the lease table");
  const size_t bytes = size_t{kSlots} * sizeof(LeaseSlot);
  if (ftruncate(fd, off_t(bytes)) != 0) {
    absl::Status s = ErrnoStatus("ftruncate of the lease table");
    close(fd);
    return s;
  }
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    absl::Status s = ErrnoStatus("mmap of the lease table");
    close(fd);
    return s;
  }
  // A fresh memfd reads as zeros: every slot unused, every opener word free.
  return std::unique_ptr<LeaseTable>(
      new LeaseTable(fd, static_cast<LeaseSlot*>(map)));
}

LeaseTable::~LeaseTable() {
  munmap(slots_, bytes());
  close(fd_);
}

absl::StatusOr<uint32_t> LeaseTable::Acquire(uint64_t id) {
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else if (next_ < kSlots) {
    slot = next_++;
  } else {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "fragfree ipc: %d exports are alive; release some (ff_ipc_release) "
        "before exporting more",
        kSlots));
  }
  // Words a backed-out consumer may have left are cleared by HasLiveOpeners
  // before Release, so the slot starts with none.
  slots_[slot].state.store((id << 1) | 1, std::memory_order_seq_cst);
  ++live_;
  return slot;
}

void LeaseTable::StopAccepting(uint32_t slot) {
  const uint64_t s = slots_[slot].state.load(std::memory_order_relaxed);
  slots_[slot].state.store(s & ~uint64_t{1}, std::memory_order_seq_cst);
}

bool LeaseTable::HasLiveOpeners(uint32_t slot) {
  bool live = false;
  for (int i = 0; i < kLeaseOpeners; ++i) {
    std::atomic<uint64_t>& word = slots_[slot].openers[i];
    uint64_t w = word.load(std::memory_order_seq_cst);
    if (w == 0) continue;
    const pid_t pid = pid_t(uint32_t(w));
    const uint64_t start = w >> 32;
    const uint64_t now = ProcessStartTime(pid);
    if (now != 0 && uint32_t(now) == uint32_t(start)) {
      live = true;
    } else {
      // Died without closing: its mapping is gone with it.
      word.compare_exchange_strong(w, 0, std::memory_order_seq_cst);
    }
  }
  return live;
}

void LeaseTable::Release(uint32_t slot) {
  slots_[slot].state.store(0, std::memory_order_seq_cst);
  free_.push_back(slot);
  --live_;
}

absl::StatusOr<std::unique_ptr<LeaseClaim>> LeaseClaim::Claim(int fd,
                                                              size_t bytes,
                                                              uint32_t slot,
                                                              uint64_t id) {
  if (bytes != size_t{LeaseTable::kSlots} * sizeof(LeaseSlot) ||
      slot >= LeaseTable::kSlots) {
    return absl::InvalidArgumentError(
        "fragfree ipc: the handle's lease table does not match this "
        "fragfree's (a handle from another fragfree version?)");
  }
  void* map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return ErrnoStatus("mmap of the producer's leases");
  LeaseSlot& s = static_cast<LeaseSlot*>(map)[slot];
  const uint64_t want = (id << 1) | 1;
  auto released = [&] {
    munmap(map, bytes);
    return absl::FailedPreconditionError(absl::StrFormat(
        "fragfree ipc: export %d was released by the producer (or its block "
        "freed): it can no longer be opened",
        id));
  };
  if (s.state.load(std::memory_order_seq_cst) != want) return released();
  const uint64_t mine = OpenerWord(getpid(), SelfStartTime());
  for (int i = 0; i < kLeaseOpeners; ++i) {
    uint64_t expected = 0;
    if (!s.openers[i].compare_exchange_strong(expected, mine,
                                              std::memory_order_seq_cst)) {
      continue;
    }
    if (s.state.load(std::memory_order_seq_cst) != want) {
      s.openers[i].store(0, std::memory_order_seq_cst);
      return released();
    }
    return std::unique_ptr<LeaseClaim>(
        new LeaseClaim(map, bytes, &s.openers[i], mine));
  }
  munmap(map, bytes);
  return absl::FailedPreconditionError(absl::StrFormat(
      "fragfree ipc: export %d is open %d times already (the most one export "
      "can be); export the block once per consumer",
      id, kLeaseOpeners));
}

LeaseClaim::~LeaseClaim() {
  uint64_t expected = value_;
  word_->compare_exchange_strong(expected, 0, std::memory_order_seq_cst);
  munmap(map_, bytes_);
}

}  // namespace fragfree
