// DeviceAllocator: fragfree's engine for one device, and the composition root
// of the layers below (backend, page pool, arenas, free index, stream fences,
// stats).
//
// Policy (docs/design.md has the Notes):
//  - Each (stream, small|large) pair allocates in its own Arena (VA range);
//    blocks are best fit with coalescing, and a block freed on a stream is
//    reusable at once by that stream (stream order protects it). Small freed
//    blocks wait whole in the arena's QuickCache for the next request of their
//    size (drained before growing, failing or empty_cache).
//  - Physical pages are one pool per device shared by all arenas. A request
//    whose block lies over unmapped pages takes idle pages, then whole free
//    pages from cached holes whose last use is known complete (reclaim, no
//    waiting), then new pages while the memory limit allows, and finally,
//    under pressure, waits for in-flight work and reclaims every whole free
//    page. So an allocation fails only when live blocks plus partial edge
//    pages fill the limit: never because free memory is scattered.
//  - record_stream'd blocks are freed only after events on those streams
//    complete.
//
// Memory: the object and everything it keeps (blocks, live table, arenas,
// streams, pending frees, pools, page tables, trace ring, size histogram) are
// on the metadata arena (base/metadata_arena.h), never on the program's heap;
// what stays there (error messages, the Options copy, the last OOM's report,
// results returned to callers) is listed in docs/host.md, "What lives where".
//
// Thread-safety: every public method takes mu_; the object may be used from any
// thread. Nothing calls out of the allocator (handlers, observers) under mu_.
#ifndef FRAGFREE_ALLOCATOR_DEVICE_ALLOCATOR_H_
#define FRAGFREE_ALLOCATOR_DEVICE_ALLOCATOR_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/metadata_containers.h"
#include "allocator/base/mutex.h"
#include "allocator/blocks/block.h"
#include "allocator/blocks/live_table.h"
#include "allocator/blocks/size_classes.h"
#include "allocator/obs/allocator_view.h"
#include "allocator/obs/oom_report.h"
#include "allocator/obs/size_histogram.h"
#include "allocator/obs/stats_book.h"
#include "allocator/obs/trace.h"
#include "allocator/options.h"
#include "allocator/phys/backend.h"
#include "allocator/phys/timed_backend.h"
#include "allocator/place/page_domain.h"
#include "allocator/place/page_source.h"
#include "allocator/place/placement_policy.h"
#include "allocator/sleep/sleep_state.h"
#include "allocator/stream/event_source.h"
#include "allocator/stream/stream_order.h"
#include "allocator/va/arena.h"
#include "allocator/va/page_pool.h"

namespace fragfree {

// A CUDA graph memory pool, as PyTorch names it (MempoolId_t).
using PoolId = std::pair<uint64_t, uint64_t>;

// Sharing blocks with other processes (allocator/ipc/ipc_state.h).
struct IpcState;
struct IpcHandle;  // allocator/ipc/ipc_handle.h
struct IpcStateDeleter {
  void operator()(IpcState* state) const;
};

class DeviceAllocator : public MetadataObject {
 public:
  static absl::StatusOr<std::unique_ptr<DeviceAllocator>> Create(
      int device, const Options& options,
      std::unique_ptr<PhysicalBackend> backend,
      std::unique_ptr<EventSource> events);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // nullptr for size 0. ResourceExhausted (with an OomFacts kept for
  // last_oom()) when the memory cannot be found after every reclaim.
  absl::StatusOr<void*> Malloc(size_t size, StreamHandle stream)
      ABSL_LOCKS_EXCLUDED(mu_);
  // InvalidArgument for pointers that are not a live allocation of this device
  // (unknown, double free, interior pointer); nothing is changed then.
  absl::Status Free(void* ptr) ABSL_LOCKS_EXCLUDED(mu_) {
    return Free(ptr, nullptr);
  }
  // As Free(ptr), for a caller that does not know which device owns `ptr`
  // (ff_free with FF_DEVICE_OWNER, the native adapter's deleter): when `ptr`
  // is not a live allocation of this device, *owned is false and nothing is
  // changed or counted (no error, no invalid_frees); else *owned is true and
  // the result is Free's. One lock and one live-table probe, where asking
  // AllocationSize first took two of each.
  absl::Status Free(void* ptr, bool* owned) ABSL_LOCKS_EXCLUDED(mu_);
  // RecordStream(ptr, stream) and then Free(ptr, owned) under one lock and one
  // probe: a free in the order of `stream` (cudaFreeAsync under LD_PRELOAD),
  // for a caller that does not know whether this device owns `ptr`.
  absl::Status FreeOnStream(void* ptr, StreamHandle stream, bool* owned)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `stream` also uses the block: it is not reused before that work completes.
  absl::Status RecordStream(void* ptr, StreamHandle stream)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `stream` is about to be destroyed (cudaStreamDestroy): waits for the work
  // issued on it, and never touches the handle again. A new stream that reuses
  // the handle value starts afresh. Its arenas are released (pages unmapped
  // and back to the pool, VA released) as soon as they hold no allocated or
  // pending block: at once, or when the program frees their last block (for
  // a graph pool's arena, once the pool is released too); its slot is then
  // reused. So create/destroy cycles keep arenas, VA and metadata bounded.
  // See Note [Retired streams] in docs/design.md.
  absl::Status RetireStream(StreamHandle stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for pending work, unmaps every whole free page and releases idle
  // pages to the device.
  absl::Status EmptyCache() ABSL_LOCKS_EXCLUDED(mu_);
  // Caps fragfree's physical memory for the device: bytes (0 = no byte cap) and
  // a fraction of device memory. Pages above a lowered cap are reclaimed
  // lazily.
  absl::Status SetMemoryLimit(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetMemoryFraction(double fraction) ABSL_LOCKS_EXCLUDED(mu_);
  size_t memory_limit() const ABSL_LOCKS_EXCLUDED(mu_);

  // CUDA graph pools (PyTorch's beginAllocateToPool / endAllocateToPool /
  // releasePool). Between Begin and End, allocations on streams the filter
  // accepts come from the pool's own arenas, and no event is queried, no fence
  // waited on and no page unmapped anywhere (capture forbids it). A pool's
  // pages stay with it, even when its blocks are freed, until ReleasePool: a
  // graph may replay.
  absl::Status BeginAllocateToPool(PoolId id,
                                   std::function<bool(StreamHandle)> filter)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status EndAllocateToPool(PoolId id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status ReleasePool(PoolId id) ABSL_LOCKS_EXCLUDED(mu_);

  // Trace ring buffer of alloc/free/map/unmap/oom events: `entries` = 0 turns
  // it off (the default unless the trace_entries option is set).
  void SetTraceEntries(size_t entries) ABSL_LOCKS_EXCLUDED(mu_);
  // The ring's events, oldest first: a copy, taken under the lock (two
  // memcpys); their times are worked out when read (TraceLog::ForEach).
  TraceLog Trace() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether GetStats asks the driver for the device's free and total memory
  // (device_free_bytes, device_total_bytes): one driver call, several µs and
  // more right after a synchronise, which PyTorch's memory_stats() never
  // makes. kSkip leaves both 0 in the copy; every other figure is the same.
  enum class DeviceMemory { kRead, kSkip };
  DeviceStats GetStats(DeviceMemory device_memory = DeviceMemory::kRead)
      ABSL_LOCKS_EXCLUDED(mu_);
  // One integer figure by its stats key (IntegerStat, obs/stats.h), computing
  // only what it needs: the driver is asked only for device_free_bytes and
  // device_total_bytes, and the arenas' free blocks are walked only for the
  // figures counted from them (inactive_split*, cached_free_bytes, ...), so
  // allocated or reserved bytes cost O(1) as in PyTorch. nullopt for a key
  // that names no integer figure.
  std::optional<int64_t> GetStat(std::string_view key) ABSL_LOCKS_EXCLUDED(mu_);
  void ResetPeakStats() ABSL_LOCKS_EXCLUDED(mu_);
  void ResetAccumulatedStats() ABSL_LOCKS_EXCLUDED(mu_);
  OomFacts last_oom() const ABSL_LOCKS_EXCLUDED(mu_);
  // The request sizes sampled so far (the bucket_sample option), counts scaled
  // to estimate every request: the bucket advisor's input. `info` (optional)
  // receives the histogram's figures. ResetAccumulatedStats clears it.
  std::vector<SizeCount> RequestSizes(SizeHistogram::Info* info = nullptr) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Requested size of a live allocation (0 if none).
  size_t AllocationSize(const void* ptr) const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<ArenaView> Arenas() const ABSL_LOCKS_EXCLUDED(mu_);

  // ---- Sharing blocks with other processes (docs/ipc.md) ----
  // Implemented in device_allocator_ipc.cc on allocator/ipc.
  struct IpcExport {
    uint64_t id = 0;
    uintptr_t block = 0;  // the whole block the pointer lies in
    size_t block_size = 0;
    uintptr_t first_page = 0;  // where the shared pages start
    std::string handle;        // allocator/ipc/ipc_handle.h
    // With `handle_file`: the export's handle file (a descriptor of this
    // process, owned by the export; allocator/ipc/compact_handle.h), else -1.
    int handle_file = -1;
  };
  // Exports the live block containing `ptr`: its pages' descriptors and the
  // block's place in them. Until the export is released (IpcRelease, or the
  // block's Free with `release_on_free`) and every process that opened it has
  // closed it or died, the block stays allocated: a Free only marks it, and
  // its memory is reused once the last holder is gone. With
  // `release_on_free`, a live export of the block made the same way is
  // returned again instead of a new one. With `handle_file`, the export keeps
  // a handle file that compact handles refer to until it stops accepting
  // opens.
  absl::StatusOr<IpcExport> IpcExportBlock(const void* ptr,
                                           bool release_on_free,
                                           bool handle_file = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // No new opens of export `id`; NotFound when it is not this device's.
  absl::Status IpcRelease(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees the blocks whose exports are released and whose openers have all
  // closed or died. Runs on every IpcRelease and Free of an exported block.
  absl::Status IpcSweep() ABSL_LOCKS_EXCLUDED(mu_);
  size_t IpcLiveExports() const ABSL_LOCKS_EXCLUDED(mu_);
  struct IpcMapping {
    uintptr_t ptr = 0;  // the block's bytes
    size_t size = 0;
    uintptr_t base = 0;  // the first page
    size_t mapped = 0;
  };
  // Maps another process's exported block (its pages, contiguously, in fresh
  // VA) on this device.
  absl::StatusOr<IpcMapping> IpcOpen(std::string_view handle)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Unmaps the opened block containing `ptr`; NotFound when none is open.
  absl::Status IpcClose(const void* ptr) ABSL_LOCKS_EXCLUDED(mu_);
  // The live block, or opened IPC block, containing `ptr`: its start and
  // size. NotFound for memory fragfree did not hand out.
  absl::StatusOr<std::pair<uintptr_t, size_t>> AddressRange(
      const void* ptr) const ABSL_LOCKS_EXCLUDED(mu_);

  // Checks every invariant (tiling, coalescing, mapping under live blocks,
  // stats equal a recount); the first violation as an error.
  absl::Status CheckInvariants() const ABSL_LOCKS_EXCLUDED(mu_);

  // Sleep and wake (docs/sleep.md; device_allocator_sleep.cc). Allocations
  // made inside a region (sleep/region_tags.h) live in arenas of their own
  // per (tag, stream, kind). Pause waits for the streams that used the tags'
  // memory, optionally copies the live allocations to host memory, unmaps and
  // releases every page of the tags' arenas (and the pool's idle pages):
  // addresses stay reserved and allocations stay live. Resume maps pages
  // under the live allocations again (all or nothing: on failure, ResourceEx-
  // hausted for lack of memory, every page it mapped is released and the tags
  // stay paused) and copies the backup back. Already paused / not paused tags
  // are skipped. Both refuse during graph capture (FailedPrecondition) and
  // hold the lock throughout (other calls on this device wait).
  absl::Status Pause(const std::vector<RegionTag>& tags, BackupMode backup)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `keep_backup`: the backups' host chunks go to the device's pool of kept
  // backup memory (reused by the next pause of any tag, freed by
  // ReleaseBackup) instead of being freed.
  absl::Status Resume(const std::vector<RegionTag>& tags,
                      bool keep_backup = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees the kept backup memory (not the backups of paused tags); the bytes
  // freed.
  size_t ReleaseBackup() ABSL_LOCKS_EXCLUDED(mu_);
  // The tags that have memory or state on this device, paused or not.
  std::vector<TagSleepInfo> SleepInfo() const ABSL_LOCKS_EXCLUDED(mu_);
  // Where the last Pause and the last Resume on this device spent their time.
  std::pair<PauseTimes, ResumeTimes> LastSleepTimes() const
      ABSL_LOCKS_EXCLUDED(mu_);

  int device() const { return device_; }
  const Options& options() const { return options_; }
  std::string backend_name() const { return backend_->Name(); }

 private:
  struct Pool : MetadataObject {
    PoolId id;
    // The caller's filter (std::function: its callable, if large, is on the
    // heap; see docs/host.md).
    std::function<bool(StreamHandle)> filter;
    bool capturing = false;
    bool released = false;
    MetadataFlatHashMap<StreamHandle, uint32_t> slots;
  };
  // What a slot (StreamOrder) holds: its arenas, and its owner.
  struct StreamState {
    MetadataVector<Arena*> arenas[4];  // indexed by ArenaKind
    const Pool* pool = nullptr;        // set for a graph pool's slot
    RegionTag tag = kNoRegionTag;      // set for a region tag's slot
  };
  // What one request (PlaceAndMap) has done that counts once per request.
  using RequestState = PageSource::Request;
  DeviceAllocator(int device, const Options& options,
                  std::unique_ptr<PhysicalBackend> backend,
                  std::unique_ptr<EventSource> events);

  uint32_t SlotFor(StreamHandle stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint32_t slot = order_.CachedSlot(stream);
    return slot != StreamOrder::kNoSlot ? slot : SlotForSlow(stream);
  }
  uint32_t SlotForSlow(StreamHandle stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t NewSlot(StreamHandle stream, const Pool* pool)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets up the engine's state of `slot`, new or reused (StreamOrder).
  uint32_t InitSlot(uint32_t slot, const Pool* pool)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The slot of a capturing pool whose filter takes `stream`, else SlotFor.
  uint32_t SlotDuringCapture(StreamHandle stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Pool* FindPool(PoolId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A free block for the request among the slot's arenas (the placement
  // policy's search, skipped when `searched`: the caller has just made it),
  // after draining their quick caches, or in a new arena.
  absl::StatusOr<Block*> Place(uint32_t slot, ArenaKind kind, size_t size,
                               size_t requested, bool searched)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps the pages under *inout (placed, needing pages) or, when it is null,
  // places the request (Place; `searched`: the caller has searched the slot's
  // arenas of `kind`) and maps; sets *inout. On running out of memory, makes
  // room (MakeRoom) and tries again while it can before reporting the OOM (with
  // `report_oom`; else the ResourceExhausted status alone, for a caller with
  // another way). On failure *inout is not allocated, and what the request
  // took is given back: its block is free again as it was, an arena made for
  // it is released, and so are the pages (MapUnder). See Note [A failed
  // request gives back what it took] in docs/design.md.
  absl::Status PlaceAndMap(uint32_t slot, ArenaKind kind, size_t rounded,
                           size_t size, StreamHandle stream, Block** inout,
                           bool searched = true, bool report_oom = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the blocks of one arena's / every arena's QuickCache as ordinary
  // frees; whether there were any.
  bool DrainQuickCache(Arena* arena) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DrainQuickCaches() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One more way to give a request that ran out of memory room, cheapest
  // first from `*step` (0 for a new request, advanced past the way taken):
  // the quick caches drained; then, outside graph capture, the frees still
  // pending on other streams (record_stream) waited for, as PyTorch's
  // allocator waits for its outstanding events before it reports an OOM
  // (counted in num_sync_all_streams once per request). Whether a way was
  // taken (the request should try again); an error of the wait.
  absl::StatusOr<bool> MakeRoom(int* step, RequestState* request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PageSource::MapUnder in the engine's present scope (capture, graph
  // pools whose pages stay put).
  absl::Status MapUnder(Block* block, size_t count, RequestState* request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the free pages of `arena` may move: not a live graph pool's.
  bool MayMove(const Arena* arena) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The block's last use is done: into its arena's quick cache or released.
  // The second form takes what the caller knows, to leave the block unread;
  // `traced`: the caller has recorded free_completed.
  void ReturnBlockToArena(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReturnBlockToArena(Block* block, Arena* arena, uintptr_t addr,
                          size_t size, size_t requested, bool traced = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the arenas of retired slots that hold no allocated or pending
  // block (and whose graph pool, if any, is released); a slot left without
  // arenas becomes free for NewSlot. Does nothing during graph capture. The
  // first backend error; the arenas it concerns are kept and retried later.
  absl::Status ReleaseRetiredArenas() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps the pages of empty `arena` (back to the pool as idle) and, if all
  // were unmapped, destroys it (its VA is released).
  absl::Status ReleaseArena(Arena* arena) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ProcessPending(bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecomputeLimit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OutOfMemory(size_t size, size_t rounded, StreamHandle stream,
                           size_t pages_needed, std::string reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DescribeBadPointer(uintptr_t addr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether UpdateGaugesLocked counts the figures of the free blocks again
  // (a walk over every arena's free and cached blocks), or leaves them as last
  // computed.
  enum class FreeBlocks { kWalk, kSkip };
  void UpdateGaugesLocked(DeviceMemory device_memory,
                          FreeBlocks free_blocks = FreeBlocks::kWalk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateFreeBlockGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sleep and wake (device_allocator_sleep.cc). The slot that serves `tag`'s
  // allocations on `stream` (a capturing graph pool's slot when one takes the
  // stream: graph memory stays with its pool, untagged); FailedPrecondition
  // while the tag is paused.
  absl::StatusOr<uint32_t> TaggedSlot(RegionTag tag, StreamHandle stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `stream` is retired: its tagged slots serve no new allocation.
  void ForgetTaggedStream(StreamHandle stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsPausedArena(const Arena* arena) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  MetadataVector<Arena*> ArenasOfTag(RegionTag tag) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PauseTag(RegionTag tag, BackupMode backup, PauseTimes* times)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitForTagUsers(const MetadataVector<Arena*>& arenas)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves the backup's host memory and starts copying the live blocks of
  // `arenas` into it, in pieces; `marks` says which pages each piece frees.
  absl::Status StartBackup(const MetadataVector<Arena*>& arenas, Backup* backup,
                           MetadataVector<BackupMark>* marks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps (map_range) and starts copying back the tag's backup, piece by
  // piece; *last_ticket: the last copy's ticket (or unchanged).
  absl::Status RestoreBackup(
      RegionTag tag,
      absl::FunctionRef<absl::Status(Arena*, uintptr_t, size_t)> map_range,
      uint64_t* last_ticket, ResumeTimes* times)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PauseTag's steps. Makes the device's backup copier on first use (lent to
  // the pool of kept backup memory too).
  absl::Status EnsureBackupCopier() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A backup of `tag`'s live blocks (`live_bytes` of host memory) with its
  // copies started (StartBackup). On failure nothing is left of it: its
  // copies have ended and its host memory is given back or freed.
  absl::StatusOr<std::unique_ptr<Backup>> MakeTagBackup(
      RegionTag tag, const MetadataVector<Arena*>& arenas, size_t live_bytes,
      MetadataVector<BackupMark>* marks, PauseTimes* times)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps and releases every page of `arenas`, the pages of each backup
  // piece once its copy (`marks`) completes; stops at the first failure.
  absl::Status UnmapPausedArenas(const MetadataVector<Arena*>& arenas,
                                 const MetadataVector<BackupMark>& marks,
                                 PauseTimes* times)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resume's steps. What one Resume has mapped (device_allocator_sleep.cc).
  struct ResumeMapping;
  // Maps the pages missing under [addr, addr + size) of `arena` as one range
  // and notes it in `mapping` (a page shared with a range mapped before is
  // mapped once).
  absl::Status MapResumeRange(Arena* arena, uintptr_t addr, size_t size,
                              ResumeMapping* mapping, ResumeTimes* times)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps (map_range) each run of adjacent live blocks of `tag`'s arenas as
  // one range; stops at the first failure.
  absl::Status MapLiveRuns(
      RegionTag tag,
      absl::FunctionRef<absl::Status(Arena*, uintptr_t, size_t)> map_range)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maps the pages under the live blocks of the paused tags `todo` and
  // copies their backups back, waiting for the copies; the first failure.
  absl::Status MapAndRestoreTags(const MetadataVector<RegionTag>& todo,
                                 ResumeMapping* mapping, ResumeTimes* times)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After MapAndRestoreTags failed with `status`: waits for the copies,
  // unmaps and releases every page in `mapping` (the tags stay paused with
  // their backups) and returns the resume's error.
  absl::Status RollBackResume(const MetadataVector<RegionTag>& todo,
                              const absl::Status& status,
                              const ResumeMapping& mapping)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the tags `todo` resumed: their backups kept (keep_backup) or freed,
  // their quick caches back on.
  void FinishResume(const MetadataVector<RegionTag>& todo, bool keep_backup,
                    ResumeTimes* times) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps every page of `arena` in [addr, addr + size), under live blocks
  // too, and releases them (one the backend refuses to release stays idle);
  // the caller knows no GPU work uses them. Time and counts go to `times`.
  absl::Status UnmapRange(Arena* arena, uintptr_t addr, size_t size,
                          PauseTimes* times) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RestoreQuickCache(Arena* arena) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseIdlePages(PauseTimes* times) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateSleepGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the engine lends each page domain's PageSource.
  PageSource::Parts SourceParts();
  // No new block goes to large pages: a request traded memory between the
  // two sizes (PageSource::Request::traded_page_sizes). The large pages'
  // unused pages go to the base ones as they need room. Note [Large pages].
  void RetireLargePages() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A request of `bytes` traded memory between the two page sizes; retires
  // the large pages once the trades add up to the most ever allocated.
  void NoteTrade(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The page domain (place/page_domain.h) that serves arenas of `kind`, and
  // the one `arena` belongs to.
  PageDomain& DomainFor(ArenaKind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return kind == ArenaKind::kLargePages ? *large_pages_ : *base_pages_;
  }
  PageDomain& DomainOf(const Arena* arena) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return large_pages_ != nullptr && large_pages_->Owns(arena) ? *large_pages_
                                                                : *base_pages_;
  }
  // `f(domain)` for each page domain, the base one first.
  template <typename F>
  void ForEachDomain(F f) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    f(*base_pages_);
    if (large_pages_ != nullptr) f(*large_pages_);
  }
  // Bytes of idle pages, of every size.
  size_t IdleBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t bytes = 0;
    ForEachDomain([&](const PageDomain& d) {
      bytes += d.pool().idle_pages() * d.page_size();
    });
    return bytes;
  }
  // `pages` were just mapped into (> 0) or unmapped from (< 0) `arena`: the
  // reserved bytes, page counters and segments (arenas holding mapped pages).
  void NotePagesMapped(const Arena* arena, int64_t pages)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Free's parts: a block other streams used (record_stream) or that may be
  // exported to other processes; and the common end, which frees a live
  // entry with no other stream's use pending (Note [Hot path]).
  absl::Status FreeSharedOrUsed(uintptr_t addr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeEntry(LiveEntry* it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Free and FreeOnStream (inlined into each): `also_used_by`, when not null,
  // is recorded as a stream that uses the block (RecordStream's effect) before
  // it is freed.
  absl::Status FreeLive(void* ptr, bool* owned,
                        const StreamHandle* also_used_by)
      ABSL_LOCKS_EXCLUDED(mu_);
  // RecordStream's effect on a live entry.
  void AddUse(LiveEntry* it, StreamHandle stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Free of an exported block: whether it must wait for its IPC holders (an
  // error for a second Free). false: free it now.
  absl::StatusOr<bool> IpcDeferFree(uintptr_t addr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The exported blocks that may be freed now (their records dropped).
  void IpcCollectFreeable(MetadataVector<uintptr_t>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live block containing addr, or nullptr.
  const Block* LiveBlockContaining(uintptr_t addr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // IpcExportBlock's steps. The live block containing `ptr` if it may be
  // exported (not freed while exported; a backend that can share pages).
  absl::StatusOr<const Block*> ExportableBlock(const void* ptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes ipc_ and its lease table on first use.
  absl::Status EnsureIpcExportState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills `h` but for its export: this process, the block's place in its
  // pages, the lease table and the pages' shared descriptors.
  absl::Status DescribeBlockForExport(const Block& block, IpcHandle* h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CheckInvariants' steps (device_allocator_invariants.cc), in its order;
  // each returns the first violation it finds.
  struct InvariantRecount;
  absl::Status CheckArena(const Arena& arena, InvariantRecount* recount) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckLiveBlock(const Arena& arena, const Block* b, bool paused,
                              InvariantRecount* recount) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckSlots() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckReclaimQueue(size_t queued_blocks) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckStatsRecount(const InvariantRecount& recount) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckSegmentsAndPages() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int device_;
  const Options options_;
  mutable Mutex mu_;
  // The backend given to Create, wrapped to count and time its calls.
  std::unique_ptr<TimedBackend> backend_;
  std::unique_ptr<EventSource> events_;
  const SizeRounding rounding_;
  const size_t page_size_;
  StreamOrder order_ ABSL_GUARDED_BY(mu_);  // slots, fences, pending frees
  BlockPool blocks_ ABSL_GUARDED_BY(mu_);
  // The memory limit, which the page domains' pools count against.
  PageBudget budget_ ABSL_GUARDED_BY(mu_);
  size_t limit_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  size_t limit_request_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  double limit_fraction_ ABSL_GUARDED_BY(mu_) = 1.0;
  MetadataVector<StreamState> streams_ ABSL_GUARDED_BY(mu_);  // by slot
  MetadataVector<std::unique_ptr<Arena>> arenas_ ABSL_GUARDED_BY(mu_);
  LiveTable live_ ABSL_GUARDED_BY(mu_);
  StatsBook stats_ ABSL_GUARDED_BY(mu_);
  // CallTicks inside Malloc and Free (stats' alloc_cpu_ns once converted).
  uint64_t call_ticks_ ABSL_GUARDED_BY(mu_) = 0;
  OomFacts last_oom_ ABSL_GUARDED_BY(mu_);  // (on the heap: made on OOM only)
  uint64_t alloc_seq_ ABSL_GUARDED_BY(mu_) = 0;
  MetadataVector<std::unique_ptr<Pool>> pools_ ABSL_GUARDED_BY(mu_);
  int capturing_ ABSL_GUARDED_BY(mu_) = 0;  // pools between Begin and End
  TraceRing trace_ ABSL_GUARDED_BY(mu_);
  SizeHistogram request_sizes_ ABSL_GUARDED_BY(mu_);
  VaRuns runs_ ABSL_GUARDED_BY(mu_);  // VA runs unmapped (for the trace)
  // Placement decisions, and the pages under placed blocks (after the members
  // they are lent): pages of page_size_ in base_pages_ and, with the option
  // large_page_mb, pages of that size in large_pages_ (else null).
  const std::unique_ptr<PlacementPolicy> placement_;
  const std::unique_ptr<PageDomain> base_pages_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<PageDomain> large_pages_ ABSL_GUARDED_BY(mu_);
  // The large page that new large blocks of a whole number of it are placed
  // in; 0 when there is none, or once the two sizes traded memory
  // (RetireLargePages).
  size_t large_route_size_ ABSL_GUARDED_BY(mu_) = 0;
  size_t traded_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // NoteTrade's sum
  SleepState sleep_ ABSL_GUARDED_BY(mu_);         // region tags on this device
  // Exports and opened imports (made on first use; nullptr until then, so
  // Free's check is one load). Declared last: unmaps imports before the
  // backend goes.
  std::unique_ptr<IpcState, IpcStateDeleter> ipc_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_DEVICE_ALLOCATOR_H_
