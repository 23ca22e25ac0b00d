// Conformance suite: random operation sequences through the whole engine,
// checking after each step that blocks never overlap and tile their arenas,
// live blocks are fully mapped, data written into live blocks survives the
// reclaim and remap of other pages, stats equal a recount, and an allocation
// fails only when the pages touched by live blocks plus the request's own pages
// exceed the capacity. Built twice: on the host backend (label host) and, with
// FF_CONFORMANCE_CUDA, on GPU 0 through the CUDA driver (label gpu).
#include <map>
#include <random>

#include "allocator/base/units.h"
#include "gtest/gtest.h"
#include "tests/testing/backends.h"
#include "tests/testing/touched_pages.h"

namespace fragfree {
namespace {

using testing::TestDevice;

struct Live {
  void* ptr;
  size_t size;
  uint32_t seed;
};

// Bytes checked per block: all of it on the host, head+tail on a GPU.
size_t CheckedBytes(size_t size) {
#ifdef FF_CONFORMANCE_CUDA
  return std::min<size_t>(size, 4096);
#else
  return size;
#endif
}

std::vector<uint8_t> Pattern(uint32_t seed, size_t n) {
  std::vector<uint8_t> out(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i += 8) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    memcpy(&out[i], &x, std::min<size_t>(8, n - i));
  }
  return out;
}

void WriteLive(TestDevice& d, const Live& l) {
  size_t n = CheckedBytes(l.size);
  std::vector<uint8_t> p = Pattern(l.seed, n);
  d.access->Write(l.ptr, p.data(), n);
  if (2 * n <= l.size) {  // a separate tail, not overlapping the head
    std::vector<uint8_t> tail = Pattern(l.seed + 7, n);
    d.access->Write(static_cast<char*>(l.ptr) + l.size - n, tail.data(), n);
  }
}

::testing::AssertionResult CheckLive(TestDevice& d, const Live& l) {
  size_t n = CheckedBytes(l.size);
  std::vector<uint8_t> got(n);
  d.access->Read(got.data(), l.ptr, n);
  if (got != Pattern(l.seed, n)) {
    return ::testing::AssertionFailure() << "data of the block at " << l.ptr
                                         << " (" << l.size << " B) changed";
  }
  if (2 * n <= l.size) {
    d.access->Read(got.data(), static_cast<char*>(l.ptr) + l.size - n, n);
    if (got != Pattern(l.seed + 7, n)) {
      return ::testing::AssertionFailure() << "tail of " << l.ptr << " changed";
    }
  }
  return ::testing::AssertionSuccess();
}

using ::fragfree::testing::TouchedPages;

TestDevice MakeDevice() {
#ifdef FF_CONFORMANCE_CUDA
  auto d = testing::MakeCudaDevice(size_t{256} << 20);
  if (!d.ok()) {
    ADD_FAILURE() << "no CUDA device: " << d.status();
    abort();
  }
  return std::move(*d);
#else
  return testing::MakeHostDevice(size_t{4} << 20, size_t{64} << 10);
#endif
}

class ConformanceTest : public ::testing::TestWithParam<int> {};

TEST_P(ConformanceTest, RandomOperationsKeepEveryInvariant) {
  TestDevice d = MakeDevice();
  DeviceAllocator& a = *d.allocator;
  const size_t page = d.page_size;
  const size_t capacity_pages = d.capacity / page;
  std::mt19937_64 rng(GetParam());
  std::vector<Live> live;
  int ooms = 0, allocs = 0;
  int64_t last_unmapped = 0;
#ifdef FF_CONFORMANCE_CUDA
  const int kSteps = 1500;
#else
  const int kSteps = 4000;
#endif
  for (int step = 0; step < kSteps; ++step) {
    int op = int(rng() % 100);
    if (op < 55 || live.empty()) {
      // Sizes: small, around a page, and large (up to a quarter of capacity).
      size_t size;
      int kind = int(rng() % 10);
      if (kind < 5)
        size = 1 + rng() % (page / 2);
      else if (kind < 8)
        size = page / 2 + rng() % (3 * page);
      else
        size = page + rng() % (d.capacity / 4);
      StreamHandle stream = d.streams[rng() % d.streams.size()];
      size_t touched_before = TouchedPages(a);
      absl::StatusOr<void*> p = a.Malloc(size, stream);
      if (!p.ok()) {
        ASSERT_TRUE(absl::IsResourceExhausted(p.status())) << p.status();
        size_t rounded = AlignUp(size, 512);
        size_t need = (rounded + page - 1) / page + 1;
        ASSERT_GT(touched_before + need, capacity_pages)
            << "OOM for " << size << " B with " << touched_before << " of "
            << capacity_pages
            << " pages touched by live blocks: " << p.status();
        ++ooms;
      } else {
        ++allocs;
        Live l{*p, size, uint32_t(rng())};
        WriteLive(d, l);
        live.push_back(l);
        if (rng() % 8 == 0 && d.streams.size() > 1) {
          ASSERT_TRUE(a.RecordStream(
                           l.ptr, d.streams[1 + rng() % (d.streams.size() - 1)])
                          .ok());
        }
      }
    } else if (op < 97) {
      size_t i = rng() % live.size();
      ASSERT_TRUE(CheckLive(d, live[i]));
      ASSERT_TRUE(a.Free(live[i].ptr).ok());
      live[i] = live.back();
      live.pop_back();
    } else {
      ASSERT_TRUE(a.EmptyCache().ok());
    }
#ifdef FF_CONFORMANCE_CUDA
    const bool check_invariants = step % 50 == 0;
#else
    const bool check_invariants = true;
#endif
    if (check_invariants) {
      ASSERT_TRUE(a.CheckInvariants().ok()) << a.CheckInvariants();
    }
    // Data can only be hurt when pages move: check every live block then.
    DeviceStats s = a.GetStats();
    if (s.pages_unmapped != last_unmapped || step % 200 == 0) {
      last_unmapped = s.pages_unmapped;
      for (const Live& l : live) ASSERT_TRUE(CheckLive(d, l));
    }
  }
  for (const Live& l : live) {
    ASSERT_TRUE(CheckLive(d, l));
    ASSERT_TRUE(a.Free(l.ptr).ok());
  }
  ASSERT_TRUE(a.EmptyCache().ok());
  ASSERT_TRUE(a.CheckInvariants().ok()) << a.CheckInvariants();
  DeviceStats s = a.GetStats();
  EXPECT_EQ(s.allocated_bytes.pool[kPoolAll].current, 0);
  EXPECT_EQ(s.reserved_bytes.pool[kPoolAll].current, 0);
  EXPECT_GT(allocs, 100);
  RecordProperty("ooms", ooms);
  EXPECT_GT(ooms, 0) << "the sequence never reached the capacity";
}

INSTANTIATE_TEST_SUITE_P(Seeds, ConformanceTest, ::testing::Range(1, 7));

// A full device whose free memory is scattered in holes between live blocks
// must still serve a request as large as all the holes together (minus edge
// pages).
TEST(ConformanceScatter, ScatteredFreePagesServeOneLargeRequest) {
  TestDevice d = MakeDevice();
  DeviceAllocator& a = *d.allocator;
  const size_t page = d.page_size;
  const size_t n = d.capacity / page;
  std::vector<void*> blocks;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<void*> p = a.Malloc(page, d.streams[0]);
    ASSERT_TRUE(p.ok()) << p.status();
    blocks.push_back(*p);
  }
  ASSERT_FALSE(a.Malloc(page, d.streams[0]).ok());
  // Free every other page: half the memory is free, in one-page holes.
  for (size_t i = 0; i < n; i += 2) ASSERT_TRUE(a.Free(blocks[i]).ok());
  // One request of all the free memory, on another stream, succeeds.
  absl::StatusOr<void*> big = a.Malloc((n / 2) * page, d.streams.back());
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_TRUE(a.CheckInvariants().ok()) << a.CheckInvariants();
  DeviceStats s = a.GetStats();
  EXPECT_GT(s.pages_remapped, 0);
  ASSERT_TRUE(a.Free(*big).ok());
  for (size_t i = 1; i < n; i += 2) ASSERT_TRUE(a.Free(blocks[i]).ok());
  ASSERT_TRUE(a.EmptyCache().ok());
}

}  // namespace
}  // namespace fragfree
