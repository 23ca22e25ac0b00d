// LeaseTable: who has an exported block open, in memory the producer shares
// with its consumers (docs/ipc.md, "Lifetime"). The producer creates one memfd
// of fixed-size slots per device allocator; each export owns a slot while it
// lives. A slot's `state` word is (export id << 1) | accepting: consumers may
// open the export only while it says their id and accepting. A consumer that
// opens claims one opener word (its pid and its start time, packed, so one CAS
// claims or frees it); closing clears it. The producer reads the words to
// decide whether anyone still has the block mapped, and clears the words of
// processes that have died (start time no longer matches /proc/<pid>/stat).
//
// Open protocol (a Dekker pair on seq_cst atomics): the consumer checks
// state, claims a word, then checks state again and backs out if it changed;
// the producer stops accepting, then reads the words. Either the producer sees
// the claim or the consumer sees the stop, so a block is never freed under a
// consumer that went on to map it.
// Thread-safety: the producer side is guarded by the owning allocator's lock;
// words shared with other processes are only touched through atomics.
#ifndef FRAGFREE_ALLOCATOR_IPC_LEASE_TABLE_H_
#define FRAGFREE_ALLOCATOR_IPC_LEASE_TABLE_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/metadata_arena.h"

namespace fragfree {

inline constexpr int kLeaseOpeners = 14;  // processes that may hold one export

struct LeaseSlot {
  std::atomic<uint64_t> state;  // (export id << 1) | accepting; 0: unused
  std::atomic<uint64_t> openers[kLeaseOpeners + 1];  // last: unused padding
};
static_assert(sizeof(LeaseSlot) == 128, "two slots per 256 bytes");
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "lease words are shared between processes");

// The word an opener writes: pid in the low half, start time in the high.
uint64_t OpenerWord(pid_t pid, uint64_t start_time);
// The calling process's start time (clock ticks since boot, /proc/self/stat).
uint64_t SelfStartTime();
// `pid`'s start time, or 0 when no such process runs (a zombie counts as
// gone).
uint64_t ProcessStartTime(pid_t pid);

class LeaseTable : public MetadataObject {
 public:
  static constexpr uint32_t kSlots = 16384;

  static absl::StatusOr<std::unique_ptr<LeaseTable>> Create();
  ~LeaseTable();
  LeaseTable(const LeaseTable&) = delete;
  LeaseTable& operator=(const LeaseTable&) = delete;

  int fd() const { return fd_; }
  size_t bytes() const { return size_t{kSlots} * sizeof(LeaseSlot); }

  // A free slot for export `id`, accepting opens. ResourceExhausted when
  // kSlots exports are alive.
  absl::StatusOr<uint32_t> Acquire(uint64_t id);
  // No new opens of the slot's export.
  void StopAccepting(uint32_t slot);
  // Whether a live process still holds the slot open; words of dead openers
  // are cleared on the way.
  bool HasLiveOpeners(uint32_t slot);
  // The slot is free again. REQUIRES: StopAccepting, and !HasLiveOpeners.
  void Release(uint32_t slot);
  size_t live_slots() const { return live_; }

 private:
  LeaseTable(int fd, LeaseSlot* slots) : fd_(fd), slots_(slots) {}
  const int fd_;
  LeaseSlot* const slots_;
  MetadataVector<uint32_t> free_;  // released slots, reused first
  uint32_t next_ = 0;              // slots below it have been used
  size_t live_ = 0;
};

// The consumer's side: claims and drops an opener word in a producer's table
// mapped from `fd` (this process's duplicate of the producer's memfd).
class LeaseClaim : public MetadataObject {
 public:
  // Maps the table and claims a word of `slot` for export `id`.
  // FailedPrecondition when the export is released or unknown, or every
  // opener word is taken.
  static absl::StatusOr<std::unique_ptr<LeaseClaim>> Claim(int fd, size_t bytes,
                                                           uint32_t slot,
                                                           uint64_t id);
  // Drops the claim and unmaps the table.
  ~LeaseClaim();
  LeaseClaim(const LeaseClaim&) = delete;
  LeaseClaim& operator=(const LeaseClaim&) = delete;

 private:
  LeaseClaim(void* map, size_t bytes, std::atomic<uint64_t>* word,
             uint64_t value)
      : map_(map), bytes_(bytes), word_(word), value_(value) {}
  void* const map_;
  const size_t bytes_;
  std::atomic<uint64_t>* const word_;
  const uint64_t value_;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_IPC_LEASE_TABLE_H_
