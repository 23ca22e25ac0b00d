// FragfreeApi: libfragfree's C API as the adapter (csrc/) reaches it, resolved
// with dlopen/dlsym from the library the Python side loaded (no fragfree
// header is needed to build the adapter), and CallJson for the functions that
// return JSON. Thread-safety: filled once by Load before use, then read-only.
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "json_reader.h"

namespace fragfree_native {

struct FragfreeApi {
  using MallocFn = void* (*)(size_t, int, void*);
  using FreeFn = int (*)(void*, int);
  using RecordStreamFn = int (*)(void*, int, void*);
  using DeviceFn = int (*)(int);
  using FractionFn = int (*)(double, int);
  using JsonFn = size_t (*)(int, char*, size_t);
  using SizeFn = size_t (*)(const void*, int);
  using LastErrorFn = const char* (*)();
  using RecordHistoryFn = int (*)(int, int, size_t);
  using SetTraceContextFn = uint32_t (*)(uint32_t);
  // The C++-ABI graph-pool hooks (exact std::function / std::pair types).
  using BeginPoolFn = void (*)(int, PoolPair,
                               std::function<bool(cudaStream_t)>);
  using EndPoolFn = void (*)(int, PoolPair);
  // Sharing between processes (fragfree.h, "Sharing memory between
  // processes"); the structs are ff_ipc_export_info_t / ff_ipc_mapping_t.
  struct IpcExportInfo {
    uint64_t export_id;
    void* block;
    size_t block_size;
    size_t page_offset;
    size_t handle_size;
  };
  struct IpcMapping {
    void* ptr;
    size_t size;
    void* base;
    size_t mapped;
  };
  using IpcExportFn = int (*)(const void*, unsigned, void*, size_t,
                              IpcExportInfo*);
  using IpcOpenFn = int (*)(const void*, size_t, int, IpcMapping*);
  using IpcCloseFn = int (*)(void*);

  void* handle = nullptr;
  std::string path;
  MallocFn malloc = nullptr;
  FreeFn free = nullptr;
  RecordStreamFn record_stream = nullptr;
  DeviceFn empty_cache = nullptr;
  FractionFn set_memory_fraction = nullptr;
  JsonFn stats_json = nullptr;
  DeviceFn reset_peak_stats = nullptr;
  DeviceFn reset_accumulated_stats = nullptr;
  SizeFn allocation_size = nullptr;
  LastErrorFn last_error = nullptr;
  // Optional.
  JsonFn snapshot_json = nullptr;
  RecordHistoryFn record_history = nullptr;
  SetTraceContextFn set_trace_context = nullptr;
  BeginPoolFn begin_pool = nullptr;
  EndPoolFn end_pool = nullptr;
  EndPoolFn release_pool = nullptr;
  IpcExportFn ipc_export = nullptr;  // all three or none (csrc/ipc.h)
  IpcOpenFn ipc_open = nullptr;
  IpcCloseFn ipc_close = nullptr;

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
    need(stats_json, "ff_stats_json");
    need(reset_peak_stats, "ff_reset_peak_stats");
    need(reset_accumulated_stats, "ff_reset_accumulated_stats");
    need(allocation_size, "ff_allocation_size");
    need(last_error, "ff_last_error");
    TORCH_CHECK(missing.empty(), "fragfree: ", lib_path,
                " lacks C API symbols: ", c10::Join(", ", missing));
    snapshot_json = Find<JsonFn>({"ff_snapshot_json"});
    record_history = Find<RecordHistoryFn>({"ff_record_history"});
    set_trace_context = Find<SetTraceContextFn>({"ff_set_trace_context"});
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
    ipc_export = Find<IpcExportFn>({"ff_ipc_export"});
    ipc_open = Find<IpcOpenFn>({"ff_ipc_open"});
    ipc_close = Find<IpcCloseFn>({"ff_ipc_close"});
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
    SetTraceContextFn fn_;
    uint32_t previous_ = 0;
  };

  std::string LastError() const {
    const char* msg = last_error ? last_error() : nullptr;
    return msg ? std::string(msg) : std::string();
  }

  // Calls a JSON-producing function; false (and *err) on failure.
  bool CallJson(JsonFn fn, int device, Json* out, std::string* err) const {
    size_t n = fn(device, nullptr, 0);
    for (int attempt = 0; attempt < 4; ++attempt) {
      if (n == 0) {
        *err = LastError();
        return false;
      }
      std::string buf(n + 1, '\0');
      size_t m = fn(device, buf.data(), buf.size());
      if (m == 0) {
        *err = LastError();
        return false;
      }
      if (m <= n) {
        buf.resize(m);
        JsonReader reader(buf);
        if (!reader.Parse(out)) {
          *err = "malformed JSON from libfragfree";
          return false;
        }
        return true;
      }
      n = m;
    }
    *err = "JSON kept growing";
    return false;
  }
};

}  // namespace fragfree_native
