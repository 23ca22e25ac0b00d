#include "allocator/blocks/free_index.h"

#include "allocator/base/check.h"
#include "allocator/base/units.h"

namespace fragfree {
namespace {
constexpr size_t kLinearLimit = 32 * 512;  // 16 KiB
constexpr int kScanLimit = 16;
}  // namespace

uint32_t FreeIndex::BinOf(size_t size) {
  if (size < kLinearLimit) return uint32_t(size >> 9);
  int fl = Log2Floor(size);  // >= 14
  uint32_t sl = uint32_t(size >> (fl - 5)) & 31;
  uint32_t bin = 32 + uint32_t(fl - 14) * 32 + sl;
  return bin < kNumBins ? bin : uint32_t(kNumBins - 1);
}

void FreeIndex::Insert(Block* block) {
  FF_DCHECK(block->is_free() && block->size % 512 == 0 && block->size > 0,
            "FreeIndex::Insert of a bad block");
  uint32_t bin = BinOf(block->size);
  block->bin = uint16_t(bin);
  block->bin_prev = nullptr;
  block->bin_next = heads_[bin];
  if (heads_[bin] != nullptr) heads_[bin]->bin_prev = block;
  heads_[bin] = block;
  bitmap_[bin / 64] |= uint64_t{1} << (bin % 64);
  summary_ |= uint64_t{1} << (bin / 64);
  ++count_;
}

void FreeIndex::Remove(Block* block) {
  uint32_t bin = block->bin;
  if (block->bin_prev != nullptr) {
    block->bin_prev->bin_next = block->bin_next;
  } else {
    FF_CHECK(heads_[bin] == block, "FreeIndex::Remove of an unindexed block");
    heads_[bin] = block->bin_next;
  }
  if (block->bin_next != nullptr) block->bin_next->bin_prev = block->bin_prev;
  block->bin_prev = block->bin_next = nullptr;
  if (heads_[bin] == nullptr) {
    bitmap_[bin / 64] &= ~(uint64_t{1} << (bin % 64));
    if (bitmap_[bin / 64] == 0) summary_ &= ~(uint64_t{1} << (bin / 64));
  }
  --count_;
}

Block* FreeIndex::BestOf(Block* head, size_t size) const {
  Block* best = nullptr;
  int scanned = 0;
  for (Block* b = head; b != nullptr && scanned < kScanLimit;
       b = b->bin_next, ++scanned) {
    if (b->size < size) continue;
    if (best == nullptr || b->size < best->size ||
        (b->size == best->size && b->addr < best->addr)) {
      best = b;
      if (b->size == size) break;
    }
  }
  return best;
}

int FreeIndex::NextNonEmptyBin(uint32_t from) const {
  if (from >= kNumBins) return -1;
  uint32_t word = from / 64;
  uint64_t bits = bitmap_[word] & (~uint64_t{0} << (from % 64));
  if (bits != 0) return int(word * 64 + __builtin_ctzll(bits));
  uint64_t words = word + 1 < 64 ? summary_ & (~uint64_t{0} << (word + 1)) : 0;
  if (words == 0) return -1;
  word = uint32_t(__builtin_ctzll(words));
  return int(word * 64 + __builtin_ctzll(bitmap_[word]));
}

Block* FreeIndex::FindFit(size_t size) const {
  uint32_t bin = BinOf(size);
  if (heads_[bin] != nullptr) {
    if (Block* b = BestOf(heads_[bin], size)) return b;
  }
  int next = NextNonEmptyBin(bin + 1);
  if (next < 0) return nullptr;
  return BestOf(heads_[next], size);
}

}  // namespace fragfree
