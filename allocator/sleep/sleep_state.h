// SleepState: what one DeviceAllocator knows about region tags (docs/sleep.md):
// per tag, the slots that serve its allocations (one per stream, each with
// its own arenas, so that a tag's pages are never shared with another tag or
// with untagged memory), whether it is paused, and its host backup while
// paused. The engine's sleep code (device_allocator_sleep.cc) owns the
// policy; this is its state. Thread-safety: guarded by the owning
// DeviceAllocator's lock.
#ifndef FRAGFREE_ALLOCATOR_SLEEP_SLEEP_STATE_H_
#define FRAGFREE_ALLOCATOR_SLEEP_SLEEP_STATE_H_

#include <memory>
#include <string>

#include "allocator/base/metadata_arena.h"
#include "allocator/base/metadata_containers.h"
#include "allocator/base/stream_handle.h"
#include "allocator/sleep/backup.h"
#include "allocator/sleep/region_tags.h"
#include "allocator/sleep/sleep_timing.h"

namespace fragfree {

class Arena;

// A piece of a backup in progress: once copy `ticket` completes, the pages of
// `arena` wholly below `end` hold nothing more to copy.
struct BackupMark {
  Arena* arena;
  uintptr_t end;
  uint64_t ticket;
};

struct TagSleepState {
  // Stream -> the slot serving this tag's allocations on it (live streams
  // only: a retired stream's slot keeps its arenas until they empty, but
  // serves nothing new).
  MetadataFlatHashMap<StreamHandle, uint32_t> slots;
  bool paused = false;
  // Set while paused with a CPU backup whose contents are kept.
  std::unique_ptr<Backup> backup;
};

struct SleepState {
  // Made on the first CPU backup; kept for the device's lifetime (its streams
  // are reused). Declared before `tags`: it outlives every backup.
  std::unique_ptr<BackupCopier> copier;
  // Backup chunks kept by resume(keep_backup) for later pauses; declared
  // after the copier (it frees with it) and before `tags` (a backup gives
  // chunks back to it).
  BackupPool pool;
  MetadataVector<TagSleepState> tags;  // by RegionTag
  int64_t num_pauses = 0;
  int64_t num_resumes = 0;
  int64_t num_resume_failures = 0;
  // Where the last Pause and the last Resume spent their time.
  PauseTimes last_pause;
  ResumeTimes last_resume;

  TagSleepState& For(RegionTag tag) {
    if (tags.size() <= tag) tags.resize(size_t(tag) + 1);
    return tags[tag];
  }
  bool IsPaused(RegionTag tag) const {
    return tag < tags.size() && tags[tag].paused;
  }
};

// One tag on one device, for ff_paused_json and tests.
struct TagSleepInfo {
  RegionTag tag = kNoRegionTag;
  std::string name;
  bool paused = false;
  size_t live_bytes = 0;    // allocated in the tag (rounded sizes)
  size_t live_blocks = 0;   // allocations in the tag
  size_t mapped_bytes = 0;  // pages mapped in the tag's arenas now
  size_t backup_bytes = 0;  // host bytes holding its backup
  size_t arenas = 0;
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_SLEEP_SLEEP_STATE_H_
