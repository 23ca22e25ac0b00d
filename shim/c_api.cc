// The extern "C" bodies of fragfree.h: argument checks, the Status ->
// ff_status_t firewall (no exception or Status crosses the C ABI), and dispatch
// to the process Runtime's device allocators. Thread-safety: every function is
// thread-safe (the Runtime and allocators lock).
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "allocator/base/json.h"
#include "allocator/ipc/ipc_handle.h"
#include "allocator/obs/bucket_advisor.h"
#include "allocator/obs/snapshot.h"
#include "allocator/obs/stats.h"
#include "allocator/obs/trace_context.h"
#include "allocator/sleep/region_tags.h"
#include "fragfree/fragfree.h"
#include "shim/call_entry.h"
#include "shim/device_bucket_advice.h"
#include "shim/host_api.h"
#include "shim/oom.h"
#include "shim/runtime.h"

using fragfree::DeviceAllocator;
using fragfree::Runtime;

namespace {

// Runs fn(allocator) for `device`, or for every existing device when device
// is FF_DEVICE_ALL (any negative value).
template <typename Fn>
ff_status_t ForDevices(int device, Fn&& fn) {
  Runtime& rt = Runtime::Get();
  if (device >= 0) {
    absl::StatusOr<DeviceAllocator*> d = rt.Device(device);
    if (!d.ok()) return rt.Report(d.status());
    return rt.Report(fn(**d));
  }
  for (int i = 0; i < fragfree::kMaxDevices; ++i) {
    if (DeviceAllocator* d = rt.Existing(i)) {
      if (ff_status_t s = rt.Report(fn(*d)); s != FF_OK) return s;
    }
  }
  return FF_OK;
}

// What OwnerOf looks for.
enum class Owned {
  // ptr is a live allocation, as handed out (ff_free, ff_record_stream,
  // ff_allocation_size).
  kAllocation,
  // ptr is anywhere inside a live block or a block opened with ff_ipc_open
  // (ff_ipc_export).
  kAnyAddress,
};

// The allocator of the first device in use that owns `ptr` as `owned` says,
// or nullptr (FF_DEVICE_OWNER's lookup).
DeviceAllocator* OwnerOf(const void* ptr, Owned owned = Owned::kAllocation) {
  Runtime& rt = Runtime::Get();
  for (int i = 0; i < fragfree::kMaxDevices; ++i) {
    DeviceAllocator* d = rt.Existing(i);
    if (d == nullptr) continue;
    if (owned == Owned::kAllocation ? d->AllocationSize(ptr) > 0
                                    : d->AddressRange(ptr).ok()) {
      return d;
    }
  }
  return nullptr;
}

// `device` for the functions that describe one device: FF_DEVICE_DEFAULT (any
// negative value) is device 0.
int OneDevice(int device) { return device < 0 ? 0 : device; }

// ff_stats_t's layout against its pinned table (FF_STATS_LAYOUT in
// allocator/obs/stat_fields.h, which says how to add a field): every field at
// its offset, the size for FF_STATS_VERSION, and no field of the lists left
// out of the table.
static_assert(sizeof(ff_stat_t) == 32);
static_assert(offsetof(ff_stats_t, size) == 0);
static_assert(offsetof(ff_stats_t, version) == 4);
#define FF_PIN_OFFSET(name, offset)                   \
  static_assert(offsetof(ff_stats_t, name) == offset, \
                "ff_stats_t." #name " moved: an ABI change");
FF_STATS_LAYOUT(FF_PIN_OFFSET)
#undef FF_PIN_OFFSET
static_assert(sizeof(ff_stats_t) == FF_STATS_SIZE,
              "ff_stats_t's size is not FF_STATS_SIZE: a new layout needs a "
              "new FF_STATS_VERSION and size");
#define FF_COUNT(...) +1
// The table also pins u_alloc, u_active and external_fragmentation (doubles
// outside the lists).
static_assert(0 FF_STATS_LAYOUT(FF_COUNT) ==
                  3 + 0 FF_STAT_ARRAY_FIELDS(FF_COUNT) FF_STAT_FIELDS(FF_COUNT)
                          FF_COUNTER_FIELDS(FF_COUNT) FF_GAUGE_FIELDS(FF_COUNT)
                              FF_SLEEP_FIELDS(FF_COUNT)
                                  FF_TIMING_FIELDS(FF_COUNT),
              "a stat field is not in FF_STATS_LAYOUT: pin its offset");
#undef FF_COUNT

}  // namespace

namespace fragfree {

void* MallocFailed(DeviceAllocator& device, const absl::Status& status) {
  Runtime& rt = Runtime::Get();
  if (absl::IsResourceExhausted(status)) {
    // Out of memory: the message is the whole report (docs/oom.md).
    rt.Report(
        absl::ResourceExhaustedError(ReportOom(device, device.options())));
  } else {
    rt.Report(status);
  }
  return nullptr;
}

void* MallocOnNewDevice(size_t size, int device, ff_stream_t stream) {
  Runtime& rt = Runtime::Get();
  absl::StatusOr<DeviceAllocator*> d = rt.Device(device);
  if (!d.ok()) {
    rt.Report(d.status());
    return nullptr;
  }
  return MallocOn(**d, size, stream);
}

ff_status_t FreeSlow(void* ptr, int device) {
  Runtime& rt = Runtime::Get();
  if (device < 0) {  // FF_DEVICE_OWNER (any negative value, as ever)
    // The native adapter's every free: each device in use is asked to free
    // `ptr` if it is one of its live allocations (one lock and one probe on
    // the owner), in OwnerOf's order.
    for (int i = 0; i < kMaxDevices; ++i) {
      DeviceAllocator* d = rt.Existing(i);
      if (d == nullptr) continue;
      bool owned = false;
      absl::Status st = d->Free(ptr, &owned);
      if (owned) return rt.Report(st);
    }
    return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_free: pointer %p is not a live fragfree allocation on any device",
        ptr)));
  }
  absl::StatusOr<DeviceAllocator*> d = rt.Device(device);
  if (!d.ok()) return rt.Report(d.status());
  return rt.Report((*d)->Free(ptr));
}

}  // namespace fragfree

extern "C" {

ff_status_t ff_init(const char* conf) {
  return Runtime::Get().Report(Runtime::Get().Init(conf));
}

ff_status_t ff_shutdown(void) {
  return Runtime::Get().Report(Runtime::Get().Shutdown());
}

const char* ff_version(void) { return "0.1.0"; }

int ff_device_count(void) {
  absl::StatusOr<int> n = Runtime::Get().DeviceCount();
  if (!n.ok()) {
    Runtime::Get().Report(n.status());
    return 0;
  }
  return *n;
}

void* ff_malloc(size_t size, int device, ff_stream_t stream) {
  return fragfree::MallocCall(size, device, stream);
}

ff_status_t ff_free(void* ptr, int device) {
  return fragfree::FreeCall(ptr, device);
}

ff_status_t ff_record_stream(void* ptr, int device, ff_stream_t stream) {
  const auto handle = reinterpret_cast<fragfree::StreamHandle>(stream);
  if (device < 0) {  // FF_DEVICE_OWNER (any negative value)
    Runtime& rt = Runtime::Get();
    if (DeviceAllocator* d = OwnerOf(ptr)) {
      return rt.Report(d->RecordStream(ptr, handle));
    }
    return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_record_stream: pointer %p is not a live fragfree allocation on "
        "any device",
        ptr)));
  }
  return ForDevices(
      device, [&](DeviceAllocator& d) { return d.RecordStream(ptr, handle); });
}

ff_status_t ff_retire_stream(ff_stream_t stream) {
  return ForDevices(FF_DEVICE_ALL, [&](DeviceAllocator& d) {
    return d.RetireStream(reinterpret_cast<fragfree::StreamHandle>(stream));
  });
}

ff_status_t ff_empty_cache(int device) {
  return ForDevices(device, [](DeviceAllocator& d) { return d.EmptyCache(); });
}

ff_status_t ff_set_memory_fraction(double fraction, int device) {
  return ForDevices(device, [&](DeviceAllocator& d) {
    return d.SetMemoryFraction(fraction);
  });
}

ff_status_t ff_set_memory_limit(size_t bytes, int device) {
  return ForDevices(
      device, [&](DeviceAllocator& d) { return d.SetMemoryLimit(bytes); });
}

namespace {

// ff_get_stats and ff_get_allocator_stats (`name`, for the error).
ff_status_t GetStats(int device, ff_stats_t* out,
                     DeviceAllocator::DeviceMemory device_memory,
                     const char* name) {
  // Like the JSON form, a device not yet served reports zeros (no creation).
  device = OneDevice(device);
  if (out == nullptr || out->size < sizeof(ff_stats_t)) {
    return Runtime::Get().Report(absl::InvalidArgumentError(
        absl::StrFormat("%s: out must point to an ff_stats_t with size set to "
                        "sizeof(ff_stats_t)",
                        name)));
  }
  DeviceAllocator* existing = Runtime::Get().Existing(device);
  fragfree::DeviceStats s =
      existing ? existing->GetStats(device_memory) : fragfree::DeviceStats();
  uint32_t size = out->size;
  memset(out, 0, sizeof(ff_stats_t));
  out->size = size;
  out->version = FF_STATS_VERSION;
  auto copy = [](const fragfree::Stat& from, ff_stat_t& to) {
    to = {from.current, from.peak, from.allocated, from.freed};
  };
#define FF_COPY_ARRAY(name) \
  for (int p = 0; p < 3; ++p) copy(s.name.pool[p], out->name[p]);
  FF_STAT_ARRAY_FIELDS(FF_COPY_ARRAY)
#undef FF_COPY_ARRAY
#define FF_COPY_STAT(name) copy(s.name, out->name);
  FF_STAT_FIELDS(FF_COPY_STAT)
#undef FF_COPY_STAT
#define FF_COPY_COUNTER(name) out->name = s.name;
  FF_COUNTER_FIELDS(FF_COPY_COUNTER)
  FF_GAUGE_FIELDS(FF_COPY_COUNTER)
  FF_SLEEP_FIELDS(FF_COPY_COUNTER)
  FF_TIMING_FIELDS(FF_COPY_COUNTER)
#undef FF_COPY_COUNTER
  fragfree::Fragmentation f = fragfree::ComputeFragmentation(s);
  out->u_alloc = f.u_alloc;
  out->u_active = f.u_active;
  out->external_fragmentation = f.external;
  return FF_OK;
}

}  // namespace

ff_status_t ff_get_stats(int device, ff_stats_t* out) {
  return GetStats(device, out, DeviceAllocator::DeviceMemory::kRead,
                  "ff_get_stats");
}

ff_status_t ff_get_allocator_stats(int device, ff_stats_t* out) {
  return GetStats(device, out, DeviceAllocator::DeviceMemory::kSkip,
                  "ff_get_allocator_stats");
}

ff_status_t ff_get_stat(int device, const char* key, int64_t* value) {
  device = OneDevice(device);
  if (key == nullptr || value == nullptr) {
    return Runtime::Get().Report(absl::InvalidArgumentError(
        "ff_get_stat: key and value must not be NULL"));
  }
  const std::string_view name(key);
  DeviceAllocator* existing = Runtime::Get().Existing(device);
  const std::optional<int64_t> found =
      existing ? existing->GetStat(name)
               : fragfree::IntegerStat(fragfree::DeviceStats(), name);
  if (!found) {
    return Runtime::Get().Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_get_stat: no integer statistic is named \"%s\" (the keys of "
        "ff_stats_json, as torch.cuda.memory_stats(), but the computed "
        "\"fragmentation.\" ones; docs/stats.md)",
        name)));
  }
  *value = *found;
  return FF_OK;
}

namespace {
// Copies `text` into buf (NUL-terminated, truncated to len) and returns its
// length.
size_t CopyOut(const std::string& text, char* buf, size_t len) {
  if (buf != nullptr && len > 0) {
    size_t n = std::min(len - 1, text.size());
    memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}
}  // namespace

// Read-only queries never create a device's allocator (and with it a CUDA
// context): a device fragfree has not served reports as empty.
size_t ff_stats_json(int device, char* buf, size_t len) {
  device = OneDevice(device);
  DeviceAllocator* d = Runtime::Get().Existing(device);
  return CopyOut(
      fragfree::StatsToJson(d ? d->GetStats() : fragfree::DeviceStats()), buf,
      len);
}

size_t ff_snapshot_json(int device, char* buf, size_t len) {
  device = OneDevice(device);
  DeviceAllocator* d = Runtime::Get().Existing(device);
  return CopyOut(
      d ? fragfree::SnapshotToJson(d->device(), d->Arenas(), d->Trace(),
                                   fragfree::HostSegments())
        : fragfree::SnapshotToJson(device, {}, {}, fragfree::HostSegments()),
      buf, len);
}

size_t ff_bucket_advice_json(int device, int num_buckets, char* buf,
                             size_t len) {
  Runtime& rt = Runtime::Get();
  if (num_buckets > int(fragfree::kMaxAdvisedBuckets)) {
    rt.Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_bucket_advice_json: num_buckets %d is above %d (0 or less: the "
        "bucket_advice_k option)",
        num_buckets, fragfree::kMaxAdvisedBuckets)));
    return 0;
  }
  device = OneDevice(device);
  DeviceAllocator* d = rt.Existing(device);
  const fragfree::DeviceBucketAdvice a = fragfree::AdviseDeviceBuckets(
      d, d ? d->options() : rt.options(), size_t(std::max(num_buckets, 0)));
  const std::string advice = fragfree::BucketAdviceToJson(a.advice);
  // {"device":..,<histogram figures>, <the advice's fields>}
  return CopyOut(
      absl::StrFormat("{\"device\":%d,\"num_buckets\":%d,\"sample_every\":%d,"
                      "\"samples\":%d,\"distinct_sizes\":%d,"
                      "\"max_distinct_sizes\":%d,\"precision_bits\":%d,%s",
                      device, a.num_buckets, a.histogram.sample_every,
                      a.histogram.samples, a.histogram.distinct_sizes,
                      a.histogram.max_sizes, a.histogram.precision_bits,
                      advice.substr(1)),
      buf, len);
}

size_t ff_advise_sequence_buckets_json(const int64_t* lengths, size_t n,
                                       int num_buckets, int multiple_of,
                                       char* buf, size_t len) {
  Runtime& rt = Runtime::Get();
  auto fail = [&](std::string message) -> size_t {
    rt.Report(absl::InvalidArgumentError("ff_advise_sequence_buckets_json: " +
                                         message));
    return 0;
  };
  if (lengths == nullptr && n > 0) return fail("lengths is NULL");
  if (num_buckets < 1 || num_buckets > int(fragfree::kMaxAdvisedBuckets)) {
    return fail(absl::StrFormat("num_buckets %d is outside 1 to %d",
                                num_buckets, fragfree::kMaxAdvisedBuckets));
  }
  if (multiple_of < 1) {
    return fail(absl::StrFormat("multiple_of %d is not a positive number",
                                multiple_of));
  }
  std::vector<int64_t> sorted(lengths, lengths + n);
  std::sort(sorted.begin(), sorted.end());
  if (!sorted.empty() && sorted.front() < 0) {
    return fail(absl::StrFormat("length %d is negative", sorted.front()));
  }
  std::vector<fragfree::LengthCount> histogram;
  for (int64_t length : sorted) {
    if (histogram.empty() || histogram.back().length != size_t(length)) {
      histogram.push_back({size_t(length), 0});
    }
    ++histogram.back().count;
  }
  const std::string advice =
      fragfree::SeqBucketAdviceToJson(fragfree::AdviseSequenceBuckets(
          histogram, size_t(num_buckets), size_t(multiple_of)));
  return CopyOut(absl::StrFormat("{\"num_buckets\":%d,\"multiple_of\":%d,%s",
                                 num_buckets, multiple_of, advice.substr(1)),
                 buf, len);
}

ff_status_t ff_dump_snapshot(int device, const char* path) {
  if (path == nullptr || *path == '\0') {
    return Runtime::Get().Report(
        absl::InvalidArgumentError("ff_dump_snapshot: no path given"));
  }
  return Runtime::Get().Report(fragfree::DumpSnapshot(OneDevice(device), path));
}

ff_status_t ff_set_oom_hints(int device, size_t parameter_bytes,
                             size_t gradient_bytes,
                             size_t optimizer_state_bytes,
                             size_t other_persistent_bytes,
                             uint32_t techniques) {
  if (device < 0 || device >= fragfree::kMaxDevices) {
    return Runtime::Get().Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_set_oom_hints: device %d is out of range", device)));
  }
  fragfree::OomHints hints;
  hints.categories = {parameter_bytes, gradient_bytes, optimizer_state_bytes,
                      other_persistent_bytes};
  fragfree::ActiveTechniques& t = hints.techniques;
  t.bf16_autocast = techniques & FF_TECH_BF16_AUTOCAST;
  t.gradient_checkpointing = techniques & FF_TECH_GRADIENT_CHECKPOINTING;
  t.flash_attention = techniques & FF_TECH_FLASH_ATTENTION;
  t.eight_bit_optimizer = techniques & FF_TECH_EIGHT_BIT_OPTIMIZER;
  t.sharded = techniques & FF_TECH_SHARDED;
  t.lora_peft = techniques & FF_TECH_LORA_PEFT;
  t.cpu_offload = techniques & FF_TECH_CPU_OFFLOAD;
  fragfree::SetOomHints(device, hints);
  return FF_OK;
}

ff_status_t ff_record_history(int device, int enabled, size_t max_entries) {
  if (enabled && max_entries == 0) max_entries = 100000;
  if (device < 0) {  // FF_DEVICE_ALL
    // Devices not in use yet start with this trace when they are.
    Runtime& rt = Runtime::Get();
    if (ff_status_t s = rt.Report(
            rt.SetTraceEntriesForNewDevices(enabled ? max_entries : 0));
        s != FF_OK) {
      return s;
    }
  }
  return ForDevices(device, [&](DeviceAllocator& d) {
    d.SetTraceEntries(enabled ? max_entries : 0);
    return absl::OkStatus();
  });
}

uint32_t ff_set_trace_context(uint32_t context) {
  return fragfree::SetTraceContext(context);
}

ff_status_t ff_reset_peak_stats(int device) {
  return ForDevices(device, [](DeviceAllocator& d) {
    d.ResetPeakStats();
    return absl::OkStatus();
  });
}

ff_status_t ff_reset_accumulated_stats(int device) {
  return ForDevices(device, [](DeviceAllocator& d) {
    d.ResetAccumulatedStats();
    return absl::OkStatus();
  });
}

size_t ff_allocation_size(const void* ptr, int device) {
  DeviceAllocator* d =  // device < 0: FF_DEVICE_OWNER
      device < 0 ? OwnerOf(ptr) : Runtime::Get().Existing(device);
  return d == nullptr ? 0 : d->AllocationSize(ptr);
}

ff_status_t ff_check_invariants(int device) {
  return ForDevices(device,
                    [](DeviceAllocator& d) { return d.CheckInvariants(); });
}

void ff_set_error_handler(ff_error_handler_t handler, void* arg) {
  Runtime::Get().SetErrorHandler(handler, arg);
}

const char* ff_last_error(void) { return Runtime::LastError(); }

const char* ff_status_name(ff_status_t status) {
  switch (status) {
    case FF_OK:
      return "FF_OK";
    case FF_ERR_INVALID_ARGUMENT:
      return "FF_ERR_INVALID_ARGUMENT";
    case FF_ERR_OOM:
      return "FF_ERR_OOM";
    case FF_ERR_NO_DEVICE:
      return "FF_ERR_NO_DEVICE";
    case FF_ERR_STATE:
      return "FF_ERR_STATE";
    case FF_ERR_BACKEND:
      return "FF_ERR_BACKEND";
    case FF_ERR_INTERNAL:
      return "FF_ERR_INTERNAL";
  }
  return "FF_ERR_UNKNOWN";
}

// ---- Sharing memory between processes (docs/ipc.md) ----------------------

}  // extern "C"

namespace {

// Permission and kernel-support failures are "wrong state" to a C caller.
absl::Status IpcStatus(absl::Status s) {
  if (absl::IsPermissionDenied(s) || absl::IsUnimplemented(s)) {
    return absl::FailedPreconditionError(s.message());
  }
  return s;
}

}  // namespace

extern "C" {

ff_status_t ff_ipc_export(const void* ptr, unsigned flags, void* handle,
                          size_t handle_len, ff_ipc_export_info_t* info) {
  Runtime& rt = Runtime::Get();
  if (ptr == nullptr || info == nullptr ||
      (flags & ~unsigned{FF_IPC_RELEASE_ON_FREE}) != 0) {
    return rt.Report(absl::InvalidArgumentError(
        "ff_ipc_export: ptr and info must not be NULL, and flags may only "
        "hold FF_IPC_RELEASE_ON_FREE"));
  }
  DeviceAllocator* d = OwnerOf(ptr, Owned::kAnyAddress);
  if (d == nullptr) {
    return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_ipc_export: %p is not inside a live fragfree allocation", ptr)));
  }
  // Measure first, so that a short buffer pins nothing.
  const bool on_free = (flags & FF_IPC_RELEASE_ON_FREE) != 0;
  absl::StatusOr<DeviceAllocator::IpcExport> e =
      d->IpcExportBlock(ptr, on_free);
  if (!e.ok()) return rt.Report(IpcStatus(e.status()));
  info->handle_size = e->handle.size();
  if (handle == nullptr || handle_len < e->handle.size()) {
    // Undo: an export made for this call is released again (a reused
    // FF_IPC_RELEASE_ON_FREE export is left as it was).
    if (d->IpcLiveExports() > 0 && !on_free) d->IpcRelease(e->id).IgnoreError();
    return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_ipc_export: the handle needs %d bytes, the buffer has %d",
        e->handle.size(), handle_len)));
  }
  memcpy(handle, e->handle.data(), e->handle.size());
  info->export_id = e->id;
  info->block = reinterpret_cast<void*>(e->block);
  info->block_size = e->block_size;
  info->page_offset = reinterpret_cast<uintptr_t>(ptr) - e->first_page;
  return FF_OK;
}

ff_status_t ff_ipc_release(uint64_t export_id) {
  Runtime& rt = Runtime::Get();
  for (int i = 0; i < fragfree::kMaxDevices; ++i) {
    DeviceAllocator* d = rt.Existing(i);
    if (d == nullptr) continue;
    absl::Status s = d->IpcRelease(export_id);
    if (!absl::IsNotFound(s)) return rt.Report(s);
  }
  return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
      "ff_ipc_release: no export %d in this process (released already and its "
      "block freed, or never made)",
      export_id)));
}

ff_status_t ff_ipc_sweep(int device) {
  return ForDevices(device, [](DeviceAllocator& d) { return d.IpcSweep(); });
}

ff_status_t ff_ipc_open(const void* handle, size_t handle_len, int device,
                        ff_ipc_mapping_t* out) {
  Runtime& rt = Runtime::Get();
  if (handle == nullptr || handle_len == 0 || out == nullptr) {
    return rt.Report(absl::InvalidArgumentError(
        "ff_ipc_open: handle and out must not be NULL, handle_len > 0"));
  }
  const std::string_view bytes(static_cast<const char*>(handle), handle_len);
  if (device < 0) {
    absl::StatusOr<fragfree::IpcHandle> h = fragfree::DecodeIpcHandle(bytes);
    if (!h.ok()) return rt.Report(h.status());
    device = h->has_trailer ? h->device : 0;
  }
  absl::StatusOr<DeviceAllocator*> d = rt.Device(device);
  if (!d.ok()) return rt.Report(d.status());
  absl::StatusOr<DeviceAllocator::IpcMapping> m = (*d)->IpcOpen(bytes);
  if (!m.ok()) return rt.Report(IpcStatus(m.status()));
  out->ptr = reinterpret_cast<void*>(m->ptr);
  out->size = m->size;
  out->base = reinterpret_cast<void*>(m->base);
  out->mapped = m->mapped;
  return FF_OK;
}

ff_status_t ff_ipc_close(void* ptr) {
  Runtime& rt = Runtime::Get();
  for (int i = 0; i < fragfree::kMaxDevices; ++i) {
    DeviceAllocator* d = rt.Existing(i);
    if (d == nullptr) continue;
    absl::Status s = d->IpcClose(ptr);
    if (!absl::IsNotFound(s)) return rt.Report(s);
  }
  return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
      "ff_ipc_close: %p is not in a block opened with ff_ipc_open (closed "
      "twice?)",
      ptr)));
}

ff_status_t ff_get_address_range(const void* ptr, void** base, size_t* size) {
  Runtime& rt = Runtime::Get();
  for (int i = 0; i < fragfree::kMaxDevices; ++i) {
    DeviceAllocator* d = rt.Existing(i);
    if (d == nullptr) continue;
    absl::StatusOr<std::pair<uintptr_t, size_t>> r = d->AddressRange(ptr);
    if (!r.ok()) continue;
    if (base != nullptr) *base = reinterpret_cast<void*>(r->first);
    if (size != nullptr) *size = r->second;
    return FF_OK;
  }
  return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
      "ff_get_address_range: %p is not inside memory fragfree handed out",
      ptr)));
}

}  // extern "C"

// ---- Sleep and wake (docs/sleep.md) -----------------------------------------

namespace {

// The region tags named by a C caller: `tags`, or every tag used so far when
// tags is NULL and ntags 0 (for resume: every paused one, since the engine
// skips the others). A name never used in a region is an error (a typo).
absl::StatusOr<std::vector<fragfree::RegionTag>> TagsOf(const char* call,
                                                        const char* const* tags,
                                                        int ntags) {
  if (tags == nullptr && ntags == 0) return fragfree::AllRegionTags();
  if (tags == nullptr || ntags < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tags must be NULL with ntags 0 (every tag), or an array of "
        "ntags > 0 names (got %s and ntags %d)",
        call, tags == nullptr ? "NULL" : "an array", ntags));
  }
  std::vector<fragfree::RegionTag> out;
  for (int i = 0; i < ntags; ++i) {
    if (tags[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: tags[%d] is NULL", call, i));
    }
    const fragfree::RegionTag t = fragfree::FindRegionTag(tags[i]);
    if (t == fragfree::kNoRegionTag) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tag '%s' was never used in a region (ff_region_begin)", call,
          tags[i]));
    }
    out.push_back(t);
  }
  return out;
}

}  // namespace

extern "C" {

ff_status_t ff_region_begin(const char* tag) {
  if (tag == nullptr) {
    return Runtime::Get().Report(
        absl::InvalidArgumentError("ff_region_begin: tag is NULL"));
  }
  return Runtime::Get().Report(fragfree::RegionBegin(tag));
}

ff_status_t ff_region_end(void) {
  return Runtime::Get().Report(fragfree::RegionEnd());
}

ff_status_t ff_pause(const char* const* tags, int ntags, int backup) {
  Runtime& rt = Runtime::Get();
  if (backup != FF_BACKUP_NONE && backup != FF_BACKUP_CPU) {
    return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_pause: backup %d is neither FF_BACKUP_NONE (0) nor FF_BACKUP_CPU "
        "(1)",
        backup)));
  }
  absl::StatusOr<std::vector<fragfree::RegionTag>> ids =
      TagsOf("ff_pause", tags, ntags);
  if (!ids.ok()) return rt.Report(ids.status());
  return ForDevices(-1, [&](DeviceAllocator& d) {
    return d.Pause(*ids, fragfree::BackupMode(backup));
  });
}

ff_status_t ff_resume(const char* const* tags, int ntags) {
  return ff_resume_ex(tags, ntags, 0);
}

ff_status_t ff_resume_ex(const char* const* tags, int ntags, unsigned flags) {
  Runtime& rt = Runtime::Get();
  if ((flags & ~unsigned{FF_RESUME_KEEP_BACKUP}) != 0) {
    return rt.Report(absl::InvalidArgumentError(absl::StrFormat(
        "ff_resume_ex: unknown flags 0x%x (FF_RESUME_KEEP_BACKUP is 0x%x)",
        flags, unsigned{FF_RESUME_KEEP_BACKUP})));
  }
  absl::StatusOr<std::vector<fragfree::RegionTag>> ids =
      TagsOf(flags != 0 ? "ff_resume_ex" : "ff_resume", tags, ntags);
  if (!ids.ok()) return rt.Report(ids.status());
  const bool keep = (flags & FF_RESUME_KEEP_BACKUP) != 0;
  return ForDevices(-1,
                    [&](DeviceAllocator& d) { return d.Resume(*ids, keep); });
}

ff_status_t ff_release_backup(size_t* freed) {
  size_t total = 0;
  ff_status_t status = ForDevices(-1, [&](DeviceAllocator& d) {
    total += d.ReleaseBackup();
    return absl::OkStatus();
  });
  if (freed != nullptr) *freed = total;
  return status;
}

size_t ff_paused_json(int device, char* buf, size_t len) {
  Runtime& rt = Runtime::Get();
  if (device >= fragfree::kMaxDevices) {
    rt.Report(absl::InvalidArgumentError(
        absl::StrFormat("ff_paused_json: device %d is out of range", device)));
    return 0;
  }
  std::string out = "{\"devices\":[";
  bool first_device = true;
  for (int i = device < 0 ? 0 : device;
       i < (device < 0 ? fragfree::kMaxDevices : device + 1); ++i) {
    DeviceAllocator* d = rt.Existing(i);
    if (d == nullptr) continue;
    absl::StrAppendFormat(&out, "%s{\"device\":%d,\"tags\":[",
                          first_device ? "" : ",", i);
    first_device = false;
    bool first_tag = true;
    for (const fragfree::TagSleepInfo& t : d->SleepInfo()) {
      absl::StrAppendFormat(&out,
                            "%s{\"tag\":%s,\"paused\":%s,\"live_bytes\":%d,"
                            "\"live_allocations\":%d,\"mapped_bytes\":%d,"
                            "\"backup_bytes\":%d,\"arenas\":%d}",
                            first_tag ? "" : ",", fragfree::JsonQuote(t.name),
                            t.paused ? "true" : "false", t.live_bytes,
                            t.live_blocks, t.mapped_bytes, t.backup_bytes,
                            t.arenas);
      first_tag = false;
    }
    const auto [pause, resume] = d->LastSleepTimes();
    absl::StrAppendFormat(
        &out,
        "],\"last_pause\":{\"total_s\":%.6f,\"wait_users_s\":%.6f,"
        "\"backup_issue_s\":%.6f,\"copy_wait_s\":%.6f,\"unmap_s\":%.6f,"
        "\"release_s\":%.6f,\"bytes_copied\":%d,\"unmap_calls\":%d,"
        "\"pages_unmapped\":%d,\"pages_released\":%d}",
        pause.total_s, pause.wait_users_s, pause.backup_issue_s,
        pause.copy_wait_s, pause.unmap_s, pause.release_s, pause.bytes_copied,
        pause.unmap_calls, pause.pages_unmapped, pause.pages_released);
    absl::StrAppendFormat(
        &out,
        ",\"last_resume\":{\"total_s\":%.6f,\"map_s\":%.6f,"
        "\"copy_issue_s\":%.6f,\"copy_wait_s\":%.6f,\"backup_free_s\":%.6f,"
        "\"bytes_copied\":%d,\"map_ranges\":%d,\"pages_mapped\":%d,"
        "\"pages_created\":%d}}",
        resume.total_s, resume.map_s, resume.copy_issue_s, resume.copy_wait_s,
        resume.backup_free_s, resume.bytes_copied, resume.map_ranges,
        resume.pages_mapped, resume.pages_created);
  }
  out += "],\"known_tags\":[";
  bool first = true;
  for (fragfree::RegionTag t : fragfree::AllRegionTags()) {
    out += (first ? "" : ",") + fragfree::JsonQuote(fragfree::RegionTagName(t));
    first = false;
  }
  out += "]}";
  return CopyOut(out, buf, len);
}

}  // extern "C"
