// Arena (arena.h): carving, coalescing, mapping and unmapping pages under
// blocks. Thread-safety: see arena.h.
#include "allocator/va/arena.h"

#include <algorithm>

#include "allocator/base/check.h"
#include "allocator/base/units.h"
#include "allocator/blocks/size_classes.h"

namespace fragfree {

absl::StatusOr<std::unique_ptr<Arena>> Arena::Create(
    PhysicalBackend* backend, PagePool* pool, BlockPool* blocks,
    ReclaimQueue* queue, size_t va_size, ArenaKind kind, uint32_t stream_slot,
    StreamHandle stream) {
  va_size = AlignUp(va_size, backend->Granularity());
  absl::StatusOr<uintptr_t> base = backend->ReserveVa(va_size);
  if (!base.ok()) return base.status();
  return std::unique_ptr<Arena>(new Arena(backend, pool, blocks, queue, *base,
                                          va_size, kind, stream_slot, stream));
}

Arena::Arena(PhysicalBackend* backend, PagePool* pool, BlockPool* blocks,
             ReclaimQueue* queue, uintptr_t base, size_t size, ArenaKind kind,
             uint32_t stream_slot, StreamHandle stream)
    : backend_(backend),
      pool_(pool),
      blocks_(blocks),
      queue_(queue),
      base_(base),
      size_(size),
      page_size_(backend->Granularity()),
      page_shift_(IsPowerOfTwo(page_size_) ? Log2Floor(page_size_) : -1),
      kind_(kind),
      stream_slot_(stream_slot),
      stream_(stream),
      page_of_(size / backend->Granularity(), kNoPage),
      mapped_bits_((page_of_.size() + 63) / 64, 0) {
  first_ = blocks_->New();
  first_->addr = base_;
  first_->size = size_;
  first_->arena = this;
  AddFree(first_);
}

Arena::~Arena() {
  FF_CHECK(mapped_pages_ == 0 && detached_.empty(),
           "an arena was destroyed with pages mapped");
  for (Block* b = first_; b != nullptr;) {
    Block* next = b->next;
    Dequeue(b);
    b->uses.reset();  // a block still allocated may have some
    blocks_->Delete(b);
    b = next;
  }
  backend_->ReleaseVa(base_, size_).IgnoreError();
}

namespace {
// Calls fn(word, mask) for the words of `bits` covering bit range [first,
// end), with the mask of the range's bits in that word, until fn returns
// false. REQUIRES: first < end.
template <typename Fn>
void ForEachWord(const MetadataVector<uint64_t>& bits, size_t first, size_t end,
                 Fn&& fn) {
  const size_t last = end - 1;
  for (size_t w = first / 64; w <= last / 64; ++w) {
    uint64_t mask = ~uint64_t{0};
    if (w == first / 64) mask &= ~uint64_t{0} << (first % 64);
    if (w == last / 64) mask &= ~uint64_t{0} >> (63 - last % 64);
    if (!fn(bits[w], mask)) return;
  }
}
}  // namespace

size_t Arena::NextMappedPage(size_t first, size_t end) const {
  size_t found = end;
  if (first >= end) return end;
  size_t word_start = first & ~size_t{63};
  ForEachWord(mapped_bits_, first, end, [&](uint64_t word, uint64_t mask) {
    if (const uint64_t bits = word & mask; bits != 0) {
      found = word_start + size_t(__builtin_ctzll(bits));
      return false;
    }
    word_start += 64;
    return true;
  });
  return std::min(found, end);
}

size_t Arena::MappedIn(size_t first, size_t end) const {
  size_t n = 0;
  if (first >= end) return 0;
  ForEachWord(mapped_bits_, first, end, [&](uint64_t word, uint64_t mask) {
    n += size_t(__builtin_popcountll(word & mask));
    return true;
  });
  return n;
}

bool Arena::AllMappedSlow(size_t first, size_t end) const {
  bool all = true;
  ForEachWord(mapped_bits_, first, end, [&](uint64_t word, uint64_t mask) {
    return all = (word & mask) == mask;
  });
  return all;
}

bool Arena::AnyMappedSlow(size_t first, size_t end) const {
  bool any = false;
  ForEachWord(mapped_bits_, first, end, [&](uint64_t word, uint64_t mask) {
    return !(any = (word & mask) != 0);
  });
  return any;
}

Block* Arena::Allocate(size_t size, size_t requested, size_t* missing_out) {
  Block* block = free_index_.FindFit(size);
  if (block == nullptr) return nullptr;
  // The best fit needs pages mapped: worth a wider search for a fit that is
  // already mapped, since mapping costs tens of microseconds per page and takes
  // pages from elsewhere. See Note [Mapped-first placement].
  bool at_end = false;        // place the block at the end of the free block
  uintptr_t inside_addr = 0;  // != 0: place the block here, inside it
  size_t missing = UnmappedPagesIn(block->addr, size);
  if (missing > 0) {
    // Otherwise the fit that needs the fewest new pages, placed at whichever
    // end of its free block shares more mapped pages with its neighbours.
    // Or inside it, at its first mapped page past its first page: a free
    // block whose front pages were reclaimed keeps its mapped pages further
    // in, and placing at its start would move them forward one request at a
    // time (Note [Mapped-first placement]).
    Block* fewest = block;
    auto consider = [&](Block* b) {
      const size_t at_start = UnmappedPagesIn(b->addr, size);
      const size_t at_tail = UnmappedPagesIn(b->end() - size, size);
      size_t inside = SIZE_MAX;
      uintptr_t addr = 0;
      const size_t from = FirstPage(b->addr) + 1;
      const size_t limit = std::min(EndPage(b->end()), mapped_end_);
      if (const size_t m =
              b->next == nullptr ? NextMappedPage(from, limit) : limit;
          m < limit) {
        addr = base_ + m * page_size_;
        if (addr - b->addr >= kMinBlockSize && addr + size <= b->end()) {
          inside = UnmappedPagesIn(addr, size);
        }
      }
      const size_t best = std::min({at_start, at_tail, inside});
      if (best < missing) {
        fewest = b;
        missing = best;
        at_end = at_tail == best && at_tail < at_start;
        inside_addr =
            (best == inside && inside < at_start && !at_end) ? addr : 0;
      }
      return missing == 0;
    };
    consider(block);
    if (missing > 0) {
      free_index_.FindFitIf(
          size, [&](const Block* b) { return consider(const_cast<Block*>(b)); },
          kMappedSearchLimit);
    }
    block = fewest;
  }
  RemoveFree(block);
  // The part in front stays free.
  if (inside_addr != 0) SplitOffFront(block, inside_addr - block->addr);
  if (block->size - size >= kMinBlockSize) {
    if (at_end) {  // the free part stays in front
      SplitOffFront(block, block->size - size);
    } else {
      Block* rest = blocks_->New();
      rest->arena = this;
      rest->free_epoch = block->free_epoch;
      rest->addr = block->addr + size;
      rest->size = block->size - size;
      rest->prev = block;
      rest->next = block->next;
      // rest->next_free stays false (a free block's neighbours are in use);
      // the block's old next neighbour keeps a free neighbour (prev_free).
      if (block->next != nullptr) block->next->prev = rest;
      block->next = rest;
      block->next_free = true;
      block->size = size;
      AddFree(rest);  // free_seq 0: a remainder, which reclaim takes first
    }
  }
  block->state = BlockState::kAllocated;
  // Neighbours that were next to the free block (not split off from it) now
  // border a block in use (Note [Neighbour bits]).
  if (!block->prev_free && block->prev != nullptr) {
    block->prev->next_free = false;
  }
  if (!block->next_free && block->next != nullptr) {
    block->next->prev_free = false;
  }
  block->requested = requested;
  // `missing` counts the pages under the place chosen for the block.
  if (missing_out != nullptr) *missing_out = missing;
  return block;
}

void Arena::SplitOffFront(Block* block, size_t bytes) {
  Block* front = blocks_->New();
  front->arena = this;
  front->free_epoch = block->free_epoch;
  front->addr = block->addr;
  front->size = bytes;
  front->prev = block->prev;
  front->next = block;
  // front->prev_free stays false (a free block's neighbours are in use); the
  // block's old prev neighbour keeps a free neighbour (next_free), and the
  // block itself is the one Arena::Allocate hands out.
  if (block->prev != nullptr) block->prev->next = front;
  if (first_ == block) first_ = front;
  block->prev = front;
  block->prev_free = true;
  block->addr = front->end();
  block->size -= bytes;
  AddFree(front);  // free_seq 0: a remainder, which reclaim takes first
}

namespace {
// Appends page `index` to `runs`, extending the last run when contiguous.
void AddToRuns(VaRuns* runs, uintptr_t addr, size_t page_size) {
  if (runs == nullptr) return;
  if (!runs->empty() && runs->back().first + runs->back().second == addr) {
    runs->back().second += page_size;
  } else {
    runs->emplace_back(addr, page_size);
  }
}
}  // namespace

bool Arena::HasPagesWithoutAccess(const Block* block) const {
  if (without_access_.empty()) return false;
  auto it = without_access_.lower_bound(FirstPage(block->addr));
  return it != without_access_.end() && *it < EndPage(block->end());
}

absl::Status Arena::MapPages(const Block* block, PageList& pages,
                             VaRuns* runs) {
  const size_t first = FirstPage(block->addr), end = EndPage(block->end());
  size_t next = 0;
  // Scratch kept by the arena, so that mapping allocates nothing once warm.
  MetadataVector<size_t>& mapped_now = scratch_mapped_;
  mapped_now.clear();
  // Pages whose access this call sets: the ones it maps, and the ones a failed
  // undo kept mapped without access (see without_access_), in index order.
  MetadataVector<size_t>& set_up = scratch_set_up_;
  set_up.clear();
  absl::Status status;
  for (size_t p = first; p < end && status.ok(); ++p) {
    if (page_of_[p] != kNoPage) {
      if (without_access_.contains(p)) set_up.push_back(p);
      continue;
    }
    FF_CHECK(next < pages.size(), "MapPages got too few pages");
    FF_CHECK(!detached_.contains(p), "MapPages over a detached page");
    status = backend_->Map(base_ + p * page_size_, page_size_,
                           pool_->handle(pages[next]));
    if (!status.ok()) break;
    page_of_[p] = pages[next++];
    SetMappedBit(p, true);
    mapped_now.push_back(p);
    set_up.push_back(p);
  }
  // One SetAccess per contiguous run of those pages.
  for (size_t i = 0; i < set_up.size() && status.ok();) {
    size_t j = i + 1;
    while (j < set_up.size() && set_up[j] == set_up[j - 1] + 1) ++j;
    status = backend_->SetAccess(base_ + set_up[i] * page_size_,
                                 (j - i) * page_size_);
    i = j;
  }
  if (!status.ok()) {
    // All or nothing: undo this call's maps so no page is left half set up. A
    // page whose Unmap fails too stays mapped here (and is no longer the
    // caller's): it lies under the block, which the caller frees, so it is an
    // ordinary cached page that reclaim or empty_cache will retry. Its access
    // may not be set (SetAccess failed on it or never ran), so it is recorded
    // in without_access_: the next block placed over it goes through MapPages
    // again, which sets its access before the block is handed out (engine bug
    // 4 in docs/reliability.md). Pages already in without_access_ stay there.
    PageList kept;
    for (size_t p : mapped_now) {
      if (backend_->Unmap(base_ + p * page_size_, page_size_).ok()) {
        page_of_[p] = kNoPage;
        SetMappedBit(p, false);
      } else {
        kept.push_back(page_of_[p]);
        without_access_.insert(p);
        ++mapped_pages_;
        mapped_end_ = std::max(mapped_end_, p + 1);
      }
    }
    for (PageId id : kept) {
      pages.erase(std::find(pages.begin(), pages.end(), id));
    }
    return status;
  }
  for (size_t p : set_up) without_access_.erase(p);
  mapped_pages_ += mapped_now.size();
  for (size_t p : mapped_now)
    AddToRuns(runs, base_ + p * page_size_, page_size_);
  if (!mapped_now.empty()) {
    mapped_end_ = std::max(mapped_end_, mapped_now.back() + 1);
  }
  return absl::OkStatus();
}

void Arena::Enqueue(Block* block) {
  if (block->free_seq == 0) {
    remainders_.Insert(block);
  } else {
    queue_->Add(block);
  }
}

void Arena::Dequeue(Block* block) {
  if (!block->queued) return;
  if (block->free_seq == 0) {
    remainders_.Remove(block);
  } else {
    queue_->Remove(block);
  }
}

Block* Arena::Release(Block* block, uint64_t free_epoch, uint64_t free_seq) {
  FF_CHECK(!block->is_free(), "Arena::Release of a free block");
  // Both neighbours are written below (their neighbour bits, or coalescing):
  // fetch them together rather than one after the other (a prefetch of
  // nullptr is a no-op, never a fault). Whether they are free is read from
  // this block's own bits, so no branch waits for them (Note [Neighbour
  // bits] in docs/design.md).
  __builtin_prefetch(block->prev, 1);
  __builtin_prefetch(block->next, 1);
  block->state = BlockState::kFree;
  block->requested = 0;
  FF_DCHECK(block->uses == nullptr, "Arena::Release of a block with uses");
  block->free_epoch = free_epoch;
  if (block->prev_free) {
    Block* const prev = block->prev;
    RemoveFree(prev);
    prev->size += block->size;
    prev->next = block->next;
    prev->next_free = block->next_free;
    if (block->next != nullptr) block->next->prev = prev;
    prev->free_epoch = std::max(prev->free_epoch, free_epoch);
    blocks_->Delete(block);
    block = prev;
  }
  if (block->next_free) {
    Block* const next = block->next;
    RemoveFree(next);
    block->size += next->size;
    block->next = next->next;
    block->next_free = false;  // a free block's neighbours are in use
    if (next->next != nullptr) next->next->prev = block;
    block->free_epoch = std::max(block->free_epoch, next->free_epoch);
    blocks_->Delete(next);
  }
  // The coalesced block's neighbours are in use and now border a free block.
  if (block->prev != nullptr) block->prev->next_free = true;
  if (block->next != nullptr) block->next->prev_free = true;
  if (free_seq != kKeepFreeSeq) block->free_seq = free_seq;
  AddFree(block);
  return block;
}

size_t Arena::MappedBytes(const Block* block) const {
  size_t bytes = 0;
  size_t end = std::min(EndPage(block->end()), mapped_end_);
  for (size_t p = FirstPage(block->addr); p < end; ++p) {
    if (page_of_[p] == kNoPage) continue;
    uintptr_t lo = std::max(block->addr, base_ + p * page_size_);
    uintptr_t hi = std::min(block->end(), base_ + (p + 1) * page_size_);
    bytes += hi - lo;
  }
  return bytes;
}

size_t Arena::ReclaimablePages(const Block* block) const {
  size_t first = EndPage(block->addr);  // first page starting inside
  size_t end = std::min(FirstPage(block->end()), mapped_end_);
  return MappedIn(first, end);
}

void Arena::ForgetMapping(size_t index, PageList* out) {
  out->push_back(page_of_[index]);
  page_of_[index] = kNoPage;
  SetMappedBit(index, false);
  without_access_.erase(index);
  --mapped_pages_;
}

absl::Status Arena::UnmapFreePages(const Block* block, size_t max_pages,
                                   PageList* out, VaRuns* runs,
                                   MetadataVector<size_t>* indices) {
  return TakeFreePages(block, max_pages, /*epoch=*/nullptr, out, runs, indices);
}

absl::Status Arena::DetachFreePages(const Block* block, size_t max_pages,
                                    uint64_t epoch, PageList* out, VaRuns* runs,
                                    MetadataVector<size_t>* indices) {
  return TakeFreePages(block, max_pages, &epoch, out, runs, indices);
}

absl::Status Arena::TakeFreePages(const Block* block, size_t max_pages,
                                  const uint64_t* epoch, PageList* out,
                                  VaRuns* runs,
                                  MetadataVector<size_t>* indices) {
  FF_CHECK(block->is_free(), "UnmapFreePages on a block in use");
  size_t first = EndPage(block->addr);
  size_t end = std::min(FirstPage(block->end()), mapped_end_);
  size_t done = 0;
  size_t p = first;
  auto took = [&](size_t index) {
    if (indices != nullptr) indices->push_back(index);
    AddToRuns(runs, base_ + index * page_size_, page_size_);
    ++done;
  };
  while (p < end && done < max_pages) {
    if (page_of_[p] == kNoPage) {
      ++p;
      continue;
    }
    if (epoch != nullptr) {
      // A page whose access is unknown stays (a reattached page must be as it
      // was: accessible); it goes by the waiting path.
      if (!without_access_.contains(p)) {
        detached_[p] = *epoch;
        ForgetMapping(p, out);
        took(p);
      }
      ++p;
      continue;
    }
    // A run of adjacent mapped pages, no more than are wanted.
    size_t q = p + 1;
    while (q < end && q - p < max_pages - done && page_of_[q] != kNoPage) ++q;
    if (absl::Status s = UnmapPages(p, q,
                                    [&](size_t i) {
                                      ForgetMapping(i, out);
                                      took(i);
                                    });
        !s.ok()) {
      return s;
    }
    p = q;
  }
  if (!AnyMapped(p, end)) Dequeue(const_cast<Block*>(block));  // none left
  while (mapped_end_ > 0 && page_of_[mapped_end_ - 1] == kNoPage) --mapped_end_;
  return absl::OkStatus();
}

absl::Status Arena::UnmapPages(size_t first, size_t end,
                               absl::FunctionRef<void(size_t)> gone,
                               size_t* calls) {
  if (end - first > 1) {
    if (calls != nullptr) ++*calls;
    if (backend_->Unmap(base_ + first * page_size_, (end - first) * page_size_)
            .ok()) {
      for (size_t p = first; p < end; ++p) gone(p);
      return absl::OkStatus();
    }
  }
  for (size_t p = first; p < end; ++p) {
    if (calls != nullptr) ++*calls;
    if (absl::Status s = backend_->Unmap(base_ + p * page_size_, page_size_);
        !s.ok()) {
      return s;
    }
    gone(p);
  }
  return absl::OkStatus();
}

absl::Status Arena::UnmapDetached(uintptr_t addr, size_t size,
                                  FenceReady ready) {
  const size_t end = EndPage(addr + size);
  size_t from = FirstPage(addr);
  for (auto it = detached_.lower_bound(from);
       it != detached_.end() && it->first < end;
       it = detached_.lower_bound(from)) {
    // A run of adjacent detached pages whose fences have passed: one Unmap
    // (page by page where the backend refuses the run).
    const size_t first = it->first;
    size_t count = 0;
    bool waiting = false;  // the page after the run has not passed
    absl::Status status;
    for (auto r = it;
         r != detached_.end() && r->first < end && r->first == first + count;
         ++r) {
      absl::StatusOr<bool> passed = ready(r->second);
      if (!passed.ok()) {
        status = passed.status();
        break;
      }
      if (!*passed) {
        waiting = true;
        break;
      }
      ++count;
    }
    if (absl::Status s = UnmapPages(first, first + count,
                                    [&](size_t p) { detached_.erase(p); });
        !s.ok()) {
      return s;
    }
    if (!status.ok()) return status;
    from = first + count + (waiting ? 1 : 0);
  }
  return absl::OkStatus();
}

size_t Arena::RestorePages(
    const MetadataVector<std::pair<size_t, PageId>>& pages, PageList* failed,
    VaRuns* runs) {
  if (pages.empty()) return 0;
  MetadataVector<size_t>& mapped_now = scratch_mapped_;
  mapped_now.clear();
  size_t restored = 0;
  for (const auto& [p, id] : pages) {
    FF_CHECK(page_of_[p] == kNoPage, "RestorePages over a mapped page");
    if (auto d = detached_.find(p); d != detached_.end()) {
      // Still mapped there, with its access: attached again as it was.
      detached_.erase(d);
      page_of_[p] = id;
      SetMappedBit(p, true);
      ++restored;
      ++mapped_pages_;
      mapped_end_ = std::max(mapped_end_, p + 1);
      AddToRuns(runs, base_ + p * page_size_, page_size_);
      continue;
    }
    if (!backend_->Map(base_ + p * page_size_, page_size_, pool_->handle(id))
             .ok()) {
      failed->push_back(id);
      continue;
    }
    page_of_[p] = id;
    SetMappedBit(p, true);
    mapped_now.push_back(p);
  }
  // One SetAccess per contiguous run; a run it fails on is unmapped again.
  for (size_t i = 0; i < mapped_now.size();) {
    size_t j = i + 1;
    while (j < mapped_now.size() && mapped_now[j] == mapped_now[j - 1] + 1) ++j;
    const bool ok = backend_
                        ->SetAccess(base_ + mapped_now[i] * page_size_,
                                    (j - i) * page_size_)
                        .ok();
    for (size_t k = i; k < j; ++k) {
      const size_t p = mapped_now[k];
      if (!ok) {
        if (backend_->Unmap(base_ + p * page_size_, page_size_).ok()) {
          failed->push_back(page_of_[p]);
          page_of_[p] = kNoPage;
          SetMappedBit(p, false);
          continue;
        }
        without_access_.insert(p);  // mapped, its access unknown
      }
      ++restored;
      ++mapped_pages_;
      mapped_end_ = std::max(mapped_end_, p + 1);
      if (ok) AddToRuns(runs, base_ + p * page_size_, page_size_);
    }
    i = j;
  }
  // Free blocks holding a whole mapped page again are reclaim candidates.
  for (Block* b = first_; b != nullptr && restored > 0; b = b->next) {
    if (b->is_free() && !b->queued && HasReclaimablePage(b)) Enqueue(b);
  }
  return restored;
}

absl::Status Arena::UnmapPagesIn(uintptr_t addr, size_t size, PageList* out,
                                 VaRuns* runs, size_t* calls) {
  const size_t first = FirstPage(addr);
  const size_t end = std::min(EndPage(addr + size), mapped_end_);
  const auto detached = detached_.lower_bound(first);
  FF_CHECK(
      detached == detached_.end() || detached->first >= EndPage(addr + size),
      "UnmapPagesIn over a detached page");
  absl::Status status;
  for (size_t p = first; p < end && status.ok();) {
    if (page_of_[p] == kNoPage) {
      ++p;
      continue;
    }
    size_t q = p + 1;
    while (q < end && page_of_[q] != kNoPage) ++q;
    status = UnmapPages(
        p, q,
        [&](size_t i) {
          ForgetMapping(i, out);
          AddToRuns(runs, base_ + i * page_size_, page_size_);
        },
        calls);
    p = q;
  }
  // Free blocks over the range may have lost their last whole mapped page.
  for (Block* b = first_; b != nullptr && b->addr < addr + size; b = b->next) {
    if (b->queued && b->end() > addr && !HasReclaimablePage(b)) Dequeue(b);
  }
  while (mapped_end_ > 0 && page_of_[mapped_end_ - 1] == kNoPage) --mapped_end_;
  return status;
}

const Block* Arena::BlockContaining(uintptr_t addr) const {
  if (!Contains(addr)) return nullptr;
  for (const Block* b = first_; b != nullptr; b = b->next) {
    if (addr >= b->addr && addr < b->end()) return b;
  }
  return nullptr;
}

}  // namespace fragfree
