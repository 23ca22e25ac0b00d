// PinnedHostAllocator: chunks, best-fit carving with coalescing, event-gated
// reuse, idle-chunk release. See pinned_allocator.h.
// Thread-safety: mu_ guards every member below the constants; Pin and Unpin run
// with mu_ released.
#include "allocator/host/pinned_allocator.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "allocator/base/check.h"

namespace fragfree {

PinnedHostAllocator::PinnedHostAllocator(
    std::unique_ptr<PinningBackend> backend,
    std::unique_ptr<EventSource> events, PinnedOptions options, Clock clock)
    : backend_(std::move(backend)),
      events_(std::move(events)),
      options_(options),
      clock_(std::move(clock)),
      pending_(events_.get()) {}

PinnedHostAllocator::~PinnedHostAllocator() {
  ChunkList all;
  {
    MutexLock lock(&mu_);
    pending_.Clear(/*wait=*/false);
    for (auto& [base, chunk] : chunks_) {
      all.emplace_back(reinterpret_cast<void*>(base), chunk->bytes);
      MetadataDelete(chunk);
    }
    chunks_.clear();
    blocks_.clear();
    free_.clear();
  }
  for (auto& [ptr, bytes] : all) backend_->Unpin(ptr, bytes).IgnoreError();
}

size_t PinnedHostAllocator::RoundSize(size_t size) {
  if (size <= 16 * kKiB) return AlignUp(std::max<size_t>(size, 1), kAlignment);
  const size_t step = (size_t{1} << Log2Floor(size)) / 32;
  return AlignUp(size, step);
}

int64_t PinnedHostAllocator::Now() const {
  if (clock_) return clock_();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void PinnedHostAllocator::AccountLiveLocked(int64_t delta) {
  stats_.live_bytes += delta;
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, stats_.live_bytes);
}

// --- Carving -----------------------------------------------------------------

void PinnedHostAllocator::AddChunkLocked(void* base, size_t bytes) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(base);
  Chunk* chunk = MetadataNew<Chunk>();
  chunk->base = addr;
  chunk->bytes = bytes;
  chunk->idle_since_ns = Now();
  ++idle_chunks_;
  chunks_.emplace(addr, chunk);
  Block block;
  block.size = bytes;
  block.chunk = chunk;
  blocks_.emplace(addr, std::move(block));
  free_.insert({bytes, addr});
  stats_.chunks++;
  stats_.pinned_bytes += int64_t(bytes);
  stats_.peak_pinned_bytes =
      std::max(stats_.peak_pinned_bytes, stats_.pinned_bytes);
}

void* PinnedHostAllocator::CarveLocked(size_t rounded, size_t requested) {
  auto fit = free_.lower_bound({rounded, 0});
  if (fit == free_.end()) return nullptr;
  auto it = blocks_.find(fit->second);
  FF_CHECK(it != blocks_.end() && it->second.state == State::kFree,
           "pinned free set names a block that is not free");
  free_.erase(fit);
  return UseBlockLocked(it, rounded, requested);
}

void* PinnedHostAllocator::UseBlockLocked(BlockMap::iterator it, size_t rounded,
                                          size_t requested) {
  Block& block = it->second;
  Chunk* chunk = block.chunk;
  if (chunk->idle_since_ns >= 0) {
    chunk->idle_since_ns = -1;
    --idle_chunks_;
  }
  if (block.size > rounded) {  // sizes are multiples of kAlignment: split
    Block rest;
    rest.size = block.size - rounded;
    rest.chunk = chunk;
    const uintptr_t rest_addr = it->first + rounded;
    free_.insert({rest.size, rest_addr});
    blocks_.emplace_hint(std::next(it), rest_addr, std::move(rest));
    block.size = rounded;
  }
  block.state = State::kLive;
  block.requested = requested;
  AccountLiveLocked(int64_t(block.size));
  stats_.requested_bytes += int64_t(requested);
  stats_.allocs++;
  return reinterpret_cast<void*>(it->first);
}

void PinnedHostAllocator::ReleaseBlockLocked(BlockMap::iterator it) {
  Block& block = it->second;
  block.state = State::kFree;
  block.requested = 0;
  block.streams.clear();
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.chunk == block.chunk &&
      next->second.state == State::kFree) {
    free_.erase({next->second.size, next->first});
    block.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.chunk == block.chunk &&
        prev->second.state == State::kFree) {
      free_.erase({prev->second.size, prev->first});
      prev->second.size += block.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  free_.insert({it->second.size, it->first});
  Chunk* chunk = it->second.chunk;
  if (it->second.size == chunk->bytes) {
    chunk->idle_since_ns = Now();
    ++idle_chunks_;
  }
}

void PinnedHostAllocator::ProcessPendingLocked() {
  // A failed query: the event's context is gone, so no work of it can be in
  // flight (counted in event_errors).
  pending_
      .Collect(
          /*wait=*/false,
          [&](uintptr_t addr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
            auto it = blocks_.find(addr);
            FF_CHECK(it != blocks_.end() && it->second.state == State::kPending,
                     "pinned pending list names a block that is not pending");
            stats_.pending_bytes -= int64_t(it->second.size);
            ReleaseBlockLocked(it);
          },
          DeferredFrees<uintptr_t>::QueryErrors::kTreatAsComplete,
          &stats_.event_errors)
      .IgnoreError();
}

void PinnedHostAllocator::TakeIdleChunksLocked(int64_t min_idle_ns,
                                               ChunkList* out) {
  if (idle_chunks_ == 0) return;
  const int64_t now = Now();
  for (auto c = chunks_.begin(); c != chunks_.end();) {
    Chunk* chunk = c->second;
    if (chunk->idle_since_ns < 0 || now - chunk->idle_since_ns < min_idle_ns) {
      ++c;
      continue;
    }
    auto b = blocks_.find(chunk->base);
    FF_CHECK(b != blocks_.end() && b->second.state == State::kFree &&
                 b->second.size == chunk->bytes,
             "an idle pinned chunk is not one free block");
    free_.erase({chunk->bytes, chunk->base});
    blocks_.erase(b);
    out->emplace_back(reinterpret_cast<void*>(chunk->base), chunk->bytes);
    stats_.chunks--;
    stats_.pinned_bytes -= int64_t(chunk->bytes);
    stats_.unpin_calls++;
    --idle_chunks_;
    MetadataDelete(chunk);
    c = chunks_.erase(c);
  }
}

absl::Status PinnedHostAllocator::UnpinAll(const ChunkList& chunks) {
  absl::Status result;
  for (const auto& [ptr, bytes] : chunks) {
    absl::Status s = backend_->Unpin(ptr, bytes);
    if (result.ok()) result = s;
  }
  return result;
}

// --- Public ------------------------------------------------------------------

namespace {
absl::Status PinnedError(absl::StatusCode code, std::string message) {
  return absl::Status(code, "pinned host memory: " + message);
}
}  // namespace

absl::StatusOr<void*> PinnedHostAllocator::Allocate(size_t size) {
  if (size == 0 || size > kMaxRequest) {
    return PinnedError(absl::StatusCode::kInvalidArgument,
                       absl::StrFormat("cannot allocate %d bytes", size));
  }
  const size_t rounded = RoundSize(size);
  const int64_t release_ns = options_.release_after_ms * 1'000'000;
  ChunkList idle;
  void* p = nullptr;
  {
    MutexLock lock(&mu_);
    ProcessPendingLocked();
    p = CarveLocked(rounded, size);
    if (p != nullptr) stats_.allocs_without_pin++;
    if (options_.release_after_ms >= 0) TakeIdleChunksLocked(release_ns, &idle);
  }
  UnpinAll(idle).IgnoreError();
  if (p != nullptr) return p;

  const size_t page = backend_->granularity();
  const size_t chunk_bytes =
      rounded * 2 >= options_.chunk_bytes
          ? AlignUp(rounded, page)
          : AlignUp(std::max<size_t>(options_.chunk_bytes, 1), page);
  absl::StatusOr<void*> base = backend_->Pin(chunk_bytes);
  int64_t calls = 1;
  if (!base.ok() && absl::IsResourceExhausted(base.status())) {
    ChunkList all;  // give back every free chunk, then try once more
    {
      MutexLock lock(&mu_);
      ProcessPendingLocked();
      TakeIdleChunksLocked(0, &all);
    }
    UnpinAll(all).IgnoreError();
    if (!all.empty()) {
      base = backend_->Pin(chunk_bytes);
      ++calls;
    }
  }
  MutexLock lock(&mu_);
  stats_.pin_calls += calls;
  if (!base.ok()) {
    stats_.pin_failures++;
    return absl::Status(
        base.status().code(),
        absl::StrFormat("pinned host memory: cannot pin a chunk of %s for a "
                        "request of %s (%s pinned, %s live): %s",
                        FormatBytes(chunk_bytes), FormatBytes(size),
                        FormatBytes(size_t(stats_.pinned_bytes)),
                        FormatBytes(size_t(stats_.live_bytes)),
                        base.status().message()));
  }
  AddChunkLocked(*base, chunk_bytes);
  p = CarveLocked(rounded, size);
  FF_CHECK(p != nullptr, "a new pinned chunk does not fit its request");
  return p;
}

namespace {
// Why `ptr` is not a live block, for error messages.
template <typename Map, typename IsLive>
std::string Describe(const Map& blocks, uintptr_t addr, IsLive is_live) {
  auto it = blocks.upper_bound(addr);
  if (it != blocks.begin()) {
    --it;
    if (addr < it->first + it->second.size) {
      if (addr == it->first) {
        return absl::StrFormat("%#x was already freed (double free)", addr);
      }
      if (is_live(it->second)) {
        return absl::StrFormat(
            "%#x is an interior pointer (the allocation starts at %#x)", addr,
            it->first);
      }
      return absl::StrFormat(
          "%#x is not a live allocation: it lies in freed pinned memory "
          "(double free?)",
          addr);
    }
  }
  return absl::StrFormat("%#x is not a fragfree pinned allocation", addr);
}
}  // namespace

absl::Status PinnedHostAllocator::Free(void* ptr) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  const int64_t release_ns = options_.release_after_ms * 1'000'000;
  ChunkList idle;
  {
    MutexLock lock(&mu_);
    auto it = blocks_.find(addr);
    if (it == blocks_.end() || it->second.state != State::kLive) {
      return PinnedError(absl::StatusCode::kInvalidArgument,
                         "free: " + Describe(blocks_, addr, [](const Block& b) {
                           return b.state == State::kLive;
                         }));
    }
    Block& block = it->second;
    for (StreamHandle s : block.streams) {
      if (events_->IsCapturing(s)) {
        return PinnedError(
            absl::StatusCode::kFailedPrecondition,
            absl::StrFormat("free: %#x was used on stream %#x, which is "
                            "capturing a CUDA graph; free it after capture",
                            addr, s));
      }
    }
    UseEvents events;
    StreamHandle failed = 0;
    if (absl::Status s =
            RecordUseEvents(events_.get(), block.streams, &events, &failed);
        !s.ok()) {
      return PinnedError(s.code(),
                         absl::StrFormat("free of %#x: recording an event "
                                         "on stream %#x: %s",
                                         addr, failed, s.message()));
    }
    stats_.frees++;
    stats_.requested_bytes -= int64_t(block.requested);
    AccountLiveLocked(-int64_t(block.size));
    if (events.empty()) {
      ReleaseBlockLocked(it);
    } else {
      stats_.events_recorded += int64_t(events.size());
      stats_.pending_bytes += int64_t(block.size);
      block.state = State::kPending;
      block.requested = 0;
      block.streams.clear();
      pending_.Add(addr, std::move(events));
    }
    ProcessPendingLocked();
    if (options_.release_after_ms >= 0) TakeIdleChunksLocked(release_ns, &idle);
  }
  return UnpinAll(idle);
}

absl::Status PinnedHostAllocator::RecordStream(void* ptr, StreamHandle stream) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  MutexLock lock(&mu_);
  auto it = blocks_.find(addr);
  if (it == blocks_.end() || it->second.state != State::kLive) {
    return PinnedError(
        absl::StatusCode::kInvalidArgument,
        "record_stream: " + Describe(blocks_, addr, [](const Block& b) {
          return b.state == State::kLive;
        }));
  }
  AddStreamUse(&it->second.streams, stream);
  return absl::OkStatus();
}

absl::Status PinnedHostAllocator::EmptyCache() {
  ChunkList idle;
  {
    MutexLock lock(&mu_);
    ProcessPendingLocked();
    TakeIdleChunksLocked(0, &idle);
  }
  return UnpinAll(idle);
}

void PinnedHostAllocator::Trim() {
  if (options_.release_after_ms < 0) return;
  ChunkList idle;
  {
    MutexLock lock(&mu_);
    ProcessPendingLocked();
    TakeIdleChunksLocked(options_.release_after_ms * 1'000'000, &idle);
  }
  UnpinAll(idle).IgnoreError();
}

size_t PinnedHostAllocator::AllocationSize(const void* ptr) const {
  MutexLock lock(&mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end() || it->second.state != State::kLive) return 0;
  return it->second.requested;
}

bool PinnedHostAllocator::Owns(const void* ptr) const {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  MutexLock lock(&mu_);
  auto it = chunks_.upper_bound(addr);
  if (it == chunks_.begin()) return false;
  --it;
  return addr < it->first + it->second->bytes;
}

PinnedStats PinnedHostAllocator::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

std::vector<HostSegmentView> PinnedHostAllocator::Segments() const {
  MutexLock lock(&mu_);
  std::vector<HostSegmentView> out;
  out.reserve(chunks_.size());
  auto block = blocks_.begin();
  for (const auto& [base, chunk] : chunks_) {
    HostSegmentView& segment = out.emplace_back();
    segment.base = base;
    segment.size = chunk->bytes;
    while (block != blocks_.end() && block->first < base) ++block;
    for (; block != blocks_.end() && block->first < base + chunk->bytes;
         ++block) {
      const Block& b = block->second;
      const BlockState state = b.state == State::kLive ? BlockState::kAllocated
                               : b.state == State::kPending
                                   ? BlockState::kPendingFree
                                   : BlockState::kFree;
      segment.blocks.push_back(
          BlockView{block->first, b.size,
                    b.state == State::kFree ? 0 : b.requested, state, 0});
    }
  }
  return out;
}

}  // namespace fragfree
