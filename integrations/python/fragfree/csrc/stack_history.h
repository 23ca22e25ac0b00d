// StackHistory: the stacks PyTorch asks an allocator to keep when
// torch.cuda.memory._record_memory_history(stacks="python"|"all") calls
// recordHistory with a context recorder (csrc/, native mode). The adapter
// gathers a stack per allocation (and per free with context="all"), hands
// libfragfree a 32-bit handle for it (ff_set_trace_context) so the trace entry
// carries the handle, and keeps the stack here: the last `max_entries` stacks
// for the trace (a ring: a handle whose slot was reused is gone, as the trace
// entry that named it is), and the stack of every live allocation for the
// blocks of a snapshot. At snapshot time PyTorch symbolizes what BuildSnapshot
// attaches, as it does for its own allocator. Gathering costs what it costs
// PyTorch's allocator (a Python frame walk, symbolized only at snapshot time).
// Thread-safety: every member is thread-safe; gathering runs outside the lock
// (it may take the GIL).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common.h"

namespace fragfree_native {

class StackHistory {
 public:
  using Context = std::shared_ptr<c10::GatheredContext>;

  // recordHistory's arguments. A null recorder or when == NEVER: no stacks.
  void Configure(bool enabled, cca::CreateContextFn recorder,
                 size_t max_entries, cca::RecordContext when,
                 bool clear_history) {
    std::lock_guard<std::mutex> lock(mu_);
    if (clear_history || !enabled) {
      ring_.clear();
      next_id_ = 1;
    }
    if (!enabled || recorder == nullptr || when == cca::RecordContext::NEVER) {
      recorder_ = nullptr;
      live_.clear();
      mode_.store(kOff, std::memory_order_release);
      return;
    }
    recorder_ = recorder;
    // PyTorch's default max_entries is sys.maxsize ("keep everything"): the
    // ring grows as stacks arrive, up to the limit, and is never
    // preallocated.
    const size_t capacity = std::clamp<size_t>(max_entries, 1, kMaxStacks);
    if (capacity_ != capacity) {
      capacity_ = capacity;
      ring_.clear();
      next_id_ = 1;
    }
    const int mode = when == cca::RecordContext::STATE   ? kLiveOnly
                     : when == cca::RecordContext::ALLOC ? kAllocs
                                                         : kAllocsAndFrees;
    mode_.store(mode, std::memory_order_release);
  }

  bool on() const { return mode_.load(std::memory_order_relaxed) != kOff; }

  // Before an allocation: the caller's stack, or null when stacks are off.
  Context GatherForAlloc() { return on() ? Gather() : nullptr; }
  // Before a free: the stack when frees are traced with stacks (context="all").
  Context GatherForFree() {
    return mode_.load(std::memory_order_relaxed) == kAllocsAndFrees ? Gather()
                                                                    : nullptr;
  }

  // The handle for the trace entry of a call made with `context` (0: none):
  // stacks are kept for the trace unless only the live state asked for them.
  uint32_t Remember(const Context& context) {
    if (context == nullptr) return 0;
    std::lock_guard<std::mutex> lock(mu_);
    if (mode_.load(std::memory_order_relaxed) < kAllocs || capacity_ == 0) {
      return 0;
    }
    const uint32_t id = next_id_;
    next_id_ = next_id_ == UINT32_MAX ? 1 : next_id_ + 1;
    const size_t index = id % capacity_;
    if (index >= ring_.size()) ring_.resize(index + 1);
    ring_[index] = Slot{id, context};
    return id;
  }

  void SetLive(void* ptr, size_t size, Context context) {
    if (context == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (recorder_ != nullptr) live_[ptr] = Live{size, std::move(context)};
  }
  void EraseLive(void* ptr) {
    if (!on()) return;
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(ptr);
  }

  // The stack behind a trace entry's handle, or null when it is gone.
  Context ForTrace(uint32_t id) const {
    if (id == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    const size_t index = capacity_ == 0 ? 0 : id % capacity_;
    if (index >= ring_.size()) return nullptr;
    const Slot& slot = ring_[index];
    return slot.id == id ? slot.context : nullptr;
  }
  // The stack of the live allocation at `ptr`, or null.
  Context ForLive(void* ptr) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    return it == live_.end() ? nullptr : it->second.context;
  }
  // The `n` largest live allocations that have a stack: (size, stack).
  std::vector<std::pair<size_t, Context>> LargestLive(size_t n) const {
    std::vector<std::pair<size_t, Context>> out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      out.reserve(live_.size());
      for (const auto& [ptr, live] : live_) {
        out.emplace_back(live.size, live.context);
      }
    }
    n = std::min(n, out.size());
    std::partial_sort(
        out.begin(), out.begin() + n, out.end(),
        [](const auto& a, const auto& b) { return a.first > b.first; });
    out.resize(n);
    return out;
  }

 private:
  enum Mode : int { kOff, kLiveOnly, kAllocs, kAllocsAndFrees };
  static constexpr size_t kMaxStacks = size_t{1} << 30;
  struct Live {
    size_t size = 0;
    Context context;
  };
  struct Slot {
    uint32_t id = 0;
    Context context;
  };

  Context Gather() {
    cca::CreateContextFn recorder;
    {
      std::lock_guard<std::mutex> lock(mu_);
      recorder = recorder_;
    }
    return recorder != nullptr ? recorder() : nullptr;
  }

  std::atomic<int> mode_{kOff};
  mutable std::mutex mu_;
  cca::CreateContextFn recorder_ = nullptr;
  size_t capacity_ = 0;
  std::vector<Slot> ring_;  // grows up to capacity_ entries
  uint32_t next_id_ = 1;
  std::unordered_map<void*, Live> live_;
};

}  // namespace fragfree_native
