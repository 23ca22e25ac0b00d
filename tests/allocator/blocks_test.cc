// Unit tests of the policy layer: size rounding (PyTorch's rules, buckets), the
// free index (bins, fits, removal), the live table (against a map, through
// growth and deletions inside probe runs, prefetched without a lock) and the
// quick cache.
#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "allocator/blocks/free_index.h"
#include "allocator/blocks/live_table.h"
#include "allocator/blocks/quick_cache.h"
#include "allocator/blocks/size_classes.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

TEST(SizeRounding, PyTorchDefaults) {
  SizeRounding r;
  EXPECT_EQ(r.Round(1), 512u);
  EXPECT_EQ(r.Round(512), 512u);
  EXPECT_EQ(r.Round(513), 1024u);
  EXPECT_EQ(r.Round(3 * 1048576 + 1), 3 * 1048576 + 512u);
}

TEST(SizeRounding, PowerOfTwoDivisions) {
  RoundingConfig c;
  c.divisions.fill(4);
  SizeRounding r(c);
  // Below 512 * divisions, plain 512 rounding applies.
  EXPECT_EQ(r.Round(1200), 1536u);
  EXPECT_EQ(r.Round(5 << 20), 5u << 20);
  EXPECT_EQ(r.Round((5 << 20) + 1), 6u << 20);
}

TEST(SizeRounding, BucketsRoundUpToTheNextBucket) {
  RoundingConfig c;
  c.buckets = {4096, 1 << 20, 8 << 20};
  SizeRounding r(c);
  EXPECT_EQ(r.Round(1), 4096u);
  EXPECT_EQ(r.Round(4097), 1u << 20);
  EXPECT_EQ(r.Round(8 << 20), 8u << 20);
  EXPECT_EQ(r.Round((8 << 20) + 1), (8u << 20) + 512);  // above: default rule
}

TEST(SizeRounding, DivisionIndex) {
  EXPECT_EQ(SizeRounding::DivisionIndex(1000), 0u);
  EXPECT_EQ(SizeRounding::DivisionIndex(3 << 20), 1u);
  EXPECT_EQ(SizeRounding::DivisionIndex(size_t{1} << 40), 15u);
}

// One bin per 512 B below 16 KiB, then 32 per power of two, the last bin
// taking everything above its start.
TEST(FreeIndex, BinsAtTheirBoundaries) {
  EXPECT_EQ(FreeIndex::BinOf(512), 1u);
  EXPECT_EQ(FreeIndex::BinOf(16384 - 512), 31u);
  EXPECT_EQ(FreeIndex::BinOf(16384), 32u);
  EXPECT_EQ(FreeIndex::BinOf(16384 + 512), 33u);  // 16-32 KiB: 512 B a bin
  EXPECT_EQ(FreeIndex::BinOf(32768 - 512), 63u);
  EXPECT_EQ(FreeIndex::BinOf(32768), 64u);
  EXPECT_EQ(FreeIndex::BinOf(32768 + 1024), 65u);  // 32-64 KiB: 1 KiB a bin
  EXPECT_EQ(FreeIndex::BinOf(size_t{1} << 20), 32u + 6 * 32);
  EXPECT_EQ(FreeIndex::BinOf((size_t{1} << 20) + (size_t{1} << 15)),
            32u + 6 * 32 + 1);
  EXPECT_EQ(FreeIndex::BinOf(size_t{1} << 62), FreeIndex::kNumBins - 1);
}

TEST(FreeIndex, BinsAreMonotonic) {
  uint32_t last = 0;
  for (size_t s = 512; s < (size_t{1} << 40); s += s / 7 + 512) {
    uint32_t b = FreeIndex::BinOf((s + 511) / 512 * 512);
    EXPECT_GE(b, last);
    last = b;
  }
}

// Below 16 KiB a bin holds one size, so the first bin with a block that
// fits holds the best fit.
TEST(FreeIndex, FindsAFitInTheFirstBinThatHasOne) {
  FreeIndex index;
  Block blocks[4];
  size_t sizes[4] = {8192, 4096, 1 << 20, 4608};
  for (int i = 0; i < 4; ++i) {
    blocks[i].size = sizes[i];
    blocks[i].addr = 0x10000 * (i + 1);
    index.Insert(&blocks[i]);
  }
  EXPECT_EQ(index.FindFit(4000), &blocks[1]);
  EXPECT_EQ(index.FindFit(4097), &blocks[3]);
  EXPECT_EQ(index.FindFit(5000), &blocks[0]);
  EXPECT_EQ(index.FindFit(9000), &blocks[2]);
  EXPECT_EQ(index.FindFit(2 << 20), nullptr);
  index.Remove(&blocks[1]);
  EXPECT_EQ(index.FindFit(4000), &blocks[3]);
  EXPECT_EQ(index.count(), 3u);
  // Largest first.
  std::vector<size_t> seen;
  index.ForEachLargestFirst([&](Block* b) {
    seen.push_back(b->size);
    return true;
  });
  EXPECT_EQ(seen, (std::vector<size_t>{1 << 20, 8192, 4608}));
}

// Above 16 KiB a bin spans ~3% of its sizes (from 1 MiB: 32 KiB): the
// request's own bin gives its newest block that fits, passing over smaller
// ones; otherwise the newest block of the next non-empty bin, all of which
// fit.
TEST(FreeIndex, TakesTheNewestFitOfTheRequestsBinElseOfTheNextBin) {
  constexpr size_t kMiB = size_t{1} << 20;
  ASSERT_EQ(FreeIndex::BinOf(kMiB + 512), FreeIndex::BinOf(kMiB + 31 * 1024));
  FreeIndex index;
  Block large, small, newer, next_old, next_new;
  large.size = kMiB + 30 * 1024;
  small.size = kMiB + 1024;
  newer.size = kMiB + 31 * 1024;  // newer, though a looser fit
  next_old.size = next_new.size = kMiB + 256 * 1024;
  next_old.addr = 0x1000000;  // a lower address does not count
  next_new.addr = 0x9000000;
  for (Block* b : {&large, &small, &next_old, &next_new}) index.Insert(b);
  EXPECT_EQ(index.FindFit(kMiB + 10 * 1024), &large);  // passes over `small`
  EXPECT_EQ(index.FindFit(kMiB + 512), &small);
  index.Insert(&newer);
  EXPECT_EQ(index.FindFit(kMiB + 10 * 1024), &newer);
  // The bins between are empty: the next non-empty bin's newest block.
  EXPECT_EQ(index.FindFit(kMiB + 64 * 1024), &next_new);
  index.Remove(&next_new);
  EXPECT_EQ(index.FindFit(kMiB + 64 * 1024), &next_old);
  EXPECT_EQ(index.FindFit(kMiB + 512 * 1024), nullptr);
}

// Insert and Remove keep each bin's list, bitmap bit and count exact in every
// position a block can hold (alone, first, middle, last), which FindFit and
// ForEachLargestFirst read.
TEST(FreeIndex, RemoveFromEveryPositionKeepsTheBinsExact) {
  for (int victim = 0; victim < 3; ++victim) {
    FreeIndex index;
    Block blocks[3];
    for (Block& b : blocks) {
      b.size = 4096;
      index.Insert(&b);
    }
    index.Remove(&blocks[victim]);
    EXPECT_EQ(index.count(), 2u);
    std::vector<Block*> left;
    index.ForEachLargestFirst([&](Block* b) {
      left.push_back(b);
      return true;
    });
    ASSERT_EQ(left.size(), 2u);
    for (Block* b : left) EXPECT_NE(b, &blocks[victim]);
    for (Block* b : left) index.Remove(b);
    EXPECT_EQ(index.count(), 0u);
    EXPECT_EQ(index.FindFit(512), nullptr);  // the bin's bit is clear
  }
}

TEST(LiveTable, AgreesWithAMapThroughGrowthAndErasure) {
  LiveTable table;
  // Address -> (block, has_uses).
  std::map<uintptr_t, std::pair<Block*, bool>> model;
  // The entries' blocks are only compared, never read: distinct tokens.
  auto token = [](int step) {
    return reinterpret_cast<Block*>(uintptr_t(step + 1) * sizeof(Block));
  };
  std::mt19937_64 rng(7);
  // Addresses from a few clustered ranges, 512 bytes apart as allocations
  // are.
  auto random_addr = [&] {
    return (uintptr_t{1} << 44) * (1 + rng() % 3) + 512 * (rng() % 3000);
  };
  for (int step = 0; step < 200000; ++step) {
    const uintptr_t addr = random_addr();
    LiveEntry* e = table.Find(addr);
    auto it = model.find(addr);
    ASSERT_EQ(e != nullptr, it != model.end()) << step;
    if (e == nullptr) {
      LiveEntry entry(addr, token(step));
      if (step % 3 == 0) entry.set_has_uses();
      table.Insert(entry);
      model[addr] = {token(step), step % 3 == 0};
    } else {
      ASSERT_EQ(e->block(), it->second.first);
      ASSERT_EQ(e->has_uses(), it->second.second);
      table.Erase(e);
      model.erase(it);
    }
    ASSERT_EQ(table.size(), model.size());
  }
  size_t seen = 0;
  table.ForEach([&](LiveEntry& e) {
    ++seen;
    ASSERT_EQ(model.at(e.addr), std::make_pair(e.block(), e.has_uses()));
  });
  EXPECT_EQ(seen, model.size());
  for (const auto& [addr, block] : model) {
    ASSERT_NE(table.Find(addr), nullptr);
  }
  table.Clear();
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.Find(model.begin()->first), nullptr);
}

// `count` distinct addresses in [base, base + 512 GiB) that hash to bucket
// `bucket` of `table` as it is now.
std::vector<uintptr_t> AddressesInBucket(const LiveTable& table, size_t bucket,
                                         size_t count, std::mt19937_64& rng,
                                         uintptr_t base = uintptr_t{1} << 40) {
  std::vector<uintptr_t> out;
  while (out.size() < count) {
    const uintptr_t addr = base + 512 * (rng() % (1u << 30));
    if (table.HomeBucket(addr) != bucket) continue;
    if (std::find(out.begin(), out.end(), addr) == out.end())
      out.push_back(addr);
  }
  return out;
}

// Entries whose home bucket is full live in the buckets after it: every one
// is found, erasing them in any order (home first or last) loses none of the
// others, and an address that is not there is not found, while the run of
// full buckets grows and shrinks.
TEST(LiveTable, EntriesPastAFullBucketStayFoundThroughErasure) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 20; ++trial) {
    LiveTable table;
    const size_t buckets = table.bucket_count();
    // Room for all of them without growing (the table keeps a quarter full).
    const size_t count = std::min<size_t>(buckets, 4 * 10);
    const size_t home = rng() % buckets;
    std::vector<uintptr_t> addrs = AddressesInBucket(table, home, count, rng);
    // From another range: never one of the addresses put in.
    const std::vector<uintptr_t> absent =
        AddressesInBucket(table, home, 1, rng, uintptr_t{1} << 41);
    for (size_t i = 0; i < addrs.size(); ++i) {
      table.Insert(LiveEntry(addrs[i], reinterpret_cast<Block*>(64 * (i + 1))));
    }
    ASSERT_EQ(table.bucket_count(), buckets) << "the table grew";
    std::shuffle(addrs.begin(), addrs.end(), rng);
    int put_back = 0;
    while (!addrs.empty()) {
      EXPECT_EQ(table.Find(absent[0]), nullptr);
      LiveEntry* e = table.Find(addrs.back());
      ASSERT_NE(e, nullptr);
      table.Erase(e);
      addrs.pop_back();
      for (uintptr_t a : addrs) ASSERT_NE(table.Find(a), nullptr) << trial;
      // Put one back now and then: it takes the first free slot from home.
      if (addrs.size() % 7 == 3 && put_back++ < 4) {
        const uintptr_t again = AddressesInBucket(table, home, 1, rng)[0];
        if (table.Find(again) == nullptr) {
          table.Insert(LiveEntry(again, reinterpret_cast<Block*>(64)));
          addrs.insert(addrs.begin(), again);
        }
      }
    }
    EXPECT_EQ(table.size(), 0u);
    EXPECT_EQ(table.Find(absent[0]), nullptr);
  }
}

// More than 255 entries past one bucket: its count sticks (it is searched past
// from then on) and the table stays exact; a lookup of an absent address ends
// even when every bucket it meets has entries past it.
TEST(LiveTable, AStuckOverflowCountKeepsTheTableExact) {
  std::mt19937_64 rng(5);
  LiveTable table;
  // Grow the table to 512 buckets (a load of at most 1/4 below 4096 slots,
  // 1/2 at 4096 and above), then empty it: it does not shrink.
  std::vector<uintptr_t> filler;
  for (uintptr_t a = 512; table.bucket_count() < 512; a += 512) {
    table.Insert(LiveEntry(a, reinterpret_cast<Block*>(64)));
    filler.push_back(a);
  }
  for (uintptr_t a : filler) table.Erase(table.Find(a));
  const size_t buckets = table.bucket_count();
  std::vector<uintptr_t> addrs = AddressesInBucket(table, 0, 300, rng);
  for (uintptr_t a : addrs) {
    table.Insert(LiveEntry(a, reinterpret_cast<Block*>(128)));
  }
  ASSERT_EQ(table.bucket_count(), buckets) << "the table grew";
  for (uintptr_t a : addrs) ASSERT_NE(table.Find(a), nullptr);
  EXPECT_EQ(
      table.Find(AddressesInBucket(table, 0, 1, rng, uintptr_t{1} << 41)[0]),
      nullptr);
  auto erase = [&](uintptr_t a) {
    LiveEntry* e = table.Find(a);
    ASSERT_NE(e, nullptr) << a;
    table.Erase(e);
  };
  for (size_t i = 0; i < addrs.size(); i += 2) erase(addrs[i]);
  for (size_t i = 0; i < addrs.size(); ++i) {
    EXPECT_EQ(table.Find(addrs[i]) != nullptr, i % 2 == 1) << i;
  }
  for (size_t i = 1; i < addrs.size(); i += 2) erase(addrs[i]);
  EXPECT_EQ(table.size(), 0u);
  for (uintptr_t a : addrs) EXPECT_EQ(table.Find(a), nullptr);
  for (uintptr_t a : filler) EXPECT_EQ(table.Find(a), nullptr);
  table.Insert(LiveEntry(addrs[0], reinterpret_cast<Block*>(64)));
  EXPECT_NE(table.Find(addrs[0]), nullptr);
}

// Prefetch runs without the owner's lock while the table grows and shrinks
// under it (Free prefetches before locking): it must leave the table intact
// (and, under TSan, race with nothing).
TEST(LiveTable, PrefetchWithoutTheLockWhileTheTableGrows) {
  LiveTable table;
  std::atomic<bool> stop{false};
  std::thread prefetcher([&] {
    for (uintptr_t a = 512; !stop.load(std::memory_order_relaxed); a += 512) {
      table.Prefetch(a);
    }
  });
  for (uintptr_t a = 512; a <= 512 * 20000; a += 512) {
    LiveEntry entry;
    entry.addr = a;
    table.Insert(entry);
  }
  for (uintptr_t a = 512; a <= 512 * 20000; a += 1024) {
    table.Erase(table.Find(a));
  }
  stop = true;
  prefetcher.join();
  EXPECT_EQ(table.size(), 10000u);
  EXPECT_EQ(table.Find(512), nullptr);
  ASSERT_NE(table.Find(1024), nullptr);
}

TEST(QuickCache, LastInFirstOutPerSizeWithinItsBounds) {
  QuickCache cache;
  Block blocks[QuickCache::kDepth + 2];
  EXPECT_FALSE(cache.Push(&blocks[0], 0x1000, 4096, 1, 1)) << "off by default";
  cache.set_enabled(true);
  for (uint32_t i = 0; i <= QuickCache::kDepth; ++i) {
    blocks[i].state = BlockState::kAllocated;
    const bool taken = cache.Push(&blocks[i], 0x1000 * (i + 1), 4096, 5, i + 1);
    EXPECT_EQ(taken, i < QuickCache::kDepth) << i;
  }
  EXPECT_EQ(blocks[0].state, BlockState::kCached);
  EXPECT_EQ(blocks[0].free_epoch, 5u);
  EXPECT_FALSE(cache.Push(&blocks[QuickCache::kDepth + 1], 0x9000,
                          QuickCache::kMaxBlockSize + 512, 5, 9));
  EXPECT_EQ(cache.count(), size_t(QuickCache::kDepth));
  EXPECT_EQ(cache.bytes(), size_t(QuickCache::kDepth) * 4096);
  uintptr_t addr = 0;
  EXPECT_EQ(cache.Pop(4608, &addr), nullptr) << "exact sizes only";
  EXPECT_EQ(cache.Pop(4096, &addr), &blocks[QuickCache::kDepth - 1]);
  EXPECT_EQ(addr, 0x1000u * QuickCache::kDepth);
  EXPECT_EQ(blocks[QuickCache::kDepth - 1].state, BlockState::kAllocated);
  size_t drained = 0;
  cache.Drain([&](Block* b) {
    EXPECT_EQ(b->state, BlockState::kCached);
    ++drained;
  });
  EXPECT_EQ(drained, size_t(QuickCache::kDepth) - 1);
  EXPECT_EQ(cache.count(), 0u);
  EXPECT_EQ(cache.bytes(), 0u);
}

}  // namespace
}  // namespace fragfree
