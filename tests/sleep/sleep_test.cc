// Sleep and wake on the host backend (docs/sleep.md): what pause and resume
// promise, checked on real memory with the engine's invariants after each
// step.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "allocator/base/units.h"
#include "allocator/device_allocator.h"
#include "allocator/obs/snapshot.h"
#include "allocator/phys/fault_injecting_backend.h"
#include "allocator/phys/host_backend.h"
#include "allocator/sleep/backup.h"
#include "allocator/sleep/region_tags.h"
#include "allocator/stream/host_event_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/backends.h"

namespace fragfree {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kPage = 2 * kMiB;

// Opens a region for a scope.
class Region {
 public:
  explicit Region(const std::string& tag) {
    EXPECT_TRUE(RegionBegin(tag).ok());
  }
  ~Region() { EXPECT_TRUE(RegionEnd().ok()); }
};

RegionTag Tag(const std::string& name) {
  absl::StatusOr<RegionTag> t = InternRegionTag(name);
  EXPECT_TRUE(t.ok());
  return *t;
}

void Fill(void* p, size_t n, uint8_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(seed + i * 7 + (i >> 12));
}
bool Holds(const void* p, size_t n, uint8_t seed) {
  auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != uint8_t(seed + i * 7 + (i >> 12))) return false;
  }
  return true;
}

TagSleepInfo InfoOf(DeviceAllocator& d, const std::string& name) {
  for (const TagSleepInfo& t : d.SleepInfo()) {
    if (t.name == name) return t;
  }
  return TagSleepInfo();
}

struct Alloc {
  void* ptr;
  size_t size;
  uint8_t seed;
};

// Allocates `sizes` inside region `tag` on alternating streams and fills them.
std::vector<Alloc> AllocTagged(DeviceAllocator& d, const std::string& tag,
                               const std::vector<size_t>& sizes, uint8_t seed) {
  Region region(tag);
  std::vector<Alloc> out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    absl::StatusOr<void*> p = d.Malloc(sizes[i], i % 2 ? 0x1000 : 0);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) continue;
    Fill(*p, sizes[i], uint8_t(seed + i));
    out.push_back({*p, sizes[i], uint8_t(seed + i)});
  }
  return out;
}

// A region is the opening thread's alone: while one thread is inside one,
// another thread's tag stays none, and the first thread's tag holds until its
// end (the process-wide count of open regions only lets a read skip the
// thread's stack while no region is open anywhere).
TEST(RegionTags, OtherThreadsStayUntagged) {
  ASSERT_TRUE(RegionBegin("mine").ok());
  const RegionTag mine = CurrentRegionTag();
  EXPECT_NE(mine, kNoRegionTag);
  RegionTag seen = mine;
  std::thread([&] { seen = CurrentRegionTag(); }).join();
  EXPECT_EQ(seen, kNoRegionTag);
  std::thread([&] {
    ASSERT_TRUE(RegionBegin("theirs").ok());
    seen = CurrentRegionTag();
    ASSERT_TRUE(RegionEnd().ok());
  }).join();
  EXPECT_EQ(RegionTagName(seen), "theirs");
  EXPECT_EQ(CurrentRegionTag(), mine);
  ASSERT_TRUE(RegionEnd().ok());
  EXPECT_EQ(CurrentRegionTag(), kNoRegionTag);
}

TEST(RegionTags, NestAndEnd) {
  EXPECT_EQ(CurrentRegionTag(), kNoRegionTag);
  ASSERT_TRUE(RegionBegin("outer").ok());
  const RegionTag outer = CurrentRegionTag();
  ASSERT_TRUE(RegionBegin("inner").ok());
  EXPECT_NE(CurrentRegionTag(), outer);
  EXPECT_EQ(RegionTagName(CurrentRegionTag()), "inner");
  ASSERT_TRUE(RegionEnd().ok());
  EXPECT_EQ(CurrentRegionTag(), outer);
  ASSERT_TRUE(RegionEnd().ok());
  EXPECT_EQ(CurrentRegionTag(), kNoRegionTag);
  EXPECT_TRUE(absl::IsFailedPrecondition(RegionEnd()));
  EXPECT_TRUE(absl::IsInvalidArgument(RegionBegin("")));
  EXPECT_TRUE(absl::IsInvalidArgument(RegionBegin(std::string(200, 'x'))));
  EXPECT_EQ(CurrentRegionTag(), kNoRegionTag);
  EXPECT_EQ(FindRegionTag("outer"), outer);
  EXPECT_EQ(FindRegionTag("never-used"), kNoRegionTag);
}

TEST(Sleep, TaggedAllocationsLiveInTheirOwnArenas) {
  testing::TestDevice dev = testing::MakeHostDevice(64 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  void* untagged = *d.Malloc(kMiB, 0);
  std::vector<Alloc> a = AllocTagged(d, "own-a", {kMiB, 4096}, 1);
  std::vector<Alloc> b = AllocTagged(d, "own-b", {kMiB}, 2);
  for (const ArenaView& v : d.Arenas()) {
    for (const BlockView& blk : v.blocks) {
      if (blk.state != BlockState::kAllocated) continue;
      const void* p = reinterpret_cast<const void*>(blk.addr);
      if (p == untagged) {
        EXPECT_EQ(v.tag, "");
      }
      if (p == a[0].ptr || p == a[1].ptr) {
        EXPECT_EQ(v.tag, "own-a");
      }
      if (p == b[0].ptr) {
        EXPECT_EQ(v.tag, "own-b");
      }
    }
  }
  EXPECT_EQ(InfoOf(d, "own-a").live_blocks, 2u);
  EXPECT_TRUE(d.CheckInvariants().ok());
}

TEST(Sleep, BackupKeepsContentsAndAddressesAndReleasesMemory) {
  testing::TestDevice dev = testing::MakeHostDevice(128 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  // Untagged memory and another tag: must be untouched by the pause.
  void* plain = *d.Malloc(3 * kMiB, 0);
  Fill(plain, 3 * kMiB, 99);
  std::vector<Alloc> other = AllocTagged(d, "bk-other", {2 * kMiB + 512}, 50);
  std::vector<Alloc> w = AllocTagged(
      d, "bk-weights", {kMiB, 512, 5 * kMiB + 3, 64 * 1024, 9 * kMiB, 777}, 10);
  ASSERT_TRUE(d.CheckInvariants().ok());
  const size_t footprint = InfoOf(d, "bk-weights").mapped_bytes;
  ASSERT_GT(footprint, 0u);
  const DeviceStats before = d.GetStats();
  const size_t free_before = before.device_free_bytes;

  ASSERT_TRUE(d.Pause({Tag("bk-weights")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
  const DeviceStats paused = d.GetStats();
  EXPECT_EQ(paused.mapped_bytes.current,
            before.mapped_bytes.current - int64_t(footprint));
  EXPECT_GE(size_t(paused.device_free_bytes), free_before + footprint);
  EXPECT_EQ(paused.paused_tags, 1);
  int64_t live = 0;
  for (const Alloc& a : w) live += int64_t(AlignUp(a.size, 512));
  EXPECT_EQ(paused.paused_bytes, live);
  EXPECT_GE(paused.backup_bytes, live);
  // Allocations stay live at their addresses while paused.
  EXPECT_EQ(paused.allocated_bytes.pool[kPoolAll].current,
            before.allocated_bytes.pool[kPoolAll].current);
  for (const Alloc& a : w) EXPECT_EQ(d.AllocationSize(a.ptr), a.size);
  const TagSleepInfo info = InfoOf(d, "bk-weights");
  EXPECT_TRUE(info.paused);
  EXPECT_EQ(info.mapped_bytes, 0u);
  // Untagged memory and the other tag are intact and usable.
  EXPECT_TRUE(Holds(plain, 3 * kMiB, 99));
  EXPECT_TRUE(Holds(other[0].ptr, other[0].size, other[0].seed));
  // Pausing again is a no-op.
  ASSERT_TRUE(d.Pause({Tag("bk-weights")}, BackupMode::kCpu).ok());

  ASSERT_TRUE(d.Resume({Tag("bk-weights")}).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
  for (const Alloc& a : w) {
    EXPECT_EQ(d.AllocationSize(a.ptr), a.size);
    EXPECT_TRUE(Holds(a.ptr, a.size, a.seed)) << a.size;
  }
  const DeviceStats resumed = d.GetStats();
  EXPECT_EQ(InfoOf(d, "bk-weights").mapped_bytes, footprint);
  EXPECT_EQ(resumed.mapped_bytes.current, before.mapped_bytes.current);
  EXPECT_EQ(resumed.paused_tags, 0);
  EXPECT_EQ(resumed.paused_bytes, 0);
  EXPECT_EQ(resumed.backup_bytes, 0);  // the host copy is freed on resume
  EXPECT_EQ(resumed.num_pauses, 1);
  EXPECT_EQ(resumed.num_resumes, 1);
  // Resuming again is a no-op; the tag allocates again.
  ASSERT_TRUE(d.Resume({Tag("bk-weights")}).ok());
  {
    Region region("bk-weights");
    absl::StatusOr<void*> p = d.Malloc(kMiB, 0);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE(d.Free(*p).ok());
  }
  for (const Alloc& a : w) ASSERT_TRUE(d.Free(a.ptr).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(Sleep, WithoutBackupMemoryComesBackAtTheSameAddresses) {
  testing::TestDevice dev = testing::MakeHostDevice(64 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> kv = AllocTagged(d, "nb-kv", {8 * kMiB, 8 * kMiB}, 3);
  const size_t footprint = InfoOf(d, "nb-kv").mapped_bytes;
  ASSERT_TRUE(d.Pause({Tag("nb-kv")}, BackupMode::kNone).ok());
  EXPECT_EQ(d.GetStats().backup_bytes, 0);
  EXPECT_EQ(d.GetStats().mapped_bytes.current, 0);
  ASSERT_TRUE(d.Resume({Tag("nb-kv")}).ok());
  EXPECT_EQ(InfoOf(d, "nb-kv").mapped_bytes, footprint);
  for (const Alloc& a : kv) {
    EXPECT_EQ(d.AllocationSize(a.ptr), a.size);
    Fill(a.ptr, a.size, 7);  // writable again
  }
  ASSERT_TRUE(d.CheckInvariants().ok());
}

// With pages of 4 x the device's granularity (page_size_mb), a tag leaves and
// returns in those pages: its memory is given back whole, its blocks come
// back at their addresses with their bytes, other memory is untouched.
TEST(Sleep, LargerPagesLeaveAndReturnWhole) {
  Options o;
  o.page_size_bytes = 4 * kPage;
  testing::TestDevice dev = testing::MakeHostDevice(128 * kMiB, kPage, o);
  DeviceAllocator& d = *dev.allocator;
  void* plain = *d.Malloc(3 * kMiB, 0);
  Fill(plain, 3 * kMiB, 99);
  std::vector<Alloc> w =
      AllocTagged(d, "big-pages", {kMiB, 512, 13 * kMiB + 3, 9 * kMiB}, 10);
  const size_t footprint = InfoOf(d, "big-pages").mapped_bytes;
  ASSERT_GT(footprint, 0u);
  EXPECT_EQ(footprint % (4 * kPage), 0u) << footprint;
  const DeviceStats before = d.GetStats();
  ASSERT_TRUE(d.Pause({Tag("big-pages")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
  EXPECT_EQ(d.GetStats().mapped_bytes.current,
            before.mapped_bytes.current - int64_t(footprint));
  EXPECT_TRUE(Holds(plain, 3 * kMiB, 99));
  ASSERT_TRUE(d.Resume({Tag("big-pages")}).ok());
  ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
  EXPECT_EQ(InfoOf(d, "big-pages").mapped_bytes, footprint);
  for (const Alloc& a : w) {
    EXPECT_EQ(d.AllocationSize(a.ptr), a.size);
    EXPECT_TRUE(Holds(a.ptr, a.size, a.seed)) << a.size;
  }
  for (const Alloc& a : w) ASSERT_TRUE(d.Free(a.ptr).ok());
  ASSERT_TRUE(d.Free(plain).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
}

// The page sizes of the mapped arenas of `tag`, one entry per arena, sorted.
std::vector<size_t> TagPageSizes(DeviceAllocator& d, const std::string& tag) {
  std::vector<size_t> sizes;
  for (const ArenaView& v : d.Arenas()) {
    if (v.tag == tag && v.mapped_pages > 0) sizes.push_back(v.page_size);
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

// With large pages (large_page_mb) of 4 x the page, a tag's block of whole
// large pages and its block of base pages leave together, their memory given
// back to the device, and return at their addresses with their bytes, each
// in its own page size again.
TEST(Sleep, LargePagesAndBasePagesLeaveAndReturnTogether) {
  constexpr size_t kLarge = 4 * kPage;
  Options o;
  o.large_page_bytes = kLarge;
  testing::TestDevice dev = testing::MakeHostDevice(128 * kMiB, kPage, o);
  DeviceAllocator& d = *dev.allocator;
  void* plain = *d.Malloc(2 * kLarge, 0);  // untagged, large pages too
  Fill(plain, 2 * kLarge, 99);
  // 2 large pages; 5 base pages (not a whole number of large pages).
  std::vector<Alloc> w =
      AllocTagged(d, "large-pages", {2 * kLarge, 9 * kMiB + 3}, 20);
  ASSERT_EQ(w.size(), 2u);
  const std::vector<size_t> page_sizes = {kPage, kLarge};
  ASSERT_EQ(TagPageSizes(d, "large-pages"), page_sizes);
  const size_t footprint = InfoOf(d, "large-pages").mapped_bytes;
  EXPECT_EQ(footprint, 2 * kLarge + 5 * kPage);
  const DeviceStats before = d.GetStats();

  ASSERT_TRUE(d.Pause({Tag("large-pages")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
  // Both sizes' pages unmapped and released to the device.
  const DeviceStats paused = d.GetStats();
  EXPECT_EQ(paused.mapped_bytes.current,
            before.mapped_bytes.current - int64_t(footprint));
  EXPECT_EQ(paused.reserved_bytes.pool[kPoolAll].current,
            before.reserved_bytes.pool[kPoolAll].current - int64_t(footprint));
  EXPECT_GE(size_t(paused.device_free_bytes),
            size_t(before.device_free_bytes) + footprint);
  EXPECT_EQ(InfoOf(d, "large-pages").mapped_bytes, 0u);
  EXPECT_TRUE(Holds(plain, 2 * kLarge, 99));

  ASSERT_TRUE(d.Resume({Tag("large-pages")}).ok());
  ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
  EXPECT_EQ(TagPageSizes(d, "large-pages"), page_sizes);
  EXPECT_EQ(InfoOf(d, "large-pages").mapped_bytes, footprint);
  EXPECT_EQ(d.GetStats().mapped_bytes.current, before.mapped_bytes.current);
  for (const Alloc& a : w) {
    EXPECT_EQ(d.AllocationSize(a.ptr), a.size);
    EXPECT_TRUE(Holds(a.ptr, a.size, a.seed)) << a.size;
  }
  EXPECT_TRUE(Holds(plain, 2 * kLarge, 99));
  for (const Alloc& a : w) ASSERT_TRUE(d.Free(a.ptr).ok());
  ASSERT_TRUE(d.Free(plain).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(Sleep, AllocatingIntoAPausedTagFailsAndOthersProceed) {
  testing::TestDevice dev = testing::MakeHostDevice(64 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w = AllocTagged(d, "ap-w", {kMiB, 4 * kMiB}, 5);
  ASSERT_TRUE(d.Pause({Tag("ap-w")}, BackupMode::kCpu).ok());
  {
    Region region("ap-w");
    absl::StatusOr<void*> p = d.Malloc(kMiB, 0);
    ASSERT_FALSE(p.ok());
    EXPECT_TRUE(absl::IsFailedPrecondition(p.status()));
    EXPECT_THAT(p.status().message(), HasSubstr("'ap-w'"));
    EXPECT_THAT(p.status().message(), HasSubstr("paused"));
    // An inner region of another tag allocates.
    Region inner("ap-other");
    absl::StatusOr<void*> q = d.Malloc(kMiB, 0);
    ASSERT_TRUE(q.ok());
    Fill(*q, kMiB, 1);
    EXPECT_TRUE(Holds(*q, kMiB, 1));
  }
  absl::StatusOr<void*> plain = d.Malloc(6 * kMiB, 0x2000);
  ASSERT_TRUE(plain.ok());
  Fill(*plain, 6 * kMiB, 2);
  ASSERT_TRUE(d.CheckInvariants().ok());
  // Freeing a paused allocation is bookkeeping: allowed.
  ASSERT_TRUE(d.Free(w[0].ptr).ok());
  EXPECT_EQ(d.GetStats().paused_bytes, int64_t(AlignUp(w[1].size, 512)));
  ASSERT_TRUE(d.CheckInvariants().ok());
  ASSERT_TRUE(d.Resume({Tag("ap-w")}).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
  EXPECT_TRUE(Holds(w[1].ptr, w[1].size, w[1].seed));
  EXPECT_EQ(d.AllocationSize(w[0].ptr), 0u);
  // Only the live allocation's pages came back.
  EXPECT_EQ(InfoOf(d, "ap-w").mapped_bytes, AlignUp(4 * kMiB, kPage));
}

TEST(Sleep, PausingATagWithoutMemoryBlocksItsAllocations) {
  testing::TestDevice dev = testing::MakeHostDevice(32 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  ASSERT_TRUE(d.Pause({Tag("empty-tag")}, BackupMode::kCpu).ok());
  EXPECT_TRUE(InfoOf(d, "empty-tag").paused);
  {
    Region region("empty-tag");
    EXPECT_FALSE(d.Malloc(kMiB, 0).ok());
  }
  ASSERT_TRUE(d.Resume({Tag("empty-tag")}).ok());
  Region region("empty-tag");
  absl::StatusOr<void*> p = d.Malloc(kMiB, 0);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(d.Free(*p).ok());
}

TEST(Sleep, ResumeWithoutRoomFailsAndStaysPaused) {
  testing::TestDevice dev = testing::MakeHostDevice(32 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w = AllocTagged(d, "oom-w", {12 * kMiB, 3 * kMiB}, 9);
  ASSERT_TRUE(d.Pause({Tag("oom-w")}, BackupMode::kCpu).ok());
  // Something else takes the memory meanwhile.
  absl::StatusOr<void*> big = d.Malloc(24 * kMiB, 0);
  ASSERT_TRUE(big.ok());
  const DeviceStats before = d.GetStats();
  absl::Status s = d.Resume({Tag("oom-w")});
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("'oom-w'"));
  EXPECT_THAT(s.message(), HasSubstr("stay paused"));
  ASSERT_TRUE(d.CheckInvariants().ok());
  const DeviceStats after = d.GetStats();
  EXPECT_TRUE(InfoOf(d, "oom-w").paused);
  EXPECT_EQ(InfoOf(d, "oom-w").mapped_bytes, 0u);
  EXPECT_EQ(after.mapped_bytes.current, before.mapped_bytes.current);
  EXPECT_GE(after.device_free_bytes, before.device_free_bytes);
  EXPECT_EQ(after.num_resume_failures, 1);
  EXPECT_GT(after.backup_bytes, 0);
  // Room made, the resume succeeds with the contents.
  ASSERT_TRUE(d.Free(*big).ok());
  ASSERT_TRUE(d.Resume({Tag("oom-w")}).ok());
  for (const Alloc& a : w) EXPECT_TRUE(Holds(a.ptr, a.size, a.seed));
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(Sleep, ResumeTakesCachedPagesOfOtherMemory) {
  // Memory cached (free, mapped) by untagged allocations must not block a
  // resume: it is reclaimed.
  testing::TestDevice dev = testing::MakeHostDevice(32 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w = AllocTagged(d, "rc-w", {16 * kMiB}, 4);
  ASSERT_TRUE(d.Pause({Tag("rc-w")}, BackupMode::kCpu).ok());
  void* big = *d.Malloc(30 * kMiB, 0);
  ASSERT_TRUE(d.Free(big).ok());  // cached, still mapped
  EXPECT_EQ(d.GetStats().mapped_bytes.current, int64_t(30 * kMiB));
  ASSERT_TRUE(d.Resume({Tag("rc-w")}).ok());
  EXPECT_TRUE(Holds(w[0].ptr, w[0].size, w[0].seed));
  ASSERT_TRUE(d.CheckInvariants().ok());
}

// The engine on a host backend that fails chosen calls.
struct FaultyDevice {
  std::unique_ptr<DeviceAllocator> allocator;
  FaultInjectingBackend* faults;
};
FaultyDevice MakeFaultyDevice(size_t capacity) {
  auto host = HostBackend::Create(capacity, kPage);
  EXPECT_TRUE(host.ok());
  auto backend = std::make_unique<FaultInjectingBackend>(std::move(*host));
  FaultyDevice d;
  d.faults = backend.get();
  Options options;
  options.backend = "host";
  d.allocator = std::move(*DeviceAllocator::Create(
      0, options, std::move(backend), std::make_unique<HostEventSource>()));
  return d;
}

TEST(Sleep, FailedCreateOrMapDuringResumeRollsBack) {
  FaultyDevice dev = MakeFaultyDevice(64 * kMiB);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w =
      AllocTagged(d, "fault-w", {3 * kMiB, kMiB, 7 * kMiB, 512}, 21);
  const size_t footprint = InfoOf(d, "fault-w").mapped_bytes;
  ASSERT_TRUE(d.Pause({Tag("fault-w")}, BackupMode::kCpu).ok());
  const DeviceStats paused = d.GetStats();
  const size_t pages = footprint / kPage;
  for (BackendOp op :
       {BackendOp::kCreate, BackendOp::kMap, BackendOp::kSetAccess}) {
    for (size_t k = 1; k <= pages; ++k) {
      dev.faults->FailCalls(
          op, dev.faults->Calls(op) + int64_t(k), 1,
          op == BackendOp::kCreate
              ? absl::ResourceExhaustedError("injected: device full")
              : absl::InternalError("injected: map failed"));
      absl::Status s = d.Resume({Tag("fault-w")});
      dev.faults->ClearFaults();
      if (op == BackendOp::kSetAccess && s.ok()) break;  // fewer calls
      ASSERT_FALSE(s.ok()) << "op " << int(op) << " k " << k;
      if (op == BackendOp::kCreate) {
        EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
      }
      ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
      EXPECT_TRUE(InfoOf(d, "fault-w").paused);
      EXPECT_EQ(InfoOf(d, "fault-w").mapped_bytes, 0u);
      const DeviceStats now = d.GetStats();
      EXPECT_EQ(now.mapped_bytes.current, paused.mapped_bytes.current);
      EXPECT_EQ(now.device_free_bytes, paused.device_free_bytes);
    }
  }
  ASSERT_TRUE(d.Resume({Tag("fault-w")}).ok());
  for (const Alloc& a : w) EXPECT_TRUE(Holds(a.ptr, a.size, a.seed));
  EXPECT_EQ(InfoOf(d, "fault-w").mapped_bytes, footprint);
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(Sleep, PauseUnmapsRunsOfPagesInOneCallAndReleasesThem) {
  FaultyDevice dev = MakeFaultyDevice(64 * kMiB);
  DeviceAllocator& d = *dev.allocator;
  // One stream: 16 MiB of adjacent blocks, 8 pages in one arena.
  std::vector<Alloc> w;
  {
    Region region("runs-w");
    for (uint8_t i = 0; i < 4; ++i) {
      absl::StatusOr<void*> p = d.Malloc(4 * kMiB, 0);
      ASSERT_TRUE(p.ok()) << p.status();
      Fill(*p, 4 * kMiB, uint8_t(40 + i));
      w.push_back({*p, 4 * kMiB, uint8_t(40 + i)});
    }
  }
  const size_t pages = InfoOf(d, "runs-w").mapped_bytes / kPage;
  ASSERT_GE(pages, 8u);
  const int64_t unmaps = dev.faults->Calls(BackendOp::kUnmap);
  const int64_t releases = dev.faults->Calls(BackendOp::kRelease);
  const DeviceStats before = d.GetStats();
  ASSERT_TRUE(d.Pause({Tag("runs-w")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
  const auto [pause, unused] = d.LastSleepTimes();
  EXPECT_EQ(pause.pages_unmapped, pages);
  EXPECT_EQ(pause.pages_released, pages);
  EXPECT_EQ(pause.bytes_copied, 16 * kMiB);
  // Fewer backend calls than pages: whole runs at once.
  EXPECT_EQ(pause.unmap_calls,
            uint64_t(dev.faults->Calls(BackendOp::kUnmap) - unmaps));
  EXPECT_LT(pause.unmap_calls, pages);
  EXPECT_EQ(dev.faults->Calls(BackendOp::kRelease) - releases, int64_t(pages));
  EXPECT_EQ(d.GetStats().mapped_bytes.current,
            before.mapped_bytes.current - int64_t(pages * kPage));
  ASSERT_TRUE(d.Resume({Tag("runs-w")}).ok());
  const auto [unused2, resume] = d.LastSleepTimes();
  EXPECT_EQ(resume.pages_mapped, pages);
  EXPECT_EQ(resume.bytes_copied, 16 * kMiB);
  EXPECT_GE(resume.map_ranges, 1u);
  for (const Alloc& a : w) EXPECT_TRUE(Holds(a.ptr, a.size, a.seed));
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(Sleep, ARefusedRunUnmapFallsBackToOnePageAtATime) {
  FaultyDevice dev = MakeFaultyDevice(64 * kMiB);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w;
  {
    Region region("runs-f");
    absl::StatusOr<void*> p = d.Malloc(12 * kMiB, 0);
    ASSERT_TRUE(p.ok()) << p.status();
    Fill(*p, 12 * kMiB, 61);
    w.push_back({*p, 12 * kMiB, 61});
  }
  const size_t pages = InfoOf(d, "runs-f").mapped_bytes / kPage;
  ASSERT_GE(pages, 6u);
  // The run's single call is refused; the pages go one by one.
  dev.faults->FailNext(BackendOp::kUnmap, 1,
                       absl::InvalidArgumentError("injected: not one mapping"));
  ASSERT_TRUE(d.Pause({Tag("runs-f")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
  const auto [pause, unused] = d.LastSleepTimes();
  EXPECT_EQ(pause.pages_unmapped, pages);
  EXPECT_EQ(pause.unmap_calls, pages + 1);
  EXPECT_EQ(InfoOf(d, "runs-f").mapped_bytes, 0u);
  ASSERT_TRUE(d.Resume({Tag("runs-f")}).ok());
  EXPECT_TRUE(Holds(w[0].ptr, w[0].size, w[0].seed));
  // A page refused too: the pause reports it, the tag is paused, the pages
  // before it are gone and the rest stay mapped; resume maps what is missing.
  const int64_t first = dev.faults->Calls(BackendOp::kUnmap) + 1;
  dev.faults->FailCalls(BackendOp::kUnmap, first, 3,
                        absl::InternalError("injected: unmap failed"));
  absl::Status s = d.Pause({Tag("runs-f")}, BackupMode::kCpu);
  dev.faults->ClearFaults();
  EXPECT_FALSE(s.ok());
  ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
  EXPECT_TRUE(InfoOf(d, "runs-f").paused);
  EXPECT_GT(InfoOf(d, "runs-f").mapped_bytes, 0u);
  ASSERT_TRUE(d.Resume({Tag("runs-f")}).ok());
  EXPECT_TRUE(Holds(w[0].ptr, w[0].size, w[0].seed));
  ASSERT_TRUE(d.Free(w[0].ptr).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(Sleep, PendingFreesAndRecordedStreamsAreWaitedFor) {
  testing::TestDevice dev = testing::MakeHostDevice(64 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w = AllocTagged(d, "pf-w", {4 * kMiB, 4 * kMiB}, 30);
  ASSERT_TRUE(d.RecordStream(w[0].ptr, 0x3000).ok());
  ASSERT_TRUE(d.RecordStream(w[1].ptr, 0x3000).ok());
  ASSERT_TRUE(d.Free(w[1].ptr).ok());  // pending on stream 0x3000
  ASSERT_TRUE(d.Pause({Tag("pf-w")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
  EXPECT_EQ(InfoOf(d, "pf-w").live_blocks, 1u);
  ASSERT_TRUE(d.Resume({Tag("pf-w")}).ok());
  EXPECT_TRUE(Holds(w[0].ptr, w[0].size, w[0].seed));
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(Sleep, SnapshotMarksPausedSegments) {
  testing::TestDevice dev = testing::MakeHostDevice(64 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w = AllocTagged(d, "snap-w", {3 * kMiB}, 1);
  ASSERT_TRUE(d.Pause({Tag("snap-w")}, BackupMode::kNone).ok());
  const std::string json = SnapshotToJson(0, d.Arenas(), d.Trace(), {});
  EXPECT_THAT(json, HasSubstr("\"tag\":\"snap-w\""));
  EXPECT_THAT(json, HasSubstr("\"paused\":true"));
  EXPECT_THAT(json,
              HasSubstr(std::to_string(reinterpret_cast<uintptr_t>(w[0].ptr))));
  ASSERT_TRUE(d.Resume({Tag("snap-w")}).ok());
  EXPECT_THAT(SnapshotToJson(0, d.Arenas(), d.Trace(), {}),
              HasSubstr("\"paused\":false"));
}

TEST(Sleep, RetiredStreamOfAPausedTag) {
  testing::TestDevice dev = testing::MakeHostDevice(64 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w;
  {
    Region region("rt-w");
    w.push_back({*d.Malloc(2 * kMiB, 0x5000), 2 * kMiB, 3});
  }
  Fill(w[0].ptr, w[0].size, 3);
  ASSERT_TRUE(d.Pause({Tag("rt-w")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.RetireStream(0x5000).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
  ASSERT_TRUE(d.Resume({Tag("rt-w")}).ok());
  EXPECT_TRUE(Holds(w[0].ptr, w[0].size, 3));
  ASSERT_TRUE(d.Free(w[0].ptr).ok());  // the retired arena goes
  ASSERT_TRUE(d.CheckInvariants().ok());
}

// --- Kept backups (resume with keep_backup) ----------------------------------

TEST(SleepKeep, KeptBackupIsReusedByTheNextPauseOfAnyTag) {
  testing::TestDevice dev = testing::MakeHostDevice(128 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w =
      AllocTagged(d, "keep-w", {kMiB, 512, 5 * kMiB + 3, 9 * kMiB, 777}, 20);
  std::vector<Alloc> o = AllocTagged(d, "keep-o", {3 * kMiB, 4 * kMiB}, 40);
  ASSERT_TRUE(d.Pause({Tag("keep-w")}, BackupMode::kCpu).ok());
  const int64_t backup = d.GetStats().backup_bytes;
  ASSERT_GT(backup, 0);
  EXPECT_EQ(d.GetStats().kept_backup_bytes, 0);
  ASSERT_TRUE(d.Resume({Tag("keep-w")}, /*keep_backup=*/true).ok());
  ASSERT_TRUE(d.CheckInvariants().ok());
  for (const Alloc& a : w) EXPECT_TRUE(Holds(a.ptr, a.size, a.seed));
  DeviceStats s = d.GetStats();
  EXPECT_EQ(s.backup_bytes, 0);
  EXPECT_EQ(s.kept_backup_bytes, backup);  // kept, not freed

  // New contents, a second cycle: the kept chunks hold the backup.
  for (Alloc& a : w) {
    a.seed = uint8_t(a.seed + 100);
    Fill(a.ptr, a.size, a.seed);
  }
  ASSERT_TRUE(d.Pause({Tag("keep-w")}, BackupMode::kCpu).ok());
  s = d.GetStats();
  EXPECT_EQ(s.backup_bytes, backup);
  EXPECT_EQ(s.kept_backup_bytes, 0);  // all taken: nothing new was needed
  ASSERT_TRUE(d.Resume({Tag("keep-w")}, true).ok());
  for (const Alloc& a : w) EXPECT_TRUE(Holds(a.ptr, a.size, a.seed));
  EXPECT_EQ(d.GetStats().kept_backup_bytes, backup);

  // Another tag (smaller) takes from the same kept memory.
  ASSERT_TRUE(d.Pause({Tag("keep-o")}, BackupMode::kCpu).ok());
  s = d.GetStats();
  EXPECT_GT(s.backup_bytes, 0);
  EXPECT_EQ(s.backup_bytes + s.kept_backup_bytes, backup);
  // A pause without backup leaves the kept memory alone.
  ASSERT_TRUE(d.Pause({Tag("keep-w")}, BackupMode::kNone).ok());
  EXPECT_EQ(d.GetStats().backup_bytes + d.GetStats().kept_backup_bytes, backup);
  ASSERT_TRUE(d.Resume({Tag("keep-o"), Tag("keep-w")}).ok());  // not kept
  for (const Alloc& a : o) EXPECT_TRUE(Holds(a.ptr, a.size, a.seed));
  s = d.GetStats();
  EXPECT_EQ(s.backup_bytes, 0);
  // keep-o took the one kept chunk (best fit: the only one), freed with it.
  EXPECT_EQ(s.kept_backup_bytes, 0);

  // Release frees what is kept, and only that.
  for (const Alloc& a : o) Fill(a.ptr, a.size, a.seed);
  ASSERT_TRUE(d.Pause({Tag("keep-o")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.Resume({Tag("keep-o")}, true).ok());
  const int64_t kept = d.GetStats().kept_backup_bytes;
  EXPECT_GT(kept, 0);
  EXPECT_EQ(d.ReleaseBackup(), size_t(kept));
  EXPECT_EQ(d.GetStats().kept_backup_bytes, 0);
  EXPECT_EQ(d.ReleaseBackup(), 0u);
  // A cycle after the release pins anew and still works.
  for (const Alloc& a : o) Fill(a.ptr, a.size, uint8_t(a.seed + 1));
  ASSERT_TRUE(d.Pause({Tag("keep-o")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.Resume({Tag("keep-o")}, true).ok());
  for (const Alloc& a : o)
    EXPECT_TRUE(Holds(a.ptr, a.size, uint8_t(a.seed + 1)));
  EXPECT_EQ(d.GetStats().kept_backup_bytes, kept);
  ASSERT_TRUE(d.CheckInvariants().ok());
  for (const Alloc& a : w) ASSERT_TRUE(d.Free(a.ptr).ok());
  for (const Alloc& a : o) ASSERT_TRUE(d.Free(a.ptr).ok());
}

TEST(SleepKeep, KeptBackupTooSmallGrows) {
  testing::TestDevice dev = testing::MakeHostDevice(128 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> w = AllocTagged(d, "grow-w", {3 * kMiB}, 60);
  ASSERT_TRUE(d.Pause({Tag("grow-w")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.Resume({Tag("grow-w")}, true).ok());
  const int64_t small = d.GetStats().kept_backup_bytes;
  ASSERT_GT(small, 0);
  // The tag grows: the kept chunk is used and new ones are got for the rest.
  std::vector<Alloc> more =
      AllocTagged(d, "grow-w", {7 * kMiB, 11 * kMiB + 512, 13 * kMiB}, 70);
  ASSERT_TRUE(d.Pause({Tag("grow-w")}, BackupMode::kCpu).ok());
  DeviceStats s = d.GetStats();
  EXPECT_EQ(s.kept_backup_bytes, 0);
  EXPECT_GE(s.backup_bytes, s.paused_bytes);
  EXPECT_GT(s.backup_bytes, small);
  ASSERT_TRUE(d.Resume({Tag("grow-w")}, true).ok());
  for (const Alloc& a : w) EXPECT_TRUE(Holds(a.ptr, a.size, a.seed));
  for (const Alloc& a : more) EXPECT_TRUE(Holds(a.ptr, a.size, a.seed));
  EXPECT_EQ(d.GetStats().kept_backup_bytes, s.backup_bytes);
  // Freed while paused: skipped on restore, the rest intact.
  ASSERT_TRUE(d.Pause({Tag("grow-w")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.Free(more[1].ptr).ok());
  ASSERT_TRUE(d.Resume({Tag("grow-w")}, true).ok());
  EXPECT_TRUE(Holds(w[0].ptr, w[0].size, w[0].seed));
  EXPECT_TRUE(Holds(more[0].ptr, more[0].size, more[0].seed));
  EXPECT_TRUE(Holds(more[2].ptr, more[2].size, more[2].seed));
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(SleepKeep, FailedResumeKeepsTheBackupWithTheTagAndTheKeptMemory) {
  testing::TestDevice dev = testing::MakeHostDevice(32 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  std::vector<Alloc> a = AllocTagged(d, "fk-a", {2 * kMiB}, 1);
  std::vector<Alloc> w = AllocTagged(d, "fk-w", {12 * kMiB, 3 * kMiB}, 9);
  ASSERT_TRUE(d.Pause({Tag("fk-a")}, BackupMode::kCpu).ok());
  ASSERT_TRUE(d.Resume({Tag("fk-a")}, true).ok());
  const int64_t kept = d.GetStats().kept_backup_bytes;
  ASSERT_GT(kept, 0);
  ASSERT_TRUE(d.Pause({Tag("fk-w")}, BackupMode::kCpu).ok());
  const int64_t backup = d.GetStats().backup_bytes;
  EXPECT_EQ(d.GetStats().kept_backup_bytes, 0);  // taken by fk-w
  absl::StatusOr<void*> big = d.Malloc(24 * kMiB, 0);
  ASSERT_TRUE(big.ok());
  absl::Status s = d.Resume({Tag("fk-w")}, true);
  ASSERT_TRUE(absl::IsResourceExhausted(s)) << s;
  ASSERT_TRUE(d.CheckInvariants().ok());
  EXPECT_TRUE(InfoOf(d, "fk-w").paused);
  EXPECT_EQ(d.GetStats().backup_bytes, backup);  // still the tag's
  EXPECT_EQ(d.GetStats().kept_backup_bytes, 0);
  EXPECT_EQ(d.ReleaseBackup(), 0u);  // a paused tag's backup is not released
  ASSERT_TRUE(d.Free(*big).ok());
  ASSERT_TRUE(d.Resume({Tag("fk-w")}, true).ok());
  for (const Alloc& x : w) EXPECT_TRUE(Holds(x.ptr, x.size, x.seed));
  EXPECT_EQ(d.GetStats().kept_backup_bytes, backup);
  ASSERT_TRUE(d.CheckInvariants().ok());
}

TEST(SleepThreads, PauseAndResumeFromSeveralThreads) {
  testing::TestDevice dev = testing::MakeHostDevice(256 * kMiB, kPage);
  DeviceAllocator& d = *dev.allocator;
  constexpr int kThreads = 4;
  constexpr int kRounds = 20;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  // Each thread owns a tag: allocate, pause with backup, resume, check.
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string name = "thr-" + std::to_string(t);
      const RegionTag tag = Tag(name);
      for (int r = 0; r < kRounds; ++r) {
        std::vector<Alloc> a =
            AllocTagged(d, name, {kMiB, 3 * kMiB + 512, 4096}, uint8_t(t + r));
        if (!d.Pause({tag}, BackupMode::kCpu).ok()) ++failures;
        if (!d.Resume({tag}).ok()) ++failures;
        for (const Alloc& x : a) {
          if (!Holds(x.ptr, x.size, x.seed)) ++failures;
          if (!d.Free(x.ptr).ok()) ++failures;
        }
      }
    });
  }
  // Untagged traffic meanwhile.
  threads.emplace_back([&] {
    for (int r = 0; r < kRounds * 4; ++r) {
      absl::StatusOr<void*> p = d.Malloc(2 * kMiB, 0x7000);
      if (!p.ok()) {
        ++failures;
        continue;
      }
      Fill(*p, 2 * kMiB, uint8_t(r));
      if (!Holds(*p, 2 * kMiB, uint8_t(r))) ++failures;
      if (!d.Free(*p).ok()) ++failures;
    }
  });
  // Several threads pausing and resuming one shared tag (nobody touches its
  // memory meanwhile).
  std::vector<Alloc> shared = AllocTagged(d, "thr-shared", {5 * kMiB}, 77);
  const RegionTag shared_tag = Tag("thr-shared");
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        if (!d.Pause({shared_tag}, BackupMode::kCpu).ok()) ++failures;
        (void)d.GetStats();
        if (!d.Resume({shared_tag}).ok()) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_TRUE(d.Resume({shared_tag}).ok());
  EXPECT_TRUE(Holds(shared[0].ptr, shared[0].size, shared[0].seed));
  ASSERT_TRUE(d.CheckInvariants().ok()) << d.CheckInvariants();
}

}  // namespace
}  // namespace fragfree
