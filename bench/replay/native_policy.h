// NativePolicy: a model of PyTorch's default CUDA caching allocator
// (DeviceCachingAllocator in c10/cuda/CUDACachingAllocator.cpp, PyTorch
// 2.11; docs/replay.md, "Models"), without expandable
// segments: round_size, small (<= 1 MiB) and large pools, segments of
// get_allocation_size() bytes, best fit keyed (stream, size, address) so a
// block is reused only on its allocation stream, should_split, the oversize
// rules of max_split_size, coalescing of free neighbours inside a segment, and
// the retry ladder on OOM (release_available_cached_blocks, then
// release_cached_blocks, then OOM). Reserved bytes are the segments currently
// "cudaMalloc'd"; capacity bounds them. Addresses are simulated (never
// dereferenced). Thread-safety: not thread-safe.
#ifndef FRAGFREE_BENCH_REPLAY_NATIVE_POLICY_H_
#define FRAGFREE_BENCH_REPLAY_NATIVE_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "bench/replay/policy.h"
#include "bench/replay/pytorch_alloc_config.h"
#include "bench/replay/pytorch_blocks.h"
#include "bench/replay/slot_pool.h"

namespace fragfree::replay {

class NativePolicy final : public ReplayPolicy {
 public:
  explicit NativePolicy(const PolicyConfig& config,
                        const PytorchAllocConfig& alloc_config = {});

  std::string name() const override { return "native"; }
  bool Alloc(uint64_t id, uint64_t size, uint64_t stream) override;
  void Free(uint64_t id) override;
  uint64_t reserved_bytes() const override { return reserved_; }
  PolicyFigures figures() const override;
  void EmptyCache() override { ReleaseCachedBlocks(); }
  absl::Status CheckInvariants() const override;

  // Number of segments currently held (for tests).
  uint64_t segments() const { return segment_allocs_ - segment_frees_; }

 private:
  static constexpr int32_t kNone = kNoBlock;
  using Block = PytorchBlock;
  using Key = SizeKey;
  using Pool = absl::btree_set<Key>;

  Key KeyOf(int32_t b) const { return SizeKeyOf(blocks_, b); }
  Pool& PoolOf(int32_t b) {
    return blocks_[b].small ? small_pool_ : large_pool_;
  }

  int32_t GetFreeBlock(Pool& pool, uint64_t stream, uint64_t size);
  int32_t AllocBlock(uint64_t alloc_size, uint64_t stream, bool small,
                     bool is_retry);
  bool ReleaseAvailableCachedBlocks(Pool& pool, uint64_t stream, uint64_t size);
  bool ReleaseCachedBlocks();
  void ReleaseBlock(int32_t b);  // gives a whole free segment back
  bool ShouldSplit(const Block& block, uint64_t size) const;
  void FreeBlock(int32_t b);
  void TryMerge(int32_t dst, int32_t src);

  const PolicyConfig config_;
  const PytorchAllocConfig alloc_config_;
  SlotPool<Block> blocks_;
  LiveBlocks live_;
  Pool small_pool_;  // free blocks of small segments
  Pool large_pool_;  // free blocks of large segments
  uint64_t next_addr_ = uint64_t{0x7f0000000000};
  uint64_t reserved_ = 0;
  uint64_t peak_reserved_ = 0;
  uint64_t segment_allocs_ = 0;
  uint64_t segment_frees_ = 0;
  uint64_t retries_ = 0;
  uint64_t ooms_ = 0;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_NATIVE_POLICY_H_
