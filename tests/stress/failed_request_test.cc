// A failed request gives back what it took (docs/design.md, Note [A failed
// request gives back what it took]): requests that fail for lack of memory, or
// because the backend fails partway, leave every figure a caller can see
// (stats, arenas, blocks, pages, the backend's free memory) as it was, except
// the OOM counters and the counts of backend calls. Owns: the Seen / Diff
// comparison and the Cached starting state. Thread-safety: single-threaded.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/device_allocator.h"
#include "gtest/gtest.h"
#include "tests/stress/fault_rig.h"

namespace fragfree {
namespace {

using stress::FaultMode;
using stress::FaultModes;
using stress::kPage;
using stress::kS1;
using stress::kS2;
using stress::kS3;
using stress::MakeRig;
using stress::OpName;
using stress::Rig;

// What a caller can see of the engine.
struct Seen {
  DeviceStats stats;
  std::vector<ArenaView> arenas;
  size_t backend_free = 0;
};

Seen Look(Rig& r) {
  return Seen{r.a->GetStats(), r.a->Arenas(), r.host->MemoryInfo().free_bytes};
}

// Differences between two looks, "" if none. Stats: current and peak of every
// stat and every gauge; allocated/freed too, except for the page stats (the
// request mapped and unmapped pages); every counter except those that count
// what happened (OOMs, retries, waits, backend calls), but pages created minus
// released must match.
std::string Diff(const Seen& a, const Seen& b) {
  std::string out;
  auto stat = [&](const std::string& name, const Stat& x, const Stat& y,
                  bool totals) {
    if (x.current != y.current || x.peak != y.peak ||
        (totals && (x.allocated != y.allocated || x.freed != y.freed))) {
      absl::StrAppend(&out, name, ": ", x.current, "/", x.peak, "/",
                      x.allocated, "/", x.freed, " -> ", y.current, "/", y.peak,
                      "/", y.allocated, "/", y.freed, "\n");
    }
  };
  const auto& x = a.stats;
  const auto& y = b.stats;
#define FF_DIFF_ARRAY(name)                                           \
  for (int p = 0; p < 3; ++p) {                                       \
    stat(absl::StrCat(#name, ".", kStatPoolNames[p]), x.name.pool[p], \
         y.name.pool[p], std::string(#name) != "reserved_bytes");     \
  }
  FF_STAT_ARRAY_FIELDS(FF_DIFF_ARRAY)
#undef FF_DIFF_ARRAY
#define FF_DIFF_STAT(name)                     \
  stat(#name, x.name, y.name,                  \
       std::string(#name) != "mapped_bytes" && \
           std::string(#name) != "idle_page_bytes");
  FF_STAT_FIELDS(FF_DIFF_STAT)
#undef FF_DIFF_STAT
  const std::vector<std::string> counted = {
      "num_alloc_retries", "num_ooms",        "num_sync_all_streams",
      "num_device_alloc",  "num_device_free", "pages_mapped",
      "pages_unmapped",    "handles_created", "handles_released",
      "fences_recorded",   "fence_waits"};
#define FF_DIFF_COUNTER(name)                                              \
  if (x.name != y.name &&                                                  \
      std::find(counted.begin(), counted.end(), #name) == counted.end()) { \
    absl::StrAppend(&out, #name, ": ", x.name, " -> ", y.name, "\n");      \
  }
  FF_COUNTER_FIELDS(FF_DIFF_COUNTER)
  FF_GAUGE_FIELDS(FF_DIFF_COUNTER)
#undef FF_DIFF_COUNTER
  if (x.handles_created - x.handles_released !=
      y.handles_created - y.handles_released) {
    absl::StrAppend(&out,
                    "live handles: ", x.handles_created - x.handles_released,
                    " -> ", y.handles_created - y.handles_released, "\n");
  }
  if (a.backend_free != b.backend_free) {
    absl::StrAppend(&out, "backend free bytes: ", a.backend_free, " -> ",
                    b.backend_free, "\n");
  }
  if (a.arenas.size() != b.arenas.size()) {
    absl::StrAppend(&out, "arenas: ", a.arenas.size(), " -> ", b.arenas.size(),
                    "\n");
    return out;
  }
  for (size_t i = 0; i < a.arenas.size(); ++i) {
    const ArenaView& u = a.arenas[i];
    const ArenaView& v = b.arenas[i];
    bool same = u.base == v.base && u.va_size == v.va_size &&
                u.mapped_pages == v.mapped_pages &&
                u.page_mapped == v.page_mapped &&
                u.blocks.size() == v.blocks.size();
    for (size_t k = 0; same && k < u.blocks.size(); ++k) {
      const auto& p = u.blocks[k];
      const auto& q = v.blocks[k];
      same = p.addr == q.addr && p.size == q.size &&
             p.requested == q.requested && p.state == q.state;
    }
    if (!same) absl::StrAppend(&out, "arena ", i, " (blocks or pages)\n");
  }
  return out;
}

// On 16 pages: kS1 holds b (2 pages) after a cached 3-page hole, kS2 holds d
// (1 page) after a cached 2-page hole, and 2 pages are idle (a retired
// stream's). 10 pages exist, 6 more can be created.
struct Cached {
  Rig r;
  std::vector<std::pair<void*, size_t>> live;
};

Cached MakeCached(Options o = Options()) {
  Cached c{MakeRig(16, o), {}};
  Rig& r = c.r;
  void* a = *r.a->Malloc(3 * kPage, kS1);
  void* b = *r.a->Malloc(2 * kPage, kS1);
  void* cc = *r.a->Malloc(2 * kPage, kS2);
  void* d = *r.a->Malloc(kPage, kS2);
  void* e = *r.a->Malloc(2 * kPage, kS3);
  EXPECT_TRUE(r.a->Free(a).ok());
  EXPECT_TRUE(r.a->Free(cc).ok());
  EXPECT_TRUE(r.a->Free(e).ok());
  EXPECT_TRUE(r.a->RetireStream(kS3).ok());  // e's pages become idle
  r.events->CompleteAll();
  memset(b, 0xb1, 2 * kPage);
  memset(d, 0xd1, kPage);
  c.live = {{b, 2 * kPage}, {d, kPage}};
  const DeviceStats st = r.a->GetStats();
  EXPECT_EQ(st.idle_page_bytes.current, int64_t(2 * kPage));
  EXPECT_EQ(st.reserved_bytes.pool[kPoolAll].current, int64_t(8 * kPage));
  EXPECT_EQ(st.reclaimable_bytes, int64_t(5 * kPage));
  return c;
}

void ExpectLiveIntact(const Cached& c) {
  for (const auto& [p, size] : c.live) {
    const auto* bytes = static_cast<const uint8_t*>(p);
    const uint8_t fill = bytes[0];
    EXPECT_TRUE(fill == 0xb1 || fill == 0xd1);
    EXPECT_EQ(bytes[size - 1], fill);
  }
}

// The simplest case: more than the device has left, even after taking every
// cached page. It uses idle pages, creates all 6 it can, unmaps the 5 of both
// holes, and fails: all of that is undone.
TEST(FailedRequest, LargerThanWhatIsLeftLeavesEverythingAsItWas) {
  Cached c = MakeCached();
  Rig& r = c.r;
  const Seen before = Look(r);
  absl::StatusOr<void*> p = r.a->Malloc(14 * kPage, kS1);
  ASSERT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
  ASSERT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
  const Seen after = Look(r);
  EXPECT_EQ(Diff(before, after), "");
  EXPECT_EQ(after.stats.num_ooms, before.stats.num_ooms + 1);
  EXPECT_EQ(after.stats.num_alloc_retries, before.stats.num_alloc_retries + 1);
  EXPECT_EQ(after.stats.handles_created, before.stats.handles_created + 6)
      << "the request did not create the pages it could";
  EXPECT_EQ(after.stats.pages_unmapped, before.stats.pages_unmapped + 5)
      << "the request did not take the cached pages";
  // The report describes the engine as the program has it (nothing idle
  // beyond what was idle before).
  EXPECT_EQ(r.a->last_oom().idle_bytes, 2 * kPage);
  ExpectLiveIntact(c);
  // The same on a stream with no arena yet: the arena made for it goes too.
  const Seen before2 = Look(r);
  p = r.a->Malloc(14 * kPage, 0x4000);
  ASSERT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
  ASSERT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
  Seen after2 = Look(r);
  EXPECT_EQ(after2.stats.num_streams, before2.stats.num_streams + 1);
  after2.stats.num_streams = before2.stats.num_streams;  // a stream it knows
  EXPECT_EQ(Diff(before2, after2), "");
  // And what was given back is usable: the largest request that fits does.
  p = r.a->Malloc(13 * kPage, kS1);
  ASSERT_TRUE(p.ok()) << p.status();
  memset(*p, 0x77, 13 * kPage);
  ExpectLiveIntact(c);
  ASSERT_TRUE(r.a->Free(*p).ok());
  ASSERT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
}

// A request that fits (13 pages: 2 idle, 6 new, 5 moved) fails because a
// backend call fails partway: Create, Map or SetAccess, at each call the
// request makes, once (InternalError or ResourceExhausted) or from then on.
// When the request fails, physical memory in use and every stat are back to
// where they were (within the one page whose putting back the fault hit) and
// the invariants hold; once the faults clear, every page comes back.
TEST(FailedRequest, BackendFailingPartwayLeavesEverythingAsItWas) {
  int64_t calls[int(BackendOp::kCount)] = {};
  const BackendOp ops[] = {BackendOp::kCreate, BackendOp::kMap,
                           BackendOp::kSetAccess};
  {
    Cached dry = MakeCached();
    int64_t base[int(BackendOp::kCount)] = {};
    for (BackendOp op : ops) base[int(op)] = dry.r.faults->Calls(op);
    void* p = *dry.r.a->Malloc(13 * kPage, kS1);
    ASSERT_NE(p, nullptr);
    for (BackendOp op : ops) {
      calls[int(op)] = dry.r.faults->Calls(op) - base[int(op)];
    }
    ASSERT_EQ(calls[int(BackendOp::kCreate)], 6);
  }
  const std::vector<FaultMode> modes = FaultModes();
  int failed = 0, restored_exactly = 0;
  for (BackendOp op : ops) {
    for (int64_t nth = 1; nth <= calls[int(op)]; ++nth) {
      for (const FaultMode& mode : modes) {
        SCOPED_TRACE(absl::StrCat(OpName(op), " call ", nth,
                                  " of the "
                                  "request, ",
                                  mode.name));
        Cached c = MakeCached();
        Rig& r = c.r;
        const Seen before = Look(r);
        r.faults->FailCalls(op, r.faults->Calls(op) + nth, mode.count,
                            mode.status);
        absl::StatusOr<void*> p = r.a->Malloc(13 * kPage, kS1);
        ASSERT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
        ExpectLiveIntact(c);
        if (p.ok()) {
          // Served after all (an injected OOM on Create: reclaim covered it).
          memset(*p, 0x55, 13 * kPage);
          c.live.push_back({*p, 13 * kPage});
        } else {
          ++failed;
          const Seen after = Look(r);
          const std::string diff = Diff(before, after);
          restored_exactly += diff.empty();
          // Nothing kept that was not held before: no idle page, no handle.
          EXPECT_LE(after.stats.idle_page_bytes.current,
                    before.stats.idle_page_bytes.current);
          EXPECT_LE(
              after.stats.handles_created - after.stats.handles_released,
              before.stats.handles_created - before.stats.handles_released);
          EXPECT_GE(after.backend_free, before.backend_free);
          if (mode.count == 1) {
            // One fault: at most the page whose putting back it hit is
            // released instead (its hole is left without it).
            EXPECT_LE(after.backend_free, before.backend_free + kPage);
            if (after.backend_free == before.backend_free) {
              EXPECT_EQ(diff, "");
            }
          }
          if (!absl::IsResourceExhausted(p.status())) {
            EXPECT_EQ(after.stats.num_ooms, before.stats.num_ooms)
                << "a backend error is not an OOM";
          }
        }
        // Clean up: everything comes back.
        r.faults->ClearFaults();
        for (const auto& [ptr, size] : c.live) {
          ASSERT_TRUE(r.a->Free(ptr).ok());
        }
        r.events->CompleteAll();
        ASSERT_TRUE(r.a->EmptyCache().ok());
        ASSERT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
        EXPECT_EQ(r.host->MemoryInfo().free_bytes, 16 * kPage);
      }
    }
  }
  printf("failed requests: %d, restored exactly: %d\n", failed,
         restored_exactly);
  EXPECT_GT(failed, 20);
  EXPECT_GT(restored_exactly, failed / 2);
}

// PyTorch's counting: num_alloc_retries once per request that had to reclaim
// cached memory under pressure (whether it then succeeds or fails), num_ooms
// once per request that fails, however many attempts it made.
TEST(FailedRequest, RetriesAndOomsCountOncePerRequest) {
  // Pages are created before cached ones are taken (no reclaim first), so
  // that taking cached pages is the pressure path.
  Options never;
  never.reclaim_before_grow = Options::Reclaim::kNever;
  Cached c = MakeCached(never);
  Rig& r = c.r;
  DeviceStats s0 = r.a->GetStats();
  EXPECT_EQ(s0.num_alloc_retries, 0);
  EXPECT_EQ(s0.num_ooms, 0);
  // Served from idle and new pages: no retry.
  void* p = *r.a->Malloc(8 * kPage, kS1);
  DeviceStats s1 = r.a->GetStats();
  EXPECT_EQ(s1.num_alloc_retries, 0);
  ASSERT_TRUE(r.a->Free(p).ok());
  r.events->CompleteAll();
  ASSERT_TRUE(r.a->EmptyCache().ok());
  c = MakeCached(never);
  // Needs the cached pages (2 idle + 6 new + 5 moved): one retry, no OOM.
  p = *c.r.a->Malloc(13 * kPage, kS1);
  DeviceStats s2 = c.r.a->GetStats();
  EXPECT_EQ(s2.num_alloc_retries, 1);
  EXPECT_EQ(s2.num_sync_all_streams, 1);
  EXPECT_EQ(s2.num_ooms, 0);
  ASSERT_TRUE(c.r.a->Free(p).ok());
  // A request made while a small block sits in a quick cache tries twice
  // (the second time after draining the caches): still one retry and one
  // OOM. 16 pages: the whole device, of which b and d hold 3.
  void* q = *c.r.a->Malloc(1000, kS2);
  ASSERT_TRUE(c.r.a->Free(q).ok());  // into kS2's quick cache
  const DeviceStats s3 = c.r.a->GetStats();
  absl::StatusOr<void*> big = c.r.a->Malloc(16 * kPage, kS1);
  ASSERT_FALSE(big.ok());
  const DeviceStats s4 = c.r.a->GetStats();
  EXPECT_EQ(s4.num_alloc_retries, s3.num_alloc_retries + 1);
  EXPECT_EQ(s4.num_sync_all_streams, s3.num_sync_all_streams + 1);
  EXPECT_EQ(s4.num_ooms, s3.num_ooms + 1);
  // Larger than the limit: refused at once, one OOM, no retry.
  big = c.r.a->Malloc(64 * kPage, kS1);
  ASSERT_FALSE(big.ok());
  const DeviceStats s5 = c.r.a->GetStats();
  EXPECT_EQ(s5.num_ooms, s4.num_ooms + 1);
  EXPECT_EQ(s5.num_alloc_retries, s4.num_alloc_retries);
  ASSERT_TRUE(c.r.a->CheckInvariants().ok()) << c.r.a->CheckInvariants();
}

// Every stat's peak follows its current value (idle pages and segments are
// counted as they change; inactive_split's peak is the highest value read).
TEST(FailedRequest, PeaksFollowCurrentValues) {
  Cached c = MakeCached();
  Rig& r = c.r;
  const DeviceStats s = r.a->GetStats();
  EXPECT_EQ(s.idle_page_bytes.peak, int64_t(2 * kPage));
  EXPECT_GT(s.idle_page_bytes.allocated, 0);
  auto check = [](const DeviceStats& st) {
#define FF_PEAK_ARRAY(name)                                            \
  for (int p = 0; p < 3; ++p) {                                        \
    EXPECT_GE(st.name.pool[p].peak, st.name.pool[p].current) << #name; \
  }
    FF_STAT_ARRAY_FIELDS(FF_PEAK_ARRAY)
#undef FF_PEAK_ARRAY
#define FF_PEAK_STAT(name) EXPECT_GE(st.name.peak, st.name.current) << #name;
    FF_STAT_FIELDS(FF_PEAK_STAT)
#undef FF_PEAK_STAT
  };
  check(s);
  EXPECT_EQ(s.segment.pool[kPoolAll].current, 2);  // kS1's and kS2's arenas
  EXPECT_EQ(s.segment.pool[kPoolAll].peak, 3);     // and kS3's, released
  EXPECT_EQ(s.segment.pool[kPoolAll].allocated, 3);
  EXPECT_EQ(s.segment.pool[kPoolAll].freed, 1);
  EXPECT_GT(s.inactive_split.pool[kPoolAll].current, 0);
  EXPECT_EQ(s.inactive_split.pool[kPoolAll].current,
            s.inactive_split.pool[kPoolSmall].current +
                s.inactive_split.pool[kPoolLarge].current);
  // Idle pages are used, then more become idle than ever before.
  void* p = *r.a->Malloc(2 * kPage, kS1);
  ASSERT_TRUE(r.a->Free(c.live[0].first).ok());
  c.live.erase(c.live.begin());
  ASSERT_TRUE(r.a->Free(p).ok());
  r.events->CompleteAll();
  r.a->ResetPeakStats();
  const DeviceStats reset = r.a->GetStats();
  EXPECT_EQ(reset.idle_page_bytes.peak, reset.idle_page_bytes.current);
  EXPECT_EQ(reset.segment.pool[kPoolAll].peak,
            reset.segment.pool[kPoolAll].current);
  ASSERT_TRUE(r.a->EmptyCache().ok());  // pages through idle, then released
  const DeviceStats e = r.a->GetStats();
  check(e);
  EXPECT_EQ(e.idle_page_bytes.current, 0);
  EXPECT_GT(e.idle_page_bytes.peak, 0) << "EmptyCache's idle pages not seen";
  r.a->ResetAccumulatedStats();
  EXPECT_EQ(r.a->GetStats().idle_page_bytes.allocated, 0);
  ASSERT_TRUE(r.a->CheckInvariants().ok()) << r.a->CheckInvariants();
}

}  // namespace
}  // namespace fragfree
