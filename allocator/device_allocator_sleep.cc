// DeviceAllocator's sleep and wake (device_allocator.h, docs/sleep.md): the
// slots of region tags, Pause, Resume and their view. A tag's allocations live
// in arenas of their own (one per stream and size kind), so pausing a tag
// unmaps whole arenas and touches no other tag's pages.
// Invariants: a paused tag's arenas cache no block (their QuickCaches are off)
// and nothing is placed in them; their live blocks keep their addresses and
// live-table entries, not their pages. Thread-safety: see device_allocator.h.
#include <algorithm>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/base/units.h"
#include "allocator/device_allocator.h"

namespace fragfree {
namespace {

// Backup copies are issued (and their pages unmapped once done) in pieces of
// at most this many bytes, so that unmapping piece k overlaps copying the
// pieces after it; restores map and copy in pieces of the same size, so that
// mapping piece k+1 overlaps copying piece k.
constexpr size_t kBackupPieceBytes = size_t{128} << 20;

std::string TagNames(const MetadataVector<RegionTag>& tags) {
  return absl::StrJoin(tags, ", ", [](std::string* out, RegionTag t) {
    absl::StrAppend(out, "'", RegionTagName(t), "'");
  });
}

// The host bytes a backup of the live blocks of `arenas` reserves: each
// block rounded as Backup::Reserve rounds it.
size_t BackupBytesOf(const MetadataVector<Arena*>& arenas) {
  size_t live_bytes = 0;
  for (Arena* a : arenas) {
    for (const Block* b = a->first_block(); b != nullptr; b = b->next) {
      if (b->state == BlockState::kAllocated) {
        live_bytes += AlignUp(b->size, Backup::kAlign);
      }
    }
  }
  return live_bytes;
}

// The error of a pause of `tag` that failed with `status` after the tag was
// marked paused (a copy or an unmap failed).
absl::Status PauseUnfinishedError(RegionTag tag, int device, bool has_backup,
                                  const absl::Status& status) {
  // Pages may be left mapped (resume maps only what is missing) and, for a
  // failed copy, the backup is incomplete.
  return absl::Status(
      status.code(),
      absl::StrFormat("fragfree: pausing tag '%s' on device %d did not "
                      "finish (the tag is paused; some pages may still be "
                      "mapped%s): %s",
                      RegionTagName(tag), device,
                      has_backup ? " and its backup may be incomplete" : "",
                      status.message()));
}

// The tags of `tags` that are paused, each once, in their first order.
MetadataVector<RegionTag> PausedTagsAmong(const SleepState& sleep,
                                          const std::vector<RegionTag>& tags) {
  MetadataVector<RegionTag> todo;
  for (RegionTag tag : tags) {
    if (sleep.IsPaused(tag) &&
        std::find(todo.begin(), todo.end(), tag) == todo.end()) {
      todo.push_back(tag);
    }
  }
  return todo;
}

}  // namespace

absl::StatusOr<uint32_t> DeviceAllocator::TaggedSlot(RegionTag tag,
                                                     StreamHandle stream) {
  // Graph memory stays with its pool (Note [Graph capture]): untagged.
  if (capturing_ > 0) {
    for (auto& pool : pools_) {
      if (pool->capturing && pool->filter && pool->filter(stream)) {
        return SlotDuringCapture(stream);
      }
    }
  }
  TagSleepState& t = sleep_.For(tag);
  if (t.paused) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "fragfree: cannot allocate in region '%s' on device %d: the tag is "
        "paused (resume it first)",
        RegionTagName(tag), device_));
  }
  auto [it, inserted] = t.slots.try_emplace(stream, 0);
  if (inserted) {
    it->second = NewSlot(stream, nullptr);
    streams_[it->second].tag = tag;
  }
  return it->second;
}

void DeviceAllocator::ForgetTaggedStream(StreamHandle stream) {
  for (TagSleepState& t : sleep_.tags) t.slots.erase(stream);
}

bool DeviceAllocator::IsPausedArena(const Arena* arena) const {
  const RegionTag tag = streams_[arena->stream_slot()].tag;
  return tag != kNoRegionTag && sleep_.IsPaused(tag);
}

MetadataVector<Arena*> DeviceAllocator::ArenasOfTag(RegionTag tag) const {
  MetadataVector<Arena*> out;
  for (const auto& arena : arenas_) {
    if (streams_[arena->stream_slot()].tag == tag) out.push_back(arena.get());
  }
  return out;
}

void DeviceAllocator::RestoreQuickCache(Arena* arena) {
  const StreamState& st = streams_[arena->stream_slot()];
  arena->quick().set_enabled(arena->kind() == ArenaKind::kSmall &&
                             st.pool == nullptr &&
                             !order_.retired(arena->stream_slot()));
}

absl::Status DeviceAllocator::UnmapRange(Arena* arena, uintptr_t addr,
                                         size_t size, PauseTimes* times) {
  PageList pages;
  runs_.clear();
  size_t calls = 0;
  absl::Status status;
  {
    PhaseClock clock(&times->unmap_s);
    status = arena->UnmapPagesIn(addr, size, &pages,
                                 trace_.enabled() ? &runs_ : nullptr, &calls);
  }
  NotePagesMapped(arena, -int64_t(pages.size()));
  times->unmap_calls += calls;
  times->pages_unmapped += pages.size();
  {
    // Released at once, while the copies of the next pieces run. A page the
    // backend refuses to release stays idle (released by a later
    // ReleaseIdlePages or empty_cache).
    PhaseClock clock(&times->release_s);
    PagePool& pool = DomainOf(arena).pool();
    for (PageId p : pages) {
      if (pool.ReleasePage(p).ok()) ++times->pages_released;
    }
  }
  for (const auto& [a, bytes] : runs_) {
    trace_.Record(TraceAction::kSegmentUnmap, a, bytes, arena->stream());
  }
  return status;
}

void DeviceAllocator::ReleaseIdlePages(PauseTimes* times) {
  PhaseClock clock(&times->release_s);
  // A failure leaves the pages idle: released by a later empty_cache.
  ForEachDomain([&](PageDomain& d) {
    const uint64_t before = d.pool().total_released();
    d.pool().ReleaseIdle(0).IgnoreError();
    times->pages_released += d.pool().total_released() - before;
  });
}

absl::Status DeviceAllocator::WaitForTagUsers(
    const MetadataVector<Arena*>& arenas) {
  auto ours = [&](const Arena* a) {
    return std::find(arenas.begin(), arenas.end(), a) != arenas.end();
  };
  // Frees waiting for other streams (record_stream): wait, then release.
  if (absl::Status s =
          order_.pending().CollectIf([&](Block* b) { return ours(b->arena); },
                                     [&](Block* b) {
                                       mu_.AssertHeld();
                                       ReturnBlockToArena(b);
                                     });
      !s.ok()) {
    return s;
  }
  // The streams the tag allocated on, and those record_stream added to its
  // live blocks: everything issued on them so far completes.
  MetadataVector<uint32_t> slots;
  MetadataVector<StreamHandle> others;
  for (Arena* a : arenas) {
    if (std::find(slots.begin(), slots.end(), a->stream_slot()) ==
        slots.end()) {
      slots.push_back(a->stream_slot());
    }
    for (const Block* b = a->first_block(); b != nullptr; b = b->next) {
      if (b->state != BlockState::kAllocated || b->uses == nullptr) continue;
      for (StreamHandle s : *b->uses) {
        if (std::find(others.begin(), others.end(), s) == others.end()) {
          others.push_back(s);
        }
      }
    }
  }
  for (uint32_t slot : slots) {
    StreamFences& fences = order_.fences();
    if (absl::Status s = fences.WaitFor(slot, fences.StampFree(slot));
        !s.ok()) {
      return s;
    }
  }
  for (StreamHandle stream : others) {
    if (events_->IsCapturing(stream)) {
      return absl::FailedPreconditionError(
          "a stream that used the tag's memory is capturing a CUDA graph");
    }
    absl::StatusOr<EventId> e = events_->Record(stream);
    if (!e.ok()) return e.status();
    absl::Status s = events_->Synchronize(*e);
    events_->Release(*e);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::StartBackup(const MetadataVector<Arena*>& arenas,
                                          Backup* backup,
                                          MetadataVector<BackupMark>* marks) {
  BackupCopier& copier = *sleep_.copier;
  const bool copies = copier.copies_contents();
  for (Arena* a : arenas) {
    // The current run: device [lo, lo + bytes) -> host [host_lo, ...).
    uintptr_t lo = 0, host_lo = 0;
    size_t bytes = 0;
    auto flush = [&]() -> absl::Status {
      for (size_t done = 0; done < bytes;) {
        const size_t n = std::min(kBackupPieceBytes, bytes - done);
        uint64_t ticket = 0;
        if (copies) {
          absl::StatusOr<uint64_t> t = copier.CopyToHost(
              reinterpret_cast<void*>(host_lo + done), lo + done, n);
          if (!t.ok()) return t.status();
          ticket = *t;
        }
        marks->push_back({a, lo + done + n, ticket});
        done += n;
      }
      bytes = 0;
      return absl::OkStatus();
    };
    for (const Block* b = a->first_block(); b != nullptr; b = b->next) {
      if (b->state != BlockState::kAllocated) {
        if (absl::Status s = flush(); !s.ok()) return s;
        continue;
      }
      // An allocation may span host chunks: one entry per piece.
      for (size_t off = 0; off < b->size;) {
        absl::StatusOr<std::pair<char*, size_t>> host =
            backup->Reserve(b->size - off);
        if (!host.ok()) return host.status();
        const uintptr_t h = reinterpret_cast<uintptr_t>(host->first);
        const uintptr_t d = b->addr + off;
        const bool starts_chunk = backup->last_piece_starts_chunk();
        if (bytes > 0 &&
            (d != lo + bytes || h != host_lo + bytes || starts_chunk)) {
          if (absl::Status s = flush(); !s.ok()) return s;
        }
        if (bytes == 0) {
          lo = d;
          host_lo = h;
        }
        bytes += host->second;
        backup->entries().push_back(
            {b->addr, b->size, d, host->second, host->first, starts_chunk});
        off += host->second;
      }
    }
    if (absl::Status s = flush(); !s.ok()) return s;
  }
  backup->FinishReserving();
  return absl::OkStatus();
}

absl::Status DeviceAllocator::EnsureBackupCopier() {
  if (sleep_.copier != nullptr) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<BackupCopier>> copier =
      MakeBackupCopier(backend_->Name(), device_);
  if (!copier.ok()) return copier.status();
  sleep_.copier = std::move(*copier);
  sleep_.pool.set_copier(sleep_.copier.get());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backup>> DeviceAllocator::MakeTagBackup(
    RegionTag tag, const MetadataVector<Arena*>& arenas, size_t live_bytes,
    MetadataVector<BackupMark>* marks, PauseTimes* times) {
  if (absl::Status s = EnsureBackupCopier(); !s.ok()) return s;
  // Kept chunks first (sleep_.pool), new ones pinned ahead of the copies.
  auto backup =
      std::make_unique<Backup>(sleep_.copier.get(), &sleep_.pool, live_bytes);
  absl::Status s;
  {
    PhaseClock clock(&times->backup_issue_s);
    backup->Start();
    s = StartBackup(arenas, backup.get(), marks);
  }
  if (s.ok()) return backup;
  // The copies issued write into the backup's host memory: let them end
  // before it goes. Nothing was unmapped: the tag is as it was, and so is
  // the kept memory (chunks taken from it go back; new ones are freed).
  sleep_.copier->WaitFor(UINT64_MAX).IgnoreError();
  backup->Abandon();
  backup.reset();
  return absl::Status(
      s.code(), absl::StrFormat("fragfree: cannot back up tag '%s' on "
                                "device %d (it stays resumed): %s",
                                RegionTagName(tag), device_, s.message()));
}

absl::Status DeviceAllocator::UnmapPausedArenas(
    const MetadataVector<Arena*>& arenas,
    const MetadataVector<BackupMark>& marks, PauseTimes* times) {
  absl::Status status;
  size_t m = 0;
  for (Arena* a : arenas) {
    uintptr_t done_to = a->base();
    // Piece by piece in copy order: once its copy is done, its pages are
    // unmapped and released while the later pieces copy.
    for (; m < marks.size() && marks[m].arena == a && status.ok(); ++m) {
      {
        PhaseClock clock(&times->copy_wait_s);
        status = sleep_.copier->WaitFor(marks[m].ticket);
      }
      if (!status.ok()) break;
      const uintptr_t upto =
          a->base() + AlignDown(marks[m].end - a->base(), a->page_size());
      if (upto > done_to) {
        status = UnmapRange(a, done_to, upto - done_to, times);
        done_to = upto;
      }
    }
    if (!status.ok()) break;
    status = UnmapRange(a, done_to, a->base() + a->size() - done_to, times);
    if (!status.ok()) break;
  }
  return status;
}

absl::Status DeviceAllocator::PauseTag(RegionTag tag, BackupMode mode,
                                       PauseTimes* times) {
  TagSleepState& t = sleep_.For(tag);
  const MetadataVector<Arena*> arenas = ArenasOfTag(tag);
  // Cached blocks go back to their arenas, and none is cached while paused
  // (a cached block must stay mapped).
  for (Arena* a : arenas) {
    DrainQuickCache(a);
    a->quick().set_enabled(false);
  }
  auto undo = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (Arena* a : arenas) RestoreQuickCache(a);
  };
  absl::Status waited;
  {
    PhaseClock clock(&times->wait_users_s);
    waited = WaitForTagUsers(arenas);
  }
  if (!waited.ok()) {
    undo();
    return waited;
  }
  const size_t live_bytes = BackupBytesOf(arenas);
  std::unique_ptr<Backup> backup;
  MetadataVector<BackupMark> marks;
  if (mode == BackupMode::kCpu && live_bytes > 0) {
    absl::StatusOr<std::unique_ptr<Backup>> made =
        MakeTagBackup(tag, arenas, live_bytes, &marks, times);
    if (!made.ok()) {
      undo();
      return made.status();
    }
    backup = std::move(*made);
  }
  // From here the tag is paused, whatever happens: its pages go as the copies
  // that read them complete.
  if (backup != nullptr && sleep_.copier->copies_contents()) {
    for (const Backup::Entry& e : backup->entries()) {
      times->bytes_copied += e.size;
    }
  }
  t.paused = true;
  t.backup = std::move(backup);
  ++sleep_.num_pauses;
  absl::Status status = UnmapPausedArenas(arenas, marks, times);
  if (!status.ok()) {
    return PauseUnfinishedError(tag, device_, t.backup != nullptr, status);
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::Pause(const std::vector<RegionTag>& tags,
                                    BackupMode backup) {
  MutexLock lock(&mu_);
  if (capturing_ > 0) {
    return absl::FailedPreconditionError(
        "fragfree: cannot pause during CUDA graph capture");
  }
  PauseTimes& times = sleep_.last_pause;
  times = PauseTimes();
  PhaseClock clock(&times.total_s);
  // Paused pages are released: none may stay mapped at an old address.
  absl::Status status = base_pages_->source().UnmapDetached();
  for (RegionTag tag : tags) {
    if (!status.ok()) break;
    if (tag == kNoRegionTag) {
      status = absl::InvalidArgumentError("pause: tag 0 is not a region tag");
      break;
    }
    if (sleep_.IsPaused(tag)) continue;
    status = PauseTag(tag, backup, &times);
    if (!status.ok()) break;
  }
  // Every idle page (cached memory of other tags) goes back to the device.
  ReleaseIdlePages(&times);
  return status;
}

absl::Status DeviceAllocator::RestoreBackup(
    RegionTag tag,
    absl::FunctionRef<absl::Status(Arena*, uintptr_t, size_t)> map_range,
    uint64_t* last_ticket, ResumeTimes* times) {
  TagSleepState& t = sleep_.For(tag);
  if (t.backup == nullptr || !sleep_.copier->copies_contents()) {
    return absl::OkStatus();
  }
  BackupCopier& copier = *sleep_.copier;
  // Runs of pieces adjacent on both sides (in one arena, at most
  // kBackupPieceBytes) whose allocations are still live (one freed while
  // paused is skipped: its memory is free). Each run's pages are mapped, then
  // its copy starts: mapping the next run overlaps it.
  Arena* arena = nullptr;
  uintptr_t lo = 0, host_lo = 0;
  size_t bytes = 0;
  auto flush = [&]() -> absl::Status {
    if (bytes == 0) return absl::OkStatus();
    if (absl::Status s = map_range(arena, lo, bytes); !s.ok()) return s;
    absl::StatusOr<uint64_t> ticket;
    {
      PhaseClock clock(&times->copy_issue_s);
      ticket = copier.CopyToDevice(lo, reinterpret_cast<const void*>(host_lo),
                                   bytes);
    }
    if (!ticket.ok()) return ticket.status();
    *last_ticket = std::max(*last_ticket, *ticket);
    times->bytes_copied += bytes;
    bytes = 0;
    return absl::OkStatus();
  };
  for (const Backup::Entry& e : t.backup->entries()) {
    const LiveEntry* live = live_.Find(e.block);
    if (live == nullptr || live->block()->size != e.block_size) {
      if (absl::Status s = flush(); !s.ok()) return s;
      continue;
    }
    const uintptr_t h = reinterpret_cast<uintptr_t>(e.host);
    if (bytes > 0 && (live->block()->arena != arena || e.addr != lo + bytes ||
                      h != host_lo + bytes || e.starts_chunk ||
                      bytes + e.size > kBackupPieceBytes)) {
      if (absl::Status s = flush(); !s.ok()) return s;
    }
    if (bytes == 0) {
      arena = live->block()->arena;
      lo = e.addr;
      host_lo = h;
    }
    bytes += e.size;
  }
  return flush();
}

// What one Resume has mapped so far: for its rollback and its error message.
struct DeviceAllocator::ResumeMapping {
  // A range mapped as one (pages and access set in batches).
  struct Range {
    Arena* arena;
    uintptr_t addr;
    size_t size;
  };
  MetadataVector<Range> mapped;  // in the order mapped
  size_t needed_bytes = 0;       // of pages missing under every range asked for
  RequestState request;  // one request: counted once, each range given back
};

absl::Status DeviceAllocator::Resume(const std::vector<RegionTag>& tags,
                                     bool keep_backup) {
  MutexLock lock(&mu_);
  if (capturing_ > 0) {
    return absl::FailedPreconditionError(
        "fragfree: cannot resume during CUDA graph capture");
  }
  const MetadataVector<RegionTag> todo = PausedTagsAmong(sleep_, tags);
  if (todo.empty()) return absl::OkStatus();
  ResumeTimes& times = sleep_.last_resume;
  times = ResumeTimes();
  PhaseClock clock(&times.total_s);
  ResumeMapping mapping;
  if (absl::Status s = MapAndRestoreTags(todo, &mapping, &times); !s.ok()) {
    return RollBackResume(todo, s, mapping);
  }
  FinishResume(todo, keep_backup, &times);
  return absl::OkStatus();
}

absl::Status DeviceAllocator::MapResumeRange(Arena* a, uintptr_t addr,
                                             size_t size,
                                             ResumeMapping* mapping,
                                             ResumeTimes* times) {
  Block run;  // a stand-in spanning the range, for MapUnder
  run.arena = a;
  run.addr = addr;
  run.size = size;
  run.state = BlockState::kAllocated;
  size_t missing = 0;
  const bool needs_mapping = a->NeedsMapping(&run, &missing);
  mapping->needed_bytes += missing * a->page_size();
  if (!needs_mapping) return absl::OkStatus();
  const uint64_t created_before = stats_.handles_created;
  absl::Status s;
  {
    PhaseClock clock(&times->map_s);
    s = MapUnder(&run, missing, &mapping->request);
  }
  times->pages_created += uint64_t(stats_.handles_created - created_before);
  ++times->map_ranges;
  if (s.ok()) {
    times->pages_mapped += missing;
    mapping->mapped.push_back({a, addr, size});
  }
  return s;
}

absl::Status DeviceAllocator::MapLiveRuns(
    RegionTag tag,
    absl::FunctionRef<absl::Status(Arena*, uintptr_t, size_t)> map_range) {
  for (Arena* a : ArenasOfTag(tag)) {
    for (const Block* b = a->first_block(); b != nullptr;) {
      if (b->is_free()) {
        b = b->next;
        continue;
      }
      const uintptr_t addr = b->addr;
      uintptr_t end = addr;
      while (b != nullptr && !b->is_free()) {
        end = b->end();
        b = b->next;
      }
      if (absl::Status s = map_range(a, addr, end - addr); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceAllocator::MapAndRestoreTags(
    const MetadataVector<RegionTag>& todo, ResumeMapping* mapping,
    ResumeTimes* times) {
  auto map_range = [&](Arena* a, uintptr_t addr, size_t size)
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                         return MapResumeRange(a, addr, size, mapping, times);
                       };
  absl::Status status;
  // Tags with a backup: piece by piece, map then start the copy.
  uint64_t last_ticket = 0;
  for (size_t i = 0; i < todo.size() && status.ok(); ++i) {
    status = RestoreBackup(todo[i], map_range, &last_ticket, times);
  }
  // Every run of adjacent live blocks (tags without a backup; anything the
  // backups did not cover) mapped as one range.
  for (size_t i = 0; i < todo.size() && status.ok(); ++i) {
    status = MapLiveRuns(todo[i], map_range);
  }
  if (status.ok() && last_ticket > 0) {
    PhaseClock wait_clock(&times->copy_wait_s);
    status = sleep_.copier->WaitFor(last_ticket);
  }
  return status;
}

absl::Status DeviceAllocator::RollBackResume(
    const MetadataVector<RegionTag>& todo, const absl::Status& status,
    const ResumeMapping& mapping) {
  // All or nothing: copies in flight end first (they write into the pages);
  // then the pages this call mapped (no program work has used them) are
  // unmapped and released; the tags stay paused with their backups.
  if (sleep_.copier != nullptr) {
    sleep_.copier->WaitFor(UINT64_MAX).IgnoreError();
  }
  PauseTimes undo_times;  // not reported: the resume failed
  for (size_t i = mapping.mapped.size(); i-- > 0;) {
    const ResumeMapping::Range& r = mapping.mapped[i];
    UnmapRange(r.arena, r.addr, r.size, &undo_times).IgnoreError();
  }
  ReleaseIdlePages(&undo_times);
  ++sleep_.num_resume_failures;
  const DeviceMemoryInfo info = backend_->MemoryInfo();
  return absl::Status(
      status.code(),
      absl::StrFormat(
          "fragfree: cannot resume %s on device %d: %s. The tags stay "
          "paused and every page this resume mapped was released. Resuming "
          "needs %s of pages; fragfree maps %s now (limit %s), and the "
          "device has %s free of %s: free memory or pause other tags, then "
          "resume again.",
          TagNames(todo), device_, status.message(),
          FormatBytes(mapping.needed_bytes),
          FormatBytes(size_t(stats_.mapped_bytes.current)),
          FormatBytes(limit_bytes_), FormatBytes(info.free_bytes),
          FormatBytes(info.total_bytes)));
}

void DeviceAllocator::FinishResume(const MetadataVector<RegionTag>& todo,
                                   bool keep_backup, ResumeTimes* times) {
  // The backups' host memory: kept for the next pause (keep_backup), or
  // freed now, after the copies out of it completed (unpinned on the
  // copier's host threads at once).
  PhaseClock free_clock(&times->backup_free_s);
  for (RegionTag tag : todo) {
    TagSleepState& t = sleep_.For(tag);
    t.paused = false;
    if (t.backup != nullptr) {
      if (keep_backup && sleep_.copier->copies_contents()) {
        t.backup->GiveChunksTo(&sleep_.pool);
      }
      t.backup.reset();
    }
    for (Arena* a : ArenasOfTag(tag)) RestoreQuickCache(a);
  }
  ++sleep_.num_resumes;
}

size_t DeviceAllocator::ReleaseBackup() {
  MutexLock lock(&mu_);
  return sleep_.pool.Release();
}

std::vector<TagSleepInfo> DeviceAllocator::SleepInfo() const {
  MutexLock lock(&mu_);
  std::vector<TagSleepInfo> out;
  for (size_t tag = 1; tag < sleep_.tags.size(); ++tag) {
    const TagSleepState& t = sleep_.tags[tag];
    TagSleepInfo info;
    info.tag = RegionTag(tag);
    for (const Arena* a : ArenasOfTag(info.tag)) {
      ++info.arenas;
      info.mapped_bytes += a->mapped_pages() * a->page_size();
      for (const Block* b = a->first_block(); b != nullptr; b = b->next) {
        if (b->state != BlockState::kAllocated) continue;
        ++info.live_blocks;
        info.live_bytes += b->size;
      }
    }
    if (info.arenas == 0 && !t.paused && t.slots.empty()) continue;
    info.name = RegionTagName(info.tag);
    info.paused = t.paused;
    info.backup_bytes = t.backup ? t.backup->host_bytes() : 0;
    out.push_back(std::move(info));
  }
  return out;
}

std::pair<PauseTimes, ResumeTimes> DeviceAllocator::LastSleepTimes() const {
  MutexLock lock(&mu_);
  return {sleep_.last_pause, sleep_.last_resume};
}

void DeviceAllocator::UpdateSleepGaugesLocked() {
  int64_t paused_tags = 0, paused_bytes = 0, backup_bytes = 0;
  for (size_t tag = 1; tag < sleep_.tags.size(); ++tag) {
    const TagSleepState& t = sleep_.tags[tag];
    if (!t.paused) continue;
    ++paused_tags;
    if (t.backup != nullptr) backup_bytes += int64_t(t.backup->host_bytes());
  }
  for (const auto& arena : arenas_) {
    if (!IsPausedArena(arena.get())) continue;
    for (const Block* b = arena->first_block(); b != nullptr; b = b->next) {
      if (b->state == BlockState::kAllocated) paused_bytes += int64_t(b->size);
    }
  }
  stats_.paused_tags = paused_tags;
  stats_.paused_bytes = paused_bytes;
  stats_.backup_bytes = backup_bytes;
  stats_.kept_backup_bytes = int64_t(sleep_.pool.bytes());
  stats_.num_pauses = sleep_.num_pauses;
  stats_.num_resumes = sleep_.num_resumes;
  stats_.num_resume_failures = sleep_.num_resume_failures;
}

}  // namespace fragfree
