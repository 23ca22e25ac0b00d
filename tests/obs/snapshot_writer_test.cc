// The streaming snapshot writer writes byte for byte what the former writers
// (a Value tree, then ToJson / ToPickle) wrote, on random states.
#include <random>
#include <string>
#include <vector>

#include "allocator/obs/snapshot.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

// Values at the edges of each pickle integer encoding, and random ones.
uint64_t Number(std::mt19937_64& rng) {
  static constexpr uint64_t kEdges[] = {0,
                                        1,
                                        255,
                                        256,
                                        65535,
                                        65536,
                                        0x7fffffff,
                                        0x80000000,
                                        0xffffffff,
                                        uint64_t{1} << 40,
                                        0x7f12345678900,
                                        uint64_t(INT64_MAX),
                                        uint64_t(INT64_MAX) + 1,
                                        UINT64_MAX};
  switch (rng() % 4) {
    case 0:
      return kEdges[rng() % std::size(kEdges)];
    case 1:
      return rng() % 300;
    case 2:
      return rng() % 100000;
    default:
      return rng() >> (rng() % 64);
  }
}

// Arenas at disjoint, shuffled addresses, blocks tiling each in address order,
// pages mapped in runs.
std::vector<ArenaView> RandomArenas(std::mt19937_64& rng) {
  std::vector<ArenaView> arenas(rng() % 5);
  uintptr_t base = 0x7f0000000000;
  for (ArenaView& a : arenas) {
    a.page_size = size_t{1} << (12 + rng() % 10);
    const size_t pages = 1 + rng() % 40;
    a.base = base;
    a.va_size = pages * a.page_size;
    base += a.va_size + a.page_size * (rng() % 3);
    a.stream = rng() % 3 == 0 ? Number(rng) : rng() % 2;
    a.small = rng() % 2;
    a.pool_id[0] = rng() % 3 == 0 ? Number(rng) : 0;
    a.pool_id[1] = rng() % 3 == 0 ? Number(rng) : 0;
    uintptr_t at = a.base, end = a.base + a.va_size;
    while (at < end) {
      size_t size = std::min<size_t>(end - at, 512 * (1 + rng() % 4096));
      const BlockState s = BlockState(rng() % 4);
      size_t requested = rng() % 3 == 0 ? size + rng() % 1000 : rng() % size;
      a.blocks.push_back({at, size, requested, s, rng()});
      at += size;
    }
    const size_t mapped_end = rng() % (pages + 1);
    for (size_t p = 0; p < mapped_end; ++p) {
      a.page_mapped.push_back(rng() % 4 != 0);
    }
    a.mapped_pages =
        size_t(std::count(a.page_mapped.begin(), a.page_mapped.end(), true));
  }
  std::shuffle(arenas.begin(), arenas.end(), rng);
  return arenas;
}

std::vector<TraceEntry> RandomTrace(std::mt19937_64& rng) {
  std::vector<TraceEntry> trace(rng() % 3 == 0 ? 0 : rng() % 500);
  uint64_t t = 1700000000000000 + rng() % 1000000;
  for (TraceEntry& e : trace) {
    t += rng() % 100;
    e.time_us = t;
    e.addr = Number(rng);
    e.size = Number(rng);
    e.stream = rng() % 2 == 0 ? Number(rng) : 0;
    e.context = uint32_t(rng());
    e.action = TraceAction(rng() % 6);
  }
  return trace;
}

TEST(SnapshotWriter, SameBytesAsTheValueTreeOnRandomStates) {
  std::mt19937_64 rng(2026);
  for (int i = 0; i < 2000; ++i) {
    const int device = int(rng() % 4);
    const std::vector<ArenaView> arenas = RandomArenas(rng);
    const std::vector<TraceEntry> trace = RandomTrace(rng);
    ASSERT_EQ(SnapshotToJson(device, arenas, trace),
              LegacySnapshotToJson(device, arenas, trace))
        << "state " << i;
    ASSERT_EQ(SnapshotToPickle(device, arenas, trace),
              LegacySnapshotToPickle(device, arenas, trace))
        << "state " << i;
  }
}

TEST(SnapshotWriter, SameBytesAcrossManyBufferFlushes) {
  std::mt19937_64 rng(7);
  std::vector<TraceEntry> trace;
  for (int i = 0; i < 20; ++i) {
    std::vector<TraceEntry> more = RandomTrace(rng);
    trace.insert(trace.end(), more.begin(), more.end());
  }
  const std::vector<ArenaView> arenas = RandomArenas(rng);
  EXPECT_EQ(SnapshotToPickle(1, arenas, trace),
            LegacySnapshotToPickle(1, arenas, trace));
  EXPECT_EQ(SnapshotToJson(1, arenas, trace),
            LegacySnapshotToJson(1, arenas, trace));
  // In pieces of at most 64 KiB.
  std::string pieces;
  size_t calls = 0;
  EXPECT_TRUE(WriteSnapshot(SnapshotFormat::kPickle, 1, arenas, trace,
                            [&](std::string_view s) {
                              EXPECT_LE(s.size(), size_t{1} << 16);
                              pieces.append(s);
                              ++calls;
                              return true;
                            }));
  EXPECT_GT(calls, 1u);
  EXPECT_EQ(pieces, SnapshotToPickle(1, arenas, trace));
}

TEST(SnapshotWriter, StopsAtAFailedWrite) {
  std::mt19937_64 rng(3);
  std::vector<TraceEntry> trace;
  while (trace.size() < 5000) {
    std::vector<TraceEntry> more = RandomTrace(rng);
    trace.insert(trace.end(), more.begin(), more.end());
  }
  size_t calls = 0;
  EXPECT_FALSE(WriteSnapshot(SnapshotFormat::kJson, 0, {}, trace,
                             [&](std::string_view) { return ++calls > 1; }));
  EXPECT_EQ(calls, 1u);
}

}  // namespace
}  // namespace fragfree
