// FragfreeApi: libfragfree's C API as the adapter (csrc/) reaches it. The
// functions are declared once, by the public header <fragfree/fragfree.h>
// (shim/include/fragfree/fragfree.h; the package ships a copy under
// fragfree/include, and fragfree/_native.py puts it on the include path), and
// each pointer's type here is decltype of that declaration, so a signature
// change there is a compile error here. The pointers are resolved with
// dlopen/dlsym from the library the Python side loaded (the same process-wide
// state as its ctypes calls); the adapter does not link libfragfree.
// The graph-pool hooks have C++ types and are not in the C header: their types
// are the ones shim/graph_pools.cc exports (PyTorch's CUDAPluggableAllocator
// hook types).
// Thread-safety: filled once by Load before use, then read-only.
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fragfree/fragfree.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"

namespace fragfree_native {

// The index of the whole device in ff_stats_t's per-pool arrays ([0] all,
// [1] small_pool, [2] large_pool: fragfree.h), as in PyTorch's StatType.
constexpr int kStatsAll = 0;

struct FragfreeApi {
  // The C++-ABI graph-pool hooks (exact std::function / std::pair types).
  using BeginPoolFn = void (*)(int, PoolPair,
                               std::function<bool(cudaStream_t)>);
  using EndPoolFn = void (*)(int, PoolPair);

  void* handle = nullptr;
  std::string path;
  decltype(&ff_malloc) malloc = nullptr;
  decltype(&ff_free) free = nullptr;
  decltype(&ff_record_stream) record_stream = nullptr;
  decltype(&ff_empty_cache) empty_cache = nullptr;
  decltype(&ff_set_memory_fraction) set_memory_fraction = nullptr;
  decltype(&ff_get_stats) get_stats = nullptr;
  decltype(&ff_reset_peak_stats) reset_peak_stats = nullptr;
  decltype(&ff_reset_accumulated_stats) reset_accumulated_stats = nullptr;
  decltype(&ff_allocation_size) allocation_size = nullptr;
  decltype(&ff_last_error) last_error = nullptr;
  // Optional.
  decltype(&ff_get_allocator_stats) get_allocator_stats = nullptr;
  decltype(&ff_snapshot_json) snapshot_json = nullptr;
  decltype(&ff_record_history) record_history = nullptr;
  decltype(&ff_set_trace_context) set_trace_context = nullptr;
  BeginPoolFn begin_pool = nullptr;
  EndPoolFn end_pool = nullptr;
  EndPoolFn release_pool = nullptr;
  decltype(&ff_ipc_export) ipc_export = nullptr;  // all three or none (ipc.h)
  decltype(&ff_ipc_open) ipc_open = nullptr;
  decltype(&ff_ipc_close) ipc_close = nullptr;

  template <typename Fn>
  Fn Find(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      if (void* sym = dlsym(handle, name)) return reinterpret_cast<Fn>(sym);
    }
    return nullptr;
  }

  void Load(const std::string& lib_path) {
    path = lib_path;
    handle = dlopen(lib_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    TORCH_CHECK(handle != nullptr, "fragfree: could not dlopen ", lib_path,
                ": ", dlerror());
    std::vector<std::string> missing;
    auto need = [&](auto& fn, const char* name) {
      using Fn = std::remove_reference_t<decltype(fn)>;
      fn = Find<Fn>({name});
      if (fn == nullptr) missing.emplace_back(name);
    };
    need(malloc, "ff_malloc");
    need(free, "ff_free");
    need(record_stream, "ff_record_stream");
    need(empty_cache, "ff_empty_cache");
    need(set_memory_fraction, "ff_set_memory_fraction");
    need(get_stats, "ff_get_stats");
    need(reset_peak_stats, "ff_reset_peak_stats");
    need(reset_accumulated_stats, "ff_reset_accumulated_stats");
    need(allocation_size, "ff_allocation_size");
    need(last_error, "ff_last_error");
    TORCH_CHECK(missing.empty(), "fragfree: ", lib_path,
                " lacks C API symbols: ", c10::Join(", ", missing));
    auto find = [&](auto& fn, const char* name) {
      fn = Find<std::remove_reference_t<decltype(fn)>>({name});
    };
    find(get_allocator_stats, "ff_get_allocator_stats");
    find(snapshot_json, "ff_snapshot_json");
    find(record_history, "ff_record_history");
    find(set_trace_context, "ff_set_trace_context");
    begin_pool = Find<BeginPoolFn>({
        "fragfree_begin_allocate_to_pool",
        "_Z31fragfree_begin_allocate_to_"
        "pooliSt4pairIyyESt8functionIFbP11CUstream_stEE",
        "_Z31fragfree_begin_allocate_to_pooliSt4pairIyyESt8functionIFbPvEE",
    });
    end_pool = Find<EndPoolFn>({
        "fragfree_end_allocate_to_pool",
        "_Z29fragfree_end_allocate_to_pooliSt4pairIyyE",
    });
    release_pool = Find<EndPoolFn>({
        "fragfree_release_pool",
        "_Z21fragfree_release_pooliSt4pairIyyE",
    });
    find(ipc_export, "ff_ipc_export");
    find(ipc_open, "ff_ipc_open");
    find(ipc_close, "ff_ipc_close");
    if (!(ipc_export && ipc_open && ipc_close)) {
      ipc_export = nullptr;
      ipc_open = nullptr;
      ipc_close = nullptr;
    }
    if (!(begin_pool && end_pool && release_pool)) {
      begin_pool = nullptr;  // all three or none
      end_pool = nullptr;
      release_pool = nullptr;
    }
  }

  // Tags the trace entries of the calling thread's library calls with
  // `context` for the scope (nothing when 0 or the library cannot).
  class TraceContextScope {
   public:
    TraceContextScope(const FragfreeApi& api, uint32_t context)
        : fn_(context != 0 ? api.set_trace_context : nullptr) {
      if (fn_ != nullptr) previous_ = fn_(context);
    }
    ~TraceContextScope() {
      if (fn_ != nullptr) fn_(previous_);
    }
    TraceContextScope(const TraceContextScope&) = delete;
    TraceContextScope& operator=(const TraceContextScope&) = delete;

   private:
    decltype(&ff_set_trace_context) fn_;
    uint32_t previous_ = 0;
  };

  std::string LastError() const {
    const char* msg = last_error ? last_error() : nullptr;
    return msg ? std::string(msg) : std::string();
  }

  // Whether GetStats also reads the device's free and total memory (a driver
  // call; ff_get_allocator_stats in fragfree.h).
  enum class DeviceMemory { kRead, kSkip };

  // The statistics of `device` (ff_get_stats: the struct of fragfree.h, whose
  // fields come from the stat field lists); false (and *err) on failure. With
  // kSkip, device_free_bytes and device_total_bytes are 0 where the library
  // has ff_get_allocator_stats.
  bool GetStats(int device, ff_stats_t* out, std::string* err,
                DeviceMemory device_memory = DeviceMemory::kRead) const {
    *out = ff_stats_t{};
    out->size = sizeof(ff_stats_t);
    auto fn = device_memory == DeviceMemory::kSkip && get_allocator_stats
                  ? get_allocator_stats
                  : get_stats;
    if (fn(device, out) != FF_OK) {
      *err = LastError();
      return false;
    }
    return true;
  }
};

}  // namespace fragfree_native
