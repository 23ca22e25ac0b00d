// fragfree native-API mode: an implementation of PyTorch's C++
// c10::cuda::CUDACachingAllocator::CUDAAllocator over libfragfree's C API.
//
// Owns: the CUDAAllocator subclass installed as PyTorch's current CUDA
// allocator by fragfree.enable(mode="native"), its bookkeeping of graph/MemPool
// pools, OOM observers, and the pybind11 module (install / installed /
// features) that the Python package builds with torch.utils.cpp_extension.load
// on first use.
//
// Why: with CUDAPluggableAllocator, C++ callers (cuDNN benchmark's cacheInfo,
// cudagraph trees' checkPoolLiveAllocations / checkpoint state, OOM observers,
// torch.cuda.OutOfMemoryError) hit "does not yet support" errors. Here every
// CUDAAllocator entry point is implemented; where fragfree has no equivalent we
// do what PyTorch's cudaMallocAsync backend
// (c10/cuda/CUDAMallocAsyncAllocator.cpp) does, and say so.
//
// The library is reached only through its C API, declared by the public
// header <fragfree/fragfree.h> and resolved with dlopen/dlsym from the path the
// Python side found (the same libfragfree.so ctypes loaded, so the same
// process-wide state): fragfree_api.h.
//
// Written against c10/cuda/CUDACachingAllocator.h of PyTorch 2.10/2.11 (the
// CUDAAllocator : DeviceAllocator interface with getMemoryFraction, snapshot(
// MempoolId_t), beginAllocateToPool(filter), recordHistory(..., clearHistory,
// skip_actions)) and checked against the newest main header
// (snapshot(MempoolId_t, bool include_traces), attachOomRejectionObserver).
// Both spellings of the members that differ are provided below (see "Version
// differences"). Compiled and run with PyTorch 2.11.0+cu130 (g++ 13.3, H200):
// see docs/python.md.
//
// Thread-safety: allocate/raw_delete are lock-free unless graph pools are
// active; pool bookkeeping, observers and history flags are guarded by mutexes.

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <torch/extension.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common.h"
#include "fragfree_api.h"
#include "ipc.h"
#include "messages.h"
#include "oom_error.h"
#include "oom_rejection.h"
#include "pools.h"
#include "snapshot_builder.h"
#include "stack_history.h"

namespace fragfree_native {

void RawDelete(void* ptr);

// ----------------------------------------------------------------------------

class FragfreeAllocator final : public OomRejectionMixin<cca::CUDAAllocator> {
 public:
  explicit FragfreeAllocator(const std::string& lib_path) {
    api_.Load(lib_path);
    fractions_.fill(1.0);
  }

  const FragfreeApi& api() const { return api_; }
  bool lib_has_pool_hooks() const { return api_.begin_pool != nullptr; }

  // --- allocation -----------------------------------------------------------

  DataPtr allocate(size_t size) override {
    constexpr size_t one_exa_bytes = 1152921504606846976ULL;
    TORCH_CHECK_WITH(
        OutOfMemoryError, size < one_exa_bytes,
        "CUDA out of memory. Tried to allocate more than 1EB memory.");
    DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    void* ptr = nullptr;
    if (size != 0) {
      ptr = Malloc(size, device,
                   c10::cuda::getCurrentCUDAStream(device).stream());
    }
    return {ptr, ptr, &RawDelete, c10::Device(c10::DeviceType::CUDA, device)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &RawDelete; }

  void* raw_alloc(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return Malloc(nbytes, device,
                  c10::cuda::getCurrentCUDAStream(device).stream());
  }

  void* raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    if (nbytes == 0) return nullptr;
    DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return Malloc(nbytes, device, stream);
  }

  void raw_delete(void* ptr) override { Free(ptr); }

  void copy_data(void* dest, const void* src,
                 std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  // --- lifecycle ------------------------------------------------------------

  void init(int device_count) override {
    device_count_ = std::min(device_count, kMaxDevices);
    initialized_.store(true);
  }
  bool initialized() override { return initialized_.load(); }

  void enable(bool /*value*/) override {
  }  // cannot disable (as cudaMallocAsync)
  bool isEnabled() const override { return true; }
  std::string name() override { return "fragfree"; }

  // --- configuration --------------------------------------------------------

  double getMemoryFraction(DeviceIndex device) override {
    AssertValidDevice(device);
    return fractions_[device];
  }

  void setMemoryFraction(double fraction, DeviceIndex device) override {
    TORCH_CHECK(0 <= fraction && fraction <= 1,
                "invalid fraction:", Dbl(fraction),
                ". Please set within [0, 1].");
    AssertValidDevice(device);
    Check(api_.set_memory_fraction(fraction, device), "ff_set_memory_fraction");
    fractions_[device] = fraction;
  }

  void emptyCache(MempoolId mempool_id) override {
    FlushDeferredCaptureFrees();
    std::vector<void*> to_free;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      for (auto& kv : pools_) CollectReleasable(kv.second, &to_free);
    }
    for (void* p : to_free) LibFree(p);
    if (mempool_id != MempoolId{0, 0}) {
      std::lock_guard<std::mutex> lock(pool_mu_);
      for (auto it = pools_.begin(); it != pools_.end();) {
        if (it->first.id == mempool_id && it->second.use_count <= 0 &&
            it->second.live.empty() && it->second.deferred.empty()) {
          it = pools_.erase(it);
        } else {
          ++it;
        }
      }
    }
    Check(api_.empty_cache(FF_DEVICE_ALL), "ff_empty_cache");
  }

  // cuDNN's benchmark mode asks for the largest workspace it can allocate.
  // Native answers max(device free, largest cached block); fragfree can remap
  // every cached free page, so: device free + cached free, capped by the limit.
  void cacheInfo(DeviceIndex device, size_t* largestBlock) override {
    AssertValidDevice(device);
    size_t device_free = 0, device_total = 0;
    {
      c10::cuda::CUDAGuard guard(device);
      C10_CUDA_CHECK(cudaMemGetInfo(&device_free, &device_total));
    }
    size_t available = device_free;
    ff_stats_t stats;
    std::string err;
    if (used_[device].load() &&
        api_.GetStats(device, &stats, &err, FragfreeApi::DeviceMemory::kSkip)) {
      const int64_t cached = std::max<int64_t>(0, stats.cached_free_bytes);
      const int64_t reserved = stats.reserved_bytes[kStatsAll].current;
      const int64_t limit = stats.memory_limit_bytes;
      available = device_free + static_cast<size_t>(cached);
      if (limit > 0) {
        const int64_t headroom =
            std::max<int64_t>(0, limit - reserved) + cached;
        available = std::min(available, static_cast<size_t>(headroom));
      }
    }
    if (fractions_[device] < 1.0) {
      available = std::min(
          available, static_cast<size_t>(fractions_[device] * device_total));
    }
    *largestBlock = std::max(*largestBlock, available);
  }

  void* getBaseAllocation(void* ptr, size_t* size) override {
    // fragfree allocations are not carved out of larger PyTorch-visible
    // segments: each pointer is its own base.
    if (size != nullptr) {
      DeviceIndex device = 0;
      C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
      *size = api_.allocation_size(ptr, device);
    }
    return ptr;
  }

  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(
      DeviceIndex /*device*/) override {
    TORCH_CHECK(false,
                "fragfree does not yet support getExpandableSegmentSizes "
                "(it has no per-stream expandable segments).");
  }

  void recordStream(const DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    void* p = ptr.get();
    if (p == nullptr) return;  // empty tensors have no block
    const DeviceIndex device =
        ptr.device().has_index() ? ptr.device().index() : stream.device_index();
    Check(api_.record_stream(p, device, stream.stream()), "ff_record_stream");
  }

  // --- statistics -----------------------------------------------------------

  cca::DeviceStats getDeviceStats(DeviceIndex device) override {
    AssertValidDevice(device);
    cca::DeviceStats stats;
    if (!used_[device].load())
      return stats;  // no allocator (and no context) yet
    ff_stats_t from;
    std::string err;
    // No driver call: PyTorch's getDeviceStats makes none (memory_allocated(),
    // memory_reserved() and memory_stats() all come here).
    TORCH_CHECK(
        api_.GetStats(device, &from, &err, FragfreeApi::DeviceMemory::kSkip),
        "fragfree: reading the stats of device ", Num(device),
        " failed: ", err);
    auto copy = [](const ff_stat_t& in, auto& out) {
      out.current = in.current;
      out.peak = in.peak;
      out.allocated = in.allocated;
      out.freed = in.freed;
    };
    // Every per-pool array of the field list (allocator/obs/stat_fields.h) is
    // one of PyTorch's; ff_stat_t [0..2] and PyTorch's StatType are both
    // all, small_pool, large_pool.
#define FF_COPY_ARRAY(name) \
  for (int p = 0; p < 3; ++p) copy(from.name[p], stats.name[p]);
    FF_STAT_ARRAY_FIELDS(FF_COPY_ARRAY)
#undef FF_COPY_ARRAY
    // PyTorch's single stats and counters (fragfree's own, which PyTorch's
    // DeviceStats lacks, reach Python through memory_stats()'s JSON path).
    copy(from.oversize_allocations, stats.oversize_allocations);
    copy(from.oversize_segments, stats.oversize_segments);
    stats.num_alloc_retries = from.num_alloc_retries;
    stats.num_ooms = from.num_ooms;
    stats.num_sync_all_streams = from.num_sync_all_streams;
    stats.num_device_alloc = from.num_device_alloc;
    stats.num_device_free = from.num_device_free;
    stats.max_split_size = from.max_split_size;
    return stats;
  }

  void resetAccumulatedStats(DeviceIndex device) override {
    AssertValidDevice(device);
    if (used_[device].load()) {
      Check(api_.reset_accumulated_stats(device), "ff_reset_accumulated_stats");
    }
  }

  void resetPeakStats(DeviceIndex device) override {
    AssertValidDevice(device);
    if (used_[device].load())
      Check(api_.reset_peak_stats(device), "ff_reset_peak_stats");
  }

  // --- snapshots and history ------------------------------------------------

  // PyTorch 2.10/2.11 spelling.
  virtual cca::SnapshotInfo snapshot(MempoolId mempool_id) {
    return BuildSnapshot(api_, device_count_, used_, stacks_, mempool_id,
                         /*include_traces=*/true);
  }
  // Newer spelling (include_traces). Whichever the base declares is overridden.
  virtual cca::SnapshotInfo snapshot(MempoolId mempool_id,
                                     bool include_traces) {
    return BuildSnapshot(api_, device_count_, used_, stacks_, mempool_id,
                         include_traces);
  }

  bool isHistoryEnabled() override { return history_enabled_.load(); }

  void recordHistory(
      bool enabled, cca::CreateContextFn context_recorder,
      size_t alloc_trace_max_entries, cca::RecordContext when,
      bool clearHistory,
      const std::vector<std::string>& /*skip_actions*/) override {
    // The trace itself is libfragfree's ring buffer (ff_record_history; without
    // it, whatever FRAGFREE_CONF's trace_entries configured). The stacks
    // PyTorch's recorder gathers are kept here (StackHistory) and tied to the
    // library's entries through ff_set_trace_context.
    if (api_.record_history != nullptr) {
      // ff_record_history(device, 0, 0) stops recording and drops the ring.
      if (clearHistory) api_.record_history(FF_DEVICE_ALL, 0, 0);
      Check(api_.record_history(FF_DEVICE_ALL, enabled ? 1 : 0,
                                alloc_trace_max_entries),
            "ff_record_history");
    } else if (enabled) {
      TORCH_WARN_ONCE(
          "fragfree: this libfragfree cannot switch its allocation trace on at "
          "run "
          "time (no ff_record_history); snapshots contain the trace configured "
          "with "
          "FRAGFREE_CONF=trace_entries:N (or "
          "fragfree.enable(trace_entries=N)).");
    }
    if (context_recorder != nullptr && api_.set_trace_context == nullptr &&
        enabled && when != cca::RecordContext::NEVER) {
      TORCH_WARN_ONCE(
          "fragfree: this libfragfree has no ff_set_trace_context; the trace "
          "entries of snapshots carry no stacks (live blocks still do).");
    }
    stacks_.Configure(enabled, context_recorder, alloc_trace_max_entries, when,
                      clearHistory);
    history_enabled_.store(enabled);
  }

  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> lock(observer_mu_);
    oom_observers_.push_back(std::move(observer));
  }

  void attachAllocatorTraceTracker(
      cca::AllocatorTraceTracker tracker) override {
    // Kept alive but never called: libfragfree does not expose its segment
    // map/unmap events to C++ callers (NCCL's register hook only listens to
    // those).
    std::lock_guard<std::mutex> lock(observer_mu_);
    trace_trackers_.push_back(std::move(tracker));
  }

  // --- graph pools -----------------------------------------------------------

  void beginAllocateToPool(DeviceIndex device, MempoolId mempool_id,
                           std::function<bool(cudaStream_t)> filter) override {
    AssertValidDevice(device);
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      auto& list = captures_[device];
      for (const auto& entry : list) {
        TORCH_CHECK(entry.first != mempool_id,
                    "beginAllocateToPool: already recording to mempool_id");
      }
      PoolInfo& pool = pools_[PoolKey{device, mempool_id}];
      pool.use_count += 1;
      if (lib_has_pool_hooks()) pool.lib_refs += 1;
      list.emplace_back(mempool_id, filter);
      active_filters_.fetch_add(1);
    }
    if (lib_has_pool_hooks()) {
      api_.begin_pool(device, PoolPair(mempool_id.first, mempool_id.second),
                      std::move(filter));
    }
  }

  void endAllocateToPool(DeviceIndex device, MempoolId mempool_id) override {
    AssertValidDevice(device);
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      auto& list = captures_[device];
      auto it = std::find_if(list.begin(), list.end(), [&](const auto& e) {
        return e.first == mempool_id;
      });
      TORCH_CHECK(it != list.end(),
                  "endAllocatePool: not currently recording to mempool_id");
      list.erase(it);
      active_filters_.fetch_sub(1);
    }
    if (lib_has_pool_hooks()) {
      api_.end_pool(device, PoolPair(mempool_id.first, mempool_id.second));
    }
    FlushDeferredCaptureFrees();
  }

  void releasePool(DeviceIndex device, MempoolId mempool_id) override {
    AssertValidDevice(device);
    std::vector<void*> to_free;
    bool forward = false;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      auto it = pools_.find(PoolKey{device, mempool_id});
      if (it == pools_.end()) return;
      PoolInfo& pool = it->second;
      pool.use_count -= 1;
      TORCH_INTERNAL_ASSERT(pool.use_count >= 0,
                            "fragfree: pool use count below zero");
      if (pool.lib_refs > 0) {
        pool.lib_refs -= 1;
        forward = true;
      }
      if (pool.use_count == 0) {
        for (auto& kv : pool.deferred) to_free.push_back(kv.first);
        pool.deferred.clear();
        if (pool.live.empty()) pools_.erase(it);
      }
    }
    if (forward)
      api_.release_pool(device, PoolPair(mempool_id.first, mempool_id.second));
    for (void* p : to_free) LibFree(p);
  }

  int getPoolUseCount(DeviceIndex device, MempoolId mempool_id) override {
    std::lock_guard<std::mutex> lock(pool_mu_);
    auto it = pools_.find(PoolKey{device, mempool_id});
    return it == pools_.end() ? 0 : it->second.use_count;
  }

  void createOrIncrefPool(
      DeviceIndex device, MempoolId mempool_id,
      std::shared_ptr<cca::CUDAAllocator> allocator) override {
    TORCH_CHECK(
        allocator == nullptr,
        "fragfree: torch.cuda.MemPool(allocator=...) is not supported while "
        "fragfree is PyTorch's CUDA allocator; create MemPool() without an "
        "allocator (its memory then comes from fragfree).");
    std::lock_guard<std::mutex> lock(pool_mu_);
    pools_[PoolKey{device, mempool_id}].use_count += 1;
  }

  void setUseOnOOM(DeviceIndex /*device*/, MempoolId /*mempool_id*/,
                   bool /*use_on_oom*/) override {
    // fragfree already uses every free page of every pool before declaring
    // OOM-free memory scarce; nothing to configure.
  }

  void setNoSplit(DeviceIndex /*device*/, MempoolId /*mempool_id*/) override {
    // Accepted and ignored: fragfree does not hand out sub-blocks of another
    // allocation, so an allocation never shares its pages' identity with a
    // split neighbour in the way native no_split pools guard against.
  }

  bool checkPoolLiveAllocations(
      DeviceIndex device, MempoolId mempool_id,
      const std::unordered_set<void*>& expected) override {
    std::lock_guard<std::mutex> lock(pool_mu_);
    auto it = pools_.find(PoolKey{device, mempool_id});
    if (it == pools_.end()) return expected.empty();
    const auto& live = it->second.live;
    if (live.size() != expected.size()) return false;
    for (const auto& kv : live) {
      if (!expected.count(kv.first)) return false;
    }
    return true;
  }

  std::shared_ptr<cca::AllocatorState> getCheckpointState(
      DeviceIndex device, MempoolId id) override {
    auto state = std::make_shared<FragfreePoolState>();
    state->device = device;
    state->id = id;
    std::vector<void*> to_free;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      auto it = pools_.find(PoolKey{device, id});
      if (it != pools_.end()) {
        PoolInfo& pool = it->second;
        state->live.assign(pool.live.begin(), pool.live.end());
        for (const auto& kv : state->live) state->ptrs.insert(kv.first);
        pool.checkpoints.push_back(state);
        CollectReleasable(pool,
                          &to_free);  // held for checkpoints since dropped
      }
    }
    for (void* p : to_free) LibFree(p);
    return state;
  }

  // Restores a pool to a checkpoint (cudagraph trees switching paths). Native
  // frees every live block of the pool and re-creates the checkpoint's blocks
  // at their addresses. fragfree keeps allocations that are live in both, frees
  // those live only now, and revives those live only in the checkpoint from the
  // pool's held blocks: a block a live checkpoint refers to is never returned
  // to libfragfree when PyTorch frees it (MustHold), so it is still at its
  // address.
  cca::CheckpointDelta setCheckpointPoolState(
      DeviceIndex device, std::shared_ptr<cca::AllocatorState> pps) override {
    auto state = std::dynamic_pointer_cast<FragfreePoolState>(pps);
    TORCH_CHECK(
        state != nullptr,
        "fragfree: setCheckpointPoolState got a state it did not create");
    TORCH_CHECK(state->device == device,
                "fragfree: checkpoint state belongs to device ",
                Num(state->device));
    cca::CheckpointDelta delta;
    std::vector<void*> to_free;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      PoolInfo& pool = pools_[PoolKey{device, state->id}];
      std::unordered_map<void*, AllocInfo> wanted(state->live.begin(),
                                                  state->live.end());
      // Revivals first, so that a failure leaves the pool untouched.
      for (const auto& kv : wanted) {
        if (pool.live.count(kv.first)) continue;
        TORCH_CHECK(
            pool.deferred.count(kv.first),
            "fragfree: cannot restore this CUDA graph pool checkpoint: block ",
            Ptr(kv.first),
            " was returned to libfragfree since the checkpoint "
            "was taken (was the pool released?), so it cannot be revived at "
            "its "
            "address. As a workaround set "
            "torch._inductor.config.triton.cudagraph_trees = False.");
      }
      for (auto it = pool.live.begin(); it != pool.live.end();) {
        delta.ptrs_freed.push_back(it->first);
        if (wanted.count(it->first)) {
          ++it;
          continue;
        }
        AllocInfo info = it->second;
        void* p = it->first;
        ptr_pool_.erase(p);
        it = pool.live.erase(it);
        if (MustHold(pool, p)) {
          pool.deferred.emplace(p, info);
        } else {
          to_free.push_back(p);
        }
      }
      for (const auto& kv : wanted) {
        if (!pool.live.count(kv.first)) {
          pool.deferred.erase(kv.first);
          pool.live.emplace(kv.first, kv.second);
          ptr_pool_[kv.first] = PoolKey{device, state->id};
        }
        delta.dataptrs_allocd.emplace_back(
            kv.first, kv.first, &RawDelete,
            c10::Device(c10::DeviceType::CUDA, device));
      }
      CollectReleasable(pool, &to_free);
      pool_ptrs_.store(ptr_pool_.size());
    }
    for (void* p : to_free) LibFree(p);
    return delta;
  }

  // --- IPC, peers, copies ---------------------------------------------------

  // csrc/ipc.h; docs/ipc.md.
  cca::ShareableHandle shareIpcHandle(void* ptr) override {
    return ipc_.Share(ptr);
  }

  std::shared_ptr<void> getIpcDevPtr(std::string handle) override {
    return ipc_.Open(std::move(handle));
  }

  void enablePeerAccess(DeviceIndex dev, DeviceIndex dev_to_access) override {
    // As CUDAPluggableAllocator: enables context peer access. Mapping
    // fragfree's pages for the peer (cuMemSetAccess) is libfragfree's job.
    c10::cuda::CUDAGuard guard(dev);
    cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
    } else {
      C10_CUDA_CHECK(err);
    }
  }

  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src,
                          int srcDevice, size_t count, cudaStream_t stream,
                          bool p2p_enabled) override {
    // VMM memory cannot be copied across devices with cudaMemcpyAsync unless
    // peer access is on (as cudaMallocAsync / expandable segments).
    if (p2p_enabled || dstDevice == srcDevice) {
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    }
    return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
  }

  // --- used by RawDelete ----------------------------------------------------

  void Free(void* ptr) {
    if (ptr == nullptr) return;
    uint32_t stack_id = 0;
    if (stacks_.on()) {
      stacks_.EraseLive(ptr);
      stack_id = stacks_.Remember(stacks_.GatherForFree());
    }
    if (deferred_count_.load(std::memory_order_relaxed) > 0 &&
        active_filters_.load() == 0) {
      FlushDeferredCaptureFrees();
    }
    if (pool_ptrs_.load(std::memory_order_acquire) > 0 ||
        active_filters_.load() > 0) {
      std::lock_guard<std::mutex> lock(pool_mu_);
      auto owner = ptr_pool_.find(ptr);
      if (owner != ptr_pool_.end()) {
        auto pit = pools_.find(owner->second);
        ptr_pool_.erase(owner);
        pool_ptrs_.store(ptr_pool_.size());
        if (pit != pools_.end()) {
          PoolInfo& pool = pit->second;
          auto live = pool.live.find(ptr);
          AllocInfo info = live != pool.live.end() ? live->second : AllocInfo{};
          if (live != pool.live.end()) pool.live.erase(live);
          if (MustHold(pool, ptr)) {
            pool.deferred.emplace(ptr, info);
            return;
          }
          if (pool.use_count <= 0 && pool.live.empty() &&
              pool.deferred.empty()) {
            pools_.erase(pit);
          }
        }
        // Fall through: free now (outside the lock below).
      } else if (!lib_has_pool_hooks() && active_filters_.load() > 0 &&
                 CurrentStreamCapturing()) {
        // An allocation from outside the capture freed while a capture is under
        // way: defer it to the end of capture (as cudaMallocAsync does), so the
        // library records no event on a capturing stream.
        deferred_capture_frees_.push_back(ptr);
        deferred_count_.store(deferred_capture_frees_.size());
        return;
      }
    }
    FragfreeApi::TraceContextScope tag(api_, stack_id);
    LibFree(ptr);
  }

 private:
  // Whether a freed block `p` of `pool` must stay allocated in libfragfree:
  // without the library's pool hooks the graph may still replay into it (until
  // the pool is released); and a live checkpoint (cudagraph trees) may revive
  // it at its address. Caller holds pool_mu_.
  bool MustHold(PoolInfo& pool, void* p) {
    if (!lib_has_pool_hooks() && pool.use_count > 0) return true;
    bool referenced = false;
    auto& cps = pool.checkpoints;
    for (auto it = cps.begin(); it != cps.end();) {
      if (auto state = it->lock()) {
        referenced = referenced || state->ptrs.count(p) > 0;
        ++it;
      } else {
        it = cps.erase(it);  // checkpoint dropped by PyTorch
      }
    }
    return referenced;
  }

  // Moves held blocks that no longer need holding to *out (freed by the caller
  // outside the lock). Caller holds pool_mu_.
  void CollectReleasable(PoolInfo& pool, std::vector<void*>* out) {
    for (auto it = pool.deferred.begin(); it != pool.deferred.end();) {
      if (MustHold(pool, it->first)) {
        ++it;
      } else {
        out->push_back(it->first);
        it = pool.deferred.erase(it);
      }
    }
  }

  void AssertValidDevice(DeviceIndex device) const {
    TORCH_CHECK(0 <= device && device < std::max(device_count_, 1) &&
                    device < kMaxDevices,
                "fragfree: invalid device index ", Num(device));
  }

  void Check(int status, const char* what) const {
    TORCH_CHECK(status == 0, "fragfree: ", what, " failed: ", api_.LastError());
  }

  void LibFree(void* ptr) {
    if (api_.free(ptr, FF_DEVICE_OWNER) != FF_OK) {
      // Never throw from a deleter (it runs in destructors).
      TORCH_WARN("fragfree: ff_free(", Ptr(ptr),
                 ") failed: ", api_.LastError());
    }
  }

  static bool CurrentStreamCapturing() {
    DeviceIndex device = 0;
    if (c10::cuda::GetDevice(&device) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaError_t err = cudaStreamIsCapturing(
        c10::cuda::getCurrentCUDAStream(device).stream(), &status);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return status != cudaStreamCaptureStatusNone;
  }

  // Frees what Free() deferred during a capture, once the calling thread's
  // stream is no longer capturing (endAllocateToPool runs just before
  // cudaStreamEndCapture, so the next Free or emptyCache usually does it).
  void FlushDeferredCaptureFrees() {
    std::vector<void*> frees;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      if (deferred_capture_frees_.empty()) return;
      if (active_filters_.load() > 0 && CurrentStreamCapturing()) return;
      frees.swap(deferred_capture_frees_);
      deferred_count_.store(0);
    }
    for (void* p : frees) LibFree(p);
  }

  void* Malloc(size_t size, DeviceIndex device, cudaStream_t stream) {
    AssertValidDevice(device);
    used_[device].store(true, std::memory_order_relaxed);
    MempoolId pool{0, 0};
    bool in_pool = false;
    if (active_filters_.load(std::memory_order_acquire) > 0) {
      std::lock_guard<std::mutex> lock(pool_mu_);
      for (const auto& entry : captures_[device]) {
        if (entry.second(stream)) {
          pool = entry.first;
          in_pool = true;
          break;
        }
      }
    }
    StackHistory::Context stack = stacks_.GatherForAlloc();
    void* ptr = nullptr;
    {
      FragfreeApi::TraceContextScope tag(api_, stacks_.Remember(stack));
      ptr = api_.malloc(size, device, stream);
    }
    if (ptr == nullptr) ReportOutOfMemory(size, device);
    stacks_.SetLive(ptr, size, std::move(stack));
    if (in_pool) {
      std::lock_guard<std::mutex> lock(pool_mu_);
      PoolKey key{device, pool};
      pools_[key].live.emplace(ptr, AllocInfo{size, stream, device, pool});
      ptr_pool_[ptr] = key;
      pool_ptrs_.store(ptr_pool_.size(), std::memory_order_release);
    }
    return ptr;
  }

  [[noreturn]] void ReportOutOfMemory(size_t size, DeviceIndex device) {
    std::vector<cca::OutOfMemoryObserver> observers;
    {
      std::lock_guard<std::mutex> lock(observer_mu_);
      observers = oom_observers_;
    }
    ThrowOutOfMemory(api_, stacks_, observers, size, device,
                     fractions_[device]);
  }

  FragfreeApi api_;
  IpcAdapter ipc_{api_};  // after api_: it keeps a reference
  int device_count_ = 0;
  std::atomic<bool> initialized_{false};
  std::array<std::atomic<bool>, kMaxDevices> used_{};
  std::array<double, kMaxDevices> fractions_{};
  std::atomic<bool> history_enabled_{false};
  StackHistory stacks_;

  std::mutex observer_mu_;
  std::vector<cca::OutOfMemoryObserver> oom_observers_;
  std::vector<cca::AllocatorTraceTracker> trace_trackers_;

  std::mutex pool_mu_;
  std::atomic<int> active_filters_{0};
  std::atomic<size_t> pool_ptrs_{0};
  std::array<
      std::vector<std::pair<MempoolId, std::function<bool(cudaStream_t)>>>,
      kMaxDevices>
      captures_;
  std::map<PoolKey, PoolInfo> pools_;
  std::unordered_map<void*, PoolKey> ptr_pool_;
  std::vector<void*> deferred_capture_frees_;
  std::atomic<size_t> deferred_count_{0};
};

// The process's adapter: created once, never destroyed (tensors may be freed
// during interpreter shutdown, after static destructors would have run).
FragfreeAllocator* g_allocator = nullptr;
std::mutex g_install_mu;

void RawDelete(void* ptr) { g_allocator->Free(ptr); }

pybind11::dict Features() {
  pybind11::dict d;
  d["installed"] =
      g_allocator != nullptr &&
      cca::allocator.load() == static_cast<cca::CUDAAllocator*>(g_allocator);
  if (g_allocator != nullptr) {
    d["library"] = g_allocator->api().path;
    d["pool_hooks"] = g_allocator->lib_has_pool_hooks();
    d["snapshot"] = g_allocator->api().snapshot_json != nullptr;
    d["record_history"] = g_allocator->api().record_history != nullptr;
    d["trace_stacks"] = g_allocator->api().set_trace_context != nullptr;
  }
  d["oom_rejection_observer"] = HasOomRejection<cca::CUDAAllocator>::value;
  return d;
}

pybind11::dict Install(const std::string& lib_path) {
  std::lock_guard<std::mutex> lock(g_install_mu);
  cca::CUDAAllocator* current = cca::allocator.load();
  if (g_allocator != nullptr && current == g_allocator) return Features();
  TORCH_CHECK(g_allocator == nullptr,
              "fragfree: the native adapter was installed and later replaced; "
              "it cannot "
              "be installed twice in one process");
  TORCH_CHECK(
      current == nullptr || !current->initialized(),
      "fragfree: PyTorch's CUDA allocator (",
      current ? current->name() : "none",
      ") is already initialised, so it cannot be replaced. Call "
      "fragfree.enable(mode=\"native\") before any CUDA work (before the first "
      "CUDA tensor, torch.cuda.init() or torch.cuda.MemPool()).");
  g_allocator = new FragfreeAllocator(lib_path);
  cca::allocator.store(g_allocator);
  // Also serve c10::GetAllocator(kCUDA) / getDeviceAllocator(kCUDA)
  // (torch.accelerator memory APIs), which the native backend registered at
  // priority 0.
  c10::SetAllocator(c10::DeviceType::CUDA, g_allocator, /*priority=*/0);
  return Features();
}

}  // namespace fragfree_native

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() =
      "fragfree's native-API adapter: PyTorch's CUDAAllocator over libfragfree";
  m.def("install", &fragfree_native::Install, pybind11::arg("lib_path"),
        "Make fragfree PyTorch's CUDA allocator (before CUDA is initialised).");
  m.def("features", &fragfree_native::Features,
        "What the installed adapter and library support.");
}
