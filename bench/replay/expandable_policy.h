// ExpandablePolicy: a model of PyTorch's allocator with
// expandable_segments:True (ExpandableSegment in
// c10/cuda/CUDACachingAllocator.cpp, PyTorch 2.11; docs/replay.md):
// one segment per (stream, pool) reserving 9/8 of device memory in VA; pages of
// 2 MiB (small pool) or large_segment_size (20 MiB, large pool) mapped on
// demand, whole pages at a time; best fit ranked by "expandable size" (a block
// plus the unmapped space after it); growth at the lowest-address free+unmapped
// run that fits; splitting whenever the remainder is >= 512 B; free pages
// unmapped only by the OOM retry or empty_cache (release_cached_blocks), whole
// pages only. Reserved bytes = mapped bytes. Thread-safety: not thread-safe.
#ifndef FRAGFREE_BENCH_REPLAY_EXPANDABLE_POLICY_H_
#define FRAGFREE_BENCH_REPLAY_EXPANDABLE_POLICY_H_

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/btree_set.h"
#include "bench/replay/policy.h"
#include "bench/replay/pytorch_alloc_config.h"
#include "bench/replay/pytorch_blocks.h"
#include "bench/replay/slot_pool.h"

namespace fragfree::replay {

class ExpandablePolicy final : public ReplayPolicy {
 public:
  explicit ExpandablePolicy(const PolicyConfig& config,
                            const PytorchAllocConfig& alloc_config = {});

  std::string name() const override { return "expandable"; }
  bool Alloc(uint64_t id, uint64_t size, uint64_t stream) override;
  void Free(uint64_t id) override;
  uint64_t reserved_bytes() const override { return mapped_; }
  PolicyFigures figures() const override;
  void EmptyCache() override { ReleaseCachedBlocks(); }
  absl::Status CheckInvariants() const override;

  // Number of expandable segments alive (for tests).
  uint64_t segments() const { return live_segments_; }

 private:
  static constexpr int32_t kNone = kNoBlock;

  struct Block : PytorchBlock {
    int32_t segment = kNone;
    bool mapped = false;
  };
  struct Segment {
    uint64_t base = 0;
    uint64_t size = 0;
    uint64_t page = 0;
    bool live = false;
  };
  struct AddrKey {  // unmapped blocks: (stream, address)
    uint64_t stream;
    uint64_t addr;
    int32_t block;
    friend bool operator<(const AddrKey& a, const AddrKey& b) {
      return std::tie(a.stream, a.addr) < std::tie(b.stream, b.addr);
    }
  };
  struct Pool {
    absl::btree_set<SizeKey> blocks;  // free mapped blocks
    absl::btree_set<AddrKey> unmapped;
  };

  SizeKey SizeKeyOf(int32_t b) const { return replay::SizeKeyOf(blocks_, b); }
  AddrKey AddrKeyOf(int32_t b) const {
    return AddrKey{blocks_[b].stream, blocks_[b].addr, b};
  }
  Pool& PoolOf(int32_t b) { return blocks_[b].small ? small_ : large_; }
  bool Allocatable(int32_t b) const {
    return b != kNone && !blocks_[b].allocated;
  }
  uint64_t ExpandableSize(int32_t b) const;

  int32_t GetFreeBlock(Pool& pool, uint64_t stream, uint64_t size);
  int32_t TryAllocateExpandableBlock(Pool& pool, uint64_t stream, uint64_t size,
                                     bool small);
  int32_t FindExpandableBlock(Pool& pool, uint64_t stream, uint64_t size,
                              bool small);
  bool MapBlock(int32_t b, uint64_t size);
  void UnmapBlock(int32_t b);
  void ReleaseCachedBlocks();
  void FreeBlock(int32_t b);
  void TryMerge(int32_t dst, int32_t src);

  const PolicyConfig config_;
  const PytorchAllocConfig alloc_config_;
  SlotPool<Block> blocks_;
  LiveBlocks live_;
  std::vector<Segment> segments_;
  Pool small_;
  Pool large_;
  uint64_t next_va_ = uint64_t{0x100000000000};
  uint64_t live_segments_ = 0;
  uint64_t mapped_ = 0;
  uint64_t peak_mapped_ = 0;
  uint64_t map_calls_ = 0;
  uint64_t unmap_calls_ = 0;
  uint64_t pages_mapped_ = 0;
  uint64_t pages_unmapped_ = 0;
  uint64_t retries_ = 0;
  uint64_t ooms_ = 0;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_EXPANDABLE_POLICY_H_
