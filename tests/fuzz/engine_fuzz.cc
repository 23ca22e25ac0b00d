// engine_fuzz: a coverage-guided fuzzer of DeviceAllocator (libFuzzer entry
// point LLVMFuzzerTestOneInput), also linked into a plain replay driver that CI
// runs (fuzz_replay_main.cc). Owns the input format below and the reference
// model every step is checked against. docs/reliability.md has the commands.
//
// Input format (every byte string is a valid input; reads past the end give 0):
//   header, 3 bytes:
//     h0: page size = 4 KiB << (h0 % 5)               (4 .. 64 KiB)
//     h1: capacity  = 4 + h1 % 61 pages               (4 .. 64 pages)
//     h2: bit 0 faults may be injected (backend calls and events)
//         bit 1 reclaim_before_grow:True (else False), unless bit 6
//         bits 2-3 roundup_power2_divisions 0 / 2 / 4 / 8
//         bit 4 va_factor:1 (else 2)
//         bit 5 round_buckets:[1536,8K,96K]
//         bit 6 reclaim_before_grow:auto (the default)
//         bit 7 trace_entries:64 (the trace ring buffer on)
//   then operations until the input ends (at most kMaxOps): one opcode byte
//   (op = byte % 32, see the Op enum: allocation ops take several codes so that
//   random inputs allocate more than they do anything else) and the op's
//   argument bytes. tests/fuzz/make_corpus.py writes inputs in this format.
//
// Reference model, checked after every operation:
//  - live allocations never overlap, are 512-aligned, and AllocationSize() is
//    the requested size;
//  - data written into a block at allocation is intact when it is freed (and in
//    every live block whenever the engine unmapped pages);
//  - CheckInvariants() is OK; allocated_bytes / requested_bytes / allocation
//    (current and peak) equal the model's recount; num_ooms and invalid_frees
//    count what the model saw; memory_limit() is what the model computes;
//  - an allocation fails only with ResourceExhausted, and only when the pages
//    touched by live or pending blocks plus the request's pages (+1 for an
//    unaligned start) exceed the memory limit in pages (conformance_test.cc's
//    rule). The rule is skipped for a call during which a fault was injected,
//    and while a graph pool is capturing or not yet released (its free pages
//    are held for replay); such calls must still fail cleanly. Faults come from
//    FaultInjectingBackend (any backend op) and from a wrapper of the event
//    source (Record / Query / Synchronize);
//  - bad pointers (foreign, interior, double free, pending) are
//    InvalidArgument and change nothing; a Free stopped by an injected event
//    fault changes nothing either (the block stays live); status codes of pool
//    calls follow PyTorch's rules, and RetireStream of a capturing stream is
//    FailedPrecondition;
//  - after EmptyCache with no fault, capture or held pool: mapped pages ==
//    pages touched by live blocks, no idle page, and the backend holds exactly
//    the mapped pages;
//  - at the end (faults cleared, pools released, events completed, every block
//    freed, EmptyCache): nothing reserved, nothing idle, and the backend's free
//    memory equals its capacity.
// A violation prints what happened and aborts (libFuzzer records the input).
//
// Thread-safety: single-threaded; each input builds its own allocator.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/base/units.h"
#include "allocator/device_allocator.h"
#include "allocator/obs/snapshot.h"
#include "allocator/obs/stats.h"
#include "allocator/options.h"
#include "allocator/phys/fault_injecting_backend.h"
#include "allocator/phys/host_backend.h"
#include "allocator/policy/size_classes.h"
#include "allocator/stream/event_source.h"
#include "allocator/stream/host_event_source.h"

namespace fragfree::fuzz {
namespace {

constexpr int kNumStreams = 16;
constexpr int kMaxOps = 4000;
constexpr int kMaxPools = 4;

StreamHandle StreamAt(int i) { return StreamHandle(i) * 0x1000; }

// Reads the input; past the end every read is 0, so every input decodes.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() {
    const uint16_t lo = U8();  // two statements: operand order is unspecified
    return uint16_t(lo | (U8() << 8));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

enum class Op {
  kAlloc,
  kAllocBurst,
  kFree,
  kFreeEveryOther,
  kFreeBad,
  kRecordStream,
  kRecordStreamBad,
  kCompleteEvents,
  kEmptyCache,
  kSetLimit,
  kSetFraction,
  kBeginPool,
  kEndPool,
  kReleasePool,
  kInjectFault,
  kClearFaults,
  kStats,
  kVerifyAll,
  kRetireStream,
};

// Opcode byte % 32 -> operation.
constexpr Op kOpcodes[32] = {
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAllocBurst,
    Op::kFree,
    Op::kFree,
    Op::kFree,
    Op::kFree,
    Op::kFreeEveryOther,
    Op::kFreeBad,
    Op::kRecordStream,
    Op::kRecordStream,
    Op::kRecordStreamBad,
    Op::kCompleteEvents,
    Op::kCompleteEvents,
    Op::kEmptyCache,
    Op::kSetLimit,
    Op::kSetFraction,
    Op::kBeginPool,
    Op::kEndPool,
    Op::kReleasePool,
    Op::kInjectFault,
    Op::kInjectFault,
    Op::kClearFaults,
    Op::kStats,
    Op::kVerifyAll,
    Op::kAlloc,
    Op::kRetireStream,
};

const char* OpName(Op op) {
  switch (op) {
    case Op::kAlloc:
      return "alloc";
    case Op::kAllocBurst:
      return "alloc_burst";
    case Op::kFree:
      return "free";
    case Op::kFreeEveryOther:
      return "free_every_other";
    case Op::kFreeBad:
      return "free_bad";
    case Op::kRecordStream:
      return "record_stream";
    case Op::kRecordStreamBad:
      return "record_stream_bad";
    case Op::kCompleteEvents:
      return "complete_events";
    case Op::kEmptyCache:
      return "empty_cache";
    case Op::kSetLimit:
      return "set_limit";
    case Op::kSetFraction:
      return "set_fraction";
    case Op::kBeginPool:
      return "begin_pool";
    case Op::kEndPool:
      return "end_pool";
    case Op::kReleasePool:
      return "release_pool";
    case Op::kInjectFault:
      return "inject_fault";
    case Op::kClearFaults:
      return "clear_faults";
    case Op::kStats:
      return "stats";
    case Op::kVerifyAll:
      return "verify_all";
    case Op::kRetireStream:
      return "retire_stream";
  }
  return "?";
}

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

struct LiveBlock {
  size_t size;     // requested
  size_t rounded;  // what the rounding makes of it
  uint64_t seed;
  StreamHandle stream;
};

struct PoolModel {
  bool capturing = false;
  bool released = false;
  uint16_t mask = 0;  // streams the filter takes
};

// ManualEventSource with injectable failures of Record, Query and Synchronize
// (a CUDA event call that fails: a sticky device error).
class FaultyEvents final : public EventSource {
 public:
  enum Call { kRecord, kQuery, kSynchronize, kNumCalls };

  absl::StatusOr<EventId> Record(StreamHandle stream) override {
    if (Fault(kRecord)) return absl::InternalError("injected: event record");
    return inner_.Record(stream);
  }
  absl::StatusOr<bool> Query(EventId event) override {
    if (Fault(kQuery)) return absl::InternalError("injected: event query");
    return inner_.Query(event);
  }
  absl::Status Synchronize(EventId event) override {
    if (Fault(kSynchronize)) {
      return absl::InternalError("injected: event synchronize");
    }
    return inner_.Synchronize(event);
  }
  void Release(EventId event) override { inner_.Release(event); }
  bool IsCapturing(StreamHandle stream) override {
    return inner_.IsCapturing(stream);
  }

  // The next `count` calls of `call` fail.
  void FailNext(Call call, int count) { fail_[call] = count; }
  void ClearFaults() {
    for (int& f : fail_) f = 0;
  }
  bool Armed(Call call) const { return fail_[call] > 0; }
  int64_t FaultsInjected() const { return injected_; }
  ManualEventSource& inner() { return inner_; }

 private:
  bool Fault(Call call) {
    if (fail_[call] <= 0) return false;
    --fail_[call];
    ++injected_;
    return true;
  }
  ManualEventSource inner_;
  int fail_[kNumCalls] = {};
  int64_t injected_ = 0;
};

class Session {
 public:
  Session(size_t page, size_t pages, const Options& options, bool faults)
      : page_(page),
        capacity_(page * pages),
        faults_enabled_(faults),
        rounding_(options.rounding) {
    auto host = HostBackend::Create(capacity_, page_);
    if (!host.ok()) Fail("HostBackend::Create: %s", Str(host.status()).c_str());
    inner_ = host->get();
    auto faulty = std::make_unique<FaultInjectingBackend>(std::move(*host));
    faults_ = faulty.get();
    auto events = std::make_unique<FaultyEvents>();
    events_ = events.get();
    auto a = DeviceAllocator::Create(0, options, std::move(faulty),
                                     std::move(events));
    if (!a.ok()) Fail("DeviceAllocator::Create: %s", Str(a.status()).c_str());
    a_ = std::move(*a);
    limit_request_ = options.memory_limit_bytes;
    fraction_ = options.memory_fraction;
  }

  void Run(ByteReader& in) {
    CheckState();
    for (step_ = 0; step_ < kMaxOps && !in.empty(); ++step_) {
      op_ = kOpcodes[in.U8() % 32];
      Do(op_, in);
      CheckState();
    }
    Finish();
  }

 private:
  // ---- failure reporting -------------------------------------------------
  static std::string Str(const absl::Status& s) { return s.ToString(); }
  [[noreturn]] void Fail(const char* fmt, ...)
      __attribute__((format(printf, 2, 3))) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr,
            "\nengine_fuzz: step %d (%s), page %zu B, capacity %zu B: ", step_,
            op_name(), page_, capacity_);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, "\n");
    abort();
  }
  // FRAGFREE_FUZZ_TRACE=1 prints every operation (to read a crash).
  void Trace(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    if (!trace_) return;
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "[%d] ", step_);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fprintf(stderr, "\n");
  }
  const char* op_name() const { return step_ < 0 ? "setup" : OpName(op_); }

  // ---- model helpers -----------------------------------------------------
  size_t LimitBytes() const {
    size_t limit = size_t(double(capacity_) * fraction_);
    if (limit_request_ != 0) limit = std::min(limit, limit_request_);
    return AlignDown(limit, page_);
  }
  // A pool being allocated to, or begun and not released, keeps its pages.
  bool PoolsHoldPages() const {
    for (int id = 0; id < kMaxPools; ++id) {
      if (begun_[id] && !pools_[id].released) return true;
    }
    return false;
  }
  bool Capturing() const {
    for (const PoolModel& p : pools_) {
      if (p.capturing) return true;
    }
    return false;
  }

  // One word per 4 KiB (so a page mapped at the wrong place shows) and the
  // last 8 bytes; stride words that overlap the tail word are not checked.
  void WritePattern(uintptr_t addr, const LiveBlock& b) {
    char* p = reinterpret_cast<char*>(addr);
    for (size_t off = 0; off < b.size; off += 4096) {
      uint64_t v = Mix(b.seed + off);
      memcpy(p + off, &v, std::min<size_t>(8, b.size - off));
    }
    if (b.size >= 16) {
      uint64_t v = Mix(b.seed ^ 0xabcdefull);
      memcpy(p + b.size - 8, &v, 8);
    }
  }
  void CheckPattern(uintptr_t addr, const LiveBlock& b) {
    const char* p = reinterpret_cast<const char*>(addr);
    for (size_t off = 0; off < b.size; off += 4096) {
      const size_t n = std::min<size_t>(8, b.size - off);
      if (b.size >= 16 && off + 8 > b.size - 8) continue;
      uint64_t want = Mix(b.seed + off);
      if (memcmp(p + off, &want, n) != 0) {
        Fail("data of the live block at 0x%zx (%zu B) changed at offset %zu",
             size_t(addr), b.size, off);
      }
    }
    if (b.size >= 16) {
      uint64_t want = Mix(b.seed ^ 0xabcdefull);
      if (memcmp(p + b.size - 8, &want, 8) != 0) {
        Fail("tail of the live block at 0x%zx (%zu B) changed", size_t(addr),
             b.size);
      }
    }
  }
  void VerifyAll() {
    for (const auto& [addr, b] : live_) CheckPattern(addr, b);
  }

  // Pages touched by allocated or pending blocks, over all arenas.
  size_t TouchedPages() const {
    size_t pages = 0;
    for (const ArenaView& arena : a_->Arenas()) {
      std::vector<bool> touched(arena.va_size / arena.page_size, false);
      for (const BlockView& b : arena.blocks) {
        if (b.state == BlockState::kFree) continue;
        size_t first = (b.addr - arena.base) / arena.page_size;
        size_t end = (b.addr + b.size - arena.base + arena.page_size - 1) /
                     arena.page_size;
        for (size_t p = first; p < end; ++p) touched[p] = true;
      }
      for (bool t : touched) pages += t;
    }
    return pages;
  }

  void AddLive(uintptr_t addr, LiveBlock b) {
    auto next = live_.lower_bound(addr);
    if (next != live_.end() && next->first < addr + b.rounded) {
      Fail("new block 0x%zx+%zu overlaps the live block at 0x%zx", size_t(addr),
           b.rounded, size_t(next->first));
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.rounded > addr) {
        Fail("new block 0x%zx overlaps the live block at 0x%zx+%zu",
             size_t(addr), size_t(prev->first), prev->second.rounded);
      }
    }
    live_.emplace(addr, b);
    order_.push_back(addr);
    allocated_ += b.rounded;
    requested_ += b.size;
    peak_allocated_ = std::max(peak_allocated_, allocated_);
    freed_.erase(std::remove(freed_.begin(), freed_.end(), addr), freed_.end());
  }
  void RemoveLive(size_t index) {
    uintptr_t addr = order_[index];
    const LiveBlock& b = live_.at(addr);
    allocated_ -= b.rounded;
    requested_ -= b.size;
    live_.erase(addr);
    order_[index] = order_.back();
    order_.pop_back();
    freed_.push_back(addr);
    if (freed_.size() > 64) freed_.erase(freed_.begin());
  }

  // ---- operations --------------------------------------------------------
  size_t PickSize(uint8_t cls, uint16_t v) {
    switch (cls % 8) {
      case 0:
        return 1 + v % 512;
      case 1:
        return 1 + v % page_;
      case 2:
        return page_ - 256 + v % 512;
      case 3:
        return page_ + v % (capacity_ / 2);
      case 4:
        return 1 + size_t(v) * capacity_ / 65536;
      case 5:
        return capacity_ + 1 + v * (capacity_ / 1024);
      case 6:
        return 0;
      default: {
        const size_t absurd[] = {SIZE_MAX,           SIZE_MAX - 511,
                                 SIZE_MAX / 2 + 1,   size_t{1} << 40,
                                 LimitBytes(),       LimitBytes() + 1,
                                 kSmallRequestLimit, kSmallRequestLimit + 1};
        return absurd[v % 8];
      }
    }
  }

  // One Malloc with every check; returns whether it succeeded.
  bool Alloc(size_t size, StreamHandle stream) {
    const bool check_rule = !PoolsHoldPages();
    const size_t touched = check_rule ? TouchedPages() : 0;
    const int64_t faults_before = FaultsInjected();
    absl::StatusOr<void*> p = a_->Malloc(size, stream);
    const bool faulted = FaultsInjected() != faults_before;
    Trace("Malloc(%zu, stream 0x%zx) -> %s%s", size, size_t(stream),
          p.ok()
              ? absl::StrCat(absl::Hex(reinterpret_cast<uintptr_t>(*p))).c_str()
              : Str(p.status()).c_str(),
          faulted ? " (fault injected)" : "");
    if (size == 0) {
      if (!p.ok() || *p != nullptr) Fail("Malloc(0) must return nullptr");
      return true;
    }
    if (p.ok()) {
      if (*p == nullptr) Fail("Malloc(%zu) returned nullptr", size);
      uintptr_t addr = reinterpret_cast<uintptr_t>(*p);
      if (addr % kMinBlockSize != 0)
        Fail("0x%zx is not 512-aligned", size_t(addr));
      if (size > LimitBytes()) {
        Fail("Malloc(%zu) succeeded above the limit %zu", size, LimitBytes());
      }
      if (a_->AllocationSize(*p) != size) {
        Fail("AllocationSize = %zu, requested %zu", a_->AllocationSize(*p),
             size);
      }
      LiveBlock b{size, rounding_.Round(size), Mix(++seed_), stream};
      AddLive(addr, b);
      WritePattern(addr, b);
      return true;
    }
    if (absl::IsResourceExhausted(p.status())) {
      ++ooms_;
      if (a_->last_oom().requested_bytes != size) {
        Fail("last_oom().requested_bytes %zu != %zu",
             a_->last_oom().requested_bytes, size);
      }
    } else if (!faulted) {
      Fail("Malloc(%zu) failed with %s without an injected fault", size,
           Str(p.status()).c_str());
    }
    if (check_rule && !faulted) {
      const size_t limit_pages = LimitBytes() / page_;
      if (size <= LimitBytes()) {
        const size_t rounded = rounding_.Round(size);
        const size_t need = (rounded + page_ - 1) / page_ + 1;
        if (touched + need <= limit_pages) {
          Fail(
              "OOM for %zu B (%zu rounded) on stream 0x%zx with %zu of %zu "
              "pages touched by live blocks: %s",
              size, rounded, size_t(stream), touched, limit_pages,
              Str(p.status()).c_str());
        }
      }
    }
    return false;
  }

  uintptr_t BadPointer(uint8_t kind, uint16_t v) {
    static char foreign[64];
    switch (kind % 5) {
      case 0:
        return reinterpret_cast<uintptr_t>(&foreign[v % 64]);
      case 1:  // interior pointer of a live block
        if (!order_.empty()) {
          uintptr_t addr = order_[v % order_.size()];
          return addr + 1 + v % std::max<size_t>(live_.at(addr).rounded - 1, 1);
        }
        return 0x1000;
      case 2:  // double free
        if (!freed_.empty()) return freed_[v % freed_.size()];
        return 0x2000;
      case 3:  // near a live block, any offset
        if (!order_.empty()) return order_[v % order_.size()] + v * 512;
        return 0x3000;
      default:
        return uintptr_t(Mix(v)) & ~uintptr_t{511};
    }
  }

  void Do(Op op, ByteReader& in) {
    switch (op) {
      case Op::kAlloc: {
        StreamHandle stream = StreamAt(in.U8() % kNumStreams);
        uint8_t cls = in.U8();
        Alloc(PickSize(cls, in.U16()), stream);
        break;
      }
      case Op::kAllocBurst: {
        StreamHandle stream = StreamAt(in.U8() % kNumStreams);
        int n = 2 + in.U8() % 15;
        const uint8_t cls = in.U8() % 5;
        size_t size = PickSize(cls, in.U16());
        for (int i = 0; i < n; ++i) {
          if (!Alloc(size, stream)) break;
        }
        break;
      }
      case Op::kFree: {
        uint16_t v = in.U16();
        if (order_.empty()) break;
        FreeLive(v % order_.size());
        break;
      }
      case Op::kFreeEveryOther: {
        uint8_t start = in.U8() % 2;
        std::vector<uintptr_t> victims;
        size_t i = 0;
        for (const auto& [addr, b] : live_) {
          if (i++ % 2 == start) victims.push_back(addr);
        }
        for (uintptr_t addr : victims) {
          FreeLive(size_t(std::find(order_.begin(), order_.end(), addr) -
                          order_.begin()));
        }
        break;
      }
      case Op::kFreeBad: {
        uint8_t kind = in.U8();
        uint16_t v = in.U16();
        if (kind % 6 == 5) {
          if (!a_->Free(nullptr).ok()) Fail("Free(nullptr) must be OK");
          break;
        }
        uintptr_t addr = BadPointer(kind, v);
        if (addr == 0 || live_.count(addr)) break;  // not a bad pointer
        absl::Status s = a_->Free(reinterpret_cast<void*>(addr));
        Trace("bad Free(%zx) -> %s", size_t(addr), Str(s).c_str());
        ++invalid_frees_;
        if (!absl::IsInvalidArgument(s)) {
          Fail("Free(0x%zx) of a bad pointer: %s", size_t(addr),
               Str(s).c_str());
        }
        break;
      }
      case Op::kRecordStream: {
        uint16_t v = in.U16();
        StreamHandle stream = StreamAt(in.U8() % kNumStreams);
        if (order_.empty()) break;
        void* p = reinterpret_cast<void*>(order_[v % order_.size()]);
        Trace("RecordStream(%p, 0x%zx)", p, size_t(stream));
        if (absl::Status s = a_->RecordStream(p, stream); !s.ok()) {
          Fail("RecordStream of a live block: %s", Str(s).c_str());
        }
        break;
      }
      case Op::kRecordStreamBad: {
        uint8_t kind = in.U8();
        uint16_t v = in.U16();
        uintptr_t addr = BadPointer(kind, v);
        if (addr == 0 || live_.count(addr)) break;
        absl::Status s = a_->RecordStream(reinterpret_cast<void*>(addr),
                                          StreamAt(v % kNumStreams));
        if (!absl::IsInvalidArgument(s)) {
          Fail("RecordStream(0x%zx) of a bad pointer: %s", size_t(addr),
               Str(s).c_str());
        }
        break;
      }
      case Op::kCompleteEvents:
        Trace("CompleteAll");
        events_->inner().CompleteAll();
        break;
      case Op::kEmptyCache: {
        const int64_t faults_before = FaultsInjected();
        absl::Status s = a_->EmptyCache();
        const bool faulted = FaultsInjected() != faults_before;
        Trace("EmptyCache -> %s%s", Str(s).c_str(),
              faulted ? " (fault injected)" : "");
        if (!s.ok() && !faulted) Fail("EmptyCache: %s", Str(s).c_str());
        if (s.ok() && !faulted && !Capturing() && !PoolsHoldPages()) {
          DeviceStats st = a_->GetStats();
          size_t touched = TouchedPages();
          if (size_t(st.reserved_bytes.pool[kPoolAll].current) !=
              touched * page_) {
            Fail(
                "after EmptyCache %lld B are mapped but live blocks touch "
                "only %zu pages",
                (long long)st.reserved_bytes.pool[kPoolAll].current, touched);
          }
          if (st.idle_page_bytes.current != 0) {
            Fail("after EmptyCache %lld B of idle pages remain",
                 (long long)st.idle_page_bytes.current);
          }
          size_t backend_used = capacity_ - inner_->MemoryInfo().free_bytes;
          if (backend_used != touched * page_) {
            Fail(
                "after EmptyCache the backend holds %zu B for %zu mapped "
                "pages",
                backend_used, touched);
          }
        }
        break;
      }
      case Op::kSetLimit: {
        uint16_t v = in.U16();
        size_t bytes;
        switch (v % 4) {
          case 0:
            bytes = 0;
            break;
          case 1:
            bytes = ((v >> 2) % (capacity_ / page_ + 2)) * page_;
            break;
          case 2:
            bytes = size_t(v) * 97;
            break;
          default:
            bytes = capacity_ * 2;
            break;
        }
        Trace("SetMemoryLimit(%zu)", bytes);
        if (!a_->SetMemoryLimit(bytes).ok()) Fail("SetMemoryLimit failed");
        limit_request_ = bytes;
        break;
      }
      case Op::kSetFraction: {
        uint8_t v = in.U8();
        double f = v == 255 ? std::nan("") : double(v) / 128.0;
        absl::Status s = a_->SetMemoryFraction(f);
        Trace("SetMemoryFraction(%g) -> %s", f, Str(s).c_str());
        bool valid = f > 0.0 && f <= 1.0;
        if (valid != s.ok()) {
          Fail("SetMemoryFraction(%g): %s", f, Str(s).c_str());
        }
        if (valid) fraction_ = f;
        break;
      }
      case Op::kBeginPool: {
        int id = in.U8() % kMaxPools;
        uint16_t mask = in.U16();
        PoolModel& pm = pools_[id];
        Trace("BeginAllocateToPool(%d, mask %x)", id, mask);
        absl::Status s = a_->BeginAllocateToPool(
            {1, uint64_t(id)}, [mask](StreamHandle stream) {
              size_t i = stream / 0x1000;
              return i < kNumStreams && (mask >> i) & 1;
            });
        if (pm.capturing) {
          if (!absl::IsFailedPrecondition(s)) {
            Fail("BeginAllocateToPool of a capturing pool: %s", Str(s).c_str());
          }
          break;
        }
        if (!s.ok()) Fail("BeginAllocateToPool: %s", Str(s).c_str());
        pm.capturing = true;
        pm.released = false;
        pm.mask = mask;
        begun_[id] = true;
        SetCapturing(mask, +1);
        break;
      }
      case Op::kEndPool: {
        int id = in.U8() % kMaxPools;
        absl::Status s = a_->EndAllocateToPool({1, uint64_t(id)});
        Trace("EndAllocateToPool(%d) -> %s", id, Str(s).c_str());
        PoolModel& pm = pools_[id];
        if (!pm.capturing) {
          if (!absl::IsFailedPrecondition(s)) {
            Fail("EndAllocateToPool of a pool not capturing: %s",
                 Str(s).c_str());
          }
          break;
        }
        if (!s.ok()) Fail("EndAllocateToPool: %s", Str(s).c_str());
        pm.capturing = false;
        SetCapturing(pm.mask, -1);
        break;
      }
      case Op::kReleasePool: {
        int id = in.U8() % kMaxPools;
        absl::Status s = a_->ReleasePool({1, uint64_t(id)});
        Trace("ReleasePool(%d) -> %s", id, Str(s).c_str());
        if (!begun_[id]) {
          if (!absl::IsInvalidArgument(s)) {
            Fail("ReleasePool of an unknown pool: %s", Str(s).c_str());
          }
          break;
        }
        ReleasePoolModel(id, s);
        break;
      }
      case Op::kInjectFault: {
        const int which = in.U8() % (int(BackendOp::kCount) + 3);
        uint8_t when = in.U8(), count = in.U8(), kind = in.U8();
        if (!faults_enabled_) break;
        if (which >= int(BackendOp::kCount)) {
          auto call = FaultyEvents::Call(which - int(BackendOp::kCount));
          const int n = count % 5 == 0 ? 1000 : count % 5;
          events_->FailNext(call, n);
          Trace("inject: event call %d, next %d", int(call), n);
          break;
        }
        const BackendOp bop = BackendOp(which);
        const int64_t first = faults_->Calls(bop) + 1 + when % 8;
        const int64_t n = count % 5 == 0 ? -1 : count % 5;
        absl::Status status =
            kind % 3 == 0   ? absl::InternalError("injected fault")
            : kind % 3 == 1 ? absl::ResourceExhaustedError("injected OOM")
                            : absl::UnavailableError("injected: device lost");
        faults_->FailCalls(bop, first, n, status);
        Trace("inject: backend op %d, calls from %lld, count %lld: %s",
              int(bop), (long long)first, (long long)n, Str(status).c_str());
        break;
      }
      case Op::kClearFaults:
        Trace("ClearFaults");
        faults_->ClearFaults();
        events_->ClearFaults();
        break;
      case Op::kStats: {
        uint8_t what = in.U8();
        if (what >= 252) {
          a_->SetTraceEntries(what == 252 ? 0 : size_t{1} << (what - 250));
        } else if (what % 4 == 0) {
          a_->ResetPeakStats();
          peak_allocated_ = allocated_;
        } else if (what % 4 == 1) {
          a_->ResetAccumulatedStats();
          ooms_ = 0;
        } else if (what % 4 == 2) {
          std::string json = SnapshotToJson(0, a_->Arenas(), a_->Trace());
          if (json.empty()) Fail("empty snapshot");
        } else {
          std::string json = StatsToJson(a_->GetStats());
          if (json.find("allocated_bytes.all.current") == std::string::npos) {
            Fail("stats JSON lacks allocated_bytes.all.current");
          }
        }
        break;
      }
      case Op::kVerifyAll:
        VerifyAll();
        break;
      case Op::kRetireStream: {
        const int i = in.U8() % kNumStreams;
        const int64_t faults_before = FaultsInjected();
        absl::Status s = a_->RetireStream(StreamAt(i));
        const bool faulted = FaultsInjected() != faults_before;
        Trace("RetireStream(0x%zx) -> %s", size_t(StreamAt(i)), Str(s).c_str());
        if (capture_count_[i] > 0) {
          if (!absl::IsFailedPrecondition(s)) {
            Fail("RetireStream of a capturing stream: %s", Str(s).c_str());
          }
        } else if (!s.ok() && !faulted) {
          Fail("RetireStream: %s", Str(s).c_str());
        } else if (s.ok() && !faulted && !PoolsHoldPages()) {
          // Its arenas that hold no allocated or pending block are released.
          for (const ArenaView& arena : a_->Arenas()) {
            if (arena.stream != StreamAt(i)) continue;
            bool used = false;
            for (const BlockView& b : arena.blocks) {
              used |= b.state != BlockState::kFree;
            }
            if (!used) Fail("an empty arena of a retired stream was kept");
          }
        }
        break;
      }
    }
  }

  int64_t FaultsInjected() const {
    return faults_->FaultsInjected() + events_->FaultsInjected();
  }

  // Frees a live block. Free may fail only because an injected event fault
  // stopped it, and then nothing changes: the block is still live.
  void FreeLive(size_t index) {
    uintptr_t addr = order_[index];
    const LiveBlock& b = live_.at(addr);
    CheckPattern(addr, b);
    const int64_t faults_before = FaultsInjected();
    absl::Status s = a_->Free(reinterpret_cast<void*>(addr));
    const bool faulted = FaultsInjected() != faults_before;
    Trace("Free(%zx) -> %s%s", size_t(addr), Str(s).c_str(),
          faulted ? " (fault injected)" : "");
    if (s.ok()) {
      RemoveLive(index);
      return;
    }
    if (!faulted || absl::IsInvalidArgument(s)) {
      Fail("Free of the live block 0x%zx: %s", size_t(addr), Str(s).c_str());
    }
    if (a_->AllocationSize(reinterpret_cast<void*>(addr)) != b.size) {
      Fail("Free of 0x%zx failed (%s) but the block is no longer live",
           size_t(addr), Str(s).c_str());
    }
  }

  void SetCapturing(uint16_t mask, int delta) {
    for (int i = 0; i < kNumStreams; ++i) {
      if (!((mask >> i) & 1)) continue;
      capture_count_[i] += delta;
      events_->inner().SetCapturing(StreamAt(i), capture_count_[i] > 0);
    }
  }

  void ReleasePoolModel(int id, const absl::Status& s) {
    if (!s.ok()) Fail("ReleasePool: %s", Str(s).c_str());
    PoolModel& pm = pools_[id];
    if (pm.capturing) {
      pm.capturing = false;
      SetCapturing(pm.mask, -1);
    }
    pm.released = true;
  }

  // ---- checks ------------------------------------------------------------
  void CheckState() {
    if (absl::Status s = a_->CheckInvariants(); !s.ok()) {
      Fail("CheckInvariants: %s", Str(s).c_str());
    }
    DeviceStats st = a_->GetStats();
    const Stat& alloc = st.allocated_bytes.pool[kPoolAll];
    if (size_t(alloc.current) != allocated_) {
      Fail("allocated_bytes.all.current %lld != model %zu",
           (long long)alloc.current, allocated_);
    }
    if (size_t(alloc.peak) != peak_allocated_) {
      Fail("allocated_bytes.all.peak %lld != model %zu", (long long)alloc.peak,
           peak_allocated_);
    }
    if (size_t(st.requested_bytes.pool[kPoolAll].current) != requested_) {
      Fail("requested_bytes.all.current %lld != model %zu",
           (long long)st.requested_bytes.pool[kPoolAll].current, requested_);
    }
    if (size_t(st.allocation.pool[kPoolAll].current) != live_.size()) {
      Fail("allocation.all.current %lld != %zu live blocks",
           (long long)st.allocation.pool[kPoolAll].current, live_.size());
    }
    if (st.num_ooms != ooms_) {
      Fail("num_ooms %lld != model %lld", (long long)st.num_ooms,
           (long long)ooms_);
    }
    if (st.invalid_frees != invalid_frees_) {
      Fail("invalid_frees %lld != model %lld", (long long)st.invalid_frees,
           (long long)invalid_frees_);
    }
    if (a_->memory_limit() != LimitBytes()) {
      Fail("memory_limit() %zu != model %zu", a_->memory_limit(), LimitBytes());
    }
    if (size_t(st.reserved_bytes.pool[kPoolAll].current) > capacity_) {
      Fail("reserved_bytes %lld exceed the capacity",
           (long long)st.reserved_bytes.pool[kPoolAll].current);
    }
    // Data can only be hurt when pages move: check every live block then.
    if (st.pages_unmapped != last_unmapped_) {
      last_unmapped_ = st.pages_unmapped;
      VerifyAll();
    }
  }

  void Finish() {
    step_ = -1;
    faults_->ClearFaults();
    events_->ClearFaults();
    for (int id = 0; id < kMaxPools; ++id) {
      if (begun_[id]) ReleasePoolModel(id, a_->ReleasePool({1, uint64_t(id)}));
    }
    events_->inner().CompleteAll();
    while (!order_.empty()) FreeLive(order_.size() - 1);
    if (absl::Status s = a_->EmptyCache(); !s.ok()) {
      Fail("final EmptyCache: %s", Str(s).c_str());
    }
    CheckState();
    DeviceStats st = a_->GetStats();
    if (st.reserved_bytes.pool[kPoolAll].current != 0 ||
        st.idle_page_bytes.current != 0 ||
        st.active_bytes.pool[kPoolAll].current != 0) {
      Fail(
          "after freeing everything and EmptyCache: reserved %lld, idle "
          "%lld, active %lld (want 0)",
          (long long)st.reserved_bytes.pool[kPoolAll].current,
          (long long)st.idle_page_bytes.current,
          (long long)st.active_bytes.pool[kPoolAll].current);
    }
    if (inner_->MemoryInfo().free_bytes != capacity_) {
      Fail(
          "after freeing everything and EmptyCache the backend has %zu of "
          "%zu B free (pages leaked)",
          inner_->MemoryInfo().free_bytes, capacity_);
    }
    // Nothing is live and every pool is released: retiring every stream
    // releases every arena (and its VA).
    for (int i = 0; i < kNumStreams; ++i) {
      if (absl::Status s = a_->RetireStream(StreamAt(i)); !s.ok()) {
        Fail("final RetireStream: %s", Str(s).c_str());
      }
    }
    CheckState();
    if (!a_->Arenas().empty() || a_->GetStats().num_arenas != 0) {
      Fail("%zu arena(s) left after retiring every stream",
           a_->Arenas().size());
    }
  }

  const size_t page_;
  const size_t capacity_;
  const bool faults_enabled_;
  const SizeRounding rounding_;
  PhysicalBackend* inner_ = nullptr;
  FaultInjectingBackend* faults_ = nullptr;
  FaultyEvents* events_ = nullptr;
  std::unique_ptr<DeviceAllocator> a_;
  const bool trace_ = getenv("FRAGFREE_FUZZ_TRACE") != nullptr;

  int step_ = -1;
  Op op_ = Op::kAlloc;
  std::map<uintptr_t, LiveBlock> live_;
  std::vector<uintptr_t> order_;  // live addresses, for picking by index
  std::vector<uintptr_t> freed_;  // recently freed (double-free candidates)
  size_t allocated_ = 0, requested_ = 0, peak_allocated_ = 0;
  int64_t ooms_ = 0, invalid_frees_ = 0, last_unmapped_ = 0;
  uint64_t seed_ = 0;
  size_t limit_request_ = 0;
  double fraction_ = 1.0;
  PoolModel pools_[kMaxPools];
  bool begun_[kMaxPools] = {};
  int capture_count_[kNumStreams] = {};
};

}  // namespace
}  // namespace fragfree::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fragfree;
  fuzz::ByteReader in(data, size);
  const size_t page = size_t{4096} << (in.U8() % 5);
  const size_t pages = 4 + in.U8() % 61;
  const uint8_t flags = in.U8();
  std::string conf =
      absl::StrCat("roundup_power2_divisions:",
                   (flags & 12) == 0 ? 0 : 1 << ((flags >> 2) & 3),
                   ",va_factor:", (flags & 16) ? 1 : 2);
  if (!(flags & 64)) {
    absl::StrAppend(&conf,
                    ",reclaim_before_grow:", (flags & 2) ? "True" : "False");
  }
  if (flags & 32) absl::StrAppend(&conf, ",round_buckets:[1536,8K,96K]");
  if (flags & 128) absl::StrAppend(&conf, ",trace_entries:64");
  absl::StatusOr<Options> options = Options::Parse(conf);
  if (!options.ok()) {
    fprintf(stderr, "engine_fuzz: bad conf %s: %s\n", conf.c_str(),
            options.status().ToString().c_str());
    abort();
  }
  options->backend = BackendKind::kHost;
  fuzz::Session session(page, pages, *options, flags & 1);
  session.Run(in);
  return 0;
}
