// fuzz_session: the operations of engine_fuzz and the driver of one input
// (fuzz_session.h): each operation's calls into the engine, the status codes
// they must return, and the updates of the model.
// Thread-safety: single-threaded; each input builds its own allocator.
#include "tests/fuzz/fuzz_session.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "allocator/blocks/size_classes.h"
#include "allocator/device_allocator.h"
#include "allocator/obs/snapshot.h"
#include "allocator/obs/stats.h"
#include "allocator/phys/fault_injecting_backend.h"
#include "allocator/phys/host_backend.h"
#include "allocator/stream/event_source.h"
#include "allocator/stream/host_event_source.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_model.h"

namespace fragfree::fuzz {
namespace {

std::string Str(const absl::Status& s) { return s.ToString(); }

// ManualEventSource with injectable failures of Record, Query and Synchronize
// (a CUDA event call that fails: a sticky device error).
class FaultyEvents final : public EventSource {
 public:
  enum Call { kRecord, kQuery, kSynchronize, kNumCalls };
  static_assert(kNumCalls == kNumEventCalls);

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
  explicit Session(const Device& device)
      : report_(device.page, device.page * device.pages),
        model_(device.page, device.page * device.pages, device.options,
               report_),
        faults_enabled_(device.faults) {
    auto host = HostBackend::Create(model_.capacity(), device.granularity);
    if (!host.ok()) {
      report_.Fail("HostBackend::Create: %s", Str(host.status()).c_str());
    }
    inner_ = host->get();
    auto faulty = std::make_unique<FaultInjectingBackend>(std::move(*host));
    faults_ = faulty.get();
    auto events = std::make_unique<FaultyEvents>();
    events_ = events.get();
    auto a = DeviceAllocator::Create(0, device.options, std::move(faulty),
                                     std::move(events));
    if (!a.ok()) {
      report_.Fail("DeviceAllocator::Create: %s", Str(a.status()).c_str());
    }
    a_ = std::move(*a);
  }

  void Run(ByteReader& in) {
    model_.CheckState(*a_);
    for (int step = 0; step < kMaxOps && !in.empty(); ++step) {
      const Operation o = DecodeOperation(in);
      report_.Begin(step, o.op);
      Do(o);
      model_.CheckState(*a_);
    }
    Finish();
  }

 private:
  size_t PickSize(uint8_t cls, uint16_t v) const {
    const size_t page = model_.page(), capacity = model_.capacity();
    switch (cls % 8) {
      case 0:
        return 1 + v % 512;
      case 1:
        return 1 + v % page;
      case 2:
        return page - 256 + v % 512;
      case 3:
        return page + v % (capacity / 2);
      case 4:
        return 1 + size_t(v) * capacity / 65536;
      case 5:
        return capacity + 1 + v * (capacity / 1024);
      case 6:
        return 0;
      default: {
        const size_t limit = model_.LimitBytes();
        const size_t absurd[] = {SIZE_MAX,
                                 SIZE_MAX - 511,
                                 SIZE_MAX / 2 + 1,
                                 size_t{1} << 40,
                                 limit,
                                 limit + 1,
                                 kSmallRequestLimit,
                                 kSmallRequestLimit + 1};
        return absurd[v % 8];
      }
    }
  }

  int64_t FaultsInjected() const {
    return faults_->FaultsInjected() + events_->FaultsInjected();
  }

  // One Malloc with every check; returns whether it succeeded.
  bool Alloc(size_t size, StreamHandle stream) {
    const bool check_rule = !model_.PoolsHoldPages();
    const size_t touched = check_rule ? TouchedPages(*a_, model_.page()) : 0;
    const int64_t faults_before = FaultsInjected();
    absl::StatusOr<void*> p = a_->Malloc(size, stream);
    const bool faulted = FaultsInjected() != faults_before;
    report_.Trace(
        "Malloc(%zu, stream 0x%zx) -> %s%s", size, size_t(stream),
        p.ok()
            ? absl::StrCat(absl::Hex(reinterpret_cast<uintptr_t>(*p))).c_str()
            : Str(p.status()).c_str(),
        faulted ? " (fault injected)" : "");
    if (size == 0) {
      if (!p.ok() || *p != nullptr)
        report_.Fail("Malloc(0) must return nullptr");
      return true;
    }
    if (p.ok()) {
      if (*p == nullptr) report_.Fail("Malloc(%zu) returned nullptr", size);
      uintptr_t addr = reinterpret_cast<uintptr_t>(*p);
      if (addr % kMinBlockSize != 0) {
        report_.Fail("0x%zx is not 512-aligned", size_t(addr));
      }
      if (size > model_.LimitBytes()) {
        report_.Fail("Malloc(%zu) succeeded above the limit %zu", size,
                     model_.LimitBytes());
      }
      if (a_->AllocationSize(*p) != size) {
        report_.Fail("AllocationSize = %zu, requested %zu",
                     a_->AllocationSize(*p), size);
      }
      model_.AddLive(addr, size, stream);
      return true;
    }
    if (absl::IsResourceExhausted(p.status())) {
      model_.CountOom();
      if (a_->last_oom().requested_bytes != size) {
        report_.Fail("last_oom().requested_bytes %zu != %zu",
                     a_->last_oom().requested_bytes, size);
      }
    } else if (!faulted) {
      report_.Fail("Malloc(%zu) failed with %s without an injected fault", size,
                   Str(p.status()).c_str());
    }
    if (check_rule && !faulted) {
      model_.CheckOomJustified(size, stream, touched, p.status());
    }
    return false;
  }

  // Frees a live block. Free may fail only because an injected event fault
  // stopped it, and then nothing changes: the block is still live.
  void FreeLive(size_t index) {
    uintptr_t addr = model_.LiveAt(index);
    const LiveBlock& b = model_.Block(addr);
    model_.CheckPattern(addr, b);
    const int64_t faults_before = FaultsInjected();
    absl::Status s = a_->Free(reinterpret_cast<void*>(addr));
    const bool faulted = FaultsInjected() != faults_before;
    report_.Trace("Free(%zx) -> %s%s", size_t(addr), Str(s).c_str(),
                  faulted ? " (fault injected)" : "");
    if (s.ok()) {
      model_.RemoveLive(index);
      return;
    }
    if (!faulted || absl::IsInvalidArgument(s)) {
      report_.Fail("Free of the live block 0x%zx: %s", size_t(addr),
                   Str(s).c_str());
    }
    if (a_->AllocationSize(reinterpret_cast<void*>(addr)) != b.size) {
      report_.Fail("Free of 0x%zx failed (%s) but the block is no longer live",
                   size_t(addr), Str(s).c_str());
    }
  }

  void Do(const Operation& o) {
    switch (o.op) {
      case Op::kAlloc:
        Alloc(PickSize(o.size_class, o.size_arg), StreamAt(o.stream));
        break;
      case Op::kAllocBurst: {
        const size_t size = PickSize(o.size_class, o.size_arg);
        for (int i = 0; i < o.count; ++i) {
          if (!Alloc(size, StreamAt(o.stream))) break;
        }
        break;
      }
      case Op::kFree:
        if (model_.num_live() != 0) FreeLive(o.pick % model_.num_live());
        break;
      case Op::kFreeEveryOther:
        for (uintptr_t addr : model_.EveryOther(o.parity)) {
          FreeLive(model_.IndexOf(addr));
        }
        break;
      case Op::kFreeBad:
        FreeBad(o);
        break;
      case Op::kRecordStream: {
        if (model_.num_live() == 0) break;
        void* p =
            reinterpret_cast<void*>(model_.LiveAt(o.pick % model_.num_live()));
        StreamHandle stream = StreamAt(o.stream);
        report_.Trace("RecordStream(%p, 0x%zx)", p, size_t(stream));
        if (absl::Status s = a_->RecordStream(p, stream); !s.ok()) {
          report_.Fail("RecordStream of a live block: %s", Str(s).c_str());
        }
        break;
      }
      case Op::kRecordStreamBad: {
        uintptr_t addr = model_.BadPointer(o.bad_kind, o.pick);
        if (addr == 0 || model_.IsLive(addr)) break;
        absl::Status s = a_->RecordStream(reinterpret_cast<void*>(addr),
                                          StreamAt(o.pick % kNumStreams));
        if (!absl::IsInvalidArgument(s)) {
          report_.Fail("RecordStream(0x%zx) of a bad pointer: %s", size_t(addr),
                       Str(s).c_str());
        }
        break;
      }
      case Op::kCompleteEvents:
        report_.Trace("CompleteAll");
        events_->inner().CompleteAll();
        break;
      case Op::kEmptyCache:
        EmptyCache();
        break;
      case Op::kSetLimit:
        SetLimit(o.limit_arg);
        break;
      case Op::kSetFraction: {
        absl::Status s = a_->SetMemoryFraction(o.fraction);
        report_.Trace("SetMemoryFraction(%g) -> %s", o.fraction,
                      Str(s).c_str());
        bool valid = o.fraction > 0.0 && o.fraction <= 1.0;
        if (valid != s.ok()) {
          report_.Fail("SetMemoryFraction(%g): %s", o.fraction, Str(s).c_str());
        }
        if (valid) model_.set_fraction(o.fraction);
        break;
      }
      case Op::kBeginPool:
        BeginPool(o.pool, o.stream_mask);
        break;
      case Op::kEndPool:
        EndPool(o.pool);
        break;
      case Op::kReleasePool: {
        absl::Status s = a_->ReleasePool({1, uint64_t(o.pool)});
        report_.Trace("ReleasePool(%d) -> %s", o.pool, Str(s).c_str());
        if (!model_.begun(o.pool)) {
          if (!absl::IsInvalidArgument(s)) {
            report_.Fail("ReleasePool of an unknown pool: %s", Str(s).c_str());
          }
          break;
        }
        ReleasePoolModel(o.pool, s);
        break;
      }
      case Op::kInjectFault:
        InjectFault(o);
        break;
      case Op::kClearFaults:
        report_.Trace("ClearFaults");
        faults_->ClearFaults();
        events_->ClearFaults();
        break;
      case Op::kStats:
        Stats(o.stats_what);
        break;
      case Op::kVerifyAll:
        model_.VerifyAll();
        break;
      case Op::kRetireStream:
        RetireStream(o.stream);
        break;
    }
  }

  void FreeBad(const Operation& o) {
    if (o.bad_kind % 6 == 5) {
      if (!a_->Free(nullptr).ok()) report_.Fail("Free(nullptr) must be OK");
      return;
    }
    uintptr_t addr = model_.BadPointer(o.bad_kind, o.pick);
    if (addr == 0 || model_.IsLive(addr)) return;  // not a bad pointer
    absl::Status s = a_->Free(reinterpret_cast<void*>(addr));
    report_.Trace("bad Free(%zx) -> %s", size_t(addr), Str(s).c_str());
    model_.CountInvalidFree();
    if (!absl::IsInvalidArgument(s)) {
      report_.Fail("Free(0x%zx) of a bad pointer: %s", size_t(addr),
                   Str(s).c_str());
    }
  }

  void EmptyCache() {
    const int64_t faults_before = FaultsInjected();
    absl::Status s = a_->EmptyCache();
    const bool faulted = FaultsInjected() != faults_before;
    report_.Trace("EmptyCache -> %s%s", Str(s).c_str(),
                  faulted ? " (fault injected)" : "");
    if (!s.ok() && !faulted) report_.Fail("EmptyCache: %s", Str(s).c_str());
    if (s.ok() && !faulted && !model_.Capturing() && !model_.PoolsHoldPages()) {
      model_.CheckAfterEmptyCache(*a_, *inner_);
    }
  }

  // v % 4: no limit, a number of pages (up to capacity + 1), any number of
  // bytes, twice the capacity.
  void SetLimit(uint16_t v) {
    size_t bytes;
    switch (v % 4) {
      case 0:
        bytes = 0;
        break;
      case 1:
        bytes = ((v >> 2) % (model_.capacity() / model_.page() + 2)) *
                model_.page();
        break;
      case 2:
        bytes = size_t(v) * 97;
        break;
      default:
        bytes = model_.capacity() * 2;
        break;
    }
    report_.Trace("SetMemoryLimit(%zu)", bytes);
    if (!a_->SetMemoryLimit(bytes).ok()) report_.Fail("SetMemoryLimit failed");
    model_.set_limit_request(bytes);
  }

  void BeginPool(int id, uint16_t mask) {
    PoolModel& pm = model_.pool(id);
    report_.Trace("BeginAllocateToPool(%d, mask %x)", id, mask);
    absl::Status s =
        a_->BeginAllocateToPool({1, uint64_t(id)}, [mask](StreamHandle stream) {
          size_t i = stream / 0x1000;
          return i < kNumStreams && (mask >> i) & 1;
        });
    if (pm.capturing) {
      if (!absl::IsFailedPrecondition(s)) {
        report_.Fail("BeginAllocateToPool of a capturing pool: %s",
                     Str(s).c_str());
      }
      return;
    }
    if (!s.ok()) report_.Fail("BeginAllocateToPool: %s", Str(s).c_str());
    pm.capturing = true;
    pm.released = false;
    pm.mask = mask;
    model_.set_begun(id);
    SetCapturing(mask, +1);
  }

  void EndPool(int id) {
    absl::Status s = a_->EndAllocateToPool({1, uint64_t(id)});
    report_.Trace("EndAllocateToPool(%d) -> %s", id, Str(s).c_str());
    PoolModel& pm = model_.pool(id);
    if (!pm.capturing) {
      if (!absl::IsFailedPrecondition(s)) {
        report_.Fail("EndAllocateToPool of a pool not capturing: %s",
                     Str(s).c_str());
      }
      return;
    }
    if (!s.ok()) report_.Fail("EndAllocateToPool: %s", Str(s).c_str());
    pm.capturing = false;
    SetCapturing(pm.mask, -1);
  }

  void ReleasePoolModel(int id, const absl::Status& s) {
    if (!s.ok()) report_.Fail("ReleasePool: %s", Str(s).c_str());
    PoolModel& pm = model_.pool(id);
    if (pm.capturing) {
      pm.capturing = false;
      SetCapturing(pm.mask, -1);
    }
    pm.released = true;
  }

  void SetCapturing(uint16_t mask, int delta) {
    for (int i = 0; i < kNumStreams; ++i) {
      if (!((mask >> i) & 1)) continue;
      model_.capture_count(i) += delta;
      events_->inner().SetCapturing(StreamAt(i), model_.capture_count(i) > 0);
    }
  }

  void InjectFault(const Operation& o) {
    if (!faults_enabled_) return;
    if (o.fault_target >= int(BackendOp::kCount)) {
      auto call = FaultyEvents::Call(o.fault_target - int(BackendOp::kCount));
      const int n = o.fault_count % 5 == 0 ? 1000 : o.fault_count % 5;
      events_->FailNext(call, n);
      report_.Trace("inject: event call %d, next %d", int(call), n);
      return;
    }
    const BackendOp bop = BackendOp(o.fault_target);
    const int64_t first = faults_->Calls(bop) + 1 + o.fault_when % 8;
    const int64_t n = o.fault_count % 5 == 0 ? -1 : o.fault_count % 5;
    absl::Status status = o.fault_kind % 3 == 0
                              ? absl::InternalError("injected fault")
                          : o.fault_kind % 3 == 1
                              ? absl::ResourceExhaustedError("injected OOM")
                              : absl::UnavailableError("injected: device lost");
    faults_->FailCalls(bop, first, n, status);
    report_.Trace("inject: backend op %d, calls from %lld, count %lld: %s",
                  int(bop), (long long)first, (long long)n,
                  Str(status).c_str());
  }

  void Stats(uint8_t what) {
    if (what >= 252) {
      a_->SetTraceEntries(what == 252 ? 0 : size_t{1} << (what - 250));
    } else if (what % 4 == 0) {
      a_->ResetPeakStats();
      model_.ResetPeak();
    } else if (what % 4 == 1) {
      a_->ResetAccumulatedStats();
      model_.ResetAccumulated();
    } else if (what % 4 == 2) {
      std::string json = SnapshotToJson(0, a_->Arenas(), a_->Trace());
      if (json.empty()) report_.Fail("empty snapshot");
    } else {
      std::string json = StatsToJson(a_->GetStats());
      if (json.find("allocated_bytes.all.current") == std::string::npos) {
        report_.Fail("stats JSON lacks allocated_bytes.all.current");
      }
    }
  }

  void RetireStream(int i) {
    const int64_t faults_before = FaultsInjected();
    absl::Status s = a_->RetireStream(StreamAt(i));
    const bool faulted = FaultsInjected() != faults_before;
    report_.Trace("RetireStream(0x%zx) -> %s", size_t(StreamAt(i)),
                  Str(s).c_str());
    if (model_.capture_count(i) > 0) {
      if (!absl::IsFailedPrecondition(s)) {
        report_.Fail("RetireStream of a capturing stream: %s", Str(s).c_str());
      }
    } else if (!s.ok() && !faulted) {
      report_.Fail("RetireStream: %s", Str(s).c_str());
    } else if (s.ok() && !faulted && !model_.PoolsHoldPages()) {
      // Its arenas that hold no allocated or pending block are released.
      for (const ArenaView& arena : a_->Arenas()) {
        if (arena.stream != StreamAt(i)) continue;
        bool used = false;
        for (const BlockView& b : arena.blocks) {
          used |= b.state != BlockState::kFree;
        }
        if (!used) report_.Fail("an empty arena of a retired stream was kept");
      }
    }
  }

  // Faults cleared, pools released, events completed, every block freed,
  // EmptyCache: then nothing may be left.
  void Finish() {
    report_.Begin(-1, Op::kAlloc);
    faults_->ClearFaults();
    events_->ClearFaults();
    for (int id = 0; id < kMaxPools; ++id) {
      if (model_.begun(id)) {
        ReleasePoolModel(id, a_->ReleasePool({1, uint64_t(id)}));
      }
    }
    events_->inner().CompleteAll();
    while (model_.num_live() != 0) FreeLive(model_.num_live() - 1);
    if (absl::Status s = a_->EmptyCache(); !s.ok()) {
      report_.Fail("final EmptyCache: %s", Str(s).c_str());
    }
    model_.CheckState(*a_);
    model_.CheckAllReturned(*a_, *inner_);
    // Nothing is live and every pool is released: retiring every stream
    // releases every arena (and its VA).
    for (int i = 0; i < kNumStreams; ++i) {
      if (absl::Status s = a_->RetireStream(StreamAt(i)); !s.ok()) {
        report_.Fail("final RetireStream: %s", Str(s).c_str());
      }
    }
    model_.CheckState(*a_);
    if (!a_->Arenas().empty() || a_->GetStats().num_arenas != 0) {
      report_.Fail("%zu arena(s) left after retiring every stream",
                   a_->Arenas().size());
    }
  }

  Reporter report_;
  Model model_;
  const bool faults_enabled_;
  PhysicalBackend* inner_ = nullptr;
  FaultInjectingBackend* faults_ = nullptr;
  FaultyEvents* events_ = nullptr;
  std::unique_ptr<DeviceAllocator> a_;
};

}  // namespace

void RunInput(const uint8_t* data, size_t size) {
  ByteReader in(data, size);
  const Device device = DecodeDevice(in);
  Session session(device);
  session.Run(in);
}

}  // namespace fragfree::fuzz
