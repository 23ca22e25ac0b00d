// DeviceAllocator's statistics as read: what GetStats and GetStat ask the
// backend (the driver's free memory only where a figure needs it) and that a
// figure read by its key is the whole stats' figure in the same state. Host
// backend. Thread-safety: single-threaded tests.
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>

#include "allocator/device_allocator.h"
#include "allocator/obs/stats.h"
#include "allocator/phys/forwarding_backend.h"
#include "allocator/phys/host_backend.h"
#include "allocator/stream/host_event_source.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kPage = 64 << 10;
constexpr StreamHandle kS1 = 0x100;

std::unique_ptr<DeviceAllocator> Make(size_t pages) {
  return *DeviceAllocator::Create(0, Options(),
                                  *HostBackend::Create(pages * kPage, kPage),
                                  std::make_unique<ManualEventSource>());
}

// Counts the driver's view of the device: the one call GetStats may make.
class MemoryInfoCounter : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  DeviceMemoryInfo MemoryInfo() const override {
    ++calls;
    return ForwardingBackend::MemoryInfo();
  }
  mutable int calls = 0;
};

TEST(DeviceAllocator, StatsWithoutTheDeviceAskTheBackendNothing) {
  auto counter = std::make_unique<MemoryInfoCounter>(
      *HostBackend::Create(32 * kPage, kPage));
  MemoryInfoCounter* info = counter.get();
  auto a = *DeviceAllocator::Create(0, Options(), std::move(counter),
                                    std::make_unique<ManualEventSource>());
  void* p = *a->Malloc(1000, kS1);
  void* q = *a->Malloc(3 * kPage, kS1);
  ASSERT_TRUE(a->Free(q).ok());
  const int before = info->calls;
  const DeviceStats skip = a->GetStats(DeviceAllocator::DeviceMemory::kSkip);
  EXPECT_EQ(info->calls, before);
  EXPECT_EQ(skip.device_total_bytes, 0);
  EXPECT_EQ(skip.device_free_bytes, 0);
  const DeviceStats read = a->GetStats();
  EXPECT_EQ(info->calls, before + 1);
  EXPECT_EQ(read.device_total_bytes, int64_t(32 * kPage));
  // Every other figure is the same (none moved in between).
  DeviceStats same = read;
  same.device_total_bytes = same.device_free_bytes = 0;
  EXPECT_EQ(StatsToJson(skip), StatsToJson(same));
  a->ResetPeakStats();  // (torch.cuda.reset_peak_memory_stats)
  EXPECT_EQ(info->calls, before + 1);
  // One figure by its key (torch.cuda.memory_allocated() in pluggable mode):
  // the driver is asked only for its own two keys.
  EXPECT_EQ(a->GetStat("allocated_bytes.all.current"),
            read.allocated_bytes.pool[kPoolAll].current);
  EXPECT_EQ(a->GetStat("reserved_bytes.all.peak"),
            read.reserved_bytes.pool[kPoolAll].peak);
  EXPECT_EQ(a->GetStat("inactive_split.all.current"),
            read.inactive_split.pool[kPoolAll].current);
  EXPECT_EQ(a->GetStat("no_such_key"), std::nullopt);
  EXPECT_EQ(info->calls, before + 1);
  EXPECT_EQ(a->GetStat("device_total_bytes"), int64_t(32 * kPage));
  EXPECT_EQ(info->calls, before + 2);
  ASSERT_TRUE(a->Free(p).ok());
}

// Every figure read by its key is the one GetStats gives in the same state,
// with the state changed before each read (a hole made or filled), so that a
// figure GetStat would not recompute (one counted from the free blocks and
// missing from CountedFromFreeBlocks) reads stale and differs.
TEST(DeviceAllocator, OneFigureByKeyIsTheFiguresOfTheWholeStats) {
  auto allocator = Make(32);
  DeviceAllocator* const d = allocator.get();
  void* a = *d->Malloc(kPage, kS1);
  void* b = *d->Malloc(2 * kPage, kS1);
  void* c = *d->Malloc(kPage, kS1);
  const std::string json = StatsToJson(d->GetStats());
  const std::regex integer_key("\"([^\"]+)\":-?[0-9]+[,}]");
  int keys = 0;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), integer_key);
       it != std::sregex_iterator(); ++it) {
    const std::string key = (*it)[1];
    if (key.rfind("fragmentation.", 0) == 0) continue;  // computed, not kept
    if (b != nullptr) {
      ASSERT_TRUE(d->Free(b).ok());  // a hole between two live blocks
      b = nullptr;
    } else {
      b = *d->Malloc(2 * kPage, kS1);
    }
    const std::optional<int64_t> by_key = d->GetStat(key);
    EXPECT_EQ(by_key, IntegerStat(d->GetStats(), key)) << key;
    ++keys;
  }
  EXPECT_GT(keys, 100);
  for (void* p : {a, b, c}) {
    if (p != nullptr) ASSERT_TRUE(d->Free(p).ok());
  }
}

}  // namespace
}  // namespace fragfree
